//! Claims in Redis, shared by every instance.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;

use super::{ClaimStore, ClaimStoreError, Claimed};
use crate::redis_conn::{RedisConnection, Timeouts};

/// The response timeout of the connections [`RedisClaimStore::connect`]
/// (and `connect_cluster`) opens. Requests are bounded by the guard's much
/// shorter deadline; this only bounds how long a late answer is waited for
/// in the background.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`RedisClaimStore::connect`] waits to open a connection (to
/// each node, on a cluster).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

const TIMEOUTS: Timeouts = Timeouts::new(RESPONSE_TIMEOUT, CONNECTION_TIMEOUT);

/// Replay claims in Redis (feature `redis`), shared by every instance that
/// uses the same server and prefix.
///
/// A claim is `SET {prefix}{key} 1 NX EXAT {expiry}` (atomic, and forgotten
/// by Redis when it expires); a release is `DEL`. The connection (a
/// [`RedisConnection`]) reconnects by itself after Redis restarts or the
/// connection drops; until then claims fail and the
/// [`ReplayGuard`](super::ReplayGuard) answers `503 claim_unavailable`.
///
/// On a Redis Cluster ([`connect_cluster`](Self::connect_cluster)) each claim
/// is one command on one key, so claims spread over every primary by their
/// keys' slots, and the key names are those of one server: keep hash tags
/// (`{...}`) out of the prefix, or every claim lands on one shard. While a
/// primary is down and until its replica takes over (the cluster's
/// `cluster-node-timeout` and an election, a few seconds), claims for its
/// slots fail and are answered `503`; the other slots keep working if the
/// cluster runs with `cluster-require-full-coverage no`.
///
/// Redis replicates asynchronously: a claim written on a primary that dies
/// before a replica copied it is lost when the replica takes over, and a
/// copy of that payment sent in that window would be claimed again (its
/// handler would run again; its settlement would fail, the authorization
/// being spent, so no money moves twice). To close the window, ask for
/// [`min_replicas`](Self::min_replicas): a claim is then `SET` followed, in
/// the same pipeline to the same primary, by `WAIT`, and counts only once
/// that many replicas hold it; one no replica acknowledged in time is
/// released and answered as an error (`503`, the buyer may retry), unless
/// the primary has no replica connected at all (after a failover, until
/// the old primary comes back as a replica), when no replica can be
/// promoted without copying the claim first. `WAIT` holds the node's
/// connection until replicas answer, so every claim then costs a
/// replication round trip more. Off (`0`) by default.
///
/// ```no_run
/// use x402_core::claim::{RedisClaimStore, ReplayGuard};
///
/// # async fn run() -> Result<(), x402_core::claim::ClaimStoreError> {
/// let store = RedisClaimStore::connect("redis://127.0.0.1:6379")
///     .await?
///     .with_prefix("shop:");
/// let guard = ReplayGuard::new(store);
/// # let _ = guard;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisClaimStore {
    connection: RedisConnection,
    prefix: Arc<str>,
    /// Replicas that must hold a claim before it counts, and how long to
    /// wait for them.
    replicas: (u32, Duration),
}

/// The default [`RedisClaimStore::min_replicas`] wait.
pub const DEFAULT_REPLICA_WAIT: Duration = Duration::from_millis(100);

impl fmt::Debug for RedisClaimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClaimStore")
            .field("connection", &self.connection)
            .field("prefix", &self.prefix)
            .field("replicas", &self.replicas)
            .finish()
    }
}

impl RedisClaimStore {
    /// A store over an existing connection: a redis-rs `ConnectionManager`
    /// or cluster connection, or a [`RedisConnection`].
    ///
    /// redis-rs times out responses after 500 ms by default. When a claim
    /// answers after the guard's deadline, the guard still waits for it (to
    /// release it, since its request was refused), which needs the
    /// connection's response timeout to be longer than a Redis stall you
    /// want to survive: [`connect`](Self::connect) sets 30 s.
    pub fn new(connection: impl Into<RedisConnection>) -> Self {
        Self {
            connection: connection.into(),
            prefix: Arc::from(""),
            replicas: (0, DEFAULT_REPLICA_WAIT),
        }
    }

    /// A claim counts only once `count` replicas hold it, waited for at
    /// most `wait` (Redis `WAIT`, in the claim's pipeline); else it is
    /// released and the claim fails (`503`). Default: 0 (no wait); see the
    /// type's documentation for what that risks in a failover.
    #[must_use]
    pub fn min_replicas(mut self, count: u32, wait: Duration) -> Self {
        self.replicas = (count, wait.max(Duration::from_millis(1)));
        self
    }

    /// Connects to `url` (`redis://host:port/db`, `rediss://...`), failing if
    /// Redis cannot be reached now. See [`connect_lazy`](Self::connect_lazy)
    /// to start without Redis.
    pub async fn connect(url: &str) -> Result<Self, ClaimStoreError> {
        let connection = RedisConnection::connect(url, TIMEOUTS)
            .await
            .map_err(ClaimStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// Prepares a connection to `url` without opening it: the first claim
    /// connects. Fails only on a malformed URL, so a server can start while
    /// Redis is down (claims answer `503` until it is up).
    pub fn connect_lazy(url: &str) -> Result<Self, ClaimStoreError> {
        let connection =
            RedisConnection::connect_lazy(url, TIMEOUTS).map_err(ClaimStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// Connects to the Redis Cluster that `urls` belong to (some or all of
    /// its nodes, `redis://host:port`), failing if it cannot be reached now.
    /// Same timeouts as [`connect`](Self::connect): 1 s to open a connection
    /// to a node, 30 s for an answer. A claim is sent once: one that fails
    /// (its primary is down, its slot moved) answers `503` at once, and the
    /// connection reads the cluster's new layout for the claims after it.
    pub async fn connect_cluster<I>(urls: I) -> Result<Self, ClaimStoreError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster(urls, TIMEOUTS)
            .await
            .map_err(ClaimStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// [`connect_cluster`](Self::connect_cluster) without waiting: the
    /// connection is made in the background and claims answer `503` until
    /// it is. Fails only on malformed URLs. Call it inside a Tokio runtime.
    pub fn connect_cluster_lazy<I>(urls: I) -> Result<Self, ClaimStoreError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster_lazy(urls, TIMEOUTS)
            .map_err(ClaimStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// Prefixes every key with `prefix` (e.g. `"myapp:"`), to share a Redis
    /// database with other data or other applications.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// The key prefix (empty by default).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How many replicas the primary holding `key` has connected (`ROLE`,
    /// sent with a read of the key so that it goes to that primary).
    async fn connected_replicas(&self, key: &str) -> Option<usize> {
        let mut connection = self.connection.clone();
        let (_exists, role): (u64, Vec<::redis::Value>) = ::redis::pipe()
            .cmd("EXISTS")
            .arg(key)
            .cmd("ROLE")
            .query_async(&mut connection)
            .await
            .ok()?;
        match role.get(2)? {
            ::redis::Value::Array(replicas) => Some(replicas.len()),
            _ => None,
        }
    }

    fn full_key(&self, key: &str) -> String {
        let mut full = String::with_capacity(self.prefix.len() + key.len());
        full.push_str(&self.prefix);
        full.push_str(key);
        full
    }
}

/// `EXAT` takes whole seconds: round up, so a claim never ends early.
fn unix_seconds_ceil(t: SystemTime) -> Result<u64, ClaimStoreError> {
    let secs = crate::unix::secs_ceil(t).ok_or(ClaimStoreError::InvalidExpiry)?;
    // Redis refuses `EXAT 0` and times beyond i64 milliseconds.
    if secs == 0 || secs > (i64::MAX as u64) / 1000 {
        return Err(ClaimStoreError::InvalidExpiry);
    }
    Ok(secs)
}

#[async_trait]
impl ClaimStore for RedisClaimStore {
    async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
        let at = unix_seconds_ceil(expires_at)?;
        let mut connection = self.connection.clone();
        let key = self.full_key(key);
        let mut set = ::redis::cmd("SET");
        set.arg(&key).arg(1).arg("NX").arg("EXAT").arg(at);
        let (replicas, wait) = self.replicas;
        if replicas == 0 {
            let reply: Option<String> = set
                .query_async(&mut connection)
                .await
                .map_err(ClaimStoreError::backend)?;
            // `OK` when set, nil when the key exists.
            return Ok(match reply {
                Some(_) => Claimed::Claimed,
                None => Claimed::AlreadyClaimed,
            });
        }
        // One pipeline, so one primary (WAIT names no key: it goes where the
        // SET goes) and one round trip.
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let (reply, acknowledged): (Option<String>, u64) = ::redis::pipe()
            .add_command(set)
            .cmd("WAIT")
            .arg(replicas)
            .arg(wait_ms)
            .query_async(&mut connection)
            .await
            .map_err(ClaimStoreError::backend)?;
        match reply {
            None => Ok(Claimed::AlreadyClaimed),
            Some(_) if acknowledged >= u64::from(replicas) => Ok(Claimed::Claimed),
            // A primary with no replica connected (its own died, and took
            // over or not): no replica can be promoted without first copying
            // it, claim included, so the claim is as safe as it can be.
            Some(_) if self.connected_replicas(&key).await == Some(0) => Ok(Claimed::Claimed),
            Some(_) => {
                // Not safe from a failover: take it back, and refuse.
                let _: Result<u64, _> = ::redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut connection)
                    .await;
                Err(ClaimStoreError::backend(format!(
                    "claim held by {acknowledged} of {replicas} replicas after {wait_ms} ms"
                )))
            }
        }
    }

    async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
        let mut connection = self.connection.clone();
        let _deleted: u64 = ::redis::cmd("DEL")
            .arg(self.full_key(key))
            .query_async(&mut connection)
            .await
            .map_err(ClaimStoreError::backend)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn expiry_rounds_up_to_the_second() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(unix_seconds_ceil(t).ok(), Some(1_700_000_000));
        assert_eq!(
            unix_seconds_ceil(t + Duration::from_millis(1)).ok(),
            Some(1_700_000_001)
        );
        assert!(matches!(
            unix_seconds_ceil(UNIX_EPOCH),
            Err(ClaimStoreError::InvalidExpiry)
        ));
        assert!(matches!(
            unix_seconds_ceil(UNIX_EPOCH - Duration::from_secs(1)),
            Err(ClaimStoreError::InvalidExpiry)
        ));
    }
}
