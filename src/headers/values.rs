//! The value syntax the fields share: optional whitespace, decimal integers, HTTP-dates, and
//! durations written as whole units rounded up.

use std::time::{Duration, SystemTime};

use http::header::DATE;
use http::HeaderMap;

/// Strip leading and trailing optional whitespace (SP / HTAB).
pub(crate) fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// One or more ASCII digits and nothing else, as a number; `None` for anything else and for a
/// number above `u64::MAX` (leading zeros are allowed and cost nothing).
pub(crate) fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// An HTTP-date in any of RFC 9110's three forms. Only visible ASCII and spaces may appear:
/// this also rules out the wider whitespace that `httpdate` would otherwise trim.
pub(crate) fn http_date(value: &[u8]) -> Option<SystemTime> {
    if !value.iter().all(|&b| b == b' ' || b.is_ascii_graphic()) {
        return None;
    }
    httpdate::parse_http_date(std::str::from_utf8(value).ok()?).ok()
}

/// The response's `Date` field (the server's clock), when it is present and valid.
pub(crate) fn date(headers: &HeaderMap) -> Option<SystemTime> {
    http_date(trim_ows(headers.get(DATE)?.as_bytes()))
}

/// `d` in whole `unit`s, rounding up any fraction, saturating at `u64::MAX`.
pub(crate) fn ceil(d: Duration, unit: Duration) -> u64 {
    let units = d.as_nanos().div_ceil(unit.as_nanos().max(1));
    u64::try_from(units).unwrap_or(u64::MAX)
}

/// Whole seconds in `d`, rounding up any fraction (saturating at `u64::MAX`).
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    ceil(d, Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_a_number_or_nothing() {
        assert_eq!(digits(b"0"), Some(0));
        assert_eq!(digits(b"0005"), Some(5));
        assert_eq!(digits(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(
            digits(format!("{}42", "0".repeat(10_000)).as_bytes()),
            Some(42)
        );
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"-1",
            b"+1",
            b" 1",
            b"1.0",
            b"1a",
        ] {
            assert_eq!(digits(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn ceil_rounds_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(ceil_secs(Duration::new(3, 1)), 4);
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
        let ms = Duration::from_millis(1);
        assert_eq!(ceil(Duration::from_micros(333_001), ms), 334);
        assert_eq!(ceil(Duration::MAX, ms), u64::MAX);
    }

    #[test]
    fn dates_are_strict() {
        let nov_6_1994 = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(nov_6_1994)
        );
        assert_eq!(http_date(b"Sun, 06 Nov 1994 08:49:37 GMT\r"), None);
        let mut headers = HeaderMap::new();
        headers.insert(DATE, " Sun, 06 Nov 1994 08:49:37 GMT\t".parse().unwrap());
        assert_eq!(date(&headers), Some(nov_6_1994));
        headers.insert(DATE, "yesterday".parse().unwrap());
        assert_eq!(date(&headers), None);
    }
}
