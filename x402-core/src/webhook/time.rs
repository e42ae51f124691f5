//! Wall-clock helpers (no date crate needed).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) use crate::unix::now as unix_now;

/// Milliseconds since the Unix epoch, now.
#[cfg(feature = "redis")]
pub(crate) fn unix_millis_now() -> u64 {
    u64::try_from(since_epoch(SystemTime::now()).as_millis()).unwrap_or(u64::MAX)
}

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Now as RFC 3339 in UTC with milliseconds (`2025-01-31T12:00:00.123Z`).
pub(crate) fn rfc3339_now() -> String {
    rfc3339(since_epoch(SystemTime::now()))
}

/// `since_epoch` as RFC 3339 in UTC with milliseconds.
pub(crate) fn rfc3339(since_epoch: Duration) -> String {
    format!(
        "{}.{:03}Z",
        date_time(since_epoch.as_secs()),
        since_epoch.subsec_millis()
    )
}

/// `t` as an RFC 3339 timestamp in UTC, to the whole second:
/// `2025-01-31T12:00:00Z` (always 20 characters up to the year 9999; the
/// fraction of a second is dropped, not rounded). Instants before the Unix
/// epoch print as the epoch.
///
/// Webhook events carry milliseconds ([`WebhookEvent::timestamp`]); this is
/// the shorter form for response bodies and logs.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use x402_core::webhook::rfc3339_seconds;
///
/// let t = UNIX_EPOCH + Duration::from_millis(1_738_324_800_999);
/// assert_eq!(rfc3339_seconds(t), "2025-01-31T12:00:00Z");
/// assert_eq!(rfc3339_seconds(UNIX_EPOCH), "1970-01-01T00:00:00Z");
/// ```
///
/// [`WebhookEvent::timestamp`]: super::WebhookEvent::timestamp
pub fn rfc3339_seconds(t: SystemTime) -> String {
    format!("{}Z", date_time(since_epoch(t).as_secs()))
}

/// `YYYY-MM-DDTHH:MM:SS` of `secs` since the Unix epoch, in UTC.
fn date_time(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(Duration::from_millis(1_709_251_199_123)),
            "2024-02-29T23:59:59.123Z"
        );
        assert_eq!(
            rfc3339(Duration::from_secs(4_102_444_800)),
            "2100-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn formats_whole_seconds() {
        let at = |millis| UNIX_EPOCH + Duration::from_millis(millis);
        assert_eq!(rfc3339_seconds(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_seconds(at(1_709_251_199_999)),
            "2024-02-29T23:59:59Z"
        );
        assert_eq!(
            rfc3339_seconds(at(4_102_444_800_000)),
            "2100-01-01T00:00:00Z"
        );
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(rfc3339_seconds(before), "1970-01-01T00:00:00Z");
    }
}
