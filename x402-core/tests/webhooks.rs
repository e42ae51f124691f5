//! Signed settlement webhooks: events from real payments through the engine,
//! delivered to a real HTTP receiver, checked by an independent verifier.
#![cfg(feature = "webhooks")]
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
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use axum::{body::Bytes, extract::State, http::HeaderMap, routing::post, Router};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::io::AsyncWriteExt;
use x402_core::{
    codec,
    facilitator::{Facilitator, FacilitatorError},
    proto::{v2, FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse},
    route::RequestView,
    session::{
        MemorySessionStore, Redemption, SessionRecord, SessionStore, SessionStoreError, TokenHash,
    },
    webhook::{sign, EventType, WebhookError, WebhookSecret, WebhookVerifier, Webhooks},
    Completion, Decision, Engine, Offer, Route,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const TX: &str = "0x9c1a8f6b7bd3c58f5b1b4bc8a3b3c1d3f0f5e8f4b7a6c5d4e3f2a1b0c9d8e7f6";
const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

// ---------------------------------------------------------------- facilitator

#[derive(Debug, Clone, Copy)]
enum Settle {
    Ok,
    Refuse,
    Unreachable,
}

#[derive(Debug)]
struct Stub(Settle);

#[async_trait]
impl Facilitator for Stub {
    async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> {
        Ok(VerifyResponse::valid(PAYER))
    }
    async fn settle(&self, r: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> {
        let network = r.payment_requirements.network().to_owned();
        match self.0 {
            Settle::Ok => Ok(SettleResponse {
                success: true,
                payer: Some(PAYER.into()),
                transaction: TX.into(),
                network,
                ..SettleResponse::default()
            }),
            Settle::Refuse => Ok(SettleResponse {
                payer: Some(PAYER.into()),
                ..SettleResponse::failure(network, "insufficient_funds")
            }),
            Settle::Unreachable => Err(FacilitatorError::Timeout),
        }
    }
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        Ok(SupportedResponse::default())
    }
}

fn engine(settle: Settle, webhooks: &Webhooks) -> Engine {
    Engine::builder(Stub(settle))
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

/// Pays for `/report` through `process` + `complete`; returns what the
/// seller sends and how long the paid request took.
async fn pay(engine: &Engine) -> (Completion, HeaderMap, Duration) {
    let (parts, ()) = http::Request::get("http://shop.example.test/report?id=7")
        .body(())
        .unwrap()
        .into_parts();
    let Decision::Respond(challenge) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("expected a 402");
    };
    let required: v2::PaymentRequired = codec::decode(
        challenge.headers()[codec::PAYMENT_REQUIRED].as_bytes(),
        1 << 16,
    )
    .unwrap();
    let payment = json!({
        "x402Version": 2,
        "resource": required.resource,
        "accepted": required.accepts[0],
        "payload": {
            "signature": format!("0x{}", "11".repeat(65)),
            "authorization": {
                "from": PAYER, "to": PAY_TO, "value": "10000",
                "validAfter": "0", "validBefore": (unix_now() + 600).to_string(),
                "nonce": format!("0x{}", hex_random()),
            }
        }
    });
    let (parts, ()) = http::Request::get("http://shop.example.test/report?id=7")
        .header(codec::PAYMENT_SIGNATURE, codec::encode(&payment).unwrap())
        .body(())
        .unwrap()
        .into_parts();

    let started = Instant::now();
    let paid = match engine.process(RequestView::from_parts(&parts)).await {
        Decision::Paid(paid) => paid,
        other => panic!("expected a verified payment, got {other:?}"),
    };
    let mut headers = HeaderMap::new();
    let completion = paid.complete(http::StatusCode::OK, &mut headers).await;
    (completion, headers, started.elapsed())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hex_random() -> String {
    (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

// ------------------------------------------------------------------ receiver

#[derive(Debug, Clone)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Debug, Clone, Copy)]
enum Reply {
    Status(u16),
    Hang(Duration),
}

type Behaviour = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

#[derive(Clone)]
struct Receiver {
    log: Arc<Mutex<Vec<Received>>>,
    behaviour: Behaviour,
}

struct RunningReceiver {
    url: String,
    log: Arc<Mutex<Vec<Received>>>,
    server: tokio::task::JoinHandle<()>,
}

impl RunningReceiver {
    fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "receiver got {} of {n}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for RunningReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> http::StatusCode {
    let n = {
        let mut log = r.log.lock().unwrap();
        log.push(Received { headers, body });
        log.len() - 1
    };
    match (r.behaviour)(n) {
        Reply::Status(s) => http::StatusCode::from_u16(s).unwrap(),
        Reply::Hang(d) => {
            tokio::time::sleep(d).await;
            http::StatusCode::OK
        }
    }
}

async fn receiver(behaviour: impl Fn(usize) -> Reply + Send + Sync + 'static) -> RunningReceiver {
    let state = Receiver {
        log: Arc::default(),
        behaviour: Arc::new(behaviour),
    };
    let log = Arc::clone(&state.log);
    let app = Router::new().route("/hook", post(handle)).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    RunningReceiver { url, log, server }
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
    r.headers[name].to_str().unwrap()
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

/// The reference `standardwebhooks` npm package (installed by `npm ci` in
/// tests/js, which the README's test command runs).
async fn verify_with_node(whsec: &str, r: &Received) -> Option<Value> {
    let js = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/js");
    assert!(
        js.join("node_modules/standardwebhooks").exists(),
        "the npm standardwebhooks package is missing: run `npm ci` in tests/js (scripts/test-all.sh does)"
    );
    let mut child = tokio::process::Command::new("node")
        .arg(js.join("verify-webhook.mjs"))
        .current_dir(&js)
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
    let engine = engine(Settle::Ok, &webhooks);

    let (completion, headers, _) = pay(&engine).await;
    assert!(matches!(completion, Completion::Deliver));
    let receipt: SettleResponse =
        codec::decode(headers[codec::PAYMENT_RESPONSE].as_bytes(), 1 << 16).unwrap();
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

    let (completion, _, _) = pay(&engine(Settle::Refuse, &webhooks)).await;
    assert!(matches!(completion, Completion::Replace(r) if r.status() == 402));
    let (completion, _, _) = pay(&engine(Settle::Unreachable, &webhooks)).await;
    assert!(
        matches!(completion, Completion::Replace(r) if r.status() == 502),
        "the hook does not recover an unknown settlement"
    );

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
    let _ = pay(&engine(Settle::Ok, &webhooks)).await;

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
    let _ = pay(&engine(Settle::Ok, &webhooks)).await;

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
    let _ = pay(&engine(Settle::Ok, &webhooks)).await;
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
    let engine = engine(Settle::Ok, &webhooks);

    let (_, _, first) = pay(&engine).await;
    rx.wait_for(1, Duration::from_secs(5)).await;
    // A delivery is now hanging in the receiver; pay again meanwhile.
    let mut worst = first;
    for _ in 0..5 {
        let (completion, headers, took) = pay(&engine).await;
        assert!(matches!(completion, Completion::Deliver));
        assert!(headers.contains_key(codec::PAYMENT_RESPONSE));
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

    Engine::builder(Stub(Settle::Ok))
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

/// Buys a session on `engine`: the opening call's completion and headers.
async fn buy_session(engine: &Engine) -> (Completion, HeaderMap) {
    let (parts, ()) = http::Request::get("http://shop.example.test/report")
        .body(())
        .unwrap()
        .into_parts();
    let Decision::Respond(challenge) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("expected a 402");
    };
    let required: Value = codec::decode(
        challenge.headers()[codec::PAYMENT_REQUIRED].as_bytes(),
        1 << 16,
    )
    .unwrap();
    let row = required["extensions"]["session"]["info"]["offers"][0]["accepts"][0].clone();
    let payment = json!({
        "x402Version": 2,
        "accepted": row,
        "payload": {
            "signature": format!("0x{}", "11".repeat(65)),
            "authorization": {
                "from": PAYER, "to": PAY_TO, "value": "50000",
                "validAfter": "0", "validBefore": (unix_now() + 600).to_string(),
                "nonce": format!("0x{}", hex_random()),
            }
        }
    });
    let (parts, ()) = http::Request::get("http://shop.example.test/report")
        .header(codec::PAYMENT_SIGNATURE, codec::encode(&payment).unwrap())
        .body(())
        .unwrap()
        .into_parts();
    let Decision::Paid(paid) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("expected a verified payment");
    };
    let mut headers = HeaderMap::new();
    let completion = paid.complete(http::StatusCode::OK, &mut headers).await;
    (completion, headers)
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
    let (completion, headers) = buy_session(&engine).await;
    assert!(matches!(completion, Completion::Deliver));
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
    let (completion, headers) = buy_session(&engine).await;

    // The paid call is served, and the buyer is told there is no session.
    assert!(matches!(completion, Completion::Deliver));
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
    let (completion, headers) = buy_session(&engine).await;
    assert!(matches!(completion, Completion::Deliver));
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
