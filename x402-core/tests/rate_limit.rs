//! Abuse limits through the engine: failed payments and unpaid challenges
//! per client, answered 429 before any hook or facilitator call; how
//! clients are keyed (peer, key function, trusted proxies).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    convert::Infallible,
    net::IpAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use x402_core::{
    engine::{ConfigError, Reply},
    hooks::{HookError, PaymentHooks, ProtectedRequest, RequestContext},
    limit::{ProxyHeader, RateLimit},
    proto::v2::PaymentRequirements,
    route::{RequestInfo, RequestView},
    testing::{self, StandIn, VerifyAnswer},
    Decision, Engine, EngineBuilder, Offer, Route,
};

const MINUTE: Duration = Duration::from_secs(60);

fn offer() -> Offer {
    Offer::exact("eip155:84532", "$0.01", testing::PAY_TO)
}

/// `GET /report` ($0.01) and `GET /dynamic` (priced per request, free with
/// `?free=1`).
fn builder(facilitator: &Arc<StandIn>) -> EngineBuilder {
    Engine::builder_arc(facilitator.clone())
        .route(Route::get("/report").offer(offer()))
        .route(
            Route::get("/dynamic").dynamic_pricing(|request: RequestInfo| async move {
                (request.uri.query() != Some("free=1")).then(|| vec![offer()])
            }),
        )
}

/// What the engine (or the handler, for a paid request) answered.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    #[track_caller]
    fn assert_limited(&self, retry_after: &str) {
        assert_eq!(self.status, StatusCode::TOO_MANY_REQUESTS, "{self:?}");
        assert_eq!(self.headers["retry-after"], retry_after);
        assert_eq!(self.headers["content-type"], "application/json");
        assert_eq!(self.body.as_ref(), br#"{"error":"rate_limited"}"#);
    }
}

/// Sends `GET path` from `peer` with `headers` through the engine, the way
/// an adapter does; a paid request's handler answers 200.
async fn send(engine: &Engine, path: &str, peer: Option<&str>, headers: &[(&str, &str)]) -> Answer {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let (parts, ()) = request.body(()).unwrap().into_parts();
    let peer = peer.map(|p| p.parse::<IpAddr>().unwrap());
    let view = RequestView::from_parts(&parts).peer(peer);
    match engine.process(view).await {
        Decision::Pass => Answer {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        },
        Decision::Respond(response) => {
            let (parts, body) = response.into_parts();
            Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            }
        }
        Decision::Paid(paid) => {
            let handler = Response::new(String::from("paid"));
            match paid.finish(Ok::<_, Infallible>(handler)).await.unwrap() {
                Reply::Handler(response) => Answer {
                    status: response.status(),
                    headers: response.headers().clone(),
                    body: Bytes::new(),
                },
                Reply::Engine(response) => {
                    let (parts, body) = response.into_parts();
                    Answer {
                        status: parts.status,
                        headers: parts.headers,
                        body,
                    }
                }
            }
        }
    }
}

/// The requirement `/report` offers.
async fn requirement(engine: &Engine) -> PaymentRequirements {
    let challenge = testing::challenge(engine, Request::get("/report").body(()).unwrap()).await;
    challenge.accepts[0].clone()
}

#[tokio::test]
async fn invalid_payments_beyond_the_limit_get_429_without_a_verify() {
    let facilitator = Arc::new(StandIn::new());
    facilitator.set_verify(VerifyAnswer::Invalid(
        "invalid_exact_evm_payload_signature".into(),
    ));
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().failed_payments(3, MINUTE))
        .build()
        .unwrap();
    let row = requirement(&engine).await;
    let (a, b) = (Some("192.0.2.1"), Some("192.0.2.2"));

    // Two refused by the facilitator, one that does not even decode.
    for _ in 0..2 {
        let payment = testing::payment(&row);
        let answer = send(&engine, "/report", a, &[("payment-signature", &payment)]).await;
        assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    }
    let answer = send(&engine, "/report", a, &[("payment-signature", "garbage")]).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(facilitator.verify_calls(), 2);

    // Over the limit: 429, one unit back every 20 s, and no /verify.
    for _ in 0..5 {
        let payment = testing::payment(&row);
        let answer = send(&engine, "/report", a, &[("x-payment", &payment)]).await;
        answer.assert_limited("20");
    }
    assert_eq!(facilitator.verify_calls(), 2);

    // Another client is not affected.
    let payment = testing::payment(&row);
    let answer = send(&engine, "/report", b, &[("payment-signature", &payment)]).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(facilitator.verify_calls(), 3);

    // The limited client still gets challenges (another budget, unset here).
    let answer = send(&engine, "/report", a, &[]).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
}

#[tokio::test]
async fn a_limited_client_cannot_pay_until_its_budget_refills() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().failed_payments(1, Duration::from_millis(1_500)))
        .build()
        .unwrap();
    let row = requirement(&engine).await;
    let peer = Some("192.0.2.1");

    facilitator.set_verify(VerifyAnswer::Invalid("insufficient_funds".into()));
    let payment = testing::payment(&row);
    let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);

    // A good payment, while limited: refused unverified (1.5 s, rounded up).
    facilitator.set_verify(VerifyAnswer::Valid);
    let payment = testing::payment(&row);
    let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
    answer.assert_limited("2");
    facilitator.assert_calls(1, 0);

    // Once the budget refilled, it pays.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.headers.contains_key("payment-response"));
    facilitator.assert_calls(2, 1);
}

#[tokio::test]
async fn paying_never_uses_up_the_failures_budget() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().failed_payments(2, MINUTE))
        .build()
        .unwrap();
    let row = requirement(&engine).await;
    let peer = Some("2001:db8::1");
    for _ in 0..10 {
        let payment = testing::payment(&row);
        let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    facilitator.assert_calls(10, 10);

    // A replay is a failure; so is a payment for nothing offered.
    let payment = testing::payment(&row);
    let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    let mut other = row.clone();
    other.pay_to = "0x0000000000000000000000000000000000000001".into();
    let wrong = testing::payment(&other);
    let answer = send(&engine, "/report", peer, &[("payment-signature", &wrong)]).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    // Another address of the same /64 is the same client.
    let payment = testing::payment(&row);
    let same_64 = Some("2001:db8::ffff");
    let answer = send(
        &engine,
        "/report",
        same_64,
        &[("payment-signature", &payment)],
    )
    .await;
    answer.assert_limited("30");
}

#[tokio::test]
async fn concurrent_bad_payments_cost_at_most_the_budget_in_verifies() {
    let facilitator = Arc::new(StandIn::new());
    facilitator.set_verify(VerifyAnswer::Invalid("invalid_payment".into()));
    facilitator.set_delays(Duration::from_millis(200), Duration::ZERO);
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().failed_payments(2, MINUTE))
        .build()
        .unwrap();
    let row = requirement(&engine).await;
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (engine, payment) = (engine.clone(), testing::payment(&row));
            tokio::spawn(async move {
                let headers = [("payment-signature", payment.as_str())];
                send(&engine, "/report", Some("192.0.2.1"), &headers)
                    .await
                    .status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap().as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [402, 402, 429, 429, 429, 429]);
    assert_eq!(facilitator.verify_calls(), 2);
}

#[tokio::test]
async fn facilitator_outages_are_not_the_clients_failures() {
    let facilitator = Arc::new(StandIn::new());
    facilitator.set_verify(VerifyAnswer::Unavailable);
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().failed_payments(1, MINUTE))
        .build()
        .unwrap();
    let row = requirement(&engine).await;
    for _ in 0..3 {
        let payment = testing::payment(&row);
        let answer = send(
            &engine,
            "/report",
            Some("192.0.2.1"),
            &[("payment-signature", &payment)],
        )
        .await;
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    }
    assert_eq!(facilitator.verify_calls(), 3);
}

#[tokio::test]
async fn challenges_are_limited_apart_from_failed_payments() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(
            RateLimit::per_client()
                .failed_payments(1, MINUTE)
                .challenges(2, MINUTE),
        )
        .build()
        .unwrap();
    let row = requirement(&engine).await;
    let peer = Some("192.0.2.1");
    // The ready-made 402 and the one built per request both count.
    assert_eq!(send(&engine, "/report", peer, &[]).await.status, 402);
    assert_eq!(send(&engine, "/dynamic", peer, &[]).await.status, 402);
    send(&engine, "/report", peer, &[])
        .await
        .assert_limited("30");
    send(&engine, "/dynamic", peer, &[])
        .await
        .assert_limited("30");
    // A request that passes (free at its dynamic price) is not a challenge,
    // but draws on the budget to be decided, and is refused with it.
    send(&engine, "/dynamic?free=1", peer, &[])
        .await
        .assert_limited("30");

    // Its payments draw on the other budget.
    facilitator.set_verify(VerifyAnswer::Invalid("invalid_payment".into()));
    let payment = testing::payment(&row);
    let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    let answer = send(&engine, "/report", peer, &[("payment-signature", &payment)]).await;
    answer.assert_limited("60");
    assert_eq!(facilitator.verify_calls(), 1);

    // Unprotected paths are never limited.
    assert_eq!(send(&engine, "/free", peer, &[]).await.status, 200);
}

#[tokio::test]
async fn requests_that_are_not_challenged_give_their_unit_back() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().challenges(1, MINUTE))
        .build()
        .unwrap();
    let peer = Some("192.0.2.1");
    for _ in 0..5 {
        assert_eq!(
            send(&engine, "/dynamic?free=1", peer, &[]).await.status,
            200
        );
    }
    assert_eq!(send(&engine, "/report", peer, &[]).await.status, 402);
    send(&engine, "/report", peer, &[])
        .await
        .assert_limited("60");
}

/// Counts the requests it sees; lets through those with `x-member: yes`.
#[derive(Debug, Default)]
struct Doorman(AtomicUsize);

#[async_trait]
impl PaymentHooks for Doorman {
    async fn on_protected_request(
        &self,
        ctx: &RequestContext<'_>,
    ) -> Result<ProtectedRequest, HookError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(match ctx.request.headers.get("x-member") {
            Some(v) if v == "yes" => ProtectedRequest::GrantAccess,
            _ => ProtectedRequest::Continue,
        })
    }
}

#[tokio::test]
async fn a_limited_client_reaches_no_hook() {
    let facilitator = Arc::new(StandIn::new());
    let doorman = Arc::new(Doorman::default());
    let engine = builder(&facilitator)
        .hooks_arc(doorman.clone())
        .rate_limit(RateLimit::per_client().challenges(2, MINUTE))
        .build()
        .unwrap();
    let peer = Some("192.0.2.1");
    // Let through by the hook: not a challenge, not counted.
    for _ in 0..3 {
        let answer = send(&engine, "/report", peer, &[("x-member", "yes")]).await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    assert_eq!(send(&engine, "/report", peer, &[]).await.status, 402);
    assert_eq!(send(&engine, "/report", peer, &[]).await.status, 402);
    assert_eq!(doorman.0.load(Ordering::SeqCst), 5);
    send(&engine, "/report", peer, &[])
        .await
        .assert_limited("30");
    assert_eq!(doorman.0.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn key_by_keys_the_bucket() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().challenges(1, MINUTE).key_by(
            |request: &RequestView<'_>| {
                let key = request.headers.get("x-api-key")?;
                Some(key.as_bytes().to_vec())
            },
        ))
        .build()
        .unwrap();
    let (one, two) = (Some("192.0.2.1"), Some("192.0.2.2"));
    assert_eq!(
        send(&engine, "/report", one, &[("x-api-key", "k1")])
            .await
            .status,
        402
    );
    // The same key from another address: the same bucket.
    send(&engine, "/report", two, &[("x-api-key", "k1")])
        .await
        .assert_limited("60");
    // Another key from the same address: another bucket.
    assert_eq!(
        send(&engine, "/report", one, &[("x-api-key", "k2")])
            .await
            .status,
        402
    );
    // No key: not limited.
    for _ in 0..3 {
        assert_eq!(send(&engine, "/report", one, &[]).await.status, 402);
    }
}

#[tokio::test]
async fn a_request_with_no_key_is_not_limited() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(
            RateLimit::per_client()
                .challenges(1, MINUTE)
                .trusted_proxies(1),
        )
        .build()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(send(&engine, "/report", None, &[]).await.status, 402);
    }
}

#[tokio::test]
async fn forwarded_headers_are_ignored_unless_proxies_are_trusted() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(RateLimit::per_client().challenges(1, MINUTE))
        .build()
        .unwrap();
    let peer = Some("192.0.2.1");
    let xff = |a: &'static str| [("x-forwarded-for", a)];
    assert_eq!(
        send(&engine, "/report", peer, &xff("203.0.113.1"))
            .await
            .status,
        402
    );
    send(&engine, "/report", peer, &xff("203.0.113.2"))
        .await
        .assert_limited("60");
    let forwarded = [("forwarded", "for=203.0.113.3")];
    send(&engine, "/report", peer, &forwarded)
        .await
        .assert_limited("60");
}

#[tokio::test]
async fn trusted_proxies_key_by_the_address_the_nearest_proxy_saw() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(
            RateLimit::per_client()
                .challenges(1, MINUTE)
                .trusted_proxies(2),
        )
        .build()
        .unwrap();
    // Client -> proxy 198.51.100.7 -> proxy 10.0.0.2 -> server: the first
    // proxy appended the client's address, the second its own.
    let proxy = Some("10.0.0.2");
    let via = |chain: &'static str| [("x-forwarded-for", chain)];
    let answer = send(&engine, "/report", proxy, &via("203.0.113.1, 198.51.100.7")).await;
    assert_eq!(answer.status, 402);
    // A spoofed leftmost entry does not change the key.
    let spoofed = via("6.6.6.6, 203.0.113.1, 198.51.100.7");
    send(&engine, "/report", proxy, &spoofed)
        .await
        .assert_limited("60");
    let spoofed = via("1.1.1.1,2.2.2.2, 203.0.113.1, 198.51.100.7");
    send(&engine, "/report", proxy, &spoofed)
        .await
        .assert_limited("60");
    // Another client behind the same proxies has its own bucket.
    let answer = send(&engine, "/report", proxy, &via("203.0.113.2, 198.51.100.7")).await;
    assert_eq!(answer.status, 402);
    // Too few entries to reach the client's: keyed by the peer (the proxy),
    // shared by every such request, never by a name the client chose.
    let answer = send(&engine, "/report", proxy, &via("198.51.100.7")).await;
    assert_eq!(answer.status, 402);
    send(&engine, "/report", proxy, &[])
        .await
        .assert_limited("60");
    send(&engine, "/report", proxy, &via("garbage, 198.51.100.7"))
        .await
        .assert_limited("60");
}

#[tokio::test]
async fn trusted_proxies_can_write_forwarded() {
    let facilitator = Arc::new(StandIn::new());
    let engine = builder(&facilitator)
        .rate_limit(
            RateLimit::per_client()
                .challenges(1, MINUTE)
                .trusted_proxies(1)
                .proxy_header(ProxyHeader::Forwarded),
        )
        .build()
        .unwrap();
    let proxy = Some("10.0.0.2");
    let fwd = |v: &'static str| [("forwarded", v)];
    let answer = send(
        &engine,
        "/report",
        proxy,
        &fwd("for=6.6.6.6, for=\"[2001:db8::7]:4711\";proto=https"),
    )
    .await;
    assert_eq!(answer.status, 402);
    send(
        &engine,
        "/report",
        proxy,
        &fwd("for=7.7.7.7, for=2001:db8::8"),
    )
    .await
    .assert_limited("60");
    // X-Forwarded-For is not read.
    let xff = [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=192.0.2.9"),
    ];
    assert_eq!(send(&engine, "/report", proxy, &xff).await.status, 402);
}

#[test]
fn a_budget_must_allow_something() {
    let facilitator = Arc::new(StandIn::new());
    for limit in [
        RateLimit::per_client().failed_payments(0, MINUTE),
        RateLimit::per_client().challenges(5, Duration::ZERO),
    ] {
        let error = builder(&facilitator).rate_limit(limit).build().unwrap_err();
        assert!(matches!(error, ConfigError::RateLimit(_)), "{error}");
    }
    // No budget at all: nothing to limit.
    assert!(builder(&facilitator)
        .rate_limit(RateLimit::per_client())
        .build()
        .is_ok());
}
