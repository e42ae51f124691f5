//! Metrics (feature `metrics`): a scripted sequence of paid, refused,
//! replayed and failed requests through the engine, then the counters a
//! Prometheus recorder renders.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicU8, Ordering},
    sync::Arc,
    time::Duration,
};

use http::{HeaderMap, HeaderValue, StatusCode};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde_json::{json, Value};
use x402_core::{
    codec,
    facilitator::{Facilitator, FacilitatorError},
    proto::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse},
    route::RequestView,
    session::SessionOffer,
    Completion, Decision, Engine, Offer, Route,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const NETWORK: &str = "eip155:84532";
const USDC: &str = "0x036cbd53842c5426634e7929541ec2318f3dcf7e";

const OK: u8 = 0;
const INVALID: u8 = 1;
const VERIFY_DOWN: u8 = 2;
const SETTLE_REFUSED: u8 = 3;
const SETTLE_DOWN: u8 = 4;

/// A facilitator whose next answers the test chooses.
#[derive(Debug, Default)]
struct Scripted {
    mode: AtomicU8,
}

#[async_trait::async_trait]
impl Facilitator for Scripted {
    async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> {
        match self.mode.load(Ordering::SeqCst) {
            INVALID => Ok(VerifyResponse::invalid(
                "insufficient_funds",
                Some(PAYER.into()),
            )),
            VERIFY_DOWN => Err(FacilitatorError::Timeout),
            _ => Ok(VerifyResponse::valid(PAYER)),
        }
    }
    async fn settle(&self, r: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> {
        match self.mode.load(Ordering::SeqCst) {
            SETTLE_DOWN => Err(FacilitatorError::Timeout),
            SETTLE_REFUSED => Ok(SettleResponse {
                success: false,
                error_reason: Some("transaction_failed".into()),
                network: r.payment_requirements.network().into(),
                ..SettleResponse::default()
            }),
            _ => Ok(SettleResponse {
                success: true,
                transaction: "0xfeed".into(),
                network: r.payment_requirements.network().into(),
                ..SettleResponse::default()
            }),
        }
    }
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        Ok(serde_json::from_value(json!({
            "kinds": [
                {"x402Version": 2, "scheme": "exact", "network": NETWORK},
                {"x402Version": 2, "scheme": "upto", "network": NETWORK,
                 "extra": {"facilitatorAddress": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"}}
            ],
            "extensions": [],
            "signers": {}
        }))
        .unwrap())
    }
}

fn engine(facilitator: Arc<Scripted>) -> Engine {
    Engine::builder_arc(facilitator)
        .route(Route::get("/exact/evm/eip3009").offer(Offer::exact(NETWORK, "$0.001", PAY_TO)))
        .route(Route::get("/upto/evm/permit2").offer(Offer::upto(NETWORK, "2000", PAY_TO)))
        .route(
            Route::get("/session/demo")
                .offer(Offer::exact(NETWORK, "$0.001", PAY_TO))
                .session(
                    SessionOffer::new("demo-100", 100, Duration::from_secs(3600), "demo")
                        .offer(Offer::exact(NETWORK, "$0.05", PAY_TO)),
                ),
        )
        .build()
        .unwrap()
}

fn random_hex(n: usize) -> String {
    let mut s = String::from("0x");
    for _ in 0..n {
        s.push_str(&format!("{:02x}", rand::random::<u8>()));
    }
    s
}

fn valid_before() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (now + 300).to_string()
}

/// A `PAYMENT-SIGNATURE` for a row of a 402 (a fresh nonce each time), in
/// the transfer method the row advertises.
fn pay(row: &Value) -> String {
    let payload = if row["extra"]["assetTransferMethod"] == "permit2" {
        json!({
            "signature": random_hex(65),
            "permit2Authorization": {
                "from": PAYER,
                "permitted": {"token": row["asset"], "amount": row["amount"]},
                "spender": x402_core::evm::UPTO_PERMIT2_PROXY.to_checksum(None),
                "nonce": format!("0x{}", random_hex(16).trim_start_matches("0x")),
                "deadline": valid_before(),
                "witness": {"to": row["payTo"], "validAfter": "0"}
            }
        })
    } else {
        json!({
            "signature": random_hex(65),
            "authorization": {
                "from": PAYER, "to": row["payTo"], "value": row["amount"], "validAfter": "0",
                "validBefore": valid_before(), "nonce": random_hex(32)
            }
        })
    };
    codec::encode(&json!({"x402Version": 2, "accepted": row, "payload": payload})).unwrap()
}

/// One request through the engine; the handler answers `status`, with
/// `handler_headers`. Returns the final status and headers.
async fn call(
    engine: &Engine,
    path: &str,
    headers: &[(&str, &str)],
    status: StatusCode,
    handler_headers: HeaderMap,
) -> (StatusCode, HeaderMap) {
    let mut builder = http::Request::get(path);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let (parts, ()) = builder.body(()).unwrap().into_parts();
    match engine.process(RequestView::from_parts(&parts)).await {
        Decision::Pass => panic!("protected"),
        Decision::Respond(r) => (r.status(), r.headers().clone()),
        Decision::Paid(paid) => {
            let mut out = handler_headers;
            match paid.complete(status, &mut out).await {
                Completion::Deliver => (status, out),
                Completion::Replace(r) => (r.status(), r.headers().clone()),
            }
        }
    }
}

async fn get(engine: &Engine, path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap) {
    call(engine, path, headers, StatusCode::OK, HeaderMap::new()).await
}

async fn first_row(engine: &Engine, path: &str) -> Value {
    let (status, headers) = get(engine, path, &[]).await;
    assert_eq!(status, 402);
    let v: Value = codec::decode(headers["payment-required"].as_bytes(), 1 << 16).unwrap();
    v["accepts"][0].clone()
}

async fn script(f: Arc<Scripted>) {
    let e = engine(f.clone());
    let set = |m| f.mode.store(m, Ordering::SeqCst);

    // 1 challenge; 1 paid (1000); its replay refused.
    let row = first_row(&e, "/exact/evm/eip3009").await;
    let header = pay(&row);
    assert_eq!(
        get(&e, "/exact/evm/eip3009", &[("payment-signature", &header)])
            .await
            .0,
        200
    );
    assert_eq!(
        get(&e, "/exact/evm/eip3009", &[("payment-signature", &header)])
            .await
            .0,
        402
    );

    // Refused by the facilitator; facilitator down at verify.
    set(INVALID);
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &pay(&row))]
        )
        .await
        .0,
        402
    );
    set(VERIFY_DOWN);
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &pay(&row))]
        )
        .await
        .0,
        502
    );

    // Settlement refused; settlement outcome unknown.
    set(SETTLE_REFUSED);
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &pay(&row))]
        )
        .await
        .0,
        402
    );
    set(SETTLE_DOWN);
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &pay(&row))]
        )
        .await
        .0,
        502
    );
    set(OK);

    // A failed handler is not charged.
    let (status, _) = call(
        &e,
        "/exact/evm/eip3009",
        &[("payment-signature", &pay(&row))],
        StatusCode::INTERNAL_SERVER_ERROR,
        HeaderMap::new(),
    )
    .await;
    assert_eq!(status, 500);

    // upto: charged 740 of 2000.
    let upto = first_row(&e, "/upto/evm/permit2").await;
    let mut report = HeaderMap::new();
    report.insert("settlement-overrides", HeaderValue::from_static("740"));
    let (status, _) = call(
        &e,
        "/upto/evm/permit2",
        &[("payment-signature", &pay(&upto))],
        StatusCode::OK,
        report,
    )
    .await;
    assert_eq!(status, 200);

    // A session bought (50000) and two calls redeemed.
    let (_, headers) = get(&e, "/session/demo", &[]).await;
    let v: Value = codec::decode(headers["payment-required"].as_bytes(), 1 << 16).unwrap();
    let session_row = v["extensions"]["session"]["info"]["offers"][0]["accepts"][0].clone();
    let (status, headers) = get(
        &e,
        "/session/demo",
        &[("payment-signature", &pay(&session_row))],
    )
    .await;
    assert_eq!(status, 200);
    let token = headers["x-payment-session"].to_str().unwrap().to_owned();
    for _ in 0..2 {
        assert_eq!(
            get(&e, "/session/demo", &[("x-payment-session", &token)])
                .await
                .0,
            200
        );
    }
}

/// `name{k="v",...} value` lines, keyed by name and sorted labels.
fn parse(text: &str) -> BTreeMap<(String, BTreeMap<String, String>), f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels: BTreeMap<String, String> = labels
            .split("\",")
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect();
        out.insert((name.to_owned(), labels), value.parse().unwrap());
    }
    out
}

#[test]
fn a_scripted_sequence_is_counted() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let facilitator = Arc::new(Scripted::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        x402_core::metrics::describe();
        runtime.block_on(script(facilitator));
    });
    let text = handle.render();
    let series = parse(&text);
    let value = |name: &str, labels: &[(&str, &str)]| {
        let key = (
            name.to_owned(),
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        series
            .get(&key)
            .copied()
            .unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{text}"))
    };
    let exact = "/exact/evm/eip3009";
    // Challenges: the three unpaid requests, the replay, the invalid payment,
    // the refused settlement.
    assert_eq!(
        value(
            "x402_challenges_total",
            &[("route", exact), ("reason", "payment_required")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_challenges_total",
            &[
                ("route", "/upto/evm/permit2"),
                ("reason", "payment_required")
            ]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_challenges_total",
            &[("route", "/session/demo"), ("reason", "payment_required")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_challenges_total",
            &[("route", exact), ("reason", "payment_replayed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_challenges_total",
            &[("route", exact), ("reason", "insufficient_funds")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_challenges_total",
            &[("route", exact), ("reason", "transaction_failed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_refusals_total",
            &[("route", exact), ("reason", "facilitator_unavailable")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_refusals_total",
            &[("route", exact), ("reason", "settlement_unknown")]
        ),
        1.0
    );

    // Verifications: every payment but the session calls.
    assert_eq!(
        value(
            "x402_verifications_total",
            &[("outcome", "valid"), ("reason", "")]
        ),
        7.0
    );
    assert_eq!(
        value(
            "x402_verifications_total",
            &[("outcome", "invalid"), ("reason", "insufficient_funds")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_verifications_total",
            &[("outcome", "error"), ("reason", "facilitator_unavailable")]
        ),
        1.0
    );

    // Settlements: exact, upto, session purchase; one refused, one unknown.
    assert_eq!(
        value(
            "x402_settlements_total",
            &[("outcome", "success"), ("reason", "")]
        ),
        3.0
    );
    assert_eq!(
        value(
            "x402_settlements_total",
            &[("outcome", "failure"), ("reason", "transaction_failed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_settlements_total",
            &[("outcome", "error"), ("reason", "settlement_unknown")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "x402_amount_settled_total",
            &[("network", NETWORK), ("asset", USDC)]
        ),
        1000.0 + 740.0 + 50000.0
    );

    assert_eq!(value("x402_replays_refused_total", &[]), 1.0);
    assert_eq!(value("x402_sessions_opened_total", &[]), 1.0);
    assert_eq!(value("x402_sessions_redeemed_total", &[]), 2.0);

    // Facilitator latency: one observation per call.
    assert_eq!(
        value("x402_facilitator_seconds_count", &[("op", "verify")]),
        9.0
    );
    assert_eq!(
        value("x402_facilitator_seconds_count", &[("op", "settle")]),
        5.0
    );
    assert_eq!(
        value("x402_facilitator_seconds_count", &[("op", "supported")]),
        1.0
    );
    assert!(text.contains("# HELP x402_challenges_total"));
}

#[test]
fn claim_store_latency_is_recorded_by_the_wrapper() {
    use x402_core::{
        claim::{ClaimStore, MemoryClaimStore},
        metrics::TimedClaimStore,
    };
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = TimedClaimStore::new(MemoryClaimStore::new());
            let until = std::time::SystemTime::now() + Duration::from_secs(60);
            store.claim("k", until).await.unwrap();
            store.claim("k", until).await.unwrap();
            store.release("k").await.unwrap();
        });
    });
    let series = parse(&handle.render());
    let count = |op: &str| {
        series[&(
            "x402_claim_store_seconds_count".to_owned(),
            [
                ("op".to_owned(), op.to_owned()),
                ("outcome".to_owned(), "ok".to_owned()),
            ]
            .into(),
        )]
    };
    assert_eq!(count("claim"), 2.0);
    assert_eq!(count("release"), 1.0);
}
