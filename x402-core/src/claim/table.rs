//! The in-memory claim store's table: open addressing over 12-byte slots
//! (a key digest and an expiry), split into shards.
//!
//! Why not a `HashMap`: a `hashbrown` table doubles, so right after it grows
//! it is less than half full, and while it grows the old and the new table
//! are both allocated (a store of 60 000 claims briefly held 4 MB for 1.2 MB
//! of claims). Here each shard grows by half when it is 7/8 full, so the
//! slots are 58 % to 88 % used, and a shard is rebuilt alone, so the
//! moment of growth costs one shard's table, not the whole store's.
//!
//! The digest is a keyed 64-bit hash, uniformly distributed, so its bits
//! are used as they are: the low byte picks the shard, the high bits place
//! a key in its shard's table (see `Table::home`).

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::Claimed;
use crate::swept::{MIN_SWEEP_LEN, SWEEP_EVERY_SECS};

/// What a claim is stored under: a 64-bit keyed digest of its key (see
/// `memory::Digester`), as bytes so that a slot has no padding.
pub(super) type Digest = [u8; 8];

/// When a claim ends, in whole Unix seconds; 0 marks an empty slot (a real
/// claim is stored with at least 1, which has long passed).
pub(super) type Until = u32;

/// How many shards a store has (a power of two).
pub(super) const SHARDS: usize = 16;

/// The smallest table a shard allocates.
const MIN_SLOTS: usize = 16;

/// One claim: 12 bytes, no padding.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    digest: Digest,
    until: Until,
}

/// The bytes one slot takes.
pub(super) const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// The shards of one store.
#[derive(Debug, Default)]
pub(super) struct Shards([Shard; SHARDS]);

/// A shard's lock and table header, on cache lines of their own (two, for
/// the adjacent-line prefetcher): every claim locks and writes one, from
/// whichever core runs it, and neighbouring shards packed together would
/// make claims of different shards on different cores take each other's
/// lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<Table>);

impl Shards {
    /// The shard that holds `digest`.
    pub(super) fn of(&self, digest: &Digest) -> MutexGuard<'_, Table> {
        lock(&self.0[usize::from(digest[0]) % SHARDS].0)
    }

    /// Every shard, in turn (each locked only while `f` looks at it).
    pub(super) fn each(&self, mut f: impl FnMut(&mut Table)) {
        for shard in &self.0 {
            f(&mut lock(&shard.0));
        }
    }
}

fn lock(shard: &Mutex<Table>) -> MutexGuard<'_, Table> {
    // Nothing panics while a shard is locked, and every update leaves it
    // consistent, so a poisoned lock is safe to keep using.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One shard: linear probing, at most 7/8 full (so a probe always ends at
/// an empty slot), expired claims dropped when it is rebuilt.
#[derive(Default)]
pub(super) struct Table {
    slots: Box<[Slot]>,
    /// Slots in use, expired or not.
    len: usize,
    /// When expired claims were last dropped, in Unix seconds.
    swept_at: u64,
}

impl std::fmt::Debug for Table {
    // Sizes only: a store's Debug must not list its claims.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("len", &self.len)
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl Table {
    /// Claims held, counting expired ones not dropped yet.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The bytes of the table.
    pub(super) fn heap_bytes(&self) -> usize {
        self.slots.len() * SLOT_BYTES
    }

    /// Claims `digest` until `until` at `now` (Unix seconds): taken unless a
    /// live claim holds it; an expired one is taken over in place.
    pub(super) fn claim(&mut self, digest: Digest, until: Until, now: u64) -> Claimed {
        let until = until.max(1);
        let empty = match self.probe(&digest) {
            Ok(i) => {
                let slot = &mut self.slots[i];
                if u64::from(slot.until) > now {
                    return Claimed::AlreadyClaimed;
                }
                slot.until = until;
                return Claimed::Claimed;
            }
            Err(empty) => empty,
        };
        let full = (self.len + 1) * 8 > self.slots.len() * 7;
        let due = self.len >= MIN_SWEEP_LEN / SHARDS
            && now >= self.swept_at.saturating_add(SWEEP_EVERY_SECS);
        let i = if full || due {
            // The slots may have moved: look again.
            self.sweep(now, full);
            self.empty_for(&digest)
        } else {
            empty
        };
        self.slots[i] = Slot { digest, until };
        self.len += 1;
        Claimed::Claimed
    }

    /// Forgets the claim on `digest`, if any.
    pub(super) fn release(&mut self, digest: &Digest) {
        let Some(mut hole) = self.find(digest) else {
            return;
        };
        // Backward-shift deletion: pull later members of the probe run into
        // the hole when their home slot allows, so that no lookup stops
        // early at it.
        let n = self.slots.len();
        let mut j = hole;
        loop {
            j = if j + 1 == n { 0 } else { j + 1 };
            if self.slots[j].until == 0 {
                break;
            }
            let home = self.home(&self.slots[j].digest);
            // Whether `home` lies cyclically in (hole, j]: then slot j must
            // stay where it is.
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = Slot::default();
        self.len -= 1;
    }

    /// Drops the claims that ended by `now`, and sizes the table for the
    /// rest: room for half as many again, so that it grows by half when it
    /// fills. Unless `force`, a table with nothing expired is left as is.
    pub(super) fn sweep(&mut self, now: u64, force: bool) {
        self.swept_at = now;
        let live = self.live(now);
        if !force && live == self.len {
            return;
        }
        let want = ((live + 1) * 12 / 7).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); want].into());
        self.len = 0;
        for slot in old.iter().filter(|s| u64::from(s.until) > now) {
            let i = self.empty_for(&slot.digest);
            self.slots[i] = *slot;
            self.len += 1;
        }
    }

    /// Claims still live at `now`.
    fn live(&self, now: u64) -> usize {
        self.slots
            .iter()
            .filter(|s| u64::from(s.until) > now)
            .count()
    }

    /// Where a probe for `digest` starts.
    fn home(&self, digest: &Digest) -> usize {
        let hash = u64::from_le_bytes(*digest);
        // The high half of hash × slots: a uniform index without a modulo,
        // set by the high bits (the low byte is the shard's, the same for
        // every key in it).
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    /// The slot that holds `digest`.
    fn find(&self, digest: &Digest) -> Option<usize> {
        self.probe(digest).ok()
    }

    /// `Ok` with the slot that holds `digest`, or `Err` with the empty slot
    /// where its probe ended (0 in a table with no slots).
    fn probe(&self, digest: &Digest) -> Result<usize, usize> {
        let n = self.slots.len();
        if n == 0 {
            return Err(0);
        }
        let mut i = self.home(digest);
        loop {
            let slot = &self.slots[i];
            if slot.until == 0 {
                return Err(i);
            }
            if slot.digest == *digest {
                return Ok(i);
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
    }

    /// The empty slot where `digest` (not held) goes. The table is never
    /// full: it is rebuilt before it is 7/8 full.
    fn empty_for(&self, digest: &Digest) -> usize {
        let n = self.slots.len();
        let mut i = self.home(digest);
        while self.slots[i].until != 0 {
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn digest(n: u64) -> Digest {
        let hash = alloy_primitives::keccak256(n.to_le_bytes());
        let mut d = [0u8; 8];
        d.copy_from_slice(&hash[..8]);
        d
    }

    #[test]
    fn a_slot_is_12_bytes() {
        assert_eq!(SLOT_BYTES, 12);
    }

    #[test]
    fn grows_by_half_and_stays_between_58_and_88_percent_full() {
        let mut table = Table::default();
        for n in 0..100_000 {
            assert_eq!(table.claim(digest(n), 2_000, 1_000), Claimed::Claimed);
            let load = table.len() as f64 / table.slots.len() as f64;
            assert!(load <= 0.875, "{load} at {n}");
            if n > 1_000 {
                assert!(load >= 0.58, "{load} at {n}");
            }
        }
        for n in 0..100_000 {
            assert_eq!(
                table.claim(digest(n), 2_000, 1_000),
                Claimed::AlreadyClaimed
            );
        }
    }

    #[test]
    fn memory_goes_back_once_claims_end() {
        let mut table = Table::default();
        for n in 0..10_000 {
            table.claim(digest(n), 2_000, 1_000);
        }
        let big = table.heap_bytes();
        // Past their end, the next insert a minute on drops them.
        table.claim(digest(1 << 40), 9_000, 2_100);
        assert_eq!(table.len(), 1);
        assert!(table.heap_bytes() < big / 100, "{}", table.heap_bytes());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Claim(u8, u16),
        Release(u8),
        Tick(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u8>(), 1u16..400).prop_map(|(k, life)| Op::Claim(k, life)),
            2 => any::<u8>().prop_map(Op::Release),
            1 => (0u16..100).prop_map(Op::Tick),
        ]
    }

    proptest! {
        /// Against a `HashMap` of key → end: the same answers, whatever the
        /// order of claims, releases, expiries and rebuilds. Keys collide
        /// in their home slots often (200-odd keys over small tables).
        #[test]
        fn answers_as_a_map_would(ops in proptest::collection::vec(op(), 1..600)) {
            let mut table = Table::default();
            let mut model: HashMap<u8, u64> = HashMap::new();
            let mut now = 10_000u64;
            for op in ops {
                match op {
                    Op::Claim(k, life) => {
                        let until = now + u64::from(life);
                        let want = match model.get(&k) {
                            Some(&end) if end > now => Claimed::AlreadyClaimed,
                            _ => {
                                model.insert(k, until);
                                Claimed::Claimed
                            }
                        };
                        let got = table.claim(digest(u64::from(k)), until as Until, now);
                        prop_assert_eq!(got, want);
                    }
                    Op::Release(k) => {
                        model.remove(&k);
                        table.release(&digest(u64::from(k)));
                    }
                    Op::Tick(s) => now += u64::from(s),
                }
                let live = model.values().filter(|&&end| end > now).count();
                prop_assert_eq!(table.live(now), live);
                prop_assert!(table.len() <= model.len());
            }
            for k in 0..=u8::MAX {
                let held = table.find(&digest(u64::from(k))).map(|i| u64::from(table.slots[i].until));
                match model.get(&k) {
                    Some(&end) if end > now => prop_assert_eq!(held, Some(end)),
                    _ => prop_assert!(held.is_none_or(|end| end <= now)),
                }
            }
        }
    }
}
