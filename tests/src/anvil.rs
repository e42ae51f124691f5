//! A local anvil node with the TestUSDC token deployed, and the official
//! x402 clients of `tests/js` (`pay.mjs`), for the interop tests.
//!
//! Everything comes from `tests/js/node_modules` (`bash scripts/test-all.sh`
//! installs it; see [`crate::require`]): the pinned `@foundry-rs/anvil`
//! binary and the npm clients. Every process started here is killed when its
//! guard drops, also on panic.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use alloy_network::{EthereumWallet, TransactionBuilder};
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_provider::{DynProvider, Provider, ProviderBuilder};
use alloy_rpc_types_eth::{TransactionReceipt, TransactionRequest};
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{SolCall, SolValue};
use serde_json::Value;

use crate::require;

/// The anvil dev accounts used by the tests (public test keys: never use
/// them anywhere else).
pub mod accounts {
    /// Account 0: deploys the token; the in-process facilitator's gas payer.
    pub const KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
    /// Account 1: the payer.
    pub const KEY_1: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    /// Account 2: the payee.
    pub const KEY_2: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
    /// Account 3.
    pub const KEY_3: &str = "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6";
}

mod sol {
    alloy_sol_types::sol! {
        function mint(address to, uint256 amount) external;
        function balanceOf(address account) external view returns (uint256);
        function approve(address spender, uint256 amount) external returns (bool);
    }
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    require::workspace_root()
}

/// `tests/js` (see [`require::js_dir`]).
pub fn js_dir() -> PathBuf {
    require::js_dir()
}

/// Panics (fails the test) with the fix when `tests/js/node_modules` is
/// missing: [`require::node_tooling`].
#[track_caller]
pub fn require_node_modules() {
    require::node_tooling();
}

/// The address of a private key.
pub fn address_of(key: &str) -> Address {
    key.parse::<PrivateKeySigner>()
        .expect("a valid test key")
        .address()
}

/// A running anvil; killed on drop.
#[derive(Debug)]
pub struct Anvil {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Anvil {
    /// Starts anvil with chain id 84532 on a free port and waits until it
    /// listens. A port found free can be taken by another test before anvil
    /// binds it; anvil then exits, and this tries a fresh port (up to five).
    /// Fails (panics, in one line) if `tests/js/node_modules` is missing:
    /// [`require::anvil`].
    #[track_caller]
    pub fn start() -> Self {
        let binary = require::anvil();
        for _ in 0..5 {
            if let Some(anvil) = Self::try_start(&binary) {
                return anvil;
            }
        }
        panic!("anvil exited on five free ports in a row");
    }

    /// `None` when anvil exited before listening: the port was taken.
    #[track_caller]
    fn try_start(binary: &Path) -> Option<Self> {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(binary)
            .args([
                "--chain-id",
                "84532",
                "--port",
                &port.to_string(),
                "--host",
                "127.0.0.1",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stdout = child.stdout.take().unwrap();
        // The guard exists from here on: a panic below still kills anvil.
        let anvil = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(ready_tx);
            // Keep draining anvil's output so it never blocks on a full pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("Listening on") {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        match ready_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(()) => Some(anvil),
            // Its output ended without "Listening on": anvil exited.
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("anvil did not print \"Listening on\" within 30 s")
            }
        }
    }

    /// A provider signing with `key` (recommended fillers).
    pub async fn provider(&self, key: &str) -> DynProvider {
        let signer: PrivateKeySigner = key.parse().unwrap();
        ProviderBuilder::new()
            .wallet(EthereumWallet::from(signer))
            .connect(&self.url)
            .await
            .unwrap()
            .erased()
    }
}

/// Sends `tx` and waits for its receipt (polling every 50 ms).
pub async fn send(provider: &DynProvider, tx: TransactionRequest) -> TransactionReceipt {
    let hash = *provider.send_transaction(tx).await.unwrap().tx_hash();
    receipt(provider, hash).await
}

/// Waits for a transaction's receipt.
pub async fn receipt(provider: &DynProvider, hash: B256) -> TransactionReceipt {
    for _ in 0..600 {
        if let Some(r) = provider.get_transaction_receipt(hash).await.unwrap() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no receipt for {hash:#x}");
}

/// Deploys TestUSDC(`name`, `version`) from the committed artifact.
pub async fn deploy_test_usdc(deployer: &DynProvider, name: &str, version: &str) -> Address {
    let path = js_dir().join("contracts/TestUSDC.json");
    let artifact: Value = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())),
    )
    .unwrap();
    let bytecode: Bytes = artifact["bytecode"].as_str().unwrap().parse().unwrap();
    let mut code = bytecode.to_vec();
    code.extend((name.to_owned(), version.to_owned()).abi_encode_params());
    let receipt = send(
        deployer,
        TransactionRequest::default().with_deploy_code(Bytes::from(code)),
    )
    .await;
    assert!(receipt.status(), "TestUSDC deployment reverted");
    receipt.contract_address.unwrap()
}

/// Mints `amount` of `token` to `to` (the deployer is the owner).
pub async fn mint(deployer: &DynProvider, token: Address, to: Address, amount: u64) {
    let call = sol::mintCall {
        to,
        amount: U256::from(amount),
    };
    let receipt = send(
        deployer,
        TransactionRequest::default()
            .with_to(token)
            .with_input(Bytes::from(call.abi_encode())),
    )
    .await;
    assert!(receipt.status(), "mint reverted");
}

/// `token.balanceOf(who)` through `eth_call`.
pub async fn balance_of(provider: &DynProvider, token: Address, who: Address) -> U256 {
    let call = sol::balanceOfCall { account: who };
    let out = provider
        .call(
            TransactionRequest::default()
                .with_to(token)
                .with_input(Bytes::from(call.abi_encode())),
        )
        .await
        .unwrap();
    sol::balanceOfCall::abi_decode_returns(&out).unwrap()
}

/// Installs the test Permit2 and the two x402 Permit2 proxies
/// (`tests/js/contracts/TestPermit2.json`, `TestX402ExactPermit2Proxy.json`,
/// `TestX402UptoPermit2Proxy.json`) at their canonical addresses with
/// `anvil_setCode`. Do it before creating a chain ledger: it looks for them
/// when it starts.
pub async fn install_permit2(provider: &DynProvider) {
    use x402_core::evm::{EXACT_PERMIT2_PROXY, PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY};
    for (artifact, address) in [
        ("TestPermit2.json", PERMIT2_ADDRESS),
        ("TestX402ExactPermit2Proxy.json", EXACT_PERMIT2_PROXY),
        ("TestX402UptoPermit2Proxy.json", UPTO_PERMIT2_PROXY),
    ] {
        let path = js_dir().join("contracts").join(artifact);
        let json: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())),
        )
        .unwrap();
        let code: Bytes = json["deployedBytecode"].as_str().unwrap().parse().unwrap();
        provider
            .raw_request::<_, Value>("anvil_setCode".into(), (address, code))
            .await
            .unwrap();
    }
}

/// `token.approve(spender, amount)` signed by `owner`'s provider.
pub async fn approve(owner: &DynProvider, token: Address, spender: Address, amount: U256) {
    let call = sol::approveCall { spender, amount };
    let receipt = send(
        owner,
        TransactionRequest::default()
            .with_to(token)
            .with_input(Bytes::from(call.abi_encode())),
    )
    .await;
    assert!(receipt.status(), "approve reverted");
}

/// What `pay.mjs` reported.
#[derive(Debug)]
pub struct PayOutcome {
    /// The process's exit code.
    pub exit_code: Option<i32>,
    /// The JSON line on stdout (`Value::Null` when there was none).
    pub json: Value,
    /// Its stderr.
    pub stderr: String,
}

/// Pays `url` with the official client `client` (`v1` or `v2`) through
/// `node tests/js/pay.mjs`, with `extra` arguments (e.g. `--schemes exact,upto`).
/// The node process is killed if it outlives `timeout`.
pub async fn pay(client: &str, url: &str, key: &str, rpc: &str, extra: &[&str]) -> PayOutcome {
    let mut command = require::node_async("pay.mjs");
    command
        .args(["--client", client, "--url", url, "--key", key, "--rpc", rpc])
        .args(["--timeout-ms", "60000"])
        .args(extra);
    let (exit_code, json, stderr) =
        require::node_json(command, "pay.mjs", Duration::from_secs(90)).await;
    PayOutcome {
        exit_code,
        json,
        stderr,
    }
}

/// Turns anvil's automine on or off (`evm_setAutomine`). With it off,
/// transactions wait in the pool until [`mine`].
pub async fn set_automine(provider: &DynProvider, on: bool) {
    provider
        .raw_request::<_, Value>("evm_setAutomine".into(), (on,))
        .await
        .unwrap();
}

/// Mines one block with what the pool holds (`evm_mine`).
pub async fn mine(provider: &DynProvider) {
    provider
        .raw_request::<_, Value>("evm_mine".into(), ())
        .await
        .unwrap();
}

/// Drops every transaction waiting in anvil's pool
/// (`anvil_dropAllTransactions`), as a node that evicts them would.
pub async fn drop_pending(provider: &DynProvider) {
    provider
        .raw_request::<_, Value>("anvil_dropAllTransactions".into(), ())
        .await
        .unwrap();
}

/// The answers a [`ResendingProxy`] got for one `eth_sendRawTransaction`.
#[derive(Debug, Clone)]
pub struct Resent {
    /// The first answer, dropped as if lost on its way back.
    pub first: Value,
    /// The second answer, the one the client got.
    pub second: Value,
}

/// A JSON-RPC proxy in front of a node that forwards every
/// `eth_sendRawTransaction` twice and answers with the second reply,
/// dropping the first as if it had been lost on its way back: what a load
/// balancer or a retrying client does after a timeout. Every other call is
/// forwarded once. Stopped on drop.
///
/// Started with [`mining_between`](Self::mining_between), it also mines a
/// block (`evm_mine`) between the two copies, so that the first is mined
/// before the second arrives (with automine off, deterministically).
#[derive(Debug)]
pub struct ResendingProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    resent: std::sync::Arc<std::sync::Mutex<Vec<Resent>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ResendingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ResendingProxy {
    /// Starts the proxy on 127.0.0.1:0 in front of `upstream`.
    pub async fn start(upstream: &str) -> Self {
        Self::start_with(upstream, false).await
    }

    /// Starts the proxy, mining a block between the two copies of a send.
    pub async fn mining_between(upstream: &str) -> Self {
        Self::start_with(upstream, true).await
    }

    async fn start_with(upstream: &str, mine_between: bool) -> Self {
        use axum::{body::Bytes, extract::State, routing::post, Router};

        type Shared = (
            String,
            reqwest::Client,
            std::sync::Arc<std::sync::Mutex<Vec<Resent>>>,
            bool,
        );

        async fn forward(client: &reqwest::Client, upstream: &str, body: &Bytes) -> Bytes {
            client
                .post(upstream)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        }

        async fn relay(
            State((upstream, client, resent, mine_between)): State<Shared>,
            body: Bytes,
        ) -> Bytes {
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if request["method"] != "eth_sendRawTransaction" {
                return forward(&client, &upstream, &body).await;
            }
            let first = forward(&client, &upstream, &body).await;
            if mine_between {
                let mine = r#"{"jsonrpc":"2.0","id":0,"method":"evm_mine","params":[]}"#;
                forward(&client, &upstream, &Bytes::from_static(mine.as_bytes())).await;
            }
            let second = forward(&client, &upstream, &body).await;
            resent.lock().unwrap().push(Resent {
                first: serde_json::from_slice(&first).unwrap_or(Value::Null),
                second: serde_json::from_slice(&second).unwrap_or(Value::Null),
            });
            second
        }

        let resent = std::sync::Arc::default();
        let shared: Shared = (
            upstream.to_owned(),
            reqwest::Client::new(),
            std::sync::Arc::clone(&resent),
            mine_between,
        );
        let app = Router::new().route("/", post(relay)).with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, resent, task }
    }

    /// Every `eth_sendRawTransaction` relayed so far, in order.
    pub fn resent(&self) -> Vec<Resent> {
        self.resent.lock().unwrap().clone()
    }
}
