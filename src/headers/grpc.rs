//! The fields of a gRPC server's refusal: a trailers-only response with `grpc-status`,
//! `grpc-message` and gRFC A6's `grpc-retry-pushback-ms`, to a gRPC call: a `POST` over
//! HTTP/2 whose `content-type` says gRPC.

use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version};

use super::values::ceil;

/// The status of a gRPC call, in a trailers-only response or in trailers.
pub(crate) const GRPC_STATUS: &str = "grpc-status";
/// The status message (percent-encoded; the crate only writes plain ASCII).
const GRPC_MESSAGE: &str = "grpc-message";
/// gRFC A6 server push-back: milliseconds to wait before a retry; negative or malformed
/// means "do not retry".
pub(crate) const PUSHBACK: &str = "grpc-retry-pushback-ms";

/// The status of a request turned away for want of a key: waiting does not help it.
pub(crate) const INVALID_ARGUMENT: i32 = 3;
/// The status of a request turned away by a limit.
pub(crate) const RESOURCE_EXHAUSTED: i32 = 8;
/// `INTERNAL`: the server is set up wrong.
pub(crate) const INTERNAL: i32 = 13;
/// `UNAVAILABLE`: shed to keep capacity for critical requests.
pub(crate) const UNAVAILABLE: i32 = 14;

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

/// Whether `req` is a gRPC call: a `POST` over HTTP/2 with a gRPC `content-type`. Anything
/// else (a `GET`, HTTP/1.1) is plain HTTP whatever its content type says, so that a refusal
/// a cache could store is never answered in a 200.
pub(crate) fn is_grpc_call<B>(req: &Request<B>) -> bool {
    req.method() == Method::POST && req.version() == Version::HTTP_2 && is_grpc(req.headers())
}

/// The value of `grpc-retry-pushback-ms` for a wait: whole milliseconds, rounded **up** (a
/// client that honours it never comes back early), at most `i32::MAX`.
fn pushback_value(wait: Duration) -> HeaderValue {
    HeaderValue::from(ceil(wait, Duration::from_millis(1)).min(i32::MAX as u64))
}

/// A trailers-only response: HTTP 200, `content-type: application/grpc`, the status `code`
/// in the headers, and an empty body (which ends the stream with the headers).
pub(crate) fn trailers_only<B>(
    code: i32,
    message: &'static str,
    pushback: Option<Duration>,
    body: B,
) -> Response<B> {
    let mut res = Response::new(body);
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(GRPC_STATUS, HeaderValue::from(code));
    h.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    if let Some(wait) = pushback {
        h.insert(PUSHBACK, pushback_value(wait));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        let with = |ct| {
            [(CONTENT_TYPE, HeaderValue::from_static(ct))]
                .into_iter()
                .collect()
        };
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;charset=utf-8",
        ] {
            assert!(is_grpc(&with(ct)), "{ct}");
        }
        for ct in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/json",
            "application/grp",
            "",
        ] {
            assert!(!is_grpc(&with(ct)), "{ct}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn grpc_calls_are_http2_posts() {
        let req = |method: Method, version| {
            Request::builder()
                .method(method)
                .version(version)
                .header(CONTENT_TYPE, "application/grpc")
                .body(())
                .unwrap()
        };
        assert!(is_grpc_call(&req(Method::POST, Version::HTTP_2)));
        assert!(!is_grpc_call(&req(Method::GET, Version::HTTP_2)));
        assert!(!is_grpc_call(&req(Method::POST, Version::HTTP_11)));
        assert!(!is_grpc_call(&req(Method::GET, Version::HTTP_11)));
        let mut plain = req(Method::POST, Version::HTTP_2);
        plain.headers_mut().remove(CONTENT_TYPE);
        assert!(!is_grpc_call(&plain));
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
            RESOURCE_EXHAUSTED,
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
        let no_wait = trailers_only(INVALID_ARGUMENT, "no rate-limit key", None, ());
        assert_eq!(no_wait.headers()[GRPC_STATUS], "3");
        assert!(no_wait.headers().get(PUSHBACK).is_none());
    }
}
