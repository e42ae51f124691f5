//! How many times each paid handler ran: every paid body's `"run"`, so that a
//! check can tell a replayed response (the same `run`) from a handler that
//! ran again.

use std::sync::atomic::{AtomicU64, Ordering};

/// A paid route of the example servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaidRoute {
    /// `GET /exact/evm/eip3009`.
    Exact,
    /// `GET /upto/evm/permit2`.
    Upto,
    /// `GET /session/demo`.
    Session,
    /// `GET /siwx/demo`.
    SignIn,
    /// `GET /batch/evm`.
    Batch,
}

/// One counter per paid route, from 0 at start.
#[derive(Debug, Default)]
pub struct Runs([AtomicU64; 5]);

impl Runs {
    fn counter(&self, route: PaidRoute) -> &AtomicU64 {
        &self.0[route as usize]
    }

    /// Counts one more run of `route`'s handler and says which it is (1 for
    /// the first since start).
    pub fn count(&self, route: PaidRoute) -> u64 {
        self.counter(route).fetch_add(1, Ordering::SeqCst) + 1
    }

    /// How many times `route`'s handler has run.
    pub fn get(&self, route: PaidRoute) -> u64 {
        self.counter(route).load(Ordering::SeqCst)
    }
}
