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
        if self.map.capacity() > self.sweep_at.saturating_mul(2) {
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
