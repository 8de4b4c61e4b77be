//! The gRPC-over-HTTP/2 fields a client reads and writes: `grpc-status`, `grpc-timeout` and
//! gRFC A6's `grpc-retry-pushback-ms`. A server's refusal is written in `headers/grpc.rs`.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tonic::Code;

use crate::headers::digits;
use crate::headers::grpc::{GRPC_STATUS, PUSHBACK};

/// The time a call has left, from the moment it is sent: `TimeoutValue TimeoutUnit`, at most
/// 8 ASCII digits then `H`, `M`, `S`, `m`, `u` or `n` (hours to nanoseconds).
pub(crate) const GRPC_TIMEOUT: &str = "grpc-timeout";

/// The most a `TimeoutValue` can hold: 8 digits.
const TIMEOUT_MAX: u64 = 99_999_999;

/// The `TimeoutUnit`s, finest first, with their length in nanoseconds.
const TIMEOUT_UNITS: [(u8, u64); 6] = [
    (b'n', 1),
    (b'u', 1_000),
    (b'm', 1_000_000),
    (b'S', 1_000_000_000),
    (b'M', 60 * 1_000_000_000),
    (b'H', 3600 * 1_000_000_000),
];

/// Reads `grpc-timeout`. `None` when it is absent or malformed (no digits, more than 8, a
/// sign, an unknown unit): a malformed timeout is no deadline, as tonic's server reads it.
/// Zero is read as a deadline already past.
pub(crate) fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let (unit, value) = headers.get(GRPC_TIMEOUT)?.as_bytes().split_last()?;
    if value.len() > 8 {
        return None;
    }
    let value = u32::try_from(digits(value)?).ok()?; // 8 digits fit
    let (_, len) = TIMEOUT_UNITS.iter().find(|(u, _)| u == unit)?;
    Duration::from_nanos(*len).checked_mul(value) // 99,999,999 hours fit too
}

/// The value of `grpc-timeout` for the time left: the finest unit whose count fits in 8
/// digits, rounded **down** (the server never gets more time than the call has); at most
/// 99,999,999 hours.
pub(crate) fn timeout_value(left: Duration) -> HeaderValue {
    let nanos = left.as_nanos();
    let (unit, count) = TIMEOUT_UNITS
        .iter()
        .map(|&(unit, len)| (unit, nanos / u128::from(len)))
        .find(|&(_, count)| count <= u128::from(TIMEOUT_MAX))
        .unwrap_or((b'H', u128::from(TIMEOUT_MAX)));
    let value = format!("{count}{}", char::from(unit));
    HeaderValue::try_from(value).expect("digits and a letter make a header value")
}

/// The server's push-back, as gRFC A6 reads `grpc-retry-pushback-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushback {
    /// No push-back: the client's own backoff applies.
    Absent,
    /// Retry after this long.
    After(Duration),
    /// Negative or malformed: do not retry.
    Stop,
}

/// Reads `grpc-retry-pushback-ms`: an ASCII signed 32-bit integer of milliseconds.
pub(crate) fn pushback(headers: &HeaderMap) -> Pushback {
    let Some(value) = headers.get(PUSHBACK) else {
        return Pushback::Absent;
    };
    // A sign, a space, a fraction, anything but digits, or out of the 32-bit range: stop.
    match digits(value.as_bytes()).filter(|&ms| ms <= i32::MAX as u64) {
        Some(ms) => Pushback::After(Duration::from_millis(ms)),
        None => Pushback::Stop,
    }
}

/// The code of a response that carries its status in its headers (a trailers-only
/// response); `None` when the status will come in the trailers.
pub(crate) fn header_code(headers: &HeaderMap) -> Option<Code> {
    headers
        .get(GRPC_STATUS)
        .map(|v| Code::from_bytes(v.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_static(k),
                    HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn pushback_as_a6_reads_it() {
        let p = |v| pushback(&headers(&[(PUSHBACK, v)]));
        assert_eq!(pushback(&HeaderMap::new()), Pushback::Absent);
        assert_eq!(p("0"), Pushback::After(Duration::ZERO));
        assert_eq!(p("1500"), Pushback::After(Duration::from_millis(1500)));
        assert_eq!(
            p("2147483647"),
            Pushback::After(Duration::from_millis(i32::MAX as u64))
        );
        for bad in [
            "-1",
            "-0",
            "+5",
            "1.5",
            " 5",
            "5 ",
            "",
            "abc",
            "2147483648",
            "99999999999999999999",
        ] {
            assert_eq!(p(bad), Pushback::Stop, "{bad:?}");
        }
        let mut opaque = HeaderMap::new();
        opaque.insert(PUSHBACK, HeaderValue::from_bytes(b"\xff1").unwrap());
        assert_eq!(pushback(&opaque), Pushback::Stop);
    }

    #[test]
    fn timeout_as_the_wire_spec_writes_it() {
        let t = |v| timeout(&headers(&[(GRPC_TIMEOUT, v)]));
        assert_eq!(timeout(&HeaderMap::new()), None);
        assert_eq!(t("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("30S"), Some(Duration::from_secs(30)));
        assert_eq!(t("300m"), Some(Duration::from_millis(300)));
        assert_eq!(t("300000u"), Some(Duration::from_millis(300)));
        assert_eq!(t("00000007n"), Some(Duration::from_nanos(7)));
        assert_eq!(t("0n"), Some(Duration::ZERO));
        assert_eq!(
            t("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600)),
            "the largest value: no overflow"
        );
        for bad in [
            "",
            "S",
            "5",
            "5s",
            "5h",
            "5x",
            "-5S",
            "+5S",
            " 5S",
            "5S ",
            "5 S",
            "1.5S",
            "123456789n",
            "999999999999999999999H",
            "5SS",
        ] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
        let mut opaque = HeaderMap::new();
        opaque.insert(GRPC_TIMEOUT, HeaderValue::from_bytes(b"\xff5S").unwrap());
        assert_eq!(timeout(&opaque), None);
    }

    #[test]
    fn timeout_value_takes_the_finest_unit_and_rounds_down() {
        let v = |d| timeout_value(d);
        assert_eq!(v(Duration::ZERO), "0n");
        assert_eq!(v(Duration::from_nanos(99_999_999)), "99999999n");
        assert_eq!(v(Duration::from_nanos(100_000_000)), "100000u");
        assert_eq!(
            v(Duration::from_nanos(100_000_999)),
            "100000u",
            "rounded down"
        );
        assert_eq!(v(Duration::from_millis(700)), "700000u");
        assert_eq!(v(Duration::from_micros(99_999_999)), "99999999u");
        assert_eq!(v(Duration::from_millis(100_000)), "100000m");
        assert_eq!(v(Duration::from_secs(100_000)), "100000S");
        assert_eq!(v(Duration::from_secs(100_000_000)), "1666666M");
        assert_eq!(v(Duration::from_secs(6_000_000_000)), "1666666H");
        assert_eq!(v(Duration::MAX), "99999999H", "saturates");
        // Whatever is written reads back as at most the time left, and short of it by less
        // than one unit, which is at most 1/100,000 of it (a coarser unit holds 100,000 and more).
        for left in [
            Duration::from_nanos(1),
            Duration::from_nanos(123_456_789),
            Duration::from_millis(299_999),
            Duration::from_secs(86_400 * 365),
            Duration::new(100_000_000, 999_999_999),
            Duration::from_secs(99_999_999 * 3600),
        ] {
            let back = timeout(
                &[(http::HeaderName::from_static(GRPC_TIMEOUT), v(left))]
                    .into_iter()
                    .collect(),
            )
            .unwrap();
            assert!(back <= left, "{left:?} → {back:?}");
            assert!(left - back <= left / 100_000, "{left:?} → {back:?}");
        }
    }

    #[test]
    fn header_code_of_a_trailers_only_response() {
        assert_eq!(
            header_code(&headers(&[(GRPC_STATUS, "8")])),
            Some(Code::ResourceExhausted)
        );
        assert_eq!(header_code(&HeaderMap::new()), None);
    }
}
