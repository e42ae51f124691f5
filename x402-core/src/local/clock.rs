//! The time an authorization is checked against.

use super::*;

/// The default margin before `validBefore`: an authorization must stay valid
/// at least this long after verification (about a block's time).
pub const DEFAULT_VALID_BEFORE_MARGIN: Duration = Duration::from_secs(6);

/// A source of the current unix time in seconds.
///
/// [`SystemClock`] reads the system clock; tests can use [`FixedClock`] or
/// any `fn() -> u64`.
///
/// ```
/// use x402_core::local::{Clock, FixedClock};
/// assert_eq!(FixedClock(1_740_672_100).now(), 1_740_672_100);
/// fn epoch() -> u64 { 0 }
/// assert_eq!((epoch as fn() -> u64).now(), 0);
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current unix time in seconds.
    fn now(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }
}

/// A clock stopped at a unix time in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedClock(pub u64);

impl Clock for FixedClock {
    fn now(&self) -> u64 {
        self.0
    }
}

impl Clock for fn() -> u64 {
    fn now(&self) -> u64 {
        self()
    }
}
