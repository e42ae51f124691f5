//! `FailoverFacilitator`'s metrics (feature `metrics`): which member
//! answered and each breaker transition, counted by member name. (Its
//! behaviour over HTTP is tested in the tests crate's
//! `facilitator_failover.rs`.)

#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusBuilder;
use x402_core::{
    facilitator::{BreakerState, FailoverFacilitator},
    testing::{self, StandIn, VerifyAnswer},
    Engine, Offer, Route,
};

const NETWORK: &str = "eip155:84532";

async fn pay(engine: &Engine) -> StatusCode {
    let challenge = testing::challenge(engine, Request::get("/paid").body(()).unwrap()).await;
    let request = Request::get("/paid")
        .header("payment-signature", testing::payment(&challenge.accepts[0]))
        .body(String::new())
        .unwrap();
    testing::serve(engine, request, |_| async { Response::new(String::new()) })
        .await
        .status()
}

#[test]
fn member_calls_and_breaker_transitions_are_counted() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let primary = Arc::new(StandIn::new().supporting(NETWORK));
    let backup = Arc::new(StandIn::new().supporting(NETWORK));
    primary.set_verify(VerifyAnswer::Unavailable);
    let failover = FailoverFacilitator::builder()
        .member("primary", primary.clone())
        .member("backup", backup.clone())
        .failure_threshold(2)
        .build()
        .unwrap();
    let engine = Engine::builder(failover.clone())
        .route(Route::get("/paid").offer(Offer::exact(NETWORK, "$0.01", testing::PAY_TO)))
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        x402_core::metrics::describe();
        runtime.block_on(async {
            for _ in 0..3 {
                assert_eq!(pay(&engine).await, StatusCode::OK);
            }
        });
    });
    primary.assert_calls(2, 0);
    backup.assert_calls(3, 3);
    assert_eq!(failover.members()[0].state, BreakerState::Open);

    let text = handle.render();
    let has = |line: &str| {
        assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
    };
    has(r#"x402_facilitator_member_calls_total{member="primary",op="verify",outcome="failed"} 2"#);
    has(r#"x402_facilitator_member_calls_total{member="backup",op="verify",outcome="answered"} 3"#);
    has(r#"x402_facilitator_member_calls_total{member="backup",op="settle",outcome="answered"} 3"#);
    has(r#"x402_facilitator_breaker_transitions_total{member="primary",state="open"} 1"#);
}
