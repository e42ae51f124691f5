//! The replay race (DESIGN §4) through every adapter: concurrent copies of
//! one signed payment, released together, run the handler once and settle
//! once; every other copy gets the `payment_replayed` challenge.

use std::{process::Command, sync::Arc, time::Duration};

use tokio::sync::Barrier;
use x402_core::claim::{RedisClaimStore, ReplayGuard};

use crate::{
    client::{send, standard_builder},
    payment,
    suite::assert_challenge,
    Adapter, Fixture, Reply,
};

/// How many copies of one payment race.
pub const COPIES: usize = 64;

/// The facilitator deadline of the race: 64 concurrent `/verify` calls on
/// two busy cores can miss the harness's 600 ms, which would turn a copy
/// into `502 facilitator_unavailable` and prove nothing.
const PATIENT: Duration = Duration::from_secs(10);

/// Sends `copies` requests for `/paid` at once, each from its own task, all
/// released together by a barrier: copy `i` goes to `bases[i % bases.len()]`
/// with the same `payment`.
pub async fn race(
    client: &reqwest::Client,
    bases: &[String],
    payment: &str,
    copies: usize,
) -> Vec<Reply> {
    let barrier = Arc::new(Barrier::new(copies));
    let tasks: Vec<_> = (0..copies)
        .map(|i| {
            let request = client
                .get(format!("{}/paid", bases[i % bases.len()]))
                .header("PAYMENT-SIGNATURE", payment);
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                send(request).await
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(copies);
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    replies
}

/// One copy served with a receipt, every other refused as a replay.
#[track_caller]
pub fn assert_one_winner(replies: &[Reply]) {
    let outcomes: Vec<String> = replies
        .iter()
        .map(|r| match r.decoded("payment-required") {
            Some(c) => format!("{} {}", r.status.as_u16(), c["error"]),
            None => format!("{} {}", r.status.as_u16(), r.text()),
        })
        .collect();
    let (served, refused): (Vec<&Reply>, Vec<&Reply>) =
        replies.iter().partition(|r| r.status == 200);
    assert_eq!(served.len(), 1, "exactly one copy served: {outcomes:?}");
    assert!(served[0].leaks_secret());
    let receipt = served[0].decoded("payment-response").expect("receipt");
    assert_eq!(receipt["success"], true);
    for reply in refused {
        assert_challenge(reply, "payment_replayed");
        assert!(reply.header("payment-response").is_none());
    }
}

/// The race against `guard`, then a fresh payment (served) and a late copy
/// of the raced one (refused).
async fn race_with<A: Adapter>(guard: ReplayGuard) -> Fixture {
    let f = Fixture::with_engine::<A>(|standin| {
        standard_builder(standin.facilitator_with_timeout(PATIENT)).replay_guard(guard)
    })
    .await;
    let row = f.first_row("/paid").await;
    let header = payment::v2_header(&row);

    let replies = race(&f.client, std::slice::from_ref(&f.base), &header, COPIES).await;
    assert_one_winner(&replies);
    f.handler.assert_calls(1);
    // Every copy was verified (the claim follows a valid verdict); one settled.
    f.standin.assert_calls(COPIES, 1);

    // A fresh authorization is served; the raced one stays claimed.
    let fresh = f.pay_row("/paid", &row).await;
    fresh.assert_status(200);
    let again = f
        .get("/paid", &[("PAYMENT-SIGNATURE", header.as_str())])
        .await;
    assert_challenge(&again, "payment_replayed");
    f.handler.assert_calls(2);
    f.standin.assert_calls(COPIES + 2, 2);
    f
}

/// Scenario 20. The race with the in-memory claim store.
pub async fn s20_replay_race_memory<A: Adapter>() {
    race_with::<A>(ReplayGuard::memory()).await;
}

/// Deletes the keys under a prefix of the shared Redis when dropped (even
/// when the scenario fails).
struct CleanPrefix {
    url: String,
    prefix: String,
}

impl CleanPrefix {
    fn keys(&self) -> Vec<String> {
        let out = Command::new("redis-cli")
            .args(["-u", &self.url, "--scan", "--pattern"])
            .arg(format!("{}*", self.prefix))
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "redis-cli --scan");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for CleanPrefix {
    fn drop(&mut self) {
        let Ok(out) = Command::new("redis-cli")
            .args(["-u", &self.url, "--scan", "--pattern"])
            .arg(format!("{}*", self.prefix))
            .output()
        else {
            return;
        };
        let keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        if !keys.is_empty() {
            let _ = Command::new("redis-cli")
                .args(["-u", &self.url, "DEL"])
                .args(&keys)
                .output();
        }
    }
}

/// Scenario 21. The race with claims in Redis (`REDIS_URL`, default
/// `redis://127.0.0.1:6379`), under a key prefix of its own: the claims
/// land there, one per authorization.
pub async fn s21_replay_race_redis<A: Adapter>() {
    let url = crate::require::redis_url().await;
    let clean = CleanPrefix {
        prefix: format!(
            "x402test:conformance:{}:{}:",
            A::NAME,
            &payment::random_hex(8)[2..]
        ),
        url,
    };
    let store = RedisClaimStore::connect(&clean.url)
        .await
        .unwrap_or_else(|e| panic!("Redis at {}: {e}", clean.url))
        .with_prefix(clean.prefix.clone());
    race_with::<A>(ReplayGuard::new(store)).await;
    let keys = clean.keys();
    assert_eq!(keys.len(), 2, "one claim per authorization: {keys:?}");
    let claims = format!("{}x402:eip155:84532:", clean.prefix);
    assert!(keys.iter().all(|k| k.starts_with(&claims)), "{keys:?}");
}
