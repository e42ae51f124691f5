//! Prepaid sessions through the engine: opening, redemption, refunds,
//! refusals, on both stores, and exactly-once redemption under load across
//! several engine instances sharing Redis. Then the session deadline: a
//! store that leaves it to the engine, and Redis, which keeps it itself
//! (a `redis-server` of the test's own, paused), each answered 503 at the
//! deadline with the late redemption given back, and on Redis a client
//! that hangs up while its redemption waits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use ::redis::AsyncCommands;
use http::{HeaderMap, StatusCode};
use serde_json::Value;
use x402_core::{
    codec,
    route::RequestView,
    session::{
        MemorySessionStore, Redemption, RedisSessionStore, SessionOffer, SessionRecord,
        SessionStore, SessionStoreError, SessionToken, TokenHash,
    },
    testing::StandIn,
    Completion, Decision, Engine, Offer, Route,
};
use x402_tests::{
    core_support::redis_server::{script_calls, RedisServer},
    payment, PAY_TO,
};

fn engine(
    facilitator: Arc<StandIn>,
    store: impl SessionStore,
    calls: u64,
    ttl: Duration,
) -> Engine {
    builder(facilitator, store, calls, ttl).build().unwrap()
}

fn engine_with_deadline(
    facilitator: Arc<StandIn>,
    store: impl SessionStore,
    calls: u64,
    ttl: Duration,
) -> Engine {
    builder(facilitator, store, calls, ttl)
        .session_deadline(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn builder(
    facilitator: Arc<StandIn>,
    store: impl SessionStore,
    calls: u64,
    ttl: Duration,
) -> x402_core::EngineBuilder {
    Engine::builder(facilitator)
        .route(
            Route::get("/session/demo")
                .offer(Offer::exact("eip155:84532", "$0.001", PAY_TO))
                .session(
                    SessionOffer::new("demo-100", calls, ttl, "demo").offer(Offer::exact(
                        "eip155:84532",
                        "$0.05",
                        PAY_TO,
                    )),
                ),
        )
        .route(
            Route::get("/other")
                .offer(Offer::exact("eip155:84532", "$0.001", PAY_TO))
                .session(
                    SessionOffer::new("other", 10, ttl, "other").offer(Offer::exact(
                        "eip155:84532",
                        "$0.05",
                        PAY_TO,
                    )),
                ),
        )
        .session_store(store)
}

/// Runs one request through the engine, with a handler answering `status`.
/// Returns the final status, the response headers, and whether the handler ran.
async fn call(
    engine: &Engine,
    path: &str,
    headers: &[(&str, &str)],
    status: StatusCode,
) -> (StatusCode, HeaderMap, bool) {
    let mut builder = http::Request::get(path);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let (parts, ()) = builder.body(()).unwrap().into_parts();
    match engine.process(RequestView::from_parts(&parts)).await {
        Decision::Pass => panic!("route is protected"),
        Decision::Respond(r) => (r.status(), r.headers().clone(), false),
        Decision::Paid(paid) => {
            let mut out = HeaderMap::new();
            match paid.complete(status, &mut out).await {
                Completion::Deliver => (status, out, true),
                Completion::Replace(r) => (r.status(), r.headers().clone(), true),
            }
        }
    }
}

fn challenge_error(headers: &HeaderMap) -> String {
    let v: Value = codec::decode(headers["payment-required"].as_bytes(), 1 << 16).unwrap();
    v["error"].as_str().unwrap().to_owned()
}

/// Buys the session offered on `/session/demo`; returns the token.
async fn buy(engine: &Engine) -> (String, HeaderMap) {
    let (status, headers, _) = call(engine, "/session/demo", &[], StatusCode::OK).await;
    assert_eq!(status, 402);
    let required: Value = codec::decode(headers["payment-required"].as_bytes(), 1 << 16).unwrap();
    assert_eq!(
        required["accepts"].as_array().unwrap().len(),
        1,
        "session offers are never in accepts"
    );
    let offer = &required["extensions"]["session"]["info"]["offers"][0];
    assert_eq!(offer["id"], "demo-100");
    assert_eq!(offer["scope"], "demo");
    let session_row = offer["accepts"][0].clone();
    assert_eq!(session_row["amount"], "50000");
    let header = payment::v2_header(&session_row);
    let (status, headers, ran) = call(
        engine,
        "/session/demo",
        &[("payment-signature", &header)],
        StatusCode::OK,
    )
    .await;
    assert_eq!(status, 200);
    assert!(ran);
    let token = headers["x-payment-session"].to_str().unwrap().to_owned();
    assert_eq!(token.len(), 64);
    (token, headers)
}

fn redis_prefix() -> String {
    format!("x402:test:sessions:{}:", &payment::random_hex(8)[2..])
}

async fn redis_store_at(prefix: &str) -> RedisSessionStore {
    let url = x402_tests::require::redis_url().await;
    RedisSessionStore::connect(&url)
        .await
        .unwrap()
        .prefix(prefix)
}

async fn redis_store() -> RedisSessionStore {
    redis_store_at(&redis_prefix()).await
}

macro_rules! session_suite {
    ($module:ident, $store:expr) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn opening_counts_as_the_first_call_and_calls_count_down() {
                let f = Arc::new(StandIn::new());
                let e = engine(f.clone(), $store, 3, Duration::from_secs(60));
                let (token, headers) = buy(&e).await;
                assert_eq!(headers["x-payment-session-remaining"], "2");
                assert!(headers.contains_key("payment-response"));
                for left in ["1", "0"] {
                    let (status, headers, ran) = call(
                        &e,
                        "/session/demo",
                        &[("x-payment-session", &token)],
                        StatusCode::OK,
                    )
                    .await;
                    assert_eq!(status, 200);
                    assert!(ran);
                    assert_eq!(headers["x-payment-session-remaining"], left);
                    assert!(
                        !headers.contains_key("payment-response"),
                        "no settlement per call"
                    );
                }
                let (status, headers, ran) = call(
                    &e,
                    "/session/demo",
                    &[("x-payment-session", &token)],
                    StatusCode::OK,
                )
                .await;
                assert_eq!(status, 402);
                assert!(!ran);
                assert_eq!(challenge_error(&headers), "session_exhausted");
                assert_eq!(f.settle_calls(), 1, "one settlement for the whole session");
            }

            #[tokio::test]
            async fn a_failed_handler_gives_the_call_back() {
                let f = Arc::new(StandIn::new());
                let e = engine(f, $store, 2, Duration::from_secs(60));
                let (token, _) = buy(&e).await;
                let (status, _, ran) = call(
                    &e,
                    "/session/demo",
                    &[("x-payment-session", &token)],
                    StatusCode::INTERNAL_SERVER_ERROR,
                )
                .await;
                assert_eq!((status, ran), (StatusCode::INTERNAL_SERVER_ERROR, true));
                let (status, headers, _) = call(
                    &e,
                    "/session/demo",
                    &[("x-payment-session", &token)],
                    StatusCode::OK,
                )
                .await;
                assert_eq!(status, 200);
                assert_eq!(headers["x-payment-session-remaining"], "0");
            }

            #[tokio::test]
            async fn expired_sessions_are_refused() {
                let f = Arc::new(StandIn::new());
                let e = engine(f, $store, 10, Duration::from_secs(1));
                let (token, _) = buy(&e).await;
                tokio::time::sleep(Duration::from_millis(2100)).await;
                let (status, headers, ran) = call(
                    &e,
                    "/session/demo",
                    &[("x-payment-session", &token)],
                    StatusCode::OK,
                )
                .await;
                assert_eq!((status, ran), (StatusCode::PAYMENT_REQUIRED, false));
                assert_eq!(challenge_error(&headers), "session_expired");
            }

            #[tokio::test]
            async fn sessions_are_bound_to_their_scope() {
                let f = Arc::new(StandIn::new());
                let e = engine(f, $store, 10, Duration::from_secs(60));
                let (token, _) = buy(&e).await;
                let (status, headers, ran) = call(
                    &e,
                    "/other",
                    &[("x-payment-session", &token)],
                    StatusCode::OK,
                )
                .await;
                assert_eq!((status, ran), (StatusCode::PAYMENT_REQUIRED, false));
                assert_eq!(challenge_error(&headers), "session_out_of_scope");
                // The refused call was not consumed.
                let (_, headers, _) = call(
                    &e,
                    "/session/demo",
                    &[("x-payment-session", &token)],
                    StatusCode::OK,
                )
                .await;
                assert_eq!(headers["x-payment-session-remaining"], "8");
            }

            #[tokio::test]
            async fn unknown_and_malformed_tokens_get_the_challenge() {
                let f = Arc::new(StandIn::new());
                let e = engine(f.clone(), $store, 10, Duration::from_secs(60));
                let unknown = payment::random_hex(32)[2..].to_owned();
                assert_eq!(unknown.len(), 64);
                let (status, headers, ran) = call(
                    &e,
                    "/session/demo",
                    &[("x-payment-session", &unknown)],
                    StatusCode::OK,
                )
                .await;
                assert_eq!((status, ran), (StatusCode::PAYMENT_REQUIRED, false));
                assert_eq!(challenge_error(&headers), "session_unknown");
                let (status, headers, _) = call(
                    &e,
                    "/session/demo",
                    &[("x-payment-session", "not-a-token")],
                    StatusCode::OK,
                )
                .await;
                assert_eq!(status, 402);
                assert_eq!(challenge_error(&headers), "session_invalid");
                assert_eq!(f.settle_calls(), 0);
            }
        }
    };
}

session_suite!(memory, MemorySessionStore::new());
session_suite!(redis, redis_store().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_100_call_session_redeems_exactly_100_times_across_3_instances() {
    let facilitator = Arc::new(StandIn::new());
    // Three engine instances, each with its own connection to the shared
    // Redis (the same key prefix). The deadline is generous: this test is
    // about exactly-once redemption, not latency on a loaded 2-core machine.
    let prefix = redis_prefix();
    let mut engines = Vec::new();
    for _ in 0..3 {
        let own = redis_store_at(&prefix).await;
        engines.push(engine_with_deadline(
            facilitator.clone(),
            own,
            100,
            Duration::from_secs(300),
        ));
    }
    let (token, headers) = buy(&engines[0]).await;
    assert_eq!(headers["x-payment-session-remaining"], "99");

    let handler_runs = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let engine = engines[i % 3].clone();
        let token = token.clone();
        let (runs, refused) = (handler_runs.clone(), refused.clone());
        tasks.push(tokio::spawn(async move {
            let (status, _, ran) = call(
                &engine,
                "/session/demo",
                &[("x-payment-session", &token)],
                StatusCode::OK,
            )
            .await;
            if ran {
                runs.fetch_add(1, Ordering::SeqCst);
            }
            if status == StatusCode::PAYMENT_REQUIRED {
                refused.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The opening call was the first of the 100 sold: 99 more run, and the
    // other 901 of the 1,000 concurrent redemptions get the 402 challenge.
    let runs = handler_runs.load(Ordering::SeqCst);
    assert_eq!(
        1 + runs,
        100,
        "handler runs in total, the opening call included"
    );
    assert_eq!(refused.load(Ordering::SeqCst), 1000 - runs);
    assert_eq!(facilitator.settle_calls(), 1);
}

/// A store that leaves its deadline to the engine (`redeem_within` is the
/// trait's default): each redemption is made `delay` after it is asked for.
#[derive(Clone)]
struct SlowStore {
    inner: MemorySessionStore,
    delay: Duration,
}

#[async_trait::async_trait]
impl SessionStore for SlowStore {
    async fn open(
        &self,
        token: &TokenHash,
        record: SessionRecord,
    ) -> Result<(), SessionStoreError> {
        self.inner.open(token, record).await
    }

    async fn redeem(
        &self,
        token: &TokenHash,
        scope: &str,
        now: u64,
    ) -> Result<Redemption, SessionStoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.redeem(token, scope, now).await
    }

    async fn give_back(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        self.inner.give_back(token).await
    }
}

/// Calls `/session/demo` with `token`, timed.
async fn timed_call(engine: &Engine, token: &str) -> (StatusCode, HeaderMap, Duration) {
    let started = std::time::Instant::now();
    let (status, headers, _) = call(
        engine,
        "/session/demo",
        &[("x-payment-session", token)],
        StatusCode::OK,
    )
    .await;
    (status, headers, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_past_the_deadline_is_answered_503_and_its_late_redemption_given_back() {
    let inner = MemorySessionStore::new();
    let slow = SlowStore {
        inner: inner.clone(),
        delay: Duration::from_millis(600),
    };
    let e = builder(Arc::new(StandIn::new()), slow, 10, Duration::from_secs(60))
        .session_deadline(Duration::from_millis(200))
        .build()
        .unwrap();
    let (token, headers) = buy(&e).await;
    assert_eq!(headers["x-payment-session-remaining"], "9");

    let (status, _, waited) = timed_call(&e, &token).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        (Duration::from_millis(200)..Duration::from_millis(600)).contains(&waited),
        "answered after {waited:?}"
    );
    // The redemption lands 400 ms later, and is given back.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let hash = SessionToken::parse(&token).unwrap().hash();
    assert_eq!(
        inner.redeem(&hash, "demo", unix_now()).await.unwrap(),
        Redemption::Redeemed { remaining: 8 },
        "the late redemption was not given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_the_deadline_and_undoes_calls_nobody_waits_for() {
    let mut server = RedisServer::start_free();
    let store = RedisSessionStore::connect(&server.url()).await.unwrap();
    let mut redis = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let e = builder(Arc::new(StandIn::new()), store, 10, Duration::from_secs(60))
        .session_deadline(Duration::from_millis(200))
        .build()
        .unwrap();
    let (token, _) = buy(&e).await;
    let key = format!(
        "x402:session:{}",
        SessionToken::parse(&token).unwrap().hash().to_hex()
    );
    let (status, headers, _) = timed_call(&e, &token).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-payment-session-remaining"], "8");
    // Waits for Redis to have run `scripts` script calls (the redemption
    // that landed late and its give-back), then reads the calls left.
    let port = server.port();
    let landed = |scripts: u64| {
        let (key, mut redis) = (key.clone(), redis.clone());
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while script_calls(port) < scripts {
                assert!(std::time::Instant::now() < deadline, "no give-back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(script_calls(port), scripts);
            redis.hget::<_, _, u64>(&key, "remaining").await.unwrap()
        }
    };

    // Loads the give-back script, so that every later script call is one
    // EVALSHA.
    let loader = RedisSessionStore::connect(&server.url()).await.unwrap();
    loader.give_back(&TokenHash([0; 32])).await.unwrap();
    let before = script_calls(port);

    // Redis stops answering: the call is refused at the deadline, and what
    // lands once Redis answers again is given back.
    server.signal("-STOP");
    let (status, _, waited) = timed_call(&e, &token).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        (Duration::from_millis(200)..Duration::from_millis(1000)).contains(&waited),
        "answered after {waited:?}"
    );
    server.signal("-CONT");
    assert_eq!(landed(before + 2).await, 8);

    // The client hangs up while its redemption waits: given back too.
    server.signal("-STOP");
    let hung_up = {
        let (e, token) = (e.clone(), token.clone());
        tokio::spawn(async move { timed_call(&e, &token).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    hung_up.abort();
    assert!(hung_up.await.unwrap_err().is_cancelled());
    server.signal("-CONT");
    assert_eq!(landed(before + 4).await, 8);
    let (status, headers, _) = timed_call(&e, &token).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-payment-session-remaining"], "7");
    let _: () = redis.del(&key).await.unwrap();
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
