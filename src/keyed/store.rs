//! [`KeyedBucket`]: one bucket per key, of any algorithm, in a sharded table that forgets unused
//! keys.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::builder::KeyedBucketBuilder;
use super::tables::on_core;
use super::tiers::{Grant, Refusal, Tiers};
use crate::clock::Clock;
use crate::{Algorithm, Cost, Denied, ExceedsBurst, Plan, Quota, Snapshot, Throttled};

/// The default cap on tracked keys.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// One bucket per key (API key, user, client IP, route…), each of a [`Plan`]: one quota (the
/// token bucket unless [`KeyedBucketBuilder::algorithm`] says otherwise), or several enforced
/// together; one plan for every key, or [a plan per key](#plans).
///
/// A key's bucket is created when the key is first seen and forgotten as soon as it is as if
/// unused again (a token bucket that is full, windows that have passed), which loses nothing:
/// that is what a new key gets. So the table holds only the keys that used some of their
/// quota recently, and it is cleaned as part of normal traffic (each insert sweeps a few
/// slots; the table drops expired entries before it grows and shrinks when it empties). There
/// is no thread to run and no `retain_recent` to call.
///
/// Cloning a `KeyedBucket` is cheap and never creates new buckets: clones share every key.
///
/// # Algorithms
/// Every [`Algorithm`] works per key, with the semantics it has on a [`Bucket`](crate::Bucket):
/// the same decisions and the same exact waits. A key's requests are decided in arrival
/// order, so a bounded wait ([`max_wait`](crate::reject::RejectLayer::max_wait)) never lets a
/// later request go before an earlier reservation. What a key costs:
///
/// | algorithm | state per key | slot with a `u64` key |
/// |---|---|---|
/// | token bucket, leaky bucket | the instant the bucket is full again (8 bytes) | 16 bytes |
/// | fixed window, sliding window | the latest window and two counts (16 bytes) | 24 bytes |
/// | sliding log | a pointer to the key's log: 48 bytes plus 16 per admission within the period | 16 bytes + the log |
/// | a plan of several quotas | a pointer to each quota's state and its last admission | 16 bytes + the states |
///
/// # Plans
/// [`KeyedBucketBuilder::plan`] adds a named plan and [`KeyedBucketBuilder::resolve`] names
/// the plan of each key (a table of API keys to plans, or a claim the key carries: a key
/// type whose `Eq` and `Hash` ignore the claim keeps one state across plans). Each plan
/// keeps its keys in a table of its own, so the keys on the default plan cost what they
/// cost without plans. A key whose plan changes is on the new plan from its next request:
/// what it holds is carried over as [`Bucket::set_quota`](crate::Bucket::set_quota) does
/// (no burst, fractional progress kept, capped at the new burst), and turns booked before
/// the change keep their order. [`set_quota`](KeyedBucket::set_quota) changes the default
/// plan's first quota for every key on it, the same way.
///
/// ```
/// use tower_throttle::{Algorithm, KeyedBucket, Plan, Quota};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let free = Plan::new(Quota::per_second(2)).and(Quota::per_day(100)).algorithm(Algorithm::FixedWindow);
/// let pro = Plan::new(Quota::per_second(20)).and(Quota::per_day(10_000)).algorithm(Algorithm::FixedWindow);
/// let keys: KeyedBucket<String> = KeyedBucket::builder(free)
///     .plan("pro", pro)
///     .resolve(|key: &String| key.starts_with("pro-").then_some("pro"))
///     .build();
/// assert!(keys.try_acquire(&"pro-7".to_owned(), 20).is_ok());
/// assert!(keys.try_acquire(&"free-3".to_owned(), 3).is_err()); // refused: charged nothing
/// assert!(keys.try_acquire(&"free-3".to_owned(), 2).is_ok());
/// # }
/// ```
///
/// # The cap on keys
/// At most [`max_keys`](KeyedBucketBuilder::max_keys) keys are tracked (default
/// 1,000,000, split evenly across the shards), so memory is bounded whatever the traffic. A
/// new key that finds its shard at the cap replaces an expired entry (a full bucket, which
/// loses nothing) or, when there is none, evicts the entry closest to a full bucket among
/// the next 64 of its shard. Every key gets a bucket of its own: a flood of new keys cannot
/// crowd out the keys that come after it. What it costs:
///
/// - **Memory**: at most `max_keys` slots (see below), whatever the rate of new keys.
/// - **Admissions**: an evicted key starts again from a full bucket. Each new key is one
///   full bucket, so `N` new keys per second are admitted up to `N × burst` per second, cap
///   or no cap: per-key limits cannot bound clients that rotate keys; a
///   [`global`](crate::RejectLayer::global) ceiling, or a coarser key in front
///   (an IPv6 /48, see [`PeerIp::ipv6_prefix`](crate::extract::PeerIp::ipv6_prefix)), does.
/// - **Throttled keys**: with the token or leaky bucket, a key that owes more than a flood
///   key is evicted only when every entry compared owes as much, so a flood must spend as
///   many requests per key as the evicted key would get back. Entries of the same window
///   (and logs) compare equal: evictions then walk each shard in turn, and a key evicted
///   keeps its next state for at least `max_keys` new keys. With `F` new keys per second, a
///   tracked key starts again at most once every `max_keys / F` seconds (a day at about 12
///   per second with the default cap), gaining at most one quota each time. Raise
///   `max_keys` above the new keys your windows see, or use the token bucket, to keep that
///   small.
///
/// # Hashing
/// Keys are hashed with a randomly seeded `foldhash`. Keys that an attacker can choose freely
/// (a header, a path) should go through a keyed digest first, as
/// [`HeaderKey`](crate::extract::HeaderKey) does.
///
/// ```
/// use std::time::Duration;
/// use tower_throttle::{KeyedBucket, Quota};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let buckets = KeyedBucket::new(Quota::per_second(2));
/// assert!(buckets.try_acquire(&"alice", 2).is_ok());
/// let throttled = buckets.try_acquire(&"alice", 1).unwrap_err();
/// assert_eq!(throttled.wait(), Some(Duration::from_millis(500)));
/// assert!(buckets.try_acquire(&"bob", 1).is_ok()); // keys are isolated
/// assert_eq!(buckets.len(), 2);
///
/// tokio::time::advance(Duration::from_secs(1)).await;
/// assert_eq!(buckets.snapshot(&"alice").available, 2); // full again
/// # }
/// ```
pub struct KeyedBucket<K> {
    pub(crate) shared: Arc<Tiers<K>>,
}

impl<K> KeyedBucket<K>
where
    K: Hash + Eq + Clone,
{
    /// One bucket per key, each of `plan` (a [`Quota`], or a [`Plan`] of several); at most
    /// 1,000,000 keys tracked.
    pub fn new(plan: impl Into<Plan>) -> Self {
        Self::builder(plan).build()
    }

    /// Configure other plans, the cap on keys or the number of shards.
    pub fn builder(plan: impl Into<Plan>) -> KeyedBucketBuilder<K> {
        KeyedBucketBuilder {
            plan: plan.into(),
            plans: Vec::new(),
            resolve: None,
            max_keys: DEFAULT_MAX_KEYS,
            shards: None,
            clock: Clock::tokio(),
            window_origin: None,
        }
    }

    /// Take `n` tokens from the bucket of `key` now, or say how long until they fit.
    ///
    /// A refused request takes nothing.
    ///
    /// # Errors
    /// [`Denied::Throttled`] with the wait, or [`Denied::ExceedsBurst`] when `n` exceeds what
    /// one request may take (the burst, or a window's count): it can never fit.
    #[inline]
    pub fn try_acquire(&self, key: &K, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        let tokens = u64::from(n);
        let s = &*self.shared;
        if let [tier] = &*s.tiers {
            // One plan: the store's decision inlined per engine, nothing kept of the grant.
            return on_core!(&tier.tables, core => {
                if tokens > core.capacity() {
                    return Err(self.denied(&Refusal::never(0, 0), &n.into()));
                }
                core.try_acquire(key, s.clock.now_ns(), tokens)
                    .map_err(|wait| Throttled::after(Duration::from_nanos(wait)).into())
            });
        }
        self.try_acquire_cost(key, &n.into())
    }

    /// Take `cost` (an amount per [`Resource`](crate::Resource), as
    /// [`Bucket::try_charge`](crate::Bucket::try_charge) takes) from the bucket of `key`
    /// now, charged to every quota of the key's plan that counts one of its resources or to
    /// none; else say how long until it fits.
    ///
    /// ```
    /// use tower_throttle::keyed::KeyedBucket;
    /// use tower_throttle::{Cost, Plan, Quota, Resource};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // Per key: 60 requests and 10,000 tokens per minute.
    /// let plan = Plan::new(Quota::per_minute(60).burst(60))
    ///     .and(Quota::per_minute(10_000).burst(10_000))
    ///     .counting(Resource::TOKENS);
    /// let keys = KeyedBucket::<&str>::new(plan);
    /// let prompt = |tokens| Cost::new().and(Resource::TOKENS, tokens);
    /// assert!(keys.try_acquire_cost(&"alice", &prompt(9_000)).is_ok());
    /// assert!(keys.try_acquire_cost(&"alice", &prompt(2_000)).is_err());
    /// assert!(keys.try_acquire_cost(&"bob", &prompt(2_000)).is_ok());
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), for any quota.
    pub fn try_acquire_cost(&self, key: &K, cost: &Cost) -> Result<(), Denied> {
        match self.shared.acquire(Some(key), cost, 0, false) {
            Ok(_) => Ok(()),
            Err(refusal) => Err(self.denied(&refusal, cost)),
        }
    }

    /// A read-only view of the bucket of `key` now.
    pub fn snapshot(&self, key: &K) -> Snapshot {
        let (view, tier) = self.shared.view(key);
        let quota = self.shared.tiers[tier].plan().quota();
        Snapshot {
            quota,
            effective: quota,
            available: u32::try_from(view.available).unwrap_or(u32::MAX),
            next_token_in: Duration::from_nanos(view.next_in),
            full_in: Duration::from_nanos(view.full_in),
            paused_until: None,
            waiting: 0,
        }
    }

    /// From now on, the first quota of the default plan is `quota`, for every key on it:
    /// as [`Bucket::set_quota`](crate::Bucket::set_quota), what each key holds is carried
    /// over with no burst and its fractional progress kept. Keys on other plans keep theirs.
    pub fn set_quota(&self, quota: Quota) {
        self.shared.set_quota(quota);
    }

    /// The error of `refusal`, for `cost`.
    pub(crate) fn denied(&self, refusal: &Refusal, cost: &Cost) -> Denied {
        match refusal.refused.wait {
            u64::MAX => {
                let tier = &self.shared.tiers[refusal.tier];
                let (requested, burst) = tier.asked(cost, refusal.refused.part);
                let narrow = |n| u32::try_from(n).unwrap_or(u32::MAX);
                Denied::ExceedsBurst(ExceedsBurst {
                    requested: narrow(requested),
                    burst: narrow(burst),
                })
            }
            wait => Throttled::after(Duration::from_nanos(wait)).into(),
        }
    }
}

impl<K: Hash + Eq> KeyedBucket<K> {
    /// The number of keys tracked now, on every plan. It includes keys whose bucket is full
    /// again but has not been swept yet.
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held by the tables (slots; not any heap data the keys themselves own, nor
    /// the logs of [`Algorithm::SlidingLog`], 16 bytes per admission within the period, nor
    /// the states of a plan of several quotas, boxed).
    pub fn allocated_bytes(&self) -> usize {
        self.shared.allocated_bytes()
    }
}

impl<K> KeyedBucket<K> {
    /// The first quota of the default plan.
    pub fn quota(&self) -> Quota {
        self.shared.tiers[0].plan().quota()
    }

    /// The default plan.
    pub fn plan(&self) -> Plan {
        self.shared.tiers[0].plan()
    }

    /// The algorithm of the default plan's first quota.
    pub fn algorithm(&self) -> Algorithm {
        self.plan()
            .quotas()
            .next()
            .map_or(Algorithm::TokenBucket, |q| q.1)
    }

    /// The most keys tracked at once, per plan.
    pub fn max_keys(&self) -> usize {
        self.shared.max_keys
    }

    /// Whether `self` and `other` are handles to the same buckets.
    pub fn same_bucket(&self, other: &KeyedBucket<K>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The plan of a grant or a refusal (`tier`), as the rate-limit fields name it.
    pub(crate) fn plan_of(&self, tier: usize) -> Plan {
        self.shared.tiers[tier].plan()
    }

    /// Tokens left and the time until the limit resets, right after `grant`, seen when it is
    /// due (a reservation: at its instant), with the plan and the quota of the plan they are
    /// about; `None` unless the grant was made to be described.
    pub(crate) fn status(&self, grant: &Grant) -> Option<(u64, Duration, usize, usize)> {
        let (remaining, reset) = grant.status?;
        Some((
            remaining,
            Duration::from_nanos(reset),
            grant.tier,
            grant.part,
        ))
    }

    /// The instant a reservation may go (`None` for an immediate admission).
    pub(crate) fn due(&self, grant: &Grant) -> Option<Instant> {
        let at = grant.admit.at;
        (at > grant.now).then(|| self.shared.clock.instant_at(at, grant.now))
    }
}

impl<K> Clone for KeyedBucket<K> {
    fn clone(&self) -> Self {
        KeyedBucket {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> fmt::Debug for KeyedBucket<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plans: Vec<_> = self.shared.tiers[1..].iter().map(|t| &t.name).collect();
        f.debug_struct("KeyedBucket")
            .field("plan", &self.plan())
            .field("plans", &plans)
            .field("max_keys", &self.shared.max_keys)
            .field(
                "shards",
                &on_core!(&self.shared.tiers[0].tables, c => c.shard_count()),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::builder::prev_power_of_two;

    #[test]
    fn shard_counts() {
        assert_eq!(prev_power_of_two(0), 1);
        assert_eq!(prev_power_of_two(1), 1);
        assert_eq!(prev_power_of_two(7), 4);
        assert_eq!(prev_power_of_two(8), 8);
        let b: KeyedBucket<u64> = KeyedBucket::builder(Quota::per_second(1))
            .max_keys(3)
            .shards(64)
            .build();
        assert_eq!(on_core!(&b.shared.tiers[0].tables, c => c.shard_count()), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_key_beyond_the_cap_gets_its_own_bucket() {
        let b = KeyedBucket::builder(Quota::per_second(1).burst(2))
            .max_keys(2)
            .shards(1)
            .build();
        assert!(b.try_acquire(&1u64, 2).is_ok()); // throttled: owes 2 s
        for k in 2..100 {
            assert!(b.try_acquire(&k, 1).is_ok(), "key {k}");
            assert_eq!(b.snapshot(&k).available, 1, "key {k}");
        }
        assert!(b.try_acquire(&1, 1).is_err()); // key 1 kept its state
        assert_eq!(b.len(), 2);
    }
}
