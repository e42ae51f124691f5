//! Claims in this process's memory.

use std::{
    hash::{BuildHasher, Hasher, RandomState},
    sync::Arc,
    time::SystemTime,
};

use async_trait::async_trait;

use super::{
    table::{Digest, Shards, Until, SHARDS, SLOT_BYTES},
    ClaimStore, ClaimStoreError, Claimed,
};
use crate::unix::secs as unix_secs;

/// A store's digest of a claim key: 64 bits of SipHash under a key drawn
/// at random when the store is made. Nobody outside the process knows it,
/// so nobody can aim two claim keys at one digest; and a collision could
/// only refuse a payment as a replay, never let a replay through (the same
/// key always gives the same digest). By chance, with a million live
/// claims, one payment in 18 trillion would be refused so. It costs a
/// fraction of the Keccak-256 of the key that it replaced.
#[derive(Clone, Default)]
struct Digester(RandomState);

impl Digester {
    fn digest(&self, key: &str) -> Digest {
        let mut hasher = self.0.build_hasher();
        hasher.write(key.as_bytes());
        hasher.finish().to_le_bytes()
    }
}

impl std::fmt::Debug for Digester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Digester(..)")
    }
}

/// When a claim expires, in whole Unix seconds rounded up (so a claim never
/// ends early); `u32` lasts until 2106, and later times are kept as its
/// maximum (the claim then outlives its expiry, which a store may).
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
/// Cloning is cheap and shares the claims. Expired claims are dropped as new
/// ones arrive (whenever a shard fills, and at least once a minute), so
/// memory stays proportional to the claims that are still live (amortised
/// O(1) per claim).
///
/// A claim takes one 12-byte slot: the key kept as an 8-byte digest (a
/// SipHash under a random key of this store, so that nobody can aim
/// collisions at it) and the expiry as whole seconds, not as strings. The
/// slots are 58 % to 88 % used, so a live claim costs 14 to 21 bytes
/// ([`heap_bytes`](Self::heap_bytes)). The claims are split into 16
/// shards, each with its own lock and grown on its own, so concurrent
/// claims rarely wait for each other and growing never copies the whole
/// store at once.
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
    claims: Arc<Shards>,
    // Cloned with the store: its clones share the claims, so they must
    // digest keys alike.
    digester: Digester,
}

impl MemoryClaimStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many claims are held, counting expired ones not dropped yet.
    pub fn len(&self) -> usize {
        let mut len = 0;
        self.claims.each(|shard| len += shard.len());
        len
    }

    /// Whether no claim is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The heap memory the claims take now: every shard's slots (each a
    /// digest and an expiry, 12 bytes), used or not.
    pub fn heap_bytes(&self) -> usize {
        let mut bytes = 0;
        self.claims.each(|shard| bytes += shard.heap_bytes());
        bytes
    }

    /// Drops every expired claim now (claims are also swept as new ones
    /// arrive; calling this is never needed for correctness).
    pub fn purge_expired(&self) {
        let now = unix_secs(SystemTime::now());
        self.claims.each(|shard| shard.sweep(now, false));
    }

    fn claim_at(&self, key: &str, expires_at: SystemTime, now: SystemTime) -> Claimed {
        let key = self.digester.digest(key);
        self.claims
            .of(&key)
            .claim(key, until(expires_at), unix_secs(now))
    }
}

#[async_trait]
impl ClaimStore for MemoryClaimStore {
    async fn claim(&self, key: &str, expires_at: SystemTime) -> Result<Claimed, ClaimStoreError> {
        Ok(self.claim_at(key, expires_at, SystemTime::now()))
    }

    fn claim_now(
        &self,
        key: &str,
        expires_at: SystemTime,
    ) -> Option<Result<Claimed, ClaimStoreError>> {
        Some(Ok(self.claim_at(key, expires_at, SystemTime::now())))
    }

    async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
        let key = self.digester.digest(key);
        self.claims.of(&key).release(&key);
        Ok(())
    }
}

// The accounting assumes a slot is exactly a digest and an expiry.
const _: () = assert!(SLOT_BYTES == 12 && SHARDS.is_power_of_two());

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::swept::MIN_SWEEP_LEN;

    fn store() -> MemoryClaimStore {
        MemoryClaimStore::new()
    }

    #[test]
    fn a_store_and_its_clones_digest_alike_and_other_stores_do_not() {
        let (a, b) = (store(), store());
        let key = "x402:eip155:84532:0x036c:0x857b:0xf374";
        assert_eq!(a.digester.digest(key), a.clone().digester.digest(key));
        assert_eq!(a.digester.digest(key), a.digester.digest(key));
        assert_ne!(a.digester.digest(key), b.digester.digest(key));
        // Keys one byte apart land apart.
        assert_ne!(a.digester.digest("k1"), a.digester.digest("k2"));
    }

    #[test]
    fn memory_stays_flat_once_claims_expire() {
        let claims = store();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // 100 rounds of 1000 claims that live 10 s, one round per second.
        for round in 0..100u64 {
            let now = start + Duration::from_secs(round);
            for i in 0..1000 {
                let key = format!("k{round}:{i}");
                assert_eq!(
                    claims.claim_at(&key, now + Duration::from_secs(10), now),
                    Claimed::Claimed
                );
            }
            // At most ~11 rounds are live; allow for a shard filling up
            // before its expired claims are dropped.
            assert!(
                claims.len() <= 2 * 11 * 1000 + MIN_SWEEP_LEN,
                "{}",
                claims.len()
            );
        }
        assert!(claims.heap_bytes() <= 8 * 11 * 1000 * SLOT_BYTES);
    }

    #[test]
    fn expired_claims_are_swept_every_minute() {
        let claims = store();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // 20 claims a second, each kept 900 s: 18 000 live once the first
        // expire. Dropping them only when a shard fills would let the store
        // reach half as much again; the minute's sweep keeps it within a
        // minute's inflow of it.
        for second in 0..3_000u64 {
            let now = start + Duration::from_secs(second);
            for i in 0..20 {
                let key = format!("k{second}:{i}");
                claims.claim_at(&key, now + Duration::from_secs(900), now);
            }
            if second >= 1_000 {
                assert!(
                    claims.len() <= 18_000 + 20 * 61,
                    "{} claims at {second} s",
                    claims.len()
                );
            }
        }
    }

    #[test]
    fn expired_claims_are_reclaimed_in_place() {
        let claims = store();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let later = now + Duration::from_secs(5);
        assert_eq!(claims.claim_at("k", later, now), Claimed::Claimed);
        assert_eq!(claims.claim_at("k", later, now), Claimed::AlreadyClaimed);
        // Exactly at the expiry the claim is over.
        assert_eq!(
            claims.claim_at("k", later + Duration::from_secs(5), later),
            Claimed::Claimed
        );
        assert_eq!(claims.len(), 1);
        let mut shard = claims.claims.of(&claims.digester.digest("k"));
        let secs = unix_secs(later + Duration::from_secs(10));
        shard.sweep(secs, false);
        assert_eq!(shard.len(), 0);
    }

    #[test]
    fn a_claim_never_ends_early() {
        let claims = store();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // Expires half a second in: rounded up to the next second.
        let expiry = now + Duration::from_millis(500);
        assert_eq!(claims.claim_at("k", expiry, now), Claimed::Claimed);
        assert_eq!(
            claims.claim_at("k", expiry, now + Duration::from_millis(499)),
            Claimed::AlreadyClaimed
        );
        assert_eq!(
            claims.claim_at("k", expiry, now + Duration::from_secs(1)),
            Claimed::Claimed
        );
        // Beyond 2106: kept as long as a u32 can say, not wrapped.
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) + 10);
        assert_eq!(until(far), u32::MAX);
    }

    #[test]
    fn threads_racing_for_keys_while_shards_grow_get_one_winner_each() {
        // Four threads claim the same 20 000 keys (each in its own order),
        // while the shards grow from empty: every key is won exactly once.
        const KEYS: usize = 20_000;
        let claims = store();
        let now = SystemTime::now();
        let until = now + Duration::from_secs(900);
        let wins: Vec<usize> = std::thread::scope(|scope| {
            let runners: Vec<_> = (0..4)
                .map(|t| {
                    let claims = claims.clone();
                    scope.spawn(move || {
                        (0..KEYS)
                            .map(|i| (i * 7 + t * 5_003) % KEYS)
                            .filter(|i| {
                                claims.claim_at(&format!("k{i}"), until, now) == Claimed::Claimed
                            })
                            .count()
                    })
                })
                .collect();
            runners.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(wins.iter().sum::<usize>(), KEYS, "{wins:?}");
        assert_eq!(claims.len(), KEYS);
    }

    #[tokio::test]
    async fn a_released_claim_can_be_taken_again() {
        let claims = store();
        let until = SystemTime::now() + Duration::from_secs(900);
        for i in 0..5_000 {
            let key = format!("k{i}");
            assert_eq!(claims.claim(&key, until).await.unwrap(), Claimed::Claimed);
        }
        for i in (0..5_000).step_by(2) {
            claims.release(&format!("k{i}")).await.unwrap();
        }
        assert_eq!(claims.len(), 2_500);
        for i in 0..5_000 {
            let want = if i % 2 == 0 {
                Claimed::Claimed
            } else {
                Claimed::AlreadyClaimed
            };
            assert_eq!(claims.claim(&format!("k{i}"), until).await.unwrap(), want);
        }
    }
}
