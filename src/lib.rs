//! Tower middleware that keeps HTTP traffic inside rate limits.
//!
//! One [`Bucket`] — a token bucket behind a cheap, `Clone` handle — gates every request of
//! every clone of a service: N workers, N clones, one rate. [`RateLimitLayer`] waits in
//! `poll_ready` until the bucket admits the request.
//!
//! # Client: many workers, one quota
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_throttle::{Bucket, Quota, RateLimitLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let bucket = Bucket::new(Quota::per_second(8).burst(2));
//! let api = service_fn(|id: u32| async move { Ok::<_, std::io::Error>(id) });
//! let svc = ServiceBuilder::new()
//!     .layer(RateLimitLayer::new(bucket.clone()))
//!     .service(api);
//!
//! let start = tokio::time::Instant::now();
//! let workers: Vec<_> = (0..10)
//!     .map(|id| tokio::spawn(svc.clone().oneshot(id))) // clones share the bucket
//!     .collect();
//! for w in workers {
//!     w.await??;
//! }
//! // 2 at once (the burst), then one every 125 ms.
//! assert_eq!(start.elapsed(), Duration::from_secs(1));
//! # Ok(())
//! # }
//! ```
//!
//! # Server: per API key plus a global ceiling, answering 429
//!
//! ```
//! use axum::{routing::get, Router};
//! use tower::ServiceExt;
//! use tower_throttle::extract::HeaderKey;
//! use tower_throttle::keyed::KeyedBucket;
//! use tower_throttle::{Bucket, Quota, RejectLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let limit = RejectLayer::keyed(KeyedBucket::new(Quota::per_second(1)), HeaderKey::x_api_key())
//!     .global(Bucket::new(Quota::per_second(1000))); // 429 + Retry-After (rounded up) + RateLimit-Policy / RateLimit
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(limit);
//!
//! let req = || http::Request::get("/").header("x-api-key", "alice").body(axum::body::Body::empty()).unwrap();
//! assert_eq!(app.clone().oneshot(req()).await.unwrap().status(), 200);
//! let refused = app.oneshot(req()).await.unwrap();
//! assert_eq!(refused.status(), 429);
//! assert_eq!(refused.headers()["retry-after"], "1");
//! # }
//! ```
//!
//! See [`reject`] for bounded waits, fallbacks and dry runs, and [`extract`] for the key
//! extractors (peer IP, proxy-aware client IP, headers).
//!
//! # Server push-back: retry outside, rate limit inside
//!
//! [`RetryAfterLayer`] goes **outside** the [`RateLimitLayer`] of the same bucket: a 429 or 503
//! [pauses](Bucket::pause) the shared bucket for the server's `Retry-After`, so every worker
//! holds, and each retry waits for a token like any request. See [`retry_after`] for a runnable
//! example and the retry rules (idempotency, backoff, budget, `max_retry_after`).
//!
//! A push-back also lowers the bucket's rate, never above the configured one, and
//! success raises it back: a client configured above a server's real rate settles just below
//! it. [`Bucket::adaptive`] discovers an unknown quota, with no rate at all. See [`adaptive`].
//!
//! ```text
//! RetryAfterLayer ──► RateLimitLayer ──► ConcurrencyLimit ──► hyper / reqwest
//!       │ 429/503: pause()     │ poll_ready: wait for a token
//!       └──────────────► Bucket (shared) ◄──────┘
//! ```
//!
//! With the `grpc` feature, the `grpc` module teaches both sides gRPC: rejections become
//! trailers-only `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms`, and tonic clients honour
//! that push-back with gRFC A6's retry rules and retry throttling.
//!
//! # Choosing an algorithm
//! The token bucket is the default; [`BucketBuilder::algorithm`] picks a leaky bucket (strict
//! spacing), a fixed window, a sliding window or an exact sliding log behind the same handle,
//! and [`KeyedBucket`] takes the same choice per key. See [`Algorithm`] for the trade-offs.
//!
//! # Guarantees
//! Over any interval of length `t`, a limit admits at most `burst + rate·t` tokens across
//! all clones and tasks (one more when a timer fires late); waiting is first come, first served, cancel-safe and drift-free; a
//! pause holds every waiter; `call` without a ready `poll_ready` panics; a refusal is a value
//! ([`Denied`]), and bad configuration is an error at construction ([`QuotaError`]). The
//! exact bounds, per algorithm, are in
//! [`docs/semantics.md`](https://github.com/tower-throttle/tower-throttle/blob/main/docs/semantics.md).
//!
//! # Supported Rust versions
//! The minimum supported Rust version is 1.85 (tokio's); the `reqwest`, `redis`,
//! `redis-cluster` and `grpc` features need 1.88 (their dependencies').

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[macro_use]
mod trace;
#[macro_use]
mod inner;

pub mod adaptive;
mod algorithm;
pub mod bucket;
mod budget;
mod clock;
mod cost;
mod denied;
mod engine;
pub mod extract;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod headers;
pub mod keyed;
mod limit;
pub mod observe;
mod plan;
mod priority;
mod quota;
pub mod rate_limit;
#[cfg(feature = "redis")]
pub mod redis;
pub mod reject;
#[cfg(feature = "reqwest")]
pub mod reqwest;
pub mod retry_after;
mod slot;

pub use crate::algorithm::Algorithm;
pub use crate::bucket::{Acquire, Bucket, BucketBuilder, Charge, Feedback, Sent, Snapshot};
pub use crate::cost::{Cost, Resource};
pub use crate::denied::{BackendError, Denied, ExceedsBurst, QueueFull, Throttled};
pub use crate::keyed::KeyedBucket;
pub use crate::limit::{KeyedLimit, Limit};
pub use crate::plan::Plan;
pub use crate::priority::Priority;
pub use crate::quota::{Quota, QuotaError};
pub use crate::rate_limit::{RateLimit, RateLimitLayer};
pub use crate::reject::RejectLayer;
pub use crate::retry_after::{RetryAfter, RetryAfterLayer};

/// The README's snippets, compiled and run as doctests.
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The boxed error of layers whose inner errors are converted, as in tower.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
