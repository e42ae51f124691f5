//! Claims in this process's memory.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::SystemTime,
};

use async_trait::async_trait;

use super::{ClaimStore, ClaimStoreError, Claimed};
use crate::swept::SweptMap;
use crate::unix::secs as unix_secs;

/// Replay claims in this process's memory: the default store.
///
/// It protects one process only: run several instances behind a load
/// balancer and each has its own claims, so a replay sent to another
/// instance gets through. Share a store between instances instead
/// (`RedisClaimStore`, feature `redis`).
///
/// Cloning is cheap and shares the claims. Expired claims are swept as new
/// ones arrive, whenever the map has doubled since the last sweep, so memory
/// stays proportional to the claims that are still live (amortised O(1) per
/// claim).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use x402_core::claim::{ClaimStore, Claimed, MemoryClaimStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), x402_core::claim::ClaimStoreError> {
/// let store = MemoryClaimStore::new();
/// let until = SystemTime::now() + Duration::from_secs(900);
/// assert_eq!(store.claim("k", until).await?, Claimed::Claimed);
/// assert_eq!(store.clone().claim("k", until).await?, Claimed::AlreadyClaimed);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryClaimStore {
    claims: Arc<Mutex<Claims>>,
}

impl MemoryClaimStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many claims are held, counting expired ones not swept yet.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether no claim is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every expired claim now (claims are also swept as new ones
    /// arrive; calling this is never needed for correctness).
    pub fn purge_expired(&self) {
        self.lock().sweep(SystemTime::now());
    }

    fn lock(&self) -> MutexGuard<'_, Claims> {
        // Nothing panics while the lock is held, and every update leaves the
        // map consistent, so a poisoned lock is safe to keep using.
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ClaimStore for MemoryClaimStore {
    async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
        Ok(self.lock().claim(key, expires_at, SystemTime::now()))
    }

    async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
        self.lock().map.remove(key);
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Claims {
    /// Key → when the claim expires.
    map: SweptMap<String, SystemTime>,
}

impl Claims {
    fn claim(&mut self, key: &str, expires_at: SystemTime, now: SystemTime) -> Claimed {
        if let Some(until) = self.map.get_mut(key) {
            if *until > now {
                return Claimed::AlreadyClaimed;
            }
            *until = expires_at;
            return Claimed::Claimed;
        }
        self.map.make_room(unix_secs(now), |until| *until > now);
        self.map.insert(key.to_owned(), expires_at);
        Claimed::Claimed
    }

    /// Drops expired claims.
    fn sweep(&mut self, now: SystemTime) {
        self.map.sweep(unix_secs(now), |until| *until > now);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::swept::MIN_SWEEP_LEN;

    #[test]
    fn memory_stays_flat_once_claims_expire() {
        let mut claims = Claims::default();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // 100 rounds of 1000 claims that live 10 s, one round per second.
        for round in 0..100u64 {
            let now = start + Duration::from_secs(round);
            for i in 0..1000 {
                let key = format!("k{round}:{i}");
                assert_eq!(
                    claims.claim(&key, now + Duration::from_secs(10), now),
                    Claimed::Claimed
                );
            }
            // At most ~11 rounds are live; allow for the doubling.
            assert!(
                claims.map.len() <= 2 * 11 * 1000 + MIN_SWEEP_LEN,
                "{}",
                claims.map.len()
            );
        }
        assert!(claims.map.capacity() <= 8 * 11 * 1000);
    }

    #[test]
    fn expired_claims_are_swept_every_minute() {
        let mut claims = Claims::default();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // 20 claims a second, each kept 900 s: 18 000 live once the first
        // expire. Sweeping only on doubling would let the map reach twice
        // that; the minute's sweep keeps it within a minute's inflow of it.
        for second in 0..3_000u64 {
            let now = start + Duration::from_secs(second);
            for i in 0..20 {
                let key = format!("k{second}:{i}");
                claims.claim(&key, now + Duration::from_secs(900), now);
            }
            if second >= 1_000 {
                assert!(
                    claims.map.len() <= 18_000 + 20 * 61,
                    "{} claims at {second} s",
                    claims.map.len()
                );
            }
        }
    }

    #[test]
    fn expired_claims_are_reclaimed_in_place() {
        let mut claims = Claims::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let later = now + Duration::from_secs(5);
        assert_eq!(claims.claim("k", later, now), Claimed::Claimed);
        assert_eq!(claims.claim("k", later, now), Claimed::AlreadyClaimed);
        // Exactly at the expiry the claim is over.
        assert_eq!(
            claims.claim("k", later + Duration::from_secs(5), later),
            Claimed::Claimed
        );
        assert_eq!(claims.map.len(), 1);
        claims.sweep(later + Duration::from_secs(10));
        assert!(claims.map.is_empty());
    }
}
