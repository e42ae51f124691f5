//! What the actix-web middleware costs per request, against the same
//! handler without it: the twin of x402-tower's `paywall` bench.
//!
//! `cargo bench -p x402-actix --bench paywall` runs, in one invocation:
//! - `baseline`: the handler with no middleware;
//! - `unprotected`: the middleware in front of a route it does not protect;
//! - `challenge_402`: an unpaid request to a protected route (the 402 path);
//! - `paid`: a paid request through verify and settle, with an in-process
//!   facilitator stand-in (`x402_core::testing::StandIn`) that answers at
//!   once (so this measures the middleware and the engine: translating the
//!   request, decoding, matching, the facilitator calls' plumbing, the
//!   receipt).
//!
//! Compare each path's time with `baseline` in the same run for the ratio.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use actix_web::{
    dev::{fn_service, Service, ServiceRequest, ServiceResponse, Transform},
    test::TestRequest,
    HttpResponse,
};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use x402_actix::PaywallLayer;
use x402_core::testing;

const BODY: &str = "{\"report\":\"the goods\"}";

fn bench(c: &mut Criterion) {
    // actix-web's services are not `Send`: one thread, as an actix worker.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (engine, offer) = rt.block_on(testing::paid_route());
    let handler = || {
        fn_service(|request: ServiceRequest| async move {
            Ok::<_, actix_web::Error>(request.into_response(HttpResponse::Ok().body(BODY)))
        })
    };
    let bare = rt.block_on(async { handler() });
    let layered = rt
        .block_on(PaywallLayer::new(engine).new_transform(handler()))
        .unwrap();

    let mut group = c.benchmark_group("actix_paywall");
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    group.bench_function("baseline", |b| {
        b.to_async(&rt).iter(|| async {
            let request = TestRequest::get().uri("/paid").to_srv_request();
            bare.call(request).await.unwrap()
        });
    });
    group.bench_function("unprotected", |b| {
        b.to_async(&rt).iter(|| async {
            let request = TestRequest::get().uri("/free").to_srv_request();
            layered.call(request).await.unwrap()
        });
    });
    group.bench_function("challenge_402", |b| {
        b.to_async(&rt).iter(|| async {
            let request = TestRequest::get()
                .uri("/paid")
                .insert_header(("host", "localhost"))
                .to_srv_request();
            let response: ServiceResponse<_> = layered.call(request).await.unwrap();
            assert_eq!(response.status().as_u16(), 402);
            response
        });
    });
    group.bench_function("paid", |b| {
        b.to_async(&rt).iter_batched(
            // A fresh payment per call (new nonce), as every real one is:
            // the engine's replay guard refuses a second copy.
            || testing::payment(&offer),
            |header| async {
                let request = TestRequest::get()
                    .uri("/paid")
                    .insert_header(("host", "localhost"))
                    .insert_header(("payment-signature", header))
                    .to_srv_request();
                let response: ServiceResponse<_> = layered.call(request).await.unwrap();
                assert_eq!(response.status().as_u16(), 200);
                response
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
