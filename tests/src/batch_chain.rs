//! The `batch-settlement` scheme on a local chain (issue #21): anvil with
//! TestUSDC, our own escrow contract at the address the official
//! `@x402/evm` code expects, and the official facilitator
//! (`tests/js/batch/facilitator.mjs`) in front of it.
//!
//! [`BatchChain::start`] gives everything a seller test needs: the RPC URL,
//! the escrow and token addresses, the facilitator URL, the
//! receiverAuthorizer key the facilitator signs claims with (a seller may
//! delegate to it or sign itself with the same key), the seller's `payTo`
//! and a funded buyer. [`BatchChain::pay`] pays with the official client
//! (`tests/js/batch/pay.mjs`); [`BatchChain::reference_server`] starts the
//! official seller (`tests/js/batch/reference-server.mjs`) to compare with.
//! Read helpers look at the chain: balances, `channels(id)`,
//! `receivers(receiver, token)`, `refundNonce(id)`.
//!
//! Every process started here (anvil, node) is killed when its guard drops,
//! also on panic. See `tests/js/batch/README.md` for the payload shapes.

use std::{
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy_network::TransactionBuilder;
use alloy_primitives::{address, Address, Bytes, FixedBytes, B256, U256};
use alloy_provider::{DynProvider, Provider};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_sol_types::SolCall;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::{
    anvil::{self, accounts, Anvil},
    require,
};

/// The CAIP-2 network of the anvil chain.
pub const NETWORK: &str = "eip155:84532";
/// Its chain id.
pub const CHAIN_ID: u64 = 84_532;
/// Where the official code expects the escrow (`BATCH_SETTLEMENT_ADDRESS`).
pub const BATCH_SETTLEMENT_ADDRESS: Address = address!("4020074e9dF2ce1deE5A9C1b5c3f541D02a10003");
/// Where it expects the ERC-3009 deposit collector (`ERC3009_DEPOSIT_COLLECTOR_ADDRESS`).
pub const ERC3009_DEPOSIT_COLLECTOR_ADDRESS: Address =
    address!("4020806089470a89826cB9fB1f4059150b550004");
/// Where it expects the Permit2 deposit collector (`PERMIT2_DEPOSIT_COLLECTOR_ADDRESS`).
pub const PERMIT2_DEPOSIT_COLLECTOR_ADDRESS: Address =
    address!("4020425FAf3B746C082C2f942b4E5159887B0005");
/// Multicall3 (the official code reads channel state through `tryAggregate`).
pub const MULTICALL3_ADDRESS: Address = address!("cA11bde05977b3631167028862bE2a173976CA11");
/// The EIP-712 domain name of the escrow.
pub const DOMAIN_NAME: &str = "x402 Batch Settlement";
/// The EIP-712 domain version of the escrow.
pub const DOMAIN_VERSION: &str = "1";
/// TestUSDC's EIP-712 name (`extra.name`).
pub const TOKEN_NAME: &str = "USDC";
/// TestUSDC's EIP-712 version (`extra.version`).
pub const TOKEN_VERSION: &str = "2";
/// The per-call ceiling the tests use (atomic units, $0.001).
pub const PRICE: u64 = 1_000;
/// The buyer's starting TestUSDC balance (atomic units: 10 USDC).
pub const BUYER_FUNDS: u64 = 10_000_000;
/// The withdraw delay the official server announces by default (seconds).
pub const WITHDRAW_DELAY: u64 = 900;

/// Anvil account 4: the facilitator's gas payer (public test key).
pub const RELAYER_KEY: &str = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a";
/// Anvil account 3: the receiverAuthorizer the facilitator signs with.
pub const RECEIVER_AUTHORIZER_KEY: &str = accounts::KEY_3;
/// Anvil account 5: a second receiverAuthorizer, for a seller that signs its
/// own claims with a key the facilitator does not know.
pub const SELLER_AUTHORIZER_KEY: &str =
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";

mod sol {
    alloy_sol_types::sol! {
        struct ChannelConfig {
            address payer;
            address payerAuthorizer;
            address receiver;
            address receiverAuthorizer;
            address token;
            uint40 withdrawDelay;
            bytes32 salt;
        }
        struct Voucher {
            ChannelConfig channel;
            uint128 maxClaimableAmount;
        }
        struct VoucherClaim {
            Voucher voucher;
            bytes signature;
            uint128 totalClaimed;
        }
        function claim(VoucherClaim[] voucherClaims) external;
        function refund(ChannelConfig config, uint128 amount) external;
        function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
        function receivers(address receiver, address token) external view returns (uint128 totalClaimed, uint128 totalSettled);
        function refundNonce(bytes32 channelId) external view returns (uint256);
        function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
        function getChannelId(ChannelConfig config) external view returns (bytes32);
        function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) external view returns (bytes32);
        function initiateWithdraw(ChannelConfig config, uint128 amount) external;
        function finalizeWithdraw(ChannelConfig config) external;
    }
}

pub use sol::ChannelConfig;

/// A channel's on-chain state (`channels(id)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channel {
    /// Deposited minus withdrawn and refunded.
    pub balance: u128,
    /// Claimed by the receiver so far (cumulative).
    pub total_claimed: u128,
}

/// A node process that printed a JSON "ready" line; killed on drop. Its
/// other output lines (stdout and stderr) are kept in [`log`](Self::log).
#[derive(Debug)]
pub struct NodeProcess {
    child: tokio::process::Child,
    /// The ready line.
    pub ready: Value,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn keep_lines(stream: impl AsyncRead + Unpin + Send + 'static, log: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            log.lock().unwrap().push(line);
        }
    });
}

impl NodeProcess {
    /// Runs `node tests/js/<script> <args>` and waits (30 s at most) for a
    /// stdout line that is JSON with `"ready": true`.
    pub async fn spawn(script: &str, args: &[String]) -> Self {
        let mut child = require::node_async(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run node {script}: {e}"));
        let log = Arc::new(Mutex::new(Vec::new()));
        keep_lines(child.stderr.take().unwrap(), Arc::clone(&log));
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = stdout.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if v["ready"] == true => return Some(v),
                    _ => log.lock().unwrap().push(line),
                }
            }
            None
        })
        .await;
        let mut process = Self {
            child,
            ready: Value::Null,
            log,
        };
        match ready {
            Ok(Some(v)) => process.ready = v,
            _ => panic!(
                "node {script} did not get ready within 30 s; its output:\n{}",
                process.log().join("\n")
            ),
        }
        keep_lines(stdout.into_inner(), Arc::clone(&process.log));
        process
    }

    /// `ready["url"]`.
    pub fn url(&self) -> String {
        self.ready["url"].as_str().unwrap().to_owned()
    }

    /// Everything it printed after (and besides) the ready line so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// anvil + TestUSDC + the batch-settlement test contracts + the official
/// facilitator, with a funded buyer. Dropping it ends everything.
#[derive(Debug)]
pub struct BatchChain {
    /// The facilitator process (field order: dropped before anvil).
    pub facilitator: NodeProcess,
    /// `http://127.0.0.1:PORT`.
    pub facilitator_url: String,
    /// The node.
    pub anvil: Anvil,
    /// `http://127.0.0.1:PORT` of anvil (chain id [`CHAIN_ID`]).
    pub rpc_url: String,
    /// [`NETWORK`].
    pub network: &'static str,
    /// A provider signing with the deployer (anvil account 0, TestUSDC's owner).
    pub deployer: DynProvider,
    /// [`BATCH_SETTLEMENT_ADDRESS`].
    pub escrow: Address,
    /// [`ERC3009_DEPOSIT_COLLECTOR_ADDRESS`].
    pub erc3009_collector: Address,
    /// [`PERMIT2_DEPOSIT_COLLECTOR_ADDRESS`].
    pub permit2_collector: Address,
    /// TestUSDC (EIP-3009, 6 decimals).
    pub token: Address,
    /// [`TOKEN_NAME`].
    pub token_name: &'static str,
    /// [`TOKEN_VERSION`].
    pub token_version: &'static str,
    /// [`RECEIVER_AUTHORIZER_KEY`]: the facilitator's receiverAuthorizer.
    pub receiver_authorizer_key: &'static str,
    /// Its address, advertised by the facilitator in `GET /supported`.
    pub receiver_authorizer: Address,
    /// The facilitator's gas payer.
    pub relayer: Address,
    /// The seller's `payTo` (anvil account 2).
    pub seller: Address,
    /// The buyer's key (anvil account 1), funded with [`BUYER_FUNDS`].
    pub buyer_key: &'static str,
    /// The buyer's address.
    pub buyer: Address,
}

impl BatchChain {
    /// Starts anvil, deploys TestUSDC, mints [`BUYER_FUNDS`] to the buyer,
    /// installs the escrow, both collectors, Permit2 and Multicall3 with `anvil_setCode`
    /// and starts the facilitator.
    pub async fn start() -> Self {
        let anvil = Anvil::start();
        let rpc_url = anvil.url.clone();
        let deployer = anvil.provider(accounts::KEY_0).await;
        let token = anvil::deploy_test_usdc(&deployer, TOKEN_NAME, TOKEN_VERSION).await;
        let buyer = anvil::address_of(accounts::KEY_1);
        anvil::mint(&deployer, token, buyer, BUYER_FUNDS).await;
        install_contracts(&deployer).await;

        let facilitator = NodeProcess::spawn(
            "batch/facilitator.mjs",
            &[
                "--rpc".into(),
                rpc_url.clone(),
                "--key".into(),
                RELAYER_KEY.into(),
                "--authorizer-key".into(),
                RECEIVER_AUTHORIZER_KEY.into(),
                "--port".into(),
                "0".into(),
            ],
        )
        .await;
        let facilitator_url = facilitator.url();
        Self {
            facilitator,
            facilitator_url,
            anvil,
            rpc_url,
            network: NETWORK,
            deployer,
            escrow: BATCH_SETTLEMENT_ADDRESS,
            erc3009_collector: ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
            permit2_collector: PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
            token,
            token_name: TOKEN_NAME,
            token_version: TOKEN_VERSION,
            receiver_authorizer_key: RECEIVER_AUTHORIZER_KEY,
            receiver_authorizer: anvil::address_of(RECEIVER_AUTHORIZER_KEY),
            relayer: anvil::address_of(RELAYER_KEY),
            seller: anvil::address_of(accounts::KEY_2),
            buyer_key: accounts::KEY_1,
            buyer,
        }
    }

    async fn call<C: SolCall>(&self, to: Address, call: C) -> C::Return {
        let out = self
            .deployer
            .call(
                TransactionRequest::default()
                    .with_to(to)
                    .with_input(Bytes::from(call.abi_encode())),
            )
            .await
            .unwrap();
        C::abi_decode_returns(&out).unwrap()
    }

    /// Mints `amount` TestUSDC to `who` (e.g. a second buyer for
    /// [`pay_as`](Self::pay_as); anvil's dev accounts have gas already).
    pub async fn fund(&self, who: Address, amount: u64) {
        anvil::mint(&self.deployer, self.token, who, amount).await;
    }

    /// `key` approves Permit2 for all its TestUSDC (what a buyer does once
    /// before permit2 deposits).
    pub async fn approve_permit2(&self, key: &str) {
        let owner = self.anvil.provider(key).await;
        anvil::approve(
            &owner,
            self.token,
            x402_core::evm::PERMIT2_ADDRESS,
            U256::MAX,
        )
        .await;
    }

    /// TestUSDC balance of `who`.
    pub async fn balance_of(&self, who: Address) -> U256 {
        anvil::balance_of(&self.deployer, self.token, who).await
    }

    /// `channels(channel_id)`.
    pub async fn channel(&self, channel_id: B256) -> Channel {
        let r = self
            .call(
                self.escrow,
                sol::channelsCall {
                    channelId: channel_id,
                },
            )
            .await;
        Channel {
            balance: r.balance,
            total_claimed: r.totalClaimed,
        }
    }

    /// `receivers(receiver, token)`: (totalClaimed, totalSettled).
    pub async fn receiver_totals(&self, receiver: Address) -> (u128, u128) {
        let r = self
            .call(
                self.escrow,
                sol::receiversCall {
                    receiver,
                    token: self.token,
                },
            )
            .await;
        (r.totalClaimed, r.totalSettled)
    }

    /// `refundNonce(channel_id)`.
    pub async fn refund_nonce(&self, channel_id: B256) -> U256 {
        self.call(
            self.escrow,
            sol::refundNonceCall {
                channelId: channel_id,
            },
        )
        .await
    }

    /// `pendingWithdrawals(channel_id)`: (amount, initiatedAt).
    pub async fn pending_withdrawal(&self, channel_id: B256) -> (u128, u64) {
        let r = self
            .call(
                self.escrow,
                sol::pendingWithdrawalsCall {
                    channelId: channel_id,
                },
            )
            .await;
        (r.amount, r.initiatedAt.to::<u64>())
    }

    /// The escrow's `getChannelId(config)`: to check an own EIP-712
    /// implementation against the contract.
    pub async fn channel_id_of(&self, config: ChannelConfig) -> B256 {
        self.call(self.escrow, sol::getChannelIdCall { config })
            .await
    }

    /// The escrow's `getVoucherDigest(channel_id, max_claimable)`.
    pub async fn voucher_digest(&self, channel_id: B256, max_claimable: u128) -> B256 {
        self.call(
            self.escrow,
            sol::getVoucherDigestCall {
                channelId: channel_id,
                maxClaimableAmount: max_claimable,
            },
        )
        .await
    }

    /// Sends `call` to the escrow signed by `key`; whether it was mined
    /// successfully (`false` also when gas estimation already reverts).
    pub async fn send_to_escrow<C: SolCall>(&self, key: &str, call: C) -> bool {
        let provider = self.anvil.provider(key).await;
        let tx = TransactionRequest::default()
            .with_to(self.escrow)
            .with_input(Bytes::from(call.abi_encode()));
        match provider.send_transaction(tx).await {
            Err(_) => false,
            Ok(pending) => anvil::receipt(&provider, *pending.tx_hash()).await.status(),
        }
    }

    /// `initiateWithdraw(config, amount)` signed by `key` (the payer or its
    /// payerAuthorizer may).
    pub async fn initiate_withdraw(&self, key: &str, config: ChannelConfig, amount: u128) -> bool {
        self.send_to_escrow(key, sol::initiateWithdrawCall { config, amount })
            .await
    }

    /// `finalizeWithdraw(config)` signed by `key`.
    pub async fn finalize_withdraw(&self, key: &str, config: ChannelConfig) -> bool {
        self.send_to_escrow(key, sol::finalizeWithdrawCall { config })
            .await
    }

    /// `claim([{voucher: {config, max_claimable}, signature, total_claimed}])`
    /// signed by `key` (the receiver or its receiverAuthorizer may), without
    /// any ClaimBatch signature.
    pub async fn claim_directly(
        &self,
        key: &str,
        config: ChannelConfig,
        max_claimable: u128,
        voucher_signature: Bytes,
        total_claimed: u128,
    ) -> bool {
        let row = sol::VoucherClaim {
            voucher: sol::Voucher {
                channel: config,
                maxClaimableAmount: max_claimable,
            },
            signature: voucher_signature,
            totalClaimed: total_claimed,
        };
        self.send_to_escrow(
            key,
            sol::claimCall {
                voucherClaims: vec![row],
            },
        )
        .await
    }

    /// `refund(config, amount)` signed by `key` (the receiver or its
    /// receiverAuthorizer may), without a Refund signature.
    pub async fn refund_directly(&self, key: &str, config: ChannelConfig, amount: u128) -> bool {
        self.send_to_escrow(key, sol::refundCall { config, amount })
            .await
    }

    /// Moves anvil's clock `secs` forward and mines a block.
    pub async fn increase_time(&self, secs: u64) {
        self.deployer
            .raw_request::<_, Value>("evm_increaseTime".into(), (secs,))
            .await
            .unwrap();
        anvil::mine(&self.deployer).await;
    }

    /// The channel config the official client builds for this chain's buyer
    /// paying `receiver` with `receiver_authorizer` (salt: 32 zero bytes
    /// unless given).
    pub fn buyer_channel_config(
        &self,
        receiver: Address,
        receiver_authorizer: Address,
        salt: Option<B256>,
    ) -> ChannelConfig {
        ChannelConfig {
            payer: self.buyer,
            payerAuthorizer: self.buyer,
            receiver,
            receiverAuthorizer: receiver_authorizer,
            token: self.token,
            withdrawDelay: alloy_primitives::Uint::from(WITHDRAW_DELAY),
            salt: salt.unwrap_or(FixedBytes::ZERO),
        }
    }

    /// The facilitator's request log: one line per `/verify` and `/settle`
    /// (`facilitator: settle batch-settlement/claim -> success=true tx=0x..`).
    pub fn facilitator_log(&self) -> Vec<String> {
        self.facilitator.log()
    }

    /// How many facilitator lines start with `facilitator: <what>` (e.g.
    /// `"settle batch-settlement/deposit"`).
    pub fn facilitator_calls(&self, what: &str) -> usize {
        let prefix = format!("facilitator: {what} ");
        self.facilitator_log()
            .iter()
            .filter(|l| l.starts_with(&prefix))
            .count()
    }

    /// Pays `calls` calls to `url` with the official batch-settlement client
    /// as the buyer (`tests/js/batch/pay.mjs`, more flags in `extra`, e.g.
    /// `["--deposit", "50000", "--record-headers"]`).
    pub async fn pay(&self, url: &str, calls: usize, extra: &[&str]) -> BatchPay {
        self.pay_as(self.buyer_key, url, calls, extra).await
    }

    /// [`pay`](Self::pay) with another buyer key.
    pub async fn pay_as(&self, key: &str, url: &str, calls: usize, extra: &[&str]) -> BatchPay {
        let mut command = require::node_async("batch/pay.mjs");
        command
            .args(["--url", url, "--key", key, "--rpc", &self.rpc_url])
            .args(["--calls", &calls.to_string()])
            .args(extra);
        let (exit_code, json, stderr) =
            require::node_json(command, "batch/pay.mjs", Duration::from_secs(300)).await;
        BatchPay {
            exit_code,
            json,
            stderr,
        }
    }

    /// Starts the official seller (`tests/js/batch/reference-server.mjs`)
    /// paid through this chain's facilitator.
    pub async fn reference_server(&self, options: RefServerOptions) -> RefServer {
        let mut args = vec![
            "--facilitator".to_owned(),
            self.facilitator_url.clone(),
            "--pay-to".into(),
            format!("{:#x}", options.pay_to.unwrap_or(self.seller)),
            "--token".into(),
            format!("{:#x}", self.token),
            "--token-name".into(),
            TOKEN_NAME.into(),
            "--token-version".into(),
            TOKEN_VERSION.into(),
            "--price".into(),
            options.price.to_string(),
            "--port".into(),
            "0".into(),
        ];
        if let Some(charge) = options.charge {
            args.extend(["--charge".into(), charge.to_string()]);
        }
        if let Some(method) = options.transfer_method {
            args.extend(["--transfer-method".into(), method.to_owned()]);
        }
        if let Some(key) = options.authorizer_key {
            args.extend(["--authorizer-key".into(), key.to_owned()]);
        }
        let process = NodeProcess::spawn("batch/reference-server.mjs", &args).await;
        RefServer {
            url: process.url(),
            process,
            http: reqwest::Client::new(),
        }
    }
}

/// Installs `TestBatchSettlement`, `TestErc3009DepositCollector`,
/// `TestPermit2DepositCollector` and `TestMulticall3` (committed artifacts in
/// `tests/js/contracts`) at their canonical addresses with `anvil_setCode`,
/// and the test Permit2 ([`anvil::install_permit2`]).
pub async fn install_contracts(provider: &DynProvider) {
    anvil::install_permit2(provider).await;
    for (artifact, address) in [
        ("TestBatchSettlement.json", BATCH_SETTLEMENT_ADDRESS),
        (
            "TestErc3009DepositCollector.json",
            ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
        ),
        (
            "TestPermit2DepositCollector.json",
            PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
        ),
        ("TestMulticall3.json", MULTICALL3_ADDRESS),
    ] {
        let path = require::js_dir().join("contracts").join(artifact);
        let json: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())),
        )
        .unwrap();
        let code: Bytes = json["deployedBytecode"].as_str().unwrap().parse().unwrap();
        provider
            .raw_request::<_, Value>("anvil_setCode".into(), (address, code.clone()))
            .await
            .unwrap();
        assert_eq!(
            provider.get_code_at(address).await.unwrap(),
            code,
            "{artifact} not installed"
        );
    }
}

/// Options of [`BatchChain::reference_server`].
#[derive(Debug, Clone)]
pub struct RefServerOptions {
    /// `PaymentRequirements.amount` (default [`PRICE`]).
    pub price: u64,
    /// What a call really costs (default: the price).
    pub charge: Option<u64>,
    /// The seller signs its own claims/refunds with this receiverAuthorizer
    /// key; `None` delegates to the facilitator's.
    pub authorizer_key: Option<&'static str>,
    /// `payTo` (default: the chain's seller).
    pub pay_to: Option<Address>,
    /// `extra.assetTransferMethod` to offer (`"eip3009"` or `"permit2"`;
    /// default: none, which the client takes as eip3009).
    pub transfer_method: Option<&'static str>,
}

impl Default for RefServerOptions {
    fn default() -> Self {
        Self {
            price: PRICE,
            charge: None,
            authorizer_key: None,
            pay_to: None,
            transfer_method: None,
        }
    }
}

/// The official seller; killed on drop.
#[derive(Debug)]
pub struct RefServer {
    /// `http://127.0.0.1:PORT`; the paid route is `{url}/batch/evm`.
    pub url: String,
    /// The process (its log: `process.log()`).
    pub process: NodeProcess,
    http: reqwest::Client,
}

impl RefServer {
    /// `{url}/batch/evm`.
    pub fn route(&self) -> String {
        format!("{}/batch/evm", self.url)
    }

    async fn admin(&self, method: reqwest::Method, path: &str) -> Value {
        let response = self
            .http
            .request(method, format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert!(
            status.is_success(),
            "{path} answered {status}: {body}; server log:\n{}",
            self.process.log().join("\n")
        );
        body
    }

    /// Runs the official claimer: `claimAndSettle()` of the scheme's channel
    /// manager. `{"claims":[{"vouchers","transaction"}],"settle":{"transaction"}|null}`.
    pub async fn claim_and_settle(&self) -> Value {
        self.admin(reqwest::Method::POST, "/admin/claim-and-settle")
            .await
    }

    /// `claim()` only.
    pub async fn claim(&self) -> Value {
        self.admin(reqwest::Method::POST, "/admin/claim").await
    }

    /// How many times the paid handler ran.
    pub async fn handler_runs(&self) -> u64 {
        self.admin(reqwest::Method::GET, "/admin/stats").await["handlerRuns"]
            .as_u64()
            .unwrap()
    }

    /// The scheme's channel records.
    pub async fn channels(&self) -> Value {
        self.admin(reqwest::Method::GET, "/admin/channels").await["channels"].clone()
    }
}

/// What `batch/pay.mjs` reported.
#[derive(Debug)]
pub struct BatchPay {
    /// The process's exit code.
    pub exit_code: Option<i32>,
    /// Its JSON line (`Value::Null` when there was none).
    pub json: Value,
    /// Its stderr.
    pub stderr: String,
}

impl BatchPay {
    /// Panics with stderr unless it exited 0 with a JSON line.
    #[track_caller]
    pub fn assert_ran(&self) -> &Self {
        assert!(
            self.exit_code == Some(0) && !self.json.is_null(),
            "pay.mjs failed (exit {:?}): {}",
            self.exit_code,
            self.stderr
        );
        self
    }

    /// The per-call entries.
    pub fn calls(&self) -> &[Value] {
        self.json["calls"].as_array().map_or(&[], Vec::as_slice)
    }

    /// Each call's HTTP status.
    pub fn statuses(&self) -> Vec<u64> {
        self.calls()
            .iter()
            .map(|c| c["status"].as_u64().unwrap_or(0))
            .collect()
    }

    /// How many deposit payloads the client sent.
    pub fn deposits(&self) -> u64 {
        self.json["deposits"].as_u64().unwrap_or(0)
    }

    /// The channel id the client paid on.
    pub fn channel_id(&self) -> B256 {
        self.json["channelId"]
            .as_str()
            .expect("no channelId in pay.mjs output")
            .parse()
            .unwrap()
    }

    /// The payload types sent, in order, over all calls.
    pub fn sent_types(&self) -> Vec<String> {
        self.calls()
            .iter()
            .flat_map(|c| c["sent"].as_array().cloned().unwrap_or_default())
            .map(|s| s["type"].as_str().unwrap_or("?").to_owned())
            .collect()
    }

    /// The raw PAYMENT-SIGNATURE headers sent (with `--record-headers`).
    pub fn sent_headers(&self) -> Vec<String> {
        self.calls()
            .iter()
            .flat_map(|c| c["sent"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| s["header"].as_str().map(str::to_owned))
            .collect()
    }

    /// The PAYMENT-SIGNATURE headers sent (with `--record-headers`), decoded.
    pub fn sent_payloads(&self) -> Vec<Value> {
        use base64::Engine as _;
        self.sent_headers()
            .iter()
            .map(|h| {
                serde_json::from_slice(
                    &base64::engine::general_purpose::STANDARD
                        .decode(h)
                        .expect("PAYMENT-SIGNATURE is base64"),
                )
                .expect("PAYMENT-SIGNATURE is JSON")
            })
            .collect()
    }

    /// The sum of `extra.chargedAmount` over the successful payment responses.
    pub fn charged_total(&self) -> u128 {
        self.calls()
            .iter()
            .filter(|c| c["paymentResponse"]["success"] == true)
            .map(|c| {
                c["paymentResponse"]["extra"]["chargedAmount"]
                    .as_str()
                    .map_or(0, |s| s.parse::<u128>().unwrap())
            })
            .sum()
    }
}
