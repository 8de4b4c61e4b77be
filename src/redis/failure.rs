//! [`FailurePolicy`]: what a decision does when Redis fails, and the local fallback buckets.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::backend::max_cost;
use super::error::{RedisDecisionError, RedisError};
use crate::{AcquireError, Algorithm, Bucket, Quota};

/// What a decision does when Redis fails: unreachable, slower than the timeout, a reply that
/// makes no sense, or a key of the wrong type.
///
/// | policy | `try_acquire` | `acquire` | `pause` |
/// |---|---|---|---|
/// | [`Open`](FailurePolicy::Open) | admits | admits | `Ok` |
/// | [`Closed`](FailurePolicy::Closed) | [`RedisDecisionError::Backend`] | [`RedisDecisionError::Backend`] | [`RedisDecisionError::Backend`] |
/// | [`Local`](FailurePolicy::Local) | an in-memory [`Bucket`] decides | an in-memory [`Bucket`] waits | `Ok` |
///
/// Whatever the policy, a [`RedisBucket::pause`](super::RedisBucket::pause) also holds this
/// process's own decisions at once, and with `Local` the in-memory bucket is paused too
/// (for [`RedisKeyed`](super::RedisKeyed), the key's in-memory bucket), so a pause is kept
/// through an outage.
///
/// Which to pick:
/// - **Clients** calling an API that enforces its own limit: [`Open`](FailurePolicy::Open)
///   or [`Local`](FailurePolicy::Local) are safe, because the API's own 429s are still
///   honoured by [`RetryAfterLayer`](crate::RetryAfterLayer).
/// - **Servers** protecting themselves: [`Local`](FailurePolicy::Local) with
///   `fraction = 1 / number of processes`, so the processes together stay near the limit.
/// - [`Closed`](FailurePolicy::Closed) when exceeding the limit costs more than refusing
///   everything while Redis is down (a paid API, a hard contractual cap).
///
/// The default is `Local { fraction: 1.0 }`: during an outage each process keeps the whole
/// quota to itself (fail open, but never unbounded). Every fallback decision is counted in
/// [`RedisStats::fallbacks`](super::RedisStats::fallbacks), and the change of state
/// (Redis failing, Redis back) is logged once each with the `tracing` feature.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit: the limit is not enforced while Redis fails.
    Open,
    /// Reject with [`RedisDecisionError::Backend`], carrying the [`RedisError`].
    Closed,
    /// Decide with an in-memory [`Bucket`] of this process, at `fraction` of the quota
    /// (rate and burst scaled as by [`Quota::headroom`]), with the same
    /// [`Algorithm`](crate::Algorithm). A request larger than that bucket's largest cost (its
    /// burst, or its count for the windows) takes all of it.
    Local {
        /// The share of the quota this process may use alone, in `(0, 1]`.
        fraction: f64,
    },
}

/// ```
/// use tower_throttle::redis::FailurePolicy;
///
/// assert_eq!(FailurePolicy::default(), FailurePolicy::Local { fraction: 1.0 });
/// ```
impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy::Local { fraction: 1.0 }
    }
}

impl FailurePolicy {
    /// The quota of the local fallback, or `None` when the policy has none.
    pub(crate) fn local_quota(&self, quota: Quota) -> Result<Option<Quota>, RedisError> {
        match *self {
            FailurePolicy::Local { fraction } => quota
                .try_headroom(fraction)
                .map(Some)
                .map_err(|_| RedisError::config("FailurePolicy::Local fraction must be in (0, 1]")),
            _ => Ok(None),
        }
    }
}

/// Cost to ask from a fallback bucket: never more than its largest cost.
fn local_cost(bucket: &Bucket, n: u32) -> u32 {
    n.min(max_cost(bucket.quota(), bucket.algorithm()))
}

/// The policy's answer to `try_acquire` when Redis failed.
pub(crate) fn try_acquire_fallback(
    policy: &FailurePolicy,
    local: Option<&Bucket>,
    n: u32,
    error: RedisError,
) -> Result<(), RedisDecisionError> {
    match (policy, local) {
        (FailurePolicy::Open, _) => Ok(()),
        (FailurePolicy::Local { .. }, Some(b)) => b
            .try_acquire(local_cost(b, n))
            .map_err(RedisDecisionError::Throttled),
        _ => Err(RedisDecisionError::Backend(error)),
    }
}

/// The policy's answer to `acquire` when Redis failed.
pub(crate) async fn acquire_fallback(
    policy: &FailurePolicy,
    local: Option<&Bucket>,
    n: u32,
    error: RedisError,
) -> Result<(), RedisDecisionError> {
    match (policy, local) {
        (FailurePolicy::Open, _) => Ok(()),
        (FailurePolicy::Local { .. }, Some(b)) => match b.acquire(local_cost(b, n)).await {
            Ok(()) => Ok(()),
            Err(AcquireError::ExceedsBurst(e)) => Err(RedisDecisionError::ExceedsBurst(e)),
            Err(_) => Err(RedisDecisionError::Backend(error)),
        },
        _ => Err(RedisDecisionError::Backend(error)),
    }
}

/// The policy's answer to `pause` when Redis failed (the pause is kept locally anyway).
pub(crate) fn pause_fallback(
    policy: &FailurePolicy,
    error: RedisError,
) -> Result<(), RedisDecisionError> {
    match policy {
        FailurePolicy::Closed => Err(RedisDecisionError::Backend(error)),
        _ => Ok(()),
    }
}

/// The in-memory buckets of a keyed limit's local fallback, bounded.
///
/// At most `capacity` keys get a bucket of their own; when the table is full, buckets that
/// are full again (equivalent to no entry: dropping them loses nothing) are swept, at most
/// once a second, and keys that still find no room share one overflow bucket. Live buckets
/// are never evicted: that would reset their limit.
///
/// Each key's bucket is a [`Bucket`] of the limit's algorithm: unlike a
/// [`KeyedBucket`](crate::KeyedBucket), it can wait (`acquire`) and be paused per key, which
/// the fallback of [`RedisKeyed`](super::RedisKeyed) needs.
#[derive(Debug)]
pub(crate) struct LocalTable {
    quota: Quota,
    algorithm: Algorithm,
    /// What a fresh bucket has available: a bucket back at this holds nothing to keep.
    full: u32,
    capacity: usize,
    inner: Mutex<Table>,
    overflow: Bucket,
}

#[derive(Debug)]
struct Table {
    buckets: HashMap<[u8; 16], Bucket>,
    last_sweep: Option<Instant>,
}

impl LocalTable {
    pub(crate) fn new(quota: Quota, algorithm: Algorithm, capacity: usize) -> Self {
        let overflow = Bucket::with_algorithm(quota, algorithm);
        LocalTable {
            quota,
            algorithm,
            full: overflow.snapshot().available,
            capacity,
            inner: Mutex::new(Table {
                buckets: HashMap::new(),
                last_sweep: None,
            }),
            overflow,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fallback bucket of a key.
    pub(crate) fn bucket(&self, id: &[u8; 16]) -> Bucket {
        let mut t = self.lock();
        if let Some(b) = t.buckets.get(id) {
            return b.clone();
        }
        if t.buckets.len() >= self.capacity {
            let now = Instant::now();
            let due = t
                .last_sweep
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1));
            if due {
                t.last_sweep = Some(now);
                let full = self.full;
                t.buckets.retain(|_, b| {
                    let s = b.snapshot();
                    s.available < full || s.waiting > 0 || s.paused_until.is_some()
                });
            }
            if t.buckets.len() >= self.capacity {
                return self.overflow.clone();
            }
        }
        let b = Bucket::with_algorithm(self.quota, self.algorithm);
        t.buckets.insert(*id, b.clone());
        b
    }

    /// How many keys have a bucket of their own.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_checked() {
        let q = Quota::per_second(10);
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            assert!(FailurePolicy::Local { fraction: bad }
                .local_quota(q)
                .is_err());
        }
        let local = FailurePolicy::Local { fraction: 0.5 }
            .local_quota(q)
            .unwrap()
            .unwrap();
        assert_eq!(local.burst_size(), 5);
        assert_eq!(local.interval(), Duration::from_millis(200));
        assert_eq!(FailurePolicy::Open.local_quota(q).unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn table_is_bounded_and_sweeps_only_full_buckets() {
        let table = LocalTable::new(Quota::per_second(1).burst(1), Algorithm::TokenBucket, 2);
        let a = table.bucket(&[1; 16]);
        a.try_acquire(1).unwrap();
        let _b = table.bucket(&[2; 16]);
        assert_eq!(table.len(), 2);
        // Full: `b` is full again (sweepable), `a` is not.
        let c = table.bucket(&[3; 16]);
        assert_eq!(table.len(), 2);
        assert!(table.bucket(&[1; 16]).same_bucket(&a));
        assert!(table.bucket(&[3; 16]).same_bucket(&c));
        c.try_acquire(1).unwrap();
        // Nothing sweepable, and the last sweep was just now: overflow.
        let d = table.bucket(&[4; 16]);
        assert!(d.same_bucket(&table.overflow));
        assert_eq!(table.len(), 2);
    }
}
