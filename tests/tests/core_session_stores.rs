//! Prepaid sessions: one `SessionStore` conformance suite run against every
//! store, and a dump of the Redis keys showing that no usable token is kept.
//!
//! Moved from x402-core's tests (Redis). The Redis tests need a server at
//! `REDIS_URL` (default `redis://127.0.0.1:6379`) and, for those that stop or
//! pause one, `redis-server` on the `PATH`: `bash scripts/test-all.sh`
//! provides both (see `x402_tests::require`). Each run uses its own random
//! key prefix.

// Helpers outside `#[test]` functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::Barrier;
use x402_core::session::{
    MemorySessionStore, Redemption, SessionRecord, SessionStore, SessionToken, TokenHash,
};

const SCOPE: &str = "weather";

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn record(scope: &str, calls: u64, expires_at: u64) -> SessionRecord {
    SessionRecord {
        scope: scope.to_owned(),
        remaining: calls,
        expires_at,
    }
}

/// A fresh token's hash, for a session that lives 5 minutes.
async fn open(store: &impl SessionStore, scope: &str, calls: u64) -> TokenHash {
    let token = SessionToken::generate().hash();
    store
        .open(&token, record(scope, calls, unix_now() + 300))
        .await
        .unwrap();
    token
}

fn redeemed(remaining: u64) -> Redemption {
    Redemption::Redeemed { remaining }
}

// ---------------------------------------------------------------------------
// The conformance suite
// ---------------------------------------------------------------------------

/// The behaviour every `SessionStore` must have. Each function gets several
/// instances of the store under test that share one backend (clones of one
/// in-memory store; separate Redis connections), standing in for several
/// engine instances.
mod conformance {
    use super::*;

    pub(crate) async fn counts_down_to_exhausted<S: SessionStore>(stores: Vec<S>) {
        let token = open(&stores[0], SCOPE, 3).await;
        let now = unix_now();
        // Any instance redeems from the same count.
        for (i, left) in [2, 1, 0].into_iter().enumerate() {
            let store = &stores[i % stores.len()];
            assert_eq!(
                store.redeem(&token, SCOPE, now).await.unwrap(),
                redeemed(left)
            );
        }
        for store in &stores {
            assert_eq!(
                store.redeem(&token, SCOPE, now).await.unwrap(),
                Redemption::Exhausted
            );
        }
    }

    pub(crate) async fn expires_in_real_time<S: SessionStore>(stores: Vec<S>) {
        let store = &stores[0];
        let token = SessionToken::generate().hash();
        let expires_at = unix_now() + 1;
        store
            .open(&token, record(SCOPE, 5, expires_at))
            .await
            .unwrap();
        assert_eq!(
            store.redeem(&token, SCOPE, expires_at - 1).await.unwrap(),
            redeemed(4)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            store.redeem(&token, SCOPE, unix_now()).await.unwrap(),
            Redemption::Expired
        );
        // A call given back after the expiry is not restored: seen from
        // before the expiry, the count is where it was.
        store.give_back(&token).await.unwrap();
        assert_eq!(
            store.redeem(&token, SCOPE, expires_at - 1).await.unwrap(),
            redeemed(3)
        );
    }

    pub(crate) async fn expires_at_the_given_now<S: SessionStore>(stores: Vec<S>) {
        let store = &stores[0];
        let token = SessionToken::generate().hash();
        let expires_at = unix_now() + 3600;
        store
            .open(&token, record(SCOPE, 5, expires_at))
            .await
            .unwrap();
        assert_eq!(
            store.redeem(&token, SCOPE, expires_at - 1).await.unwrap(),
            redeemed(4)
        );
        // Exactly at `expires_at` the session is over, and stays over.
        for now in [expires_at, expires_at + 1, expires_at + 1_000_000] {
            assert_eq!(
                store.redeem(&token, SCOPE, now).await.unwrap(),
                Redemption::Expired
            );
        }
        // Expired redemptions consumed nothing.
        assert_eq!(
            store.redeem(&token, SCOPE, expires_at - 1).await.unwrap(),
            redeemed(3)
        );
    }

    pub(crate) async fn other_scopes_are_refused_without_a_call<S: SessionStore>(stores: Vec<S>) {
        let store = &stores[0];
        let token = open(store, SCOPE, 2).await;
        let now = unix_now();
        for scope in ["news", "", "weather:pro", "Weather"] {
            assert_eq!(
                store.redeem(&token, scope, now).await.unwrap(),
                Redemption::OutOfScope,
                "{scope:?}"
            );
        }
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(1));
        assert_eq!(
            store.redeem(&token, "news", now).await.unwrap(),
            Redemption::OutOfScope
        );
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(0));
    }

    pub(crate) async fn give_back_restores_a_call_but_never_above_sold<S: SessionStore>(
        stores: Vec<S>,
    ) {
        let store = &stores[0];
        let token = open(store, SCOPE, 3).await;
        let now = unix_now();
        // Nothing redeemed yet: nothing to give back.
        store.give_back(&token).await.unwrap();
        store.give_back(&token).await.unwrap();
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(2));
        // The handler failed: the call comes back (through another instance).
        stores[1 % stores.len()].give_back(&token).await.unwrap();
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(2));
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(1));
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(0));
        assert_eq!(
            store.redeem(&token, SCOPE, now).await.unwrap(),
            Redemption::Exhausted
        );
        store.give_back(&token).await.unwrap();
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(0));
        // Many give-backs restore at most the 3 calls sold.
        for _ in 0..10 {
            store.give_back(&token).await.unwrap();
        }
        for left in [2, 1, 0] {
            assert_eq!(
                store.redeem(&token, SCOPE, now).await.unwrap(),
                redeemed(left)
            );
        }
        assert_eq!(
            store.redeem(&token, SCOPE, now).await.unwrap(),
            Redemption::Exhausted
        );
    }

    pub(crate) async fn unknown_tokens_are_unknown<S: SessionStore>(stores: Vec<S>) {
        let store = &stores[0];
        let known = open(store, SCOPE, 2).await;
        let unknown = SessionToken::generate().hash();
        let now = unix_now();
        assert_eq!(
            store.redeem(&unknown, SCOPE, now).await.unwrap(),
            Redemption::Unknown
        );
        // Giving back to an unknown session creates nothing.
        store.give_back(&unknown).await.unwrap();
        assert_eq!(
            store.redeem(&unknown, SCOPE, now).await.unwrap(),
            Redemption::Unknown
        );
        // A stored hash is no token: sent as one, it is hashed again and
        // finds nothing.
        let rehashed = SessionToken::parse(&known.to_hex()).unwrap().hash();
        assert_eq!(
            store.redeem(&rehashed, SCOPE, now).await.unwrap(),
            Redemption::Unknown
        );
        assert_eq!(store.redeem(&known, SCOPE, now).await.unwrap(), redeemed(1));
    }

    pub(crate) async fn sessions_are_independent<S: SessionStore>(stores: Vec<S>) {
        let store = &stores[0];
        let a = open(store, SCOPE, 1).await;
        let b = open(store, SCOPE, 2).await;
        let now = unix_now();
        assert_eq!(store.redeem(&a, SCOPE, now).await.unwrap(), redeemed(0));
        assert_eq!(
            store.redeem(&a, SCOPE, now).await.unwrap(),
            Redemption::Exhausted
        );
        assert_eq!(store.redeem(&b, SCOPE, now).await.unwrap(), redeemed(1));
    }

    /// Redemptions through `redeem_within`, for a store that keeps the
    /// deadline itself (both built-in stores do), count as `redeem`'s do,
    /// and a bounded future dropped before it is polled redeems nothing.
    pub(crate) async fn bounded_redemptions_count_like_redeem<S: SessionStore>(stores: Vec<S>) {
        let token = open(&stores[0], SCOPE, 3).await;
        let now = unix_now();
        fn bounded<'a, S: SessionStore>(
            store: &'a S,
            token: &'a TokenHash,
            scope: &'a str,
        ) -> x402_core::session::BoundedRedemption<'a> {
            store
                .redeem_within(token, scope, unix_now(), Duration::from_secs(5))
                .expect("the built-in stores keep their deadlines")
        }
        assert_eq!(
            bounded(&stores[0], &token, SCOPE).await.unwrap(),
            redeemed(2)
        );
        drop(bounded(&stores[1 % stores.len()], &token, SCOPE));
        assert_eq!(
            bounded(&stores[0], &token, "news").await.unwrap(),
            Redemption::OutOfScope
        );
        assert_eq!(
            stores[0].redeem(&token, SCOPE, now).await.unwrap(),
            redeemed(1)
        );
        assert_eq!(
            bounded(&stores[0], &token, SCOPE).await.unwrap(),
            redeemed(0)
        );
        assert_eq!(
            bounded(&stores[0], &token, SCOPE).await.unwrap(),
            Redemption::Exhausted
        );
    }

    /// 1,000 concurrent redemptions of a 100-call session, spread over the
    /// instances: exactly 100 redeemed, 900 exhausted, and every count from
    /// 99 down to 0 handed out once.
    pub(crate) async fn concurrent_redemptions_never_oversell<S: SessionStore + Clone>(
        stores: Vec<S>,
        label: &str,
    ) {
        const CALLS: u64 = 100;
        const REQUESTS: usize = 1_000;
        let token = open(&stores[0], SCOPE, CALLS).await;
        let now = unix_now();
        let barrier = Arc::new(Barrier::new(REQUESTS));
        let started = Instant::now();
        let tasks: Vec<_> = (0..REQUESTS)
            .map(|i| {
                let store = stores[i % stores.len()].clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.redeem(&token, SCOPE, now).await.unwrap()
                })
            })
            .collect();
        let mut left = Vec::new();
        let mut exhausted = 0;
        for task in tasks {
            match task.await.unwrap() {
                Redemption::Redeemed { remaining } => left.push(remaining),
                Redemption::Exhausted => exhausted += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        let elapsed = started.elapsed();
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "{label}: {REQUESTS} concurrent redemptions over {} instances in {elapsed:?}",
                stores.len()
            );
        }
        assert_eq!(left.len() as u64, CALLS);
        assert_eq!(exhausted, REQUESTS - CALLS as usize);
        left.sort_unstable();
        assert_eq!(left, (0..CALLS).collect::<Vec<_>>());
        assert_eq!(
            stores[0].redeem(&token, SCOPE, now).await.unwrap(),
            Redemption::Exhausted
        );
    }
}

/// Runs the conformance suite against `$stores` (an async expression giving
/// a `Vec` of instances sharing one backend), on a multi-threaded runtime.
macro_rules! session_store_conformance {
    ($name:ident, $stores:expr) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn counts_down_to_exhausted() {
                conformance::counts_down_to_exhausted($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn expires_in_real_time() {
                conformance::expires_in_real_time($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn expires_at_the_given_now() {
                conformance::expires_at_the_given_now($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn other_scopes_are_refused_without_a_call() {
                conformance::other_scopes_are_refused_without_a_call($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn give_back_restores_a_call_but_never_above_sold() {
                conformance::give_back_restores_a_call_but_never_above_sold($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn unknown_tokens_are_unknown() {
                conformance::unknown_tokens_are_unknown($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sessions_are_independent() {
                conformance::sessions_are_independent($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bounded_redemptions_count_like_redeem() {
                conformance::bounded_redemptions_count_like_redeem($stores.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_redemptions_never_oversell() {
                conformance::concurrent_redemptions_never_oversell(
                    $stores.await,
                    stringify!($name),
                )
                .await;
            }
        }
    };
}

session_store_conformance!(memory_store, async {
    let store = MemorySessionStore::new();
    vec![store.clone(), store.clone(), store]
});

session_store_conformance!(redis_store, redis::three_instances());

// ---------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------

mod redis {
    use std::sync::OnceLock;

    use ::redis::AsyncCommands;
    use x402_core::session::{RedisSessionStore, SessionStoreError};
    use x402_tests::{
        core_support::redis_server::{script_calls, RedisServer},
        require,
    };

    use super::*;

    /// The shared test Redis (failing in one line when none answers).
    async fn url() -> String {
        require::redis_url().await
    }

    /// One random prefix per test run, so runs sharing a Redis never collide.
    fn prefix() -> &'static str {
        static PREFIX: OnceLock<String> = OnceLock::new();
        PREFIX.get_or_init(|| format!("x402:test:session:{:016x}:", rand::random::<u64>()))
    }

    async fn store() -> RedisSessionStore {
        let url = url().await;
        RedisSessionStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("Redis at {url} (set REDIS_URL): {e}"))
            .prefix(prefix())
    }

    /// Three stores with their own connections: three engine instances.
    pub(crate) async fn three_instances() -> Vec<RedisSessionStore> {
        vec![store().await, store().await, store().await]
    }

    async fn raw_connection() -> ::redis::aio::MultiplexedConnection {
        ::redis::Client::open(url().await)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn dump_holds_no_usable_token() {
        // A prefix of its own, so the dump shows exactly this test's keys.
        let prefix = format!("{}dump:{:016x}:", prefix(), rand::random::<u64>());
        let store = store().await.prefix(prefix.clone());
        let token = SessionToken::generate();
        let expires_at = unix_now() + 300;
        store
            .open(&token.hash(), record(SCOPE, 10, expires_at))
            .await
            .unwrap();
        assert_eq!(
            store
                .redeem(&token.hash(), SCOPE, unix_now())
                .await
                .unwrap(),
            redeemed(9)
        );

        let mut redis = raw_connection().await;
        let keys: Vec<String> = redis.keys(format!("{prefix}*")).await.unwrap();
        assert_eq!(keys, vec![format!("{prefix}{}", token.hash().to_hex())]);
        let mut dump = String::new();
        for key in &keys {
            dump.push_str(key);
            let fields: Vec<(String, String)> = redis.hgetall(key).await.unwrap();
            for (field, value) in &fields {
                dump.push_str(field);
                dump.push_str(value);
            }
            let mut fields: Vec<_> = fields.into_iter().map(|(f, _)| f).collect();
            fields.sort();
            // `lb`: the last script call that redeemed from it (a random
            // batch id and a count), for reconciling a call whose answer
            // was lost.
            assert_eq!(fields, ["expires_at", "lb", "remaining", "scope", "sold"]);
            // Redis forgets the session shortly after it expires.
            let ttl: i64 = redis.ttl(key).await.unwrap();
            assert!(ttl > 300 - 5 && ttl <= 300 + 120, "ttl {ttl}");
            let _: i64 = redis.del(key).await.unwrap();
        }
        let exposed = token.expose();
        assert!(!dump.contains(exposed));
        assert!(!dump
            .to_ascii_uppercase()
            .contains(&exposed.to_ascii_uppercase()));
        // Not even a sizeable piece of it.
        for piece in exposed.as_bytes().chunks(16) {
            let piece = std::str::from_utf8(piece).unwrap();
            assert!(!dump.contains(piece), "{piece}");
        }
        assert!(dump.contains(&token.hash().to_hex()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn default_prefix_and_connection_errors() {
        let store = RedisSessionStore::connect(&url().await).await.unwrap();
        assert!(format!("{store:?}").contains("x402:session:"));
        // Nothing listens on port 1.
        assert!(RedisSessionStore::connect("redis://127.0.0.1:1")
            .await
            .is_err());
        assert!(RedisSessionStore::connect("not a url").await.is_err());
    }

    async fn connection_to(url: &str) -> ::redis::aio::MultiplexedConnection {
        ::redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// Waits until the server on `port` has run `calls` script calls in
    /// all, then checks that no more follow.
    async fn script_calls_come_to(port: u16, calls: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while script_calls(port) < calls {
            assert!(Instant::now() < deadline, "the call was not given back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(script_calls(port), calls);
    }

    /// A `redis-server` of the test's own, a store on it and a connection
    /// to it, a 10-call session redeemed once (which loads both scripts),
    /// its `now`, and the script calls run so far.
    async fn private_session() -> (
        RedisServer,
        RedisSessionStore,
        ::redis::aio::MultiplexedConnection,
        TokenHash,
        u64,
        u64,
    ) {
        let server = RedisServer::start_free();
        let store = RedisSessionStore::connect(&server.url()).await.unwrap();
        let redis = connection_to(&server.url()).await;
        let token = open(&store, SCOPE, 10).await;
        let now = unix_now();
        // A full session takes nothing back, but the script is loaded.
        store.give_back(&token).await.unwrap();
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(9));
        let before = script_calls(server.port());
        (server, store, redis, token, now, before)
    }

    /// A session's key under the default prefix.
    fn default_key(token: &TokenHash) -> String {
        format!("x402:session:{}", token.to_hex())
    }

    async fn remaining(redis: &mut ::redis::aio::MultiplexedConnection, token: &TokenHash) -> u64 {
        redis.hget(default_key(token), "remaining").await.unwrap()
    }

    /// Makes each `(token, scope, now)` redemption in a task of its own, all
    /// released at once; the answers in the same order.
    async fn redeem_at_once(
        store: &RedisSessionStore,
        cases: Vec<(TokenHash, &'static str, u64)>,
    ) -> Vec<Redemption> {
        try_redeem_at_once(store, cases)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    /// [`redeem_at_once`], keeping the errors.
    async fn try_redeem_at_once(
        store: &RedisSessionStore,
        cases: Vec<(TokenHash, &'static str, u64)>,
    ) -> Vec<Result<Redemption, SessionStoreError>> {
        let barrier = Arc::new(Barrier::new(cases.len()));
        let tasks: Vec<_> = cases
            .into_iter()
            .map(|(token, scope, now)| {
                let (store, barrier) = (store.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.redeem(&token, scope, now).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        answers
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_redemptions_share_script_calls() {
        // A server of its own: its statistics count only this test's calls.
        let server = RedisServer::start_free();
        let store = RedisSessionStore::connect(&server.url()).await.unwrap();
        const CALLS: u64 = 400;
        let token = open(&store, SCOPE, CALLS).await;
        let before = script_calls(server.port());

        let now = unix_now();
        let cases = vec![(token, SCOPE, now); CALLS as usize];
        let mut left = Vec::new();
        for answer in redeem_at_once(&store, cases).await {
            match answer {
                Redemption::Redeemed { remaining } => left.push(remaining),
                other => panic!("expected a redemption, got {other:?}"),
            }
        }
        // Every call redeemed exactly once.
        left.sort_unstable();
        assert_eq!(left, (0..CALLS).collect::<Vec<_>>());
        // ... in far fewer script calls than redemptions.
        let calls = script_calls(server.port()) - before;
        assert!(
            (1..=CALLS / 4).contains(&calls),
            "{CALLS} redemptions took {calls} script calls"
        );
        assert_eq!(
            store.redeem(&token, SCOPE, now).await.unwrap(),
            Redemption::Exhausted
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn redemptions_sent_together_are_answered_each_in_order() {
        let store = store().await;
        let now = unix_now();
        let two = open(&store, SCOPE, 2).await;
        let elsewhere = open(&store, "other", 5).await;
        let lapsed = SessionToken::generate().hash();
        store
            .open(&lapsed, record(SCOPE, 5, now - 1))
            .await
            .unwrap();
        let short = SessionToken::generate().hash();
        store
            .open(&short, record(SCOPE, 5, now + 100))
            .await
            .unwrap();
        let unknown = SessionToken::generate().hash();

        // Each redemption with its own clock, all released at once.
        let cases = [
            (two, SCOPE, now),
            (two, SCOPE, now),
            (two, SCOPE, now),
            (elsewhere, SCOPE, now),
            (lapsed, SCOPE, now),
            (short, SCOPE, now + 100),
            (short, SCOPE, now),
            (unknown, SCOPE, now),
        ];
        let answers = redeem_at_once(&store, cases.to_vec()).await;
        let mut two_answers = answers[..3].to_vec();
        two_answers.sort_by_key(|a| format!("{a:?}"));
        assert_eq!(
            two_answers,
            [Redemption::Exhausted, redeemed(0), redeemed(1)]
        );
        assert_eq!(
            answers[3..],
            [
                Redemption::OutOfScope,
                Redemption::Expired,
                Redemption::Expired,
                redeemed(4),
                Redemption::Unknown,
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_malformed_record_fails_alone() {
        let mut server = RedisServer::start_free();
        let store = RedisSessionStore::connect(&server.url()).await.unwrap();
        let mut redis = connection_to(&server.url()).await;
        let good = open(&store, SCOPE, 6).await;
        let now = unix_now();
        assert_eq!(store.redeem(&good, SCOPE, now).await.unwrap(), redeemed(5));
        // Another application's string under the prefix, and a record
        // missing its fields.
        let string = SessionToken::generate().hash();
        let _: () = redis.set_ex(default_key(&string), "x", 60).await.unwrap();
        let partial = SessionToken::generate().hash();
        let _: () = redis
            .hset(default_key(&partial), "scope", SCOPE)
            .await
            .unwrap();
        let _: () = redis.expire(default_key(&partial), 60).await.unwrap();
        let before = script_calls(server.port());

        // One redemption waits on a paused Redis while the others queue, so
        // that they go out together in the next script call.
        server.signal("-STOP");
        let first = {
            let store = store.clone();
            tokio::spawn(async move { store.redeem(&good, SCOPE, now).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let together = {
            let store = store.clone();
            tokio::spawn(async move {
                try_redeem_at_once(
                    &store,
                    vec![
                        (good, SCOPE, now),
                        (string, SCOPE, now),
                        (partial, SCOPE, now),
                        (good, SCOPE, now),
                    ],
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.signal("-CONT");

        assert_eq!(first.await.unwrap().unwrap(), redeemed(4));
        let answers = together.await.unwrap();
        assert_eq!(script_calls(server.port()), before + 2);
        assert!(matches!(answers[1], Err(SessionStoreError::Backend(_))));
        assert!(matches!(answers[2], Err(SessionStoreError::Backend(_))));
        let mut good_answers = vec![
            answers[0].as_ref().unwrap().to_owned(),
            answers[3].as_ref().unwrap().to_owned(),
        ];
        good_answers.sort_by_key(|a| format!("{a:?}"));
        assert_eq!(good_answers, [redeemed(2), redeemed(3)]);
        // Nothing else was touched.
        let value: String = redis.get(default_key(&string)).await.unwrap();
        assert_eq!(value, "x");
        let fields: Vec<String> = redis.hkeys(default_key(&partial)).await.unwrap();
        assert_eq!(fields, ["scope"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_caller_that_leaves_loses_no_call() {
        let (mut server, store, mut redis, token, now, before) = private_session().await;

        // Redis stops answering: the first redemption is sent and waits; the
        // second queues behind it. Both callers give up.
        server.signal("-STOP");
        let wait = Duration::from_millis(300);
        let sent = tokio::time::timeout(wait, store.redeem(&token, SCOPE, now)).await;
        assert!(sent.is_err());
        let queued = tokio::time::timeout(wait, store.redeem(&token, SCOPE, now)).await;
        assert!(queued.is_err());
        server.signal("-CONT");

        // The sent one was made, then given back; the queued one never made.
        script_calls_come_to(server.port(), before + 2).await;
        assert_eq!(remaining(&mut redis, &token).await, 9);
        assert_eq!(store.redeem(&token, SCOPE, now).await.unwrap(), redeemed(8));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_redemption_past_its_deadline_is_answered_then_undone() {
        let (mut server, store, mut redis, token, now, before) = private_session().await;

        // Redis stops answering. The first redemption is sent and waits,
        // with a 1 s deadline; behind it queue one with a 200 ms deadline
        // (earlier than the first's: the store's one timer is brought
        // forward) and one with none.
        server.signal("-STOP");
        let bounded = |deadline: Duration| {
            let store = store.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let answer = store
                    .redeem_within(&token, SCOPE, now, deadline)
                    .unwrap()
                    .await;
                (answer, started.elapsed())
            })
        };
        let sent = bounded(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let queued = bounded(Duration::from_millis(200));
        let unbounded = {
            let store = store.clone();
            tokio::spawn(async move { store.redeem(&token, SCOPE, now).await })
        };

        let (answer, waited) = queued.await.unwrap();
        assert!(
            matches!(answer, Err(SessionStoreError::Timeout)),
            "{answer:?}"
        );
        assert!(
            (Duration::from_millis(200)..Duration::from_millis(900)).contains(&waited),
            "the 200 ms deadline was kept at {waited:?}"
        );
        let (answer, waited) = sent.await.unwrap();
        assert!(
            matches!(answer, Err(SessionStoreError::Timeout)),
            "{answer:?}"
        );
        assert!(
            (Duration::from_secs(1)..Duration::from_millis(1700)).contains(&waited),
            "the 1 s deadline was kept at {waited:?}"
        );
        // A redemption with no deadline waits for as long as Redis takes.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!unbounded.is_finished());
        server.signal("-CONT");

        // The sent one was made, then given back; the queued one timed out
        // before it was sent and was never made; the unbounded one was
        // made in the next call.
        let left = match unbounded.await.unwrap().unwrap() {
            Redemption::Redeemed { remaining } => remaining,
            other => panic!("unexpected {other:?}"),
        };
        assert!(left == 7 || left == 8, "{left}");
        script_calls_come_to(server.port(), before + 3).await;
        assert_eq!(remaining(&mut redis, &token).await, 8);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_redemption_whose_answer_is_lost_is_given_back() {
        let (mut server, store, mut redis, token, now, before) = private_session().await;

        // Redis stops answering for longer than the store's 2 s response
        // timeout: the redemption's call is sent, and its answer lost.
        server.signal("-STOP");
        let started = Instant::now();
        let lost = store.redeem(&token, SCOPE, now).await;
        assert!(matches!(lost, Err(SessionStoreError::Timeout)), "{lost:?}");
        assert!(started.elapsed() >= Duration::from_secs(2));
        // The next redemption of the session waits for the lost call's
        // sessions to be reconciled.
        let next = {
            let store = store.clone();
            tokio::spawn(async move { store.redeem(&token, SCOPE, now).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!next.is_finished());
        server.signal("-CONT");

        // The lost call was made when Redis came back, then given back: the
        // session lost one call, to the redemption that was answered.
        assert_eq!(next.await.unwrap().unwrap(), redeemed(8));
        assert_eq!(remaining(&mut redis, &token).await, 8);
        assert!(script_calls(server.port()) >= before + 3);
    }

    #[test]
    fn a_store_outlives_the_runtime_that_started_its_batching() {
        let runtime = || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        };
        let first = runtime();
        let (store, token) = first.block_on(async {
            let store = store().await;
            let token = open(&store, SCOPE, 10).await;
            assert_eq!(
                store.redeem(&token, SCOPE, unix_now()).await.unwrap(),
                redeemed(9)
            );
            (store, token)
        });
        // The batching task, and the connection's own task, end with it.
        drop(first);
        runtime().block_on(async {
            // The connection manager reconnects after answering one error;
            // the store then redeems without its batching task.
            let mut answers = Vec::new();
            for _ in 0..3 {
                let answer = store.redeem(&token, SCOPE, unix_now()).await;
                let redeemed = answer.is_ok();
                answers.push(answer);
                if redeemed {
                    break;
                }
            }
            let Some(Ok(last)) = answers.pop() else {
                panic!("the store did not recover: {answers:?}");
            };
            assert_eq!(last, redeemed(8));
            assert!(answers.len() <= 1, "{answers:?}");
        });
    }
}
