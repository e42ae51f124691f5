//! Unix time in whole seconds, as the stores, the dev ledger and the wire
//! fields (`validBefore`, `deadline`) count it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds from the Unix epoch to `t` (0 for a time before 1970).
pub(crate) fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Seconds from the Unix epoch to `t`, rounded up (a deadline so counted
/// never comes early); `None` for a time before 1970.
pub(crate) fn secs_ceil(t: SystemTime) -> Option<u64> {
    let d = t.duration_since(UNIX_EPOCH).ok()?;
    Some(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now() -> u64 {
    secs(SystemTime::now())
}
