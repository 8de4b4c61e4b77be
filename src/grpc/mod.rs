//! gRPC: tonic servers answer over-limit calls with `RESOURCE_EXHAUSTED` and a push-back,
//! and tonic clients honour it, with gRFC A6's retry rules and retry throttling.
//!
//! gRPC answers an over-limit call with `RESOURCE_EXHAUSTED` in a trailers-only response, and
//! carries the server's cooldown in `grpc-retry-pushback-ms` ([gRFC A6]), not `429` and
//! `Retry-After`.
//!
//! - **Server**: [`RejectLayer::grpc`](crate::RejectLayer::grpc) answers gRPC requests (by
//!   content type; plain HTTP is left alone) with `RESOURCE_EXHAUSTED` and the real wait,
//!   rounded up to the millisecond. Keys come from metadata like headers
//!   ([`HeaderKey::x_api_key`](crate::extract::HeaderKey::x_api_key)).
//! - **Client**: [`RetryAfterLayer::grpc`](crate::RetryAfterLayer::grpc) wraps a tonic
//!   `Channel`: a push-back pauses the shared bucket (every worker holds) and the call is
//!   retried after it.
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
