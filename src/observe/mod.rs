//! Seeing what the limiter does: an [`Observer`] on a bucket or a rejecting layer.
//!
//! Attach one with [`BucketBuilder::observer`](crate::BucketBuilder::observer) (admissions,
//! delays, refusals, pauses, tokens) or
//! [`RejectLayer::observer`](crate::RejectLayer::observer) (every rejection, and what a
//! [dry run](crate::RejectLayer::dry_run) would have rejected). [`Counters`] counts with atomics;
//! with the `metrics` feature, [`MetricsObserver`] reports through the `metrics` facade.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tower_throttle::observe::Counters;
//! use tower_throttle::{Bucket, Quota};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let counters = Arc::new(Counters::default());
//! let bucket = Bucket::builder(Quota::per_second(10).burst(1))
//!     .observer(counters.clone())
//!     .build();
//! bucket.acquire(1).await.unwrap();          // admitted at once
//! bucket.acquire(1).await.unwrap();          // admitted after 100 ms
//! assert!(bucket.try_acquire(1).is_err());   // refused
//! bucket.pause(Duration::from_secs(1));
//!
//! let seen = counters.get();
//! assert_eq!((seen.admitted, seen.delayed, seen.refused, seen.paused), (2, 1, 1, 1));
//! assert_eq!(seen.waited, Duration::from_millis(100));
//! # }
//! ```

mod counters;
#[cfg(feature = "metrics")]
mod metrics;

use std::time::Duration;

pub use self::counters::{Counters, Counts};
#[cfg(feature = "metrics")]
pub use self::metrics::MetricsObserver;

/// A value read from outside the process that nothing legitimate produces: ignored, and
/// reported through [`Observer::ignored`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ignored {
    /// What the processes sharing a Redis limit learned (`<key>:rate`) resumes further
    /// ahead than the longest pause (`max_pause`), or is not a number.
    SharedResume,
    /// What the processes sharing a Redis limit learned would cut the rate further than one
    /// push-back can (below half the rate in force).
    SharedRate,
}

/// Told what a bucket or a rejecting layer decides. Every method has an empty default.
///
/// Calls come from the hot path: keep them cheap (an atomic add, a metrics handle), never
/// blocking.
pub trait Observer: Send + Sync + std::fmt::Debug + 'static {
    /// `tokens` were admitted after waiting `waited` (zero when admitted at once).
    fn admitted(&self, tokens: u32, waited: Duration) {
        let _ = (tokens, waited);
    }

    /// A request for `tokens` was refused; it would fit after `retry_after`. `dry_run`: a
    /// rejecting layer in dry-run mode let it through anyway.
    fn refused(&self, tokens: u32, retry_after: Duration, dry_run: bool) {
        let _ = (tokens, retry_after, dry_run);
    }

    /// The bucket was paused for `cooldown` (a server's `Retry-After`).
    fn paused(&self, cooldown: Duration) {
        let _ = cooldown;
    }

    /// Whole tokens available now; reported after waits, refusals and pauses.
    fn tokens(&self, available: u32) {
        let _ = available;
    }

    /// The bucket's rate changed to `per_second` tokens a second (a server pushed back, or
    /// the rate grew back; see [`adaptive`](crate::adaptive)).
    fn rate(&self, per_second: f64) {
        let _ = per_second;
    }

    /// A value read from Redis was ignored: see [`Ignored`].
    fn ignored(&self, what: Ignored) {
        let _ = what;
    }
}
