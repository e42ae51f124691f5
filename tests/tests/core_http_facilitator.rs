//! `HttpFacilitator` against a real HTTP stand-in server (axum) and Node's
//! HTTP server, and `FacilitatorRouter` with in-process facilitators.
//!
//! Moved from x402-core's tests (they serve axum apps).

// The helpers below are test code too, though not `#[test]` functions.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::{
    collections::BTreeMap,
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
    http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
    Router,
};
use serde_json::{json, Value};
use x402_core::{
    facilitator::{Endpoint, Facilitator, FacilitatorError, FacilitatorRouter, HttpFacilitator},
    money::AtomicAmount,
    proto::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse, X402Version},
};
use x402_tests::standin::ClosedPort;

// ---------------------------------------------------------------------------
// The stand-in facilitator server.

/// A request the stand-in received.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    authorization: Option<String>,
    body: Value,
}

/// What the stand-in answers.
#[derive(Debug, Clone)]
struct Canned {
    status: u16,
    content_type: &'static str,
    body: String,
    delay: Duration,
}

impl Canned {
    fn json(status: u16, body: &Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }

    fn raw(status: u16, content_type: &'static str, body: &str) -> Self {
        Self {
            status,
            content_type,
            body: body.to_owned(),
            delay: Duration::ZERO,
        }
    }

    fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// Answers a request, given the number of requests so far to the same path
/// (1 for the first).
type Responder = dyn Fn(&Seen, usize) -> Canned + Send + Sync;

struct ServerState {
    responder: Box<Responder>,
    seen: Mutex<Vec<Seen>>,
}

/// A stand-in facilitator on 127.0.0.1; stops when dropped.
struct StandIn {
    base: String,
    state: Arc<ServerState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(state): State<Arc<ServerState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let seen = Seen {
        method,
        path: uri.path().to_owned(),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let nth = {
        let mut log = state.seen.lock().unwrap();
        log.push(seen.clone());
        log.iter().filter(|s| s.path == seen.path).count()
    };
    let canned = (state.responder)(&seen, nth);
    tokio::time::sleep(canned.delay).await;
    (
        StatusCode::from_u16(canned.status).unwrap(),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(canned.content_type),
        )],
        canned.body,
    )
        .into_response()
}

impl StandIn {
    async fn start(responder: impl Fn(&Seen, usize) -> Canned + Send + Sync + 'static) -> Self {
        let state = Arc::new(ServerState {
            responder: Box::new(responder),
            seen: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base: format!("http://{addr}"),
            state,
            task,
        }
    }

    /// A stand-in that always gives the same answer.
    async fn always(canned: Canned) -> Self {
        Self::start(move |_, _| canned.clone()).await
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    fn hits(&self, path: &str) -> usize {
        self.seen().iter().filter(|s| s.path == path).count()
    }

    fn client(&self) -> HttpFacilitator {
        HttpFacilitator::builder(&self.base)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }
}

// ---------------------------------------------------------------------------
// Requests.

const ASSET: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

fn request(version: X402Version, network: &str, scheme: &str) -> FacilitatorRequest {
    let payload =
        json!({"signature": "0xsig", "authorization": {"from": "0xbuyer", "value": "10000"}});
    let wire = match version {
        X402Version::V1 => {
            let requirements = json!({
                "scheme": scheme, "network": network, "maxAmountRequired": "10000",
                "resource": "https://seller.example/report", "payTo": PAY_TO,
                "maxTimeoutSeconds": 60, "asset": ASSET,
            });
            json!({
                "x402Version": 1,
                "paymentPayload": {"x402Version": 1, "scheme": scheme, "network": network, "payload": payload},
                "paymentRequirements": requirements,
            })
        }
        X402Version::V2 => {
            let requirements = json!({
                "scheme": scheme, "network": network, "amount": "10000", "asset": ASSET,
                "payTo": PAY_TO, "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"},
            });
            json!({
                "x402Version": 2,
                "paymentPayload": {"x402Version": 2, "accepted": requirements, "payload": payload},
                "paymentRequirements": requirements,
            })
        }
    };
    serde_json::from_value(wire).unwrap()
}

fn v2_request() -> FacilitatorRequest {
    request(X402Version::V2, "eip155:84532", "exact")
}

// ---------------------------------------------------------------------------
// /verify

#[tokio::test]
async fn verify_valid_verdict_posts_the_request_to_the_base_path() {
    let server = StandIn::always(Canned::json(
        200,
        &json!({"isValid": true, "payer": "0xbuyer"}),
    ))
    .await;
    // Trailing slashes of the base URL are dropped.
    let facilitator = HttpFacilitator::new(format!("{}/facilitator//", server.base)).unwrap();
    let req = v2_request();

    let verdict = facilitator.verify(&req).await.unwrap();

    assert_eq!(verdict, VerifyResponse::valid("0xbuyer"));
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].path, "/facilitator/verify");
    assert_eq!(seen[0].body, serde_json::to_value(&req).unwrap());
    assert_eq!(seen[0].body["x402Version"], json!(2));
    assert_eq!(
        seen[0].body["paymentRequirements"]["amount"],
        json!("10000")
    );
    assert_eq!(
        seen[0].body["paymentPayload"]["payload"]["signature"],
        json!("0xsig")
    );
}

#[tokio::test]
async fn verify_200_invalid_verdict_is_invalid() {
    let server = StandIn::always(Canned::json(
        200,
        &json!({"isValid": false, "invalidReason": "insufficient_funds", "payer": "0xbuyer"}),
    ))
    .await;

    let verdict = server.client().verify(&v2_request()).await.unwrap();

    assert!(!verdict.is_valid);
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("insufficient_funds")
    );
    assert_eq!(verdict.payer.as_deref(), Some("0xbuyer"));
    assert_eq!(server.hits("/verify"), 1);
}

#[tokio::test]
async fn verify_400_with_verdict_body_is_that_verdict() {
    let server = StandIn::always(Canned::json(
        400,
        &json!({"isValid": false, "invalidReason": "invalid_exact_evm_payload_authorization_valid_before", "payer": "0xbuyer"}),
    ))
    .await;

    let verdict = server.client().verify(&v2_request()).await.unwrap();

    assert!(!verdict.is_valid);
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_evm_payload_authorization_valid_before")
    );
    assert_eq!(verdict.payer.as_deref(), Some("0xbuyer"));
}

#[tokio::test]
async fn verify_500_with_invalid_reason_code_is_invalid_verdict() {
    let server = StandIn::always(Canned::json(
        500,
        &json!({"error": "invalid_exact_evm_signature: bad sig"}),
    ))
    .await;

    let verdict = server.client().verify(&v2_request()).await.unwrap();

    assert_eq!(
        verdict,
        VerifyResponse::invalid("invalid_exact_evm_signature", None)
    );
    assert_eq!(verdict.invalid_message, None);
}

#[tokio::test]
async fn verify_400_with_reason_code_error_is_invalid_verdict() {
    let server = StandIn::always(Canned::json(
        400,
        &json!({"error": "insufficient_funds: balance 0"}),
    ))
    .await;

    let verdict = server.client().verify(&v2_request()).await.unwrap();

    assert_eq!(verdict, VerifyResponse::invalid("insufficient_funds", None));
}

#[tokio::test]
async fn verify_500_plain_error_is_status_error() {
    let server = StandIn::always(Canned::json(500, &json!({"error": "boom"}))).await;

    let err = server.client().verify(&v2_request()).await.unwrap_err();

    match err {
        FacilitatorError::Status { status, message } => {
            assert_eq!(status, 500);
            assert_eq!(message.as_deref(), Some("boom"));
        }
        other => panic!("expected Status, got {other:?}"),
    }
}

#[tokio::test]
async fn verify_401_error_code_is_status_error_not_verdict() {
    let server = StandIn::always(Canned::json(401, &json!({"error": "unauthorized"}))).await;

    let err = server.client().verify(&v2_request()).await.unwrap_err();

    assert!(
        matches!(err, FacilitatorError::Status { status: 401, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn verify_502_html_is_status_error_with_truncated_message() {
    let html = format!("<html><body>{}</body></html>", "Bad gateway. ".repeat(50));
    let server = StandIn::always(Canned::raw(502, "text/html", &html)).await;

    let err = server.client().verify(&v2_request()).await.unwrap_err();

    match err {
        FacilitatorError::Status { status, message } => {
            assert_eq!(status, 502);
            let message = message.unwrap();
            assert!(message.starts_with("<html><body>Bad gateway."), "{message}");
            assert!(
                message.chars().count() <= 201,
                "{}",
                message.chars().count()
            );
        }
        other => panic!("expected Status, got {other:?}"),
    }
}

#[tokio::test]
async fn verify_malformed_2xx_json_is_malformed() {
    let server = StandIn::always(Canned::raw(200, "application/json", "{\"isValid\": tru")).await;

    let err = server.client().verify(&v2_request()).await.unwrap_err();

    assert!(matches!(err, FacilitatorError::Malformed(_)), "{err:?}");
}

#[tokio::test]
async fn verify_2xx_without_is_valid_is_malformed() {
    let server = StandIn::always(Canned::json(200, &json!({"payer": "0xbuyer"}))).await;

    let err = server.client().verify(&v2_request()).await.unwrap_err();

    match err {
        FacilitatorError::Malformed(message) => assert!(message.contains("isValid"), "{message}"),
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[tokio::test]
async fn verify_slow_facilitator_times_out() {
    let server =
        StandIn::always(Canned::json(200, &json!({"isValid": true})).after(Duration::from_secs(3)))
            .await;
    let facilitator = HttpFacilitator::builder(&server.base)
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();

    let started = Instant::now();
    let err = facilitator.verify(&v2_request()).await.unwrap_err();

    assert!(matches!(err, FacilitatorError::Timeout), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.hits("/verify"), 1);
}

#[tokio::test]
async fn verify_connection_refused_is_transport_error() {
    let closed = ClosedPort::new();
    let facilitator = HttpFacilitator::builder(closed.url())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();

    let err = facilitator.verify(&v2_request()).await.unwrap_err();

    assert!(matches!(err, FacilitatorError::Transport(_)), "{err:?}");
}

// ---------------------------------------------------------------------------
// /settle

#[tokio::test]
async fn settle_success_keeps_amount() {
    let server = StandIn::always(Canned::json(
        200,
        &json!({
            "success": true, "transaction": "0xtx", "network": "eip155:84532",
            "payer": "0xbuyer", "amount": "7500"
        }),
    ))
    .await;
    let req = v2_request();

    let receipt = server.client().settle(&req).await.unwrap();

    assert!(receipt.success);
    assert_eq!(receipt.transaction, "0xtx");
    assert_eq!(receipt.network, "eip155:84532");
    assert_eq!(receipt.payer.as_deref(), Some("0xbuyer"));
    assert_eq!(receipt.amount, Some(AtomicAmount::from(7500u64)));
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].method.clone(), seen[0].path.as_str()),
        (Method::POST, "/settle")
    );
    assert_eq!(seen[0].body, serde_json::to_value(&req).unwrap());
}

#[tokio::test]
async fn settle_200_failure_is_ok_refusal() {
    let server = StandIn::always(Canned::json(
        200,
        &json!({"success": false, "errorReason": "insufficient_funds", "network": "eip155:84532"}),
    ))
    .await;

    let receipt = server.client().settle(&v2_request()).await.unwrap();

    assert_eq!(
        receipt,
        SettleResponse::failure("eip155:84532", "insufficient_funds")
    );
    assert_eq!(receipt.transaction, "");
}

#[tokio::test]
async fn settle_malformed_2xx_is_malformed() {
    let missing_success = StandIn::always(Canned::json(
        200,
        &json!({"transaction": "0xtx", "network": "eip155:84532"}),
    ))
    .await;
    let missing_network = StandIn::always(Canned::json(200, &json!({"success": true}))).await;
    let not_json = StandIn::always(Canned::raw(200, "text/plain", "ok")).await;

    for server in [&missing_success, &missing_network, &not_json] {
        let err = server.client().settle(&v2_request()).await.unwrap_err();
        assert!(matches!(err, FacilitatorError::Malformed(_)), "{err:?}");
        assert_eq!(server.hits("/settle"), 1);
    }
}

#[tokio::test]
async fn settle_non_2xx_with_answer_body_is_that_answer() {
    let server = StandIn::always(Canned::json(
        400,
        &json!({"success": false, "errorReason": "invalid_transaction_state"}),
    ))
    .await;

    let receipt = server.client().settle(&v2_request()).await.unwrap();

    assert!(!receipt.success);
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some("invalid_transaction_state")
    );
    // The network was missing: the requirement's is used.
    assert_eq!(receipt.network, "eip155:84532");
}

/// A non-2xx reply refuses, never approves: a "valid" verdict or a
/// "successful" settlement under an error status is an error (so the engine
/// answers 502, runs no handler at verify, and withholds the body at
/// settlement).
#[tokio::test]
async fn a_non_2xx_reply_never_approves() {
    for status in [400, 401, 404, 429, 500, 502, 503] {
        let server = StandIn::always(Canned::json(
            status,
            &json!({"isValid": true, "payer": "0xbuyer"}),
        ))
        .await;
        let err = server.client().verify(&v2_request()).await.unwrap_err();
        assert!(
            matches!(err, FacilitatorError::Status { status: s, .. } if s == status),
            "{status}: {err:?}"
        );

        let server = StandIn::always(Canned::json(
            status,
            &json!({"success": true, "transaction": "0xtx", "network": "eip155:84532"}),
        ))
        .await;
        let err = server.client().settle(&v2_request()).await.unwrap_err();
        assert!(
            matches!(err, FacilitatorError::Status { status: s, .. } if s == status),
            "{status}: {err:?}"
        );
    }
}

#[tokio::test]
async fn settle_non_2xx_without_answer_is_status_error() {
    let server = StandIn::always(Canned::json(503, &json!({"error": "maintenance"}))).await;

    let err = server.client().settle(&v2_request()).await.unwrap_err();

    match err {
        FacilitatorError::Status { status, message } => {
            assert_eq!(status, 503);
            assert_eq!(message.as_deref(), Some("maintenance"));
        }
        other => panic!("expected Status, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// /supported

const SIGNER_A: &str = "0xAAAA000000000000000000000000000000000001";
const SIGNER_B: &str = "0xBBBB000000000000000000000000000000000002";

fn supported_body(fee_payer: &str, signers: &[&str]) -> Value {
    json!({
        "kinds": [
            {"x402Version": 2, "scheme": "exact", "network": "eip155:84532",
             "extra": {"feePayer": fee_payer, "name": "USDC"}},
            {"x402Version": 1, "scheme": "exact", "network": "base-sepolia"},
        ],
        "extensions": ["bazaar"],
        "signers": {"eip155:*": signers},
    })
}

fn fee_payer(answer: &SupportedResponse) -> String {
    answer
        .kind(X402Version::V2, "exact", "eip155:84532")
        .unwrap()
        .extra
        .as_ref()
        .unwrap()["feePayer"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn supported_is_cached_within_ttl() {
    let server = StandIn::always(Canned::json(200, &supported_body(SIGNER_A, &[SIGNER_A]))).await;
    let facilitator = server.client();

    let first = facilitator.supported().await.unwrap();
    let second = facilitator.clone().supported().await.unwrap();

    assert_eq!(server.hits("/supported"), 1);
    assert_eq!(first, second);
    assert_eq!(first.kinds.len(), 2);
    assert_eq!(first.kinds[1].x402_version, X402Version::V1);
    assert_eq!(first.kinds[1].network, "base-sepolia");
    assert_eq!(fee_payer(&first), SIGNER_A);
    assert_eq!(first.extensions, vec!["bazaar".to_owned()]);
    assert_eq!(first.signers["eip155:*"], vec![SIGNER_A.to_owned()]);
    assert_eq!(server.seen()[0].method, Method::GET);
}

#[tokio::test]
async fn supported_is_refetched_after_ttl() {
    let server = StandIn::always(Canned::json(200, &supported_body(SIGNER_A, &[SIGNER_A]))).await;
    let facilitator = HttpFacilitator::builder(&server.base)
        .supported_ttl(Duration::from_millis(300))
        .build()
        .unwrap();

    facilitator.supported().await.unwrap();
    facilitator.supported().await.unwrap();
    assert_eq!(server.hits("/supported"), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    facilitator.supported().await.unwrap();

    assert_eq!(server.hits("/supported"), 2);
}

#[tokio::test]
async fn supported_concurrent_callers_share_one_fetch() {
    let server = StandIn::always(
        Canned::json(200, &supported_body(SIGNER_A, &[SIGNER_A])).after(Duration::from_millis(200)),
    )
    .await;
    let facilitator = server.client();

    let calls = (0..5).map(|_| {
        let f = facilitator.clone();
        tokio::spawn(async move { f.supported().await })
    });
    let mut answers = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        answers.push(call.await.unwrap().unwrap());
    }

    assert_eq!(server.hits("/supported"), 1);
    assert!(answers.iter().all(|a| fee_payer(a) == SIGNER_A));
}

#[tokio::test]
async fn supported_v1_only_answer_is_accepted() {
    let server = StandIn::always(Canned::json(
        200,
        &json!({"kinds": [{"x402Version": 1, "scheme": "exact", "network": "base"}]}),
    ))
    .await;

    let answer = server.client().supported().await.unwrap();

    assert_eq!(answer.kinds.len(), 1);
    assert_eq!(answer.kinds[0].network, "base");
    assert_eq!(answer.kinds[0].extra, None);
    assert!(answer.extensions.is_empty());
    assert!(answer.signers.is_empty());
}

#[tokio::test]
async fn supported_keeps_cached_extra_while_its_signer_is_listed() {
    // The stand-in picks the fee payer in turn, both signers listed.
    let server = StandIn::start(|_, nth| {
        let payer = if nth % 2 == 1 { SIGNER_A } else { SIGNER_B };
        Canned::json(200, &supported_body(payer, &[SIGNER_A, SIGNER_B]))
    })
    .await;
    let facilitator = HttpFacilitator::builder(&server.base)
        .supported_ttl(Duration::from_millis(50))
        .build()
        .unwrap();

    let mut payers = Vec::new();
    for _ in 0..3 {
        payers.push(fee_payer(&facilitator.supported().await.unwrap()));
        tokio::time::sleep(Duration::from_millis(80)).await;
    }

    assert_eq!(server.hits("/supported"), 3);
    assert_eq!(payers, vec![SIGNER_A, SIGNER_A, SIGNER_A]);
}

#[tokio::test]
async fn supported_takes_new_extra_when_cached_signer_is_gone() {
    let server = StandIn::start(|_, nth| {
        if nth == 1 {
            Canned::json(200, &supported_body(SIGNER_A, &[SIGNER_A, SIGNER_B]))
        } else {
            Canned::json(200, &supported_body(SIGNER_B, &[SIGNER_B]))
        }
    })
    .await;
    let facilitator = HttpFacilitator::builder(&server.base)
        .supported_ttl(Duration::from_millis(50))
        .build()
        .unwrap();

    let first = facilitator.supported().await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let second = facilitator.supported().await.unwrap();

    assert_eq!(server.hits("/supported"), 2);
    assert_eq!(fee_payer(&first), SIGNER_A);
    assert_eq!(fee_payer(&second), SIGNER_B);
}

#[tokio::test]
async fn supported_failed_refresh_serves_previous_answer() {
    let server = StandIn::start(|_, nth| {
        if nth == 1 {
            Canned::json(200, &supported_body(SIGNER_A, &[SIGNER_A]))
        } else {
            Canned::json(500, &json!({"error": "boom"}))
        }
    })
    .await;
    let facilitator = HttpFacilitator::builder(&server.base)
        .supported_ttl(Duration::from_millis(50))
        .build()
        .unwrap();

    let first = facilitator.supported().await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let stale = facilitator.supported().await.unwrap();

    assert_eq!(server.hits("/supported"), 2);
    assert_eq!(stale, first);
}

#[tokio::test]
async fn supported_failure_without_cache_is_error_and_not_cached() {
    let server = StandIn::always(Canned::json(503, &json!({"error": "down"}))).await;
    let facilitator = server.client();

    for _ in 0..2 {
        let err = facilitator.supported().await.unwrap_err();
        assert!(
            matches!(err, FacilitatorError::Status { status: 503, .. }),
            "{err:?}"
        );
    }
    assert_eq!(server.hits("/supported"), 2);
}

// ---------------------------------------------------------------------------
// Auth headers

#[tokio::test]
async fn auth_headers_are_fetched_for_every_request() {
    let server = StandIn::start(|seen, _| match seen.path.as_str() {
        "/verify" => Canned::json(200, &json!({"isValid": true, "payer": "0xbuyer"})),
        "/settle" => Canned::json(
            200,
            &json!({"success": true, "transaction": "0xtx", "network": "eip155:84532"}),
        ),
        _ => Canned::json(200, &supported_body(SIGNER_A, &[SIGNER_A])),
    })
    .await;
    let calls = Arc::new(Mutex::new(Vec::<Endpoint>::new()));
    let log = Arc::clone(&calls);
    let facilitator = HttpFacilitator::builder(&server.base)
        .auth(move |endpoint: Endpoint| {
            let log = Arc::clone(&log);
            async move {
                let n = {
                    let mut log = log.lock().unwrap();
                    log.push(endpoint);
                    log.len()
                };
                let mut headers = HeaderMap::new();
                headers.insert(
                    header::AUTHORIZATION,
                    HeaderValue::from_str(&format!("Bearer token-{n}")).unwrap(),
                );
                Ok::<_, FacilitatorError>(headers)
            }
        })
        .build()
        .unwrap();
    let req = v2_request();

    facilitator.verify(&req).await.unwrap();
    facilitator.settle(&req).await.unwrap();
    facilitator.supported().await.unwrap();
    facilitator.verify(&req).await.unwrap();
    facilitator.supported().await.unwrap(); // cached: no request, no headers

    assert_eq!(
        *calls.lock().unwrap(),
        vec![
            Endpoint::Verify,
            Endpoint::Settle,
            Endpoint::Supported,
            Endpoint::Verify
        ]
    );
    let tokens: Vec<_> = server
        .seen()
        .into_iter()
        .map(|s| s.authorization.unwrap())
        .collect();
    assert_eq!(
        tokens,
        vec![
            "Bearer token-1",
            "Bearer token-2",
            "Bearer token-3",
            "Bearer token-4"
        ]
    );
}

#[tokio::test]
async fn auth_error_aborts_the_request() {
    let server = StandIn::always(Canned::json(200, &json!({"isValid": true}))).await;
    let facilitator = HttpFacilitator::builder(&server.base)
        .auth(|_: Endpoint| async {
            Err::<HeaderMap, _>(FacilitatorError::Status {
                status: 401,
                message: None,
            })
        })
        .build()
        .unwrap();

    let err = facilitator.verify(&v2_request()).await.unwrap_err();

    assert!(
        matches!(err, FacilitatorError::Status { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(server.seen().len(), 0);
}

// ---------------------------------------------------------------------------
// Configuration

#[test]
fn bad_urls_are_refused_and_debug_hides_credentials() {
    assert!(HttpFacilitator::new("not a url").is_err());
    assert!(HttpFacilitator::new("ftp://facilitator.example").is_err());

    let facilitator =
        HttpFacilitator::new("https://user:hunter2@facilitator.example/api/?apiKey=s3cret")
            .unwrap();
    let debug = format!("{facilitator:?}");
    assert!(debug.contains("https://facilitator.example/api"), "{debug}");
    assert!(
        !debug.contains("hunter2") && !debug.contains("s3cret"),
        "{debug}"
    );
}

// ---------------------------------------------------------------------------
// FacilitatorRouter

/// An in-process facilitator that names itself in its answers.
// Kept instead of `testing::StandIn`: these tests tell routed facilitators
// apart by the name in each answer and in each `/supported` error.
#[derive(Debug)]
struct Named {
    name: &'static str,
    calls: Arc<AtomicUsize>,
    supported: Option<SupportedResponse>,
}

impl Named {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            calls: Arc::new(AtomicUsize::new(0)),
            supported: None,
        }
    }

    fn with_supported(mut self, value: Value) -> Self {
        self.supported = Some(serde_json::from_value(value).unwrap());
        self
    }
}

#[async_trait]
impl Facilitator for Named {
    async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(VerifyResponse::valid(self.name))
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(SettleResponse {
            success: true,
            transaction: self.name.to_owned(),
            network: request.payment_requirements.network().to_owned(),
            ..SettleResponse::default()
        })
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.supported
            .clone()
            .ok_or_else(|| FacilitatorError::Status {
                status: 503,
                message: Some(self.name.to_owned()),
            })
    }
}

const SOLANA_DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

#[tokio::test]
async fn router_routes_by_network_and_scheme_in_order() {
    let names = ["svm", "upto", "sepolia", "evm", "fallback"];
    let facilitators: Vec<Named> = names.iter().map(|n| Named::new(n)).collect();
    let counters: Vec<_> = facilitators.iter().map(|f| Arc::clone(&f.calls)).collect();
    let mut it = facilitators.into_iter();
    let router = FacilitatorRouter::new()
        .route("solana:*", "*", it.next().unwrap())
        .route("eip155:*", "upto", it.next().unwrap())
        .route("eip155:84532", "exact", it.next().unwrap())
        .route("eip155:*", "*", it.next().unwrap())
        .fallback(it.next().unwrap());

    let cases = [
        (X402Version::V2, "eip155:84532", "exact", "sepolia"),
        (X402Version::V2, "eip155:84532", "upto", "upto"),
        (X402Version::V2, "eip155:8453", "exact", "evm"),
        (X402Version::V1, "base-sepolia", "exact", "sepolia"),
        (X402Version::V1, "base", "exact", "evm"),
        (X402Version::V2, SOLANA_DEVNET, "exact", "svm"),
        (X402Version::V1, "solana-devnet", "exact", "svm"),
        (X402Version::V2, "stellar:testnet", "exact", "fallback"),
    ];
    for (version, network, scheme, expected) in cases {
        let req = request(version, network, scheme);
        let verdict = router.verify(&req).await.unwrap();
        assert_eq!(
            verdict.payer.as_deref(),
            Some(expected),
            "verify {network} {scheme}"
        );
        let receipt = router.settle(&req).await.unwrap();
        assert_eq!(receipt.transaction, expected, "settle {network} {scheme}");
    }

    let counts: Vec<usize> = counters.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    // Two calls (verify + settle) per case routed to each facilitator.
    assert_eq!(counts, vec![4, 2, 4, 4, 2]);
}

#[tokio::test]
async fn router_matches_v1_names_against_caip2_wildcards() {
    let evm = Named::new("evm");
    let evm_calls = Arc::clone(&evm.calls);
    let router = FacilitatorRouter::new().route("eip155:*", "exact", evm);

    let verdict = router
        .verify(&request(X402Version::V1, "base-sepolia", "exact"))
        .await
        .unwrap();

    assert_eq!(verdict.payer.as_deref(), Some("evm"));
    assert_eq!(evm_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn router_without_match_or_fallback_is_unrouted() {
    let evm = Named::new("evm");
    let evm_calls = Arc::clone(&evm.calls);
    let router = FacilitatorRouter::new().route("eip155:*", "exact", evm);

    let cases = [
        (X402Version::V2, SOLANA_DEVNET, "exact"),
        (X402Version::V2, "eip155:84532", "upto"),
        (X402Version::V1, "not-a-known-network", "exact"),
    ];
    for (version, network, scheme) in cases {
        let req = request(version, network, scheme);
        match router.verify(&req).await.unwrap_err() {
            FacilitatorError::Unrouted {
                scheme: s,
                network: n,
            } => {
                assert_eq!((s.as_str(), n.as_str()), (scheme, network));
            }
            other => panic!("expected Unrouted, got {other:?}"),
        }
        let err = router.settle(&req).await.unwrap_err();
        assert!(matches!(err, FacilitatorError::Unrouted { .. }), "{err:?}");
    }
    assert_eq!(evm_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn router_supported_merges_in_route_order() {
    let evm = Named::new("evm").with_supported(json!({
        "kinds": [
            {"x402Version": 2, "scheme": "exact", "network": "eip155:84532", "extra": {"feePayer": "evm"}},
            {"x402Version": 1, "scheme": "exact", "network": "base-sepolia"},
            // Not routed to this facilitator: left out.
            {"x402Version": 2, "scheme": "exact", "network": SOLANA_DEVNET, "extra": {"feePayer": "evm-svm"}},
        ],
        "extensions": ["bazaar"],
        "signers": {"eip155:*": ["0xevm"]},
    }));
    let broken = Named::new("broken");
    let broken_calls = Arc::clone(&broken.calls);
    let fallback = Named::new("fallback").with_supported(json!({
        "kinds": [
            // Routed to `evm`: left out.
            {"x402Version": 2, "scheme": "exact", "network": "eip155:84532", "extra": {"feePayer": "fallback"}},
            {"x402Version": 2, "scheme": "exact", "network": SOLANA_DEVNET, "extra": {"feePayer": "svm-payer"}},
            {"x402Version": 2, "scheme": "upto", "network": "eip155:8453"},
        ],
        "extensions": ["bazaar", "sign-in-with-x"],
        "signers": {"eip155:*": ["0xevm", "0xfallback"], "solana:*": ["svm-payer"]},
    }));
    let router = FacilitatorRouter::new()
        .route("eip155:*", "exact", evm)
        .route("stellar:*", "*", broken)
        .fallback(fallback);

    let merged = router.supported().await.unwrap();

    let kinds: Vec<(u8, &str, &str, Option<&str>)> = merged
        .kinds
        .iter()
        .map(|k| {
            let payer = k
                .extra
                .as_ref()
                .and_then(|e| e.get("feePayer"))
                .and_then(Value::as_str);
            (
                k.x402_version.number(),
                k.scheme.as_str(),
                k.network.as_str(),
                payer,
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (2, "exact", "eip155:84532", Some("evm")),
            (1, "exact", "base-sepolia", None),
            (2, "exact", SOLANA_DEVNET, Some("svm-payer")),
            (2, "upto", "eip155:8453", None),
        ]
    );
    assert_eq!(
        merged.extensions,
        vec!["bazaar".to_owned(), "sign-in-with-x".to_owned()]
    );
    let expected_signers: BTreeMap<String, Vec<String>> = [
        (
            "eip155:*".to_owned(),
            vec!["0xevm".to_owned(), "0xfallback".to_owned()],
        ),
        ("solana:*".to_owned(), vec!["svm-payer".to_owned()]),
    ]
    .into_iter()
    .collect();
    assert_eq!(merged.signers, expected_signers);
    assert_eq!(broken_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn router_supported_fails_only_when_all_fail() {
    let router = FacilitatorRouter::new()
        .route("eip155:*", "*", Named::new("first"))
        .fallback(Named::new("second"));

    match router.supported().await.unwrap_err() {
        FacilitatorError::Status { status, message } => {
            assert_eq!(status, 503);
            assert_eq!(message.as_deref(), Some("first"));
        }
        other => panic!("expected the first error, got {other:?}"),
    }

    let empty = FacilitatorRouter::new().supported().await.unwrap();
    assert_eq!(empty, SupportedResponse::default());
}

#[tokio::test]
async fn router_over_http_facilitators() {
    let evm_server = StandIn::always(Canned::json(
        200,
        &json!({"isValid": true, "payer": "0xevm"}),
    ))
    .await;
    let other_server = StandIn::always(Canned::json(
        200,
        &json!({"isValid": false, "invalidReason": "unsupported_scheme"}),
    ))
    .await;
    let router = FacilitatorRouter::new()
        .route("eip155:*", "exact", evm_server.client())
        .fallback(other_server.client());

    let evm = router
        .verify(&request(X402Version::V1, "base-sepolia", "exact"))
        .await
        .unwrap();
    let other = router
        .verify(&request(X402Version::V2, SOLANA_DEVNET, "exact"))
        .await
        .unwrap();

    assert_eq!(evm, VerifyResponse::valid("0xevm"));
    assert_eq!(other.invalid_reason.as_deref(), Some("unsupported_scheme"));
    assert_eq!(
        (evm_server.hits("/verify"), other_server.hits("/verify")),
        (1, 1)
    );
    assert_eq!(
        evm_server.seen()[0].body["paymentRequirements"]["network"],
        json!("base-sepolia")
    );
}

// ---------------------------------------------------------------------------
// Interop: Node's own HTTP server.

/// `HttpFacilitator` against Node's HTTP server (`tests/js/http-facilitator.mjs`):
/// its keep-alive headers, a Content-Length answer to `/verify` and a
/// chunked one, written in pieces, to `/settle`. Every call is answered
/// whole, on the one connection the client keeps.
#[tokio::test]
async fn a_node_http_server_is_read_whole_on_one_kept_connection() {
    use tokio::io::AsyncBufReadExt as _;

    let mut child = x402_tests::require::node_async("http-facilitator.mjs")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let base = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(base) = line.strip_prefix("listening on ") {
                return base.to_owned();
            }
        }
        panic!("node ended before it listened");
    })
    .await
    .expect("node listens within 30 s");

    let facilitator = HttpFacilitator::new(&base).unwrap();
    let req = v2_request();
    for _ in 0..3 {
        let verdict = facilitator.verify(&req).await.unwrap();
        assert_eq!(verdict, VerifyResponse::valid("0xbuyer"));
        let receipt = facilitator.settle(&req).await.unwrap();
        assert!(receipt.success);
        assert_eq!(receipt.transaction, format!("0x{}", "ab".repeat(32)));
        assert_eq!(receipt.network, "eip155:84532");
        assert_eq!(receipt.payer.as_deref(), Some("0xbuyer"));
    }
    let connections: Value = reqwest::get(format!("{base}/connections"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The client's one connection, and this request's own.
    assert_eq!(connections["connections"], json!(2), "{connections}");
    child.kill().await.unwrap();
}
