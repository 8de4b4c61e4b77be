//! [`Replay`] for `reqwest::Request` and [`HttpResponse`] for `reqwest::Response`, so that
//! `reqwest::Client` runs under the tower layers.

use http::{Extensions, HeaderMap, Method, StatusCode};

use crate::retry_after::{HttpResponse, Replay};

/// A copy from `reqwest::Request::try_clone`: `None` for a streaming body, which is then
/// sent once and never retried.
impl Replay for ::reqwest::Request {
    fn replay(&self) -> Option<Self> {
        self.try_clone()
    }

    fn method(&self) -> &Method {
        ::reqwest::Request::method(self)
    }
}

impl HttpResponse for ::reqwest::Response {
    fn status(&self) -> StatusCode {
        ::reqwest::Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        ::reqwest::Response::headers(self)
    }

    fn extensions_mut(&mut self) -> &mut Extensions {
        ::reqwest::Response::extensions_mut(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffered_body_replays_a_streaming_one_does_not() {
        let client = ::reqwest::Client::new();
        let req = client
            .put("http://127.0.0.1:1/x")
            .header("x-id", "7")
            .body("payload")
            .build()
            .unwrap();
        let copy = Replay::replay(&req).expect("a buffered body is replayable");
        assert_eq!(Replay::method(&copy), Method::PUT);
        assert_eq!(copy.url(), req.url());
        assert_eq!(copy.headers()["x-id"], "7");
        assert_eq!(
            copy.body().and_then(|b| b.as_bytes()),
            Some(&b"payload"[..])
        );

        let streaming = client
            .post("http://127.0.0.1:1/x")
            .body(::reqwest::Body::wrap(String::from("once")))
            .build()
            .unwrap();
        assert!(Replay::replay(&streaming).is_none());
    }
}
