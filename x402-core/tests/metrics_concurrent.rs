//! Metrics (feature `metrics`) under concurrency: settlements racing on
//! several threads add up to the exact settled total. Its own test binary,
//! because it installs the process-wide recorder.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use http::{Response, StatusCode};
use metrics_exporter_prometheus::PrometheusBuilder;
use x402_core::{
    testing::{self, StandIn},
    Engine, Offer, Route,
};

const NETWORK: &str = "eip155:84532";
const USDC: &str = "0x036cbd53842c5426634e7929541ec2318f3dcf7e";
const PAYMENTS: usize = 800;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_settlements_add_up_to_the_settled_total() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();
    let engine = Engine::builder(StandIn::new())
        .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.001", testing::PAY_TO)))
        .build()
        .unwrap();
    let row = testing::challenge(&engine, http::Request::get("/report").body(()).unwrap())
        .await
        .accepts
        .remove(0);
    let start = Arc::new(tokio::sync::Barrier::new(PAYMENTS));
    let tasks: Vec<_> = (0..PAYMENTS)
        .map(|_| {
            let (engine, start) = (engine.clone(), start.clone());
            let payment = testing::payment(&row);
            tokio::spawn(async move {
                start.wait().await;
                let request = http::Request::get("/report")
                    .header("payment-signature", payment)
                    .body(())
                    .unwrap();
                testing::serve(&engine, request, |_| async { Response::new(String::new()) })
                    .await
                    .status()
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    let text = handle.render();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("x402_amount_settled_total{")
                && l.contains(&format!("network=\"{NETWORK}\""))
                && l.contains(&format!("asset=\"{USDC}\""))
        })
        .unwrap_or_else(|| panic!("no settled total in:\n{text}"));
    let total: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    // $0.001 of a 6-decimal token is 1 000 atomic units.
    assert_eq!(total, 1_000 * PAYMENTS as u64);
}
