//! `GET /.well-known/x402/health` over real sockets, on the axum and the
//! actix-web discovery routers of one engine:
//!
//! - the HTTP facilitator stand-in's `/supported` going down (500, a
//!   dropped connection) and coming back, or no longer listing a scheme a
//!   route offers, turns the answer from 200 into 503 and back; both
//!   adapters answer the same bytes every time;
//! - the probe goes past the `HttpFacilitator`'s `/supported` cache and
//!   leaves it alone, so payments keep their cached answer while it is down;
//! - the in-process facilitator on a `ChainLedger` (anvil) whose signer has
//!   no gas reports `lowGas: true` and is not ready, and is ready once
//!   funded.
//!
//! The low-gas test needs `tests/js/node_modules` (`npm ci` in `tests/js`)
//! for anvil.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{net::SocketAddr, thread, time::Duration};

use actix_web::{App, HttpServer};
use alloy_network::TransactionBuilder;
use alloy_primitives::{B256, U256};
use alloy_rpc_types_eth::TransactionRequest;
use serde_json::{json, Value};
use tokio::{net::TcpListener, sync::oneshot};
use x402_core::{
    discovery::HEALTH_PATH,
    local::{ChainLedger, LocalFacilitator},
    Engine, Facilitator, Offer, Route,
};
use x402_tests::{
    actix::StopOnDrop,
    anvil::{self, accounts, Anvil},
    standin::SupportedMode,
    EventLog, StandIn, PAY_TO,
};

const NETWORK: &str = "eip155:84532";

/// An exact and an upto route on Base Sepolia.
fn engine(facilitator: impl Facilitator) -> Engine {
    Engine::builder(facilitator)
        .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.001", PAY_TO)))
        .route(Route::get("/metered").offer(Offer::upto(NETWORK, "2000", PAY_TO)))
        .build()
        .unwrap()
}

/// `x402_axum::Discovery` on a socket, probing on every request.
async fn serve_axum(engine: Engine) -> SocketAddr {
    let router: axum::Router = x402_axum::Discovery::new(engine)
        .health_interval(Duration::ZERO)
        .into_router();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// `x402_actix::Discovery` on a socket (its own thread and actix system),
/// probing on every request; stopped when the test's runtime ends.
async fn serve_actix(engine: Engine) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (started, handle) = oneshot::channel();
    thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = HttpServer::new(move || {
                App::new().service(
                    x402_actix::Discovery::new(engine.clone()).health_interval(Duration::ZERO),
                )
            })
            .workers(1)
            .disable_signals()
            .listen(listener)
            .unwrap()
            .run();
            let _ = started.send(server.handle());
            let _ = server.await;
        });
    });
    let guard = StopOnDrop(handle.await.unwrap());
    tokio::spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    });
    addr
}

/// Status, `Cache-Control` and body of `GET /.well-known/x402/health`.
async fn health(addr: SocketAddr) -> (u16, String, Vec<u8>) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = client
        .get(format!("http://{addr}{HEALTH_PATH}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let cache = response.headers()["cache-control"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(response.headers()["content-type"], "application/json");
    (status, cache, response.bytes().await.unwrap().to_vec())
}

/// Both adapters' answer, which must be the same status, headers and bytes.
async fn both(axum: SocketAddr, actix: SocketAddr) -> (u16, Value) {
    let from_axum = health(axum).await;
    let from_actix = health(actix).await;
    assert_eq!(from_axum.1, "no-store");
    assert_eq!(from_axum.0, from_actix.0, "status");
    assert_eq!(from_axum.1, from_actix.1, "cache-control");
    let (report, twin): (Value, Value) = (
        serde_json::from_slice(&from_axum.2).unwrap(),
        serde_json::from_slice(&from_actix.2).unwrap(),
    );
    assert_eq!(report, twin, "reports differ");
    assert_eq!(from_axum.2, from_actix.2, "bytes differ");
    (from_axum.0, report)
}

/// The `listed` flag of each offered scheme on [`NETWORK`].
fn listed(report: &Value) -> Vec<(String, bool)> {
    report["offers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            assert_eq!(o["network"], NETWORK);
            (
                o["scheme"].as_str().unwrap().to_owned(),
                o["listed"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn supported_going_down_and_back_is_served_by_both_adapters() {
    let stand_in = StandIn::start(EventLog::default()).await;
    let engine = engine(stand_in.facilitator());
    let (axum, actix) = (
        serve_axum(engine.clone()).await,
        serve_actix(engine.clone()).await,
    );

    let (status, report) = both(axum, actix).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report,
        json!({
            "ready": true,
            "facilitator": {
                "reachable": true,
                "probeError": null,
                "lastAnsweredAt": null,
                "lastError": null,
            },
            "offers": [
                {"network": NETWORK, "scheme": "exact", "listed": true, "routes": ["GET /report"]},
                {"network": NETWORK, "scheme": "upto", "listed": true, "routes": ["GET /metered"]},
            ],
            "uncheckedRoutes": [],
            "wallets": [],
        })
    );
    // What payments read: the HttpFacilitator's cached /supported.
    engine.facilitator().supported().await.unwrap();
    let calls = stand_in.supported_calls();

    for (mode, kind) in [
        (SupportedMode::Error500, "status"),
        (SupportedMode::Hangup, "transport"),
    ] {
        stand_in.set_supported(mode);
        let (status, report) = both(axum, actix).await;
        assert_eq!(status, 503, "{report}");
        assert_eq!(report["ready"], false);
        assert_eq!(report["facilitator"]["reachable"], false);
        assert_eq!(report["facilitator"]["probeError"], kind);
        assert_eq!(
            listed(&report),
            [("exact".to_owned(), false), ("upto".to_owned(), false)]
        );
    }
    // Every probe asked the stand-in; none touched the cache payments use.
    assert_eq!(stand_in.supported_calls(), calls + 4);
    engine.facilitator().supported().await.unwrap();
    assert_eq!(stand_in.supported_calls(), calls + 4);

    stand_in.set_supported(SupportedMode::Without("upto".into()));
    let (status, report) = both(axum, actix).await;
    assert_eq!(status, 503, "{report}");
    assert_eq!(report["facilitator"]["reachable"], true);
    assert_eq!(
        listed(&report),
        [("exact".to_owned(), true), ("upto".to_owned(), false)]
    );

    stand_in.set_supported(SupportedMode::Normal);
    let (status, report) = both(axum, actix).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ready"], true);
    assert_eq!(report["facilitator"]["probeError"], Value::Null);
}

/// A private key no test funds: its address starts with no ether.
fn unfunded_key() -> String {
    format!("{:#x}", B256::repeat_byte(0x42))
}

#[tokio::test]
async fn a_chain_ledger_without_gas_is_not_ready_until_funded() {
    let anvil = Anvil::start();
    let key = unfunded_key();
    let ledger = ChainLedger::new(&anvil.url, &key).await.unwrap();
    let facilitator = LocalFacilitator::builder(ledger)
        .network(NETWORK)
        .build()
        .unwrap();
    // Exact only: anvil has no Permit2, so the facilitator offers no upto.
    let engine = Engine::builder(facilitator)
        .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.001", PAY_TO)))
        .build()
        .unwrap();
    let axum = serve_axum(engine).await;
    let signer = anvil::address_of(&key);

    let (status, _, body) = health(axum).await;
    let report: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 503, "{report}");
    assert_eq!(report["ready"], false);
    // Not for want of a listed kind: for want of gas.
    assert_eq!(listed(&report), [("exact".to_owned(), true)]);
    assert_eq!(
        report["wallets"],
        json!([{
            "network": NETWORK,
            "address": signer.to_checksum(None),
            "balanceWei": "0",
            "lowGasThresholdWei": "1000000000000000",
            "lowGas": true,
        }])
    );

    // One ether from anvil's first account.
    let funder = anvil.provider(accounts::KEY_0).await;
    let ether = U256::from(10u64).pow(U256::from(18u64));
    anvil::send(
        &funder,
        TransactionRequest::default()
            .with_to(signer)
            .with_value(ether),
    )
    .await;

    let (status, _, body) = health(axum).await;
    let report: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["wallets"][0]["balanceWei"], ether.to_string());
    assert_eq!(report["wallets"][0]["lowGas"], false);
}
