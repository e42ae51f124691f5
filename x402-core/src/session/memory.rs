//! Sessions in this process's memory.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;

use super::{
    BoundedRedemption, Redemption, SessionRecord, SessionStore, SessionStoreError, TokenHash,
};
use crate::swept::SweptMap;
use crate::unix::now as unix_now;

/// Sessions in this process's memory: the default store.
///
/// It serves one process only, and **loses every session when the process
/// restarts**: buyers who paid for calls they have not made yet lose them.
/// Behind a load balancer each instance would know only the sessions it
/// sold. Use a durable store shared by every instance in production
/// (`RedisSessionStore`, feature `redis`).
///
/// Cloning is cheap and shares the sessions. Redemption is atomic (one lock
/// around check and decrement). Expired sessions are swept as new ones are
/// opened, whenever the map has doubled since the last sweep, so memory stays
/// proportional to the live sessions (amortised O(1) per session).
///
/// ```
/// use x402_core::session::{
///     MemorySessionStore, Redemption, SessionRecord, SessionStore, SessionToken,
/// };
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), x402_core::session::SessionStoreError> {
/// let store = MemorySessionStore::new();
/// let token = SessionToken::generate();
/// let now = 1_700_000_000;
/// let record = SessionRecord {
///     scope: "weather".into(),
///     remaining: 2,
///     expires_at: now + 3600,
/// };
/// store.open(&token.hash(), record).await?;
/// assert_eq!(
///     store.redeem(&token.hash(), "weather", now).await?,
///     Redemption::Redeemed { remaining: 1 }
/// );
/// assert_eq!(
///     store.redeem(&token.hash(), "news", now).await?,
///     Redemption::OutOfScope
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemorySessionStore {
    sessions: Arc<Mutex<Sessions>>,
}

impl MemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sessions are held, counting expired ones not swept yet.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every expired session now (sessions are also swept as new ones
    /// are opened; calling this is never needed for correctness).
    pub fn purge_expired(&self) {
        self.lock().sweep(unix_now());
    }

    fn lock(&self) -> MutexGuard<'_, Sessions> {
        // Nothing panics while the lock is held, and every update leaves the
        // map consistent, so a poisoned lock is safe to keep using.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl SessionStore for MemorySessionStore {
    async fn open(
        &self,
        token: &TokenHash,
        record: SessionRecord,
    ) -> Result<(), SessionStoreError> {
        self.lock().open(*token, record, unix_now());
        Ok(())
    }

    async fn redeem(
        &self,
        token: &TokenHash,
        scope: &str,
        now: u64,
    ) -> Result<Redemption, SessionStoreError> {
        Ok(self.lock().redeem(token, scope, now))
    }

    /// Redeems at once, when first polled: the answer is taken in the poll
    /// that makes the redemption, so there is nothing to wait for and nothing
    /// to give back.
    fn redeem_within<'a>(
        &'a self,
        token: &'a TokenHash,
        scope: &'a str,
        now: u64,
        _deadline: Duration,
    ) -> Option<BoundedRedemption<'a>> {
        Some(Box::pin(async move {
            Ok(self.lock().redeem(token, scope, now))
        }))
    }

    async fn give_back(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        self.lock().give_back(token, unix_now());
        Ok(())
    }

    async fn close(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        self.lock().map.remove(token);
        Ok(())
    }
}

/// One session.
#[derive(Debug)]
struct State {
    scope: String,
    remaining: u64,
    /// Calls sold: `give_back` never raises `remaining` above this.
    sold: u64,
    expires_at: u64,
}

#[derive(Debug, Default)]
struct Sessions {
    map: SweptMap<TokenHash, State>,
}

impl Sessions {
    fn open(&mut self, token: TokenHash, record: SessionRecord, now: u64) {
        if !self.map.contains_key(&token) {
            self.map.make_room(now, |state| state.expires_at > now);
        }
        let SessionRecord {
            scope,
            remaining,
            expires_at,
        } = record;
        self.map.insert(
            token,
            State {
                scope,
                remaining,
                sold: remaining,
                expires_at,
            },
        );
    }

    fn redeem(&mut self, token: &TokenHash, scope: &str, now: u64) -> Redemption {
        let Some(state) = self.map.get_mut(token) else {
            return Redemption::Unknown;
        };
        if state.expires_at <= now {
            Redemption::Expired
        } else if state.scope != scope {
            Redemption::OutOfScope
        } else if state.remaining == 0 {
            Redemption::Exhausted
        } else {
            state.remaining -= 1;
            Redemption::Redeemed {
                remaining: state.remaining,
            }
        }
    }

    fn give_back(&mut self, token: &TokenHash, now: u64) {
        if let Some(state) = self.map.get_mut(token) {
            if state.expires_at > now && state.remaining < state.sold {
                state.remaining += 1;
            }
        }
    }

    /// Drops expired sessions.
    fn sweep(&mut self, now: u64) {
        self.map.sweep(now, |state| state.expires_at > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swept::MIN_SWEEP_LEN;

    fn hash(n: u64) -> TokenHash {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        TokenHash(bytes)
    }

    fn record(remaining: u64, expires_at: u64) -> SessionRecord {
        SessionRecord {
            scope: "s".into(),
            remaining,
            expires_at,
        }
    }

    #[test]
    fn memory_stays_flat_once_sessions_expire() {
        let mut sessions = Sessions::default();
        let start = 1_700_000_000;
        // 100 rounds of 1000 sessions that live 10 s, one round per second.
        for round in 0..100u64 {
            let now = start + round;
            for i in 0..1000 {
                sessions.open(hash(round * 1000 + i), record(5, now + 10), now);
            }
            // At most ~11 rounds are live; allow for the doubling.
            assert!(
                sessions.map.len() <= 2 * 11 * 1000 + MIN_SWEEP_LEN,
                "{}",
                sessions.map.len()
            );
        }
        assert!(sessions.map.capacity() <= 8 * 11 * 1000);
    }

    #[test]
    fn sweep_keeps_live_sessions() {
        let mut sessions = Sessions::default();
        let now = 1_700_000_000;
        sessions.open(hash(1), record(3, now + 5), now);
        sessions.open(hash(2), record(3, now + 50), now);
        sessions.sweep(now + 5);
        assert_eq!(sessions.map.len(), 1);
        assert_eq!(
            sessions.redeem(&hash(2), "s", now + 5),
            Redemption::Redeemed { remaining: 2 }
        );
        assert_eq!(sessions.redeem(&hash(1), "s", now + 5), Redemption::Unknown);
    }

    #[test]
    fn give_back_is_capped_and_ignores_expired_sessions() {
        let mut sessions = Sessions::default();
        let now = 1_700_000_000;
        sessions.open(hash(1), record(1, now + 5), now);
        sessions.give_back(&hash(1), now);
        assert_eq!(
            sessions.redeem(&hash(1), "s", now),
            Redemption::Redeemed { remaining: 0 }
        );
        sessions.give_back(&hash(1), now + 5);
        assert_eq!(sessions.redeem(&hash(1), "s", now), Redemption::Exhausted);
        sessions.give_back(&hash(2), now);
        assert!(!sessions.map.contains_key(&hash(2)));
    }
}
