use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::codec;

const VECTORS: &str = include_str!("../../tests/data/upstream-vectors.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS).unwrap()
}

fn headers(version: &str, name: &str) -> Vec<String> {
    vectors()[version][name]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

fn raw_json(header: &str) -> Value {
    serde_json::from_slice(&codec::decode_to_json(header.as_bytes(), usize::MAX).unwrap()).unwrap()
}

/// Decodes a header into `T`, re-encodes it, and checks the JSON is equal.
fn round_trip<T: serde::de::DeserializeOwned + Serialize>(header: &str) {
    let typed: T = codec::decode(header.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES).unwrap();
    let again = codec::encode(&typed).unwrap();
    assert_eq!(raw_json(&again), raw_json(header));
}

#[test]
fn upstream_v2_headers_round_trip() {
    for h in headers("v2", "PAYMENT-REQUIRED") {
        round_trip::<v2::PaymentRequired>(&h);
    }
    for h in headers("v2", "PAYMENT-SIGNATURE") {
        round_trip::<v2::PaymentPayload>(&h);
        let p = codec::decode_payment(h.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES).unwrap();
        assert_eq!(p.version(), X402Version::V2);
        assert_eq!(p.network(), "eip155:84532");
        assert_eq!(raw_json(&codec::encode(&p).unwrap()), raw_json(&h));
    }
    for h in headers("v2", "PAYMENT-RESPONSE") {
        round_trip::<SettleResponse>(&h);
    }
}

#[test]
fn upstream_v1_headers_round_trip() {
    for h in headers("v1", "X-PAYMENT") {
        round_trip::<v1::PaymentPayload>(&h);
        let p = codec::decode_payment(h.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES).unwrap();
        assert_eq!(p.version(), X402Version::V1);
        assert_eq!(p.network(), "base-sepolia");
    }
    for h in headers("v1", "X-PAYMENT-RESPONSE") {
        round_trip::<SettleResponse>(&h);
    }
    let failure: SettleResponse =
        codec::decode(headers("v1", "X-PAYMENT-RESPONSE")[1].as_bytes(), 4096).unwrap();
    assert!(!failure.success);
    assert_eq!(failure.error_reason.as_deref(), Some("insufficient_funds"));
    assert_eq!(failure.transaction, "");
}

#[test]
fn upstream_signature_payload_parses_as_eip3009() {
    let p = codec::decode_payment(headers("v2", "PAYMENT-SIGNATURE")[0].as_bytes(), 4096).unwrap();
    let evm = crate::evm::EvmPayload::from_value(p.payload()).unwrap();
    assert_eq!(
        evm.payer().to_checksum(None),
        "0x857b06519E91e3A54538791bDbb0E22373e36b66"
    );
}

#[test]
fn v1_requirements_never_write_null() {
    let r: v1::PaymentRequirements = serde_json::from_value(json!({
        "scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "1",
        "resource": "http://x/", "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        "maxTimeoutSeconds": 60, "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "outputSchema": null, "extra": null
    }))
    .unwrap();
    let out = serde_json::to_value(&r).unwrap();
    assert_eq!(out["description"], "");
    assert_eq!(out["mimeType"], "");
    assert!(out.get("outputSchema").is_none());
    assert!(out.get("extra").is_none());
}

#[test]
fn unknown_fields_are_kept() {
    let p: v2::PaymentPayload = serde_json::from_value(json!({
        "x402Version": 2,
        "accepted": {"scheme": "exact", "network": "eip155:1", "amount": "1", "asset": "a", "payTo": "b",
                      "maxTimeoutSeconds": 1, "extra": {"k": 1}, "future": true},
        "payload": {"x": 1}, "extensions": {"e": {}}, "later": [1]
    }))
    .unwrap();
    let out = serde_json::to_value(&p).unwrap();
    assert_eq!(out["later"], json!([1]));
    assert_eq!(out["accepted"]["future"], json!(true));
    assert_eq!(out["accepted"]["extra"]["k"], json!(1));
}

#[test]
fn versions_are_checked() {
    assert!(serde_json::from_value::<v1::PaymentPayload>(
        json!({"x402Version": 2, "scheme": "exact", "network": "base", "payload": {}})
    )
    .is_err());
    assert!(PaymentPayload::from_value(json!({"x402Version": "2"})).is_err());
    assert!(PaymentPayload::from_value(json!({"x402Version": 2.5})).is_err());
    let req: FacilitatorRequest = serde_json::from_value(json!({
        "x402Version": 1,
        "paymentPayload": {"x402Version": 1, "scheme": "exact", "network": "base-sepolia", "payload": {}},
        "paymentRequirements": {"scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "1",
            "resource": "http://x/", "payTo": "p", "maxTimeoutSeconds": 60, "asset": "a"}
    }))
    .unwrap();
    assert_eq!(req.version(), X402Version::V1);
    let back = serde_json::to_value(&req).unwrap();
    assert_eq!(back["x402Version"], json!(1));
    assert_eq!(back["paymentRequirements"]["maxAmountRequired"], json!("1"));
}

#[test]
fn supported_tolerates_v1_only_answers() {
    let s: SupportedResponse = serde_json::from_value(
        json!({"kinds": [{"x402Version": 1, "scheme": "exact", "network": "base-sepolia"}]}),
    )
    .unwrap();
    assert!(s.kind(X402Version::V1, "exact", "base-sepolia").is_some());
    let s: SupportedResponse = serde_json::from_value(json!({"kinds": [
        {"x402Version": 2, "scheme": "exact", "network": "eip155:*"}
    ], "extensions": [], "signers": {"eip155:*": ["0x1"]}}))
    .unwrap();
    assert!(s.kind(X402Version::V2, "exact", "eip155:84532").is_some());
    assert!(s.kind(X402Version::V1, "exact", "eip155:84532").is_none());
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9]{0,8}".prop_map(Value::from),
    ]
}

fn json_object() -> impl Strategy<Value = JsonObject> {
    prop::collection::btree_map("[a-zA-Z]{1,6}", json_leaf(), 0..4)
        .prop_map(|m| m.into_iter().collect())
}

prop_compose! {
    fn v2_requirements()(
        scheme in "[a-z]{1,8}", network in "[a-z0-9]{1,6}:[a-zA-Z0-9]{1,10}", amount in any::<u128>(),
        asset in "0x[0-9a-fA-F]{40}", pay_to in "[0-9A-Za-z]{1,44}", timeout in 1u64..100_000, extra in json_object(),
    ) -> v2::PaymentRequirements {
        v2::PaymentRequirements {
            scheme, network, amount: crate::money::AtomicAmount::new(alloy_primitives::U256::from(amount)),
            asset, pay_to, max_timeout_seconds: timeout, extra, other: JsonObject::new(),
        }
    }
}

prop_compose! {
    fn v1_requirements()(
        r in v2_requirements(), resource in "http://[a-z]{1,8}/[a-z]{0,8}", description in ".{0,20}",
        mime in "[a-z]{0,8}", schema in proptest::option::of(json_object()), extra in proptest::option::of(json_object()),
    ) -> v1::PaymentRequirements {
        v1::PaymentRequirements {
            scheme: r.scheme, network: r.network, max_amount_required: r.amount, resource, description,
            mime_type: mime, output_schema: schema, pay_to: r.pay_to, max_timeout_seconds: r.max_timeout_seconds,
            asset: r.asset, extra, other: JsonObject::new(),
        }
    }
}

fn assert_identity<T>(value: &T)
where
    T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let header = codec::encode(value).unwrap();
    let back: T = codec::decode(header.as_bytes(), usize::MAX).unwrap();
    assert_eq!(&back, value);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn encode_decode_is_identity(
        r2 in v2_requirements(), r1 in v1_requirements(), error in proptest::option::of("[a-z_]{0,12}"),
        url in "https?://[a-z]{1,8}(/[a-z]{0,6})?", payload in json_object(), ext in json_object(),
        success in any::<bool>(), tx in "(0x[0-9a-f]{64})?", amount in proptest::option::of(any::<u64>()),
        valid in any::<bool>(), reason in proptest::option::of("[a-z_]{1,12}"),
    ) {
        let resource = v2::ResourceInfo { url: url.clone(), description: "d".into(), mime_type: "m".into() };
        assert_identity(&r2);
        assert_identity(&r1);
        assert_identity(&v2::PaymentRequired {
            x402_version: Version, error: error.clone(), resource: resource.clone(),
            accepts: vec![r2.clone()], extensions: ext.clone(),
        });
        assert_identity(&v1::PaymentRequirementsResponse {
            x402_version: Version, error: error.clone().unwrap_or_default(), accepts: vec![r1.clone()], payer: None,
        });
        let p2 = v2::PaymentPayload {
            x402_version: Version, resource: Some(resource), accepted: r2.clone(), payload: Value::Object(payload.clone()),
            extensions: (!ext.is_empty()).then(|| ext.clone()), other: JsonObject::new(),
        };
        assert_identity(&p2);
        let p1 = v1::PaymentPayload {
            x402_version: Version, scheme: r1.scheme.clone(), network: r1.network.clone(),
            payload: Value::Object(payload), other: JsonObject::new(),
        };
        assert_identity(&p1);
        assert_identity(&PaymentPayload::V2(p2.clone()));
        assert_identity(&PaymentPayload::V1(p1.clone()));
        assert_identity(&FacilitatorRequest::new(PaymentPayload::V2(p2), PaymentRequirements::V2(r2)).unwrap());
        assert_identity(&FacilitatorRequest::new(PaymentPayload::V1(p1), PaymentRequirements::V1(r1)).unwrap());
        assert_identity(&SettleResponse {
            success, error_reason: reason.clone(), error_message: None, payer: Some("0xabc".into()),
            transaction: tx, network: url, amount: amount.map(crate::money::AtomicAmount::from),
            extensions: None, extra: None, extension_responses: None,
        });
        assert_identity(&VerifyResponse { is_valid: valid, invalid_reason: reason, ..VerifyResponse::default() });
    }

    #[test]
    fn decoders_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = codec::decode_payment(&bytes, codec::DEFAULT_MAX_HEADER_BYTES);
        let b64 = codec::encode_json_bytes(&bytes);
        let _ = codec::decode_payment(b64.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES);
        let _ = codec::decode::<v2::PaymentRequired>(b64.as_bytes(), 4096);
        let _ = codec::decode::<SettleResponse>(b64.as_bytes(), 4096);
        let _ = codec::decode::<FacilitatorRequest>(b64.as_bytes(), 4096);
        let _ = serde_json::from_slice::<SupportedResponse>(&bytes);
        let _ = serde_json::from_slice::<VerifyResponse>(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_json(v in json_leaf(), obj in json_object(), version in 0u64..4) {
        let mut o = obj;
        o.insert("x402Version".into(), Value::from(version));
        o.insert("accepted".into(), Value::Object(o.clone()));
        o.insert("payload".into(), v);
        let b64 = codec::encode(&o).unwrap();
        let _ = codec::decode_payment(b64.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES);
        let _ = PaymentPayload::from_value(Value::Object(o));
    }
}

/// What `from_json_slice` answers, as a comparable string: the version it
/// parsed, or the kind of refusal.
fn parsed(json: &[u8]) -> String {
    match PaymentPayload::from_json_slice(json) {
        Ok(p) => format!("ok {:?}", p.version()),
        Err(PayloadParseError::MissingVersion) => "missing".into(),
        Err(PayloadParseError::UnsupportedVersion) => "unsupported".into(),
        Err(PayloadParseError::Json(_)) => "json".into(),
    }
}

/// The same document with the version key moved after the others, so that
/// only the full peek can find it.
fn version_last(json: &str) -> String {
    let value: Value = serde_json::from_str(json).unwrap();
    let mut object = value.as_object().unwrap().clone();
    let version = object.remove("x402Version").unwrap();
    let mut out = serde_json::to_string(&object).unwrap();
    out.pop();
    format!("{out},\"x402Version\":{version}}}")
}

#[test]
fn the_leading_version_shortcut_answers_as_the_full_peek() {
    let v2 = String::from_utf8(
        codec::decode_to_json(headers("v2", "PAYMENT-SIGNATURE")[0].as_bytes(), usize::MAX)
            .unwrap(),
    )
    .unwrap();
    let v1 = String::from_utf8(
        codec::decode_to_json(headers("v1", "X-PAYMENT")[0].as_bytes(), usize::MAX).unwrap(),
    )
    .unwrap();
    assert!(v2.starts_with("{\"x402Version\":2,"), "{v2}");
    assert!(v1.starts_with("{\"x402Version\":1,"), "{v1}");
    for doc in [&v2, &v1] {
        assert_eq!(parsed(doc.as_bytes()), parsed(version_last(doc).as_bytes()));
    }
    assert_eq!(parsed(v2.as_bytes()), "ok V2");
    assert_eq!(parsed(v1.as_bytes()), "ok V1");
    // Versions this crate does not know, and shapes the shortcut leaves to
    // the peek.
    let rest = &v2["{\"x402Version\":2".len()..];
    let v2_open = &v2[..v2.len() - 1];
    for (doc, want) in [
        (format!("{{\"x402Version\":3{rest}"), "unsupported"),
        (format!("{{\"x402Version\":0{rest}"), "unsupported"),
        (format!("{{\"x402Version\":22{rest}"), "unsupported"),
        (format!("{{\"x402Version\":\"2\"{rest}"), "unsupported"),
        (format!("{{ \"x402Version\":2{rest}"), "ok V2"),
        (format!("{{\"x402Version\": 2{rest}"), "ok V2"),
        (format!("{{\"x402Version\":2.0{rest}"), "unsupported"),
        // Repeated: refused, whichever way the version was read.
        (format!("{v2_open},\"x402Version\":2}}"), "json"),
        ("{\"x402Version\":2,".to_owned(), "json"),
        ("{\"x402Version\":2}".to_owned(), "json"),
        ("{}".to_owned(), "missing"),
    ] {
        assert_eq!(parsed(doc.as_bytes()), want, "{doc}");
    }
}

/// The first v2 payment vector, and the requirement it accepted.
fn v2_vector() -> (PaymentPayload, v2::PaymentRequirements) {
    let header = &headers("v2", "PAYMENT-SIGNATURE")[0];
    let payload =
        codec::decode_payment(header.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES).unwrap();
    let PaymentPayload::V2(p) = &payload else {
        panic!("a v2 vector")
    };
    let accepted = p.accepted.clone();
    (payload, accepted)
}

#[test]
fn a_prepared_request_writes_its_body_once() {
    let (payload, accepted) = v2_vector();
    let requirements = PaymentRequirements::V2(accepted);
    let request = FacilitatorRequest::new(payload, requirements).unwrap();
    let prepared = PreparedRequest::new(request.clone());
    let first = prepared.body().unwrap();
    // The body is the request's JSON, as before.
    assert_eq!(first, serde_json::to_vec(&request).unwrap());
    // Later calls, and clones made after it, share the bytes written.
    assert_eq!(prepared.body().unwrap().as_ptr(), first.as_ptr());
    assert_eq!(prepared.clone().body().unwrap().as_ptr(), first.as_ptr());
    // It reads as the request.
    assert_eq!(*prepared, request);
    assert_eq!(prepared.into_request(), request);
}

/// A body written with its requirement's JSON written once is the body the
/// request's own `Serialize` writes, byte for byte: with the buyer's
/// `accepted` the same requirement (copied), the same in another key order
/// or different (written as sent), with and without the optional and
/// unknown fields of the payment and of the requirement.
#[test]
fn a_written_requirement_gives_the_same_body() {
    let (payload, accepted) = v2_vector();
    let PaymentPayload::V2(payment) = payload else {
        panic!("a v2 vector")
    };

    let mut rich = accepted.clone();
    rich.extra.insert(
        "nested".into(),
        json!({"b": [1, {"y": 2, "x": 1}], "a": "\"quoted\"\n"}),
    );
    rich.other
        .insert("futureField".into(), json!(["é", null, 1.5]));
    let mut reordered = rich.clone();
    reordered.extra = rich
        .extra
        .iter()
        .rev()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut nested_reordered = rich.clone();
    nested_reordered.extra.insert(
        "nested".into(),
        json!({"a": "\"quoted\"\n", "b": [1, {"x": 1, "y": 2}]}),
    );
    let mut cheaper = rich.clone();
    cheaper.amount = "1".parse().unwrap();

    let mut bare = payment.clone();
    bare.resource = None;
    bare.extensions = None;
    let mut full = payment.clone();
    full.extensions = Some(
        json!({"payment-identifier": {"info": {"id": "pay_0123456789abcdef"}}})
            .as_object()
            .unwrap()
            .clone(),
    );
    full.other
        .insert("buyerNote".into(), json!({"z": 1, "a": 2}));

    for requirement in [&accepted, &rich] {
        for echoed in [&accepted, &rich, &reordered, &nested_reordered, &cheaper] {
            for base in [&payment, &bare, &full] {
                let mut payment = base.clone();
                payment.accepted = echoed.clone();
                let payment = PaymentPayload::V2(payment);
                let requirements = PaymentRequirements::V2(requirement.clone());
                let written = WrittenRequirement::new(requirements.clone());
                let prepared =
                    PreparedRequest::with_written(Box::new(payment.clone()), &written).unwrap();
                let request = FacilitatorRequest::new(payment, requirements).unwrap();
                assert_eq!(**prepared, request);
                assert_eq!(
                    String::from_utf8(prepared.body().unwrap().to_vec()).unwrap(),
                    serde_json::to_string(&request).unwrap()
                );
            }
        }
    }
}

/// A requirement of one version and a payment of the other make no request.
#[test]
fn a_written_requirement_pairs_only_with_its_version() {
    let (_, accepted) = v2_vector();
    let v1 = raw_json(&headers("v1", "X-PAYMENT")[0]);
    let v1 = PaymentPayload::from_value(v1).unwrap();
    let written = WrittenRequirement::new(PaymentRequirements::V2(accepted));
    assert!(PreparedRequest::with_written(Box::new(v1), &written).is_none());
}

/// Bodies are written through a per-thread scratch buffer: each is exactly
/// its request's JSON, whatever was written before it on the thread, and a
/// body larger than the buffer keeps does not leave its room behind.
#[test]
fn prepared_bodies_are_exact_whatever_came_before() {
    let (payload, accepted) = v2_vector();
    let small = FacilitatorRequest::new(payload.clone(), PaymentRequirements::V2(accepted.clone()))
        .unwrap();
    let mut large_requirement = accepted;
    large_requirement
        .extra
        .insert("padding".into(), Value::String("x".repeat(100_000)));
    let large =
        FacilitatorRequest::new(payload, PaymentRequirements::V2(large_requirement)).unwrap();
    for request in [&small, &large, &small, &large, &small] {
        // Each request is prepared anew: a prepared body is written once.
        let body = PreparedRequest::new(request.clone()).body().unwrap();
        assert_eq!(body, serde_json::to_vec(request).unwrap());
    }
    // The scratch buffer kept no more than its cap after the large body.
    let _ = PreparedRequest::new(large).body().unwrap();
    SCRATCH.with(|scratch| assert!(scratch.borrow().capacity() <= SCRATCH_KEPT));
}

/// `from_json_bytes` against `serde_json::from_slice`: the same value or
/// the same error, for a byte string in a string's place and for any bytes.
fn same_as_from_slice(json: &[u8]) {
    let ours = from_json_bytes::<Value>(json);
    let theirs = serde_json::from_slice::<Value>(json);
    match (ours, theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string());
            assert_eq!(a.classify(), b.classify());
        }
        (a, b) => panic!("from_json_bytes {a:?}, from_slice {b:?}"),
    }
}

proptest! {
    #[test]
    fn json_bytes_read_as_from_slice_reads_them(
        inner in prop::collection::vec(any::<u8>(), 0..48),
        any_bytes in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        let mut json = br#"{"x402Version":2,"payload":{"s":""#.to_vec();
        json.extend_from_slice(&inner);
        json.extend_from_slice(br#"","n":[1,"\u00e9"]}}"#);
        same_as_from_slice(&json);
        same_as_from_slice(&any_bytes);
    }
}

#[test]
fn a_payment_with_invalid_utf8_in_a_string_is_not_json() {
    same_as_from_slice(b"{\"a\":\"\xff\"}");
    same_as_from_slice(b"{\"a\":\"caf\xc3\xa9\"}");
    let mut json = br#"{"x402Version":2,"accepted":{"scheme":"exact"#.to_vec();
    json.push(0xc3);
    json.extend_from_slice(br#""}}"#);
    let header = codec::encode_json_bytes(&json);
    assert_eq!(
        codec::decode_payment(header.as_bytes(), 999),
        Err(codec::DecodeError::NotJson)
    );
}
