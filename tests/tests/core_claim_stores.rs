//! Replay claims: one `ClaimStore` conformance suite run against every store,
//! the `ReplayGuard` driven at the hook level, and Redis outages (a killed and
//! a paused `redis-server`).
//!
//! Moved from x402-core's tests (Redis). The Redis tests need a server at
//! `REDIS_URL` (default `redis://127.0.0.1:6379`) and, for the outage tests,
//! `redis-server` on the `PATH`: `bash scripts/test-all.sh` provides both
//! (see `x402_tests::require`). Each run uses its own random key prefix.

// Helpers outside `#[test]` functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, Instant, SystemTime},
};

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::Barrier;
use x402_core::{
    claim::{claim_key, ClaimStore, ClaimStoreError, Claimed, MemoryClaimStore, ReplayGuard},
    hooks::{AfterVerify, CancelReason, HookError, PaymentContext, PaymentHooks},
    proto::{PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse},
};

const NETWORK: &str = "eip155:84532";
const ASSET: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const FROM: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const SIGNATURE: &str = "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c";
const ROUTE: &str = "/paid";

/// A refusal must come within the guard's deadline (250 ms) plus this.
const REFUSAL_BUDGET: Duration = Duration::from_secs(1);

/// One random id per test run, so runs sharing a Redis never collide.
fn run_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(rand::random)
}

fn unique_key(name: &str) -> String {
    format!(
        "x402:test:{:016x}:{name}:{:016x}",
        run_id(),
        rand::random::<u64>()
    )
}

fn in_secs(secs: u64) -> SystemTime {
    SystemTime::now() + Duration::from_secs(secs)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---------------------------------------------------------------------------
// The conformance suite
// ---------------------------------------------------------------------------

/// The behaviour every `ClaimStore` must have.
mod conformance {
    use super::*;

    pub(crate) async fn claim_then_already_claimed(store: impl ClaimStore) {
        let key = unique_key("claim_then_already_claimed");
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::AlreadyClaimed
        );
        // A longer expiry does not win the key either.
        assert_eq!(
            store.claim(&key, in_secs(600)).await.unwrap(),
            Claimed::AlreadyClaimed
        );
    }

    pub(crate) async fn release_then_claim_again(store: impl ClaimStore) {
        let key = unique_key("release_then_claim_again");
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        store.release(&key).await.unwrap();
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::AlreadyClaimed
        );
        // Releasing twice, or a key never claimed, is fine.
        store.release(&key).await.unwrap();
        store.release(&key).await.unwrap();
        store.release(&unique_key("never_claimed")).await.unwrap();
    }

    pub(crate) async fn expired_claim_can_be_claimed_again(store: impl ClaimStore) {
        let key = unique_key("expired_claim_can_be_claimed_again");
        let expires_at = SystemTime::now() + Duration::from_millis(1200);
        assert_eq!(
            store.claim(&key, expires_at).await.unwrap(),
            Claimed::Claimed
        );
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::AlreadyClaimed
        );
        // Stores may round the expiry up to the second.
        tokio::time::sleep(Duration::from_millis(2300)).await;
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::AlreadyClaimed
        );
    }

    pub(crate) async fn concurrent_claims_have_one_winner(store: impl ClaimStore) {
        const TASKS: usize = 64;
        let store = Arc::new(store);
        let key = Arc::new(unique_key("concurrent_claims_have_one_winner"));
        let barrier = Arc::new(Barrier::new(TASKS));
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim(&key, in_secs(60)).await.unwrap()
                })
            })
            .collect();
        let mut claimed = 0;
        for task in tasks {
            if task.await.unwrap() == Claimed::Claimed {
                claimed += 1;
            }
        }
        assert_eq!(claimed, 1, "exactly one of {TASKS} concurrent claims wins");
    }

    pub(crate) async fn distinct_keys_are_independent(store: impl ClaimStore) {
        let a = unique_key("distinct_a");
        let b = unique_key("distinct_b");
        assert_eq!(
            store.claim(&a, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        assert_eq!(
            store.claim(&b, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        store.release(&a).await.unwrap();
        assert_eq!(
            store.claim(&b, in_secs(60)).await.unwrap(),
            Claimed::AlreadyClaimed
        );
        assert_eq!(
            store.claim(&a, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
    }
}

/// Runs the conformance suite against the store `$store` (an async
/// expression), on a multi-threaded runtime.
macro_rules! claim_store_conformance {
    ($name:ident, $store:expr) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn claim_then_already_claimed() {
                conformance::claim_then_already_claimed($store.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn release_then_claim_again() {
                conformance::release_then_claim_again($store.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn expired_claim_can_be_claimed_again() {
                conformance::expired_claim_can_be_claimed_again($store.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_claims_have_one_winner() {
                conformance::concurrent_claims_have_one_winner($store.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn distinct_keys_are_independent() {
                conformance::distinct_keys_are_independent($store.await).await;
            }
        }
    };
}

claim_store_conformance!(memory_store, async { MemoryClaimStore::new() });

claim_store_conformance!(redis_store, redis::shared_store());

// ---------------------------------------------------------------------------
// The guard, at the hook level
// ---------------------------------------------------------------------------

/// A payment as the engine hands it to hooks.
struct Payment {
    payload: PaymentPayload,
    requirements: PaymentRequirements,
    network: &'static str,
}

impl Payment {
    /// A fresh EIP-3009 payment (random nonce), v2, valid for 5 minutes.
    fn eip3009() -> Self {
        Self::eip3009_valid_until(unix_now() + 300)
    }

    fn eip3009_valid_until(valid_before: u64) -> Self {
        let nonce = format!(
            "0x{}",
            alloy_primitives::hex::encode(rand::random::<[u8; 32]>())
        );
        Self::v2(
            NETWORK,
            json!({
                "signature": SIGNATURE,
                "authorization": {
                    "from": FROM,
                    "to": PAY_TO,
                    "value": "10000",
                    "validAfter": "0",
                    "validBefore": valid_before.to_string(),
                    "nonce": nonce,
                }
            }),
        )
    }

    fn v2(network: &'static str, payload: Value) -> Self {
        let accepted = json!({
            "scheme": "exact",
            "network": network,
            "amount": "10000",
            "asset": ASSET,
            "payTo": PAY_TO,
            "maxTimeoutSeconds": 60,
            "extra": {"name": "USDC", "version": "2"}
        });
        let mut payment = json!({"x402Version": 2, "accepted": accepted});
        payment["payload"] = payload;
        Self {
            payload: PaymentPayload::from_value(payment).unwrap(),
            requirements: PaymentRequirements::V2(serde_json::from_value(accepted).unwrap()),
            network,
        }
    }

    /// The same authorization, sent as a version 1 payment.
    fn as_v1(&self) -> Self {
        Self {
            payload: PaymentPayload::from_value(json!({
                "x402Version": 1,
                "scheme": "exact",
                "network": "base-sepolia",
                "payload": self.payload.payload(),
            }))
            .unwrap(),
            requirements: PaymentRequirements::V1(
                serde_json::from_value(json!({
                    "scheme": "exact",
                    "network": "base-sepolia",
                    "maxAmountRequired": "10000",
                    "resource": "https://example.com/paid",
                    "payTo": PAY_TO,
                    "maxTimeoutSeconds": 60,
                    "asset": ASSET,
                }))
                .unwrap(),
            ),
            network: self.network,
        }
    }

    fn ctx(&self) -> PaymentContext<'_> {
        self.ctx_on(ROUTE)
    }

    fn ctx_on<'a>(&'a self, route: &'a str) -> PaymentContext<'a> {
        PaymentContext::new(route, &self.payload, &self.requirements, self.network)
    }

    fn key(&self) -> String {
        claim_key(&self.payload, &self.requirements, self.network)
            .unwrap()
            .key
    }
}

fn verdict() -> VerifyResponse {
    VerifyResponse::valid(FROM)
}

fn abort(reason: &str) -> AfterVerify {
    AfterVerify::Abort {
        reason: reason.to_owned(),
    }
}

/// Asserts a `503 claim_unavailable` with a 1 s `Retry-After` and a cause.
fn assert_unavailable(outcome: Result<AfterVerify, HookError>) {
    match outcome {
        Err(HookError::Unavailable {
            reason,
            retry_after,
            source,
        }) => {
            assert_eq!(reason, "claim_unavailable");
            assert_eq!(retry_after, Duration::from_secs(1));
            assert!(source.is_some(), "the cause is kept for the logs");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// A store that answers after `delay`, counting the claims that landed and
/// the releases.
#[derive(Debug)]
struct CountingStore<S> {
    inner: S,
    delay: Duration,
    landed: AtomicUsize,
    released: AtomicUsize,
}

impl<S> CountingStore<S> {
    fn new(inner: S, delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            inner,
            delay,
            landed: AtomicUsize::new(0),
            released: AtomicUsize::new(0),
        })
    }

    fn landed(&self) -> usize {
        self.landed.load(Ordering::SeqCst)
    }

    fn released(&self) -> usize {
        self.released.load(Ordering::SeqCst)
    }
}

/// A memory store that answers after `delay`.
fn slow_store(delay: Duration) -> Arc<CountingStore<MemoryClaimStore>> {
    CountingStore::new(MemoryClaimStore::new(), delay)
}

#[async_trait]
impl<S: ClaimStore> ClaimStore for CountingStore<S> {
    async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
        tokio::time::sleep(self.delay).await;
        let claimed = self.inner.claim(key, expires_at).await?;
        if claimed == Claimed::Claimed {
            self.landed.fetch_add(1, Ordering::SeqCst);
        }
        Ok(claimed)
    }

    async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
        let released = self.inner.release(key).await;
        self.released.fetch_add(1, Ordering::SeqCst);
        released
    }
}

/// A store whose backend is down.
#[derive(Debug)]
struct FailingStore;

#[async_trait]
impl ClaimStore for FailingStore {
    async fn claim(&self, _key: &str, _expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
        Err(ClaimStoreError::backend("connection refused"))
    }

    async fn release(&self, _key: &str) -> Result<(), ClaimStoreError> {
        Err(ClaimStoreError::backend("connection refused"))
    }
}

#[tokio::test]
async fn guard_refuses_a_second_claim_as_replayed() {
    let guard = ReplayGuard::memory();
    let payment = Payment::eip3009();
    let first = guard
        .after_verify(&payment.ctx(), &verdict())
        .await
        .unwrap();
    assert_eq!(first, AfterVerify::Continue);
    let second = guard
        .after_verify(&payment.ctx(), &verdict())
        .await
        .unwrap();
    assert_eq!(second, abort("payment_replayed"));
    // Another authorization is not affected.
    let other = Payment::eip3009();
    assert_eq!(
        guard.after_verify(&other.ctx(), &verdict()).await.unwrap(),
        AfterVerify::Continue
    );
}

#[tokio::test]
async fn guard_refuses_a_v1_copy_of_a_v2_payment() {
    let guard = ReplayGuard::memory();
    let payment = Payment::eip3009();
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );
    let v1 = payment.as_v1();
    assert_eq!(
        guard.after_verify(&v1.ctx(), &verdict()).await.unwrap(),
        abort("payment_replayed")
    );
}

#[tokio::test]
async fn guard_shares_claims_through_the_store() {
    let store = MemoryClaimStore::new();
    let (a, b) = (
        ReplayGuard::new(store.clone()),
        ReplayGuard::new(store.clone()),
    );
    let payment = Payment::eip3009();
    assert_eq!(
        a.after_verify(&payment.ctx(), &verdict()).await.unwrap(),
        AfterVerify::Continue
    );
    assert_eq!(
        b.after_verify(&payment.ctx(), &verdict()).await.unwrap(),
        abort("payment_replayed")
    );
    assert_eq!(store.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_refuses_within_the_deadline_when_the_store_hangs_and_releases_the_late_claim() {
    let store = slow_store(Duration::from_secs(2));
    let guard = ReplayGuard::new(store.clone());
    let payment = Payment::eip3009();

    let started = Instant::now();
    let outcome = guard.after_verify(&payment.ctx(), &verdict()).await;
    let elapsed = started.elapsed();
    assert_unavailable(outcome);
    assert!(elapsed < REFUSAL_BUDGET, "refused after {elapsed:?}");
    assert!(
        elapsed >= Duration::from_millis(250),
        "refused after {elapsed:?}, before the deadline"
    );
    eprintln!("hanging store: refused after {elapsed:?}");

    // The claim lands after 2 s; its request was refused, so it is released.
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.released() == 0 {
        assert!(
            Instant::now() < deadline,
            "the late claim was never released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.landed(), 1, "the late claim did land");
    assert_eq!(
        store
            .inner
            .claim(&payment.key(), in_secs(60))
            .await
            .unwrap(),
        Claimed::Claimed
    );
}

#[tokio::test]
async fn guard_answers_unavailable_when_the_store_errors() {
    let guard = ReplayGuard::new(FailingStore);
    let payment = Payment::eip3009();
    let started = Instant::now();
    assert_unavailable(guard.after_verify(&payment.ctx(), &verdict()).await);
    assert!(started.elapsed() < REFUSAL_BUDGET);
    // A failing release does not fail the hook.
    guard
        .on_payment_canceled(
            &payment.ctx(),
            CancelReason::HandlerFailed(http::StatusCode::BAD_GATEWAY),
        )
        .await;
}

#[tokio::test]
async fn guard_releases_the_claim_when_the_payment_is_canceled() {
    let guard = ReplayGuard::memory();
    for reason in [
        CancelReason::HandlerFailed(http::StatusCode::INTERNAL_SERVER_ERROR),
        CancelReason::HandlerAborted,
        CancelReason::Refused,
    ] {
        let payment = Payment::eip3009();
        assert_eq!(
            guard
                .after_verify(&payment.ctx(), &verdict())
                .await
                .unwrap(),
            AfterVerify::Continue
        );
        guard.on_payment_canceled(&payment.ctx(), reason).await;
        // The buyer retries with the same authorization.
        assert_eq!(
            guard
                .after_verify(&payment.ctx(), &verdict())
                .await
                .unwrap(),
            AfterVerify::Continue,
            "{reason:?}"
        );
        assert_eq!(
            guard
                .after_verify(&payment.ctx(), &verdict())
                .await
                .unwrap(),
            abort("payment_replayed")
        );
    }
}

#[tokio::test]
async fn guard_keeps_the_claim_after_a_settlement_attempt() {
    let guard = ReplayGuard::memory();
    let payment = Payment::eip3009();
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );
    guard.before_settle(&payment.ctx()).await.unwrap();
    guard
        .after_settle(
            &payment.ctx(),
            &SettleResponse::failure(NETWORK, "insufficient_funds"),
        )
        .await;
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        abort("payment_replayed")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangerous_fail_open_lets_the_payment_through() {
    let guard = ReplayGuard::new(FailingStore).dangerous_fail_open(true);
    let payment = Payment::eip3009();
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );

    // A slow store: through within the deadline, and the late claim is kept
    // (the payment went ahead).
    let store = slow_store(Duration::from_millis(600));
    let guard = ReplayGuard::new(store.clone()).dangerous_fail_open(true);
    let started = Instant::now();
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );
    assert!(started.elapsed() < REFUSAL_BUDGET);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(store.landed(), 1);
    assert_eq!(store.released(), 0);
    assert_eq!(
        store
            .inner
            .claim(&payment.key(), in_secs(60))
            .await
            .unwrap(),
        Claimed::AlreadyClaimed
    );
}

#[tokio::test]
async fn guard_claims_other_networks_by_digest() {
    // A network this crate reads no replay primitive of: claimed by the
    // digest of its payload (it was refused with claim_unsupported before
    // every network was guarded); an exact copy is a replay.
    let payment = Payment::v2("stellar:testnet", json!({"transaction": "AAAA"}));
    let guard = ReplayGuard::memory();
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        abort("payment_replayed")
    );
    // A failed handler releases it like any claim.
    guard
        .on_payment_canceled(&payment.ctx(), CancelReason::HandlerAborted)
        .await;
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );
}

#[tokio::test]
async fn guard_refuses_unclaimable_payments_unless_allowed() {
    // Unclaimable, deliberately: the digest fallback is off.
    let payment = Payment::v2("stellar:testnet", json!({"anything": true}));
    let guard = ReplayGuard::memory().digest_fallback(false);
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        abort("claim_unsupported")
    );

    let everywhere = ReplayGuard::memory()
        .digest_fallback(false)
        .allow_unclaimable(true);
    assert_eq!(
        everywhere
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );
    // Nothing was claimed, so canceling releases nothing (and does not fail).
    everywhere
        .on_payment_canceled(&payment.ctx(), CancelReason::HandlerAborted)
        .await;

    let one_route = ReplayGuard::memory()
        .digest_fallback(false)
        .allow_unclaimable_route(ROUTE);
    assert_eq!(
        one_route
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        AfterVerify::Continue
    );
    assert_eq!(
        one_route
            .after_verify(&payment.ctx_on("/other"), &verdict())
            .await
            .unwrap(),
        abort("claim_unsupported")
    );

    // Opting out does not let malformed payloads through.
    let mut bad = Payment::eip3009().payload.payload().clone();
    bad["authorization"]["nonce"] = json!("nope");
    let malformed = Payment::v2(NETWORK, bad);
    assert_eq!(
        everywhere
            .after_verify(&malformed.ctx(), &verdict())
            .await
            .unwrap(),
        abort("invalid_payload")
    );
}

#[tokio::test]
async fn guard_refuses_authorizations_valid_for_more_than_366_days() {
    let guard = ReplayGuard::memory();
    let payment = Payment::eip3009_valid_until(unix_now() + 400 * 24 * 60 * 60);
    assert_eq!(
        guard
            .after_verify(&payment.ctx(), &verdict())
            .await
            .unwrap(),
        abort("authorization_lifetime_too_long")
    );
}

// ---------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------

mod redis {
    use x402_core::claim::RedisClaimStore;
    use x402_tests::{core_support::redis_server::RedisServer, require};

    use super::*;

    /// A store on the shared test Redis, with this run's prefix.
    pub(crate) async fn shared_store() -> RedisClaimStore {
        let url = require::redis_url().await;
        RedisClaimStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("these tests need Redis at {url} (set REDIS_URL): {e}"))
            .with_prefix(format!("x402-test-{:016x}:", run_id()))
    }

    #[tokio::test]
    async fn prefix_is_applied() {
        let store = shared_store().await;
        let key = unique_key("prefix");
        assert_eq!(
            store.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        let unprefixed = RedisClaimStore::connect(&require::redis_url().await)
            .await
            .unwrap();
        let full = format!("{}{key}", store.prefix());
        assert_eq!(
            unprefixed.claim(&full, in_secs(60)).await.unwrap(),
            Claimed::AlreadyClaimed
        );
        assert_eq!(
            unprefixed.claim(&key, in_secs(60)).await.unwrap(),
            Claimed::Claimed
        );
        unprefixed.release(&key).await.unwrap();
        store.release(&key).await.unwrap();
    }

    /// Times one refusal, asserting it is `503 claim_unavailable`.
    async fn refused_within_budget(guard: &ReplayGuard, payment: &Payment) -> Duration {
        let started = Instant::now();
        let outcome = guard.after_verify(&payment.ctx(), &verdict()).await;
        let elapsed = started.elapsed();
        assert_unavailable(outcome);
        assert!(elapsed < REFUSAL_BUDGET, "refused after {elapsed:?}");
        elapsed
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_down_is_refused_fast_and_the_store_recovers() {
        let server = RedisServer::start_free();
        let port = server.port();
        let store = RedisClaimStore::connect(&server.url()).await.unwrap();
        let guard = ReplayGuard::new(store);
        let payment = Payment::eip3009();
        assert_eq!(
            guard
                .after_verify(&payment.ctx(), &verdict())
                .await
                .unwrap(),
            AfterVerify::Continue
        );

        server.kill();
        let mut slowest = Duration::ZERO;
        for _ in 0..5 {
            slowest = slowest.max(refused_within_budget(&guard, &Payment::eip3009()).await);
        }
        eprintln!("redis killed: slowest of 5 refusals took {slowest:?}");

        // Back on the same port: the same store reconnects by itself.
        let _server = RedisServer::start(port);
        let restarted = Instant::now();
        let recovered = loop {
            let fresh = Payment::eip3009();
            match guard.after_verify(&fresh.ctx(), &verdict()).await {
                Ok(AfterVerify::Continue) => break fresh,
                Err(HookError::Unavailable { .. }) => {}
                other => panic!("unexpected {other:?}"),
            }
            assert!(
                restarted.elapsed() < Duration::from_secs(15),
                "the store did not reconnect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!(
            "redis restarted: claims work again after {:?}",
            restarted.elapsed()
        );
        assert_eq!(
            guard
                .after_verify(&recovered.ctx(), &verdict())
                .await
                .unwrap(),
            abort("payment_replayed")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn paused_redis_is_refused_fast_and_the_late_claim_released() {
        let mut server = RedisServer::start_free();
        let redis = RedisClaimStore::connect(&server.url()).await.unwrap();
        let store = CountingStore::new(redis, Duration::ZERO);
        let guard = ReplayGuard::new(store.clone());
        let warm_up = Payment::eip3009();
        assert_eq!(
            guard
                .after_verify(&warm_up.ctx(), &verdict())
                .await
                .unwrap(),
            AfterVerify::Continue
        );

        server.signal("-STOP");
        let payment = Payment::eip3009();
        let elapsed = refused_within_budget(&guard, &payment).await;
        eprintln!("redis paused: refused after {elapsed:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.signal("-CONT");

        // Redis now runs the queued SET (which lands) and the guard releases
        // it: the buyer's honest retry of the same payment goes through.
        let resumed = Instant::now();
        loop {
            match guard.after_verify(&payment.ctx(), &verdict()).await {
                Ok(AfterVerify::Continue) => break,
                // Until the late claim is released, the retry looks like a
                // replay (or Redis is still catching up).
                Ok(refused) => assert_eq!(refused, abort("payment_replayed")),
                Err(HookError::Unavailable { .. }) => {}
                Err(other) => panic!("unexpected {other:?}"),
            }
            assert!(
                resumed.elapsed() < Duration::from_secs(5),
                "the late claim was never released"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!(
            "redis resumed: honest retry accepted after {:?}",
            resumed.elapsed()
        );
        // The warm-up, the late claim and the retry landed; the late one was
        // released.
        assert_eq!(store.landed(), 3);
        assert_eq!(store.released(), 1);
        assert_eq!(
            guard
                .after_verify(&payment.ctx(), &verdict())
                .await
                .unwrap(),
            abort("payment_replayed")
        );
    }
}
