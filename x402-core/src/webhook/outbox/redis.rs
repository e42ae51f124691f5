use std::{fmt, sync::Arc, time::Duration};

use ::redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    Client, Script,
};
use async_trait::async_trait;

use super::{DeadLetter, Outbox, OutboxError, OutboxMessage};
use crate::webhook::time::unix_millis_now;

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
/// On Redis Cluster, put the prefix in a hash tag (`{x402:webhooks}:`).
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
    connection: ConnectionManager,
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
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "x402:webhooks:";

    /// An outbox over an existing connection manager.
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            connection,
            prefix: Arc::from(Self::DEFAULT_PREFIX),
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
        let client = Client::open(url).map_err(backend)?;
        let connection = ConnectionManager::new_with_config(client, Self::config())
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Prepares a connection to `url` without opening it.
    pub fn connect_lazy(url: &str) -> Result<Self, OutboxError> {
        let client = Client::open(url).map_err(backend)?;
        let connection =
            ConnectionManager::new_lazy_with_config(client, Self::config()).map_err(backend)?;
        Ok(Self::new(connection))
    }

    fn config() -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_connection_timeout(Some(Duration::from_secs(2)))
    }

    /// Uses `prefix` for every key.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// The key prefix.
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
