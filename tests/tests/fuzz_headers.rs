//! 10,000 random and mutated payment headers through `Engine::process`
//! directly, against a facilitator that answers invalid: no panic, always a
//! 402 (never 200 without a valid verdict, never a 5xx since the facilitator
//! always answers).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use proptest::prelude::*;
use serde_json::{json, Value};
use x402_core::{
    codec,
    engine::Decision,
    route::RequestView,
    testing::{SettleAnswer, StandIn, VerifyAnswer},
    Engine,
};
use x402_tests::{client::standard_engine, payment, suite::expected_row, PAY_TO};

const REASON: &str = "fuzz_says_invalid";

struct Harness {
    runtime: tokio::runtime::Runtime,
    engine: Engine,
    facilitator: Arc<StandIn>,
}

impl Harness {
    fn new() -> Self {
        let supported = serde_json::from_value(x402_tests::standin::supported_json()).unwrap();
        let facilitator = Arc::new(StandIn::new().with_supported(supported).without_records());
        facilitator.set_verify(VerifyAnswer::Invalid(REASON.into()));
        facilitator.set_settle(SettleAnswer::Refused(REASON.into()));
        Self {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            engine: standard_engine(facilitator.clone()),
            facilitator,
        }
    }

    /// Runs one header through the engine and checks the outcome.
    fn check(&self, name: &HeaderName, value: &[u8], path: &str) -> Result<(), TestCaseError> {
        let Ok(value) = HeaderValue::from_bytes(value) else {
            return Ok(()); // not sendable over HTTP at all
        };
        let mut headers = HeaderMap::new();
        headers.insert(name.clone(), value);
        headers.insert("host", HeaderValue::from_static("fuzz.test"));
        let uri: Uri = path.parse().unwrap();
        let before = self.facilitator.verify_calls();
        let decision = self.runtime.block_on(async {
            self.engine
                .process(RequestView::new(&Method::GET, &uri, &headers))
                .await
        });
        let verified = self.facilitator.verify_calls() > before;
        prop_assert_eq!(self.facilitator.settle_calls(), 0);
        match decision {
            Decision::Respond(response) => {
                prop_assert_eq!(response.status().as_u16(), 402);
                let header = response.headers().get("payment-required");
                prop_assert!(header.is_some(), "402 without PAYMENT-REQUIRED");
                let v2: Value = codec::decode(header.unwrap().as_bytes(), usize::MAX).unwrap();
                let error = v2["error"].as_str().unwrap_or_default().to_owned();
                if verified {
                    prop_assert_eq!(error, REASON);
                } else {
                    prop_assert_ne!(error.as_str(), REASON);
                    prop_assert!(!error.is_empty());
                }
            }
            Decision::Pass => prop_assert!(false, "protected route passed without payment"),
            Decision::Paid(_) => prop_assert!(false, "paid without a valid verdict"),
        }
        Ok(())
    }
}

fn header_name() -> impl Strategy<Value = HeaderName> {
    prop_oneof![
        Just(HeaderName::from_static("payment-signature")),
        Just(HeaderName::from_static("x-payment")),
    ]
}

fn path() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("/paid"),
        Just("/stream"),
        Just("/dynamic"),
        Just("/dynamic?tier=gold")
    ]
}

/// A JSON value of bounded size.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just(json!("exact")),
            Just(json!("upto")),
            Just(json!("eip155:84532")),
            Just(json!("base-sepolia")),
            Just(json!("10000")),
            Just(json!(PAY_TO)),
        ],
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A well-formed payment of either version, possibly for a real offer.
fn valid_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(payment::v2_payment(&expected_row(), None)),
        Just(payment::v1_payment("exact", "base-sepolia", "10000")),
        Just(payment::v2_payment(
            &{
                let mut r = expected_row();
                r["amount"] = json!("20000");
                r
            },
            None
        )),
    ]
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(2500))]

    #[test]
    fn random_bytes(name in header_name(), path in path(), bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        thread_local!(static H: Harness = Harness::new());
        H.with(|h| h.check(&name, &bytes, path))?;
    }

    #[test]
    fn random_base64(name in header_name(), path in path(), bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let value = codec::encode_json_bytes(&bytes);
        thread_local!(static H: Harness = Harness::new());
        H.with(|h| h.check(&name, value.as_bytes(), path))?;
    }

    #[test]
    fn mutated_valid_headers(
        name in header_name(),
        path in path(),
        base in valid_json(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..6),
        in_json in any::<bool>(),
    ) {
        // Mutate either the JSON text (then encode) or the base64 text.
        let json_text = serde_json::to_vec(&base).unwrap();
        let mut target = if in_json { json_text } else { codec::encode_json_bytes(&json_text).into_bytes() };
        for (index, byte, op) in edits {
            if target.is_empty() { break; }
            let i = index.index(target.len());
            match op {
                0 => target[i] = byte,
                1 => { target.remove(i); }
                _ => target.insert(i, byte),
            }
        }
        let value = if in_json { codec::encode_json_bytes(&target).into_bytes() } else { target };
        thread_local!(static H: Harness = Harness::new());
        H.with(|h| h.check(&name, &value, path))?;
    }

    #[test]
    fn random_json_with_version(
        name in header_name(),
        path in path(),
        version in prop_oneof![Just(json!(1)), Just(json!(2))],
        fields in prop::collection::btree_map(
            prop_oneof![
                Just("scheme".to_owned()), Just("network".to_owned()), Just("payload".to_owned()),
                Just("accepted".to_owned()), Just("resource".to_owned()), Just("extensions".to_owned()),
                ".{0,8}",
            ],
            json_value(),
            0..7,
        ),
        accepted_row in any::<bool>(),
    ) {
        let mut object: serde_json::Map<String, Value> = fields.into_iter().collect();
        object.insert("x402Version".into(), version);
        if accepted_row {
            object.insert("accepted".into(), expected_row());
        }
        let value = payment::encode(&Value::Object(object));
        thread_local!(static H: Harness = Harness::new());
        H.with(|h| h.check(&name, value.as_bytes(), path))?;
    }
}

/// The fuzz harness does reach the facilitator for well-formed payments (so
/// the "verified ⇒ its reason" branch above is exercised).
#[test]
fn valid_headers_reach_verify() {
    let h = Harness::new();
    let v2 = payment::encode(&payment::v2_payment(&expected_row(), None));
    let v1 = payment::v1_header("base-sepolia");
    h.check(
        &HeaderName::from_static("payment-signature"),
        v2.as_bytes(),
        "/paid",
    )
    .unwrap();
    h.check(
        &HeaderName::from_static("x-payment"),
        v1.as_bytes(),
        "/paid",
    )
    .unwrap();
    assert_eq!(h.facilitator.verify_calls(), 2);
}
