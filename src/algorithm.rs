//! [`Algorithm`]: how a [`Bucket`](crate::Bucket) turns its [`Quota`](crate::Quota) into
//! admissions.
//!
//! # Why an enum, not a trait
//! The algorithm is chosen by name, as a value, and the handles stay one concrete type:
//! [`Bucket`](crate::Bucket), [`KeyedBucket`](crate::KeyedBucket) and the layers are not
//! generic over it, so a service stack's type does not change with the algorithm and a
//! configuration file can pick it. The set is closed on purpose: every algorithm must also
//! exist per key (in a compact per-key state), as a Lua script in Redis, and under `pause`
//! and `set_quota`, which a user-supplied trait implementation could not promise. Inside,
//! each algorithm is one engine that the bucket and the keyed table both decide with, and
//! each place dispatches once to it (the token and leaky bucket admit on the bucket's
//! lock-free cell: no virtual call, no lock on their fast path). The enum is
//! `#[non_exhaustive]`, so algorithms can be added without a breaking change.

/// How a bucket decides, chosen by name at construction with
/// [`BucketBuilder::algorithm`](crate::BucketBuilder::algorithm).
///
/// Every algorithm works behind the same [`Bucket`](crate::Bucket) handle, so the waiting and
/// rejecting layers, weighted costs, fair (FIFO), quiet and cancel-safe waiting,
/// [`pause`](crate::Bucket::pause), [`snapshot`](crate::Bucket::snapshot) and
/// [`set_quota`](crate::Bucket::set_quota) work the same for each.
///
/// # Choosing an algorithm
///
/// | algorithm | shape | bound over any interval of length `t` | state | pick it when |
/// |---|---|---|---|---|
/// | [`TokenBucket`](Algorithm::TokenBucket) (default) | bursts up to `burst`, then the rate | `burst + rate·t` | 8 bytes, lock-free | almost always: idle clients may burst |
/// | [`LeakyBucket`](Algorithm::LeakyBucket) | strict spacing, no bursts | after a request of cost `n`, nothing for `n/rate` | 8 bytes | the downstream cannot take bursts at all |
/// | [`FixedWindow`](Algorithm::FixedWindow) | up to `count` per aligned `period` | `count` per aligned window, up to `2·count` across a boundary | a counter (per key: 16 bytes) | you must match an API documented as "N per minute, resetting on the minute" |
/// | [`SlidingWindow`](Algorithm::SlidingWindow) | weighted two-window estimate | see below | two counters (per key: 16 bytes) | you want windows without the boundary burst, at low cost |
/// | [`SlidingLog`](Algorithm::SlidingLog) | exact sliding window | `count` in every window of length `period` | one entry per admission in the last `period` | you need the exact window and `count` is modest |
///
/// The quota's `count` and `period` give the rate (`count / period`) for every algorithm; the
/// token bucket also uses its `burst`. A request may cost at most `burst` tokens (token and
/// leaky bucket) or `count` tokens (windows).
///
/// The same choice works per key ([`KeyedBucketBuilder::algorithm`](crate::keyed::KeyedBucketBuilder::algorithm)),
/// where the state per key is what the column above says (the sliding log's per key).
///
/// **Leaky bucket, weighted**: a request goes once the one before it has drained, and its `n`
/// tokens then drain over the next `n` intervals. An idle leaky bucket therefore takes a
/// request of any allowed cost at once, and [`try_acquire`](crate::Bucket::try_acquire)
/// admits it; charging the `n` intervals *before* the request instead would make every cost
/// above one wait however long the bucket had been idle.
///
/// **Fixed windows** are aligned to multiples of the period since the UNIX epoch (a
/// one-minute window resets on the minute), or to an instant of your choice
/// ([`BucketBuilder::window_origin`](crate::BucketBuilder::window_origin),
/// [`KeyedBucketBuilder::window_origin`](crate::keyed::KeyedBucketBuilder::window_origin)).
/// A client can take `count` at the end of one window and `count` again at the start of the
/// next: up to twice the limit across a boundary.
///
/// **Sliding window** (approximate) admits when `previous · (1 − f) + current + cost ≤ count`,
/// where `f` is the elapsed fraction of the current aligned window: the previous window's count
/// is assumed to be spread evenly over it. When it was, the estimate is exact; its worst case is
/// a previous window whose whole count came at its very end, which lets through up to
/// `count · (1 + f)` in the trailing window — at most twice the limit, and only for traffic that
/// bunched at a boundary. Use [`SlidingLog`](Algorithm::SlidingLog) when that matters.
///
/// The README shows admissions over time for each algorithm under the same bursty arrivals
/// (`docs/algorithms.svg`, drawn by `cargo run --example algorithms_svg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// Token bucket (GCRA): bursts up to the quota's burst, then the sustained rate.
    #[default]
    TokenBucket,
    /// Leaky bucket: one admission per interval, strictly spaced; at most
    /// [`max_queue`](Algorithm::max_queue) requests wait in
    /// [`acquire`](crate::Bucket::acquire) or a [`RateLimitLayer`](crate::RateLimitLayer),
    /// more are refused at once.
    ///
    /// Build it with [`Algorithm::leaky_bucket`]; match it as `LeakyBucket { max_queue, .. }`.
    #[non_exhaustive]
    LeakyBucket {
        /// The most requests waiting at once.
        max_queue: usize,
    },
    /// Fixed windows of the quota's period, aligned to the clock, `count` per window.
    FixedWindow,
    /// Sliding window, approximated from two aligned fixed windows.
    SlidingWindow,
    /// Exact sliding window: a log of the admissions in the last period.
    SlidingLog,
}

impl Algorithm {
    /// A leaky bucket ([`Algorithm::LeakyBucket`]) with at most `max_queue` requests waiting in
    /// [`acquire`](crate::Bucket::acquire) at once.
    ///
    /// ```
    /// use tower_throttle::Algorithm;
    ///
    /// let leaky = Algorithm::leaky_bucket(100);
    /// assert_eq!(leaky.max_queue(), Some(100));
    /// assert!(matches!(leaky, Algorithm::LeakyBucket { .. }));
    /// assert_eq!(Algorithm::TokenBucket.max_queue(), None);
    /// ```
    pub const fn leaky_bucket(max_queue: usize) -> Self {
        Algorithm::LeakyBucket { max_queue }
    }

    /// The leaky bucket's bound on waiting requests; `None` for the other algorithms.
    pub const fn max_queue(self) -> Option<usize> {
        match self {
            Algorithm::LeakyBucket { max_queue, .. } => Some(max_queue),
            _ => None,
        }
    }

    /// Whether this is a window algorithm (fixed, sliding or sliding log).
    pub fn is_window(self) -> bool {
        !self.is_gcra()
    }

    /// Whether the engine is the lock-free GCRA (token and leaky bucket).
    pub(crate) fn is_gcra(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::LeakyBucket { .. })
    }
}
