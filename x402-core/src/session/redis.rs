//! Sessions in Redis, shared by every instance.

use std::{
    fmt,
    sync::{Arc, OnceLock},
    time::Duration,
};

use ::redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    Client, RedisError, Script,
};
use async_trait::async_trait;

use super::{Redemption, SessionRecord, SessionStore, SessionStoreError, TokenHash};
use crate::unix::now as unix_now;

/// The default key prefix.
const DEFAULT_PREFIX: &str = "x402:session:";

/// Redis forgets a session this long after it expires, so that a redemption
/// just after the expiry answers `Expired` rather than `Unknown`.
const EXPIRY_GRACE_SECS: u64 = 60;

/// The largest time `EXPIREAT` accepts (unix seconds).
const MAX_EXPIREAT: u64 = (i64::MAX as u64) / 1000;

/// The response timeout of the connections [`RedisSessionStore::connect`]
/// opens.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`RedisSessionStore::connect`] waits to open a connection.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// Redeems one call. `KEYS[1]`: the session; `ARGV[1]`: the scope;
/// `ARGV[2]`: now (unix seconds). Returns the calls left (≥ 0) or a refusal:
/// -1 unknown, -2 expired, -3 out of scope, -4 exhausted.
const REDEEM_LUA: &str = r"
local h = redis.call('HMGET', KEYS[1], 'scope', 'remaining', 'expires_at')
if not h[1] or not h[2] or not h[3] then return -1 end
if tonumber(h[3]) <= tonumber(ARGV[2]) then return -2 end
if h[1] ~= ARGV[1] then return -3 end
if tonumber(h[2]) <= 0 then return -4 end
return redis.call('HINCRBY', KEYS[1], 'remaining', -1)
";

/// Gives one call back, if the session exists, has not expired and has
/// fewer calls left than were sold. `KEYS[1]`: the session; `ARGV[1]`: now
/// (unix seconds). Returns 1 if a call was given back, else 0.
const GIVE_BACK_LUA: &str = r"
local h = redis.call('HMGET', KEYS[1], 'remaining', 'sold', 'expires_at')
if not h[1] or not h[2] or not h[3] then return 0 end
if tonumber(h[3]) <= tonumber(ARGV[1]) then return 0 end
if tonumber(h[1]) >= tonumber(h[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'remaining', 1)
return 1
";

fn redeem_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(REDEEM_LUA))
}

fn give_back_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(GIVE_BACK_LUA))
}

/// Sessions in Redis (feature `redis`), shared by every instance that uses
/// the same server and prefix.
///
/// A session is a hash at `{prefix}{sha256 of the token, hex}` with the
/// fields `scope`, `remaining`, `sold` and `expires_at`; Redis deletes it
/// (`EXPIREAT`) a minute after it expires. A redemption is one Lua script
/// (check and decrement), so instances sharing the server never redeem more
/// calls than were sold. The token itself is never sent to Redis.
///
/// The connection is a redis-rs [`ConnectionManager`], which reconnects by
/// itself after Redis restarts or the connection drops; until then the store
/// answers [`SessionStoreError`].
///
/// ```no_run
/// use x402_core::session::{RedisSessionStore, SessionStoreError};
///
/// # async fn run() -> Result<(), SessionStoreError> {
/// let store = RedisSessionStore::connect("redis://127.0.0.1:6379")
///     .await?
///     .prefix("shop:session:");
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisSessionStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
}

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("connection", &format_args!("ConnectionManager"))
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisSessionStore {
    /// A store over an existing connection manager, with the key prefix
    /// `x402:session:`.
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            connection,
            prefix: Arc::from(DEFAULT_PREFIX),
        }
    }

    /// Connects to `url` (`redis://host:port/db`, `rediss://...`), failing if
    /// Redis cannot be reached now (after redis-rs's few retries, which take
    /// some seconds). Each connection attempt times out after 1 s, and each
    /// answer after 2 s ([`SessionStoreError::Timeout`]).
    pub async fn connect(url: &str) -> Result<Self, SessionStoreError> {
        let client = Client::open(url).map_err(backend)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECTION_TIMEOUT));
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(backend)?;
        Ok(Self::new(connection))
    }

    /// Prefixes every key with `prefix` instead of `x402:session:`, to share
    /// a Redis database with other data or other applications.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    fn key(&self, token: &TokenHash) -> String {
        let mut key = String::with_capacity(self.prefix.len() + 64);
        key.push_str(&self.prefix);
        key.push_str(&token.to_hex());
        key
    }
}

fn backend(error: RedisError) -> SessionStoreError {
    if error.is_timeout() {
        SessionStoreError::Timeout
    } else {
        SessionStoreError::Backend(Box::new(error))
    }
}

/// The script's answer to a redemption.
fn redemption(reply: i64) -> Result<Redemption, SessionStoreError> {
    Ok(match reply {
        -1 => Redemption::Unknown,
        -2 => Redemption::Expired,
        -3 => Redemption::OutOfScope,
        -4 => Redemption::Exhausted,
        n => match u64::try_from(n) {
            Ok(remaining) => Redemption::Redeemed { remaining },
            Err(_) => {
                return Err(SessionStoreError::Backend(
                    format!("unexpected reply {n} from the session redeem script").into(),
                ))
            }
        },
    })
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    async fn open(
        &self,
        token: &TokenHash,
        record: SessionRecord,
    ) -> Result<(), SessionStoreError> {
        // HINCRBY works on signed 64-bit integers.
        if i64::try_from(record.remaining).is_err() {
            return Err(SessionStoreError::Backend(
                "a Redis session holds at most i64::MAX calls".into(),
            ));
        }
        let key = self.key(token);
        let forget_at = record
            .expires_at
            .saturating_add(EXPIRY_GRACE_SECS)
            .min(MAX_EXPIREAT);
        let mut connection = self.connection.clone();
        ::redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(&key)
            .arg("scope")
            .arg(&record.scope)
            .arg("remaining")
            .arg(record.remaining)
            .arg("sold")
            .arg(record.remaining)
            .arg("expires_at")
            .arg(record.expires_at)
            .ignore()
            .cmd("EXPIREAT")
            .arg(&key)
            .arg(forget_at)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(backend)
    }

    async fn redeem(
        &self,
        token: &TokenHash,
        scope: &str,
        now: u64,
    ) -> Result<Redemption, SessionStoreError> {
        let mut connection = self.connection.clone();
        let reply: i64 = redeem_script()
            .key(self.key(token))
            .arg(scope)
            .arg(now)
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        redemption(reply)
    }

    async fn give_back(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        let mut connection = self.connection.clone();
        let _given: i64 = give_back_script()
            .key(self.key(token))
            .arg(unix_now())
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_replies_map_to_redemptions() {
        assert_eq!(redemption(-1).ok(), Some(Redemption::Unknown));
        assert_eq!(redemption(-2).ok(), Some(Redemption::Expired));
        assert_eq!(redemption(-3).ok(), Some(Redemption::OutOfScope));
        assert_eq!(redemption(-4).ok(), Some(Redemption::Exhausted));
        assert_eq!(
            redemption(0).ok(),
            Some(Redemption::Redeemed { remaining: 0 })
        );
        assert_eq!(
            redemption(41).ok(),
            Some(Redemption::Redeemed { remaining: 41 })
        );
        assert!(redemption(-5).is_err());
    }
}
