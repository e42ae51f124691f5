//! Channel state in Redis, shared by every instance and kept across
//! restarts.

use std::{fmt, sync::Arc, sync::OnceLock, time::Duration};

use ::redis::{AsyncCommands, Script};
use alloy_primitives::B256;

use super::{ChannelRecord, ChannelStore, ChannelStoreError};
use crate::redis_conn::{RedisConnection, Timeouts};

const DEFAULT_PREFIX: &str = "x402:batch:";
const TIMEOUTS: Timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_secs(1));

/// Swaps one record at the revision read: `KEYS[1]` the record's hash,
/// `ARGV[1]` the expected revision (`""`: none), `ARGV[2]` the new revision,
/// `ARGV[3]` the new record (`""`: delete). One key, so it runs on a cluster.
const SWAP_LUA: &str = r"
local current = redis.call('HGET', KEYS[1], 'rev')
if (current or '') ~= ARGV[1] then return 0 end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'data', ARGV[3])
end
return 1
";

fn swap_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(SWAP_LUA))
}

/// Channel state in Redis (one server or a Redis Cluster): a hash per
/// channel (`{prefix}{channel id}`: its revision and JSON record), swapped
/// by a one-key script, and a set of channel ids (`{prefix}channels`) for
/// the claimer. Records have no expiry: a channel's state is money owed
/// until it is claimed; full refunds delete it.
#[derive(Clone)]
pub struct RedisChannelStore {
    connection: RedisConnection,
    prefix: Arc<str>,
}

impl fmt::Debug for RedisChannelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisChannelStore")
            .field("connection", &self.connection)
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn backend(e: ::redis::RedisError) -> ChannelStoreError {
    ChannelStoreError::Backend(Box::new(e))
}

impl RedisChannelStore {
    /// A store over an existing connection, with the key prefix
    /// `x402:batch:`.
    pub fn new(connection: impl Into<RedisConnection>) -> Self {
        Self {
            connection: connection.into(),
            prefix: Arc::from(DEFAULT_PREFIX),
        }
    }

    /// Connects to `url`, failing if Redis cannot be reached now (1 s to
    /// connect, 2 s per answer).
    pub async fn connect(url: &str) -> Result<Self, ChannelStoreError> {
        let connection = RedisConnection::connect(url, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Connects to the Redis Cluster `urls` belong to.
    pub async fn connect_cluster<I>(urls: I) -> Result<Self, ChannelStoreError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster(urls, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Prefixes every key with `prefix` instead of `x402:batch:`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    fn key(&self, id: &B256) -> String {
        format!("{}{id:x}", self.prefix)
    }

    fn index(&self) -> String {
        format!("{}channels", self.prefix)
    }

    async fn read(&self, key: &str) -> Result<Option<ChannelRecord>, ChannelStoreError> {
        let mut connection = self.connection.clone();
        let data: Option<String> = connection.hget(key, "data").await.map_err(backend)?;
        data.map(|d| serde_json::from_str(&d).map_err(ChannelStoreError::Corrupt))
            .transpose()
    }
}

#[async_trait::async_trait]
impl ChannelStore for RedisChannelStore {
    async fn load(&self, id: &B256) -> Result<Option<ChannelRecord>, ChannelStoreError> {
        self.read(&self.key(id)).await
    }

    async fn swap(
        &self,
        id: &B256,
        expected: Option<u64>,
        new: Option<&ChannelRecord>,
    ) -> Result<bool, ChannelStoreError> {
        let key = self.key(id);
        let data = match new {
            Some(r) => serde_json::to_string(r).map_err(ChannelStoreError::Corrupt)?,
            None => String::new(),
        };
        let mut connection = self.connection.clone();
        let swapped: i64 = swap_script()
            .key(&key)
            .arg(expected.map(|r| r.to_string()).unwrap_or_default())
            .arg(new.map(|r| r.revision.to_string()).unwrap_or_default())
            .arg(data)
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        if swapped != 1 {
            return Ok(false);
        }
        let index = self.index();
        let id_hex = format!("{id:x}");
        match (expected, new) {
            (None, Some(_)) => {
                let _: i64 = connection.sadd(index, id_hex).await.map_err(backend)?;
            }
            (Some(_), None) => {
                let _: i64 = connection.srem(index, id_hex).await.map_err(backend)?;
            }
            _ => {}
        }
        Ok(true)
    }

    async fn list(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError> {
        let mut connection = self.connection.clone();
        let ids: Vec<String> = connection.smembers(self.index()).await.map_err(backend)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let key = format!("{}{id}", self.prefix);
            if let Some(record) = self.read(&key).await? {
                out.push(record);
            }
        }
        Ok(out)
    }
}
