//! [`FailurePolicy`]: what a decision does when Redis fails, and the local fallback buckets.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::error::RedisError;
use crate::extract::KeyDigest;
use crate::{Algorithm, Bucket, Denied, Quota};

/// What a decision does when Redis fails: unreachable, slower than the timeout, a reply that
/// makes no sense, or a key of the wrong type.
///
/// | policy | `try_acquire` | `acquire` | `pause` |
/// |---|---|---|---|
/// | [`Open`](FailurePolicy::Open) | admits | admits | `Ok` |
/// | [`Closed`](FailurePolicy::Closed) | [`Denied::Backend`] | [`Denied::Backend`] | [`Denied::Backend`] |
/// | [`Local`](FailurePolicy::Local) | an in-memory [`Bucket`] decides | an in-memory [`Bucket`] waits | `Ok` |
///
/// Whatever the policy, a [`RedisBucket::pause`](super::RedisBucket::pause) also holds this
/// process's own decisions at once, and with `Local` the in-memory bucket is paused too
/// (for [`RedisKeyed`](super::RedisKeyed), the key's in-memory bucket), so a pause is kept
/// through an outage.
///
/// Which to pick:
/// - [`Closed`](FailurePolicy::Closed), the default: never more than the quota, whatever
///   fails. During an outage every decision fails within the timeout: waiting callers get
///   [`Denied::Backend`](crate::Denied::Backend), the rejecting layers
///   answer 429.
/// - **Servers** that would rather serve than refuse during an outage:
///   [`Local`](FailurePolicy::Local) with `fraction = 1 / number of processes`, so the
///   processes together stay near the limit.
/// - **Clients** calling an API that enforces its own limit: [`Open`](FailurePolicy::Open)
///   or [`Local`](FailurePolicy::Local) are safe, because the API's own 429s are still
///   honoured by [`RetryAfterLayer`](crate::RetryAfterLayer).
///
/// Why `Closed` by default: a default must not multiply the quota. A `Local` default would
/// need the share of each process, which only the deployment knows: `Local { fraction: 1.0 }`
/// gives N processes N times the quota during an outage.
///
/// How failures are detected (after 3 in a row, decisions skip Redis for
/// [`probe_interval`](super::RedisBucketBuilder::probe_interval), then one call probes it),
/// what an outage can let through under each policy, and how decisions return to Redis:
/// [docs/redis.md](https://github.com/tower-throttle/tower-throttle/blob/main/docs/redis.md#failure-policy).
/// Every fallback decision is counted in
/// [`RedisStats::fallbacks`](super::RedisStats::fallbacks), and the change of state
/// (Redis failing, Redis back) is logged once each with the `tracing` feature.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit: the limit is not enforced while Redis fails.
    Open,
    /// Reject with [`Denied::Backend`], carrying the [`RedisError`].
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
/// assert_eq!(FailurePolicy::default(), FailurePolicy::Closed);
/// ```
impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy::Closed
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

    /// The answer to `try_acquire` of `n` tokens when Redis failed; `local` is the local
    /// fallback's bucket.
    pub(crate) fn try_acquire(
        &self,
        local: Option<&Bucket>,
        n: u32,
        error: RedisError,
    ) -> Result<(), Denied> {
        match (self, local) {
            (FailurePolicy::Open, _) => Ok(()),
            (FailurePolicy::Local { .. }, Some(b)) => b.try_acquire(local_cost(b, n)),
            _ => Err(error.into()),
        }
    }

    /// The answer to `acquire` of `n` tokens when Redis failed; `local` is the local
    /// fallback's bucket.
    pub(crate) async fn acquire(
        &self,
        local: Option<&Bucket>,
        n: u32,
        error: RedisError,
    ) -> Result<(), Denied> {
        match (self, local) {
            (FailurePolicy::Open, _) => Ok(()),
            (FailurePolicy::Local { .. }, Some(b)) => match b.acquire(local_cost(b, n)).await {
                Ok(()) => Ok(()),
                Err(never @ Denied::ExceedsBurst(_)) => Err(never),
                Err(_) => Err(error.into()),
            },
            _ => Err(error.into()),
        }
    }

    /// The answer to `pause` when Redis failed (the pause is kept locally anyway).
    pub(crate) fn pause(&self, error: RedisError) -> Result<(), Denied> {
        match self {
            FailurePolicy::Closed => Err(error.into()),
            _ => Ok(()),
        }
    }
}

/// Cost to ask from a fallback bucket: never more than its largest cost (its burst, or its
/// count for the windows).
fn local_cost(bucket: &Bucket, n: u32) -> u32 {
    n.min(crate::bucket::capacity_of(
        &bucket.quota(),
        bucket.algorithm(),
    ))
}

/// The run of failures a local fallback last decided in: a new run starts it over, empty
/// (it continues the process's share of the rate, never with a fresh burst).
#[derive(Debug, Default)]
struct Run(AtomicU64);

impl Run {
    /// Whether the run numbered `outage` is another than the last one seen.
    fn began(&self, outage: u64) -> bool {
        self.0.swap(outage, Ordering::AcqRel) != outage
    }
}

/// The local fallback of a [`RedisBucket`](super::RedisBucket): one in-memory [`Bucket`].
#[derive(Debug)]
pub(crate) struct LocalBucket {
    bucket: Bucket,
    run: Run,
}

impl LocalBucket {
    pub(crate) fn new(quota: Quota, algorithm: Algorithm) -> Self {
        LocalBucket {
            bucket: Bucket::builder(quota).algorithm(algorithm).build(),
            run: Run::default(),
        }
    }

    /// The bucket, for a pause or a new quota.
    pub(crate) fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// The bucket that decides during the run of failures numbered `outage`: emptied when
    /// a new run has begun since it last decided.
    pub(crate) fn fallback(&self, outage: u64) -> &Bucket {
        if self.run.began(outage) {
            self.bucket.pause(Duration::ZERO);
        }
        &self.bucket
    }
}

/// Buckets compared, at most, to choose the one evicted from a full [`LocalTable`].
const EVICT_AMONG: usize = 64;

/// The in-memory buckets of a keyed limit's local fallback, bounded.
///
/// At most `capacity` keys are kept; when the table is full, buckets that are full again
/// (equivalent to no entry: dropping them loses nothing) are swept, at most once a second.
/// When none is, the bucket holding the most tokens among the first [`EVICT_AMONG`] without
/// waiters makes room: every key gets a bucket of its own, so a flood of new keys cannot
/// throttle the keys that come after it. A key evicted starts over empty, like every
/// fallback bucket: it never gains a burst.
///
/// Each key's bucket is a [`Bucket`] of its plan's first quota and algorithm (the local
/// share of it): unlike a [`KeyedBucket`](crate::KeyedBucket), it can wait (`acquire`) and
/// be paused per key, which the fallback of [`RedisKeyed`](super::RedisKeyed) needs. A key
/// whose plan changed starts over, empty, on its new plan.
#[derive(Debug)]
pub(crate) struct LocalTable {
    /// Per plan, numbered as [`RedisKeyed::tier_of`](super::RedisKeyed::tier_of) does.
    plans: Box<[Local]>,
    capacity: usize,
    inner: Mutex<Table>,
    /// The run of failures the buckets belong to.
    run: Run,
}

/// The fallback of the keys of one plan.
#[derive(Debug)]
struct Local {
    quota: Quota,
    algorithm: Algorithm,
    /// What a fresh bucket has available: a bucket back at this holds nothing to keep.
    full: u32,
}

#[derive(Debug)]
struct Table {
    /// Each key's plan and bucket.
    buckets: HashMap<KeyDigest, (usize, Bucket)>,
    last_sweep: Option<Instant>,
}

impl LocalTable {
    /// A table whose keys of plan `i` get buckets of `plans[i]` (at least one plan).
    pub(crate) fn new(
        plans: impl IntoIterator<Item = (Quota, Algorithm)>,
        capacity: usize,
    ) -> Self {
        let plans = plans
            .into_iter()
            .map(|(quota, algorithm)| {
                let fresh = Bucket::builder(quota).algorithm(algorithm).build();
                Local {
                    quota,
                    algorithm,
                    full: fresh.snapshot().available,
                }
            })
            .collect();
        LocalTable {
            run: Run::default(),
            plans,
            capacity: capacity.max(1),
            inner: Mutex::new(Table {
                buckets: HashMap::new(),
                last_sweep: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fallback bucket of a key on plan `tier` during the run of failures numbered
    /// `outage`: every key starts over, empty, when a new run begins (no fresh burst per
    /// outage).
    pub(crate) fn fallback(&self, id: &KeyDigest, tier: usize, outage: u64) -> Bucket {
        if self.run.began(outage) {
            self.lock().buckets.clear();
        }
        self.bucket(id, tier)
    }

    /// The fallback bucket of a key on plan `tier` (the first plan when there is no such
    /// plan); a new one is created empty.
    pub(crate) fn bucket(&self, id: &KeyDigest, tier: usize) -> Bucket {
        let tier = if tier < self.plans.len() { tier } else { 0 };
        let mut t = self.lock();
        match t.buckets.get(id) {
            Some((on, b)) if *on == tier => return b.clone(),
            Some(_) => {
                t.buckets.remove(id);
            }
            None => {}
        }
        if t.buckets.len() >= self.capacity {
            let now = Instant::now();
            let due = t
                .last_sweep
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1));
            if due {
                t.last_sweep = Some(now);
                let plans = &self.plans;
                t.buckets.retain(|_, (tier, b)| {
                    let s = b.snapshot();
                    s.available < plans[*tier].full || s.waiting > 0 || s.paused_until.is_some()
                });
            }
            if t.buckets.len() >= self.capacity {
                let fullest = t
                    .buckets
                    .iter()
                    .map(|(id, (_, b))| (id, b.snapshot()))
                    .filter(|(_, s)| s.waiting == 0)
                    .take(EVICT_AMONG)
                    .max_by_key(|(_, s)| s.available)
                    .map(|(id, _)| *id);
                // Every bucket compared has waiters: the first goes (its waiters keep it).
                let evicted = fullest.or_else(|| t.buckets.keys().next().copied());
                if let Some(id) = evicted {
                    t.buckets.remove(&id);
                }
            }
        }
        let plan = &self.plans[tier];
        let b = Bucket::builder(plan.quota)
            .algorithm(plan.algorithm)
            .build();
        // Decisions fall back here only while the store fails: a fresh burst would be more
        // than the key's share of the limit.
        b.pause(Duration::ZERO);
        t.buckets.insert(*id, (tier, b.clone()));
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

    #[tokio::test(start_paused = true)]
    async fn fallback_buckets_start_empty_and_a_new_outage_starts_every_key_over() {
        let table = LocalTable::new(
            [(Quota::per_second(10).burst(5), Algorithm::TokenBucket)],
            8,
        );
        let id = KeyDigest::from_bytes([7; 16]);
        // Empty, its first token due now (as at the end of a pause): no fresh burst.
        let a = table.fallback(&id, 0, 1);
        assert_eq!(a.snapshot().available, 1, "no fresh burst");
        a.try_acquire(1).unwrap();
        assert!(a.try_acquire(1).is_err());
        tokio::time::advance(Duration::from_millis(100)).await;
        a.try_acquire(1).unwrap();
        assert!(a.try_acquire(1).is_err(), "one token per 100 ms");
        // Same run of failures: the same bucket.
        assert!(table.fallback(&id, 0, 1).same_bucket(&a));
        // The bucket refills while Redis answers again…
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(a.snapshot().available, 5);
        // …but a new run of failures starts the key over, empty.
        let b = table.fallback(&id, 0, 2);
        assert!(!b.same_bucket(&a));
        assert_eq!(b.snapshot().available, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn each_key_falls_back_on_its_plan_and_a_change_of_plan_starts_it_over() {
        let free = (Quota::per_second(1).burst(1), Algorithm::TokenBucket);
        let pro = (Quota::per_second(100).burst(50), Algorithm::FixedWindow);
        let table = LocalTable::new([free, pro], 8);
        let id = KeyDigest::from_bytes([9; 16]);
        let a = table.fallback(&id, 1, 1);
        assert_eq!(a.quota(), pro.0);
        assert_eq!(a.algorithm(), Algorithm::FixedWindow);
        a.try_acquire(1).unwrap();
        assert!(table.fallback(&id, 1, 1).same_bucket(&a));
        // The key's plan changed: a bucket of the new plan, empty.
        let b = table.fallback(&id, 0, 1);
        assert!(!b.same_bucket(&a));
        assert_eq!(b.quota(), free.0);
        assert_eq!(b.snapshot().available, 1, "no fresh burst");
        // A plan the table does not know: the first.
        assert_eq!(
            table.bucket(&KeyDigest::from_bytes([3; 16]), 7).quota(),
            free.0
        );
    }

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
        let table = LocalTable::new([(Quota::per_second(1).burst(1), Algorithm::TokenBucket)], 2);
        let a = table.bucket(&KeyDigest::from_bytes([1; 16]), 0);
        a.try_acquire(1).unwrap();
        let _b = table.bucket(&KeyDigest::from_bytes([2; 16]), 0);
        assert_eq!(table.len(), 2);
        // Full: `b` is full again (sweepable), `a` is not.
        let c = table.bucket(&KeyDigest::from_bytes([3; 16]), 0);
        assert_eq!(table.len(), 2);
        assert!(table
            .bucket(&KeyDigest::from_bytes([1; 16]), 0)
            .same_bucket(&a));
        assert!(table
            .bucket(&KeyDigest::from_bytes([3; 16]), 0)
            .same_bucket(&c));
        c.try_acquire(1).unwrap();
        assert_eq!(table.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_table_evicts_the_bucket_holding_the_most() {
        let key = |k: u8| KeyDigest::from_bytes([k; 16]);
        let table = LocalTable::new([(Quota::per_second(1).burst(2), Algorithm::TokenBucket)], 2);
        let a = table.bucket(&key(1), 0);
        a.try_acquire(1).unwrap(); // a holds none, b one of two: neither is full
        let b = table.bucket(&key(2), 0);
        tokio::time::advance(Duration::from_millis(500)).await;
        // Nothing sweepable: `b`, holding the most, makes room, and the new key gets a
        // bucket of its own.
        let c = table.bucket(&key(3), 0);
        assert_eq!(table.len(), 2);
        assert!(table.bucket(&key(1), 0).same_bucket(&a));
        assert!(table.bucket(&key(3), 0).same_bucket(&c));
        assert!(!c.same_bucket(&a) && !c.same_bucket(&b));
        // `b` starts over empty when it comes back: no burst.
        let b2 = table.bucket(&key(2), 0);
        assert!(!b2.same_bucket(&b));
        assert_eq!(b2.snapshot().available, 1);
    }
}
