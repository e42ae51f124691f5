//! Signed settlement webhooks: events from real payments through the engine,
//! delivered to a real HTTP receiver, checked by an independent verifier
//! (and by the reference `standardwebhooks` npm package, from
//! `tests/js/node_modules`: `bash scripts/test-all.sh`).
//!
//! Moved from x402-core's tests (axum, Node).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::{
    process::Stdio,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{Request, Response};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::io::AsyncWriteExt;
use x402_core::{
    codec,
    proto::{v2, SettleResponse},
    session::{
        MemorySessionStore, Redemption, SessionRecord, SessionStore, SessionStoreError, TokenHash,
    },
    testing::{self, SettleAnswer, StandIn, PAYER, TRANSACTION as TX},
    webhook::{sign, EventType, WebhookError, WebhookSecret, WebhookVerifier, Webhooks},
    Engine, Offer, Route,
};
use x402_tests::{
    core_support::receiver::{Received, Receiver, Reply},
    require,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
/// What the paid handler answers.
const REPORT: &str = "the paid report";

// ---------------------------------------------------------------- facilitator

/// Verifies every payment and settles it as `settle` says.
fn facilitator(settle: SettleAnswer) -> StandIn {
    let facilitator = StandIn::new();
    facilitator.set_settle(settle);
    facilitator
}

fn engine(settle: SettleAnswer, webhooks: &Webhooks) -> Engine {
    Engine::builder(facilitator(settle))
        .public_origin("http://shop.example.test")
        .route(
            Route::get("/report")
                .offer(Offer::exact("eip155:84532", "$0.01", PAY_TO))
                .description("A report"),
        )
        .hooks(webhooks.hooks())
        .build()
        .unwrap()
}

/// The paid handler.
async fn handler(_: Request<()>) -> Response<String> {
    Response::new(REPORT.to_owned())
}

/// Pays for `/report?id=7` through the engine and the paid handler; returns
/// what the seller sends and how long the paid request took.
async fn pay(engine: &Engine) -> (Response<Bytes>, Duration) {
    let url = "http://shop.example.test/report?id=7";
    let required = testing::challenge(engine, Request::get(url).body(()).unwrap()).await;
    let request = Request::get(url)
        .header(codec::PAYMENT_SIGNATURE, testing::pay(&required))
        .body(())
        .unwrap();
    let started = Instant::now();
    let response = testing::serve(engine, request, handler).await;
    (response, started.elapsed())
}

/// Asserts that `response` is the paid handler's, with a receipt.
#[track_caller]
fn assert_delivered(response: &Response<Bytes>) {
    assert_eq!(response.status(), 200, "{:?}", response.body());
    assert_eq!(response.body(), REPORT);
    assert!(response.headers().contains_key(codec::PAYMENT_RESPONSE));
}

/// Asserts that the engine replaced the handler's answer with `status`.
#[track_caller]
fn assert_replaced(response: &Response<Bytes>, status: u16) {
    assert_eq!(response.status(), status, "{:?}", response.body());
    assert!(!String::from_utf8_lossy(response.body()).contains(REPORT));
}

// ------------------------------------------------------------------ receiver

async fn receiver(behaviour: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Receiver {
    Receiver::start(behaviour).await
}

fn fast(url: &str, secrets: Vec<WebhookSecret>, attempts: u32) -> Webhooks {
    Webhooks::builder(url, secrets)
        .max_attempts(attempts)
        .backoff(Duration::from_millis(20), Duration::from_millis(100))
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn header<'a>(r: &'a Received, name: &str) -> &'a str {
    r.header(name)
}

// ------------------------------------------------- independent verification

/// Standard Webhooks, written from the spec in a few lines: HMAC-SHA256 over
/// `{id}.{timestamp}.{body}` keyed with the base64-decoded part of `whsec_`.
fn spec_signature(whsec: &str, r: &Received) -> String {
    let key = STANDARD
        .decode(whsec.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(
        format!(
            "{}.{}.{}",
            header(r, "webhook-id"),
            header(r, "webhook-timestamp"),
            std::str::from_utf8(&r.body).unwrap()
        )
        .as_bytes(),
    );
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The reference `standardwebhooks` npm package (from `tests/js/node_modules`;
/// fails in one line naming `bash scripts/test-all.sh` when missing).
async fn verify_with_node(whsec: &str, r: &Received) -> Option<Value> {
    let mut child = require::node_async("verify-webhook.mjs")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node must be installed to run the standardwebhooks check");
    let input = json!({
        "secret": whsec,
        "headers": {
            "webhook-id": header(r, "webhook-id"),
            "webhook-timestamp": header(r, "webhook-timestamp"),
            "webhook-signature": header(r, "webhook-signature"),
        },
        "body": std::str::from_utf8(&r.body).unwrap(),
    });
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "standardwebhooks refused the message: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

// --------------------------------------------------------------------- tests

#[tokio::test]
async fn settled_payment_delivers_one_signed_event_matching_the_receipt() {
    let rx = receiver(|_| Reply::Status(204)).await;
    let secret = WebhookSecret::generate();
    let whsec = secret.to_whsec();
    let webhooks = fast(&rx.url, vec![secret], 3);
    let worker = webhooks.start();
    let engine = engine(SettleAnswer::Success, &webhooks);

    let (response, _) = pay(&engine).await;
    assert_delivered(&response);
    let receipt: SettleResponse = codec::decode(
        response.headers()[codec::PAYMENT_RESPONSE].as_bytes(),
        1 << 16,
    )
    .unwrap();
    assert!(receipt.success);

    let got = rx.wait_for(1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(rx.received().len(), 1, "delivered exactly once");
    let r = &got[0];

    // Headers in the Standard Webhooks shape.
    let id = header(r, "webhook-id");
    assert!(id.starts_with("msg_") && id.len() > 20, "{id}");
    let ts: u64 = header(r, "webhook-timestamp").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(ts) <= 5);
    assert_eq!(header(r, "content-type"), "application/json");
    assert_eq!(header(r, "webhook-signature"), spec_signature(&whsec, r));

    // The body matches the receipt and the requirement.
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["type"], "payment.settled");
    let stamp = body["timestamp"].as_str().unwrap();
    assert!(
        stamp.len() == 24 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "{stamp}"
    );
    let data = &body["data"];
    assert_eq!(data["transaction"], receipt.transaction.as_str());
    assert_eq!(data["payer"], receipt.payer.as_deref().unwrap());
    assert_eq!(data["network"], "eip155:84532");
    assert_eq!(data["asset"], BASE_SEPOLIA_USDC);
    assert_eq!(data["amount"], "10000");
    assert_eq!(data["payTo"], PAY_TO);
    assert_eq!(data["resource"], "http://shop.example.test/report?id=7");
    assert_eq!(data["route"], "/report");
    assert_eq!(data["scheme"], "exact");
    assert_eq!(data["x402Version"], 2);
    assert!(data.get("errorReason").is_none());

    // Our verifier agrees, and so does the reference implementation.
    let event = WebhookVerifier::from_whsec([whsec.as_str()])
        .unwrap()
        .verify(&r.headers, &r.body)
        .unwrap();
    assert_eq!(event.id, id);
    assert_eq!(event.event_type, EventType::PaymentSettled);
    assert_eq!(event.data.transaction, TX);
    if let Some(payload) = verify_with_node(&whsec, r).await {
        assert_eq!(payload, body);
    }

    assert_eq!(webhooks.outbox().backlog().await.unwrap(), 0);
    worker.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn refused_and_unknown_settlements_have_their_own_events() {
    let rx = receiver(|_| Reply::Status(200)).await;
    let secret = WebhookSecret::generate();
    let verifier = WebhookVerifier::new([secret.clone()]);
    let webhooks = fast(&rx.url, vec![secret], 3);
    let _worker = webhooks.start();

    let refused = SettleAnswer::Refused("insufficient_funds".into());
    let (response, _) = pay(&engine(refused, &webhooks)).await;
    assert_replaced(&response, 402);
    // The hook does not recover an unknown settlement.
    let (response, _) = pay(&engine(SettleAnswer::Unavailable, &webhooks)).await;
    assert_replaced(&response, 502);

    let got = rx.wait_for(2, Duration::from_secs(5)).await;
    let mut events: Vec<_> = got
        .iter()
        .map(|r| verifier.verify(&r.headers, &r.body).unwrap())
        .collect();
    events.sort_by_key(|e| e.event_type.to_string());
    assert_eq!(events[0].event_type, EventType::PaymentSettlementFailed);
    assert_eq!(
        events[0].data.error_reason.as_deref(),
        Some("insufficient_funds")
    );
    assert_eq!(events[0].data.transaction, "");
    assert_eq!(events[0].data.payer.as_deref(), Some(PAYER));
    assert_eq!(events[1].event_type, EventType::PaymentSettlementUnknown);
    assert_eq!(
        events[1].data.error_reason.as_deref(),
        Some("facilitator_timeout")
    );
    assert_eq!(events[1].data.amount, "10000");
}

#[tokio::test]
async fn receiver_down_for_two_attempts_gets_the_event_on_the_third() {
    let rx = receiver(|n| Reply::Status(if n < 2 { 503 } else { 200 })).await;
    let secret = WebhookSecret::generate();
    let verifier = WebhookVerifier::new([secret.clone()]);
    let webhooks = fast(&rx.url, vec![secret], 3);
    let _worker = webhooks.start();
    let _ = pay(&engine(SettleAnswer::Success, &webhooks)).await;

    let got = rx.wait_for(3, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.received().len(), 3, "no attempt after the success");
    let id = header(&got[0], "webhook-id");
    for r in &got {
        assert_eq!(
            header(r, "webhook-id"),
            id,
            "the id is stable across retries"
        );
        assert_eq!(r.body, got[0].body, "the body is stable across retries");
        verifier.verify(&r.headers, &r.body).unwrap();
    }
    assert!(webhooks.dead_letters().await.unwrap().is_empty());
    assert_eq!(webhooks.outbox().backlog().await.unwrap(), 0);
}

#[tokio::test]
async fn receiver_down_throughout_leaves_a_dead_letter_with_the_event_intact() {
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&up);
    let rx = receiver(move |_| {
        Reply::Status(if flag.load(std::sync::atomic::Ordering::SeqCst) {
            200
        } else {
            503
        })
    })
    .await;
    let secret = WebhookSecret::generate();
    let webhooks = fast(&rx.url, vec![secret.clone()], 3);
    let _worker = webhooks.start();
    let _ = pay(&engine(SettleAnswer::Success, &webhooks)).await;

    let deadline = Instant::now() + Duration::from_secs(5);
    let dead = loop {
        let dead = webhooks.dead_letters().await.unwrap();
        if !dead.is_empty() {
            break dead;
        }
        assert!(Instant::now() < deadline, "no dead letter");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let got = rx.received();
    assert_eq!(got.len(), 3, "exactly max_attempts attempts");
    assert_eq!(dead.len(), 1);
    let letter = &dead[0];
    assert_eq!(letter.message.id, header(&got[0], "webhook-id"));
    assert_eq!(letter.message.body.as_bytes(), &got[0].body[..]);
    assert_eq!(letter.message.event_type, "payment.settled");
    assert_eq!(letter.message.attempts, 3);
    assert_eq!(letter.last_error, "status 503");
    assert_eq!(webhooks.outbox().backlog().await.unwrap(), 0);

    // Once the receiver is back, a dead letter can be sent again, unchanged.
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(webhooks.redeliver(&letter.message.id).await.unwrap());
    let got = rx.wait_for(4, Duration::from_secs(5)).await;
    assert_eq!(header(&got[3], "webhook-id"), letter.message.id);
    assert_eq!(got[3].body, got[0].body);
    WebhookVerifier::new([secret])
        .verify(&got[3].headers, &got[3].body)
        .unwrap();
    assert!(webhooks.dead_letters().await.unwrap().is_empty());
}

#[tokio::test]
async fn verifier_rejects_tampering_and_accepts_rotated_secrets() {
    let (old, new) = (WebhookSecret::generate(), WebhookSecret::generate());
    // A sender mid-rotation signs with both secrets.
    let rx = receiver(|_| Reply::Status(200)).await;
    let webhooks = fast(&rx.url, vec![old.clone(), new.clone()], 3);
    let _worker = webhooks.start();
    let _ = pay(&engine(SettleAnswer::Success, &webhooks)).await;
    let r = rx.wait_for(1, Duration::from_secs(5)).await.remove(0);
    let entries: Vec<&str> = header(&r, "webhook-signature").split(' ').collect();
    assert_eq!(entries.len(), 2);
    assert!(entries.iter().all(|e| e.starts_with("v1,")));
    assert_eq!(entries[0], spec_signature(&old.to_whsec(), &r));
    assert_eq!(entries[1], spec_signature(&new.to_whsec(), &r));

    // Receivers holding either secret, or both, accept it.
    for secrets in [
        vec![old.clone()],
        vec![new.clone()],
        vec![old.clone(), new.clone()],
    ] {
        WebhookVerifier::new(secrets)
            .verify(&r.headers, &r.body)
            .unwrap();
    }
    // A receiver rotated to [old, new] accepts messages signed by either alone.
    let both = WebhookVerifier::new([old.clone(), new.clone()]);
    let ts: u64 = header(&r, "webhook-timestamp").parse().unwrap();
    let id = header(&r, "webhook-id").to_owned();
    for signer in [&old, &new] {
        let mut h = r.headers.clone();
        h.insert(
            "webhook-signature",
            sign(std::slice::from_ref(signer), &id, ts, &r.body)
                .parse()
                .unwrap(),
        );
        both.verify(&h, &r.body).unwrap();
    }

    let verifier = WebhookVerifier::new([new.clone()]);
    // Tampered body.
    let mut body = r.body.to_vec();
    let at = body.iter().position(|b| *b == b'1').unwrap();
    body[at] = b'9';
    assert!(matches!(
        verifier.verify(&r.headers, &body),
        Err(WebhookError::InvalidSignature)
    ));
    // Tampered timestamp (still within tolerance).
    let mut h = r.headers.clone();
    h.insert("webhook-timestamp", (ts - 1).to_string().parse().unwrap());
    assert!(matches!(
        verifier.verify(&h, &r.body),
        Err(WebhookError::InvalidSignature)
    ));
    // Tampered id.
    let mut h = r.headers.clone();
    h.insert("webhook-id", "msg_other".parse().unwrap());
    assert!(matches!(
        verifier.verify(&h, &r.body),
        Err(WebhookError::InvalidSignature)
    ));
    // Stale (and future) timestamps, correctly signed.
    for skew in [-(10 * 60_i64), 10 * 60] {
        let at = ts.checked_add_signed(skew).unwrap();
        let mut h = r.headers.clone();
        h.insert("webhook-timestamp", at.to_string().parse().unwrap());
        h.insert(
            "webhook-signature",
            sign(std::slice::from_ref(&new), &id, at, &r.body)
                .parse()
                .unwrap(),
        );
        assert!(matches!(
            verifier.verify(&h, &r.body),
            Err(WebhookError::TimestampOutOfTolerance)
        ));
        assert!(WebhookVerifier::new([new.clone()])
            .tolerance(Duration::from_secs(15 * 60))
            .verify(&h, &r.body)
            .is_ok());
    }
    // Wrong secret.
    assert!(matches!(
        WebhookVerifier::new([WebhookSecret::generate()]).verify(&r.headers, &r.body),
        Err(WebhookError::InvalidSignature)
    ));
    // Missing headers, each in turn.
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let mut h = r.headers.clone();
        h.remove(name);
        assert!(
            matches!(verifier.verify(&h, &r.body), Err(WebhookError::MissingHeader(n)) if n == name),
            "{name}"
        );
    }
    // Garbage signatures and a non-numeric timestamp.
    for sig in ["", "v1,", "v1,!!!", "v2,abc", "nonsense"] {
        let mut h = r.headers.clone();
        h.insert("webhook-signature", sig.parse().unwrap());
        assert!(verifier.verify(&h, &r.body).is_err(), "{sig:?}");
    }
    let mut h = r.headers.clone();
    h.insert("webhook-timestamp", "soon".parse().unwrap());
    assert!(matches!(
        verifier.verify(&h, &r.body),
        Err(WebhookError::InvalidTimestamp)
    ));

    // Secrets never show in Debug output.
    let shown = format!("{new:?} {verifier:?} {webhooks:?}");
    let raw = new.to_whsec();
    assert!(!shown.contains(raw.trim_start_matches("whsec_")), "{shown}");
}

#[tokio::test]
async fn hanging_receiver_does_not_slow_the_paid_request() {
    let rx = receiver(|_| Reply::Hang(Duration::from_secs(30))).await;
    let webhooks = Webhooks::builder(&rx.url, [WebhookSecret::generate()])
        .build()
        .unwrap();
    let worker = webhooks.start();
    let engine = engine(SettleAnswer::Success, &webhooks);

    let (_, first) = pay(&engine).await;
    rx.wait_for(1, Duration::from_secs(5)).await;
    // A delivery is now hanging in the receiver; pay again meanwhile.
    let mut worst = first;
    for _ in 0..5 {
        let (response, took) = pay(&engine).await;
        assert_delivered(&response);
        worst = worst.max(took);
    }
    eprintln!("paid request latency with a hanging receiver: first {first:?}, worst {worst:?}");
    assert!(worst < Duration::from_millis(250), "{worst:?}");
    // Deliveries run concurrently: a second one reaches the receiver while
    // the first still hangs.
    rx.wait_for(2, Duration::from_secs(5)).await;

    let stopping = Instant::now();
    worker.shutdown(Duration::ZERO).await;
    assert!(stopping.elapsed() < Duration::from_secs(1));
}

/// An engine selling `pack-10` sessions on `/report`, over `store`.
fn session_engine(webhooks: &Webhooks, store: impl SessionStore) -> Engine {
    use x402_core::session::SessionOffer;

    Engine::builder(facilitator(SettleAnswer::Success))
        .public_origin("http://shop.example.test")
        .route(
            Route::get("/report")
                .offer(Offer::exact("eip155:84532", "$0.01", PAY_TO))
                .session(
                    SessionOffer::new("pack-10", 10, Duration::from_secs(3600), "reports")
                        .offer(Offer::exact("eip155:84532", "$0.05", PAY_TO)),
                ),
        )
        .session_store(store)
        .session_open_deadline(Duration::from_millis(600))
        .hooks(webhooks.hooks())
        .build()
        .unwrap()
}

/// Buys a session on `engine`: the opening call's answer.
async fn buy_session(engine: &Engine) -> Response<Bytes> {
    let url = "http://shop.example.test/report";
    let required = testing::challenge(engine, Request::get(url).body(()).unwrap()).await;
    let row: v2::PaymentRequirements = serde_json::from_value(
        required.extensions["session"]["info"]["offers"][0]["accepts"][0].clone(),
    )
    .unwrap();
    assert_eq!(row.amount.to_string(), "50000");
    let request = Request::get(url)
        .header(codec::PAYMENT_SIGNATURE, testing::payment(&row))
        .body(())
        .unwrap();
    testing::serve(engine, request, handler).await
}

/// A session store whose first `failures` opens fail; counts its calls.
/// Clones share everything.
#[derive(Debug, Clone, Default)]
struct FlakyStore {
    failures: usize,
    opens: Arc<AtomicUsize>,
    closes: Arc<AtomicUsize>,
    inner: MemorySessionStore,
}

impl FlakyStore {
    fn failing(failures: usize) -> Self {
        Self {
            failures,
            ..Self::default()
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for FlakyStore {
    async fn open(
        &self,
        token: &TokenHash,
        record: SessionRecord,
    ) -> Result<(), SessionStoreError> {
        if self.opens.fetch_add(1, Ordering::SeqCst) < self.failures {
            return Err(SessionStoreError::Backend("injected: store down".into()));
        }
        self.inner.open(token, record).await
    }

    async fn redeem(
        &self,
        token: &TokenHash,
        scope: &str,
        now: u64,
    ) -> Result<Redemption, SessionStoreError> {
        self.inner.redeem(token, scope, now).await
    }

    async fn give_back(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        self.inner.give_back(token).await
    }

    async fn close(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        self.closes.fetch_add(1, Ordering::SeqCst);
        self.inner.close(token).await
    }
}

#[tokio::test]
async fn a_session_store_that_fails_briefly_is_retried_with_the_same_session() {
    let rx = receiver(|_| Reply::Status(204)).await;
    let webhooks = fast(&rx.url, vec![WebhookSecret::generate()], 3);
    let store = FlakyStore::failing(2);
    let engine = session_engine(&webhooks, store.clone());
    let response = buy_session(&engine).await;
    assert_delivered(&response);
    let headers = response.headers();
    assert_eq!(store.opens.load(Ordering::SeqCst), 3);
    assert!(headers.contains_key("x-payment-session"));
    assert_eq!(headers["x-payment-session-remaining"], "9");
    assert!(!headers.contains_key("x-payment-session-error"));
}

#[tokio::test]
async fn a_session_that_cannot_be_stored_is_reported_to_buyer_and_seller() {
    let rx = receiver(|_| Reply::Status(204)).await;
    let secret = WebhookSecret::generate();
    let whsec = secret.to_whsec();
    let webhooks = fast(&rx.url, vec![secret], 3);
    let _worker = webhooks.start();
    let store = FlakyStore::failing(usize::MAX);
    let engine = session_engine(&webhooks, store.clone());
    let response = buy_session(&engine).await;
    let headers = response.headers();

    // The paid call is served, and the buyer is told there is no session.
    assert_delivered(&response);
    assert!(headers.contains_key("payment-response"));
    assert!(!headers.contains_key("x-payment-session"));
    assert_eq!(headers["x-payment-session-error"], "session_open_failed");
    assert!(store.opens.load(Ordering::SeqCst) >= 2, "retried");
    assert_eq!(
        store.closes.load(Ordering::SeqCst),
        1,
        "a late write is undone"
    );

    // The seller gets the event...
    let got = rx.wait_for(2, Duration::from_secs(5)).await;
    let verifier = WebhookVerifier::from_whsec([whsec.as_str()]).unwrap();
    let events: Vec<_> = got
        .iter()
        .map(|r| verifier.verify(&r.headers, &r.body).unwrap())
        .collect();
    let failed = events
        .iter()
        .find(|e| e.event_type == EventType::SessionOpenFailed)
        .expect("a session.open_failed event");
    assert_eq!(failed.data.transaction, TX);
    assert_eq!(failed.data.amount.to_string(), "50000");
    assert_eq!(failed.data.payer.as_deref(), Some(PAYER));
    assert_eq!(
        failed.data.error_reason.as_deref(),
        Some("session_open_failed")
    );
    assert_eq!(failed.data.extra["sessionOffer"], "pack-10");
    assert_eq!(failed.data.extra["calls"], 10);
    // ...and a dead letter waits for it, whether or not that was delivered.
    let letters = webhooks.dead_letters().await.unwrap();
    let letter = letters
        .iter()
        .find(|l| l.message.event_type == "session.open_failed")
        .expect("a dead letter for the failed session");
    let body: Value = serde_json::from_str(&letter.message.body).unwrap();
    assert_eq!(body["data"]["transaction"], TX);
    assert_eq!(body["data"]["payer"], PAYER);
}

#[tokio::test]
async fn buying_a_session_emits_session_opened_with_the_settlement() {
    let rx = receiver(|_| Reply::Status(204)).await;
    let secret = WebhookSecret::generate();
    let whsec = secret.to_whsec();
    let webhooks = fast(&rx.url, vec![secret], 3);
    let _worker = webhooks.start();
    let engine = session_engine(&webhooks, MemorySessionStore::new());
    let response = buy_session(&engine).await;
    assert_delivered(&response);
    let headers = response.headers();
    let token = headers["x-payment-session"].to_str().unwrap().to_owned();

    let got = rx.wait_for(2, Duration::from_secs(5)).await;
    let verifier = WebhookVerifier::from_whsec([whsec.as_str()]).unwrap();
    let events: Vec<_> = got
        .iter()
        .map(|r| verifier.verify(&r.headers, &r.body).unwrap())
        .collect();
    let types: Vec<_> = events.iter().map(|e| e.event_type.clone()).collect();
    assert!(types.contains(&EventType::PaymentSettled), "{types:?}");
    let opened = events
        .iter()
        .find(|e| e.event_type == EventType::SessionOpened)
        .expect("a session.opened event");
    assert_eq!(opened.data.transaction, TX);
    assert_eq!(opened.data.amount.to_string(), "50000");
    let body: Value = serde_json::from_slice(
        &got.iter()
            .find(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["type"] == "session.opened")
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(body["data"]["sessionOffer"], "pack-10");
    assert_eq!(body["data"]["calls"], 10);
    assert_eq!(body["data"]["remaining"], 9);
    assert_eq!(body["data"]["scope"], "reports");
    // The token is never in an event.
    for r in &got {
        assert!(!String::from_utf8_lossy(&r.body).contains(&token));
    }
}
