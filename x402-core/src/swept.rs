//! A map whose expired entries are swept as it grows: the memory behind the
//! in-process claim and session stores.

use std::{
    collections::HashMap,
    hash::Hash,
    ops::{Deref, DerefMut},
};

/// Below this many entries the map is never swept.
pub(crate) const MIN_SWEEP_LEN: usize = 1024;

/// A map of at least [`MIN_SWEEP_LEN`] entries is swept at least this often
/// (in the callers' seconds), on the next insert.
pub(crate) const SWEEP_EVERY_SECS: u64 = 60;

/// A `HashMap` swept of dead entries whenever it has doubled since the last
/// sweep, or a minute has passed since then: memory stays within the live
/// entries plus a minute's worth of expired ones (and never above twice the
/// live entries), and each insert pays O(1) on average.
#[derive(Debug)]
pub(crate) struct SweptMap<K, V> {
    map: HashMap<K, V>,
    /// Sweep before an insert that finds the map at least this long.
    sweep_at: usize,
    /// When the last sweep ran, in the callers' seconds.
    swept_at_secs: u64,
}

impl<K, V> Default for SweptMap<K, V> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            sweep_at: MIN_SWEEP_LEN,
            swept_at_secs: 0,
        }
    }
}

impl<K: Eq + Hash, V> SweptMap<K, V> {
    /// Call before inserting a key the map does not hold, at `now_secs`:
    /// sweeps, keeping the entries `live` accepts, when the map has doubled
    /// or a minute has passed since the last sweep.
    pub(crate) fn make_room(&mut self, now_secs: u64, live: impl FnMut(&V) -> bool) {
        let len = self.map.len();
        let due =
            len >= MIN_SWEEP_LEN && now_secs >= self.swept_at_secs.saturating_add(SWEEP_EVERY_SECS);
        if len >= self.sweep_at || due {
            self.sweep(now_secs, live);
        }
    }

    /// Drops the entries `live` refuses, and gives back memory the map no
    /// longer needs.
    pub(crate) fn sweep(&mut self, now_secs: u64, mut live: impl FnMut(&V) -> bool) {
        self.swept_at_secs = now_secs;
        self.map.retain(|_, v| live(v));
        self.sweep_at = self.map.len().saturating_mul(2).max(MIN_SWEEP_LEN);
        // Memory goes back only when the map is far larger than it needs to
        // be (after a burst): shrinking whenever it is merely twice too large
        // would, under a steady load, reallocate the table every few sweeps
        // (the table grows again to clear the tombstones sweeps leave).
        if self.map.capacity() > self.sweep_at.saturating_mul(4) {
            self.map.shrink_to(self.sweep_at);
        }
    }
}

impl<K, V> Deref for SweptMap<K, V> {
    type Target = HashMap<K, V>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<K, V> DerefMut for SweptMap<K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_load_settles_on_one_table() {
        // 100 inserts a second, each live for 60 s, swept once a minute:
        // between 6 000 and 12 000 entries. Once warm, the table keeps one
        // size: no shrink and regrow every few sweeps. (`capacity` is the
        // table's room less its tombstones: it drifts down a little between
        // reallocations, and jumps at one.)
        let mut map: SweptMap<u64, u64> = SweptMap::default();
        let (mut low, mut high) = (usize::MAX, 0);
        for second in 0..1_800u64 {
            for i in 0..100 {
                map.make_room(second, |&until| until > second);
                map.insert(second * 100 + i, second + 60);
            }
            if second >= 600 {
                low = low.min(map.capacity());
                high = high.max(map.capacity());
            }
            assert!(map.len() <= 12_100, "{}", map.len());
        }
        assert!(
            low * 10 >= high * 9,
            "the table was reallocated: {low}..{high}"
        );
    }

    #[test]
    fn memory_goes_back_after_a_burst() {
        let mut map: SweptMap<u64, u64> = SweptMap::default();
        for i in 0..100_000 {
            map.make_room(0, |&until| until > 0);
            map.insert(i, 10);
        }
        let burst = map.capacity();
        for i in 0..2_000 {
            map.make_room(100, |&until| until > 100);
            map.insert(1_000_000 + i, 1_000);
        }
        assert!(map.len() <= 2_000);
        assert!(map.capacity() < burst / 8, "{} of {burst}", map.capacity());
    }
}
