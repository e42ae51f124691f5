//! `upto` routes charge what the handler reports, never more than the
//! ceiling, and nothing for zero usage.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc, Mutex,
};

use axum::{
    http::{HeaderMap, HeaderValue},
    routing::get,
    Router,
};
use serde_json::Value;
use x402_axum::{PaywallLayer, UsageMeter};
use x402_core::{codec, route::RequestView, testing, Completion, Decision, Engine, Offer, Route};
use x402_tests::{
    adapters::bind, client, payment, standin::UPTO_FACILITATOR, EventLog, StandIn, PAY_TO,
};

/// What a handler should report, set per request by the test.
#[derive(Clone, Default)]
struct Report(Arc<Mutex<ReportKind>>);

#[derive(Clone, Default)]
enum ReportKind {
    #[default]
    Nothing,
    Meter(u64),
    Header(&'static str),
}

async fn serve(standin: &StandIn, report: Report, calls: Arc<AtomicUsize>) -> String {
    let engine = Engine::builder(standin.facilitator())
        .route(Route::get("/metered").offer(Offer::upto("eip155:84532", "2000", PAY_TO)))
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/metered",
            get(move |UsageMeter(meter): UsageMeter| {
                let report = report.clone();
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let mut headers = HeaderMap::new();
                    match report.0.lock().unwrap().clone() {
                        ReportKind::Nothing => {}
                        ReportKind::Meter(n) => meter.add(n),
                        ReportKind::Header(h) => {
                            headers.insert("settlement-overrides", HeaderValue::from_static(h));
                        }
                    }
                    (headers, "metered result")
                }
            }),
        )
        .layer(PaywallLayer::new(engine));
    let (listener, base) = bind().await;
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

struct Setup {
    standin: StandIn,
    report: Report,
    calls: Arc<AtomicUsize>,
    base: String,
    client: reqwest::Client,
}

impl Setup {
    async fn new() -> Self {
        let standin = StandIn::start(EventLog::default()).await;
        let report = Report::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let base = serve(&standin, report.clone(), calls.clone()).await;
        Self {
            standin,
            report,
            calls,
            base,
            client: client::client(),
        }
    }

    async fn pay(&self, report: ReportKind) -> reqwest::Response {
        *self.report.0.lock().unwrap() = report;
        let challenge = self
            .client
            .get(format!("{}/metered", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(challenge.status(), 402);
        let required: Value =
            codec::decode(challenge.headers()["payment-required"].as_bytes(), 1 << 16).unwrap();
        let row = required["accepts"][0].clone();
        assert_eq!(row["scheme"], "upto");
        assert_eq!(row["amount"], "2000");
        assert_eq!(row["extra"]["facilitatorAddress"], UPTO_FACILITATOR);
        assert_eq!(row["extra"]["assetTransferMethod"], "permit2");
        self.client
            .get(format!("{}/metered", self.base))
            .header("PAYMENT-SIGNATURE", payment::v2_header(&row))
            .send()
            .await
            .unwrap()
    }

    fn settled_amounts(&self) -> Vec<String> {
        self.standin
            .settle_requests()
            .iter()
            .map(|r| {
                r["paymentRequirements"]["amount"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }
}

fn receipt(response: &reqwest::Response) -> Value {
    codec::decode(response.headers()["payment-response"].as_bytes(), 1 << 16).unwrap()
}

#[tokio::test]
async fn charges_what_the_meter_reports() {
    let s = Setup::new().await;
    // 37% of the 2000 ceiling.
    let response = s.pay(ReportKind::Meter(740)).await;
    assert_eq!(response.status(), 200);
    let r = receipt(&response);
    assert_eq!(r["success"], true);
    assert_eq!(r["amount"], "740");
    assert_eq!(response.text().await.unwrap(), "metered result");
    assert_eq!(s.settled_amounts(), ["740"]);
    // Verification was against the ceiling the buyer authorised.
    assert_eq!(
        s.standin.verify_requests()[0]["paymentRequirements"]["amount"],
        "2000"
    );
    assert_eq!(s.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn usage_above_the_ceiling_is_charged_the_ceiling() {
    let s = Setup::new().await;
    let response = s.pay(ReportKind::Meter(1_000_000)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(receipt(&response)["amount"], "2000");
    assert_eq!(s.settled_amounts(), ["2000"]);
}

#[tokio::test]
async fn zero_usage_settles_nothing() {
    let s = Setup::new().await;
    let response = s.pay(ReportKind::Meter(0)).await;
    assert_eq!(response.status(), 200);
    let r = receipt(&response);
    assert_eq!(r["success"], true);
    assert_eq!(r["amount"], "0");
    assert_eq!(r["transaction"], "");
    assert_eq!(
        s.standin.settle_calls(),
        0,
        "no /settle call for a zero charge"
    );
}

#[tokio::test]
async fn settlement_overrides_in_every_form_and_never_leaked() {
    let s = Setup::new().await;
    for (header, expected) in [
        ("1000", "1000"),
        ("37%", "740"),
        ("33.33%", "666"),
        ("$0.0015", "1500"),
        (r#"{"amount":"50%"}"#, "1000"),
        ("5000", "2000"),
    ] {
        let response = s.pay(ReportKind::Header(header)).await;
        assert_eq!(response.status(), 200, "{header}");
        assert!(
            response.headers().get("settlement-overrides").is_none(),
            "{header} leaked"
        );
        assert_eq!(receipt(&response)["amount"], expected, "{header}");
    }
    assert_eq!(
        s.settled_amounts(),
        ["1000", "740", "666", "1500", "1000", "2000"]
    );
}

#[tokio::test]
async fn malformed_override_charges_nothing() {
    let s = Setup::new().await;
    for bad in ["lots", "150%", "-5", "1e3", "$0.0000001"] {
        let response = s.pay(ReportKind::Header(bad)).await;
        assert_eq!(response.status(), 500, "{bad}");
        assert!(response.headers().get("settlement-overrides").is_none());
        assert!(response.headers().get("payment-response").is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_settlement_override");
    }
    assert_eq!(s.standin.settle_calls(), 0);
}

#[tokio::test]
async fn no_report_is_charged_the_ceiling() {
    let s = Setup::new().await;
    let response = s.pay(ReportKind::Nothing).await;
    assert_eq!(response.status(), 200);
    assert_eq!(receipt(&response)["amount"], "2000");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    #[test]
    fn never_charges_above_the_ceiling(ceiling in 1u64..u64::MAX, report in proptest::prelude::any::<u64>()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let supported = serde_json::from_value(x402_tests::standin::supported_json()).unwrap();
            let recorder = Arc::new(testing::StandIn::new().with_supported(supported));
            let engine = Engine::builder(recorder.clone())
                .route(Route::get("/m").offer(Offer::upto("eip155:84532", ceiling.to_string(), PAY_TO)))
                .build()
                .unwrap();
            let (parts, ()) = http::Request::get("/m").body(()).unwrap().into_parts();
            let Decision::Respond(challenge) = engine.process(RequestView::from_parts(&parts)).await else { panic!() };
            let required: Value = codec::decode(challenge.headers()["payment-required"].as_bytes(), 1 << 16).unwrap();
            let header = payment::v2_header(&required["accepts"][0]);
            let (parts, ()) = http::Request::get("/m").header("payment-signature", header).body(()).unwrap().into_parts();
            let Decision::Paid(paid) = engine.process(RequestView::from_parts(&parts)).await else { panic!() };
            paid.payment().meter.as_ref().unwrap().add(report);
            let mut headers = HeaderMap::new();
            let Completion::Deliver = paid.complete(http::StatusCode::OK, &mut headers).await else { panic!() };
            let settled: Vec<String> = recorder
                .settle_requests()
                .iter()
                .map(|r| r.payment_requirements.amount().to_string())
                .collect();
            let expected = report.min(ceiling);
            if expected == 0 {
                assert!(settled.is_empty());
            } else {
                assert_eq!(settled, [expected.to_string()]);
            }
        });
    }
}
