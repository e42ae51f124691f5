//! Interop with the official x402 clients from npm (`@x402/fetch` v2 and the
//! legacy `x402-fetch` v1): they pay both example servers (`examples/paid-api`
//! on axum, `examples/paid-api-actix` on actix-web; one suite, run against
//! each) running in process with the in-process facilitator on a local anvil
//! chain, and the token really moves: `exact` (EIP-3009) with both clients,
//! and `upto` (Permit2, with the test Permit2 and x402 proxies installed on
//! anvil) with the v2 client.
//!
//! Needs `tests/js/node_modules` (`npm ci` in `tests/js`) and node >= 20; the
//! tests fail, with that instruction, when they are missing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{future::Future, pin::Pin};

use alloy_primitives::{Address, U256};
use alloy_provider::DynProvider;
use paid_api_common::{AssetConfig, Config, FacilitatorConfig};
use tokio::task::JoinHandle;
use x402_tests::anvil::{self, accounts, Anvil};

/// A running example server: its base URL and its task.
type Running = (String, JoinHandle<Result<(), paid_api::Error>>);

/// Starts an example server for a configuration.
type Start = fn(Config) -> Pin<Box<dyn Future<Output = Running> + Send>>;

/// The axum example.
fn axum(config: Config) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = config.bound_to(listener.local_addr().unwrap());
        let (router, state) = paid_api::app(config).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        (base, tokio::spawn(paid_api::serve(listener, router, state)))
    })
}

/// The actix-web example, built from the same configuration and route table.
fn actix(config: Config) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let server = paid_api_actix::server(config).await.unwrap();
        let base = format!("http://{}", server.local_addr());
        // Dropping the actix server future stops its workers and listener.
        (base, tokio::spawn(server.run()))
    })
}

/// The payer's starting balance (atomic units: 1 USDC).
const FUNDING: u64 = 1_000_000;

/// anvil with TestUSDC ("USDC", "2") minted to the payer (account 1), and
/// paid-api on 127.0.0.1:0 settling on it (facilitator: account 0, payee:
/// account 2).
struct Chain {
    anvil: Anvil,
    provider: DynProvider,
    token: Address,
    payer: Address,
    payee: Address,
    base: String,
    server: JoinHandle<Result<(), paid_api::Error>>,
}

impl Drop for Chain {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Chain {
    async fn start(server: Start) -> Self {
        Self::start_with(server, false).await
    }

    /// With `permit2`, the test Permit2 and the x402 Permit2 proxies are
    /// installed at their canonical addresses and the payer approves Permit2
    /// (what a wallet does once per token), so `upto` can settle.
    async fn start_with(server: Start, permit2: bool) -> Self {
        let anvil = Anvil::start();
        let provider = anvil.provider(accounts::KEY_0).await;
        let token = anvil::deploy_test_usdc(&provider, "USDC", "2").await;
        let payer = anvil::address_of(accounts::KEY_1);
        let payee = anvil::address_of(accounts::KEY_2);
        anvil::mint(&provider, token, payer, FUNDING).await;
        if permit2 {
            anvil::install_permit2(&provider).await;
            let owner = anvil.provider(accounts::KEY_1).await;
            anvil::approve(&owner, token, x402_core::evm::PERMIT2_ADDRESS, U256::MAX).await;
        }

        // What EVM_RPC_URL, FACILITATOR_EVM_PRIVATE_KEY, EVM_ASSET* and
        // EVM_PAYEE_ADDRESS would configure.
        let config = Config {
            port: 0,
            pay_to: payee,
            asset: AssetConfig {
                address: token,
                name: "USDC".into(),
                version: "2".into(),
                decimals: 6,
            },
            facilitator: FacilitatorConfig::Chain {
                rpc_url: anvil.url.clone(),
                private_key: accounts::KEY_0.into(),
            },
            ..Config::dev()
        };
        let (base, server) = server(config).await;
        Self {
            anvil,
            provider,
            token,
            payer,
            payee,
            base,
            server,
        }
    }

    async fn balances(&self) -> (U256, U256) {
        (
            anvil::balance_of(&self.provider, self.token, self.payer).await,
            anvil::balance_of(&self.provider, self.token, self.payee).await,
        )
    }

    async fn pay(&self, client: &str, path: &str, extra: &[&str]) -> anvil::PayOutcome {
        let url = format!("{}{path}", self.base);
        anvil::pay(client, &url, accounts::KEY_1, &self.anvil.url, extra).await
    }
}

/// Pays `/exact/evm/eip3009` with `client` and checks the receipt header and
/// that exactly the price moved on chain.
async fn pays_exact(server: Start, client: &str, receipt_header: &str, network: &str) {
    let chain = Chain::start(server).await;
    assert_eq!(chain.balances().await, (U256::from(FUNDING), U256::ZERO));

    let outcome = chain.pay(client, "/exact/evm/eip3009", &[]).await;
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "pay.mjs failed: {}",
        outcome.stderr
    );
    let json = &outcome.json;
    assert_eq!(json["status"], 200, "{json} {}", outcome.stderr);
    assert_eq!(json["paymentResponseHeader"], receipt_header, "{json}");
    let receipt = &json["paymentResponse"];
    assert_eq!(receipt["success"], true, "{json}");
    assert_eq!(receipt["network"], network, "{json}");
    assert!(
        receipt["transaction"]
            .as_str()
            .is_some_and(|t| t.len() == 66),
        "{json}"
    );
    let body: serde_json::Value = serde_json::from_str(json["body"].as_str().unwrap()).unwrap();
    assert!(
        body["message"].is_string() && body["timestamp"].is_string(),
        "{body}"
    );

    assert_eq!(
        chain.balances().await,
        (U256::from(FUNDING - 1_000), U256::from(1_000)),
        "the payment must move exactly 1000 atomic units"
    );
}

/// `upto` over Permit2 with the official v2 client's `UptoEvmScheme`: it
/// authorises the ceiling (2000), the handler reports 1000, and exactly 1000
/// moves on chain.
async fn pays_upto(server: Start) {
    let chain = Chain::start_with(server, true).await;
    let outcome = chain
        .pay("v2", "/upto/evm/permit2", &["--schemes", "exact,upto"])
        .await;
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "pay.mjs failed: {}",
        outcome.stderr
    );
    let json = &outcome.json;
    assert_eq!(json["status"], 200, "{json} {}", outcome.stderr);
    assert_eq!(json["paymentResponseHeader"], "PAYMENT-RESPONSE", "{json}");
    let receipt = &json["paymentResponse"];
    assert_eq!(receipt["success"], true, "{json}");
    assert_eq!(receipt["amount"], "1000", "{json}");
    assert!(
        receipt["transaction"]
            .as_str()
            .is_some_and(|t| t.len() == 66),
        "{json}"
    );
    assert_eq!(
        chain.balances().await,
        (U256::from(FUNDING - 1_000), U256::from(1_000)),
        "the upto payment must move exactly the 1000 the handler reported"
    );
}

/// The interop suite against one example server.
macro_rules! interop_suite {
    ($framework:ident) => {
        mod $framework {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn official_v2_client_pays_exact_on_anvil() {
                pays_exact(super::$framework, "v2", "PAYMENT-RESPONSE", "eip155:84532").await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn official_v1_client_pays_exact_on_anvil() {
                pays_exact(
                    super::$framework,
                    "v1",
                    "X-PAYMENT-RESPONSE",
                    "base-sepolia",
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn official_v2_client_pays_upto_on_anvil_and_is_charged_the_usage() {
                pays_upto(super::$framework).await;
            }
        }
    };
}

interop_suite!(axum);
interop_suite!(actix);
