//! actix-specific behaviour of the middleware and extractors. The payment
//! outcomes themselves are covered, for every adapter alike, by the
//! conformance suite in the `tests` crate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    future::ready,
    sync::{Arc, Mutex},
};

use actix_web::{
    body::{self, BoxBody},
    dev::{Service, ServiceResponse},
    error, test,
    web::{self, Bytes},
    App, HttpResponse,
};
use async_trait::async_trait;
use serde_json::json;
use x402_core::{
    hooks::{CancelReason, PaymentContext, PaymentHooks},
    testing::{self, SettleAnswer, StandIn, PAYER, PAY_TO},
};

use crate::{Engine, MissingPaywall, Offer, Payment, PaywallLayer, Route};

const SECRET: &str = "the paid goods";

/// Records why payments were canceled.
#[derive(Debug, Clone, Default)]
struct Cancels(Arc<Mutex<Vec<CancelReason>>>);

#[async_trait]
impl PaymentHooks for Cancels {
    async fn on_payment_canceled(&self, _: &PaymentContext<'_>, reason: CancelReason) {
        self.0.lock().unwrap().push(reason);
    }
}

impl Cancels {
    fn reasons(&self) -> Vec<CancelReason> {
        self.0.lock().unwrap().clone()
    }
}

fn offer() -> Offer {
    Offer::exact("eip155:84532", "$0.001", PAY_TO)
}

fn engine(
    stub: &Arc<StandIn>,
    cancels: &Cancels,
    routes: impl IntoIterator<Item = Route>,
) -> Engine {
    Engine::builder(Arc::clone(stub))
        .routes(routes)
        .hooks(cancels.clone())
        .build()
        .unwrap()
}

/// A fresh payment (its own nonce, valid for ten minutes): the engine
/// claims each authorization once.
fn payment_header() -> String {
    payment_header_with(&json!({"name": "USDC", "version": "2"}))
}

/// A payment for [`offer`] as the 402 of a route whose offer carries
/// `extra` (a settle-first route adds `paymentFlow: "upfront"`).
fn payment_header_with(extra: &serde_json::Value) -> String {
    let requirement = serde_json::from_value(json!({
        "scheme": "exact", "network": "eip155:84532", "amount": "1000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": PAY_TO,
        "maxTimeoutSeconds": 300, "extra": extra
    }))
    .unwrap();
    testing::payment(&requirement)
}

fn paid_get(uri: &str) -> test::TestRequest {
    test::TestRequest::get()
        .uri(uri)
        .insert_header(("payment-signature", payment_header()))
}

async fn paid_handler(Payment(payment): Payment) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("x-handler", "yes"))
        .append_header(("x-many", "1"))
        .append_header(("x-many", "2"))
        .body(format!(
            "{SECRET} for {}",
            payment.payer.unwrap_or_default()
        ))
}

async fn text(response: ServiceResponse<impl actix_web::body::MessageBody>) -> String {
    let body = body::to_bytes(response.into_body()).await.ok().unwrap();
    String::from_utf8(body.to_vec()).unwrap()
}

#[actix_web::test]
async fn paid_request_gets_the_payment_the_body_and_the_receipt() {
    let (stub, cancels) = (Arc::new(StandIn::new()), Cancels::default());
    let app = test::init_service(
        App::new()
            .wrap(PaywallLayer::new(engine(
                &stub,
                &cancels,
                [Route::get("/paid").offer(offer())],
            )))
            .route("/paid", web::get().to(paid_handler)),
    )
    .await;

    let response = test::call_service(&app, paid_get("/paid").to_request()).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers();
    assert!(headers.contains_key("payment-response"));
    assert!(headers.contains_key("access-control-expose-headers"));
    assert_eq!(headers.get("x-handler").unwrap(), "yes");
    let many: Vec<_> = headers.get_all("x-many").collect();
    assert_eq!(
        many,
        ["1", "2"],
        "the handler's headers survive the round trip"
    );
    assert_eq!(text(response).await, format!("{SECRET} for {PAYER}"));
    assert_eq!(stub.settle_calls(), 1);
    assert!(cancels.reasons().is_empty());
}

#[actix_web::test]
async fn scope_wrap_guards_only_the_scope() {
    let (stub, cancels) = (Arc::new(StandIn::new()), Cancels::default());
    // The engine protects every path; the scope decides which requests
    // reach the middleware at all.
    let engine = engine(&stub, &cancels, [Route::get("/*").offer(offer())]);
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/api")
                    .wrap(PaywallLayer::new(engine))
                    .route("/report", web::get().to(paid_handler)),
            )
            .route("/health", web::get().to(HttpResponse::Ok)),
    )
    .await;

    let request = test::TestRequest::get().uri("/api/report").to_request();
    let response = test::call_service(&app, request).await;
    assert_eq!(response.status(), 402);
    assert!(response.headers().contains_key("payment-required"));

    let request = test::TestRequest::get().uri("/health").to_request();
    let response = test::call_service(&app, request).await;
    assert_eq!(response.status(), 200);
    assert!(!response.headers().contains_key("payment-required"));

    let response = test::call_service(&app, paid_get("/api/report").to_request()).await;
    assert_eq!(response.status(), 200);
    assert!(text(response).await.starts_with(SECRET));
}

#[actix_web::test]
async fn resource_wrap_guards_the_resource() {
    let (stub, cancels) = (Arc::new(StandIn::new()), Cancels::default());
    let engine = engine(&stub, &cancels, [Route::get("/paid").offer(offer())]);
    let app = test::init_service(
        App::new().service(
            web::resource("/paid")
                .wrap(PaywallLayer::new(engine))
                .route(web::get().to(paid_handler)),
        ),
    )
    .await;

    let request = test::TestRequest::get().uri("/paid").to_request();
    let response = test::call_service(&app, request).await;
    assert_eq!(response.status(), 402);
    assert!(!text(response).await.contains(SECRET));

    let response = test::call_service(&app, paid_get("/paid").to_request()).await;
    assert_eq!(response.status(), 200);
}

#[actix_web::test]
async fn extractor_without_the_middleware_is_a_500_naming_it() {
    let app = test::init_service(
        App::new()
            .route("/paid", web::get().to(paid_handler))
            .route(
                "/maybe",
                web::get().to(|payment: Option<Payment>| async move {
                    HttpResponse::Ok().body(if payment.is_some() { "some" } else { "none" })
                }),
            ),
    )
    .await;

    let request = test::TestRequest::get().uri("/paid").to_request();
    let response = test::call_service(&app, request).await;
    assert_eq!(response.status(), 500);
    let body = text(response).await;
    assert_eq!(body, MissingPaywall.to_string());
    assert!(body.contains("PaywallLayer"));

    let request = test::TestRequest::get().uri("/maybe").to_request();
    let response = test::call_service(&app, request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(text(response).await, "none");
}

#[actix_web::test]
async fn handler_error_is_delivered_unchanged_and_not_settled() {
    let (stub, cancels) = (Arc::new(StandIn::new()), Cancels::default());
    let app = test::init_service(
        App::new()
            .wrap(PaywallLayer::new(engine(
                &stub,
                &cancels,
                [Route::get("/paid").offer(offer())],
            )))
            .route(
                "/paid",
                web::get().to(|_: Payment| async {
                    Err::<HttpResponse, _>(error::ErrorConflict("already done"))
                }),
            ),
    )
    .await;

    let response = test::call_service(&app, paid_get("/paid").to_request()).await;
    assert_eq!(response.status(), 409);
    assert!(!response.headers().contains_key("payment-response"));
    assert_eq!(text(response).await, "already done");
    assert_eq!(stub.verify_calls(), 1);
    assert_eq!(stub.settle_calls(), 0);
    assert!(matches!(
        cancels.reasons()[..],
        [CancelReason::HandlerFailed(status)] if status == 409
    ));
}

#[actix_web::test]
async fn inner_middleware_error_is_passed_on_and_the_payment_released() {
    let (stub, cancels) = (Arc::new(StandIn::new()), Cancels::default());
    let app = test::init_service(
        App::new()
            .wrap_fn(|_, _| {
                ready(Err::<ServiceResponse<BoxBody>, _>(error::ErrorBadGateway(
                    "down",
                )))
            })
            .wrap(PaywallLayer::new(engine(
                &stub,
                &cancels,
                [Route::get("/paid").offer(offer())],
            )))
            .route("/paid", web::get().to(paid_handler)),
    )
    .await;

    let result = app.call(paid_get("/paid").to_request()).await;
    let error = result.expect_err("the inner error is passed on");
    assert_eq!(error.as_response_error().status_code(), 502);
    assert_eq!(stub.settle_calls(), 0);
    assert_eq!(cancels.reasons(), [CancelReason::HandlerAborted]);
}

#[actix_web::test]
async fn failing_body_is_not_settled() {
    let (stub, cancels) = (Arc::new(StandIn::new()), Cancels::default());
    let app = test::init_service(
        App::new()
            .wrap(PaywallLayer::new(engine(
                &stub,
                &cancels,
                [Route::get("/paid").offer(offer())],
            )))
            .route(
                "/paid",
                web::get().to(|| async {
                    let chunks = [
                        Ok(Bytes::from_static(SECRET.as_bytes())),
                        Err(std::io::Error::other("disk on fire")),
                    ];
                    HttpResponse::Ok().streaming(futures_util::stream::iter(chunks))
                }),
            ),
    )
    .await;

    let response = test::call_service(&app, paid_get("/paid").to_request()).await;
    assert_eq!(response.status(), 500);
    let body = text(response).await;
    assert!(!body.contains(SECRET));
    assert!(!body.contains("disk on fire"));
    assert_eq!(stub.settle_calls(), 0);
    assert_eq!(cancels.reasons(), [CancelReason::HandlerAborted]);
}

#[actix_web::test]
async fn refused_settlement_withholds_the_body() {
    let stub = Arc::new(StandIn::new());
    stub.set_settle(SettleAnswer::Refused("insufficient_funds".into()));
    let cancels = Cancels::default();
    let app = test::init_service(
        App::new()
            .wrap(PaywallLayer::new(engine(
                &stub,
                &cancels,
                [Route::get("/paid").offer(offer())],
            )))
            .route("/paid", web::get().to(paid_handler)),
    )
    .await;

    let response = test::call_service(&app, paid_get("/paid").to_request()).await;
    assert_eq!(response.status(), 402);
    assert!(response.headers().contains_key("payment-response"));
    assert!(!response.headers().contains_key("x-handler"));
    assert!(!text(response).await.contains(SECRET));
    assert_eq!(stub.settle_calls(), 1);
}

#[actix_web::test]
async fn settle_before_handler_streams_the_body_with_the_receipt() {
    let (stub, cancels) = (Arc::new(StandIn::new()), Cancels::default());
    let settled_before = Arc::new(Mutex::new(None));
    let seen = settled_before.clone();
    let counter = stub.clone();
    let app = test::init_service(
        App::new()
            .wrap(PaywallLayer::new(engine(
                &stub,
                &cancels,
                [Route::get("/stream").offer(offer()).settle_before_handler()],
            )))
            .route(
                "/stream",
                web::get().to(move || {
                    *seen.lock().unwrap() = Some(counter.settle_calls());
                    let chunks = [
                        Ok::<_, std::io::Error>(Bytes::from_static(b"one;")),
                        Ok(Bytes::from_static(b"two")),
                    ];
                    async move { HttpResponse::Ok().streaming(futures_util::stream::iter(chunks)) }
                }),
            ),
    )
    .await;

    // The 402 of a settle-first route announces the upfront flow, and a
    // client pays what it was offered.
    let upfront = payment_header_with(&json!({
        "name": "USDC", "version": "2", "paymentFlow": "upfront"
    }));
    let request = test::TestRequest::get()
        .uri("/stream")
        .insert_header(("payment-signature", upfront));
    let response = test::call_service(&app, request.to_request()).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("payment-response"));
    assert_eq!(text(response).await, "one;two");
    assert_eq!(
        *settled_before.lock().unwrap(),
        Some(1),
        "settled before the handler ran"
    );
}

/// The future the middleware boxes for a request the engine decides stays
/// within 1 032 bytes, the largest block glibc's allocator serves from a
/// thread's own cache (x402-core's `BoxedDecision` says why that matters).
/// It took 2 280 bytes once, on every request, free routes included; a
/// request no route protects now has none.
#[actix_web::test]
async fn the_boxed_future_fits_the_allocators_thread_cache() {
    use actix_web::dev::{fn_service, ServiceRequest, Transform};

    let stub = Arc::new(StandIn::new());
    let layer = PaywallLayer::new(engine(
        &stub,
        &Cancels::default(),
        [Route::get("/paid").offer(offer())],
    ));
    let inner = fn_service(|request: ServiceRequest| async move {
        Ok::<_, error::Error>(request.into_response(HttpResponse::Ok().body(SECRET)))
    });
    let paywall = layer.new_transform(inner).await.unwrap();
    let free = paywall.call(test::TestRequest::get().uri("/free").to_srv_request());
    assert_eq!(free.boxed_size(), None, "a free request boxed a future");
    assert_eq!(free.await.unwrap().status().as_u16(), 200);
    for request in [test::TestRequest::get().uri("/paid"), paid_get("/paid")] {
        let future = paywall.call(request.to_srv_request());
        let size = future
            .boxed_size()
            .expect("a protected request is the engine's");
        assert!(size <= 1032, "{size} bytes");
        assert!(future.await.unwrap().status().as_u16() < 500);
    }
    stub.assert_calls(1, 1);
}
