//! gRPC: tonic servers answer over-limit calls with `RESOURCE_EXHAUSTED` and a push-back,
//! and tonic clients honour it, with gRFC A6's retry rules and retry throttling.
//!
//! gRPC answers an over-limit call with `RESOURCE_EXHAUSTED` in a trailers-only response, and
//! carries the server's cooldown in `grpc-retry-pushback-ms` ([gRFC A6]), not `429` and
//! `Retry-After`.
//!
//! **Server.** A [`RejectLayer`](crate::RejectLayer) answers a gRPC call (a `POST` over
//! HTTP/2 with `content-type: application/grpc…`) with a trailers-only `RESOURCE_EXHAUSTED`
//! carrying `grpc-retry-pushback-ms` (the real wait, rounded up to the millisecond) and
//! `cache-control: no-store`. Detection is automatic and leaves plain HTTP alone (a `GET` or
//! an HTTP/1.1 request gets its 429 whatever its content type): the default rejection does
//! it for bodies that convert from text (axum), with or without this feature, and
//! [`RejectLayer::grpc`](crate::RejectLayer::grpc) does it for tonic's body. Keys come from
//! metadata as from headers (gRPC metadata *are* HTTP/2 headers):
//! [`HeaderKey::x_api_key`](crate::extract::HeaderKey::x_api_key),
//! [`HeaderKey::authorization`](crate::extract::HeaderKey::authorization).
//!
//! **Client.** [`RetryAfterLayer::grpc`](crate::RetryAfterLayer::grpc) wraps a tonic
//! `Channel`: a trailers-only `RESOURCE_EXHAUSTED` or `UNAVAILABLE` with a push-back pauses
//! the shared bucket for it — every worker holds — and the call is retried after it; a
//! negative or malformed push-back is not retried; without one, the exponential backoff
//! applies; the [retry throttle](GrpcRetryLayer::retry_throttle) stops retries
//! while the server keeps failing. A call's deadline (`grpc-timeout`) covers every attempt: a
//! retry carries the time left, and none is made that could not go out before the deadline.
//!
//! ```
//! use std::time::Duration;
//! use tonic::body::Body;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_throttle::{Bucket, Quota, RateLimitLayer, RetryAfterLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower_throttle::BoxError> {
//! // A server that pushes back the first call for 2 s, in a trailers-only response.
//! let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
//! let server = service_fn({
//!     let calls = calls.clone();
//!     move |_req: http::Request<Body>| {
//!         let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
//!         async move {
//!             let mut res = http::Response::new(Body::empty());
//!             res.headers_mut().insert("content-type", "application/grpc".parse().unwrap());
//!             if first {
//!                 res.headers_mut().insert("grpc-status", "8".parse().unwrap());
//!                 res.headers_mut().insert("grpc-retry-pushback-ms", "2000".parse().unwrap());
//!             }
//!             Ok::<_, std::io::Error>(res)
//!         }
//!     }
//! });
//! let bucket = Bucket::new(Quota::per_second(10));
//! let client = ServiceBuilder::new()
//!     .layer(RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO).grpc())
//!     .layer(RateLimitLayer::new(bucket.clone()))
//!     .service(server); // a tonic `Channel` in real life
//!
//! let start = tokio::time::Instant::now();
//! let call = http::Request::builder()
//!     .header("content-type", "application/grpc")
//!     .body(Body::empty())?;
//! let res = client.oneshot(call).await?;
//! assert!(res.headers().get("grpc-status").is_none()); // the retry went through
//! assert_eq!(start.elapsed(), Duration::from_secs(2)); // exactly the server's push-back
//! assert_eq!(bucket.snapshot().paused_until, None); // the pause is over
//! # Ok(())
//! # }
//! ```
//!
//! ```text
//! tonic::client::Grpc ─► GrpcRetry ─► RateLimit ─► Channel ══► Server ─► Reject ─► service
//!                           │ push-back: pause()  │ wait for a token       │ RESOURCE_EXHAUSTED
//!                           └────────► Bucket ◄───┘                        │ + push-back
//! ```
//!
//! Retries follow A6: only a trailers-only answer is retried, a streamed request is sent
//! once ([`GrpcRequest`]), a code in the [retryable set](GrpcRetryLayer::retryable) without a
//! push-back gets exponential backoff and pauses no one, a negative or malformed push-back is
//! not retried, and a call's `grpc-timeout` bounds every attempt together. The
//! [retry throttle](GrpcRetryLayer::retry_throttle) stops retries while the server keeps
//! failing.
//!
//! [gRFC A6]: https://github.com/grpc/proposal/blob/master/A6-client-retries.md

mod classify;
mod client;
mod reject;
mod request;
mod wire;

pub use self::client::{GrpcRetry, GrpcRetryLayer, ToHttp};
pub use self::reject::ResourceExhausted;
pub use self::request::GrpcRequest;
