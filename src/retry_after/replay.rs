//! What the layer needs of requests ([`Replay`]) and responses ([`HttpResponse`]).

use http::{Extensions, HeaderMap, Method, StatusCode};

/// A request that may be sent again, identically.
///
/// Implemented for [`http::Request<B>`] with a `Clone` body (the copy has the same method, URI,
/// version, headers, extensions and body) and, with the `reqwest` feature, for
/// `reqwest::Request` (through its `try_clone`). Implement it for other request types (or for a
/// newtype around a request whose body may stream) and return `None` from
/// [`replay`](Replay::replay) when the request cannot be sent twice: such a request is sent
/// once and never retried, rather than re-sent with an empty or partial body.
pub trait Replay: Sized {
    /// An identical copy to send again, or `None` if this request can only be sent once.
    fn replay(&self) -> Option<Self>;

    /// The request method, which decides whether a request that may have reached the server
    /// is safe to send again.
    fn method(&self) -> &Method;
}

impl<B: Clone> Replay for http::Request<B> {
    fn replay(&self) -> Option<Self> {
        let mut copy = http::Request::new(self.body().clone());
        *copy.method_mut() = self.method().clone();
        *copy.uri_mut() = self.uri().clone();
        *copy.version_mut() = self.version();
        *copy.headers_mut() = self.headers().clone();
        *copy.extensions_mut() = self.extensions().clone();
        Some(copy)
    }

    fn method(&self) -> &Method {
        self.method()
    }
}

/// A response whose status and headers the layer reads.
///
/// Implemented for [`http::Response<B>`] and, with the `reqwest` feature, `reqwest::Response`.
pub trait HttpResponse {
    /// The status code.
    fn status(&self) -> StatusCode;
    /// The header fields.
    fn headers(&self) -> &HeaderMap;
    /// The extensions, where the layer leaves a [`RetryInfo`](super::RetryInfo).
    fn extensions_mut(&mut self) -> &mut Extensions;
}

impl<B> HttpResponse for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }

    fn headers(&self) -> &HeaderMap {
        self.headers()
    }

    fn extensions_mut(&mut self) -> &mut Extensions {
        self.extensions_mut()
    }
}

/// Whether a method is idempotent (RFC 9110 §9.2.2): sending it twice has the effect of
/// sending it once.
pub(crate) fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}
