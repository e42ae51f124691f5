//! The Redis outbox survives a crash: a worker process is SIGKILLed with
//! events pending and one delivery in flight; a second process on the same
//! key prefix delivers every event, none more often than the retry policy
//! allows.
//!
//! The worker is this test binary re-run with `X402_WEBHOOK_WORKER` set (the
//! ignored `worker_process` test is then the worker), so no helper binary is built.
//! Needs Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`) and fails
//! with a message when it is unreachable.
#![cfg(all(feature = "webhooks", feature = "redis"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::{
    collections::HashMap,
    io::Write as _,
    process::Stdio,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::HeaderMap, routing::post, Router};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use x402_core::webhook::{
    outbox::{Outbox, RedisOutbox},
    EventData, EventType, WebhookEvent, WebhookSecret, WebhookVerifier, Webhooks,
};

const EVENTS: usize = 5;
const MAX_ATTEMPTS: u32 = 3;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Not a test on its own: the worker process's body when re-run by
/// `killed_worker_events_are_all_delivered_after_restart` (which passes
/// `--ignored`). Run alone, it fails rather than pass having checked
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the worker process of killed_worker_events_are_all_delivered_after_restart, which runs it"]
async fn worker_process() {
    let config = std::env::var("X402_WEBHOOK_WORKER")
        .expect("X402_WEBHOOK_WORKER: worker_process is run by killed_worker_events_are_all_delivered_after_restart");
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    let outbox = RedisOutbox::connect(&redis_url())
        .await
        .unwrap()
        .with_prefix(config["prefix"].as_str().unwrap());
    let webhooks = Webhooks::builder(
        config["url"].as_str().unwrap(),
        [WebhookSecret::parse(config["secret"].as_str().unwrap()).unwrap()],
    )
    .outbox(outbox)
    .max_attempts(MAX_ATTEMPTS)
    .backoff(Duration::from_millis(50), Duration::from_millis(200))
    .timeout(Duration::from_secs(3))
    .lease(Duration::from_secs(4))
    .concurrency(1)
    .poll_interval(Duration::from_millis(50))
    .build()
    .unwrap();
    let mut out = std::io::stdout();
    for i in 0..config["enqueue"].as_u64().unwrap() {
        let data: EventData = serde_json::from_value(json!({
            "network": "eip155:84532",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "amount": (10_000 + i).to_string(),
            "payer": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "transaction": format!("0x{i:064x}"),
            "resource": "http://shop.example.test/report",
            "route": "/report",
            "scheme": "exact",
            "x402Version": 2,
        }))
        .unwrap();
        let id = webhooks
            .enqueue(&WebhookEvent::new(EventType::PaymentSettled, data))
            .await
            .unwrap();
        writeln!(out, "WORKER enqueued {id}").unwrap();
    }
    // Only start delivering once everything is in the outbox.
    let _worker = webhooks.start();
    writeln!(out, "WORKER ready").unwrap();
    out.flush().unwrap();
    std::future::pending::<()>().await;
}

struct Worker {
    child: tokio::process::Child,
    enqueued: Vec<String>,
}

async fn spawn_worker(config: &serde_json::Value) -> Worker {
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "worker_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("X402_WEBHOOK_WORKER", config.to_string())
        .env("REDIS_URL", redis_url())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut enqueued = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .expect("worker did not become ready")
            .unwrap()
            .expect("worker exited early");
        // libtest may print `test worker_process ... ` on the same line.
        let line = line.find("WORKER ").map_or("", |at| &line[at..]);
        if let Some(id) = line.strip_prefix("WORKER enqueued ") {
            enqueued.push(id.to_owned());
        } else if line == "WORKER ready" {
            break;
        }
    }
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Worker { child, enqueued }
}

#[derive(Default)]
struct Log {
    /// Every request that arrived, by id.
    arrivals: HashMap<String, usize>,
    /// Ids answered 200.
    acked: Vec<String>,
    /// Ids of requests that failed verification.
    bad: Vec<String>,
}

#[derive(Clone)]
struct Receiver {
    log: Arc<Mutex<Log>>,
    hang: Arc<AtomicBool>,
    verifier: WebhookVerifier,
}

async fn handle(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> http::StatusCode {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    {
        let mut log = r.log.lock().unwrap();
        *log.arrivals.entry(id.clone()).or_default() += 1;
        if r.verifier.verify(&headers, &body).is_err() {
            log.bad.push(id.clone());
        }
    }
    if r.hang.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    r.log.lock().unwrap().acked.push(id);
    http::StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_events_are_all_delivered_after_restart() {
    if std::env::var("X402_WEBHOOK_WORKER").is_ok() {
        return;
    }
    let prefix = format!("x402-test:webhooks:{:016x}:", rand::random::<u64>());
    let outbox = match RedisOutbox::connect(&redis_url()).await {
        Ok(outbox) => outbox.with_prefix(&prefix),
        Err(e) => panic!("Redis at {} is unreachable: {e}", redis_url()),
    };

    let secret = WebhookSecret::generate();
    let receiver = Receiver {
        log: Arc::default(),
        hang: Arc::new(AtomicBool::new(true)),
        verifier: WebhookVerifier::new([secret.clone()]),
    };
    let app = Router::new()
        .route("/hook", post(handle))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let config = |enqueue: usize| json!({"prefix": prefix, "url": url, "secret": secret.to_whsec(), "enqueue": enqueue});

    // First process: enqueue, start one delivery, and die while the
    // receiver holds it.
    let mut first = spawn_worker(&config(EVENTS)).await;
    assert_eq!(first.enqueued.len(), EVENTS);
    let deadline = Instant::now() + Duration::from_secs(10);
    while receiver.log.lock().unwrap().arrivals.is_empty() {
        assert!(Instant::now() < deadline, "no delivery started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.child.start_kill().unwrap(); // SIGKILL
    first.child.wait().await.unwrap();
    let in_flight: Vec<String> = receiver
        .log
        .lock()
        .unwrap()
        .arrivals
        .keys()
        .cloned()
        .collect();
    assert_eq!(in_flight.len(), 1, "one delivery was in flight");
    assert!(receiver.log.lock().unwrap().acked.is_empty());
    assert_eq!(
        outbox.backlog().await.unwrap(),
        EVENTS,
        "every event is still in Redis after the crash"
    );

    // Second process, same prefix, receiver healthy again.
    receiver.hang.store(false, Ordering::SeqCst);
    let started = Instant::now();
    let mut second = spawn_worker(&config(0)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let acked = receiver.log.lock().unwrap().acked.len();
        if acked >= EVENTS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {acked} of {EVENTS} delivered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recovery = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    second.child.start_kill().unwrap();
    second.child.wait().await.unwrap();
    server.abort();

    let log = std::mem::take(&mut *receiver.log.lock().unwrap());
    let mut acked = log.acked.clone();
    acked.sort();
    let mut expected = first.enqueued.clone();
    expected.sort();
    assert_eq!(
        acked, expected,
        "every event delivered, each acknowledged once"
    );
    assert!(log.bad.is_empty(), "all signatures valid: {:?}", log.bad);
    for (id, n) in &log.arrivals {
        assert!(*n as u32 <= MAX_ATTEMPTS, "{id} arrived {n} times");
        let expected = if in_flight.contains(id) { 2 } else { 1 };
        assert_eq!(*n, expected, "{id}");
    }
    assert_eq!(outbox.backlog().await.unwrap(), 0);
    assert!(outbox.dead_letters().await.unwrap().is_empty());
    eprintln!("all {EVENTS} events delivered {recovery:?} after the restart (lease 4 s)");
}
