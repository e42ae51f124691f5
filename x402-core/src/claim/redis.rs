//! Claims in Redis, shared by every instance.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use ::redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    Client,
};
use async_trait::async_trait;

use super::{ClaimStore, ClaimStoreError, Claimed};

/// The response timeout of the connections [`RedisClaimStore::connect`]
/// opens. Requests are bounded by the guard's much shorter deadline; this
/// only bounds how long a late answer is waited for in the background.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`RedisClaimStore::connect`] waits to open a connection.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// Replay claims in Redis (feature `redis`), shared by every instance that
/// uses the same server and prefix.
///
/// A claim is `SET {prefix}{key} 1 NX EXAT {expiry}` (atomic, and forgotten
/// by Redis when it expires); a release is `DEL`. The connection is a redis-rs
/// [`ConnectionManager`], which reconnects by itself after Redis restarts or
/// the connection drops; until then claims fail and the
/// [`ReplayGuard`](super::ReplayGuard) answers `503 claim_unavailable`.
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
    connection: ConnectionManager,
    prefix: Arc<str>,
}

impl fmt::Debug for RedisClaimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClaimStore")
            .field("connection", &format_args!("ConnectionManager"))
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisClaimStore {
    /// A store over an existing connection manager.
    ///
    /// redis-rs times out responses after 500 ms by default. When a claim
    /// answers after the guard's deadline, the guard still waits for it (to
    /// release it, since its request was refused), which needs the
    /// connection's response timeout to be longer than a Redis stall you
    /// want to survive: [`connect`](Self::connect) sets 30 s.
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            connection,
            prefix: Arc::from(""),
        }
    }

    /// Connects to `url` (`redis://host:port/db`, `rediss://...`), failing if
    /// Redis cannot be reached now. See [`connect_lazy`](Self::connect_lazy)
    /// to start without Redis.
    pub async fn connect(url: &str) -> Result<Self, ClaimStoreError> {
        let client = Client::open(url).map_err(ClaimStoreError::backend)?;
        let connection = ConnectionManager::new_with_config(client, Self::config())
            .await
            .map_err(ClaimStoreError::backend)?;
        Ok(Self::new(connection))
    }

    /// Prepares a connection to `url` without opening it: the first claim
    /// connects. Fails only on a malformed URL, so a server can start while
    /// Redis is down (claims answer `503` until it is up).
    pub fn connect_lazy(url: &str) -> Result<Self, ClaimStoreError> {
        let client = Client::open(url).map_err(ClaimStoreError::backend)?;
        let connection = ConnectionManager::new_lazy_with_config(client, Self::config())
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

    fn config() -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
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
    let since = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| ClaimStoreError::InvalidExpiry)?;
    let secs = since.as_secs() + u64::from(since.subsec_nanos() > 0);
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
        let reply: Option<String> = ::redis::cmd("SET")
            .arg(self.full_key(key))
            .arg(1)
            .arg("NX")
            .arg("EXAT")
            .arg(at)
            .query_async(&mut connection)
            .await
            .map_err(ClaimStoreError::backend)?;
        // `OK` when set, nil when the key exists.
        Ok(match reply {
            Some(_) => Claimed::Claimed,
            None => Claimed::AlreadyClaimed,
        })
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
