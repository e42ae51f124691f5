//! What the actix-web middleware costs per request, against the same app
//! without it: the twin of x402-tower's `paywall` bench.
//!
//! `cargo bench -p x402-actix --bench paywall` runs, in one invocation, an
//! actix-web `App` with routes `GET /paid` and `GET /free` (each answers a
//! short JSON body), requests carrying the five headers a client usually
//! sends:
//! - `baseline`: `GET /paid` to the app without the middleware;
//! - `unprotected`: `GET /free` through the middleware (a route the engine
//!   does not protect);
//! - `challenge_402`: an unpaid `GET /paid` (the 402 path);
//! - `paid`: a paid `GET /paid` through verify and settle, with an
//!   in-process facilitator stand-in (`x402_core::testing::StandIn`) that
//!   answers at once (so this measures the middleware and the engine:
//!   translating the request, decoding, matching, the facilitator calls'
//!   plumbing, the receipt).
//!
//! Compare each path's time with `baseline` in the same run for the ratio.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use actix_web::{
    dev::{Service, ServiceResponse},
    test::{self, TestRequest},
    web, App, HttpResponse,
};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use x402_actix::PaywallLayer;
use x402_core::testing;

const BODY: &str = "{\"report\":\"the goods\"}";

/// A request to `path` with the headers a client usually sends.
fn request(path: &str) -> TestRequest {
    TestRequest::get()
        .uri(path)
        .insert_header(("host", "localhost"))
        .insert_header(("user-agent", "x402-bench/1"))
        .insert_header(("accept", "application/json"))
        .insert_header(("accept-encoding", "gzip, br"))
        .insert_header(("accept-language", "en"))
}

/// `request` through `app`, its status checked.
async fn answered<S, R, B>(app: &S, request: R, status: u16) -> ServiceResponse<B>
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let response = test::call_service(app, request).await;
    assert_eq!(response.status().as_u16(), status);
    response
}

fn bench(c: &mut Criterion) {
    // actix-web's services are not `Send`: one thread, as an actix worker.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (engine, offer) = rt.block_on(testing::paid_route());
    let app = || {
        App::new()
            .route(
                "/paid",
                web::get().to(|| async { HttpResponse::Ok().body(BODY) }),
            )
            .route(
                "/free",
                web::get().to(|| async { HttpResponse::Ok().body(BODY) }),
            )
    };
    let bare = rt.block_on(test::init_service(app()));
    let layered = rt.block_on(test::init_service(app().wrap(PaywallLayer::new(engine))));

    let mut group = c.benchmark_group("actix_paywall");
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    group.bench_function("baseline", |b| {
        b.to_async(&rt)
            .iter(|| answered(&bare, request("/paid").to_request(), 200));
    });
    group.bench_function("unprotected", |b| {
        b.to_async(&rt)
            .iter(|| answered(&layered, request("/free").to_request(), 200));
    });
    group.bench_function("challenge_402", |b| {
        b.to_async(&rt)
            .iter(|| answered(&layered, request("/paid").to_request(), 402));
    });
    group.bench_function("paid", |b| {
        b.to_async(&rt).iter_batched(
            // A fresh payment per call (new nonce), as every real one is:
            // the engine's replay guard refuses a second copy.
            || testing::payment(&offer),
            |header| {
                let paid = request("/paid").insert_header(("payment-signature", header));
                answered(&layered, paid.to_request(), 200)
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
