//! The gRPC-over-HTTP/2 fields the crate reads and writes: `content-type`, `grpc-status`,
//! `grpc-message` and gRFC A6's `grpc-retry-pushback-ms`.

use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use tonic::Code;

/// The status of a gRPC call, in a trailers-only response or in trailers.
pub(crate) const GRPC_STATUS: &str = "grpc-status";
/// The status message (percent-encoded; the crate only writes plain ASCII).
pub(crate) const GRPC_MESSAGE: &str = "grpc-message";
/// gRFC A6 server push-back: milliseconds to wait before a retry; negative or malformed
/// means "do not retry".
pub(crate) const PUSHBACK: &str = "grpc-retry-pushback-ms";

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
    let digits = value.as_bytes();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Pushback::Stop; // a sign, a space, a fraction, anything else
    }
    match std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse::<i32>().ok())
    {
        Some(ms) => Pushback::After(Duration::from_millis(ms.unsigned_abs().into())),
        None => Pushback::Stop, // out of the 32-bit range
    }
}

/// The value of `grpc-retry-pushback-ms` for a wait: whole milliseconds, rounded **up** (a
/// client that honours it never comes back early), at most `i32::MAX`.
pub(crate) fn pushback_value(wait: Duration) -> HeaderValue {
    let ms = wait.as_nanos().div_ceil(1_000_000);
    HeaderValue::from(u64::try_from(ms).unwrap_or(u64::MAX).min(i32::MAX as u64))
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
