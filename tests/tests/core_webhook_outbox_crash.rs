//! The Redis outbox survives a crash: a worker process is SIGKILLed with
//! events pending and one delivery in flight; a second process on the same
//! key prefix delivers every event, none more often than the retry policy
//! allows.
//!
//! The worker is this test binary re-run with `X402_WEBHOOK_WORKER` set (the
//! ignored `worker_process` test is then the worker), so no helper binary is built.
//! Needs Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`) and fails
//! in one line naming `bash scripts/test-all.sh` when it is unreachable.
//!
//! Moved from x402-core's tests (Redis, axum).
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
        Arc,
    },
    time::{Duration, Instant},
};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use x402_core::webhook::{
    outbox::{Outbox, RedisOutbox},
    EventData, EventType, WebhookEvent, WebhookSecret, WebhookVerifier, Webhooks,
};
use x402_tests::{
    core_support::receiver::{Receiver, Reply},
    require,
};

const EVENTS: usize = 5;
const MAX_ATTEMPTS: u32 = 3;

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
    let outbox = RedisOutbox::connect(&require::redis_url().await)
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

async fn spawn_worker(config: &serde_json::Value, redis_url: &str) -> Worker {
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "worker_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("X402_WEBHOOK_WORKER", config.to_string())
        .env("REDIS_URL", redis_url)
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

/// The `webhook-id` of a request.
fn id_of(request: &x402_tests::core_support::receiver::Received) -> String {
    request
        .headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// How often each id arrived.
fn arrivals(receiver: &Receiver) -> HashMap<String, usize> {
    let mut arrivals = HashMap::new();
    for request in receiver.received() {
        *arrivals.entry(id_of(&request)).or_default() += 1;
    }
    arrivals
}

/// The ids answered 200, in order.
fn acked(receiver: &Receiver) -> Vec<String> {
    receiver
        .answered()
        .iter()
        .filter(|(_, status)| *status == 200)
        .map(|(request, _)| id_of(request))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_events_are_all_delivered_after_restart() {
    if std::env::var("X402_WEBHOOK_WORKER").is_ok() {
        return;
    }
    let redis_url = require::redis_url().await;
    let prefix = format!("x402-test:webhooks:{:016x}:", rand::random::<u64>());
    let outbox = match RedisOutbox::connect(&redis_url).await {
        Ok(outbox) => outbox.with_prefix(&prefix),
        Err(e) => panic!("Redis at {redis_url} is unreachable: {e}"),
    };

    let secret = WebhookSecret::generate();
    let verifier = WebhookVerifier::new([secret.clone()]);
    // Holds every delivery until told otherwise.
    let hang = Arc::new(AtomicBool::new(true));
    let holding = Arc::clone(&hang);
    let receiver = Receiver::start(move |_| {
        if holding.load(Ordering::SeqCst) {
            Reply::Hang(Duration::from_secs(60))
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let url = receiver.url.clone();

    let config = |enqueue: usize| json!({"prefix": prefix, "url": url, "secret": secret.to_whsec(), "enqueue": enqueue});

    // First process: enqueue, start one delivery, and die while the
    // receiver holds it.
    let mut first = spawn_worker(&config(EVENTS), &redis_url).await;
    assert_eq!(first.enqueued.len(), EVENTS);
    let deadline = Instant::now() + Duration::from_secs(10);
    while receiver.received().is_empty() {
        assert!(Instant::now() < deadline, "no delivery started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.child.start_kill().unwrap(); // SIGKILL
    first.child.wait().await.unwrap();
    let in_flight: Vec<String> = arrivals(&receiver).into_keys().collect();
    assert_eq!(in_flight.len(), 1, "one delivery was in flight");
    assert!(acked(&receiver).is_empty());
    assert_eq!(
        outbox.backlog().await.unwrap(),
        EVENTS,
        "every event is still in Redis after the crash"
    );

    // Second process, same prefix, receiver healthy again.
    hang.store(false, Ordering::SeqCst);
    let started = Instant::now();
    let mut second = spawn_worker(&config(0), &redis_url).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let acked = acked(&receiver).len();
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

    let mut acked = acked(&receiver);
    let arrivals = arrivals(&receiver);
    let bad: Vec<String> = receiver
        .received()
        .iter()
        .filter(|request| verifier.verify(&request.headers, &request.body).is_err())
        .map(id_of)
        .collect();
    drop(receiver);
    acked.sort();
    let mut expected = first.enqueued.clone();
    expected.sort();
    assert_eq!(
        acked, expected,
        "every event delivered, each acknowledged once"
    );
    assert!(bad.is_empty(), "all signatures valid: {bad:?}");
    for (id, n) in &arrivals {
        assert!(*n as u32 <= MAX_ATTEMPTS, "{id} arrived {n} times");
        let expected = if in_flight.contains(id) { 2 } else { 1 };
        assert_eq!(*n, expected, "{id}");
    }
    assert_eq!(outbox.backlog().await.unwrap(), 0);
    assert!(outbox.dead_letters().await.unwrap().is_empty());
    eprintln!("all {EVENTS} events delivered {recovery:?} after the restart (lease 4 s)");
}
