use std::{fmt, sync::Arc, time::Duration};

use ::redis::Script;
use async_trait::async_trait;

use super::{DeadLetter, Outbox, OutboxError, OutboxMessage};
use crate::{
    redis_conn::{has_hash_tag, RedisConnection, Timeouts},
    webhook::time::unix_millis_now,
};

/// 5 s for an answer, 2 s to connect.
const TIMEOUTS: Timeouts = Timeouts::new(Duration::from_secs(5), Duration::from_secs(2));

const PUSH: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return 1";

// KEYS: pending, processing, msg, attempts. ARGV: now ms, lease-until ms.
const CLAIM: &str = r"
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZADD', KEYS[1], ARGV[1], id)
end
while true do
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1)
  if #due == 0 then return false end
  local id = due[1]
  redis.call('ZREM', KEYS[1], id)
  local record = redis.call('HGET', KEYS[3], id)
  if record then
    redis.call('ZADD', KEYS[2], ARGV[2], id)
    local attempts = redis.call('HINCRBY', KEYS[4], id, 1)
    return {record, attempts}
  end
  redis.call('HDEL', KEYS[4], id)
end";

// KEYS: processing, msg, attempts.
const ACK: &str = r"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1";

// KEYS: processing, pending, msg. ARGV: id, due ms.
const RETRY: &str = r"
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
end
return 1";

// KEYS: processing, pending, msg, attempts, dead, dead order. ARGV: id, letter, now ms.
const BURY: &str = r"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[6], ARGV[3], ARGV[1])
return 1";

// KEYS: dead, dead order, msg, pending, attempts. ARGV: id, record, now ms.
const REDELIVER: &str = r"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
return 1";

/// A durable outbox in Redis: events accepted before a crash are delivered
/// after restart by any worker using the same key prefix.
///
/// Keys (under the prefix, `x402:webhooks:` by default): `pending` (sorted
/// set by due time), `processing` (sorted set by lease expiry), `msg` and
/// `attempts` (hashes by id), `dead` and `dead-order`. Every state change is
/// one Lua script, so a crash never leaves a message in two states or none.
///
/// On a Redis Cluster ([`connect_cluster`](Self::connect_cluster)) the
/// scripts name several of these keys, so they must share a hash slot: the
/// prefix is a hash tag, `{x402:webhooks}:` by default, and a prefix given to
/// [`with_prefix`](Self::with_prefix) that holds no tag is wrapped in one
/// (`shop:webhooks:` becomes `{shop:webhooks:}`). The whole outbox then lives
/// on one shard (one event per settlement is far below what a shard takes).
/// On one server the keys are as they always were: `x402:webhooks:pending`,
/// ...
///
/// ```no_run
/// use x402_core::webhook::outbox::RedisOutbox;
/// # async fn run() -> Result<(), x402_core::webhook::outbox::OutboxError> {
/// let outbox = RedisOutbox::connect("redis://127.0.0.1:6379")
///     .await?
///     .with_prefix("shop:webhooks:");
/// # let _ = outbox; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisOutbox {
    connection: RedisConnection,
    prefix: Arc<str>,
    scripts: Arc<Scripts>,
}

struct Scripts {
    push: Script,
    claim: Script,
    ack: Script,
    retry: Script,
    bury: Script,
    redeliver: Script,
}

impl fmt::Debug for RedisOutbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOutbox")
            .field("connection", &self.connection)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> OutboxError {
    OutboxError::Backend(Box::new(e))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RedisOutbox {
    /// The default key prefix on one server.
    pub const DEFAULT_PREFIX: &'static str = "x402:webhooks:";

    /// The default key prefix on a Redis Cluster: [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX)
    /// as a hash tag, so that every key is in one slot.
    pub const DEFAULT_CLUSTER_PREFIX: &'static str = "{x402:webhooks}:";

    /// An outbox over an existing connection (a redis-rs
    /// `ConnectionManager` or cluster connection, or a [`RedisConnection`]).
    pub fn new(connection: impl Into<RedisConnection>) -> Self {
        let connection = connection.into();
        let prefix = if connection.is_cluster() {
            Self::DEFAULT_CLUSTER_PREFIX
        } else {
            Self::DEFAULT_PREFIX
        };
        Self {
            connection,
            prefix: Arc::from(prefix),
            scripts: Arc::new(Scripts {
                push: Script::new(PUSH),
                claim: Script::new(CLAIM),
                ack: Script::new(ACK),
                retry: Script::new(RETRY),
                bury: Script::new(BURY),
                redeliver: Script::new(REDELIVER),
            }),
        }
    }

    /// Connects to `url` (`redis://host:port/db`), failing if Redis cannot be
    /// reached now.
    pub async fn connect(url: &str) -> Result<Self, OutboxError> {
        let connection = RedisConnection::connect(url, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Prepares a connection to `url` without opening it.
    pub fn connect_lazy(url: &str) -> Result<Self, OutboxError> {
        let connection = RedisConnection::connect_lazy(url, TIMEOUTS).map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Connects to the Redis Cluster that `urls` belong to (some or all of
    /// its nodes, `redis://host:port`), failing if it cannot be reached now.
    /// The prefix is [`DEFAULT_CLUSTER_PREFIX`](Self::DEFAULT_CLUSTER_PREFIX).
    pub async fn connect_cluster<I>(urls: I) -> Result<Self, OutboxError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster(urls, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// [`connect_cluster`](Self::connect_cluster) without waiting: the
    /// connection is made in the background. Fails only on malformed URLs.
    /// Call it inside a Tokio runtime.
    pub fn connect_cluster_lazy<I>(urls: I) -> Result<Self, OutboxError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster_lazy(urls, TIMEOUTS).map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Uses `prefix` for every key. On a cluster, a prefix without a hash
    /// tag is wrapped in one (`shop:` becomes `{shop:}`; an empty one
    /// becomes [`DEFAULT_CLUSTER_PREFIX`](Self::DEFAULT_CLUSTER_PREFIX)), so
    /// that every script names keys of one slot.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.prefix = if !self.connection.is_cluster() || has_hash_tag(&prefix) {
            Arc::from(prefix)
        } else if prefix.is_empty() {
            Arc::from(Self::DEFAULT_CLUSTER_PREFIX)
        } else {
            Arc::from(format!("{{{prefix}}}"))
        };
        self
    }

    /// The key prefix every key starts with (on a cluster, with its hash
    /// tag).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

#[async_trait]
impl Outbox for RedisOutbox {
    async fn push(&self, message: OutboxMessage) -> Result<(), OutboxError> {
        let record = serde_json::to_string(&message).map_err(OutboxError::Corrupt)?;
        let _: i64 = self
            .scripts
            .push
            .key(self.key("msg"))
            .key(self.key("pending"))
            .arg(&message.id)
            .arg(record)
            .arg(unix_millis_now())
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn claim(&self, lease: Duration) -> Result<Option<OutboxMessage>, OutboxError> {
        let now = unix_millis_now();
        let claimed: Option<(String, u32)> = self
            .scripts
            .claim
            .key(self.key("pending"))
            .key(self.key("processing"))
            .key(self.key("msg"))
            .key(self.key("attempts"))
            .arg(now)
            .arg(now.saturating_add(millis(lease)))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        let Some((record, attempts)) = claimed else {
            return Ok(None);
        };
        let mut message: OutboxMessage =
            serde_json::from_str(&record).map_err(OutboxError::Corrupt)?;
        message.attempts = attempts;
        Ok(Some(message))
    }

    async fn ack(&self, id: &str) -> Result<(), OutboxError> {
        let _: i64 = self
            .scripts
            .ack
            .key(self.key("processing"))
            .key(self.key("msg"))
            .key(self.key("attempts"))
            .arg(id)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn retry(&self, id: &str, delay: Duration) -> Result<(), OutboxError> {
        let _: i64 = self
            .scripts
            .retry
            .key(self.key("processing"))
            .key(self.key("pending"))
            .key(self.key("msg"))
            .arg(id)
            .arg(unix_millis_now().saturating_add(millis(delay)))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn bury(&self, letter: DeadLetter) -> Result<(), OutboxError> {
        let record = serde_json::to_string(&letter).map_err(OutboxError::Corrupt)?;
        let _: i64 = self
            .scripts
            .bury
            .key(self.key("processing"))
            .key(self.key("pending"))
            .key(self.key("msg"))
            .key(self.key("attempts"))
            .key(self.key("dead"))
            .key(self.key("dead-order"))
            .arg(&letter.message.id)
            .arg(record)
            .arg(unix_millis_now())
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, OutboxError> {
        let mut connection = self.connection.clone();
        let ids: Vec<String> = ::redis::cmd("ZRANGE")
            .arg(self.key("dead-order"))
            .arg(0)
            .arg(-1)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let records: Vec<Option<String>> = ::redis::cmd("HMGET")
            .arg(self.key("dead"))
            .arg(&ids)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        records
            .into_iter()
            .flatten()
            .map(|r| serde_json::from_str(&r).map_err(OutboxError::Corrupt))
            .collect()
    }

    async fn redeliver(&self, id: &str) -> Result<bool, OutboxError> {
        let mut connection = self.connection.clone();
        let letter: Option<String> = ::redis::cmd("HGET")
            .arg(self.key("dead"))
            .arg(id)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        let Some(letter) = letter else {
            return Ok(false);
        };
        let mut message = serde_json::from_str::<DeadLetter>(&letter)
            .map_err(OutboxError::Corrupt)?
            .message;
        message.attempts = 0;
        let record = serde_json::to_string(&message).map_err(OutboxError::Corrupt)?;
        let moved: i64 = self
            .scripts
            .redeliver
            .key(self.key("dead"))
            .key(self.key("dead-order"))
            .key(self.key("msg"))
            .key(self.key("pending"))
            .key(self.key("attempts"))
            .arg(id)
            .arg(record)
            .arg(unix_millis_now())
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(moved == 1)
    }

    async fn backlog(&self) -> Result<usize, OutboxError> {
        let mut connection = self.connection.clone();
        let (pending, processing): (usize, usize) = ::redis::pipe()
            .cmd("ZCARD")
            .arg(self.key("pending"))
            .cmd("ZCARD")
            .arg(self.key("processing"))
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(pending + processing)
    }
}
