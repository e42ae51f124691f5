//! The sign-in-with-x store in Redis: one server (`REDIS_URL`, default
//! `redis://127.0.0.1:6379`) and a Redis Cluster (`REDIS_CLUSTER_URLS`, see
//! `scripts/redis-cluster.sh`): paid accesses expire with their record, a
//! nonce is used once under real concurrency, and two engines sharing the
//! store and the nonce key act as one (a challenge from one, a payment on
//! one, the sign-in on the other, the replay refused on the first). Each
//! run uses its own random key prefix.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use http::{Request, Response, StatusCode};
use serde_json::Value;
use tokio::sync::Barrier;
use x402_core::{
    codec,
    siwx::{NonceKey, RedisSignInStore, SignInConfig, SignInStore, SignInWithX, SiwxPayload},
    testing::{self, StandIn},
    Engine, Offer, Route, VerifiedPayment,
};

fn prefix() -> String {
    format!("x402test:siwx:{:016x}:", rand::random::<u64>())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn single() -> RedisSignInStore {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    RedisSignInStore::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("Redis at {url} (set REDIS_URL): {e}"))
        .with_prefix(prefix())
}

async fn cluster() -> RedisSignInStore {
    let urls = x402_tests::redis_cluster::shared_urls();
    RedisSignInStore::connect_cluster(&urls)
        .await
        .unwrap()
        .with_prefix(prefix())
}

async fn suite(store: RedisSignInStore) {
    let t = now();
    assert!(!store.has_access("/r", "0xab", t).await.unwrap());
    store.record_access("/r", "0xab", t + 600).await.unwrap();
    assert!(store.has_access("/r", "0xab", t).await.unwrap());
    assert!(!store.has_access("/other", "0xab", t).await.unwrap());
    assert!(!store.has_access("/r", "0xcd", t).await.unwrap());
    // Routes with braces stay spread over the cluster, and distinct.
    store
        .record_access("/items/{id}", "0xab", t + 600)
        .await
        .unwrap();
    assert!(store.has_access("/items/{id}", "0xab", t).await.unwrap());
    assert!(!store.has_access("/items/{sku}", "0xab", t).await.unwrap());

    // A record forgets itself at its expiry. The expiry is two seconds
    // from a fresh reading of the clock: `t` may be most of a second old by
    // now, and a record expiring at `t + 1` could be gone before the first
    // check. Recorded before `short + 1`, it lives at least a second; the
    // sleep ends after `short + 2`.
    let short = now();
    store
        .record_access("/short", "0xab", short + 2)
        .await
        .unwrap();
    assert!(store.has_access("/short", "0xab", short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    assert!(!store.has_access("/short", "0xab", now()).await.unwrap());

    // A nonce is used once, by exactly one of many concurrent requests.
    let store = Arc::new(store);
    let barrier = Arc::new(Barrier::new(32));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store.use_nonce("n-shared", now() + 60).await.unwrap()
        }));
    }
    let mut won = 0;
    for task in tasks {
        won += usize::from(task.await.unwrap());
    }
    assert_eq!(won, 1, "one nonce, used {won} times");
    assert!(!store.use_nonce("n-shared", now() + 60).await.unwrap());
    assert!(store.use_nonce("n-other", now() + 60).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_on_one_server() {
    suite(single().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_on_a_cluster() {
    suite(cluster().await).await;
}

// --- Two instances sharing one store and one key. ---

const ROUTE: &str = "/siwx/demo";

fn engine(facilitator: Arc<StandIn>, store: RedisSignInStore, key: &NonceKey) -> Engine {
    Engine::builder_arc(facilitator)
        .public_origin("https://api.example.com")
        .sign_in_with_x(SignInConfig::new().store(store).nonce_key(key.clone()))
        .route(
            Route::get(ROUTE)
                .offer(Offer::exact("eip155:84532", "$0.001", testing::PAY_TO))
                .sign_in_with_x(SignInWithX::new(Duration::from_secs(3600))),
        )
        .build()
        .unwrap()
}

async fn declaration(engine: &Engine) -> Value {
    let challenge = testing::challenge(engine, Request::get(ROUTE).body(()).unwrap()).await;
    serde_json::to_value(&challenge.extensions["sign-in-with-x"]).unwrap()
}

fn proof(declaration: &Value, key: &PrivateKeySigner) -> String {
    let mut v = declaration["info"].clone();
    v["chainId"] = declaration["supportedChains"][0]["chainId"].clone();
    v["type"] = "eip191".into();
    v["address"] = key.address().to_checksum(None).into();
    v["signature"] = "0x".into();
    let mut p: SiwxPayload = serde_json::from_value(v).unwrap();
    // The EIP-4361 text, as the official helper writes it (no statement).
    let info = &declaration["info"];
    let message = format!(
        "{} wants you to sign in with your Ethereum account:\n{}\n\n\nURI: {}\nVersion: 1\nChain ID: 84532\nNonce: {}\nIssued At: {}\nExpiration Time: {}\nResources:\n- {}",
        info["domain"].as_str().unwrap(),
        p.address,
        info["uri"].as_str().unwrap(),
        info["nonce"].as_str().unwrap(),
        info["issuedAt"].as_str().unwrap(),
        info["expirationTime"].as_str().unwrap(),
        info["uri"].as_str().unwrap(),
    );
    let signature = key.sign_message_sync(message.as_bytes()).unwrap();
    p.signature = format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes()));
    codec::encode(&p).unwrap()
}

async fn send(engine: &Engine, name: &str, value: String) -> Response<bytes::Bytes> {
    let request = Request::get(ROUTE).header(name, value).body(()).unwrap();
    testing::serve(engine, request, |r: Request<()>| async move {
        let payment = r.extensions().get::<VerifiedPayment>().cloned().unwrap();
        Response::new(format!("signed_in={}", payment.sign_in.is_some()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_sharing_redis_act_as_one() {
    let store = single().await;
    let key = NonceKey::random();
    let facilitator = Arc::new(StandIn::new());
    let a = engine(facilitator.clone(), store.clone(), &key);
    let b = engine(facilitator.clone(), store, &key);
    // `testing::PAYER`'s key: the payer the stand-in settles for.
    let payer =
        PrivateKeySigner::from_bytes(&alloy_primitives::keccak256(b"x402_core::testing payer"))
            .unwrap();

    // Pay on A.
    let challenge = testing::challenge(&a, Request::get(ROUTE).body(()).unwrap()).await;
    let paid = send(&a, "payment-signature", testing::pay(&challenge)).await;
    assert_eq!(paid.status(), StatusCode::OK);

    // A challenge from A, signed in on B.
    let signed = proof(&declaration(&a).await, &payer);
    let ok = send(&b, "sign-in-with-x", signed.clone()).await;
    assert_eq!(ok.status(), StatusCode::OK, "{:?}", ok.headers());
    assert_eq!(ok.body(), "signed_in=true");

    // The same proof on A: used already.
    let replayed = send(&a, "sign-in-with-x", signed).await;
    assert_eq!(replayed.status(), StatusCode::PAYMENT_REQUIRED);
    let header = replayed.headers().get(codec::PAYMENT_REQUIRED).unwrap();
    let challenge: Value = codec::decode(header.as_bytes(), 1 << 20).unwrap();
    assert_eq!(challenge["error"], "invalid_siwx_nonce");
    facilitator.assert_calls(1, 1);
}
