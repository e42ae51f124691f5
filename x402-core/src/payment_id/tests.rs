#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Value};

#[cfg(feature = "redis")]
use super::store_tests::{redis_url, unique_prefix};
use super::*;
use crate::{
    codec,
    engine::{Decision, Reply},
    route::RequestView,
    testing::{self, SettleAnswer, StandIn, VerifyAnswer},
    Engine, Offer, Route,
};

const ID: &str = "pay_7d5d747be160e280504c099d984bcfe0";

/// `header` (a v2 payment) carrying `id` in its extensions, as the official
/// client's `appendPaymentIdentifierToExtensions` leaves it.
fn with_id(header: &str, id: &str) -> String {
    testing::with_payment_id(header, id, false)
}

fn engine(facilitator: &Arc<StandIn>, ids: PaymentIdentifiers, required: bool) -> Engine {
    let offer = || Offer::exact("eip155:84532", "$0.01", testing::PAY_TO);
    Engine::builder_arc(facilitator.clone())
        .route(
            Route::get("/paid")
                .offer(offer())
                .payment_identifier(required),
        )
        .route(
            Route::get("/other")
                .offer(offer())
                .payment_identifier(false),
        )
        .route(Route::get("/plain").offer(offer()))
        .route(
            Route::get("/early")
                .offer(offer())
                .payment_identifier(false)
                .settle_before_handler(),
        )
        .payment_identifiers(ids)
        .build()
        .unwrap()
}

async fn payment(engine: &Engine, path: &str) -> String {
    let challenge = testing::challenge(engine, Request::get(path).body(()).unwrap()).await;
    testing::pay(&challenge)
}

/// Sends `header` to `path`; the handler counts its runs in `runs` and
/// answers `{"run": n}` (with `status`).
async fn send(
    engine: &Engine,
    path: &str,
    header: &str,
    runs: &Arc<AtomicUsize>,
    status: StatusCode,
) -> Response<Bytes> {
    let request = Request::get(path)
        .header("payment-signature", header)
        .body(String::new())
        .unwrap();
    let runs = runs.clone();
    testing::serve(engine, request, move |_| async move {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        let mut response = Response::new(json!({ "run": run }).to_string());
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        response
    })
    .await
}

/// A payment whose id is malformed: 400 `invalid_payment_identifier`.
async fn refuses_a_bad_id(engine: &Engine, bare: &str, runs: &Arc<AtomicUsize>) {
    let bad = send(
        engine,
        "/paid",
        &with_id(bare, "short"),
        runs,
        StatusCode::OK,
    )
    .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&bad), "invalid_payment_identifier");
}

fn error_of(response: &Response<Bytes>) -> String {
    let body: Value = serde_json::from_slice(response.body()).unwrap();
    body["error"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn declaration_is_upstreams() {
    let d = declaration(true);
    assert_eq!(d["info"], json!({"required": true}));
    assert_eq!(d["schema"]["required"], json!(["required"]));
    assert_eq!(d["schema"]["properties"]["id"]["minLength"], 16);
    assert_eq!(d["schema"]["properties"]["id"]["maxLength"], 128);
    assert_eq!(
        d["schema"]["properties"]["id"]["pattern"],
        "^[a-zA-Z0-9_-]+$"
    );
}

#[test]
fn ids_are_16_to_128_of_the_allowed_characters() {
    assert!(is_valid_id(ID));
    assert!(is_valid_id(&"a".repeat(16)));
    assert!(is_valid_id(&"a".repeat(128)));
    assert!(!is_valid_id(&"a".repeat(15)));
    assert!(!is_valid_id(&"a".repeat(129)));
    assert!(!is_valid_id("pay_7d5d747be160e2.0504c099d984bcfe0"));
    assert!(!is_valid_id("pay_7d5d747be160é280504c099d984bcfe0"));
}

#[test]
fn digest_ignores_key_order_and_whitespace_not_values() {
    let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
    let c: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[2,1]},"b":1}"#).unwrap();
    assert_eq!(PayloadDigest::of_json(&a), PayloadDigest::of_json(&b));
    assert_ne!(PayloadDigest::of_json(&a), PayloadDigest::of_json(&c));
}

#[test]
fn stored_responses_read_back() {
    let mut headers = HeaderMap::new();
    headers.insert("payment-response", HeaderValue::from_static("eyJ9"));
    headers.append("set-cookie", HeaderValue::from_static("a=1"));
    headers.append("set-cookie", HeaderValue::from_bytes(b"b=\xff").unwrap());
    for body in [None, Some(Bytes::from_static(b"{\"run\":1}"))] {
        let stored = StoredResponse {
            status: StatusCode::CREATED,
            headers: headers.clone(),
            body,
        };
        assert_eq!(
            StoredResponse::from_bytes(&stored.to_bytes()).unwrap(),
            stored
        );
    }
    assert!(StoredResponse::from_bytes(b"nonsense").is_err());
}

#[tokio::test]
async fn the_challenge_declares_the_extension() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, PaymentIdentifiers::memory(), false);
    let challenge = testing::challenge(&engine, Request::get("/paid").body(()).unwrap()).await;
    assert_eq!(challenge.extensions[PAYMENT_IDENTIFIER], declaration(false));
}

#[tokio::test]
async fn a_resend_gets_the_stored_response_and_the_handler_does_not_run_again() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, PaymentIdentifiers::memory(), false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);

    let first = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().contains_key(codec::PAYMENT_RESPONSE));
    let again = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.body(), first.body());
    assert_eq!(
        again.headers().get(codec::PAYMENT_RESPONSE),
        first.headers().get(codec::PAYMENT_RESPONSE)
    );
    assert_eq!(again.headers(), first.headers());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Looked up before verifying: the resend reached no facilitator.
    facilitator.assert_calls(1, 1);

    // Even once the payment no longer verifies (it settled).
    facilitator.set_verify(VerifyAnswer::Invalid("nonce_used".into()));
    let third = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(third.body(), first.body());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn another_payload_with_the_same_id_is_a_conflict() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, PaymentIdentifiers::memory(), false);
    let runs = Arc::new(AtomicUsize::new(0));
    let first = with_id(&payment(&engine, "/paid").await, ID);
    let other = with_id(&payment(&engine, "/paid").await, ID);
    assert_eq!(
        send(&engine, "/paid", &first, &runs, StatusCode::OK)
            .await
            .status(),
        StatusCode::OK
    );
    let conflict = send(&engine, "/paid", &other, &runs, StatusCode::OK).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    assert_eq!(error_of(&conflict), "payment_identifier_conflict");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    facilitator.assert_calls(1, 1);
}

#[tokio::test]
async fn ids_are_scoped_per_route() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, PaymentIdentifiers::memory(), false);
    let runs = Arc::new(AtomicUsize::new(0));
    let paid = with_id(&payment(&engine, "/paid").await, ID);
    let other = with_id(&payment(&engine, "/other").await, ID);
    for (path, header) in [("/paid", &paid), ("/other", &other)] {
        let response = send(&engine, path, header, &runs, StatusCode::OK).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn required_and_missing_is_400_and_a_bad_id_too() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, PaymentIdentifiers::memory(), true);
    let runs = Arc::new(AtomicUsize::new(0));
    let bare = payment(&engine, "/paid").await;
    let missing = send(&engine, "/paid", &bare, &runs, StatusCode::OK).await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&missing), "payment_identifier_required");
    refuses_a_bad_id(&engine, &bare, &runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    facilitator.assert_calls(0, 0);
    // Not required: a payment without an id is served as usual.
    let optional = engine_with(&facilitator, false);
    let bare = payment(&optional, "/paid").await;
    let served = send(&optional, "/paid", &bare, &runs, StatusCode::OK).await;
    assert_eq!(served.status(), StatusCode::OK);
}

fn engine_with(facilitator: &Arc<StandIn>, required: bool) -> Engine {
    engine(facilitator, PaymentIdentifiers::memory(), required)
}

#[tokio::test]
async fn routes_without_the_extension_ignore_ids() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/plain").await, ID);
    assert_eq!(
        send(&engine, "/plain", &header, &runs, StatusCode::OK)
            .await
            .status(),
        StatusCode::OK
    );
    // As before the extension: the claim refuses the copy.
    let again = send(&engine, "/plain", &header, &runs, StatusCode::OK).await;
    assert_eq!(again.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_failed_handler_releases_the_id() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let failed = send(
        &engine,
        "/paid",
        &header,
        &runs,
        StatusCode::INTERNAL_SERVER_ERROR,
    )
    .await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    // Released (and so was the claim): the same payment runs again, and
    // is then stored.
    let served = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let replayed = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(replayed.body(), served.body());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_refused_settlement_releases_the_id_but_not_the_claim() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    facilitator.set_settle(SettleAnswer::Refused("insufficient_funds".into()));
    let refused = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    facilitator.set_settle(SettleAnswer::Success);
    // Nothing is replayed: the same payment meets its claim (kept after a
    // settlement attempt), as it would without the extension.
    let copy = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(copy.status(), StatusCode::PAYMENT_REQUIRED);
    // The id is free: a new payment with it is served (no 409).
    let retry = with_id(&payment(&engine, "/paid").await, ID);
    let served = send(&engine, "/paid", &retry, &runs, StatusCode::OK).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_payment_refused_at_verify_releases_the_id() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    facilitator.set_verify(VerifyAnswer::Unavailable);
    let down = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(down.status(), StatusCode::BAD_GATEWAY);
    facilitator.set_verify(VerifyAnswer::Valid);
    // Released before the 502 went out: the retry runs at once.
    let served = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_copies_run_the_handler_once() {
    let facilitator = Arc::new(StandIn::new());
    facilitator.set_delays(Duration::from_millis(50), Duration::from_millis(300));
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (engine, header, runs, barrier) = (
            engine.clone(),
            header.clone(),
            runs.clone(),
            barrier.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            send(&engine, "/paid", &header, &runs, StatusCode::OK).await
        }));
    }
    let mut responses = Vec::new();
    for task in tasks {
        responses.push(task.await.unwrap());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    facilitator.assert_calls(1, 1);
    for response in &responses {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), responses[0].body());
        assert_eq!(
            response.headers().get(codec::PAYMENT_RESPONSE),
            responses[0].headers().get(codec::PAYMENT_RESPONSE)
        );
    }
}

#[tokio::test]
async fn past_the_wait_a_resend_is_told_to_retry() {
    let facilitator = Arc::new(StandIn::new());
    facilitator.set_delays(Duration::ZERO, Duration::from_millis(600));
    let ids = PaymentIdentifiers::memory().wait(Duration::from_millis(100));
    let engine = engine(&facilitator, ids, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let original = {
        let (engine, header, runs) = (engine.clone(), header.clone(), runs.clone());
        tokio::spawn(async move { send(&engine, "/paid", &header, &runs, StatusCode::OK).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let early = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(early.status(), StatusCode::CONFLICT);
    assert_eq!(error_of(&early), "payment_identifier_in_progress");
    assert_eq!(early.headers()["retry-after"], "1");
    let original = original.await.unwrap();
    assert_eq!(original.status(), StatusCode::OK);
    let later = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(later.body(), original.body());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_that_hangs_up_while_settling_still_gets_its_response_on_resend() {
    let facilitator = Arc::new(StandIn::new());
    facilitator.set_delays(Duration::ZERO, Duration::from_millis(300));
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let original = {
        let (engine, header, runs) = (engine.clone(), header.clone(), runs.clone());
        tokio::spawn(async move { send(&engine, "/paid", &header, &runs, StatusCode::OK).await })
    };
    // The handler ran and the settlement started: the client goes away.
    tokio::time::sleep(Duration::from_millis(100)).await;
    original.abort();
    assert!(engine.drain(Duration::from_secs(5)).await);
    assert_eq!(facilitator.settle_calls(), 1);
    let resend = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(resend.status(), StatusCode::OK);
    assert!(resend.headers().contains_key(codec::PAYMENT_RESPONSE));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_over_the_cap_is_not_kept_but_the_receipt_is() {
    let facilitator = Arc::new(StandIn::new());
    let ids = PaymentIdentifiers::memory().max_body_bytes(4);
    let engine = engine(&facilitator, ids, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let first = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    let again = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert!(again.body().is_empty());
    assert_eq!(again.headers()[X_PAYMENT_IDENTIFIER_BODY], "omitted");
    assert_eq!(
        again.headers().get(codec::PAYMENT_RESPONSE),
        first.headers().get(codec::PAYMENT_RESPONSE)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_route_that_settles_first_keeps_status_and_receipt() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/early").await, ID);
    let first = send(&engine, "/early", &header, &runs, StatusCode::OK).await;
    assert_eq!(first.status(), StatusCode::OK);
    let again = send(&engine, "/early", &header, &runs, StatusCode::OK).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()[X_PAYMENT_IDENTIFIER_BODY], "omitted");
    assert_eq!(
        again.headers().get(codec::PAYMENT_RESPONSE),
        first.headers().get(codec::PAYMENT_RESPONSE)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    facilitator.assert_calls(1, 1);
}

/// A store that always fails.
#[derive(Debug)]
struct Down;

#[async_trait::async_trait]
impl PaymentIdStore for Down {
    async fn reserve(
        &self,
        _: &str,
        _: &PayloadDigest,
        _: SystemTime,
    ) -> Result<Reservation, PaymentIdStoreError> {
        Err(PaymentIdStoreError::backend("connection refused"))
    }
    async fn complete(
        &self,
        _: &str,
        _: &PayloadDigest,
        _: &StoredResponse,
        _: SystemTime,
    ) -> Result<(), PaymentIdStoreError> {
        Err(PaymentIdStoreError::backend("connection refused"))
    }
    async fn release(&self, _: &str, _: &PayloadDigest) -> Result<(), PaymentIdStoreError> {
        Err(PaymentIdStoreError::backend("connection refused"))
    }
}

#[tokio::test]
async fn a_store_that_is_down_fails_closed() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, PaymentIdentifiers::new(Down), false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let down = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(error_of(&down), "payment_identifier_unavailable");
    assert!(down.headers().contains_key("retry-after"));
    assert!(!String::from_utf8_lossy(down.body()).contains("refused"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    facilitator.assert_calls(0, 0);
    // A payment without an id never asks the store: it is served; a bad id
    // is refused before the store too.
    let bare = payment(&engine, "/paid").await;
    refuses_a_bad_id(&engine, &bare, &runs).await;
    let served = send(&engine, "/paid", &bare, &runs, StatusCode::OK).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    facilitator.assert_calls(1, 1);
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_backed_engines_share_ids_and_replay() {
    let prefix = unique_prefix();
    let store = || async {
        RedisPaymentIdStore::connect(&redis_url())
            .await
            .unwrap()
            .with_prefix(prefix.clone())
    };
    // Two instances, one store: the copy sent to the second is replayed.
    let facilitator = Arc::new(StandIn::new());
    let first = engine(&facilitator, PaymentIdentifiers::new(store().await), false);
    let second = engine(&facilitator, PaymentIdentifiers::new(store().await), false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&first, "/paid").await, ID);
    let original = send(&first, "/paid", &header, &runs, StatusCode::OK).await;
    let resend = send(&second, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(resend.status(), StatusCode::OK);
    assert_eq!(resend.body(), original.body());
    assert_eq!(resend.headers(), original.headers());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let other = with_id(&payment(&second, "/paid").await, ID);
    let conflict = send(&second, "/paid", &other, &runs, StatusCode::OK).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn the_engine_is_driven_the_same_by_hand() {
    // An integrator's loop: a replay is a `Decision::Respond`.
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let request = Request::get("/paid")
        .header("payment-signature", &header)
        .body(())
        .unwrap();
    let (parts, ()) = request.into_parts();
    let Decision::Paid(paid) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("not paid");
    };
    let reply = paid
        .finish(Ok::<_, std::convert::Infallible>(Response::new(
            http_body_util::Full::new(Bytes::from_static(b"hi")),
        )))
        .await
        .unwrap();
    assert!(matches!(reply, Reply::Handler(_)));
    let Decision::Respond(replayed) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("not replayed");
    };
    assert_eq!(replayed.body(), &Bytes::from_static(b"hi"));
}

#[tokio::test]
async fn a_client_that_hangs_up_before_its_handler_answered_frees_the_id() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let started = Arc::new(tokio::sync::Notify::new());
    let task = {
        let (engine, header, started) = (engine.clone(), header.clone(), started.clone());
        tokio::spawn(async move {
            let request = Request::get("/paid")
                .header("payment-signature", &header)
                .body(String::new())
                .unwrap();
            testing::serve(&engine, request, move |_| async move {
                started.notify_one();
                tokio::time::sleep(Duration::from_secs(30)).await;
                Response::new(String::new())
            })
            .await
        })
    };
    started.notified().await;
    task.abort();
    let _ = task.await;
    assert!(engine.drain(Duration::from_secs(5)).await);
    // Nothing settled; the id is free for another payment.
    let runs = Arc::new(AtomicUsize::new(0));
    let retry = with_id(&payment(&engine, "/paid").await, ID);
    let served = send(&engine, "/paid", &retry, &runs, StatusCode::OK).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(facilitator.settle_calls(), 1);
}

#[tokio::test]
async fn an_unknown_settlement_stores_nothing_and_the_claim_refuses_the_copy() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    facilitator.set_settle(SettleAnswer::Unavailable);
    let unknown = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(unknown.status(), StatusCode::BAD_GATEWAY);
    facilitator.set_settle(SettleAnswer::Success);
    let copy = send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    assert_eq!(copy.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The memory store, recording the expiry of what it is asked to keep.
#[derive(Debug, Default)]
struct Recording {
    inner: MemoryPaymentIdStore,
    kept_until: std::sync::Mutex<Vec<SystemTime>>,
}

#[async_trait::async_trait]
impl PaymentIdStore for Recording {
    async fn reserve(
        &self,
        key: &str,
        digest: &PayloadDigest,
        until: SystemTime,
    ) -> Result<Reservation, PaymentIdStoreError> {
        self.inner.reserve(key, digest, until).await
    }
    async fn complete(
        &self,
        key: &str,
        digest: &PayloadDigest,
        response: &StoredResponse,
        expires_at: SystemTime,
    ) -> Result<(), PaymentIdStoreError> {
        self.kept_until.lock().unwrap().push(expires_at);
        self.inner.complete(key, digest, response, expires_at).await
    }
    async fn release(&self, key: &str, digest: &PayloadDigest) -> Result<(), PaymentIdStoreError> {
        self.inner.release(key, digest).await
    }
}

#[tokio::test]
async fn a_settled_response_is_kept_at_least_as_long_as_its_claim() {
    let facilitator = Arc::new(StandIn::new());
    let store = Arc::new(Recording::default());
    let ids = PaymentIdentifiers::new_arc(store.clone()).retention(Duration::ZERO);
    let engine = engine(&facilitator, ids, false);
    let runs = Arc::new(AtomicUsize::new(0));
    let header = with_id(&payment(&engine, "/paid").await, ID);
    let before = SystemTime::now();
    send(&engine, "/paid", &header, &runs, StatusCode::OK).await;
    let kept = store.kept_until.lock().unwrap().clone();
    assert_eq!(kept.len(), 1);
    // The claim's: validBefore (now + 600 s) + 60 s, at least 900 s from
    // now (in whole seconds, as the claim counts it).
    let claim = before + crate::claim::MIN_CLAIM_LIFETIME - Duration::from_secs(1);
    assert!(kept[0] >= claim, "{kept:?}");
}

#[tokio::test]
async fn a_v1_payment_has_no_id() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine_with(&facilitator, true);
    let runs = Arc::new(AtomicUsize::new(0));
    // A v1 payment cannot carry extensions: a required id is missing.
    let v1 = json!({
        "x402Version": 1, "scheme": "exact", "network": "base-sepolia",
        "payload": {"signature": "0x00", "authorization": {}}
    });
    let request = Request::get("/paid")
        .header("x-payment", codec::encode(&v1).unwrap())
        .body(String::new())
        .unwrap();
    let runs2 = runs.clone();
    let response = testing::serve(&engine, request, move |_| async move {
        runs2.fetch_add(1, Ordering::SeqCst);
        Response::new(String::new())
    })
    .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&response), "payment_identifier_required");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
