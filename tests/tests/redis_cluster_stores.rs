//! Every Redis store on a Redis Cluster: claims, sessions (with the batched
//! redemptions grouped by hash slot) and the webhook outbox (every script on
//! one slot), mirroring the single-server suites of `core_claim_stores.rs`,
//! `core_session_stores.rs` and `core_webhook_outbox_crash.rs`.
//!
//! Needs the cluster `bash scripts/test-all.sh` starts (`REDIS_CLUSTER_URLS`,
//! see `scripts/redis-cluster.sh`) and fails in one line naming that command
//! without it; the test that counts script calls starts a cluster of its own.
//! Each run uses its own random key prefixes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, OnceLock},
    time::{Duration, Instant, SystemTime},
};

use serde_json::json;
use tokio::sync::Barrier;
use x402_core::{
    claim::{ClaimStore, Claimed, RedisClaimStore},
    session::{
        Redemption, RedisSessionStore, SessionRecord, SessionStore, SessionToken, TokenHash,
    },
    webhook::outbox::{DeadLetter, Outbox, OutboxMessage, RedisOutbox},
};
use x402_tests::redis_cluster::{self, cli, port_of, OwnCluster};

const SCOPE: &str = "weather";

fn urls() -> Vec<String> {
    redis_cluster::shared_urls()
}

/// A port of the shared cluster, for `redis-cli`.
fn any_port() -> u16 {
    port_of(&urls()[0])
}

fn run_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(rand::random)
}

fn unique(name: &str) -> String {
    format!(
        "x402:test:cluster:{:016x}:{name}:{:016x}",
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

/// `redis-cli -c` (following redirections) on the shared cluster.
fn cluster_cli(args: &[&str]) -> String {
    let mut all = vec!["-c"];
    all.extend_from_slice(args);
    cli(any_port(), &all).unwrap_or_else(|| panic!("redis-cli {args:?}"))
}

/// The port of the primary serving `key`, on the shared cluster.
fn primary_of(key: &str) -> u16 {
    let port = any_port();
    let slot = redis_cluster::keyslot(port, key);
    redis_cluster::nodes(port)
        .unwrap()
        .into_iter()
        .find(|n| n.primary && n.serves(slot))
        .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
        .port
}

// ---------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------

async fn claims() -> RedisClaimStore {
    RedisClaimStore::connect_cluster(urls())
        .await
        .unwrap()
        .with_prefix(format!("x402:test:cluster:{:016x}:", run_id()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_can_wait_for_a_replica() {
    // On the cluster (a replica per primary): claims count once a replica
    // holds them, and the replica does.
    let store = claims().await.min_replicas(1, Duration::from_secs(1));
    let key = unique("replicated");
    assert_eq!(
        store.claim(&key, in_secs(60)).await.unwrap(),
        Claimed::Claimed
    );
    assert_eq!(
        store.claim(&key, in_secs(60)).await.unwrap(),
        Claimed::AlreadyClaimed
    );
    store.release(&key).await.unwrap();

    // On one server with no replica: asking for one cannot be met, and no
    // replica can be promoted without copying the claim, so it counts.
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let single = RedisClaimStore::connect(&url)
        .await
        .unwrap()
        .min_replicas(1, Duration::from_millis(20));
    let key = unique("unreplicated");
    assert_eq!(
        single.claim(&key, in_secs(60)).await.unwrap(),
        Claimed::Claimed
    );
    assert_eq!(
        single.claim(&key, in_secs(60)).await.unwrap(),
        Claimed::AlreadyClaimed
    );
    single.release(&key).await.unwrap();
}

#[tokio::test]
async fn claims_claim_release_and_expire() {
    let store = claims().await;
    let key = unique("claim");
    assert_eq!(
        store.claim(&key, in_secs(60)).await.unwrap(),
        Claimed::Claimed
    );
    assert_eq!(
        store.claim(&key, in_secs(600)).await.unwrap(),
        Claimed::AlreadyClaimed
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
    store.release(&key).await.unwrap();
    store.release(&key).await.unwrap();
    store.release(&unique("never_claimed")).await.unwrap();

    // Expiry (rounded up to the second).
    let short = unique("short");
    let until = SystemTime::now() + Duration::from_millis(1200);
    assert_eq!(store.claim(&short, until).await.unwrap(), Claimed::Claimed);
    assert_eq!(
        store.claim(&short, in_secs(60)).await.unwrap(),
        Claimed::AlreadyClaimed
    );
    tokio::time::sleep(Duration::from_millis(2300)).await;
    assert_eq!(
        store.claim(&short, in_secs(60)).await.unwrap(),
        Claimed::Claimed
    );
}

/// 64 concurrent claims of one key from three stores (three connections to
/// the cluster): one winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_concurrent_copies_have_one_winner() {
    const TASKS: usize = 64;
    let stores = [claims().await, claims().await, claims().await];
    let key = Arc::new(unique("race"));
    let barrier = Arc::new(Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (store, key, barrier) = (stores[i % 3].clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(&key, in_secs(60)).await.unwrap()
            })
        })
        .collect();
    let mut won = 0;
    for task in tasks {
        won += usize::from(task.await.unwrap() == Claimed::Claimed);
    }
    assert_eq!(won, 1);
}

/// Claims keep their single-server key names (`{prefix}{key}`, a `1` with
/// an expiry) and spread over every primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_keep_their_names_and_spread_over_the_primaries() {
    let prefix = format!("x402:test:cluster:{:016x}:names:", rand::random::<u64>());
    let store = RedisClaimStore::connect_cluster(urls())
        .await
        .unwrap()
        .with_prefix(&prefix);
    let mut primaries = HashSet::new();
    for i in 0..30 {
        let key = format!("x402:eip155:84532:0xasset:0xfrom:{i}");
        assert_eq!(
            store.claim(&key, in_secs(120)).await.unwrap(),
            Claimed::Claimed
        );
        let full = format!("{prefix}{key}");
        assert_eq!(cluster_cli(&["GET", &full]).trim(), "1");
        let ttl: i64 = cluster_cli(&["TTL", &full]).trim().parse().unwrap();
        assert!((100..=121).contains(&ttl), "TTL {ttl}");
        primaries.insert(primary_of(&full));
        store.release(&key).await.unwrap();
        assert_eq!(cluster_cli(&["EXISTS", &full]).trim(), "0");
    }
    assert_eq!(primaries.len(), 3, "claims on every primary: {primaries:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_connection_errors() {
    let none: [&str; 0] = [];
    assert!(RedisClaimStore::connect_cluster(none).await.is_err());
    assert!(RedisSessionStore::connect_cluster(["redis://127.0.0.1:1"])
        .await
        .is_err());
    assert!(RedisOutbox::connect_cluster(["not a url"]).await.is_err());
    // Lazy: starts without the cluster, fails its calls.
    let lazy = RedisClaimStore::connect_cluster_lazy(["redis://127.0.0.1:1"]).unwrap();
    assert!(lazy.claim(&unique("lazy"), in_secs(60)).await.is_err());
    // One node's URL is enough to find the others.
    let one = RedisClaimStore::connect_cluster([urls()[0].clone()])
        .await
        .unwrap();
    let key = unique("one_node");
    assert_eq!(
        one.claim(&key, in_secs(60)).await.unwrap(),
        Claimed::Claimed
    );
    assert!(format!("{one:?}").contains("RedisConnection::Cluster"));
}

// ---------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------

fn session_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| format!("x402:test:cluster:session:{:016x}:", rand::random::<u64>()))
}

async fn sessions_at(urls: &[String]) -> RedisSessionStore {
    RedisSessionStore::connect_cluster(urls)
        .await
        .unwrap()
        .prefix(session_prefix())
}

/// Three stores with their own cluster connections: three engine instances.
async fn three_sessions() -> Vec<RedisSessionStore> {
    let urls = urls();
    vec![
        sessions_at(&urls).await,
        sessions_at(&urls).await,
        sessions_at(&urls).await,
    ]
}

fn record(calls: u64, expires_at: u64) -> SessionRecord {
    SessionRecord {
        scope: SCOPE.to_owned(),
        remaining: calls,
        expires_at,
    }
}

async fn open(store: &RedisSessionStore, calls: u64) -> TokenHash {
    let token = SessionToken::generate().hash();
    store
        .open(&token, record(calls, unix_now() + 300))
        .await
        .unwrap();
    token
}

fn redeemed(remaining: u64) -> Redemption {
    Redemption::Redeemed { remaining }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_count_down_give_back_and_refuse() {
    let stores = three_sessions().await;
    let now = unix_now();
    let token = open(&stores[0], 3).await;
    // Any instance redeems from the same count; a give-back through another.
    assert_eq!(
        stores[0].redeem(&token, SCOPE, now).await.unwrap(),
        redeemed(2)
    );
    stores[1].give_back(&token).await.unwrap();
    for (i, left) in [2, 1, 0].into_iter().enumerate() {
        assert_eq!(
            stores[i].redeem(&token, SCOPE, now).await.unwrap(),
            redeemed(left)
        );
    }
    for store in &stores {
        assert_eq!(
            store.redeem(&token, SCOPE, now).await.unwrap(),
            Redemption::Exhausted
        );
    }
    // Never above what was sold.
    for _ in 0..5 {
        stores[2].give_back(&token).await.unwrap();
    }
    for left in [2, 1, 0] {
        assert_eq!(
            stores[0].redeem(&token, SCOPE, now).await.unwrap(),
            redeemed(left)
        );
    }

    // Scope, expiry at the given now, unknown tokens.
    let other = open(&stores[0], 2).await;
    assert_eq!(
        stores[1].redeem(&other, "news", now).await.unwrap(),
        Redemption::OutOfScope
    );
    assert_eq!(
        stores[1].redeem(&other, SCOPE, now + 1_000).await.unwrap(),
        Redemption::Expired
    );
    assert_eq!(
        stores[1].redeem(&other, SCOPE, now).await.unwrap(),
        redeemed(1)
    );
    let unknown = SessionToken::generate().hash();
    assert_eq!(
        stores[2].redeem(&unknown, SCOPE, now).await.unwrap(),
        Redemption::Unknown
    );
    stores[2].give_back(&unknown).await.unwrap();
    assert_eq!(
        stores[2].redeem(&unknown, SCOPE, now).await.unwrap(),
        Redemption::Unknown
    );
    // Closed: gone.
    stores[0].close(&other).await.unwrap();
    assert_eq!(
        stores[0].redeem(&other, SCOPE, now).await.unwrap(),
        Redemption::Unknown
    );
}

/// 1,000 concurrent redemptions of a 100-call session over three instances:
/// exactly 100 redeemed, every count from 99 to 0 handed out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_concurrent_redemptions_never_oversell() {
    const CALLS: u64 = 100;
    const REQUESTS: usize = 1_000;
    let stores = three_sessions().await;
    let token = open(&stores[0], CALLS).await;
    let now = unix_now();
    let barrier = Arc::new(Barrier::new(REQUESTS));
    let started = Instant::now();
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let (store, barrier) = (stores[i % 3].clone(), barrier.clone());
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
    eprintln!(
        "cluster: {REQUESTS} concurrent redemptions over 3 instances in {:?}",
        started.elapsed()
    );
    left.sort_unstable();
    assert_eq!(left, (0..CALLS).collect::<Vec<_>>());
    assert_eq!(exhausted, REQUESTS - CALLS as usize);
}

/// Redemptions of many sessions (keys on slots all over the cluster) sent at
/// once: batched by slot, so no script call names two slots (which the
/// cluster would refuse with CROSSSLOT), and each answered in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_batched_redemptions_are_grouped_by_slot() {
    const SESSIONS: usize = 150;
    let store = sessions_at(&urls()).await;
    let now = unix_now();
    let mut tokens = Vec::new();
    for _ in 0..SESSIONS {
        tokens.push(open(&store, 2).await);
    }
    let primaries: HashSet<u16> = tokens
        .iter()
        .map(|t| primary_of(&format!("{}{}", session_prefix(), t.to_hex())))
        .collect();
    assert_eq!(primaries.len(), 3, "sessions on every primary");

    // Three redemptions of each 2-call session, all released together.
    let barrier = Arc::new(Barrier::new(SESSIONS * 3));
    let tasks: Vec<_> = tokens
        .iter()
        .flat_map(|t| [*t, *t, *t])
        .map(|token| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                (token, store.redeem(&token, SCOPE, now).await)
            })
        })
        .collect();
    let mut answers: HashMap<[u8; 32], Vec<String>> = HashMap::new();
    for task in tasks {
        let (token, answer) = task.await.unwrap();
        let answer = answer.unwrap_or_else(|e| panic!("a redemption failed: {e:?}"));
        answers
            .entry(token.0)
            .or_default()
            .push(format!("{answer:?}"));
    }
    for (_, mut seen) in answers {
        seen.sort();
        assert_eq!(
            seen,
            [
                "Exhausted",
                "Redeemed { remaining: 0 }",
                "Redeemed { remaining: 1 }"
            ]
        );
    }
}

/// Script calls (`EVALSHA`) the node on `port` has run since it started.
fn script_calls(port: u16) -> u64 {
    cli(port, &["info", "commandstats"])
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Under load, the redemptions of one session (one slot) share script calls
/// on the cluster as on one server. A cluster of its own: its statistics
/// count only this test's calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_concurrent_redemptions_share_script_calls() {
    const CALLS: u64 = 400;
    let cluster = tokio::task::spawn_blocking(OwnCluster::start)
        .await
        .unwrap();
    let store = sessions_at(&cluster.urls()).await;
    let token = open(&store, CALLS).await;
    let key = format!("{}{}", session_prefix(), token.to_hex());
    let primary = cluster.primary_of(cluster.keyslot(&key)).unwrap().port;
    let before = script_calls(primary);

    let now = unix_now();
    let barrier = Arc::new(Barrier::new(CALLS as usize));
    let tasks: Vec<_> = (0..CALLS)
        .map(|_| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.redeem(&token, SCOPE, now).await.unwrap()
            })
        })
        .collect();
    let mut left = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Redemption::Redeemed { remaining } => left.push(remaining),
            other => panic!("expected a redemption, got {other:?}"),
        }
    }
    left.sort_unstable();
    assert_eq!(left, (0..CALLS).collect::<Vec<_>>());
    // One or two calls load the script (NOSCRIPT, then EVALSHA again).
    let calls = script_calls(primary) - before;
    assert!(
        (1..=CALLS / 4).contains(&calls),
        "{CALLS} redemptions took {calls} script calls"
    );
    eprintln!("cluster: {CALLS} concurrent redemptions of one session in {calls} script calls");
}

/// Sessions keep their single-server key names: a hash at
/// `{prefix}{sha256 of the token}` with an expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_keep_their_names() {
    let store = sessions_at(&urls()).await;
    let token = SessionToken::generate();
    store
        .open(&token.hash(), record(10, unix_now() + 300))
        .await
        .unwrap();
    let key = format!("{}{}", session_prefix(), token.hash().to_hex());
    let fields = cluster_cli(&["HGETALL", &key]);
    let fields: Vec<&str> = fields.lines().collect();
    assert_eq!(fields.len(), 8, "{fields:?}");
    assert!(
        fields.chunks(2).any(|kv| kv == ["remaining", "10"]),
        "{fields:?}"
    );
    let ttl: i64 = cluster_cli(&["TTL", &key]).trim().parse().unwrap();
    assert!(ttl > 300 && ttl <= 420, "ttl {ttl}");
    assert!(!cluster_cli(&["HGETALL", &key]).contains(token.expose()));
    store.close(&token.hash()).await.unwrap();
}

// ---------------------------------------------------------------------------
// The webhook outbox
// ---------------------------------------------------------------------------

fn message(i: usize) -> OutboxMessage {
    OutboxMessage::new(
        format!("msg_{i}_{:08x}", rand::random::<u32>()),
        "payment.settled",
        json!({"i": i}).to_string(),
    )
}

/// The outbox's prefix on a cluster is a hash tag: the default, a tagged one
/// kept, an untagged one wrapped. On one server nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outbox_prefixes_are_hash_tags_on_a_cluster() {
    let cluster = RedisOutbox::connect_cluster(urls()).await.unwrap();
    assert_eq!(cluster.prefix(), "{x402:webhooks}:");
    assert_eq!(cluster.prefix(), RedisOutbox::DEFAULT_CLUSTER_PREFIX);
    assert_eq!(
        cluster.clone().with_prefix("shop:webhooks:").prefix(),
        "{shop:webhooks:}"
    );
    assert_eq!(
        cluster.clone().with_prefix("{shop}:webhooks:").prefix(),
        "{shop}:webhooks:"
    );
    assert_eq!(cluster.clone().with_prefix("").prefix(), "{x402:webhooks}:");
    let single = RedisOutbox::connect_lazy("redis://127.0.0.1:1").unwrap();
    assert_eq!(single.prefix(), "x402:webhooks:");
    assert_eq!(
        single.with_prefix("shop:webhooks:").prefix(),
        "shop:webhooks:"
    );
}

/// Push, claim, retry, ack, bury, list and redeliver on the cluster; every
/// key of the outbox is in one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outbox_lifecycle_on_one_slot() {
    let prefix = format!("x402:test:cluster:{:016x}:webhooks:", rand::random::<u64>());
    let outbox = RedisOutbox::connect_cluster(urls())
        .await
        .unwrap()
        .with_prefix(&prefix);
    let tagged = format!("{{{prefix}}}");
    assert_eq!(outbox.prefix(), tagged);
    let (a, b, c) = (message(1), message(2), message(3));
    for m in [&a, &b, &c] {
        outbox.push(m.clone()).await.unwrap();
    }
    outbox.push(a.clone()).await.unwrap();
    assert_eq!(outbox.backlog().await.unwrap(), 3);

    // Claimed in order, each attempt counted.
    let first = outbox
        .claim(Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.id.as_str(), first.attempts), (a.id.as_str(), 1));
    assert_eq!(first.body, a.body);
    outbox.retry(&first.id, Duration::ZERO).await.unwrap();
    let mut seen = Vec::new();
    while let Some(m) = outbox.claim(Duration::from_secs(30)).await.unwrap() {
        seen.push((m.id.clone(), m.attempts));
    }
    seen.sort();
    let mut expected = vec![(a.id.clone(), 2), (b.id.clone(), 1), (c.id.clone(), 1)];
    expected.sort();
    assert_eq!(seen, expected);
    assert_eq!(outbox.backlog().await.unwrap(), 3, "all three processing");

    outbox.ack(&a.id).await.unwrap();
    outbox.ack(&b.id).await.unwrap();
    let letter: DeadLetter = serde_json::from_value(json!({
        "message": serde_json::to_value(&c).unwrap(),
        "lastError": "status 503",
        "failedAt": "2026-01-01T00:00:00Z",
    }))
    .unwrap();
    outbox.bury(letter).await.unwrap();
    assert_eq!(outbox.backlog().await.unwrap(), 0);
    let dead = outbox.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.id, c.id);
    assert_eq!(dead[0].last_error, "status 503");

    // The keys, all under the tag, all in one slot.
    let port = any_port();
    let slot = redis_cluster::keyslot(port, &format!("{tagged}pending"));
    for name in [
        "pending",
        "processing",
        "msg",
        "attempts",
        "dead",
        "dead-order",
    ] {
        assert_eq!(
            redis_cluster::keyslot(port, &format!("{tagged}{name}")),
            slot,
            "{name}"
        );
    }
    assert_eq!(cluster_cli(&["HLEN", &format!("{tagged}dead")]).trim(), "1");

    assert!(outbox.redeliver(&c.id).await.unwrap());
    assert!(!outbox.redeliver(&c.id).await.unwrap());
    assert!(outbox.dead_letters().await.unwrap().is_empty());
    let again = outbox
        .claim(Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id.as_str(), again.attempts), (c.id.as_str(), 1));
    outbox.ack(&again.id).await.unwrap();
    assert_eq!(outbox.backlog().await.unwrap(), 0);
    for name in [
        "pending",
        "processing",
        "msg",
        "attempts",
        "dead",
        "dead-order",
    ] {
        cluster_cli(&["DEL", &format!("{tagged}{name}")]);
    }
}

/// A worker that dies holding a message leaves it processing; once the lease
/// expires the next claim (any worker's) takes it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outbox_expired_leases_come_back() {
    let prefix = format!("x402:test:cluster:{:016x}:lease:", rand::random::<u64>());
    let first = RedisOutbox::connect_cluster(urls())
        .await
        .unwrap()
        .with_prefix(&prefix);
    let second = RedisOutbox::connect_cluster(urls())
        .await
        .unwrap()
        .with_prefix(&prefix);
    let m = message(7);
    first.push(m.clone()).await.unwrap();
    let held = first
        .claim(Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.id, m.id);
    assert!(second
        .claim(Duration::from_secs(30))
        .await
        .unwrap()
        .is_none());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = second
        .claim(Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.id.as_str(), taken.attempts), (m.id.as_str(), 2));
    second.ack(&taken.id).await.unwrap();
    assert_eq!(first.backlog().await.unwrap(), 0);
}
