//! A paid server for the multi-process replay test (`tests/tests/replay.rs`).
//!
//! Environment: `FACILITATOR_URL` (the stand-in), `REDIS_URL` (default
//! `redis://127.0.0.1:6379`), `CLAIM_PREFIX` (the Redis key prefix shared by
//! every instance of one test).
//!
//! Binds `127.0.0.1:0` and prints `LISTENING http://<addr>` on stdout.
//! `GET /paid` ($0.01 on `eip155:84532`, replay-guarded with Redis) counts its
//! runs; `GET /count` (unprotected) answers that count. The process exits
//! when its stdin closes, so a test that dies never leaves it behind.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{routing::get, Router};
use tokio::{io::AsyncReadExt, net::TcpListener};
use x402_axum::PaywallLayer;
use x402_core::{
    claim::{RedisClaimStore, ReplayGuard},
    facilitator::HttpFacilitator,
    Engine, Offer, Route,
};
use x402_tests::{PAY_TO, SECRET};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let facilitator = std::env::var("FACILITATOR_URL").expect("FACILITATOR_URL");
    let redis_url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = std::env::var("CLAIM_PREFIX").expect("CLAIM_PREFIX");

    let store = RedisClaimStore::connect(&redis_url)
        .await
        .expect("connect to Redis")
        .with_prefix(prefix);
    // A generous deadline: 64 concurrent `/verify` calls on two busy cores.
    let facilitator = HttpFacilitator::builder(facilitator)
        .timeout(Duration::from_secs(10))
        .client(reqwest::Client::builder().no_proxy().build().unwrap())
        .build()
        .unwrap();
    let engine = Engine::builder(facilitator)
        .route(Route::get("/paid").offer(Offer::exact("eip155:84532", "$0.01", PAY_TO)))
        .hooks(ReplayGuard::new(store))
        .build()
        .unwrap();

    let calls = Arc::new(AtomicUsize::new(0));
    let paid = {
        let calls = Arc::clone(&calls);
        move || {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                SECRET
            }
        }
    };
    let count = move || {
        let calls = Arc::clone(&calls);
        async move { calls.load(Ordering::SeqCst).to_string() }
    };
    let app = Router::new()
        .route("/paid", get(paid))
        .route("/count", get(count))
        .layer(PaywallLayer::new(engine));

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("LISTENING http://{}", listener.local_addr().unwrap());

    // Exit when the test closes our stdin (or dies).
    tokio::spawn(async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0_u8; 64];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => std::process::exit(0),
                Ok(_) => {}
            }
        }
    });

    axum::serve(listener, app).await.unwrap();
}
