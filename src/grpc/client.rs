//! Client side: [`GrpcRetryLayer`], the [`RetryAfterLayer`] of tonic clients, with the gRPC
//! settings of the retry policy.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use tonic::body::Body;
use tonic::Code;
use tower_layer::Layer;
use tower_service::Service;

use super::classify::Grpc;
use super::request::GrpcRequest;
use crate::retry_after::{HttpResponse, ResponseFuture, RetryAfter, RetryBudget};
use crate::{BoxError, RetryAfterLayer};

/// A6's suggested per-call buffer: a request body larger than this is sent once.
const DEFAULT_BUFFER_LIMIT: usize = 1 << 20;

impl RetryAfterLayer {
    /// This layer for tonic clients: see [`GrpcRetryLayer`].
    pub fn grpc(self) -> GrpcRetryLayer {
        GrpcRetryLayer {
            retry: self,
            grpc: Grpc::default(),
            buffer_limit: DEFAULT_BUFFER_LIMIT,
        }
    }
}

/// [`RetryAfterLayer`] for tonic clients, whose request bodies are streams: made by
/// [`RetryAfterLayer::grpc`].
///
/// Each call's body is read ahead as far as it is ready and kept, so that a retry sends the
/// same bytes; a call whose body is not whole before it is sent (a client or bidirectional
/// stream), holds more than one message, or exceeds the
/// [`buffer_limit`](Self::buffer_limit), is sent once and never resent (see
/// [`GrpcRequest`]). Responses are read as gRFC A6 says:
///
/// - a trailers-only response with a code in the [retryable set](Self::retryable) is
///   retried: after `grpc-retry-pushback-ms` when the server sent one — the shared bucket is
///   paused for it, so every worker holds — or after the exponential backoff when it did not;
/// - a negative or malformed push-back means "do not retry": the status goes to the caller;
/// - a response with headers is committed (its status comes in the trailers): never retried;
/// - retries stop while the [retry throttle](Self::retry_throttle) is low;
/// - a retry carries `grpc-previous-rpc-attempts` (A6), so the server can tell it apart;
/// - a call's deadline, its `grpc-timeout`, covers every attempt (A6). A retry carries the
///   time left as its `grpc-timeout` (rounded down: the server never gets more time than the
///   call has). No attempt goes out at or after the deadline: when the push-back or backoff
///   would end there or later, the last status goes to the caller at once, and a retry
///   still waiting for its turn at the rate limit when the deadline comes is dropped, the
///   last status going to the caller then. The deadline counts from the call (the wait for
///   the first attempt's token comes before it). A malformed `grpc-timeout` is no deadline,
///   and is sent on as it is.
///
/// Put it outside the rate limit of the same bucket, on a tonic `Channel`; cloning this layer
/// does not create a new bucket:
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use tower_throttle::retry_after::RetryBudget;
/// use tower_throttle::{Bucket, Quota, RateLimitLayer, RetryAfterLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = Bucket::new(Quota::per_second(50).burst(10));
/// let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
/// let svc = ServiceBuilder::new()
///     .layer(
///         RetryAfterLayer::new(bucket.clone())
///             .max_retries(4)
///             .grpc()
///             .retry_throttle(RetryBudget::a6(10, 0.1)),
///     )
///     .layer(RateLimitLayer::new(bucket.clone()))
///     .service(channel);
/// let client = tonic::client::Grpc::new(svc); // clone it for every worker
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct GrpcRetryLayer {
    retry: RetryAfterLayer,
    grpc: Grpc,
    buffer_limit: usize,
}

impl GrpcRetryLayer {
    /// The gRPC status codes retried when a server answers with them in a trailers-only
    /// response (A6 `retryableStatusCodes`). Default: `RESOURCE_EXHAUSTED` and `UNAVAILABLE`.
    ///
    /// As in A6, a code in this set is retried for any call — gRPC has no idempotency
    /// marker, so the set is the promise that the server did not act on the call. Leave
    /// `UNAVAILABLE` out when a server may return it after acting on a call that must not
    /// run twice.
    pub fn retryable(mut self, codes: impl IntoIterator<Item = Code>) -> Self {
        self.grpc.retryable = codes.into_iter().collect();
        self
    }

    /// Throttle retries as A6 does, with a budget made by [`RetryBudget::a6`]: failed
    /// attempts take from it, successful ones give back. Shared by every clone of the layer.
    /// Off by default.
    pub fn retry_throttle(mut self, throttle: RetryBudget) -> Self {
        self.grpc.throttle = Some(throttle);
        self
    }

    /// The most bytes of a call's request kept for a retry (A6
    /// `per_rpc_buffer_limit_in_bytes`); a larger request is sent once. Default 1 MiB.
    pub fn buffer_limit(mut self, bytes: usize) -> Self {
        self.buffer_limit = bytes;
        self
    }
}

impl<S> Layer<S> for GrpcRetryLayer {
    type Service = GrpcRetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let grpc = Arc::new(self.grpc.clone());
        let retry = self.retry.clone().with(|p| p.protocol = Some(grpc));
        GrpcRetry {
            inner: retry.layer(ToHttp { inner }),
            buffer_limit: self.buffer_limit,
        }
    }
}

/// The service of a [`GrpcRetryLayer`].
#[derive(Debug, Clone)]
pub struct GrpcRetry<S> {
    inner: RetryAfter<ToHttp<S>>,
    buffer_limit: usize,
}

impl<S> GrpcRetry<S> {
    /// A reference to the inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner.get_ref().inner
    }

    /// A mutable reference to the inner service.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner.get_mut().inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner.into_inner().inner
    }
}

impl<S, B> Service<Request<B>> for GrpcRetry<S>
where
    S: Service<Request<Body>> + Clone,
    S::Response: HttpResponse,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<ToHttp<S>, GrpcRequest>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let req = GrpcRequest::new(req.map(Body::new), self.buffer_limit);
        let deadline = req.deadline();
        self.inner.call_until(req, deadline)
    }
}

/// Sends a [`GrpcRequest`] as the `http::Request` a tonic `Channel` takes: the service under
/// the retry logic of a [`GrpcRetry`].
#[derive(Debug, Clone)]
pub struct ToHttp<S> {
    inner: S,
}

impl<S> Service<GrpcRequest> for ToHttp<S>
where
    S: Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: GrpcRequest) -> Self::Future {
        self.inner.call(req.into_http())
    }
}
