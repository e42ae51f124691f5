//! `x402_axum::PaywallLayer` on a single route (`get(handler).layer(..)`),
//! with the `Payment` extractor; unlayered routes stay free.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use axum::{extract::State, routing::get, Json, Router};
use serde_json::{json, Value};
use x402_axum::{Payment, PaywallLayer};
use x402_tests::{
    adapters::bind, client::standard_engine, EventLog, Fixture, StandIn, TestHandler, PAYER, SECRET,
};

async fn paid(State(handler): State<Arc<TestHandler>>, Payment(payment): Payment) -> Json<Value> {
    let _ = handler.respond(&http::Method::GET, "/paid", Some(&payment));
    Json(json!({"secret": SECRET, "payer": payment.payer, "network": payment.network}))
}

async fn free(State(handler): State<Arc<TestHandler>>) -> &'static str {
    let _ = handler.respond(&http::Method::GET, "/free", None);
    "free"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_route_layer() {
    let events = EventLog::default();
    let standin = StandIn::start(events.clone()).await;
    let handler = TestHandler::new(events.clone());
    let engine = standard_engine(standin.facilitator());
    let app = Router::new()
        .route("/paid", get(paid).layer(PaywallLayer::new(engine)))
        .route("/free", get(free))
        .with_state(handler.clone());
    let (listener, base) = bind().await;
    tokio::spawn(async move { axum::serve(listener, app).await });
    let f = Fixture {
        base,
        standin,
        handler,
        events,
        client: x402_tests::client::client(),
    };

    let challenge = f.get("/paid", &[]).await;
    challenge.assert_status(402);
    assert_eq!(challenge.challenge_error(), "payment_required");
    assert!(!challenge.leaks_secret());
    f.handler.assert_calls(0);

    let reply = f.pay_v2("/paid").await;
    reply.assert_status(200);
    assert_eq!(
        reply.json(),
        json!({"secret": SECRET, "payer": PAYER, "network": "eip155:84532"})
    );
    let receipt = reply.decoded("payment-response").expect("receipt");
    assert_eq!(receipt["success"], true);
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 1);

    let free = f.get("/free", &[]).await;
    free.assert_status(200);
    assert_eq!(free.text(), "free");
    f.handler.assert_calls(2);
    f.standin.assert_calls(1, 1);
}
