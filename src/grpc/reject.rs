//! Server side: a gRPC request turned away gets a trailers-only `RESOURCE_EXHAUSTED`.

use std::future::{ready, Ready};

use http::{Request, Response};

use crate::headers::grpc::is_grpc_call;
use crate::reject::{OnReject, RejectLayer, Rejected};

/// The rejection of a gRPC server, for response bodies with an empty `Default` (tonic's
/// `Body`): made by [`RejectLayer::grpc`].
///
/// A gRPC call (a `POST` over HTTP/2 with a gRPC `content-type`) gets a trailers-only
/// response — HTTP 200, `grpc-status: 8` (`RESOURCE_EXHAUSTED`), a `grpc-message`, and
/// `grpc-retry-pushback-ms`: the wait, rounded up to the millisecond — so a gRPC client sees the status its library understands (an HTTP
/// 429 would reach it as `UNAVAILABLE`, with no delay). A request without a key gets
/// `grpc-status: 3` (`INVALID_ARGUMENT`), or `13` (`INTERNAL`) when the server is set up wrong
/// ([`MissingKey::Fail`](crate::reject::MissingKey::Fail)). Any other request gets the plain
/// status (429; 400 or 500 without a key) with an empty body.
///
/// The default [`TooManyRequests`](crate::reject::TooManyRequests) answers gRPC requests
/// the same way, for bodies that convert from text (axum's).
#[derive(Debug, Clone, Copy, Default)]
pub struct ResourceExhausted;

impl<ReqB, B, E> OnReject<Request<ReqB>, Response<B>, E> for ResourceExhausted
where
    B: Default,
{
    type Future = Ready<Result<Response<B>, E>>;

    fn on_reject(&self, req: Request<ReqB>, rejected: &Rejected) -> Self::Future {
        if is_grpc_call(&req) {
            return ready(Ok(rejected.grpc_answer(B::default())));
        }
        let mut res = Response::new(B::default());
        *res.status_mut() = rejected.status_code();
        ready(Ok(res))
    }
}

impl<K, E, O, C> RejectLayer<K, E, O, C> {
    /// Answer with gRPC statuses: see [`ResourceExhausted`]. For tonic servers
    /// (`Server::builder().layer(limit)`), whose response body is tonic's `Body`:
    ///
    /// ```
    /// use tower::{service_fn, ServiceBuilder, ServiceExt};
    /// use tower_throttle::extract::HeaderKey;
    /// use tower_throttle::keyed::KeyedBucket;
    /// use tower_throttle::{Bucket, Quota, RejectLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), std::convert::Infallible> {
    /// let limit = RejectLayer::keyed(KeyedBucket::new(Quota::per_second(10).burst(1)), HeaderKey::x_api_key())
    ///     .global(Bucket::new(Quota::per_second(1000)))
    ///     .grpc();
    /// let svc = ServiceBuilder::new().layer(limit).service(service_fn(|_: http::Request<tonic::body::Body>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
    /// }));
    ///
    /// let call = || {
    ///     http::Request::builder()
    ///         .method("POST")
    ///         .version(http::Version::HTTP_2)
    ///         .header("content-type", "application/grpc")
    ///         .header("x-api-key", "alice")
    ///         .body(tonic::body::Body::empty())
    ///         .unwrap()
    /// };
    /// svc.clone().oneshot(call()).await?;
    /// let refused = svc.oneshot(call()).await?;
    /// assert_eq!(refused.status(), 200); // gRPC status codes travel in HTTP 200s
    /// assert_eq!(refused.headers()["grpc-status"], "8"); // RESOURCE_EXHAUSTED
    /// assert_eq!(refused.headers()["grpc-retry-pushback-ms"], "100");
    /// assert_eq!(refused.headers()["cache-control"], "no-store");
    /// # Ok(())
    /// # }
    /// ```
    pub fn grpc(self) -> RejectLayer<K, E, ResourceExhausted, C> {
        self.with(ResourceExhausted)
    }
}
