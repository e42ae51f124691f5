//! What the paywall costs per request, against the same handler without it.
//!
//! `cargo bench -p x402-tower --bench paywall` runs, in one invocation:
//! - `baseline`: the handler with no layer;
//! - `unprotected`: the layer in front of a route it does not protect;
//! - `challenge_402`: an unpaid request to a protected route (the 402 path);
//! - `paid`: a paid request through verify and settle, with an in-process
//!   facilitator stub that answers at once (so this measures the engine:
//!   decoding, matching, the facilitator calls' plumbing, the receipt).
//!
//! Compare each path's time with `baseline` in the same run for the ratio.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::{convert::Infallible, sync::Arc, time::Duration};

use async_trait::async_trait;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use serde_json::json;
use tower::{Service, ServiceExt};
use x402_core::{
    codec,
    facilitator::{Facilitator, FacilitatorError},
    proto::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse},
    Engine, Offer, Route,
};
use x402_tower::PaywallLayer;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

#[derive(Debug)]
struct Instant;

#[async_trait]
impl Facilitator for Instant {
    async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> {
        Ok(VerifyResponse::valid(
            "0x857b06519E91e3A54538791bDbb0E22373e36b66",
        ))
    }
    async fn settle(&self, r: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> {
        Ok(SettleResponse {
            success: true,
            transaction: "0x1234".into(),
            network: r.payment_requirements.network().to_owned(),
            ..SettleResponse::default()
        })
    }
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        Ok(SupportedResponse::default())
    }
}

async fn handler(_: Request<String>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::from("{\"report\":\"the goods\"}")))
}

/// A fresh payment (new nonce, valid for five minutes), as every real one is:
/// the engine's replay guard refuses a second copy.
fn payment_header() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let nonce: [u8; 32] = rand::random();
    let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let payload = json!({
        "x402Version": 2,
        "resource": {"url": "http://localhost/paid", "description": "", "mimeType": ""},
        "accepted": {
            "scheme": "exact", "network": "eip155:84532", "amount": "1000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": PAY_TO,
            "maxTimeoutSeconds": 300, "extra": {"name": "USDC", "version": "2"}
        },
        "payload": {
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66", "to": PAY_TO, "value": "1000",
                "validAfter": "0", "validBefore": (now + 300).to_string(),
                "nonce": format!("0x{nonce}")
            }
        }
    });
    codec::encode(&payload).unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = Engine::builder(Arc::new(Instant) as Arc<dyn Facilitator>)
        .route(Route::get("/paid").offer(Offer::exact("eip155:84532", "$0.001", PAY_TO)))
        .build()
        .unwrap();
    let bare = tower::service_fn(handler);
    let layered = tower::ServiceBuilder::new()
        .layer(PaywallLayer::new(engine))
        .service_fn(handler);

    let mut group = c.benchmark_group("paywall");
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    group.bench_function("baseline", |b| {
        b.to_async(&rt).iter(|| {
            let mut s = bare;
            async move {
                let req = Request::get("/paid").body(String::new()).unwrap();
                s.ready().await.unwrap().call(req).await.unwrap()
            }
        });
    });
    group.bench_function("unprotected", |b| {
        b.to_async(&rt).iter(|| {
            let mut s = layered.clone();
            async move {
                let req = Request::get("/free").body(String::new()).unwrap();
                s.ready().await.unwrap().call(req).await.unwrap()
            }
        });
    });
    group.bench_function("challenge_402", |b| {
        b.to_async(&rt).iter(|| {
            let mut s = layered.clone();
            async move {
                let req = Request::get("/paid")
                    .header("host", "localhost")
                    .body(String::new())
                    .unwrap();
                let res = s.ready().await.unwrap().call(req).await.unwrap();
                assert_eq!(res.status(), 402);
                res
            }
        });
    });
    group.bench_function("paid", |b| {
        b.to_async(&rt).iter_batched(
            payment_header,
            |header| {
                let mut s = layered.clone();
                async move {
                    let req = Request::get("/paid")
                        .header("host", "localhost")
                        .header("payment-signature", header)
                        .body(String::new())
                        .unwrap();
                    let res = s.ready().await.unwrap().call(req).await.unwrap();
                    assert_eq!(res.status(), 200);
                    res
                }
            },
            criterion::BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
