//! Honour a server's push-back: `429`/`503` and `Retry-After`, with a coordinated, shared
//! backoff.
//!
//! [`RetryAfterLayer`] reads `Retry-After` (delta-seconds or an HTTP-date, see
//! [`read_retry_after`](crate::headers::read_retry_after)), [pauses](crate::Bucket::pause)
//! the shared bucket for the whole cooldown — so every worker holds, not just the one that
//! got the 429 — and retries once the cooldown is over. Jitter is added on top of the
//! server's value, never subtracted. Transport errors and other 5xx get exponential backoff
//! with jitter, a retry cap and a retry budget; other 4xx are final.
//!
//! Stack it outside the rate limit of the same bucket, so every attempt costs a token:
//!
//! ```
//! use std::time::Duration;
//! use http::{Request, Response, StatusCode};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_throttle::{Bucket, Quota, RateLimitLayer, RetryAfterLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower_throttle::BoxError> {
//! let bucket = Bucket::new(Quota::per_second(10));
//! let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
//! let api = service_fn({
//!     let calls = calls.clone();
//!     move |_req: Request<String>| {
//!         // The first call is refused with "come back in 2 s".
//!         let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
//!         async move {
//!             let mut resp = Response::new(String::new());
//!             if first {
//!                 *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
//!                 resp.headers_mut().insert("retry-after", "2".parse().unwrap());
//!             }
//!             Ok::<_, std::io::Error>(resp)
//!         }
//!     }
//! });
//! let client = ServiceBuilder::new()
//!     .layer(RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO))
//!     .layer(RateLimitLayer::new(bucket.clone()))
//!     .service(api);
//!
//! let start = tokio::time::Instant::now();
//! let resp = client.oneshot(Request::new("hello".to_string())).await?;
//! assert_eq!(resp.status(), StatusCode::OK);
//! assert_eq!(start.elapsed(), Duration::from_secs(2)); // exactly the server's cooldown
//! # Ok(())
//! # }
//! ```

mod backoff;
pub(crate) mod classify;
mod future;
mod layer;
mod policy;
mod replay;
mod service;

use std::time::Duration;

pub use self::backoff::Jitter;
pub use self::future::ResponseFuture;
pub use self::layer::RetryAfterLayer;
pub use self::policy::Failure;
#[cfg(feature = "reqwest")]
pub(crate) use self::policy::{Action, Attempt, Policy};
pub use self::replay::{HttpResponse, Replay};
pub use self::service::RetryAfter;
pub use crate::budget::RetryBudget;

/// Left in the extensions of every response the layer returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryInfo {
    attempts: u32,
    cooldown: Option<Duration>,
}

impl RetryInfo {
    pub(crate) fn new(attempts: u32, cooldown: Option<Duration>) -> Self {
        RetryInfo { attempts, cooldown }
    }

    /// Attempts made, the first included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The cooldown the last response asked for, if it was a push-back. When the layer
    /// returned a push-back response because this exceeded
    /// [`max_retry_after`](RetryAfterLayer::max_retry_after), this is how long the server
    /// wants the caller to wait.
    pub fn cooldown(&self) -> Option<Duration> {
        self.cooldown
    }
}
