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
//! use tower_throttle::{Bucket, Quota, RateLimitLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let limit = RateLimitLayer::keyed(KeyedBucket::new(Quota::per_second(1)), HeaderKey::x_api_key())
//!     .global(Bucket::new(Quota::per_second(1000)))
//!     .reject(); // 429 + Retry-After (rounded up) + RateLimit-Policy / RateLimit
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
//! Repeated push-back also lowers the bucket's rate, never above the configured one, and
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
//! The token bucket is the default; [`Bucket::with_algorithm`] picks a leaky bucket (strict
//! spacing), a fixed window, a sliding window or an exact sliding log behind the same handle,
//! and [`KeyedBucket`] takes the same choice per key. See [`Algorithm`] for the trade-offs.
//!
//! # Semantics
//! 1. **Rate invariant**: over any interval of length `t`, admitted tokens ≤ `burst + rate·t`,
//!    across all clones and tasks.
//! 2. **Shared**: clones share one bucket; a layer applied to many services shares one bucket.
//! 3. **Pause**: after [`Bucket::pause`]`(d)` nothing is admitted for `d`, waiters included;
//!    then admission restarts from an empty bucket (no burst at the end of a cooldown).
//!    A push-back reported to [`Bucket::feedback`] also lowers the rate, never above the
//!    configured one, which holds until then ([`adaptive`]).
//! 4. **Retry-After is a floor**: a retry never goes out before the server's cooldown; jitter
//!    only adds; a cooldown above [`RetryAfterLayer::max_retry_after`] returns the response.
//! 5. **Fair, quiet, drift-free waiting**: first come, first served; each waiter is woken once,
//!    at its turn; admission instants follow the schedule, never the instant a (1 ms) timer
//!    fired; refill is lazy, with no background task.
//! 6. **Cancel-safe**: a waiter dropped before its turn gives its place back.
//! 7. **tower contract**: `poll_ready` returning ready means the next `call` is admitted;
//!    `call` without it panics ("poll_ready must be called first").
//! 8. **Bad input never panics**: configuration errors are clear errors at construction
//!    ([`QuotaError`]); a refusal is a value ([`Denied`]): "not now" ([`Throttled`], with the
//!    wait) or "never" ([`ExceedsBurst`], a cost above the burst), no sentinel values.
//! 9. **One backend per limit**: a limit kept in Redis is decided in Redis on every path
//!    that admits, waits or rejects; only an in-process limit offers a synchronous
//!    decision ([`Bucket::try_acquire`]).
//!
//! # Design notes
//! - **GCRA in one atomic.** The bucket is the generic cell rate algorithm: one `u64`, the
//!   instant the bucket is full again. Admitting is one clock read and one compare-and-swap;
//!   the wait queue's lock is only taken by requests that must wait.
//! - **Reservations, not polling.** A request that must wait reserves its admission instant
//!   at once and sleeps on one timer until then. That is what makes waiting fair, quiet and
//!   drift-free; dropping the reservation moves everyone behind it forward.
//! - **Inner service first.** [`RateLimit`] polls the inner service to readiness *before*
//!   taking a token (the reverse order would let tokens be spent by requests stuck behind a
//!   busy inner service, which then leave together in a burst above the limit).
//! - **tokio's clock.** Time is read through `tokio::time::Instant`, so paused-clock tests drive
//!   decisions and waits on one timeline.
//!
//! # Supported Rust versions
//! The minimum supported Rust version is 1.85 (tokio's); the `reqwest` and `redis` features
//! need 1.88 (their dependencies').

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
mod denied;
mod engine;
pub mod extract;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod headers;
pub mod keyed;
mod limit;
pub mod observe;
mod quota;
pub mod rate_limit;
#[cfg(feature = "redis")]
pub mod redis;
pub mod reject;
#[cfg(feature = "reqwest")]
pub mod reqwest;
pub mod retry_after;

pub use crate::algorithm::Algorithm;
#[allow(deprecated)]
pub use crate::bucket::AcquireError;
pub use crate::bucket::{Acquire, Bucket, BucketBuilder, Feedback, Sent, Snapshot};
pub use crate::denied::{BackendError, Denied, ExceedsBurst, QueueFull, Throttled};
pub use crate::keyed::KeyedBucket;
pub use crate::limit::{KeyedLimit, Limit};
pub use crate::quota::{Quota, QuotaError};
pub use crate::rate_limit::{RateLimit, RateLimitLayer};
pub use crate::reject::RejectLayer;
pub use crate::retry_after::{RetryAfter, RetryAfterLayer};

/// The boxed error of layers whose inner errors are converted, as in tower.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
