//! What the paywall costs per request, against the same handler without it.
//!
//! `cargo bench -p x402-tower --bench paywall` runs, in one invocation:
//! - `baseline`: the handler with no layer;
//! - `unprotected`: the layer in front of a route it does not protect;
//! - `challenge_402`: an unpaid request to a protected route (the 402 path);
//! - `paid`: a paid request through verify and settle, with an in-process
//!   facilitator stand-in (`x402_core::testing::StandIn`) that answers at once (so this measures the engine:
//!   decoding, matching, the facilitator calls' plumbing, the receipt).
//!
//! Compare each path's time with `baseline` in the same run for the ratio.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::{convert::Infallible, time::Duration};

use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use tower::{Service, ServiceExt};
use x402_core::testing;
use x402_tower::PaywallLayer;

async fn handler(_: Request<String>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::from("{\"report\":\"the goods\"}")))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (engine, offer) = rt.block_on(testing::paid_route());
    // A fresh payment per call (new nonce), as every real one is: the
    // engine's replay guard refuses a second copy.
    let payment_header = || testing::payment(&offer);
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
