//! Replay protection at the server level (DESIGN §3–4): one signed
//! authorization runs the handler once, across concurrent copies, across
//! instances sharing Redis, and through Redis outages and stalls.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::{
    process::{Command as StdCommand, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{http::StatusCode, response::IntoResponse, routing::get, Router};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};
use x402_axum::PaywallLayer;
use x402_core::{
    claim::{RedisClaimStore, ReplayGuard},
    facilitator::HttpFacilitator,
    Engine, Offer, Route,
};
use x402_tests::{
    adapters::bind,
    capabilities::replay::{assert_one_winner, race},
    client::{self, Reply},
    core_support::redis_server::RedisServer,
    payment, EventLog, StandIn, PAY_TO, SECRET,
};

/// How many copies of one payment race each other.
const COPIES: usize = 64;
/// The facilitator client's deadline in these tests.
const FACILITATOR_TIMEOUT: Duration = Duration::from_secs(10);
/// The guard's default store deadline.
const DEADLINE: Duration = Duration::from_millis(250);
/// What a claim refusal may take at most, wall time (deadline + margin).
const REFUSAL_BUDGET: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------
// Payments
// ---------------------------------------------------------------------------

/// A v2 payment header for `row` with a random nonce, valid for one hour
/// (the harness's `validBefore` is year 5138, which the guard refuses as
/// `authorization_lifetime_too_long`).
fn header(row: &Value) -> String {
    let mut p = payment::v2_payment(row, None);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    p["payload"]["authorization"]["validBefore"] = json!((now.as_secs() + 3600).to_string());
    payment::resign(&mut p);
    payment::encode(&p)
}

// ---------------------------------------------------------------------------
// One in-process axum server
// ---------------------------------------------------------------------------

/// An axum app: `GET /paid` ($0.01, paywalled, replay-guarded) counting its
/// runs and failing with 500 while `fail_next` > 0; `GET /free` unprotected.
struct App {
    base: String,
    standin: StandIn,
    calls: Arc<AtomicUsize>,
    fail_next: Arc<AtomicUsize>,
    client: reqwest::Client,
}

/// A facilitator client for the stand-in with a generous deadline: the
/// harness's 600 ms can be missed by 64 concurrent `/verify` calls on two
/// busy cores, which would turn a copy into `502 facilitator_unavailable`.
fn patient_facilitator(standin: &StandIn) -> HttpFacilitator {
    HttpFacilitator::builder(standin.url())
        .timeout(FACILITATOR_TIMEOUT)
        .client(reqwest::Client::builder().no_proxy().build().unwrap())
        .build()
        .unwrap()
}

fn engine(standin: &StandIn, guard: ReplayGuard) -> Engine {
    Engine::builder(patient_facilitator(standin))
        .route(Route::get("/paid").offer(Offer::exact("eip155:84532", "$0.01", PAY_TO)))
        .hooks(guard)
        .build()
        .unwrap()
}

impl App {
    async fn start(guard: ReplayGuard) -> Self {
        let standin = StandIn::start(EventLog::default()).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let fail_next = Arc::new(AtomicUsize::new(0));
        let paid = {
            let (calls, fail_next) = (calls.clone(), fail_next.clone());
            move || {
                let (calls, fail_next) = (calls.clone(), fail_next.clone());
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let fail = fail_next
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if fail {
                        (StatusCode::INTERNAL_SERVER_ERROR, "handler failed").into_response()
                    } else {
                        SECRET.into_response()
                    }
                }
            }
        };
        let app = Router::new()
            .route("/paid", get(paid))
            .route("/free", get(|| async { "free content" }))
            .layer(PaywallLayer::new(engine(&standin, guard)));
        let (listener, base) = bind().await;
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            base,
            standin,
            calls,
            fail_next,
            client: client::client(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    async fn get(&self, path: &str, payment: Option<&str>) -> Reply {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(payment) = payment {
            request = request.header("PAYMENT-SIGNATURE", payment);
        }
        client::send(request).await
    }

    /// The row `/paid` offers.
    async fn row(&self) -> Value {
        row_at(&self.client, &self.base).await
    }
}

async fn row_at(client: &reqwest::Client, base: &str) -> Value {
    let reply = client::send(client.get(format!("{base}/paid"))).await;
    reply.assert_status(402);
    reply.payment_required()["accepts"][0].clone()
}

// ---------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------

/// The shared Redis of the environment (the test fails with the set-up
/// command when none answers).
async fn shared_redis_url() -> String {
    x402_tests::require::redis_url().await
}

/// A key prefix no other test (or run) uses.
fn unique_prefix(test: &str) -> String {
    format!("x402test:{test}:{}:", &payment::random_hex(8)[2..])
}

/// Runs `redis-cli -u url args...` and returns its stdout.
fn redis_cli(url: &str, args: &[&str]) -> String {
    let out = StdCommand::new("redis-cli")
        .args(["-u", url])
        .args(args)
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Deletes every key under `prefix` (best effort, with `redis-cli`).
struct CleanPrefix {
    url: String,
    prefix: String,
}

impl Drop for CleanPrefix {
    fn drop(&mut self) {
        let pattern = format!("{}*", self.prefix);
        let Ok(out) = StdCommand::new("redis-cli")
            .args(["-u", &self.url, "--scan", "--pattern", &pattern])
            .output()
        else {
            return;
        };
        for key in String::from_utf8_lossy(&out.stdout).lines() {
            let _ = StdCommand::new("redis-cli")
                .args(["-u", &self.url, "DEL", key])
                .stdout(Stdio::null())
                .status();
        }
    }
}

#[track_caller]
fn assert_claim_unavailable(reply: &Reply) {
    reply.assert_status(503);
    assert_eq!(reply.json(), json!({"error": "claim_unavailable"}));
    let retry_after = reply.header("retry-after").expect("Retry-After");
    assert!(
        retry_after.parse::<u64>().unwrap() >= 1,
        "Retry-After: {retry_after}"
    );
    assert!(!reply.leaks_secret());
}

// ---------------------------------------------------------------------------
// 1. Concurrent copies, one process
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_copies_of_one_payment_run_the_handler_once() {
    let app = App::start(ReplayGuard::memory()).await;
    let payment = header(&app.row().await);

    let started = Instant::now();
    let replies = race(
        &app.client,
        std::slice::from_ref(&app.base),
        &payment,
        COPIES,
    )
    .await;
    println!(
        "{COPIES} concurrent copies, one server (memory store): {} ms",
        started.elapsed().as_millis()
    );

    assert_one_winner(&replies);
    assert_eq!(app.calls(), 1, "handler runs");
    // Every copy was verified (the claim comes after verify); one settled.
    app.standin.assert_calls(COPIES, 1);
}

// ---------------------------------------------------------------------------
// 2. Concurrent copies, three processes sharing Redis
// ---------------------------------------------------------------------------

/// `replay_server` processes, killed on drop (even on panic).
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.start_kill();
        }
    }
}

async fn spawn_server(facilitator: &str, redis: &str, prefix: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_replay_server"))
        .env("FACILITATOR_URL", facilitator)
        .env("REDIS_URL", redis)
        .env("CLAIM_PREFIX", prefix)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("replay_server");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        BufReader::new(stdout).read_line(&mut line),
    )
    .await
    .expect("replay_server printed no address within 30 s")
    .unwrap();
    let base = line
        .trim()
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("unexpected replay_server output: {line:?}"))
        .to_owned();
    (child, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_copies_across_three_processes_sharing_redis_run_the_handler_once() {
    let redis = shared_redis_url().await;
    let prefix = unique_prefix("multiprocess");
    let _clean = CleanPrefix {
        url: redis.clone(),
        prefix: prefix.clone(),
    };
    let standin = StandIn::start(EventLog::default()).await;

    let mut servers = Servers(Vec::new());
    let mut bases = Vec::new();
    for _ in 0..3 {
        let (child, base) = spawn_server(&standin.url(), &redis, &prefix).await;
        servers.0.push(child);
        bases.push(base);
    }
    let client = client::client();
    let payment = header(&row_at(&client, &bases[0]).await);

    let started = Instant::now();
    let replies = race(&client, &bases, &payment, COPIES).await;
    println!(
        "{COPIES} concurrent copies, three processes (shared Redis): {} ms",
        started.elapsed().as_millis()
    );

    assert_one_winner(&replies);
    let mut counts = Vec::new();
    for base in &bases {
        let reply = client::send(client.get(format!("{base}/count"))).await;
        reply.assert_status(200);
        counts.push(reply.text().parse::<usize>().unwrap());
    }
    assert_eq!(
        counts.iter().sum::<usize>(),
        1,
        "handler runs per process: {counts:?}"
    );
    standin.assert_calls(COPIES, 1);

    // The one claim is in Redis, under the shared prefix, with an expiry.
    let keys = redis_cli(&redis, &["--scan", "--pattern", &format!("{prefix}*")]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 1, "claims under the prefix: {keys:?}");
    assert!(
        keys[0].starts_with(&format!("{prefix}x402:eip155:84532:")),
        "{}",
        keys[0]
    );
    let ttl: i64 = redis_cli(&redis, &["TTL", keys[0]]).trim().parse().unwrap();
    assert!(
        (3600..=3700).contains(&ttl),
        "TTL {ttl}: validBefore + 60 s"
    );
    drop(servers);
}

// ---------------------------------------------------------------------------
// 3. Redis down, then back
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_down_refuses_payments_fast_and_recovers_without_restart() {
    let redis = RedisServer::start_free();
    let port = redis.port();
    let store = RedisClaimStore::connect(&redis.url())
        .await
        .unwrap()
        .with_prefix(unique_prefix("down"));
    let app = App::start(ReplayGuard::new(store)).await;
    let row = app.row().await;

    // Up: a payment goes through.
    app.get("/paid", Some(&header(&row)))
        .await
        .assert_status(200);
    assert_eq!(app.calls(), 1);

    redis.kill();
    for attempt in 1..=3 {
        let started = Instant::now();
        let reply = app.get("/paid", Some(&header(&row))).await;
        let elapsed = started.elapsed();
        println!(
            "claim refusal with redis down (attempt {attempt}): {} ms",
            elapsed.as_millis()
        );
        assert_claim_unavailable(&reply);
        assert!(elapsed < REFUSAL_BUDGET, "refusal took {elapsed:?}");
    }
    assert_eq!(app.calls(), 1, "the handler never ran while Redis was down");
    app.standin.assert_calls(4, 1);

    // The rest of the server is unaffected.
    let free = app.get("/free", None).await;
    free.assert_status(200);
    assert_eq!(free.text(), "free content");

    // Back up on the same port: a new payment succeeds, same app.
    let _redis = RedisServer::start(port);
    let restarted = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reply = app.get("/paid", Some(&header(&row))).await;
        if reply.status == 200 {
            assert!(reply.leaks_secret());
            break;
        }
        assert_claim_unavailable(&reply);
        assert!(
            restarted.elapsed() < Duration::from_secs(3),
            "no recovery within 3 s of Redis restarting ({attempts} attempts)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "recovery after redis restart: {} ms, {attempts} attempt(s)",
        restarted.elapsed().as_millis()
    );
    assert_eq!(app.calls(), 2);
    assert_eq!(app.standin.settle_calls(), 2);
}

// ---------------------------------------------------------------------------
// 4. Redis stalled past the deadline, then resumed
// ---------------------------------------------------------------------------

/// Resends `payment` until it is not refused as a replay: a retry that races
/// the background release of a late claim is refused (harmlessly: nothing
/// runs, nothing settles), and must succeed within 3 s. The reply and the
/// attempts it took.
async fn retry_until_released(app: &App, payment: &str) -> (Reply, u32) {
    let started = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reply = app.get("/paid", Some(payment)).await;
        if reply.status != 402 {
            return (reply, attempts);
        }
        assert_eq!(reply.challenge_error(), "payment_replayed");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the late claim was never released ({attempts} attempts)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn late_claim_is_released_so_an_honest_retry_succeeds() {
    let mut redis = RedisServer::start_free();
    let store = RedisClaimStore::connect(&redis.url())
        .await
        .unwrap()
        .with_prefix(unique_prefix("stall"));
    let app = App::start(ReplayGuard::new(store).deadline(DEADLINE)).await;
    let row = app.row().await;
    app.get("/paid", Some(&header(&row)))
        .await
        .assert_status(200);

    let payment = header(&row);
    redis.signal("-STOP");
    let started = Instant::now();
    let reply = app.get("/paid", Some(&payment)).await;
    let elapsed = started.elapsed();
    println!(
        "claim refusal with redis stopped: {} ms",
        elapsed.as_millis()
    );
    assert_claim_unavailable(&reply);
    assert!(
        elapsed >= DEADLINE,
        "refused before the deadline: {elapsed:?}"
    );
    assert!(elapsed < REFUSAL_BUDGET, "refusal took {elapsed:?}");
    assert_eq!(app.calls(), 1, "the handler did not run");

    // Redis resumes: the SET lands late; the guard must release it.
    redis.signal("-CONT");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let resumed = Instant::now();
    let (retry, attempts) = retry_until_released(&app, &payment).await;
    println!(
        "honest retry after redis resumed (+500 ms pause): {} ms, {attempts} attempt(s)",
        resumed.elapsed().as_millis()
    );
    retry.assert_status(200);
    assert!(retry.leaks_secret());
    assert_eq!(app.calls(), 2);
    assert_eq!(app.standin.settle_calls(), 2);

    // And the authorization is now claimed for good.
    let replay = app.get("/paid", Some(&payment)).await;
    replay.assert_status(402);
    assert_eq!(replay.challenge_error(), "payment_replayed");
    assert_eq!(app.calls(), 2);
}

/// A client that hangs up while its claim is being written: the write lands
/// after the request is gone, and is released, so the honest retry is
/// served (not refused as a replay for the claim's lifetime).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_whose_client_hung_up_mid_write_is_released() {
    let mut redis = RedisServer::start_free();
    let store = RedisClaimStore::connect(&redis.url())
        .await
        .unwrap()
        .with_prefix(unique_prefix("hangup"));
    // A deadline far beyond the hang-up: the client, not the deadline,
    // abandons the claim.
    let app = App::start(ReplayGuard::new(store).deadline(Duration::from_secs(10))).await;
    let row = app.row().await;
    let payment = header(&row);

    redis.signal("-STOP");
    let impatient = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gave_up = impatient
        .get(format!("{}/paid", app.base))
        .header("PAYMENT-SIGNATURE", &payment)
        .send()
        .await;
    assert!(
        gave_up.is_err(),
        "the client was meant to give up: {gave_up:?}"
    );
    assert_eq!(app.calls(), 0);

    // Redis resumes: the SET lands with nobody waiting for it.
    redis.signal("-CONT");
    let (retry, _) = retry_until_released(&app, &payment).await;
    retry.assert_status(200);
    assert_eq!(app.calls(), 1);
    assert_eq!(app.standin.settle_calls(), 1);
}

// ---------------------------------------------------------------------------
// 5. Handler failure releases the claim
// ---------------------------------------------------------------------------

async fn handler_failure_releases_the_claim(guard: ReplayGuard) {
    let app = App::start(guard).await;
    let payment = header(&app.row().await);

    app.fail_next.store(1, Ordering::SeqCst);
    let failed = app.get("/paid", Some(&payment)).await;
    failed.assert_status(500);
    assert_eq!(
        failed.text(),
        "handler failed",
        "handler's response, unchanged"
    );
    assert_eq!(app.calls(), 1);
    app.standin.assert_calls(1, 0);

    // Same header string: the claim was released, the handler runs again.
    let retry = app.get("/paid", Some(&payment)).await;
    retry.assert_status(200);
    assert!(retry.leaks_secret());
    assert!(retry.header("payment-response").is_some(), "receipt");
    assert_eq!(app.calls(), 2);
    app.standin.assert_calls(2, 1);

    // Settled: the claim is kept.
    let replay = app.get("/paid", Some(&payment)).await;
    replay.assert_status(402);
    assert_eq!(replay.challenge_error(), "payment_replayed");
    assert_eq!(app.calls(), 2);
    app.standin.assert_calls(3, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_failure_releases_the_claim_memory_store() {
    handler_failure_releases_the_claim(ReplayGuard::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_failure_releases_the_claim_redis_store() {
    let url = shared_redis_url().await;
    let prefix = unique_prefix("handler500");
    let _clean = CleanPrefix {
        url: url.clone(),
        prefix: prefix.clone(),
    };
    let store = RedisClaimStore::connect(&url)
        .await
        .unwrap()
        .with_prefix(prefix);
    handler_failure_releases_the_claim(ReplayGuard::new(store)).await;
}
