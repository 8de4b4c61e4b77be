//! [`OnReject`]: what a [`Reject`](super::Reject) service answers to a request over the limit.

use std::fmt;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::rejected::Rejected;
use crate::headers::grpc::{
    is_grpc_call, trailers_only, INTERNAL, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE,
};

/// What a [`Reject`](super::Reject) service does with a request it turns away.
///
/// - [`TooManyRequests`] (the default): a `429` with a tiny text body.
/// - [`RespondWith`], from [`RejectLayer::on_reject`](super::RejectLayer::on_reject): a
///   response built by your closure.
/// - [`Fallback`], from [`RejectLayer::fallback`](super::RejectLayer::fallback): another
///   service answers (a cached or cheaper response).
///
/// The service then adds the rate-limit fields the response does not already have, and the
/// [`Rejected`] to its extensions. `Res` and `E` are the inner service's response and error.
pub trait OnReject<Req, Res, E> {
    /// The future of the answer.
    type Future: Future<Output = Result<Res, E>>;

    /// Answer `req`, turned away because of `rejected` (also in the request's extensions).
    fn on_reject(&self, req: Req, rejected: &Rejected) -> Self::Future;

    /// Whether the answer is a refusal that gets `Retry-After` (true), or a real answer that
    /// only gets the `RateLimit` fields (false).
    fn is_refusal(&self) -> bool {
        true
    }
}

/// The default rejection: `429 Too Many Requests` (or `400 Bad Request` for a request without
/// a key, when such requests are rejected) with a short `text/plain` body.
///
/// Works for any response body that converts from a `&'static str` (axum's `Body`, `String`,
/// `Full<Bytes>`…); for other bodies use [`on_reject`](super::RejectLayer::on_reject).
///
/// A gRPC call (a `POST` over HTTP/2 with `content-type: application/grpc…`) gets a gRPC
/// answer instead, which its client library understands (an HTTP 429 would reach it as
/// `UNAVAILABLE`, with no delay): a trailers-only response — HTTP 200, `grpc-status: 8` (`RESOURCE_EXHAUSTED`), a
/// `grpc-message`, and `grpc-retry-pushback-ms`: the wait, rounded up to the millisecond — or
/// `grpc-status: 3` (`INVALID_ARGUMENT`) for a request without a key. Any other request
/// gets the 429, whatever its content type says. Every refusal carries
/// `cache-control: no-store`, so that no shared cache keeps it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TooManyRequests;

impl<ReqB, B, E> OnReject<Request<ReqB>, Response<B>, E> for TooManyRequests
where
    B: From<&'static str>,
{
    type Future = Ready<Result<Response<B>, E>>;

    fn on_reject(&self, req: Request<ReqB>, rejected: &Rejected) -> Self::Future {
        if is_grpc_call(&req) {
            return ready(Ok(rejected.grpc_answer(B::from(""))));
        }
        let body = match rejected.status_code() {
            StatusCode::BAD_REQUEST => "Bad Request\n",
            StatusCode::INTERNAL_SERVER_ERROR => "Internal Server Error\n",
            StatusCode::SERVICE_UNAVAILABLE => "Service Unavailable\n",
            _ => "Too Many Requests\n",
        };
        let mut res = Response::new(B::from(body));
        *res.status_mut() = rejected.status_code();
        res.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        ready(Ok(res))
    }
}

impl Rejected {
    /// The answer of [`TooManyRequests`] to a gRPC request, with `body` (empty).
    pub(crate) fn grpc_answer<B>(&self, body: B) -> Response<B> {
        match self.status_code() {
            StatusCode::BAD_REQUEST => {
                trailers_only(INVALID_ARGUMENT, "no rate-limit key", None, body)
            }
            StatusCode::INTERNAL_SERVER_ERROR => {
                trailers_only(INTERNAL, "rate-limit key missing", None, body)
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                trailers_only(UNAVAILABLE, "load shed", self.wait(), body)
            }
            _ => trailers_only(RESOURCE_EXHAUSTED, "rate limit exceeded", self.wait(), body),
        }
    }
}

/// A rejection response built by a closure: see
/// [`RejectLayer::on_reject`](super::RejectLayer::on_reject).
pub struct RespondWith<F> {
    f: Arc<F>,
}

impl<F> RespondWith<F> {
    pub(crate) fn new(f: F) -> Self {
        RespondWith { f: Arc::new(f) }
    }
}

impl<F> Clone for RespondWith<F> {
    fn clone(&self) -> Self {
        RespondWith {
            f: Arc::clone(&self.f),
        }
    }
}

impl<F> fmt::Debug for RespondWith<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RespondWith").finish_non_exhaustive()
    }
}

impl<Req, B, E, F> OnReject<Req, Response<B>, E> for RespondWith<F>
where
    F: Fn(&Rejected) -> Response<B>,
{
    type Future = Ready<Result<Response<B>, E>>;

    fn on_reject(&self, _: Req, rejected: &Rejected) -> Self::Future {
        ready(Ok((self.f)(rejected)))
    }
}

/// Over-limit requests go to another service: see
/// [`RejectLayer::fallback`](super::RejectLayer::fallback).
#[derive(Debug, Clone)]
pub struct Fallback<S> {
    service: S,
}

impl<S> Fallback<S> {
    pub(crate) fn new(service: S) -> Self {
        Fallback { service }
    }
}

impl<S, Req, Res, E> OnReject<Req, Res, E> for Fallback<S>
where
    S: Service<Req, Response = Res, Error = E> + Clone,
{
    type Future = Oneshot<S, Req>;

    fn on_reject(&self, req: Req, _: &Rejected) -> Self::Future {
        Oneshot::new(self.service.clone(), req)
    }

    fn is_refusal(&self) -> bool {
        false
    }
}

pin_project! {
    /// Drives a clone of the fallback service to readiness, then calls it.
    pub struct Oneshot<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, Req>
    where
        S: Service<Req>,
    {
        NotReady { service: S, req: Option<Req> },
        Called { #[pin] future: S::Future },
    }
}

impl<S: Service<Req>, Req> Oneshot<S, Req> {
    fn new(service: S, req: Req) -> Self {
        Oneshot {
            state: State::NotReady {
                service,
                req: Some(req),
            },
        }
    }
}

impl<S: Service<Req>, Req> Future for Oneshot<S, Req> {
    type Output = Result<S::Response, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let future = match self.as_mut().project().state.project() {
                StateProj::Called { future } => return future.poll(cx),
                StateProj::NotReady { service, req } => {
                    std::task::ready!(service.poll_ready(cx))?;
                    let req = req.take().expect("polled after completion");
                    service.call(req)
                }
            };
            self.as_mut().project().state.set(State::Called { future });
        }
    }
}

impl<S: Service<Req>, Req> fmt::Debug for Oneshot<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Oneshot").finish_non_exhaustive()
    }
}
