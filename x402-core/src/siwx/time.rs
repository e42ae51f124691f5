//! RFC 3339 timestamps as SIWE writes them (`2026-01-31T12:00:00.000Z`, the
//! JavaScript `toISOString` form) and reads them (any offset, any fraction).

/// Milliseconds since the Unix epoch written as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn format_millis(unix_millis: u64) -> String {
    let secs = unix_millis / 1000;
    let millis = unix_millis % 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Reads an RFC 3339 date-time (`Z` or `±HH:MM`, optional fraction) into
/// milliseconds since the Unix epoch; `None` when it is not one, or before
/// 1970.
pub(crate) fn parse_millis(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let digits = &s[start..i];
        if digits.is_empty() {
            return None;
        }
        // Milliseconds: the first three digits, the rest truncated.
        let padded = format!("{digits:0<3}");
        millis = padded[..3].parse().ok()?;
    }
    let offset_secs = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (h, m) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_secs;
    u64::try_from(secs.checked_mul(1000)?.checked_add(millis)?).ok()
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Howard Hinnant's days-from-civil algorithm.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let m = u32::try_from(m).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_offsets() {
        let t = 1_769_860_800_123; // 2026-01-31T12:00:00.123Z
        assert_eq!(format_millis(t), "2026-01-31T12:00:00.123Z");
        assert_eq!(parse_millis("2026-01-31T12:00:00.123Z"), Some(t));
        assert_eq!(parse_millis("2026-01-31T12:00:00Z"), Some(t - 123));
        assert_eq!(parse_millis("2026-01-31T13:00:00.123456+01:00"), Some(t));
        assert_eq!(parse_millis("2026-01-31T11:30:00.1-00:30"), Some(t - 23));
        assert_eq!(format_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            parse_millis("2024-02-29T00:00:00Z")
                .map(format_millis)
                .as_deref(),
            Some("2024-02-29T00:00:00.000Z")
        );
        for bad in [
            "",
            "garbage",
            "2026-01-31 12:00:00Z",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-01-31T24:00:00Z",
            "2026-01-31T12:00:00",
            "2026-01-31T12:00:00.Z",
            "2026-01-31T12:00:00Zjunk",
            "2026-01-31T12:00:00+0100",
            "1969-12-31T23:59:59Z",
            "+026-01-31T12:00:00Z",
        ] {
            assert_eq!(parse_millis(bad), None, "{bad:?}");
        }
    }
}
