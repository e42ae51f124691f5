//! Claims in this process's memory.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::SystemTime,
};

use alloy_primitives::keccak256;
use async_trait::async_trait;

use super::{ClaimStore, ClaimStoreError, Claimed};
use crate::swept::SweptMap;
use crate::unix::secs as unix_secs;

/// What a claim is stored under: the first 16 bytes of the key's
/// Keccak-256. Two keys share a digest with probability about 2⁻¹²⁸ per
/// pair (2⁻⁶⁴ only after 2³² live claims), far below any other failure.
type Digest = [u8; 16];

/// When a claim expires, in whole Unix seconds rounded up (so a claim never
/// ends early); `u32` lasts until 2106, and later times are kept as its
/// maximum (the claim then outlives its expiry, which a store may).
type Until = u32;

fn digest(key: &str) -> Digest {
    let hash = keccak256(key.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&hash[..16]);
    out
}

fn until(t: SystemTime) -> Until {
    let secs = crate::unix::secs_ceil(t).unwrap_or(0);
    Until::try_from(secs).unwrap_or(Until::MAX)
}

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
/// A claim takes 20 bytes of table plus hashing overhead, about 40 to 50
/// bytes in all ([`heap_bytes`](Self::heap_bytes)): the key is kept as a
/// 16-byte digest (the first half of its Keccak-256) and the expiry as whole
/// seconds, not as strings.
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

    /// The heap memory the claims take now: the hash table's buckets (each
    /// a digest, an expiry and a control byte) for the capacity it holds.
    pub fn heap_bytes(&self) -> usize {
        let claims = self.lock();
        table_bytes(claims.map.capacity())
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

    fn claim_now(
        &self,
        key: &str,
        expires_at: SystemTime,
    ) -> Option<Result<Claimed, ClaimStoreError>> {
        Some(Ok(self.lock().claim(key, expires_at, SystemTime::now())))
    }

    async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
        let key = digest(key);
        self.lock().map.remove(&key);
        Ok(())
    }
}

/// The bytes of a hashbrown table that holds `capacity` entries: a power of
/// two of buckets at most 7/8 full, each an entry and a control byte.
fn table_bytes(capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        capacity.next_power_of_two().max(4)
    } else {
        (capacity.saturating_mul(8) / 7).next_power_of_two()
    };
    buckets.saturating_mul(std::mem::size_of::<(Digest, Until)>() + 1)
}

#[derive(Debug, Default)]
struct Claims {
    /// Key digest → when the claim expires.
    map: SweptMap<Digest, Until>,
}

impl Claims {
    fn claim(&mut self, key: &str, expires_at: SystemTime, now: SystemTime) -> Claimed {
        let key = digest(key);
        let expires = until(expires_at);
        let now = unix_secs(now);
        let live = |until: &Until| u64::from(*until) > now;
        if let Some(until) = self.map.get_mut(&key) {
            if live(until) {
                return Claimed::AlreadyClaimed;
            }
            *until = expires;
            return Claimed::Claimed;
        }
        self.map.make_room(now, live);
        self.map.insert(key, expires);
        Claimed::Claimed
    }

    /// Drops expired claims.
    fn sweep(&mut self, now: SystemTime) {
        let now = unix_secs(now);
        self.map.sweep(now, |until| u64::from(*until) > now);
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

    #[test]
    fn a_claim_never_ends_early() {
        let mut claims = Claims::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // Expires half a second in: rounded up to the next second.
        let expiry = now + Duration::from_millis(500);
        assert_eq!(claims.claim("k", expiry, now), Claimed::Claimed);
        assert_eq!(
            claims.claim("k", expiry, now + Duration::from_millis(499)),
            Claimed::AlreadyClaimed
        );
        assert_eq!(
            claims.claim("k", expiry, now + Duration::from_secs(1)),
            Claimed::Claimed
        );
        // Beyond 2106: kept as long as a u32 can say, not wrapped.
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) + 10);
        assert_eq!(until(far), u32::MAX);
    }

    #[test]
    fn the_accounting_matches_the_table() {
        // A claim is a 16-byte digest and a 4-byte expiry, plus a control byte.
        assert_eq!(std::mem::size_of::<(Digest, Until)>(), 20);
        assert_eq!(table_bytes(0), 0);
        assert_eq!(table_bytes(3), 4 * 21);
        assert_eq!(table_bytes(14), 16 * 21);
        assert_eq!(table_bytes(917_504), (1 << 20) * 21);
    }
}
