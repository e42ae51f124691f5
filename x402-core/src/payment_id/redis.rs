//! Payment ids in Redis, shared by every instance.

use std::{
    fmt,
    sync::{Arc, OnceLock},
    time::{Duration, SystemTime},
};

use ::redis::Script;
use async_trait::async_trait;

use super::{PayloadDigest, PaymentIdStore, PaymentIdStoreError, Reservation, StoredResponse};
use crate::redis_conn::{RedisConnection, Timeouts};

/// As the claim store's: calls are bounded by the engine's much shorter
/// deadline; this bounds how long a late answer is waited for.
const TIMEOUTS: Timeouts = Timeouts::new(Duration::from_secs(30), Duration::from_secs(1));

/// `KEYS[1]`: the id; `ARGV[1]`: the in-flight value; `ARGV[2]`: its expiry
/// (unix seconds). Returns the entry found, or nil once reserved.
const RESERVE_LUA: &str = r"
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'EXAT', ARGV[2])
return false
";

/// `ARGV[1]`: this payload's in-flight value; `ARGV[2]`: the settled entry;
/// `ARGV[3]`: its expiry. Stores it unless another entry holds the key.
const COMPLETE_LUA: &str = r"
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EXAT', ARGV[3])
return 1
";

/// `ARGV[1]`: this payload's in-flight value. Deletes only that.
const RELEASE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

fn script(cell: &'static OnceLock<Script>, lua: &str) -> &'static Script {
    cell.get_or_init(|| Script::new(lua))
}

static RESERVE: OnceLock<Script> = OnceLock::new();
static COMPLETE: OnceLock<Script> = OnceLock::new();
static RELEASE: OnceLock<Script> = OnceLock::new();

/// Payment ids in Redis (feature `redis`), shared by every instance that
/// uses the same server (or Redis Cluster) and prefix.
///
/// One key per id, `{prefix}{key}`: `P{digest}` while in flight, then
/// `D{digest}{response}` once settled, both with an `EXAT` expiry (Redis
/// forgets them). Every operation is one Lua script on that one key, so it
/// is atomic and lands on the key's own slot on a cluster; keep hash tags
/// out of the prefix, or every id lands on one shard.
///
/// ```no_run
/// use x402_core::payment_id::{PaymentIdentifiers, RedisPaymentIdStore};
///
/// # async fn run() -> Result<(), x402_core::payment_id::PaymentIdStoreError> {
/// let store = RedisPaymentIdStore::connect("redis://127.0.0.1:6379").await?;
/// let ids = PaymentIdentifiers::new(store);
/// // Engine::builder(...).payment_identifiers(ids)
/// # let _ = ids; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisPaymentIdStore {
    connection: RedisConnection,
    prefix: Arc<str>,
}

impl fmt::Debug for RedisPaymentIdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPaymentIdStore")
            .field("connection", &self.connection)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisPaymentIdStore {
    /// A store over an existing connection (a redis-rs `ConnectionManager`
    /// or cluster connection, or a [`RedisConnection`]).
    pub fn new(connection: impl Into<RedisConnection>) -> Self {
        Self {
            connection: connection.into(),
            prefix: Arc::from(""),
        }
    }

    /// Connects to `url`, failing if Redis cannot be reached now.
    pub async fn connect(url: &str) -> Result<Self, PaymentIdStoreError> {
        let connection = RedisConnection::connect(url, TIMEOUTS)
            .await
            .map_err(PaymentIdStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// Prepares a connection to `url` without opening it.
    pub fn connect_lazy(url: &str) -> Result<Self, PaymentIdStoreError> {
        let connection =
            RedisConnection::connect_lazy(url, TIMEOUTS).map_err(PaymentIdStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// Connects to the Redis Cluster that `urls` belong to.
    pub async fn connect_cluster<I>(urls: I) -> Result<Self, PaymentIdStoreError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster(urls, TIMEOUTS)
            .await
            .map_err(PaymentIdStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// Prefixes every key with `prefix` (e.g. `"myapp:"`).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    fn full_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

fn pending_value(digest: &PayloadDigest) -> Vec<u8> {
    let mut v = Vec::with_capacity(65);
    v.push(b'P');
    v.extend_from_slice(digest.hex().as_bytes());
    v
}

fn exat(t: SystemTime) -> Result<u64, PaymentIdStoreError> {
    match crate::unix::secs_ceil(t) {
        Some(secs) if secs > 0 && secs <= (i64::MAX as u64) / 1000 => Ok(secs),
        _ => Err(PaymentIdStoreError::InvalidExpiry),
    }
}

/// What an entry read back says for `digest`.
fn found(entry: &[u8], digest: &PayloadDigest) -> Result<Reservation, PaymentIdStoreError> {
    let hex = digest.hex();
    let (kind, rest) = entry.split_first().ok_or(PaymentIdStoreError::Corrupt)?;
    let (theirs, response) = rest
        .split_at_checked(64)
        .ok_or(PaymentIdStoreError::Corrupt)?;
    if theirs != hex.as_bytes() {
        return Ok(Reservation::Conflict);
    }
    match kind {
        b'P' => Ok(Reservation::InFlight),
        b'D' => Ok(Reservation::Stored(StoredResponse::from_bytes(response)?)),
        _ => Err(PaymentIdStoreError::Corrupt),
    }
}

#[async_trait]
impl PaymentIdStore for RedisPaymentIdStore {
    async fn reserve(
        &self,
        key: &str,
        digest: &PayloadDigest,
        pending_until: SystemTime,
    ) -> Result<Reservation, PaymentIdStoreError> {
        let mut connection = self.connection.clone();
        let entry: Option<Vec<u8>> = script(&RESERVE, RESERVE_LUA)
            .key(self.full_key(key))
            .arg(pending_value(digest))
            .arg(exat(pending_until)?)
            .invoke_async(&mut connection)
            .await
            .map_err(PaymentIdStoreError::backend)?;
        match entry {
            None => Ok(Reservation::Reserved),
            Some(entry) => found(&entry, digest),
        }
    }

    async fn complete(
        &self,
        key: &str,
        digest: &PayloadDigest,
        response: &StoredResponse,
        expires_at: SystemTime,
    ) -> Result<(), PaymentIdStoreError> {
        let mut done = Vec::with_capacity(1024);
        done.push(b'D');
        done.extend_from_slice(digest.hex().as_bytes());
        done.extend_from_slice(&response.to_bytes());
        let mut connection = self.connection.clone();
        let _stored: i64 = script(&COMPLETE, COMPLETE_LUA)
            .key(self.full_key(key))
            .arg(pending_value(digest))
            .arg(done)
            .arg(exat(expires_at)?)
            .invoke_async(&mut connection)
            .await
            .map_err(PaymentIdStoreError::backend)?;
        Ok(())
    }

    async fn release(&self, key: &str, digest: &PayloadDigest) -> Result<(), PaymentIdStoreError> {
        let mut connection = self.connection.clone();
        let _deleted: i64 = script(&RELEASE, RELEASE_LUA)
            .key(self.full_key(key))
            .arg(pending_value(digest))
            .invoke_async(&mut connection)
            .await
            .map_err(PaymentIdStoreError::backend)?;
        Ok(())
    }
}
