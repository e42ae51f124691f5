//! The official v2 client (`@x402/fetch` 2.27 with `@x402/evm`'s
//! `ExactEvmScheme`) pays a route that settles before its handler, whose
//! challenge announces `extra.paymentFlow: "upfront"`: the client accepts
//! the flow (it drops only unrecognised ones), signs it, and the token moves
//! on anvil before the handler runs, once.
//!
//! Needs `tests/js/node_modules` (`npm ci` in `tests/js`), node >= 20 and
//! anvil; the test fails, with that instruction, when they are missing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use alloy_primitives::U256;
use axum::{routing::get, Router};
use x402_core::{
    local::{ChainLedger, LocalFacilitator},
    route::Asset,
    Engine, Offer, Route,
};
use x402_tests::anvil::{self, accounts, Anvil};

const NETWORK: &str = "eip155:84532";
const FUNDING: u64 = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_v2_client_pays_an_upfront_route_on_anvil() {
    let anvil = Anvil::start();
    let provider = anvil.provider(accounts::KEY_0).await;
    let token = anvil::deploy_test_usdc(&provider, "USDC", "2").await;
    let payer = anvil::address_of(accounts::KEY_1);
    let payee = anvil::address_of(accounts::KEY_2);
    anvil::mint(&provider, token, payer, FUNDING).await;

    let ledger = ChainLedger::new(&anvil.url, accounts::KEY_0).await.unwrap();
    let facilitator = LocalFacilitator::builder(ledger)
        .network(NETWORK)
        .build()
        .unwrap();
    let engine = Engine::builder_arc(Arc::new(facilitator))
        .route(
            Route::get("/stream")
                .offer(
                    Offer::exact(NETWORK, "$0.001", payee.to_checksum(None))
                        .asset(Asset::new(token.to_checksum(None), 6).eip712("USDC", "2")),
                )
                .settle_before_handler(),
        )
        .build()
        .unwrap();

    // The handler records the payee's balance when it runs: the money has
    // moved by then.
    let runs = Arc::new(AtomicUsize::new(0));
    let (counter, reader) = (runs.clone(), provider.clone());
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let (counter, reader) = (counter.clone(), reader.clone());
                async move {
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let paid = anvil::balance_of(&reader, token, payee).await;
                    format!("{{\"run\":{n},\"payeeBalanceInHandler\":\"{paid}\"}}")
                }
            }),
        )
        .layer(x402_axum::PaywallLayer::new(engine));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/stream", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // What the client is offered.
    let challenge = reqwest::get(&url).await.unwrap();
    assert_eq!(challenge.status(), 402);
    let required: serde_json::Value =
        x402_core::codec::decode(challenge.headers()["payment-required"].as_bytes(), 1 << 20)
            .unwrap();
    assert_eq!(
        required["accepts"][0]["extra"]["paymentFlow"], "upfront",
        "{required}"
    );

    let outcome = anvil::pay("v2", &url, accounts::KEY_1, &anvil.url, &[]).await;
    server.abort();
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "pay.mjs failed: {}",
        outcome.stderr
    );
    let json = &outcome.json;
    assert_eq!(json["status"], 200, "{json} {}", outcome.stderr);
    assert_eq!(json["paymentResponseHeader"], "PAYMENT-RESPONSE", "{json}");
    assert_eq!(json["paymentResponse"]["success"], true, "{json}");
    let body: serde_json::Value = serde_json::from_str(json["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["run"], 1, "{body}");
    assert_eq!(
        body["payeeBalanceInHandler"], "1000",
        "settled before the handler ran: {body}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        anvil::balance_of(&provider, token, payer).await,
        U256::from(FUNDING - 1_000)
    );
    assert_eq!(
        anvil::balance_of(&provider, token, payee).await,
        U256::from(1_000)
    );
}
