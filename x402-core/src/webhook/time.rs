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
    let mut out = String::with_capacity(24);
    date_time(since_epoch.as_secs(), &mut out);
    out.push('.');
    push_padded(&mut out, u64::from(since_epoch.subsec_millis()), 3);
    out.push('Z');
    out
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
    let mut out = String::with_capacity(20);
    date_time(since_epoch(t).as_secs(), &mut out);
    out.push('Z');
    out
}

/// Appends `YYYY-MM-DDTHH:MM:SS` of `secs` since the Unix epoch, in UTC.
/// Written digit by digit: the example server stamps every paid body with
/// it, and `format!` cost more than the rest of the body.
fn date_time(secs: u64, out: &mut String) {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    // From the epoch on, the year is positive.
    push_padded(out, u64::try_from(y).unwrap_or(0), 4);
    for (separator, value) in [
        ('-', u64::from(m)),
        ('-', u64::from(d)),
        ('T', rem / 3600),
        (':', (rem % 3600) / 60),
        (':', rem % 60),
    ] {
        out.push(separator);
        push_padded(out, value, 2);
    }
}

/// Appends `n` in decimal, left-padded with zeros to `width` digits.
fn push_padded(out: &mut String, mut n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // `n % 10` is a single digit.
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for _ in digits.len() - start..width {
        out.push('0');
    }
    out.extend(digits[start..].iter().map(|&b| char::from(b)));
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

    /// The digit writer agrees with `format!` from the epoch to the end
    /// of `u64` seconds, year 10000 and later included.
    #[test]
    fn writes_what_format_would() {
        let reference = |secs: u64| {
            let days = i64::try_from(secs / 86_400).unwrap_or(0);
            let rem = secs % 86_400;
            let (y, m, d) = civil_from_days(days);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
                rem / 3600,
                (rem % 3600) / 60,
                rem % 60
            )
        };
        let mut secs = 0u64;
        let mut step = 1u64;
        while let Some(next) = secs.checked_add(step) {
            let mut out = String::new();
            date_time(secs, &mut out);
            assert_eq!(out, reference(secs), "{secs}");
            secs = next;
            step = step.saturating_mul(3) / 2 + 7;
        }
        let mut out = String::new();
        date_time(253_402_300_800, &mut out);
        assert_eq!(out, "10000-01-01T00:00:00");
    }

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
