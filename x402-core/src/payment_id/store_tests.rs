//! One suite for every payment id store: memory and Redis.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use super::*;

fn digest(n: u8) -> PayloadDigest {
    PayloadDigest([n; 32])
}

fn response(body: &'static [u8]) -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.insert("payment-response", HeaderValue::from_static("eyJzIjoxfQ=="));
    StoredResponse {
        status: StatusCode::OK,
        headers,
        body: Some(Bytes::from_static(body)),
    }
}

async fn store_suite(store: &dyn PaymentIdStore, prefix: &str) {
    let key = format!("{prefix}k1");
    let soon = SystemTime::now() + Duration::from_secs(60);
    let (mine, theirs) = (digest(1), digest(2));
    assert_eq!(
        store.reserve(&key, &mine, soon).await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        store.reserve(&key, &mine, soon).await.unwrap(),
        Reservation::InFlight
    );
    assert_eq!(
        store.reserve(&key, &theirs, soon).await.unwrap(),
        Reservation::Conflict
    );
    // Another payload releases nothing.
    store.release(&key, &theirs).await.unwrap();
    assert_eq!(
        store.reserve(&key, &mine, soon).await.unwrap(),
        Reservation::InFlight
    );
    // Released: free again.
    store.release(&key, &mine).await.unwrap();
    assert_eq!(
        store.reserve(&key, &theirs, soon).await.unwrap(),
        Reservation::Reserved
    );
    store.release(&key, &theirs).await.unwrap();

    // Reserved, then settled: the response, for the same payload only.
    assert_eq!(
        store.reserve(&key, &mine, soon).await.unwrap(),
        Reservation::Reserved
    );
    store
        .complete(&key, &mine, &response(b"one"), soon)
        .await
        .unwrap();
    assert_eq!(
        store.reserve(&key, &mine, soon).await.unwrap(),
        Reservation::Stored(response(b"one"))
    );
    assert_eq!(
        store.reserve(&key, &theirs, soon).await.unwrap(),
        Reservation::Conflict
    );
    // A settled entry is never released, nor overwritten by another payload.
    store.release(&key, &mine).await.unwrap();
    store
        .complete(&key, &theirs, &response(b"two"), soon)
        .await
        .unwrap();
    assert_eq!(
        store.reserve(&key, &mine, soon).await.unwrap(),
        Reservation::Stored(response(b"one"))
    );

    // A lapsed reservation: completing still stores the response.
    let other = format!("{prefix}k2");
    store
        .complete(&other, &mine, &response(b"late"), soon)
        .await
        .unwrap();
    assert_eq!(
        store.reserve(&other, &mine, soon).await.unwrap(),
        Reservation::Stored(response(b"late"))
    );
}

/// Concurrent reservations of one key: exactly one wins.
async fn store_race(store: Arc<dyn PaymentIdStore>, prefix: &str) {
    let key = format!("{prefix}race");
    let soon = SystemTime::now() + Duration::from_secs(60);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (store, key) = (store.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            store.reserve(&key, &digest(7), soon).await.unwrap()
        }));
    }
    let mut reserved = 0;
    for task in tasks {
        match task.await.unwrap() {
            Reservation::Reserved => reserved += 1,
            Reservation::InFlight => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(reserved, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store() {
    let store = MemoryPaymentIdStore::new();
    store_suite(&store, "").await;
    store_race(Arc::new(store), "").await;
}

#[cfg(feature = "redis")]
pub(super) fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

#[cfg(feature = "redis")]
pub(super) fn unique_prefix() -> String {
    format!("x402-test-pid-{:016x}:", rand::random::<u64>())
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store() {
    let store = RedisPaymentIdStore::connect(&redis_url())
        .await
        .expect("Redis at REDIS_URL (default 127.0.0.1:6379) is needed")
        .with_prefix(unique_prefix());
    store_suite(&store, "").await;
    store_race(Arc::new(store), "").await;
}
