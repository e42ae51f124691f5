//! Payment flows (#20): `settlement_pending` retried then `settlement_unknown`,
//! the facilitator's `extensions` and `EXTENSION-RESPONSES`, settle-first
//! routes announced as `paymentFlow: "upfront"`, and NEAR payments claimed
//! once. Through `HttpFacilitator` to a scripted facilitator stand-in, a real
//! HTTP server on loopback, and the engine driven as an adapter drives it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderValue, StatusCode, Uri},
    response::{IntoResponse, Response},
    Router,
};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use http::Request;
use serde_json::{json, Value};
use x402_core::{
    codec,
    engine::PendingRetry,
    facilitator::{FacilitatorError, HttpFacilitator},
    hooks::{PaymentContext, PaymentHooks},
    proto::{v2::PaymentRequired, SettleResponse},
    route::Asset,
    testing,
    webhook::{WebhookSecret, Webhooks},
    Engine, EngineBuilder, Offer, Route,
};

// ---------------------------------------------------------------------------
// The scripted facilitator.

/// One `/settle` answer: status, JSON body, `EXTENSION-RESPONSES` header.
#[derive(Clone)]
struct Answer {
    status: u16,
    body: Value,
    extension_responses: Option<&'static str>,
}

fn pending(transaction: &str) -> Answer {
    Answer {
        status: 200,
        body: json!({
            "success": false, "errorReason": "settlement_pending",
            "errorMessage": "receipt not yet available",
            "transaction": transaction, "network": "eip155:84532", "payer": testing::PAYER,
        }),
        extension_responses: None,
    }
}

fn settled() -> Answer {
    Answer {
        status: 200,
        body: json!({
            "success": true, "transaction": TX, "network": "eip155:84532", "payer": testing::PAYER,
        }),
        extension_responses: None,
    }
}

const TX: &str = "0x5e771e0000000000000000000000000000000000000000000000000000005e77";

type Script = dyn Fn(usize) -> Answer + Send + Sync;

struct Facilitator {
    script: Box<Script>,
    settles: AtomicUsize,
    verifies: AtomicUsize,
}

async fn facilitator(State(f): State<Arc<Facilitator>>, uri: Uri, _body: Bytes) -> Response {
    match uri.path() {
        "/verify" => {
            f.verifies.fetch_add(1, Ordering::SeqCst);
            axum::Json(json!({"isValid": true, "payer": testing::PAYER})).into_response()
        }
        "/settle" => {
            let nth = f.settles.fetch_add(1, Ordering::SeqCst) + 1;
            let answer = (f.script)(nth);
            let mut response = (
                StatusCode::from_u16(answer.status).unwrap(),
                axum::Json(answer.body),
            )
                .into_response();
            if let Some(value) = answer.extension_responses {
                response
                    .headers_mut()
                    .insert("EXTENSION-RESPONSES", HeaderValue::from_static(value));
            }
            response
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A stand-in on 127.0.0.1 answering the `n`th `/settle` with `script(n)`.
struct StandIn {
    url: String,
    state: Arc<Facilitator>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    async fn start(script: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Self {
        let state = Arc::new(Facilitator {
            script: Box::new(script),
            settles: AtomicUsize::new(0),
            verifies: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .fallback(facilitator)
            .with_state(Arc::clone(&state));
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, state, task }
    }

    fn client(&self) -> HttpFacilitator {
        HttpFacilitator::builder(&self.url)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }

    fn settles(&self) -> usize {
        self.state.settles.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------
// The seller.

/// What the hooks saw: settle failures and receipts.
#[derive(Default)]
struct Seen {
    failures: Mutex<Vec<String>>,
    receipts: Mutex<Vec<SettleResponse>>,
}

/// The hooks that fill a [`Seen`].
struct Recorder(Arc<Seen>);

#[async_trait]
impl PaymentHooks for Recorder {
    fn inspects_requests(&self) -> bool {
        false
    }

    async fn after_settle(&self, _ctx: &PaymentContext<'_>, receipt: &SettleResponse) {
        self.0.receipts.lock().unwrap().push(receipt.clone());
    }

    async fn on_settle_failure(
        &self,
        _ctx: &PaymentContext<'_>,
        error: &FacilitatorError,
    ) -> Option<SettleResponse> {
        self.0.failures.lock().unwrap().push(match error {
            FacilitatorError::SettlementPending {
                transaction,
                attempts,
            } => format!("pending {transaction} after {attempts}"),
            other => other.to_string(),
        });
        None
    }
}

struct Seller {
    engine: Engine,
    runs: Arc<AtomicUsize>,
    seen: Arc<Seen>,
    webhooks: Webhooks,
}

const ROUTE: &str = "/report";

fn make_seller(
    facilitator: HttpFacilitator,
    route: Route,
    tune: impl FnOnce(EngineBuilder) -> EngineBuilder,
) -> Seller {
    let seen = Arc::new(Seen::default());
    // Events are recorded in the webhook outbox; nothing delivers them here.
    let webhooks = Webhooks::builder("http://127.0.0.1:9/hook", [WebhookSecret::generate()])
        .build()
        .unwrap();
    let builder = Engine::builder(facilitator)
        .route(route)
        .hooks(Recorder(seen.clone()))
        .hooks(webhooks.hooks());
    Seller {
        engine: tune(builder).build().unwrap(),
        runs: Arc::new(AtomicUsize::new(0)),
        seen,
        webhooks,
    }
}

fn exact_route() -> Route {
    Route::get(ROUTE).offer(Offer::exact("eip155:84532", "$0.01", testing::PAY_TO))
}

impl Seller {
    async fn challenge(&self) -> PaymentRequired {
        testing::challenge(&self.engine, Request::get(ROUTE).body(()).unwrap()).await
    }

    async fn send(&self, header: &str) -> http::Response<Bytes> {
        let runs = self.runs.clone();
        let request = Request::get(ROUTE)
            .header("payment-signature", header)
            .body(())
            .unwrap();
        testing::serve(&self.engine, request, move |_| async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            http::Response::new(format!("{{\"secret\":\"paid content\",\"run\":{n}}}"))
        })
        .await
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// Every webhook event recorded so far: (type, data).
    async fn events(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        while let Some(message) = self
            .webhooks
            .outbox()
            .claim(Duration::from_secs(60))
            .await
            .unwrap()
        {
            let body: Value = serde_json::from_str(&message.body).unwrap();
            out.push((message.event_type.clone(), body["data"].clone()));
        }
        out
    }
}

fn receipt(response: &http::Response<Bytes>) -> Value {
    let header = response.headers().get("payment-response").expect("receipt");
    codec::decode(header.as_bytes(), 1 << 16).unwrap()
}

fn error_of(response: &http::Response<Bytes>) -> Value {
    if let Some(header) = response.headers().get("payment-required") {
        let challenge: Value = codec::decode(header.as_bytes(), 1 << 20).unwrap();
        return challenge["error"].clone();
    }
    let body: Value = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    body["error"].clone()
}

// ---------------------------------------------------------------------------
// settlement_pending.

#[tokio::test]
async fn pending_then_settled_is_one_handler_run_and_a_receipt() {
    let standin = StandIn::start(|n| if n == 1 { pending(TX) } else { settled() }).await;
    let seller = make_seller(standin.client(), exact_route(), |b| b);
    let challenge = seller.challenge().await;
    let response = seller.send(&testing::pay(&challenge)).await;

    assert_eq!(response.status(), StatusCode::OK);
    assert!(String::from_utf8_lossy(response.body()).contains("paid content"));
    let receipt = receipt(&response);
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["transaction"], TX);
    assert_eq!(seller.runs(), 1);
    // Upstream's retry: the identical request once more, at once.
    assert_eq!(standin.settles(), 2);
    assert!(seller.seen.failures.lock().unwrap().is_empty());
    let events = seller.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "payment.settled");
}

#[tokio::test]
async fn pending_under_an_error_status_is_retried_too() {
    // Upstream reads a non-2xx body with `success` as the settle answer
    // (its `SettleError`), and retries it the same.
    let standin = StandIn::start(|n| {
        if n == 1 {
            Answer {
                status: 500,
                ..pending(TX)
            }
        } else {
            settled()
        }
    })
    .await;
    let seller = make_seller(standin.client(), exact_route(), |b| b);
    let challenge = seller.challenge().await;
    let response = seller.send(&testing::pay(&challenge)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(standin.settles(), 2);
    assert_eq!(seller.runs(), 1);
}

#[tokio::test]
async fn pending_forever_is_settlement_unknown_with_the_claim_kept() {
    let standin = StandIn::start(|_| pending(TX)).await;
    let retry = PendingRetry::new(3).delay(Duration::from_millis(40));
    let seller = make_seller(standin.client(), exact_route(), |b| {
        b.settlement_pending_retry(retry)
    });
    let challenge = seller.challenge().await;
    let header = testing::pay(&challenge);
    let started = Instant::now();
    let response = seller.send(&header).await;

    // 502, the handler's body withheld.
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(error_of(&response), "settlement_unknown");
    assert!(!String::from_utf8_lossy(response.body()).contains("paid content"));
    assert_eq!(seller.runs(), 1);
    // The first answer and three retries, 40 + 80 + 160 ms apart.
    assert_eq!(standin.settles(), 4);
    assert!(started.elapsed() >= Duration::from_millis(280));
    // Recorded: the hooks were told, with the transaction to reconcile, and
    // the webhook outbox holds payment.settlement_unknown.
    assert_eq!(
        *seller.seen.failures.lock().unwrap(),
        [format!("pending {TX} after 4")]
    );
    let events = seller.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "payment.settlement_unknown");
    assert_eq!(events[0].1["errorReason"], "settlement_pending");
    assert_eq!(events[0].1["transaction"], TX);

    // The claim is kept: the same payment again is a replay, and neither
    // the handler nor the facilitator's settle run again.
    let again = seller.send(&header).await;
    assert_eq!(again.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(error_of(&again), "payment_replayed");
    assert_eq!(seller.runs(), 1);
    assert_eq!(standin.settles(), 4);
}

#[tokio::test]
async fn the_default_retries_once_and_a_pending_without_transaction_not_at_all() {
    let standin = StandIn::start(|_| pending(TX)).await;
    let seller = make_seller(standin.client(), exact_route(), |b| b);
    let challenge = seller.challenge().await;
    let response = seller.send(&testing::pay(&challenge)).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(standin.settles(), 2);

    // Nothing broadcast to wait for: no retry (as upstream), and still
    // unknown rather than refused.
    let standin = StandIn::start(|_| pending("")).await;
    let seller = make_seller(standin.client(), exact_route(), |b| {
        b.settlement_pending_retry(PendingRetry::new(5))
    });
    let challenge = seller.challenge().await;
    let response = seller.send(&testing::pay(&challenge)).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(error_of(&response), "settlement_unknown");
    assert_eq!(standin.settles(), 1);
}

#[tokio::test]
async fn the_retries_stay_within_their_budget() {
    let standin = StandIn::start(|_| pending(TX)).await;
    let retry = PendingRetry::new(50)
        .delay(Duration::from_millis(100))
        .budget(Duration::from_millis(400));
    let seller = make_seller(standin.client(), exact_route(), |b| {
        b.settlement_pending_retry(retry)
    });
    let challenge = seller.challenge().await;
    let started = Instant::now();
    let response = seller.send(&testing::pay(&challenge)).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    // Waits of 100 and 200 ms fit in 400 ms; the next (400 ms) would not.
    assert_eq!(standin.settles(), 3);
    assert!(started.elapsed() < Duration::from_secs(2));
}

// ---------------------------------------------------------------------------
// extensions and EXTENSION-RESPONSES.

/// base64 of `{"bazaar":{"status":"rejected","rejectedReason":"info failed schema validation","echo":"buyer text"}}`.
fn sidechannel() -> &'static str {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| {
        STANDARD.encode(
            json!({"bazaar": {"status": "rejected", "rejectedReason": "info failed schema validation", "echo": "buyer text"}})
                .to_string(),
        )
    })
}

#[tokio::test]
async fn settlement_extensions_reach_the_buyer_and_extension_responses_only_the_seller() {
    let standin = StandIn::start(|_| {
        let mut answer = settled();
        answer.body["extensions"] = json!({"offer-receipt": {"info": {"receiptId": "r-1"}}});
        answer.extension_responses = Some(sidechannel());
        answer
    })
    .await;
    let seller = make_seller(standin.client(), exact_route(), |b| b);
    let challenge = seller.challenge().await;
    let response = seller.send(&testing::pay(&challenge)).await;
    assert_eq!(response.status(), StatusCode::OK);

    // The buyer: the settlement's extensions, in PAYMENT-RESPONSE.
    let receipt = receipt(&response);
    assert_eq!(
        receipt["extensions"],
        json!({"offer-receipt": {"info": {"receiptId": "r-1"}}})
    );
    // Never the sidechannel: no header, nothing of it in the receipt.
    assert!(response.headers().get("extension-responses").is_none());
    assert!(receipt.get("extensionResponses").is_none(), "{receipt}");
    assert!(!receipt.to_string().contains("rejected"), "{receipt}");

    // The seller's hooks: both.
    let receipts = seller.seen.receipts.lock().unwrap();
    let seen = &receipts[0];
    assert_eq!(
        seen.extension_responses.as_ref().unwrap()["bazaar"]["status"],
        "rejected"
    );
    assert!(seen
        .extensions
        .as_ref()
        .unwrap()
        .contains_key("offer-receipt"));
}

// ---------------------------------------------------------------------------
// paymentFlow.

#[tokio::test]
async fn settle_first_routes_announce_upfront_and_settle_before_the_handler() {
    let standin = StandIn::start(|n| if n == 1 { pending(TX) } else { settled() }).await;
    let seller = make_seller(
        standin.client(),
        exact_route().settle_before_handler(),
        |b| b,
    );
    let challenge = seller.challenge().await;
    assert_eq!(challenge.accepts[0].extra["paymentFlow"], "upfront");
    let response = seller.send(&testing::pay(&challenge)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(receipt(&response)["transaction"], TX);
    assert_eq!(seller.runs(), 1);
    assert_eq!(standin.settles(), 2);

    // The default flow (authorization) is left unsaid, as upstream does.
    let standin = StandIn::start(|_| settled()).await;
    let seller = make_seller(standin.client(), exact_route(), |b| b);
    assert!(!seller.challenge().await.accepts[0]
        .extra
        .contains_key("paymentFlow"));
}

#[tokio::test]
async fn a_settle_first_route_that_stays_pending_never_runs_its_handler() {
    let standin = StandIn::start(|_| pending(TX)).await;
    let seller = make_seller(
        standin.client(),
        exact_route().settle_before_handler(),
        |b| b,
    );
    let challenge = seller.challenge().await;
    let header = testing::pay(&challenge);
    let response = seller.send(&header).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(error_of(&response), "settlement_unknown");
    assert_eq!(seller.runs(), 0);
    let again = seller.send(&header).await;
    assert_eq!(error_of(&again), "payment_replayed");
    assert_eq!(standin.settles(), 2);
}

// ---------------------------------------------------------------------------
// NEAR.

/// The signed NEP-366 vector of x402-core's tests.
fn near_vector() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../x402-core/tests/data/near_signed_delegate.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_copies_of_one_near_payment_run_the_handler_once() {
    let standin = StandIn::start(|_| Answer {
        status: 200,
        body: json!({
            "success": true, "transaction": "F7p8QyW8tWnL1QhP9j8uV1q2rM5aZ6xC3e4kT9mN2pR",
            "network": "near:testnet", "payer": "alice.testnet",
        }),
        extension_responses: None,
    })
    .await;
    let route = Route::get(ROUTE).offer(
        Offer::exact("near:testnet", "$1", "merchant.testnet").asset(Asset::new("usdc.testnet", 6)),
    );
    let seller = Arc::new(make_seller(standin.client(), route, |b| b));
    let challenge = seller.challenge().await;
    let accepted = &challenge.accepts[0];
    assert_eq!(accepted.amount.to_string(), "1000000");
    let vector = near_vector();
    let header = codec::encode(&json!({
        "x402Version": 2,
        "resource": challenge.resource,
        "accepted": accepted,
        "payload": {"signedDelegateAction": vector["signedDelegateAction"]},
    }))
    .unwrap();

    // Two copies at once.
    let (a, b) = tokio::join!(
        {
            let (seller, header) = (seller.clone(), header.clone());
            tokio::spawn(async move { seller.send(&header).await })
        },
        {
            let (seller, header) = (seller.clone(), header.clone());
            tokio::spawn(async move { seller.send(&header).await })
        }
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut statuses = [a.status(), b.status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::PAYMENT_REQUIRED]);
    let refused = if a.status() == StatusCode::OK { &b } else { &a };
    assert_eq!(error_of(refused), "payment_replayed");
    assert_eq!(seller.runs(), 1);
    assert_eq!(standin.settles(), 1);

    // And a third, later: still the one claim.
    let third = seller.send(&header).await;
    assert_eq!(error_of(&third), "payment_replayed");
    assert_eq!(seller.runs(), 1);
    assert_eq!(standin.settles(), 1);
}
