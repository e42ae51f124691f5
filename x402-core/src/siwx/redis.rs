//! The sign-in-with-x store in Redis, on one server or a Redis Cluster.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::{SignInStore, SignInStoreError};
use crate::redis_conn::{RedisConnection, Timeouts};

const TIMEOUTS: Timeouts = Timeouts::new(Duration::from_secs(30), Duration::from_secs(1));

/// [`SignInStore`] in Redis (feature `redis`), shared by every instance
/// using the same server (or cluster) and prefix.
///
/// Each operation is one command on one key, so it runs as it is on a
/// Redis Cluster:
/// - a paid access is `SET {prefix}x402:siwx:paid:{route hash}:{address} 1 EXAT {expiry}`
///   (the route's pattern is hashed, 16 hex digits, so that no `{...}` in it
///   becomes a hash tag), read with `EXISTS`;
/// - a used nonce is `SET {prefix}x402:siwx:nonce:{nonce} 1 NX EXAT {expiry}`:
///   atomic, and forgotten by Redis when the nonce could no longer be used.
///
/// The engine bounds every call with its sign-in deadline and answers `503
/// siwx_unavailable` when the store fails or is late.
#[derive(Clone)]
pub struct RedisSignInStore {
    connection: RedisConnection,
    prefix: Arc<str>,
}

impl fmt::Debug for RedisSignInStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSignInStore")
            .field("connection", &self.connection)
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn backend(e: redis::RedisError) -> SignInStoreError {
    SignInStoreError::Backend(Box::new(e))
}

impl RedisSignInStore {
    /// A store over an existing connection.
    pub fn new(connection: impl Into<RedisConnection>) -> Self {
        Self {
            connection: connection.into(),
            prefix: Arc::from(""),
        }
    }

    /// Connects to `url` (`redis://host:port/db`), failing if Redis cannot
    /// be reached now.
    pub async fn connect(url: &str) -> Result<Self, SignInStoreError> {
        let connection = RedisConnection::connect(url, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Connects to the Redis Cluster that `urls` belong to.
    pub async fn connect_cluster<I>(urls: I) -> Result<Self, SignInStoreError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let connection = RedisConnection::connect_cluster(urls, TIMEOUTS)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Prefixes every key with `prefix` (e.g. `"myapp:"`).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    fn access_key(&self, route: &str, address: &str) -> String {
        let hash = Sha256::digest(route.as_bytes());
        format!(
            "{}x402:siwx:paid:{}:{address}",
            self.prefix,
            alloy_primitives::hex::encode(&hash[..8])
        )
    }
}

#[async_trait]
impl SignInStore for RedisSignInStore {
    async fn record_access(
        &self,
        route: &str,
        address: &str,
        expires_at: u64,
    ) -> Result<(), SignInStoreError> {
        let mut c = self.connection.clone();
        redis::cmd("SET")
            .arg(self.access_key(route, address))
            .arg(1)
            .arg("EXAT")
            .arg(expires_at.max(1))
            .query_async::<()>(&mut c)
            .await
            .map_err(backend)
    }

    async fn has_access(
        &self,
        route: &str,
        address: &str,
        _now: u64,
    ) -> Result<bool, SignInStoreError> {
        let mut c = self.connection.clone();
        let n: u64 = redis::cmd("EXISTS")
            .arg(self.access_key(route, address))
            .query_async(&mut c)
            .await
            .map_err(backend)?;
        Ok(n > 0)
    }

    async fn use_nonce(&self, nonce: &str, expires_at: u64) -> Result<bool, SignInStoreError> {
        let mut c = self.connection.clone();
        // Expired at once if the nonce already was: EXAT in the past would be
        // refused, so keep it for at least a second.
        let expires_at = expires_at.max(crate::unix::now() + 1);
        let set: Option<String> = redis::cmd("SET")
            .arg(format!("{}x402:siwx:nonce:{nonce}", self.prefix))
            .arg(1)
            .arg("NX")
            .arg("EXAT")
            .arg(expires_at)
            .query_async(&mut c)
            .await
            .map_err(backend)?;
        Ok(set.is_some())
    }
}
