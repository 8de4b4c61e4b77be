//! The `Retry-After` response field ([RFC 9110 §10.2.3]): *delta-seconds* (`120`) or an
//! *HTTP-date* (`Sun, 06 Nov 1994 08:49:37 GMT`), read as the [`Duration`] to wait.
//!
//! [RFC 9110 §10.2.3]: https://www.rfc-editor.org/rfc/rfc9110#section-10.2.3

use std::fmt;
use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::HeaderMap;

use super::values::{date, digits, http_date, trim_ows};

/// The longest wait accepted as a valid `Retry-After` value: 365 days.
///
/// Anything longer is almost certainly a server bug (or an attempt to park the client forever)
/// and is reported as [`RetryAfterError::TooLong`]. This bounds what is *valid*; how long a
/// client is willing to *sleep* is the retry layer's
/// [`max_retry_after`](crate::RetryAfterLayer::max_retry_after) (5 minutes by default).
pub const MAX_PARSED_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Why a `Retry-After` value was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryAfterError {
    /// The value is neither delta-seconds nor an HTTP-date.
    Invalid,
    /// The value asks for a wait longer than [`MAX_PARSED_WAIT`].
    TooLong,
}

impl fmt::Display for RetryAfterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::Invalid => "invalid retry-after value",
            Self::TooLong => "retry-after delay exceeds the maximum",
        })
    }
}

impl std::error::Error for RetryAfterError {}

/// Parse a `Retry-After` value: delta-seconds, or an HTTP-date measured against `now`.
///
/// - Delta-seconds are one or more ASCII digits, nothing else: no sign, no fraction. Leading
///   zeros are allowed (`0005` is 5 seconds).
/// - An HTTP-date may use any of the three forms of RFC 9110: IMF-fixdate
///   (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form
///   (`Sunday, 06-Nov-94 08:49:37 GMT`, two-digit years map to 1970–2069) or asctime
///   (`Sun Nov  6 08:49:37 1994`). The day of the week must match the date. The wait is the
///   time from `now` to that date; a date in the past is [`Duration::ZERO`].
/// - Leading and trailing spaces and tabs are ignored.
///
/// A wait longer than [`MAX_PARSED_WAIT`] (numbers too large for any integer type included)
/// is [`RetryAfterError::TooLong`]; anything else that is not one of the forms above (empty,
/// negative, fractional, signed, non-ASCII) is [`RetryAfterError::Invalid`]. This never
/// panics and never overflows, whatever the bytes.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_throttle::headers::parse_retry_after;
///
/// assert_eq!(parse_retry_after(b"120", SystemTime::now()), Ok(Duration::from_secs(120)));
/// ```
pub fn parse_retry_after(value: &[u8], now: SystemTime) -> Result<Duration, RetryAfterError> {
    let value = trim_ows(value);
    let wait = if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
        digits(value)
            .map(Duration::from_secs)
            .ok_or(RetryAfterError::TooLong)?
    } else {
        http_date(value)
            .ok_or(RetryAfterError::Invalid)?
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
    };
    if wait > MAX_PARSED_WAIT {
        return Err(RetryAfterError::TooLong);
    }
    Ok(wait)
}

/// Read the `Retry-After` field of a response.
///
/// Returns `Ok(None)` when there is no `Retry-After` field.
///
/// A well-formed `retry-after-ms` field (OpenAI's and Azure's: milliseconds, a fraction
/// allowed, such as `1500` or `20.5`) says the same more precisely and wins over
/// `Retry-After`; a malformed one is ignored.
///
/// An HTTP-date is measured against the response's own `Date` field when that is present and
/// valid, so the wait is what the server meant even if the local clock is wrong; otherwise it
/// is measured against `now`.
///
/// `Retry-After` is a singleton field, but if a response carries several, the **largest** valid
/// wait among them is used, so the client never retries earlier than any of them asks; for the
/// same reason a field asking for too long ([`RetryAfterError::TooLong`]) wins over shorter
/// ones. Invalid fields are skipped; if none is valid, the error of the first one is returned.
pub fn read_retry_after(
    headers: &HeaderMap,
    now: SystemTime,
) -> Result<Option<Duration>, RetryAfterError> {
    if let Some(wait) = headers
        .get(RETRY_AFTER_MS)
        .and_then(|v| millis(trim_ows(v.as_bytes())))
    {
        return if wait > MAX_PARSED_WAIT {
            Err(RetryAfterError::TooLong)
        } else {
            Ok(Some(wait))
        };
    }
    let reference = date(headers).unwrap_or(now);
    let mut longest = None;
    let mut first_error = None;
    let mut too_long = false;
    for value in headers.get_all(RETRY_AFTER) {
        match parse_retry_after(value.as_bytes(), reference) {
            Ok(wait) => longest = longest.max(Some(wait)),
            Err(e) => {
                too_long |= e == RetryAfterError::TooLong;
                first_error.get_or_insert(e);
            }
        }
    }
    // Never retry earlier than any instruction: a too-long field wins over shorter ones,
    // wherever it stands among the fields.
    if too_long {
        return Err(RetryAfterError::TooLong);
    }
    match (longest, first_error) {
        (Some(wait), _) => Ok(Some(wait)),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(None),
    }
}

/// OpenAI's and Azure's `retry-after-ms`.
const RETRY_AFTER_MS: &str = "retry-after-ms";

/// Milliseconds with an optional fraction (`1500`, `20.5`), to the nanosecond; `None` for
/// anything else.
fn millis(value: &[u8]) -> Option<Duration> {
    let (whole, fraction) = match value.iter().position(|&b| b == b'.') {
        Some(i) => (&value[..i], &value[i + 1..]),
        None => (value, &b""[..]),
    };
    let whole = digits(whole)?;
    if !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let nanos = fraction
        .iter()
        .take(6)
        .zip([100_000, 10_000, 1_000, 100, 10, 1])
        .map(|(&d, scale)| u64::from(d - b'0') * scale)
        .sum::<u64>();
    let secs = whole / 1_000;
    let sub = (whole % 1_000) * 1_000_000 + nanos;
    Some(Duration::from_secs(secs) + Duration::from_nanos(sub))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::DATE;
    use http::HeaderValue;
    use std::time::UNIX_EPOCH;

    /// Sun, 06 Nov 1994 08:49:37 GMT.
    fn nov_6_1994() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn before_nov_6_1994(secs: u64) -> SystemTime {
        nov_6_1994() - Duration::from_secs(secs)
    }

    fn map(fields: &[(http::header::HeaderName, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn delta_seconds_form() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after(b"0", now), Ok(Duration::ZERO));
        assert_eq!(parse_retry_after(b"120", now), Ok(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(b"0005", now), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn imf_fixdate() {
        let now = before_nov_6_1994(90);
        let wait = parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT", now);
        assert_eq!(wait, Ok(Duration::from_secs(90)));
    }

    #[test]
    fn rfc850_date() {
        let now = before_nov_6_1994(90);
        let wait = parse_retry_after(b"Sunday, 06-Nov-94 08:49:37 GMT", now);
        assert_eq!(wait, Ok(Duration::from_secs(90)));
    }

    #[test]
    fn asctime_date() {
        let now = before_nov_6_1994(90);
        let wait = parse_retry_after(b"Sun Nov  6 08:49:37 1994", now);
        assert_eq!(wait, Ok(Duration::from_secs(90)));
    }

    #[test]
    fn surrounding_whitespace_is_ignored() {
        let now = before_nov_6_1994(1);
        assert_eq!(
            parse_retry_after(b" \t7\t ", now),
            Ok(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after(b"  Sun, 06 Nov 1994 08:49:37 GMT\t", now),
            Ok(Duration::from_secs(1))
        );
    }

    #[test]
    fn past_date_is_zero() {
        let now = nov_6_1994() + Duration::from_secs(3600);
        assert_eq!(
            parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT", now),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn far_future_date_is_too_long() {
        let now = before_nov_6_1994(0);
        assert_eq!(
            parse_retry_after(b"Fri, 31 Dec 9999 23:59:59 GMT", now),
            Err(RetryAfterError::TooLong)
        );
        assert_eq!(
            parse_retry_after(b"Wed, 06 Nov 1996 08:49:37 GMT", now),
            Err(RetryAfterError::TooLong)
        );
    }

    #[test]
    fn cap_is_inclusive() {
        let now = SystemTime::now();
        let max = MAX_PARSED_WAIT.as_secs();
        assert_eq!(
            parse_retry_after(max.to_string().as_bytes(), now),
            Ok(MAX_PARSED_WAIT)
        );
        assert_eq!(
            parse_retry_after((max + 1).to_string().as_bytes(), now),
            Err(RetryAfterError::TooLong)
        );
    }

    #[test]
    fn huge_numbers_are_too_long() {
        let now = SystemTime::now();
        let too_long = Err(RetryAfterError::TooLong);
        assert_eq!(parse_retry_after(b"18446744073709551615", now), too_long);
        assert_eq!(parse_retry_after(b"18446744073709551616", now), too_long);
        assert_eq!(
            parse_retry_after("9".repeat(10_000).as_bytes(), now),
            too_long
        );
        // Leading zeros do not count towards the size.
        let padded = format!("{}42", "0".repeat(10_000));
        assert_eq!(
            parse_retry_after(padded.as_bytes(), now),
            Ok(Duration::from_secs(42))
        );
    }

    #[test]
    fn malformed_values_are_invalid() {
        let now = SystemTime::now();
        for value in [
            &b""[..],
            b"   ",
            b"-1",
            b"1.5",
            b"+5",
            b"1 2",
            b"5s",
            b"0x10",
            b"soon",
            b"\xff\xfe",
            "５".as_bytes(),
            b"5\n",
            b"\n5",
            b"Sun, 06 Nov 1994 08:49:37 GMT\r",
            b"Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
            b"Sun, 06 Nov 1994 08:49:60 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
            b"1994-11-06T08:49:37Z",
        ] {
            assert_eq!(
                parse_retry_after(value, now),
                Err(RetryAfterError::Invalid),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            RetryAfterError::Invalid.to_string(),
            "invalid retry-after value"
        );
        assert_eq!(
            RetryAfterError::TooLong.to_string(),
            "retry-after delay exceeds the maximum"
        );
    }

    #[test]
    fn no_field_is_none() {
        let headers = map(&[(DATE, "Sun, 06 Nov 1994 08:49:37 GMT")]);
        assert_eq!(read_retry_after(&headers, SystemTime::now()), Ok(None));
    }

    #[test]
    fn single_field() {
        let headers = map(&[(RETRY_AFTER, "30")]);
        assert_eq!(
            read_retry_after(&headers, SystemTime::now()),
            Ok(Some(Duration::from_secs(30)))
        );
    }

    #[test]
    fn retry_after_ms_wins_when_well_formed() {
        let ms = http::HeaderName::from_static("retry-after-ms");
        let now = SystemTime::now();
        for (value, want) in [
            ("1500", Ok(Some(Duration::from_millis(1500)))),
            (" 20.5 ", Ok(Some(Duration::from_micros(20_500)))),
            ("0.0000019", Ok(Some(Duration::from_nanos(1)))),
            ("31536000000", Ok(Some(MAX_PARSED_WAIT))),
            ("31536000001", Err(RetryAfterError::TooLong)),
            ("-5", Ok(Some(Duration::from_secs(30)))),
            ("1e3", Ok(Some(Duration::from_secs(30)))),
            (".5", Ok(Some(Duration::from_secs(30)))),
            ("99999999999999999999999", Ok(Some(Duration::from_secs(30)))),
        ] {
            let headers = map(&[(RETRY_AFTER, "30"), (ms.clone(), value)]);
            assert_eq!(read_retry_after(&headers, now), want, "{value:?}");
        }
        let alone = map(&[(ms, "250")]);
        assert_eq!(
            read_retry_after(&alone, now),
            Ok(Some(Duration::from_millis(250)))
        );
    }

    #[test]
    fn several_fields_take_the_largest_valid() {
        let now = before_nov_6_1994(100);
        let headers = map(&[
            (RETRY_AFTER, "30"),
            (RETRY_AFTER, "bogus"),
            (RETRY_AFTER, "Sun, 06 Nov 1994 08:49:37 GMT"),
            (RETRY_AFTER, "60"),
        ]);
        assert_eq!(
            read_retry_after(&headers, now),
            Ok(Some(Duration::from_secs(100)))
        );
    }

    #[test]
    fn several_invalid_fields_report_the_first_error() {
        let headers = map(&[(RETRY_AFTER, "99999999999"), (RETRY_AFTER, "-1")]);
        assert_eq!(
            read_retry_after(&headers, SystemTime::now()),
            Err(RetryAfterError::TooLong)
        );
        let headers = map(&[(RETRY_AFTER, "-1"), (RETRY_AFTER, "x")]);
        assert_eq!(
            read_retry_after(&headers, SystemTime::now()),
            Err(RetryAfterError::Invalid)
        );
    }

    #[test]
    fn a_too_long_field_wins_over_shorter_ones() {
        let headers = map(&[(RETRY_AFTER, "5"), (RETRY_AFTER, "99999999999")]);
        assert_eq!(
            read_retry_after(&headers, SystemTime::now()),
            Err(RetryAfterError::TooLong)
        );
        // Even behind an invalid field.
        let headers = map(&[
            (RETRY_AFTER, "soon"),
            (RETRY_AFTER, "5"),
            (RETRY_AFTER, "99999999999"),
        ]);
        assert_eq!(
            read_retry_after(&headers, SystemTime::now()),
            Err(RetryAfterError::TooLong)
        );
    }

    #[test]
    fn date_is_measured_against_the_date_field() {
        let headers = map(&[
            (DATE, "Sun, 06 Nov 1994 08:48:37 GMT"),
            (RETRY_AFTER, "Sun, 06 Nov 1994 08:49:37 GMT"),
        ]);
        // The local clock is an hour fast, or an hour slow: the server's minute still holds.
        for local in [
            nov_6_1994() + Duration::from_secs(3600),
            before_nov_6_1994(3600),
        ] {
            assert_eq!(
                read_retry_after(&headers, local),
                Ok(Some(Duration::from_secs(60)))
            );
        }
    }

    #[test]
    fn invalid_date_field_falls_back_to_now() {
        let headers = map(&[
            (DATE, "yesterday"),
            (RETRY_AFTER, "Sun, 06 Nov 1994 08:49:37 GMT"),
        ]);
        assert_eq!(
            read_retry_after(&headers, before_nov_6_1994(5)),
            Ok(Some(Duration::from_secs(5)))
        );
    }

    #[test]
    fn date_field_does_not_change_delta_seconds() {
        let headers = map(&[(DATE, "Sun, 06 Nov 1994 08:49:37 GMT"), (RETRY_AFTER, "15")]);
        assert_eq!(
            read_retry_after(&headers, SystemTime::now()),
            Ok(Some(Duration::from_secs(15)))
        );
    }
}
