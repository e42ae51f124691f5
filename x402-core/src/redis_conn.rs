//! One connection type for every Redis store (feature `redis`): one server,
//! or a Redis Cluster.
//!
//! [`RedisConnection`] is what [`RedisClaimStore`](crate::claim::RedisClaimStore),
//! [`RedisSessionStore`](crate::session::RedisSessionStore) and
//! `RedisOutbox` (with `webhooks`) talk through. It is a redis-rs
//! [`ConnectionManager`] for one server (or a primary with replicas) and a
//! redis-rs [`ClusterConnection`] for a cluster; both reconnect by
//! themselves, and the cluster one follows slot moves and failovers. Neither
//! sends a command twice: a command that fails (its connection broke, its
//! slot moved, its primary is down) is an error for the store to report (a
//! claim answers `503`), as a command sent again after its connection broke
//! might run twice.
//!
//! On a cluster, every command, every Lua script and every `MULTI` must name
//! keys of one hash slot. Each store's documentation says how its keys are
//! laid out for that: claims and sessions touch one key per operation (and
//! the session store groups its batched script calls by slot); the outbox
//! puts its whole state under one hash tag.
//!
//! A store of your own can use the same type: it implements redis-rs's
//! [`aio::ConnectionLike`](::redis::aio::ConnectionLike), so commands,
//! pipelines and scripts run on it as on any redis-rs connection.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use x402_core::redis_conn::{RedisConnection, Timeouts};
//!
//! # async fn run() -> Result<(), redis::RedisError> {
//! let timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_secs(1));
//! let single = RedisConnection::connect("redis://127.0.0.1:6379", timeouts).await?;
//! let cluster = RedisConnection::connect_cluster(
//!     ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"],
//!     timeouts,
//! )
//! .await?;
//! assert!(cluster.is_cluster() && !single.is_cluster());
//! # Ok(()) }
//! ```

use std::{fmt, time::Duration};

use ::redis::{
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig},
    cluster_async::ClusterConnection,
    cluster_routing::Slot,
    Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value,
};

/// Cluster requests are sent once, never again on an error (redis-rs
/// retries 16 times by default). A request whose connection broke may have
/// run or not; sent again, it could run twice: a claim's release deleting
/// the claim a retry of the payment made meanwhile (and letting its handler
/// run twice), a session redemption counted twice. The single-server
/// `ConnectionManager` never resends either. A request refused because the
/// cluster moved (`MOVED`, `ASK`, a failed primary) fails at once, and the
/// connection reads the new slot map for the requests after it.
const CLUSTER_RETRIES: u32 = 0;

/// How long a [`RedisConnection`] waits for an answer and for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long an answer is waited for.
    pub response: Duration,
    /// How long opening one connection (to one node) may take.
    pub connection: Duration,
}

impl Timeouts {
    /// `response` and `connection` timeouts.
    pub const fn new(response: Duration, connection: Duration) -> Self {
        Self {
            response,
            connection,
        }
    }
}

/// A connection to one Redis server or to a Redis Cluster, cheap to clone
/// (clones share the underlying connections). See the [module docs](self).
#[derive(Clone)]
pub struct RedisConnection {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl fmt::Debug for RedisConnection {
    // No URL: it may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.inner {
            Inner::Single(_) => "RedisConnection::Single",
            Inner::Cluster(_) => "RedisConnection::Cluster",
        })
    }
}

impl From<ConnectionManager> for RedisConnection {
    fn from(connection: ConnectionManager) -> Self {
        Self {
            inner: Inner::Single(connection),
        }
    }
}

impl From<ClusterConnection> for RedisConnection {
    fn from(connection: ClusterConnection) -> Self {
        Self {
            inner: Inner::Cluster(connection),
        }
    }
}

impl RedisConnection {
    /// Connects to the server at `url` (`redis://host:port/db`,
    /// `rediss://...`), failing if it cannot be reached now.
    pub async fn connect(url: &str, timeouts: Timeouts) -> RedisResult<Self> {
        let client = Client::open(url)?;
        let connection =
            ConnectionManager::new_with_config(client, single_config(timeouts)).await?;
        Ok(connection.into())
    }

    /// Prepares a connection to the server at `url` without opening it: the
    /// first command connects. Fails only on a malformed URL.
    pub fn connect_lazy(url: &str, timeouts: Timeouts) -> RedisResult<Self> {
        let client = Client::open(url)?;
        let connection = ConnectionManager::new_lazy_with_config(client, single_config(timeouts))?;
        Ok(connection.into())
    }

    /// Connects to the Redis Cluster that `urls` belong to (some or all of
    /// its nodes, `redis://host:port`; the others are found from them),
    /// failing if none can be reached now or the cluster's slots cannot be
    /// read.
    pub async fn connect_cluster<I>(urls: I, timeouts: Timeouts) -> RedisResult<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = cluster_client(urls, timeouts)?
            .get_async_connection()
            .await?;
        Ok(connection.into())
    }

    /// Prepares a connection to the Redis Cluster of `urls` without waiting
    /// for it: it connects in the background, and commands fail until it
    /// has. Fails only on malformed URLs. Call it inside a Tokio runtime.
    pub fn connect_cluster_lazy<I>(urls: I, timeouts: Timeouts) -> RedisResult<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = cluster_client(urls, timeouts)?
            .get_pending_async_connection_with_config(ClusterConfig::new());
        Ok(connection.into())
    }

    /// Whether this is a Redis Cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// The hash slot of `key` on a cluster; `None` on one server, where
    /// every key can be named in one script call.
    pub(crate) fn slot(&self, key: &str) -> Option<Slot> {
        self.is_cluster().then(|| Slot::for_key(key))
    }
}

fn single_config(timeouts: Timeouts) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(timeouts.response))
        .set_connection_timeout(Some(timeouts.connection))
}

fn cluster_client<I>(urls: I, timeouts: Timeouts) -> RedisResult<ClusterClient>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let urls: Vec<String> = urls
        .into_iter()
        .map(|url| url.as_ref().trim().to_owned())
        .filter(|url| !url.is_empty())
        .collect();
    if urls.is_empty() {
        return Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "no Redis Cluster node URL given",
        )));
    }
    ClusterClientBuilder::new(urls)
        .connection_timeout(timeouts.connection)
        // Per attempt, and for the whole request with its retries.
        .response_timeout(timeouts.response)
        .retries(CLUSTER_RETRIES)
        .build()
}

/// Whether `key` holds a Redis Cluster hash tag: a `{...}` with something
/// inside, the part of the key a cluster hashes to pick its slot.
#[cfg(any(feature = "webhooks", test))]
pub(crate) fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Single(c) => c.req_packed_command(cmd),
            Inner::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.inner {
            Inner::Single(c) => c.req_packed_commands(cmd, offset, count),
            Inner::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Single(c) => c.get_db(),
            Inner::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_are_recognised_as_redis_does() {
        assert!(has_hash_tag("{x402:webhooks}:"));
        assert!(has_hash_tag("shop:{w}:"));
        assert!(!has_hash_tag("x402:webhooks:"));
        // An empty tag does not count: Redis hashes the whole key.
        assert!(!has_hash_tag("{}x402:"));
        assert!(!has_hash_tag("x402:{"));
        assert!(!has_hash_tag("}x402{"));
        // Only the first `{` counts.
        assert!(!has_hash_tag("{}{x}"));
    }

    #[test]
    fn a_cluster_needs_a_node() {
        let timeouts = Timeouts::new(Duration::from_secs(1), Duration::from_secs(1));
        let none: [&str; 0] = [];
        assert!(cluster_client(none, timeouts).is_err());
        assert!(cluster_client([" ", ""], timeouts).is_err());
        assert!(cluster_client(["redis://127.0.0.1:7000"], timeouts).is_ok());
        assert!(cluster_client(["not a url"], timeouts).is_err());
    }

    #[tokio::test]
    async fn debug_shows_no_url() {
        let timeouts = Timeouts::new(Duration::from_secs(1), Duration::from_secs(1));
        let connection =
            RedisConnection::connect_lazy("redis://:hunter2@127.0.0.1:1", timeouts).unwrap();
        assert_eq!(format!("{connection:?}"), "RedisConnection::Single");
        assert!(!connection.is_cluster());
        assert_eq!(connection.slot("k"), None);
        let cluster =
            RedisConnection::connect_cluster_lazy(["redis://:hunter2@127.0.0.1:1"], timeouts)
                .unwrap();
        assert_eq!(format!("{cluster:?}"), "RedisConnection::Cluster");
        assert!(cluster.is_cluster());
        // Keys of one hash tag share a slot.
        assert_eq!(cluster.slot("{a}x"), cluster.slot("{a}y"));
        assert!(cluster.slot("k").is_some());
    }
}
