//! The 402 challenge in both versions, built through the engine.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use serde_json::{json, Value};
use x402_core::{
    codec,
    proto::{v2, SupportedKind, SupportedResponse, X402Version},
    route::RequestView,
    testing::{SettleAnswer, StandIn, VerifyAnswer},
    Asset, Decision, Engine, Offer, Route,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const UPTO_FACILITATOR: &str = "0x1111111111111111111111111111111111111111";
const FEE_PAYER: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";
const SVM_PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";

/// A facilitator that only answers `/supported` (upto on every EVM network
/// with its facilitator address, Solana exact with its fee payer); a
/// challenge needs nothing else, and a payment would not be verified.
fn supported_only() -> StandIn {
    let facilitator = StandIn::new().with_supported(SupportedResponse {
        kinds: vec![
            SupportedKind {
                x402_version: X402Version::V2,
                scheme: "upto".into(),
                network: "eip155:*".into(),
                extra: Some(
                    serde_json::from_value(json!({ "facilitatorAddress": UPTO_FACILITATOR }))
                        .unwrap(),
                ),
            },
            SupportedKind {
                x402_version: X402Version::V2,
                scheme: "exact".into(),
                network: "solana:*".into(),
                extra: Some(serde_json::from_value(json!({ "feePayer": FEE_PAYER })).unwrap()),
            },
        ],
        ..SupportedResponse::default()
    });
    facilitator.set_verify(VerifyAnswer::Unavailable);
    facilitator.set_settle(SettleAnswer::Unavailable);
    facilitator
}

fn assert_no_null(v: &Value, path: &str) {
    match v {
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

#[tokio::test]
async fn v1_body_holds_only_rows_strict_v1_clients_accept() {
    let engine = Engine::builder(supported_only())
        .route(
            Route::get("/report")
                .offer(Offer::exact("eip155:84532", "$0.01", PAY_TO))
                .offer(Offer::upto("eip155:84532", "$0.05", PAY_TO))
                .offer(Offer::exact("eip155:31337", "$0.01", PAY_TO).asset(
                    Asset::new("0x5FbDB2315678afecb367f032d93F642f64180aa3", 6).eip712("USDC", "2"),
                )),
        )
        .public_origin("http://api.example.test")
        .build()
        .unwrap();
    let req = http::Request::get("/report?id=7").body(()).unwrap();
    let (parts, ()) = req.into_parts();
    let Decision::Respond(resp) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("expected a challenge");
    };
    assert_eq!(resp.status(), 402);
    assert_eq!(resp.headers()["content-type"], "application/json");

    let v2: v2::PaymentRequired =
        codec::decode(resp.headers()[codec::PAYMENT_REQUIRED].as_bytes(), 1 << 16).unwrap();
    assert_eq!(v2.accepts.len(), 3, "v2 offers everything");
    assert_eq!(v2.resource.url, "http://api.example.test/report?id=7");
    assert_eq!(v2.accepts[1].scheme, "upto");
    assert_eq!(v2.accepts[1].extra["facilitatorAddress"], UPTO_FACILITATOR);
    assert_eq!(v2.accepts[1].extra["assetTransferMethod"], "permit2");
    assert_eq!(v2.error.as_deref(), Some("payment_required"));

    let body: Value = serde_json::from_slice(resp.body()).unwrap();
    assert_no_null(&body, "body");
    assert_eq!(body["x402Version"], 1);
    let accepts = body["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 1, "only the exact Base Sepolia row: {body}");
    let row = &accepts[0];
    assert_eq!(row["scheme"], "exact");
    assert_eq!(row["network"], "base-sepolia");
    assert_eq!(row["maxAmountRequired"], "10000");
    assert!(row.get("amount").is_none());
    assert_eq!(row["resource"], "http://api.example.test/report?id=7");
    assert!(row["mimeType"].is_string());
    assert!(row["description"].is_string());
    assert_eq!(row["extra"], json!({"name": "USDC", "version": "2"}));
}

#[tokio::test]
async fn static_challenge_with_fixed_resource_is_reused() {
    let engine = Engine::builder(supported_only())
        .route(
            Route::get("/r")
                .offer(Offer::exact("eip155:84532", "$0.001", PAY_TO))
                .resource_url("https://api.example.test/r")
                .description("A report"),
        )
        .build()
        .unwrap();
    let mut headers = Vec::new();
    for _ in 0..2 {
        let (parts, ()) = http::Request::get("/r").body(()).unwrap().into_parts();
        let Decision::Respond(resp) = engine.process(RequestView::from_parts(&parts)).await else {
            panic!("expected a challenge");
        };
        headers.push(resp.headers()[codec::PAYMENT_REQUIRED].clone());
    }
    assert_eq!(headers[0], headers[1]);
    let v2: v2::PaymentRequired = codec::decode(headers[0].as_bytes(), 1 << 16).unwrap();
    assert_eq!(v2.resource.description, "A report");
    assert_eq!(v2.accepts[0].amount.to_string(), "1000");
}

#[tokio::test]
async fn bad_configuration_is_reported_at_build() {
    let err = Engine::builder(supported_only())
        .route(Route::get("/x").offer(Offer::exact("eip155:84532", "1e3", PAY_TO)))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("plain decimal"), "{err}");
    let err = Engine::builder(supported_only())
        .route(Route::get("/x").offer(Offer::exact("eip155:999", "$1", PAY_TO)))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("no default stablecoin"), "{err}");
    let err = Engine::builder(supported_only())
        .route(Route::get("x"))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("must start with"), "{err}");
    assert!(Engine::builder(supported_only())
        .route(Route::get("/x"))
        .build()
        .is_err());
}

#[tokio::test]
async fn several_networks_on_one_route_with_solana_fee_payer_from_supported() {
    let engine = Engine::builder(supported_only())
        .route(
            Route::get("/multi")
                .offer(Offer::exact("eip155:84532", "$0.01", PAY_TO))
                .offer(Offer::exact("eip155:8453", "$0.01", PAY_TO))
                .offer(Offer::exact(
                    x402_core::network::SOLANA_DEVNET,
                    "$0.01",
                    SVM_PAY_TO,
                )),
        )
        .build()
        .unwrap();
    let (parts, ()) = http::Request::get("/multi").body(()).unwrap().into_parts();
    let Decision::Respond(resp) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("expected a challenge");
    };
    assert_eq!(resp.status(), 402, "{:?}", resp.body());
    let v2: v2::PaymentRequired =
        codec::decode(resp.headers()[codec::PAYMENT_REQUIRED].as_bytes(), 1 << 16).unwrap();
    assert_eq!(v2.accepts.len(), 3);
    // Base mainnet USDC's EIP-712 name differs from Base Sepolia's.
    assert_eq!(v2.accepts[0].extra["name"], "USDC");
    assert_eq!(v2.accepts[1].extra["name"], "USD Coin");
    let svm = &v2.accepts[2];
    assert_eq!(svm.asset, "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU");
    assert_eq!(svm.extra["feePayer"], FEE_PAYER);
    assert_eq!(svm.amount.to_string(), "10000");
    let body: Value = serde_json::from_slice(resp.body()).unwrap();
    let networks: Vec<&str> = body["accepts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["network"].as_str().unwrap())
        .collect();
    assert_eq!(networks, ["base-sepolia", "base", "solana-devnet"]);
}

/// A hook that answers every protected request itself (and so inspects
/// requests, by the trait's default).
#[derive(Debug)]
struct LetsEveryoneIn;

#[async_trait]
impl x402_core::hooks::PaymentHooks for LetsEveryoneIn {
    async fn on_protected_request(
        &self,
        _ctx: &x402_core::hooks::RequestContext<'_>,
    ) -> Result<x402_core::hooks::ProtectedRequest, x402_core::hooks::HookError> {
        Ok(x402_core::hooks::ProtectedRequest::GrantAccess)
    }
}

fn parts(uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut req = http::Request::get(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(()).unwrap().into_parts().0
}

fn resource_url(resp: &x402_core::engine::EngineResponse) -> String {
    let v2: v2::PaymentRequired =
        codec::decode(resp.headers()[codec::PAYMENT_REQUIRED].as_bytes(), 1 << 16).unwrap();
    let body: Value = serde_json::from_slice(resp.body()).unwrap();
    assert_eq!(body["accepts"][0]["resource"], v2.resource.url.as_str());
    v2.resource.url
}

#[tokio::test]
async fn process_decides_at_once_what_needs_no_waiting_and_agrees_when_awaited() {
    let engine = Engine::builder(supported_only())
        .route(Route::get("/r").offer(Offer::exact("eip155:84532", "$0.001", PAY_TO)))
        .trust_proxy_headers()
        .build()
        .unwrap();
    let now = |p: &http::request::Parts| decided_now(&engine, p);

    // Unprotected: pass, at once.
    assert!(matches!(now(&parts("/free", &[])), Some(Decision::Pass)));

    // The first unpaid request builds the challenge for its URL; from then
    // on the same URL is answered at once, with the same bytes `process`
    // gives.
    let first = parts("/r?x=1", &[("host", "a.example")]);
    assert!(now(&first).is_none(), "nothing encoded for this URL yet");
    let Decision::Respond(slow) = engine.process(RequestView::from_parts(&first)).await else {
        panic!("expected a challenge");
    };
    let Some(Decision::Respond(fast)) = now(&first) else {
        panic!("expected the ready-made challenge");
    };
    assert_eq!(fast.status(), 402);
    assert_eq!(fast.headers(), slow.headers());
    assert_eq!(fast.body(), slow.body());
    assert_eq!(
        fast.headers()["content-length"],
        slow.body().len().to_string().as_str()
    );
    assert_eq!(resource_url(&fast), "http://a.example/r?x=1");

    // Another host, scheme or query is another URL: never the cached one.
    for (uri, headers, url) in [
        (
            "/r?x=1",
            vec![("host", "b.example")],
            "http://b.example/r?x=1",
        ),
        (
            "/r?x=1",
            vec![("host", "a.example"), ("x-forwarded-proto", "https")],
            "https://a.example/r?x=1",
        ),
        (
            "/r?x=2",
            vec![("host", "a.example")],
            "http://a.example/r?x=2",
        ),
        ("/r", vec![("host", "a.example")], "http://a.example/r"),
        (
            "/r?x=1",
            vec![("host", "a.example:8080")],
            "http://a.example:8080/r?x=1",
        ),
    ] {
        let p = parts(uri, &headers);
        assert!(
            now(&p).is_none(),
            "{url} must not reuse another URL's challenge"
        );
        let Decision::Respond(resp) = engine.process(RequestView::from_parts(&p)).await else {
            panic!("expected a challenge");
        };
        assert_eq!(resource_url(&resp), url);
        let Some(Decision::Respond(again)) = now(&p) else {
            panic!("expected {url}'s challenge to be ready now");
        };
        assert_eq!(resource_url(&again), url);
    }

    // Whatever carries a payment, or comes from a browser, waits for
    // `process`.
    let signed = parts(
        "/r",
        &[("host", "a.example"), ("payment-signature", "e30=")],
    );
    assert!(now(&signed).is_none());
    let x_payment = parts("/r", &[("host", "a.example"), ("x-payment", "e30=")]);
    assert!(now(&x_payment).is_none());
    let browser = parts(
        "/r",
        &[
            ("host", "a.example"),
            ("accept", "text/html"),
            ("user-agent", "Mozilla/5.0"),
        ],
    );
    assert!(now(&browser).is_none());
}

#[tokio::test]
async fn process_waits_for_hooks_that_inspect_requests() {
    let engine = Engine::builder(supported_only())
        .route(
            Route::get("/r")
                .offer(Offer::exact("eip155:84532", "$0.001", PAY_TO))
                .resource_url("https://api.example.test/r"),
        )
        .hooks(LetsEveryoneIn)
        .build()
        .unwrap();
    let p = parts("/r", &[]);
    // The challenge is encoded at build, but the hook may grant access.
    assert!(decided_now(&engine, &p).is_none());
    assert!(matches!(
        engine.process(RequestView::from_parts(&p)).await,
        Decision::Pass
    ));
    let free = parts("/free", &[]);
    assert!(matches!(decided_now(&engine, &free), Some(Decision::Pass)));
}

/// What [`Engine::process`] decides without waiting.
fn decided_now(engine: &Engine, parts: &http::request::Parts) -> Option<Decision> {
    match engine.process(RequestView::from_parts(parts)).now() {
        x402_core::engine::Now::Decided(decision) => Some(decision),
        x402_core::engine::Now::Pending(_) => None,
    }
}

/// The challenge names the configured public origin, whatever `Host`,
/// `X-Forwarded-*` or absolute-form target the client sends; an engine
/// without one names `http://localhost`, never the client's choice.
#[tokio::test]
async fn resource_urls_come_from_the_public_origin_never_from_the_client() {
    let build = |origin: Option<&str>| {
        let builder = Engine::builder(supported_only())
            .route(Route::get("/r").offer(Offer::exact("eip155:84532", "$0.001", PAY_TO)));
        match origin {
            Some(origin) => builder.public_origin(origin),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let hostile: &[(&str, &str)] = &[
        ("host", "evil.example"),
        ("x-forwarded-host", "evil.example"),
        ("x-forwarded-proto", "https"),
    ];
    for (engine, expected) in [
        (
            build(Some("https://API.example.com/")),
            "https://api.example.com/r?x=1",
        ),
        (
            build(Some("http://127.0.0.1:4021")),
            "http://127.0.0.1:4021/r?x=1",
        ),
        (build(None), "http://localhost/r?x=1"),
    ] {
        for uri in ["/r?x=1", "http://evil.example/r?x=1"] {
            let p = parts(uri, hostile);
            for _ in 0..2 {
                // The second answer is the ready-made one.
                let Decision::Respond(resp) = engine.process(RequestView::from_parts(&p)).await
                else {
                    panic!("expected a challenge");
                };
                assert_eq!(resource_url(&resp), expected, "{uri}");
            }
        }
        assert_eq!(engine.origin(&parts("/", hostile).headers), {
            let end = expected.find("/r?").unwrap();
            &expected[..end]
        });
    }
}

#[test]
fn a_public_origin_is_scheme_and_authority_only() {
    for bad in [
        "api.example.com",
        "ftp://api.example.com",
        "https://api.example.com/v1",
        "https://api.example.com?x=1",
        "https://user@api.example.com",
        "https://",
    ] {
        let built = Engine::builder(supported_only()).public_origin(bad).build();
        assert!(
            matches!(
                built,
                Err(x402_core::engine::ConfigError::PublicOrigin { .. })
            ),
            "{bad} accepted"
        );
    }
}

/// Behind a trusted proxy, the proxy's headers name the origin: the first
/// value of a list, and nothing that would change the URL's shape.
#[tokio::test]
async fn a_trusted_proxy_names_the_origin() {
    let engine = Engine::builder(supported_only())
        .route(Route::get("/r").offer(Offer::exact("eip155:84532", "$0.001", PAY_TO)))
        .trust_proxy_headers()
        .build()
        .unwrap();
    for (headers, expected) in [
        (
            vec![
                ("host", "internal:8080"),
                ("x-forwarded-host", "api.example.com, proxy.internal"),
                ("x-forwarded-proto", "https, http"),
            ],
            "https://api.example.com/r",
        ),
        (
            vec![("host", "api.example.com")],
            "http://api.example.com/r",
        ),
        (
            vec![("host", "api.example.com"), ("x-forwarded-host", "a/b@c")],
            "http://api.example.com/r",
        ),
        (vec![], "http://localhost/r"),
    ] {
        let p = parts("/r", &headers);
        let Decision::Respond(resp) = engine.process(RequestView::from_parts(&p)).await else {
            panic!("expected a challenge");
        };
        assert_eq!(resource_url(&resp), expected);
    }
}

/// The resource a refused payment's 402 names is its own request's URL,
/// whether the refusal comes at verification or at settlement, and
/// whatever URL the payment before it was made to (the engine shares the
/// resource between payments to one URL).
#[tokio::test]
async fn refused_payments_name_their_own_url() {
    let facilitator = std::sync::Arc::new(StandIn::new());
    let engine = Engine::builder_arc(facilitator.clone())
        .route(Route::get("/r").offer(Offer::exact("eip155:84532", "$0.001", PAY_TO)))
        .trust_proxy_headers()
        .build()
        .unwrap();
    let urls = [
        ("/r?x=1", "a.example", "http://a.example/r?x=1"),
        ("/r?x=1", "a.example", "http://a.example/r?x=1"),
        ("/r?x=2", "a.example", "http://a.example/r?x=2"),
        ("/r?x=2", "b.example", "http://b.example/r?x=2"),
        ("/r?x=1", "a.example", "http://a.example/r?x=1"),
    ];
    let pay = |uri: &'static str, host: &'static str| {
        let engine = engine.clone();
        async move {
            let unpaid = parts(uri, &[("host", host)]);
            let Decision::Respond(challenge) =
                engine.process(RequestView::from_parts(&unpaid)).await
            else {
                panic!("expected a challenge");
            };
            let challenge: v2::PaymentRequired = codec::decode(
                challenge.headers()[codec::PAYMENT_REQUIRED].as_bytes(),
                1 << 16,
            )
            .unwrap();
            let header = x402_core::testing::pay(&challenge);
            let paid = parts(uri, &[("host", host), ("payment-signature", &header)]);
            engine.process(RequestView::from_parts(&paid)).await
        }
    };

    // Refused at verification.
    facilitator.set_verify(VerifyAnswer::Invalid("insufficient_funds".into()));
    for (uri, host, url) in urls {
        let Decision::Respond(refused) = pay(uri, host).await else {
            panic!("expected a refusal for {url}");
        };
        assert_eq!(refused.status(), 402);
        assert_eq!(resource_url(&refused), url);
    }

    // Refused at settlement, after the handler.
    facilitator.set_verify(VerifyAnswer::Valid);
    facilitator.set_settle(SettleAnswer::Refused("insufficient_funds".into()));
    for (uri, host, url) in urls {
        let Decision::Paid(paid) = pay(uri, host).await else {
            panic!("expected {url}'s payment to verify");
        };
        let x402_core::Completion::Replace(refused) = paid
            .complete(http::StatusCode::OK, &mut http::HeaderMap::new())
            .await
        else {
            panic!("expected {url}'s settlement to be refused");
        };
        assert_eq!(refused.status(), 402);
        assert_eq!(resource_url(&refused), url);
    }
    facilitator.assert_calls(2 * urls.len(), urls.len());
}
