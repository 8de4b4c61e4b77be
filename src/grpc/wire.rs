//! The gRPC-over-HTTP/2 fields the crate reads and writes: `content-type`, `grpc-status`,
//! `grpc-message`, `grpc-timeout` and gRFC A6's `grpc-retry-pushback-ms`.

use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use tonic::Code;

use crate::headers::{ceil, digits};

/// The status of a gRPC call, in a trailers-only response or in trailers.
pub(crate) const GRPC_STATUS: &str = "grpc-status";
/// The status message (percent-encoded; the crate only writes plain ASCII).
pub(crate) const GRPC_MESSAGE: &str = "grpc-message";
/// gRFC A6 server push-back: milliseconds to wait before a retry; negative or malformed
/// means "do not retry".
pub(crate) const PUSHBACK: &str = "grpc-retry-pushback-ms";

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

/// Whether `headers` describe a gRPC message: `content-type` is `application/grpc`, alone or
/// followed by `+format` or parameters (gRPC-Web, `application/grpc-web…`, is not).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return false;
    };
    let value = value.as_bytes();
    let prefix = b"application/grpc";
    value.len() >= prefix.len()
        && value[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(value.get(prefix.len()), None | Some(b'+' | b';'))
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

/// The value of `grpc-retry-pushback-ms` for a wait: whole milliseconds, rounded **up** (a
/// client that honours it never comes back early), at most `i32::MAX`.
pub(crate) fn pushback_value(wait: Duration) -> HeaderValue {
    HeaderValue::from(ceil(wait, Duration::from_millis(1)).min(i32::MAX as u64))
}

/// The code of a response that carries its status in its headers (a trailers-only
/// response); `None` when the status will come in the trailers.
pub(crate) fn header_code(headers: &HeaderMap) -> Option<Code> {
    headers
        .get(GRPC_STATUS)
        .map(|v| Code::from_bytes(v.as_bytes()))
}

/// A trailers-only response: HTTP 200, `content-type: application/grpc`, the status in the
/// headers, and an empty body (which ends the stream with the headers).
pub(crate) fn trailers_only<B>(
    code: Code,
    message: &'static str,
    pushback: Option<Duration>,
    body: B,
) -> Response<B> {
    let mut res = Response::new(body);
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(GRPC_STATUS, HeaderValue::from(code as i32));
    h.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    if let Some(wait) = pushback {
        h.insert(PUSHBACK, pushback_value(wait));
    }
    res
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
    fn grpc_content_types() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;charset=utf-8",
        ] {
            assert!(is_grpc(&headers(&[("content-type", ct)])), "{ct}");
        }
        for ct in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/json",
            "application/grp",
            "",
        ] {
            assert!(!is_grpc(&headers(&[("content-type", ct)])), "{ct}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
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
    fn pushback_rounds_up() {
        assert_eq!(pushback_value(Duration::from_nanos(1)), "1");
        assert_eq!(pushback_value(Duration::from_micros(333_001)), "334");
        assert_eq!(pushback_value(Duration::from_millis(250)), "250");
        assert_eq!(pushback_value(Duration::ZERO), "0");
        assert_eq!(pushback_value(Duration::MAX), "2147483647");
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
    fn trailers_only_response() {
        let res = trailers_only(
            Code::ResourceExhausted,
            "rate limit exceeded",
            Some(Duration::from_millis(20)),
            (),
        );
        assert_eq!(res.status(), 200);
        let h = res.headers();
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h[GRPC_STATUS], "8");
        assert_eq!(h[GRPC_MESSAGE], "rate limit exceeded");
        assert_eq!(h[PUSHBACK], "20");
        assert_eq!(header_code(h), Some(Code::ResourceExhausted));
        assert_eq!(header_code(&HeaderMap::new()), None);
    }
}
