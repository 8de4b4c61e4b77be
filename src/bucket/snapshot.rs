//! [`Snapshot`]: a read-only view of a [`Bucket`].

use std::time::Duration;

use tokio::time::Instant;

use super::Bucket;
use crate::Quota;

/// A read-only view of a [`Bucket`], from [`Bucket::snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The bucket's configured quota (its ceiling).
    pub quota: Quota,
    /// The quota enforced now: [`quota`](Self::quota), or the same shape at a lower rate while
    /// the rate follows a server's push-back. Its rate is
    /// [`effective.per_second_f64()`](Quota::per_second_f64).
    pub effective: Quota,
    /// Whole tokens available now.
    pub available: u32,
    /// Time until one more token is available (zero when one is available now).
    pub next_token_in: Duration,
    /// Time until the bucket is full again.
    pub full_in: Duration,
    /// The end of a [`pause`](Bucket::pause) in force, if any.
    pub paused_until: Option<Instant>,
    /// Requests waiting in [`acquire`](Bucket::acquire) (or in a waiting layer).
    pub waiting: usize,
}

impl Bucket {
    /// A read-only view of the bucket now, for headers and metrics.
    pub fn snapshot(&self) -> Snapshot {
        let (level, paused_in, waiting, effective) = self.shared.level();
        let now = Instant::now();
        Snapshot {
            quota: self.quota(),
            effective,
            available: u32::try_from(level.available).unwrap_or(u32::MAX),
            next_token_in: Duration::from_nanos(level.next_in),
            full_in: Duration::from_nanos(level.full_in),
            paused_until: (paused_in > 0).then(|| now + Duration::from_nanos(paused_in)),
            waiting,
        }
    }
}
