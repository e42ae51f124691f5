//! A local anvil node with the TestUSDC token deployed, for the chain tests.
//!
//! The node is the pinned `@foundry-rs/anvil` binary from `tests/js` (run
//! `npm ci` there once). It is killed when the [`Anvil`] guard drops, also on
//! panic.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    path::PathBuf,
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

/// Anvil account 0: deploys and mints.
pub const DEPLOYER_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
/// Anvil account 1: the facilitator, which pays the gas of settlements.
pub const FACILITATOR_KEY: &str =
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

mod sol {
    alloy_sol_types::sol! {
        function mint(address to, uint256 amount) external;
        function balanceOf(address account) external view returns (uint256);
    }
}

/// A running anvil; killed on drop.
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

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn anvil_binary() -> PathBuf {
    let (os, arch) = match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => ("linux", "amd64"),
        ("linux", "aarch64") => ("linux", "arm64"),
        ("macos", "aarch64") => ("darwin", "arm64"),
        ("macos", "x86_64") => ("darwin", "amd64"),
        (os, arch) => panic!("no pinned anvil binary for {os}/{arch}"),
    };
    workspace_root().join(format!(
        "tests/js/node_modules/@foundry-rs/anvil-{os}-{arch}/bin/anvil"
    ))
}

impl Anvil {
    /// Starts anvil with chain id 84532 on a free port and waits until it
    /// listens. Fails (panics) if the binary is missing.
    pub fn start() -> Self {
        let binary = anvil_binary();
        assert!(
            binary.exists(),
            "the anvil binary is missing at {}: run `npm ci` in tests/js first",
            binary.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(&binary)
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
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("anvil did not print \"Listening on\" within 30 s");
        anvil
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
    let path = workspace_root().join("tests/js/contracts/TestUSDC.json");
    let artifact: serde_json::Value = serde_json::from_slice(
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
