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

use alloy_primitives::U256;
use x402_tests::{
    anvil::{self, accounts},
    example_chain::{actix, axum, ExampleChain, Setup, Start, FUNDING},
};

/// Pays `path` of `chain`'s server with the official `client` (`pay.mjs`)
/// as the payer.
async fn pay(chain: &ExampleChain, client: &str, path: &str, extra: &[&str]) -> anvil::PayOutcome {
    let url = format!("{}{path}", chain.base);
    anvil::pay(client, &url, accounts::KEY_1, &chain.anvil.url, extra).await
}

/// Pays `/exact/evm/eip3009` with `client` and checks the receipt header and
/// that exactly the price moved on chain.
async fn pays_exact(server: Start, client: &str, receipt_header: &str, network: &str) {
    let chain = ExampleChain::start(server).await;
    assert_eq!(chain.balances().await, (U256::from(FUNDING), U256::ZERO));

    let outcome = pay(&chain, client, "/exact/evm/eip3009", &[]).await;
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
    let chain = ExampleChain::start_with(
        server,
        Setup {
            permit2: true,
            ..Setup::default()
        },
    )
    .await;
    let outcome = pay(
        &chain,
        "v2",
        "/upto/evm/permit2",
        &["--schemes", "exact,upto"],
    )
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
