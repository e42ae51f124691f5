//! `RedisPaymentIdStore` on a Redis Cluster (over the crate's
//! `RedisConnection`): reserve, complete and release on ids spread over
//! every shard, concurrent reservations of one id, and an engine pair
//! sharing the cluster that replays each other's responses.
//!
//! Needs the cluster `bash scripts/test-all.sh` starts (`REDIS_CLUSTER_URLS`,
//! see `scripts/redis-cluster.sh`), as `redis_cluster_stores.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::json;
use x402_core::{
    payment_id::{
        PayloadDigest, PaymentIdStore, PaymentIdentifiers, RedisPaymentIdStore, Reservation,
        StoredResponse,
    },
    testing::{self, StandIn},
    Engine, Offer, Route,
};
use x402_tests::redis_cluster::{self, keyslot, port_of};

async fn store(prefix: &str) -> RedisPaymentIdStore {
    RedisPaymentIdStore::connect_cluster(redis_cluster::shared_urls())
        .await
        .expect("the Redis Cluster of REDIS_CLUSTER_URLS")
        .with_prefix(prefix.to_owned())
}

fn prefix() -> String {
    format!("x402-test-pid-{:016x}:", rand::random::<u64>())
}

fn stored(body: &'static [u8]) -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.insert("payment-response", HeaderValue::from_static("eyJzIjoxfQ=="));
    StoredResponse {
        status: StatusCode::OK,
        headers,
        body: Some(Bytes::from_static(body)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ids_on_every_shard_reserve_complete_and_release() {
    let prefix = prefix();
    let store = store(&prefix).await;
    let port = port_of(&redis_cluster::shared_urls()[0]);
    let soon = SystemTime::now() + Duration::from_secs(60);
    let (mine, theirs) = (PayloadDigest([1; 32]), PayloadDigest([2; 32]));
    let mut slots = HashSet::new();
    for i in 0..24 {
        let key = format!("x402:pid:GET:/paid:pay_{i:028}");
        // A six-node test cluster: three primaries, slots split evenly.
        let slot = keyslot(port, &format!("{prefix}{key}"));
        slots.insert(match slot {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        });
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
        if i % 2 == 0 {
            store.release(&key, &mine).await.unwrap();
            assert_eq!(
                store.reserve(&key, &theirs, soon).await.unwrap(),
                Reservation::Reserved
            );
        } else {
            store
                .complete(&key, &mine, &stored(b"{}"), soon)
                .await
                .unwrap();
            store.release(&key, &mine).await.unwrap();
            assert_eq!(
                store.reserve(&key, &mine, soon).await.unwrap(),
                Reservation::Stored(stored(b"{}"))
            );
        }
    }
    assert_eq!(slots.len(), 3, "the ids should land on every shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reservations_of_one_id_have_one_winner() {
    let store = Arc::new(store(&prefix()).await);
    let soon = SystemTime::now() + Duration::from_secs(60);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .reserve("x402:pid:GET:/paid:race", &PayloadDigest([7; 32]), soon)
                    .await
                    .unwrap()
            })
        })
        .collect();
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

fn engine(facilitator: &Arc<StandIn>, store: RedisPaymentIdStore) -> Engine {
    Engine::builder_arc(facilitator.clone())
        .route(
            Route::get("/paid")
                .offer(Offer::exact("eip155:84532", "$0.01", testing::PAY_TO))
                .payment_identifier(true),
        )
        .payment_identifiers(PaymentIdentifiers::new(store))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn engines_sharing_the_cluster_replay_each_others_responses() {
    let prefix = prefix();
    let facilitator = Arc::new(StandIn::new());
    let first = engine(&facilitator, store(&prefix).await);
    let second = engine(&facilitator, store(&prefix).await);
    let challenge = testing::challenge(&first, Request::get("/paid").body(()).unwrap()).await;
    let id = format!("pay_{:032x}", rand::random::<u128>());
    let header = testing::with_payment_id(&testing::pay(&challenge), &id, true);
    let runs = Arc::new(AtomicUsize::new(0));
    let mut answers = Vec::new();
    for engine in [&first, &second, &second] {
        let request = Request::get("/paid")
            .header("payment-signature", &header)
            .body(String::new())
            .unwrap();
        let runs = runs.clone();
        answers.push(
            testing::serve(engine, request, move |_| async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                Response::new(json!({ "run": run }).to_string())
            })
            .await,
        );
    }
    for answer in &answers {
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.body(), answers[0].body());
        assert_eq!(answer.headers(), answers[0].headers());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    facilitator.assert_calls(1, 1);
}
