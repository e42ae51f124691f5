//! The conformance scenarios, each generic over an [`Adapter`]. Each asserts
//! status, decoded headers, body, handler calls and `/verify` / `/settle`
//! calls. Instantiate them all with [`conformance_tests!`](crate::conformance_tests).

use serde_json::{json, Value};

use crate::{
    client::standard_builder,
    handler::{HandlerMode, HANDLER_ERROR_BODY, STREAM_CHUNKS},
    payment,
    standin::{facilitator_at, ClosedPort, SettleMode, VerifyMode},
    Adapter, Fixture, Reply, DESCRIPTION, PAYER, PAY_TO, TX_HASH, USDC_BASE_SEPOLIA,
};

/// Every scenario, in the order of the design's outcomes table.
pub const SCENARIOS: &[&str] = &[
    "s01_unprotected_route",
    "s02_challenge",
    "s03_unreadable_headers",
    "s04_no_matching_requirements",
    "s05_facilitator_says_invalid",
    "s06_facilitator_unavailable_at_verify",
    "s07_handler_error_not_settled",
    "s08_settlement_refused",
    "s09_settlement_unknown",
    "s10_settled_with_server_requirement",
    "s11_v1_and_v2_on_one_route",
    "s12_browser_paywall",
    "s13_settle_before_handler",
    "s14_dynamic_pricing",
    "s15_path_spellings_and_head",
    "s16_public_origin_whatever_the_host",
    "s32_no_shared_cache_keeps_a_paid_response",
];

/// The requirement `/paid` must offer.
pub fn expected_row() -> Value {
    json!({
        "scheme": "exact",
        "network": "eip155:84532",
        "amount": "10000",
        "asset": USDC_BASE_SEPOLIA,
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USDC", "version": "2"}
    })
}

const EXPOSED: [&str; 5] = [
    "PAYMENT-REQUIRED",
    "PAYMENT-RESPONSE",
    "X-PAYMENT-RESPONSE",
    "X-PAYMENT-SESSION",
    "X-PAYMENT-SESSION-REMAINING",
];

#[track_caller]
pub(crate) fn assert_exposes(reply: &Reply) {
    let value = reply
        .header("access-control-expose-headers")
        .unwrap_or_default();
    let listed: Vec<String> = value
        .split(',')
        .map(|s| s.trim().to_ascii_uppercase())
        .collect();
    for name in EXPOSED {
        assert!(
            listed.iter().any(|l| l == name),
            "{name} not exposed in {value:?}"
        );
    }
}

#[track_caller]
fn assert_no_null(value: &Value, path: &str) {
    match value {
        Value::Null => panic!("null at {path}"),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| assert_no_null(v, &format!("{path}[{i}]"))),
        Value::Object(o) => o
            .iter()
            .for_each(|(k, v)| assert_no_null(v, &format!("{path}.{k}"))),
        _ => {}
    }
}

/// A 402 challenge whose v2 header and v1 body both carry `error`.
#[track_caller]
pub(crate) fn assert_challenge(reply: &Reply, error: &str) {
    reply.assert_status(402);
    let v2 = reply.payment_required();
    assert_eq!(v2["x402Version"], 2);
    assert_eq!(v2["error"], error, "v2 error");
    assert_eq!(v2["accepts"][0]["payTo"], PAY_TO);
    assert!(reply
        .header("content-type")
        .unwrap_or_default()
        .starts_with("application/json"));
    let v1 = reply.json();
    assert_eq!(v1["x402Version"], 1);
    assert_eq!(v1["error"], error, "v1 error");
    assert_no_null(&v1, "body");
    assert!(!reply.leaks_secret());
    assert_exposes(reply);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
}

/// A 5xx with exactly `{"error": reason}` and nothing from the facilitator.
#[track_caller]
pub(crate) fn assert_opaque(reply: &Reply, status: u16, reason: &str) {
    reply.assert_status(status);
    assert_eq!(reply.json(), json!({"error": reason}));
    let text = reply.text();
    for leak in ["boom", "stack", "127.0.0.1", "isValid", "tru"] {
        assert!(!text.contains(leak), "{leak:?} leaked in {text}");
    }
    assert!(!reply.leaks_secret());
}

/// Scenario 1. A route the engine does not protect: the handler's response,
/// no facilitator call.
pub async fn s01_unprotected_route<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let reply = f.get("/free", &[]).await;
    reply.assert_status(200);
    assert_eq!(reply.json()["secret"], crate::SECRET);
    assert_eq!(reply.json()["paid"], false);
    assert!(reply.header("payment-required").is_none());
    assert!(reply.header("payment-response").is_none());
    f.handler.assert_calls(1);
    f.standin.assert_calls(0, 0);
}

/// 2. No payment header: the two-version 402.
pub async fn s02_challenge<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let reply = f.get("/paid", &[("accept", "application/json")]).await;
    assert_challenge(&reply, "payment_required");
    let v2 = reply.payment_required();
    assert_eq!(v2["accepts"], json!([expected_row()]));
    assert_eq!(v2["resource"]["url"], f.url("/paid"));
    assert_eq!(v2["resource"]["description"], DESCRIPTION);
    assert_eq!(v2["resource"]["mimeType"], "application/json");

    let v1 = reply.json();
    let accepts = v1["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 1);
    let row = &accepts[0];
    assert_eq!(row["scheme"], "exact");
    assert_eq!(row["network"], "base-sepolia");
    assert_eq!(row["maxAmountRequired"], "10000");
    assert_eq!(row["resource"], f.url("/paid"));
    assert_eq!(row["description"], DESCRIPTION);
    assert_eq!(row["mimeType"], "application/json");
    assert_eq!(row["payTo"], PAY_TO);
    assert_eq!(row["asset"], USDC_BASE_SEPOLIA);
    assert_eq!(row["maxTimeoutSeconds"], 300);
    assert_eq!(row["extra"], json!({"name": "USDC", "version": "2"}));
    assert!(
        row.get("amount").is_none(),
        "v1 rows have maxAmountRequired, not amount"
    );
    f.handler.assert_calls(0);
    f.standin.assert_calls(0, 0);
}

/// 3. Unreadable payment headers: 402 naming the problem, no verify.
pub async fn s03_unreadable_headers<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let big = "A".repeat(16 * 1024 + 1);
    let not_json = x402_core::codec::encode_json_bytes(b"this is not json");
    let v3 = payment::encode(
        &json!({"x402Version": 3, "scheme": "exact", "network": "base-sepolia", "payload": {}}),
    );
    let cases: [(&str, &str, &str); 8] = [
        (
            "PAYMENT-SIGNATURE",
            "!!!not-base64!!!",
            "invalid_payment_header_base64",
        ),
        ("X-PAYMENT", "%%%%", "invalid_payment_header_base64"),
        (
            "PAYMENT-SIGNATURE",
            &not_json,
            "invalid_payment_header_json",
        ),
        ("X-PAYMENT", &not_json, "invalid_payment_header_json"),
        ("PAYMENT-SIGNATURE", &big, "payment_header_too_large"),
        ("X-PAYMENT", &big, "payment_header_too_large"),
        ("PAYMENT-SIGNATURE", &v3, "invalid_x402_version"),
        ("X-PAYMENT", &v3, "invalid_x402_version"),
    ];
    for (name, value, reason) in cases {
        let reply = f.get("/paid", &[(name, value)]).await;
        assert_challenge(&reply, reason);
        assert_eq!(reply.payment_required()["accepts"], json!([expected_row()]));
    }
    // The limit is "larger than 16 KiB": exactly 16 KiB is decoded.
    let at_limit = "A".repeat(16 * 1024);
    let reply = f.get("/paid", &[("PAYMENT-SIGNATURE", &at_limit)]).await;
    reply.assert_status(402);
    assert_ne!(reply.challenge_error(), "payment_header_too_large");
    f.handler.assert_calls(0);
    f.standin.assert_calls(0, 0);
}

/// 4. Payments matching nothing offered, including adversarial copies.
pub async fn s04_no_matching_requirements<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let row = f.first_row("/paid").await;
    let mutations: [(&str, Value); 6] = [
        ("payTo", json!("0x000000000000000000000000000000000000dEaD")),
        ("amount", json!("9999")),
        ("amount", json!("1")),
        ("asset", json!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")),
        ("network", json!("eip155:8453")),
        ("scheme", json!("upto")),
    ];
    for (key, value) in mutations {
        let mut accepted = row.clone();
        accepted[key] = value.clone();
        let reply = f
            .get(
                "/paid",
                &[("PAYMENT-SIGNATURE", &payment::v2_header(&accepted))],
            )
            .await;
        assert_challenge(&reply, "no_matching_requirements");
        assert!(reply.decoded("payment-response").is_none(), "{key}={value}");
    }
    // Version 1 naming a network the route does not offer, or another scheme.
    for header in [
        payment::v1_header("base"),
        payment::v1_header("eip155:84532"),
        payment::encode(&payment::v1_payment("upto", "base-sepolia", "10000")),
    ] {
        let reply = f.get("/paid", &[("X-PAYMENT", &header)]).await;
        assert_challenge(&reply, "no_matching_requirements");
    }
    // The requirement matched, but the payload moves the money by another
    // transfer method than the one offered (Permit2 on an EIP-3009 route),
    // or by both, or by none.
    let to = row["payTo"].as_str().unwrap();
    let eip3009 = payment::eip3009_payload(to, "10000");
    let permit2 = payment::permit2_payload(&row);
    let mut both = eip3009.clone();
    both["permit2Authorization"] = permit2["permit2Authorization"].clone();
    for payload in [permit2, both, json!({"signature": "0x00"})] {
        let payment = json!({"x402Version": 2, "accepted": row, "payload": payload});
        let reply = f
            .get(
                "/paid",
                &[("PAYMENT-SIGNATURE", &payment::encode(&payment))],
            )
            .await;
        assert_challenge(&reply, "no_matching_requirements");
    }
    f.handler.assert_calls(0);
    f.standin.assert_calls(0, 0);
}

/// 5. The facilitator says invalid: 402 with its reason, no handler, no settle.
pub async fn s05_facilitator_says_invalid<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    f.standin.set_verify(VerifyMode::Invalid(
        "invalid_exact_evm_payload_signature".into(),
    ));
    let reply = f.pay_v2("/paid").await;
    assert_challenge(&reply, "invalid_exact_evm_payload_signature");
    assert!(reply.decoded("payment-response").is_none());
    f.handler.assert_calls(0);
    f.standin.assert_calls(1, 0);

    let reply = f.pay_v1("/paid").await;
    assert_challenge(&reply, "invalid_exact_evm_payload_signature");
    assert_eq!(
        reply.json()["payer"],
        PAYER,
        "v1 body names the payer after a failed verify"
    );
    f.handler.assert_calls(0);
    f.standin.assert_calls(2, 0);
}

/// 6. The facilitator gives no verdict at verify: 502, opaque.
pub async fn s06_facilitator_unavailable_at_verify<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let modes = [
        VerifyMode::Error500,
        VerifyMode::ValidUnder500,
        VerifyMode::Malformed,
        VerifyMode::Slow,
        VerifyMode::Hangup,
    ];
    for (i, mode) in modes.into_iter().enumerate() {
        f.standin.set_verify(mode.clone());
        let started = std::time::Instant::now();
        let reply = f.pay_v2("/paid").await;
        assert_opaque(&reply, 502, "facilitator_unavailable");
        assert!(reply.decoded("payment-response").is_none(), "{mode:?}");
        assert!(
            started.elapsed() < crate::standin::SLOW_DELAY,
            "{mode:?} waited past the client timeout"
        );
        f.standin.assert_calls(i + 1, 0);
    }
    f.handler.assert_calls(0);

    // Nothing listening at all.
    let closed = ClosedPort::new();
    let g = Fixture::with_engine::<A>(|_| standard_builder(facilitator_at(&closed.url()))).await;
    let reply = g.pay_v2("/paid").await;
    assert_opaque(&reply, 502, "facilitator_unavailable");
    g.handler.assert_calls(0);
}

/// 7. The handler fails: its response unchanged, nothing settled.
pub async fn s07_handler_error_not_settled<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    f.handler.set_mode(HandlerMode::Error500);
    let reply = f.pay_v2("/paid").await;
    reply.assert_status(500);
    assert_eq!(reply.text(), HANDLER_ERROR_BODY);
    assert_eq!(reply.header("x-handler"), Some("yes"));
    assert!(reply.header("payment-response").is_none());
    assert!(reply.header("x-payment-response").is_none());
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 0);
}

/// 8. The facilitator refuses settlement: 402 + failure receipt, body withheld.
pub async fn s08_settlement_refused<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    f.standin
        .set_settle(SettleMode::Refuse("insufficient_funds".into()));
    let reply = f.pay_v2("/paid").await;
    assert_challenge(&reply, "insufficient_funds");
    let receipt = reply.decoded("payment-response").expect("failure receipt");
    assert_eq!(receipt["success"], false);
    assert_eq!(receipt["errorReason"], "insufficient_funds");
    assert_eq!(receipt["network"], "eip155:84532");
    assert!(
        reply.header("x-handler").is_none(),
        "handler headers withheld"
    );
    assert!(reply.header("x-payment-response").is_none());
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 1);

    // Version 1: the failure receipt in X-PAYMENT-RESPONSE with the v1 name.
    let reply = f.pay_v1("/paid").await;
    assert_challenge(&reply, "insufficient_funds");
    let receipt = reply
        .decoded("x-payment-response")
        .expect("v1 failure receipt");
    assert_eq!(receipt["success"], false);
    assert_eq!(receipt["errorReason"], "insufficient_funds");
    assert_eq!(receipt["network"], "base-sepolia");
    assert!(reply.header("payment-response").is_none());
    f.handler.assert_calls(2);
    f.standin.assert_calls(2, 2);
}

/// 9. Settlement transport error after the handler: 502, body withheld.
pub async fn s09_settlement_unknown<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    for (i, mode) in [
        SettleMode::Error500,
        SettleMode::SuccessUnder500,
        SettleMode::Hangup,
        SettleMode::Slow,
    ]
    .into_iter()
    .enumerate()
    {
        f.standin.set_settle(mode.clone());
        let reply = f.pay_v2("/paid").await;
        assert_opaque(&reply, 502, "settlement_unknown");
        assert!(reply.header("payment-response").is_none(), "{mode:?}");
        assert!(reply.header("x-handler").is_none(), "{mode:?}");
        f.handler.assert_calls(i + 1);
        f.standin.assert_calls(i + 1, i + 1);
    }
}

/// 10. Settled: body + receipt; the facilitator got the server's requirement.
pub async fn s10_settled_with_server_requirement<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let row = f.first_row("/paid").await;
    assert_eq!(row, expected_row());
    let mut accepted = row.clone();
    accepted["extra"]["clientOnly"] = json!("tampered");
    accepted["asset"] = json!(USDC_BASE_SEPOLIA.to_lowercase());
    let sent = payment::v2_payment(&accepted, None);
    let reply = f
        .get("/paid", &[("PAYMENT-SIGNATURE", &payment::encode(&sent))])
        .await;
    reply.assert_status(200);
    let body = reply.json();
    assert_eq!(body["secret"], crate::SECRET);
    assert_eq!(body["paid"], true);
    assert_eq!(body["payer"], PAYER);
    let receipt = reply.decoded("payment-response").expect("receipt");
    assert_eq!(receipt["success"], true);
    assert_eq!(receipt["network"], "eip155:84532");
    assert_eq!(receipt["transaction"], TX_HASH);
    assert!(reply.header("x-payment-response").is_none());
    assert_exposes(&reply);
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 1);

    for (endpoint, bodies) in [
        ("verify", f.standin.verify_requests()),
        ("settle", f.standin.settle_requests()),
    ] {
        let request = &bodies[0];
        assert_eq!(request["x402Version"], 2, "{endpoint}");
        assert_eq!(
            request["paymentRequirements"], row,
            "{endpoint} got the server's own row"
        );
        assert!(
            request["paymentRequirements"]["extra"]
                .get("clientOnly")
                .is_none(),
            "{endpoint}"
        );
        assert_eq!(
            request["paymentPayload"], sent,
            "{endpoint} got the buyer's payload as sent"
        );
    }
}

/// 11. v1 and v2 on one route; both headers → v2 wins.
pub async fn s11_v1_and_v2_on_one_route<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let v1 = f.pay_v1("/paid").await;
    v1.assert_status(200);
    assert_eq!(v1.json()["secret"], crate::SECRET);
    let receipt = v1.decoded("x-payment-response").expect("v1 receipt");
    assert_eq!(receipt["success"], true);
    assert_eq!(receipt["network"], "base-sepolia");
    assert_eq!(receipt["transaction"], TX_HASH);
    assert!(v1.header("payment-response").is_none());
    let sent = &f.standin.settle_requests()[0];
    assert_eq!(sent["x402Version"], 1);
    assert_eq!(sent["paymentRequirements"]["network"], "base-sepolia");
    assert_eq!(sent["paymentRequirements"]["maxAmountRequired"], "10000");
    assert_eq!(sent["paymentRequirements"]["payTo"], PAY_TO);
    assert_eq!(sent["paymentRequirements"]["resource"], f.url("/paid"));

    let v2 = f.pay_v2("/paid").await;
    v2.assert_status(200);
    let receipt = v2.decoded("payment-response").expect("v2 receipt");
    assert_eq!(receipt["network"], "eip155:84532");
    assert!(v2.header("x-payment-response").is_none());
    f.standin.assert_calls(2, 2);

    // Both headers: v2 is read, v1 ignored (garbage in the loser is harmless).
    let row = f.first_row("/paid").await;
    let both = f
        .get(
            "/paid",
            &[
                ("PAYMENT-SIGNATURE", &payment::v2_header(&row)),
                ("X-PAYMENT", "garbage!!"),
            ],
        )
        .await;
    both.assert_status(200);
    assert_eq!(
        both.decoded("payment-response").unwrap()["network"],
        "eip155:84532"
    );
    assert!(both.header("x-payment-response").is_none());
    let wins = f
        .get(
            "/paid",
            &[
                ("PAYMENT-SIGNATURE", "garbage!!"),
                ("X-PAYMENT", &payment::v1_header("base-sepolia")),
            ],
        )
        .await;
    assert_challenge(&wins, "invalid_payment_header_base64");
    f.handler.assert_calls(3);
    f.standin.assert_calls(3, 3);
    assert_eq!(f.standin.settle_requests()[2]["x402Version"], 2);

    // The decoded x402Version decides, not the header's name.
    let v2_in_x_payment = f
        .get("/paid", &[("X-PAYMENT", &payment::v2_header(&row))])
        .await;
    v2_in_x_payment.assert_status(200);
    let receipt = v2_in_x_payment
        .decoded("payment-response")
        .expect("v2 receipt");
    assert_eq!(receipt["network"], "eip155:84532");
    assert!(v2_in_x_payment.header("x-payment-response").is_none());
    let v1_in_signature = f
        .get(
            "/paid",
            &[("PAYMENT-SIGNATURE", &payment::v1_header("base-sepolia"))],
        )
        .await;
    v1_in_signature.assert_status(200);
    let receipt = v1_in_signature
        .decoded("x-payment-response")
        .expect("v1 receipt");
    assert_eq!(receipt["network"], "base-sepolia");
    assert!(v1_in_signature.header("payment-response").is_none());
    f.handler.assert_calls(5);
    f.standin.assert_calls(5, 5);
}

/// 12. Browsers get the HTML paywall (escaped); JSON clients never do.
pub async fn s12_browser_paywall<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120 Safari/537.36";
    let html = f
        .get(
            "/paid",
            &[
                ("accept", "text/html,application/xhtml+xml,*/*;q=0.8"),
                ("user-agent", ua),
            ],
        )
        .await;
    html.assert_status(402);
    assert!(html
        .header("content-type")
        .unwrap_or_default()
        .starts_with("text/html"));
    let v2 = html.payment_required();
    assert_eq!(v2["error"], "payment_required");
    assert_eq!(v2["accepts"], json!([expected_row()]));
    let text = html.text();
    assert!(
        !text.contains("<script>alert"),
        "unescaped description in {text}"
    );
    assert!(
        text.contains("&lt;script&gt;"),
        "escaped description missing: {text}"
    );
    assert_exposes(&html);

    for headers in [
        vec![("accept", "application/json"), ("user-agent", ua)],
        vec![("accept", "text/html")],
        vec![("accept", "text/html"), ("user-agent", "curl/8.0")],
    ] {
        let reply = f.get("/paid", &headers).await;
        assert_challenge(&reply, "payment_required");
        assert!(!reply.text().contains("<html"), "{headers:?}");
    }
    f.handler.assert_calls(0);
    f.standin.assert_calls(0, 0);
}

/// Scenario 13. Settlement before the handler: settle first, body streams
/// with the receipt; a refused settlement never runs the handler.
pub async fn s13_settle_before_handler<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    f.handler.set_mode(HandlerMode::Stream);
    let reply = f.pay_v2("/stream").await;
    reply.assert_status(200);
    assert_eq!(reply.text(), STREAM_CHUNKS.concat());
    let receipt = reply.decoded("payment-response").expect("receipt");
    assert_eq!(receipt["success"], true);
    assert_eq!(receipt["transaction"], TX_HASH);
    assert_eq!(reply.header("cache-control"), Some("private"));
    assert_eq!(f.events.events(), ["verify", "settle", "handler"]);
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 1);

    f.standin
        .set_settle(SettleMode::Refuse("insufficient_funds".into()));
    let reply = f.pay_v2("/stream").await;
    assert_challenge(&reply, "insufficient_funds");
    assert_eq!(reply.decoded("payment-response").unwrap()["success"], false);
    f.handler.assert_calls(1);
    f.standin.assert_calls(2, 2);

    f.standin.set_settle(SettleMode::Error500);
    let reply = f.pay_v2("/stream").await;
    assert_opaque(&reply, 502, "settlement_unknown");
    f.handler.assert_calls(1);
    f.standin.assert_calls(3, 3);
}

/// 14. Dynamic pricing: the price follows the request; `None` is a free pass.
pub async fn s14_dynamic_pricing<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let plain = f.first_row("/dynamic").await;
    assert_eq!(plain["amount"], "10000");
    let gold = f.first_row("/dynamic?tier=gold").await;
    assert_eq!(gold["amount"], "20000");
    let v2 = f.challenge("/dynamic?tier=gold").await;
    assert_eq!(v2["resource"]["url"], f.url("/dynamic?tier=gold"));

    let free = f.get("/dynamic?free=1", &[]).await;
    free.assert_status(200);
    assert_eq!(free.json()["paid"], false);
    f.handler.assert_calls(1);
    f.standin.assert_calls(0, 0);

    // The cheap row does not buy the gold tier.
    let reply = f
        .get(
            "/dynamic?tier=gold",
            &[("PAYMENT-SIGNATURE", &payment::v2_header(&plain))],
        )
        .await;
    assert_challenge(&reply, "no_matching_requirements");
    assert_eq!(reply.payment_required()["accepts"][0]["amount"], "20000");
    f.standin.assert_calls(0, 0);

    let paid = f
        .get(
            "/dynamic?tier=gold",
            &[("PAYMENT-SIGNATURE", &payment::v2_header(&gold))],
        )
        .await;
    paid.assert_status(200);
    assert_eq!(paid.decoded("payment-response").unwrap()["success"], true);
    assert_eq!(
        f.standin.settle_requests()[0]["paymentRequirements"]["amount"],
        "20000"
    );
    f.handler.assert_calls(2);
    f.standin.assert_calls(1, 1);
}

/// 15. HEAD on a GET route, and other spellings of the paid path.
pub async fn s15_path_spellings_and_head<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let head = crate::client::send(f.client.head(f.url("/paid"))).await;
    head.assert_status(402);
    assert_eq!(head.payment_required()["error"], "payment_required");
    assert!(head.body.is_empty());
    for path in [
        "/PAID",
        "/pa%69d",
        "//paid",
        "/paid/",
        "/Pa%49D",
        "/x/../paid",
        "/paid?x=1",
    ] {
        let reply = f.get(path, &[]).await;
        assert_eq!(
            reply.status.as_u16(),
            402,
            "{path} slipped past the paywall: {}",
            reply.text()
        );
        assert!(!reply.leaks_secret(), "{path}");
        assert_eq!(
            reply.payment_required()["accepts"],
            json!([expected_row()]),
            "{path}"
        );
    }
    f.handler.assert_calls(0);
    f.standin.assert_calls(0, 0);
}

/// Scenario 16: the challenge and the requirement sent to the facilitator
/// carry the configured public origin, whatever `Host` or `X-Forwarded-*`
/// the client sends.
pub async fn s16_public_origin_whatever_the_host<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let hostile = [
        ("Host", "evil.example"),
        ("X-Forwarded-Host", "evil.example"),
        ("X-Forwarded-Proto", "https"),
    ];
    let reply = crate::boundary::send_raw(&f.base, "GET", "/paid", &hostile)
        .await
        .unwrap();
    assert_eq!(reply.status, 402);
    let challenge = reply.challenge().unwrap();
    assert_eq!(challenge["resource"]["url"], f.url("/paid"));
    let v1: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(v1["accepts"][0]["resource"], f.url("/paid"));

    let v1_payment = payment::v1_header("base-sepolia");
    let v2_payment = payment::v2_header(&challenge["accepts"][0]);
    for (name, value) in [
        ("X-PAYMENT", &v1_payment),
        ("PAYMENT-SIGNATURE", &v2_payment),
    ] {
        let mut headers = hostile.to_vec();
        headers.push((name, value));
        let paid = crate::boundary::send_raw(&f.base, "GET", "/paid", &headers)
            .await
            .unwrap();
        assert_eq!(paid.status, 200, "{name}");
    }
    let sent = f.standin.verify_requests();
    assert_eq!(sent[0]["paymentRequirements"]["resource"], f.url("/paid"));
    for request in sent.iter().chain(&f.standin.settle_requests()) {
        assert!(!request.to_string().contains("evil.example"), "{request}");
    }
    f.handler.assert_calls(2);
    f.standin.assert_calls(2, 2);
}

/// Scenario 32. No shared cache in front of the seller may keep what was
/// paid for, whatever the handler said: a paid response leaves `private`
/// (merged into the handler's own `Cache-Control`), every 402 `no-store`;
/// a free response and a handler's error (not charged) leave as the
/// handler made them.
pub async fn s32_no_shared_cache_keeps_a_paid_response<A: Adapter>() {
    let f = Fixture::new::<A>().await;
    let cached = |reply: &Reply| reply.header("cache-control").map(str::to_owned);
    assert_eq!(cached(&f.get("/paid", &[]).await), Some("no-store".into()));

    for (handler, paid) in [
        (None, "private"),
        (
            Some("public, max-age=60, s-maxage=600"),
            "max-age=60, private",
        ),
        (
            Some("max-age=5, must-revalidate"),
            "max-age=5, must-revalidate, private",
        ),
        (Some("no-store"), "no-store"),
        (Some("private, max-age=9"), "private, max-age=9"),
    ] {
        f.handler.set_cache_control(handler);
        for reply in [f.pay_v2("/paid").await, f.pay_v1("/paid").await] {
            reply.assert_status(200);
            assert_eq!(reply.json()["secret"], crate::SECRET);
            assert_eq!(cached(&reply).as_deref(), Some(paid), "handler {handler:?}");
        }
    }
    f.handler.assert_calls(10);
    f.standin.assert_calls(10, 10);

    let public = "public, max-age=60";
    f.handler.set_cache_control(Some(public));
    let free = f.get("/free", &[]).await;
    free.assert_status(200);
    assert_eq!(cached(&free).as_deref(), Some(public));

    f.handler.set_mode(HandlerMode::Error500);
    let failed = f.pay_v2("/paid").await;
    failed.assert_status(500);
    assert_eq!(
        cached(&failed).as_deref(),
        Some(public),
        "not charged, not changed"
    );

    f.handler.set_mode(HandlerMode::Json);
    f.standin
        .set_settle(SettleMode::Refuse("insufficient_funds".into()));
    let refused = f.pay_v2("/paid").await;
    assert_challenge(&refused, "insufficient_funds");
    f.handler.assert_calls(13);
    f.standin.assert_calls(12, 11);
}
