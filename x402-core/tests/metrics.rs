//! Metrics (feature `metrics`): a scripted sequence of paid, refused,
//! replayed and failed requests through the engine, then the counters a
//! Prometheus recorder renders.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use http::{HeaderMap, HeaderValue, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusBuilder;
use x402_core::{
    proto::v2,
    session::SessionOffer,
    testing::{self, SettleAnswer, StandIn, VerifyAnswer},
    Engine, Offer, Route, VerifiedPayment,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const NETWORK: &str = "eip155:84532";
const USDC: &str = "0x036cbd53842c5426634e7929541ec2318f3dcf7e";

fn engine(facilitator: Arc<StandIn>) -> Engine {
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

/// One request through the engine; the handler (which must only run for a
/// paid request) answers `status`, with `handler_headers`. Returns the final
/// status and headers.
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
    let request = builder.body(()).unwrap();
    let response = testing::serve(engine, request, |request| async move {
        assert!(
            request.extensions().get::<VerifiedPayment>().is_some(),
            "{path} is protected: the handler runs only when paid"
        );
        let mut response = Response::new(String::new());
        *response.status_mut() = status;
        *response.headers_mut() = handler_headers;
        response
    })
    .await;
    (response.status(), response.headers().clone())
}

async fn get(engine: &Engine, path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap) {
    call(engine, path, headers, StatusCode::OK, HeaderMap::new()).await
}

/// The 402 of an unpaid request to `path`.
async fn challenge(engine: &Engine, path: &str) -> v2::PaymentRequired {
    testing::challenge(engine, http::Request::get(path).body(()).unwrap()).await
}

async fn script(f: Arc<StandIn>) {
    let e = engine(f.clone());

    // 1 challenge; 1 paid (1000); its replay refused.
    let row = challenge(&e, "/exact/evm/eip3009").await.accepts[0].clone();
    let header = testing::payment(&row);
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
    f.set_verify(VerifyAnswer::Invalid("insufficient_funds".into()));
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &testing::payment(&row))]
        )
        .await
        .0,
        402
    );
    f.set_verify(VerifyAnswer::Unavailable);
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &testing::payment(&row))]
        )
        .await
        .0,
        502
    );
    f.set_verify(VerifyAnswer::Valid);

    // Settlement refused; settlement outcome unknown.
    f.set_settle(SettleAnswer::Refused("transaction_failed".into()));
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &testing::payment(&row))]
        )
        .await
        .0,
        402
    );
    f.set_settle(SettleAnswer::Unavailable);
    assert_eq!(
        get(
            &e,
            "/exact/evm/eip3009",
            &[("payment-signature", &testing::payment(&row))]
        )
        .await
        .0,
        502
    );
    f.set_settle(SettleAnswer::Success);

    // A failed handler is not charged.
    let (status, _) = call(
        &e,
        "/exact/evm/eip3009",
        &[("payment-signature", &testing::payment(&row))],
        StatusCode::INTERNAL_SERVER_ERROR,
        HeaderMap::new(),
    )
    .await;
    assert_eq!(status, 500);

    // upto: charged 740 of 2000.
    let upto = challenge(&e, "/upto/evm/permit2").await.accepts[0].clone();
    let mut report = HeaderMap::new();
    report.insert("settlement-overrides", HeaderValue::from_static("740"));
    let (status, _) = call(
        &e,
        "/upto/evm/permit2",
        &[("payment-signature", &testing::payment(&upto))],
        StatusCode::OK,
        report,
    )
    .await;
    assert_eq!(status, 200);

    // A session bought (50000) and two calls redeemed.
    let required = challenge(&e, "/session/demo").await;
    let session_row: v2::PaymentRequirements = serde_json::from_value(
        required.extensions["session"]["info"]["offers"][0]["accepts"][0].clone(),
    )
    .unwrap();
    let (status, headers) = get(
        &e,
        "/session/demo",
        &[("payment-signature", &testing::payment(&session_row))],
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
    // Every payment verified but the session calls; the exact, upto and
    // session purchases settled, and the refused and unknown settlements.
    f.assert_calls(9, 5);
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
    let facilitator = Arc::new(StandIn::new().supporting(NETWORK));
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
