//! Abuse limits over real sockets: each adapter hands the engine the peer's
//! address (axum through `ConnectInfo<SocketAddr>`, actix-web through
//! `peer_addr()`), so a client from 127.0.0.1 that asks for more challenges
//! or sends more bad payments than its budget gets 429 with `Retry-After`.
//! Plain tower over hyper has no peer address; a key function limits it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::json;
use x402_core::{limit::RateLimit, route::RequestView};
use x402_tests::{
    actix::ActixAdapter, adapters::AxumConnectInfoAdapter, client::standard_builder, payment,
    Adapter, Fixture, Reply, TowerAdapter, VerifyMode,
};

const MINUTE: Duration = Duration::from_secs(60);

#[track_caller]
fn assert_limited(reply: &Reply) {
    reply.assert_status(429);
    let retry_after: u64 = reply
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(reply.json(), json!({"error": "rate_limited"}));
}

async fn limits_by_peer<A: Adapter>() {
    let fixture = Fixture::with_engine::<A>(|standin| {
        standard_builder(standin.facilitator()).rate_limit(
            RateLimit::per_client()
                .challenges(3, MINUTE)
                .failed_payments(2, MINUTE),
        )
    })
    .await;

    // Three challenges, then 429.
    let mut row = None;
    for _ in 0..3 {
        let reply = fixture.get("/paid", &[]).await;
        reply.assert_status(402);
        row = Some(reply.payment_required()["accepts"][0].clone());
    }
    let reply = fixture.get("/paid", &[]).await;
    assert_limited(&reply);
    assert_eq!(reply.header("retry-after"), Some("20"));
    // A free path is never limited.
    fixture.get("/free", &[]).await.assert_status(200);

    // Bad payments draw on their own budget: two reach the facilitator.
    let row = row.unwrap();
    fixture.standin.set_verify(VerifyMode::Invalid(
        "invalid_exact_evm_payload_signature".into(),
    ));
    for _ in 0..2 {
        fixture.pay_row("/paid", &row).await.assert_status(402);
    }
    let reply = fixture.pay_row("/paid", &row).await;
    assert_limited(&reply);
    assert_eq!(reply.header("retry-after"), Some("30"));
    let header = payment::v1_header("base-sepolia");
    assert_limited(&fixture.get("/paid", &[("X-PAYMENT", &header)]).await);
    fixture.standin.assert_calls(2, 0);
    // The handler only ever ran for the free path.
    fixture.handler.assert_calls(1);
}

#[tokio::test]
async fn axum_with_connect_info_limits_by_peer() {
    limits_by_peer::<AxumConnectInfoAdapter>().await;
}

#[tokio::test]
async fn actix_limits_by_peer() {
    limits_by_peer::<ActixAdapter>().await;
}

#[tokio::test]
async fn tower_over_hyper_knows_no_peer_but_a_key_function_limits_it() {
    let fixture = Fixture::with_engine::<TowerAdapter>(|standin| {
        standard_builder(standin.facilitator()).rate_limit(
            RateLimit::per_client()
                .challenges(1, MINUTE)
                .key_by(|request: &RequestView<'_>| {
                    let key = request.headers.get("x-api-key")?;
                    Some(key.as_bytes().to_vec())
                }),
        )
    })
    .await;
    // No peer address and no key: not limited.
    for _ in 0..3 {
        fixture.get("/paid", &[]).await.assert_status(402);
    }
    let key = [("x-api-key", "k1")];
    fixture.get("/paid", &key).await.assert_status(402);
    assert_limited(&fixture.get("/paid", &key).await);
}
