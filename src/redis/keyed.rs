//! [`RedisKeyed`]: one limit per key (user, API key, address), kept in Redis.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::backend::Backend;
use super::booking::{self, Tell, Unbooked};
use super::config::Options;
use super::error::RedisError;
use super::failure::{FailurePolicy, LocalTable};
use super::key::keyed_key;
use super::lane::Lanes;
use super::stats::RedisStats;
use super::told;
use crate::extract::{KeyDigest, StableKey};
use crate::{Algorithm, Bucket, Cost, Denied, Plan, Priority, Quota};

/// The name of a key's plan, from its digest.
type PlanName = dyn Fn(&KeyDigest) -> Option<&str> + Send + Sync;

/// How a [`RedisKeyed`] finds a key's plan ([`resolve`](super::RedisKeyedBuilder::resolve)).
#[derive(Clone)]
pub(crate) struct Resolve(pub(crate) Arc<PlanName>);

/// A plan other than the default: its name, the plan, and its backend.
type Tier = (Box<str>, Plan, Arc<Backend>);

impl fmt::Debug for Resolve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolve(..)")
    }
}

/// One limit per key, kept in Redis and shared by every process: the keyed variant of
/// [`RedisBucket`](super::RedisBucket), with the same semantics for each key.
///
/// Keys are any [`StableKey`] (`&str`, `String`, `&[u8]`, integers, IP addresses, a
/// [`KeyDigest`](crate::extract::KeyDigest), …) and may come from requests: they are named by
/// their digest (the [key scheme](crate::extract::StableKey), version 1) in fixed-length Redis
/// keys `<prefix>:v1:{<32 hex digits>}`, so a key never appears in Redis, cannot be too long,
/// cannot choose a Redis Cluster slot or reach another namespace, and is named alike by every
/// process, build and platform — and by the layers: a
/// [`KeyedBucket`](crate::KeyedBucket) made from this limit names a key exactly as
/// [`try_acquire`](RedisKeyed::try_acquire) does. Idle keys cost nothing: each Redis key expires when its bucket
/// is full again (or its window no longer counts).
///
/// Every [`Algorithm`] works, chosen with
/// [`RedisKeyedBuilder::algorithm`](super::RedisKeyedBuilder::algorithm). A
/// [`Plan`] of several quotas, and a plan per key
/// ([`plan`](super::RedisKeyedBuilder::plan), [`resolve`](super::RedisKeyedBuilder::resolve)),
/// work as in a [`KeyedBucket`](crate::KeyedBucket), each decision one script run
/// ([plans](crate::KeyedBucket#plans)).
///
/// ```no_run
/// use tower_throttle::redis::RedisKeyed;
/// use tower_throttle::Denied;
/// use tower_throttle::Quota;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let per_user = RedisKeyed::builder(Quota::per_second(10).burst(20))
///     .url("redis://127.0.0.1:6379")
///     .key_prefix("api-per-user")
///     .build()
///     .await?;
///
/// match per_user.try_acquire("user-42", 1).await {
///     Ok(()) => { /* serve */ }
///     Err(Denied::Throttled(t)) => {
///         println!("429, Retry-After: {}", t.retry_after_secs());
///     }
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisKeyed {
    inner: Arc<Inner>,
}

struct Inner {
    /// The default plan's.
    backend: Arc<Backend>,
    /// The other plans, by name, each on the default plan's connection.
    tiers: Box<[Tier]>,
    resolve: Option<Resolve>,
    lanes: Lanes,
    local: Option<LocalTable>,
    /// Listens for the pauses of the other processes (see [`told`](super::told)); stopped
    /// when the last handle goes.
    listener: told::Listener,
}

impl told::Told for Inner {
    fn listener(&self) -> &told::Listener {
        &self.listener
    }

    /// Another process paused a key, in Redis already: this one's waiters for it asleep on
    /// an instant inside the pause book again.
    fn paused_elsewhere(&self, remaining: Duration, key: Option<&str>) {
        let Some(lane) = key.and_then(|key| self.lanes.find(key)) else {
            return;
        };
        booking::hold(&self.backend, &lane, remaining);
        lane.pause_seen();
    }
}

impl RedisKeyed {
    pub(crate) async fn from_parts(
        options: Options,
        plan: Plan,
        plans: Vec<(Box<str>, Plan)>,
        resolve: Option<Resolve>,
        local_capacity: usize,
    ) -> Result<Self, RedisError> {
        // The local fallback: each plan's first quota (the default plan's, as the options
        // say), its local share.
        let firsts = std::iter::once((plan.quota(), options.algorithm)).chain(
            plans
                .iter()
                .map(|(_, p)| (p.quota(), p.parts()[0].algorithm)),
        );
        let mut locals = Vec::with_capacity(plans.len() + 1);
        for (quota, algorithm) in firsts {
            if let Some(q) = options.policy.local_quota(quota)? {
                locals.push((q, algorithm));
            }
        }
        let local = (!locals.is_empty()).then(|| LocalTable::new(locals, local_capacity));
        let subscribe = told::Subscribe::of(&options);
        let backend = Arc::new(Backend::connect(options, &plan, true).await?);
        let mut tiers = Vec::with_capacity(plans.len());
        for (name, plan) in plans {
            let sibling = Arc::new(backend.sibling(&plan).await?);
            tiers.push((name, plan, sibling));
        }
        let inner = Arc::new(Inner {
            backend,
            tiers: tiers.into(),
            resolve,
            lanes: Lanes::default(),
            local,
            listener: told::Listener::new(),
        });
        let channel = told::keyed_channel(&inner.backend.options.prefix);
        told::start(subscribe, channel, &inner).await;
        Ok(RedisKeyed { inner })
    }

    /// The first quota of the default plan, as [`set_quota`](Self::set_quota) left it.
    pub fn quota(&self) -> Quota {
        self.inner.backend.quota()
    }

    /// The default plan, its first quota as [`set_quota`](Self::set_quota) left it.
    pub fn plan(&self) -> Plan {
        self.inner.backend.plan()
    }

    /// The plan of `key`: the one [`resolve`](super::RedisKeyedBuilder::resolve) names, or
    /// the default plan.
    pub fn plan_of(&self, key: impl StableKey) -> Plan {
        self.plan_at(self.tier_of(&key.key_digest()))
    }

    /// Every key of the default plan decides at `quota` (its first quota) from its next
    /// request on, in this process. As [`Bucket::set_quota`]: a key's state is carried into
    /// the new quota with no burst and its progress kept. The state in Redis records the
    /// parameters it was written with, so each key is carried on its next request whichever
    /// process makes it; every process should make the same change.
    pub fn set_quota(&self, quota: Quota) {
        self.inner.backend.set_quota(quota);
    }

    /// The plan of the key `id`: 0 for the default plan, else 1 + its place among the
    /// others. Asked once per request: a decision, its fields and a give-back all go to the
    /// plan it names.
    pub(crate) fn tier_of(&self, id: &KeyDigest) -> usize {
        let inner = &*self.inner;
        let Some(name) = inner.resolve.as_ref().and_then(|r| (r.0)(id)) else {
            return 0;
        };
        inner
            .tiers
            .iter()
            .position(|(n, ..)| **n == *name)
            .map_or(0, |i| i + 1)
    }

    /// The plan [`tier_of`](Self::tier_of) numbers `tier`.
    pub(crate) fn plan_at(&self, tier: usize) -> Plan {
        match tier.checked_sub(1).and_then(|i| self.inner.tiers.get(i)) {
            Some((_, plan, _)) => plan.clone(),
            None => self.plan(),
        }
    }

    /// The backend deciding on the plan [`tier_of`](Self::tier_of) numbers `tier`.
    fn backend_at(&self, tier: usize) -> &Arc<Backend> {
        match tier.checked_sub(1).and_then(|i| self.inner.tiers.get(i)) {
            Some((.., backend)) => backend,
            None => &self.inner.backend,
        }
    }

    /// The algorithm of the default plan's first quota (set by
    /// [`algorithm`](super::RedisKeyedBuilder::algorithm); default the plan's).
    pub fn algorithm(&self) -> Algorithm {
        self.inner.backend.algorithm
    }

    /// The Redis key holding the state of `key`, every quota of its plan. (A sliding log
    /// also keeps its entries in a sorted set at this key followed by `:log`, or `:q2:log`,
    /// `:q3:log`, … for the plan's later quotas.)
    pub fn redis_key(&self, key: impl StableKey) -> String {
        self.key_of(&key.key_digest())
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        *self.inner.backend.policy()
    }

    /// Counters since this handle was built (shared by its clones).
    pub fn stats(&self) -> RedisStats {
        self.inner.backend.stats()
    }

    /// The Redis key of the key whose digest is `id`.
    fn key_of(&self, id: &KeyDigest) -> String {
        keyed_key(&self.inner.backend.options.prefix, id)
    }

    /// The local fallback's bucket of the key whose digest is `id`, on the plan `tier`, if
    /// the policy has one (see [`LocalTable::fallback`]).
    fn local(&self, id: &KeyDigest, tier: usize) -> Option<Bucket> {
        let inner = &*self.inner;
        let outage = inner.backend.outages();
        inner
            .local
            .as_ref()
            .map(|local| local.fallback(id, tier, outage))
    }

    /// Take `n` tokens of `key`'s limit now, or say how long until they fit. One round trip.
    ///
    /// # Errors
    /// As [`RedisBucket::try_acquire`](super::RedisBucket::try_acquire).
    pub async fn try_acquire(&self, key: impl StableKey, n: u32) -> Result<(), Denied> {
        let id = key.key_digest();
        self.try_acquire_at(id, self.tier_of(&id), &n.into())
            .await
            .map(drop)
            .map_err(|(denied, _)| denied)
    }

    /// [`try_acquire`](Self::try_acquire) of `cost` for the key `id` on the plan `tier`,
    /// saying which quota of the plan refused (0 when it cannot say).
    pub(crate) async fn try_acquire_at(
        &self,
        id: KeyDigest,
        tier: usize,
        cost: &Cost,
    ) -> Result<Option<u64>, (Denied, usize)> {
        let backend = self.backend_at(tier);
        let (n, each) = backend.price(cost);
        if cost.is_free() {
            return Ok(None);
        }
        match &each {
            Some(each) => backend.check_each(each),
            None => backend.check(n),
        }
        .map_err(|e| (e.into(), 0))?;
        let key = self.key_of(&id);
        match (backend.acquire(&key, n, false, each.as_deref(), Priority::Normal)).await {
            Ok(t) => (t.reply.decision())
                .map(|()| Some(t.at_us))
                .map_err(|e| (e, t.part)),
            Err(e) => (backend.fallback())
                .try_acquire(self.local(&id, tier).as_ref(), n, e)
                .map(|()| None)
                .map_err(|e| (e, 0)),
        }
    }

    /// Give back `n` tokens of an admission of `key` that was not used (another limit
    /// refused the request right after). Exact while the key's bucket has not refilled past
    /// that admission (token and leaky bucket), while its window lasts (fixed and sliding
    /// window: the current window's count goes down), or while it is in the log (the newest
    /// entry of `n` tokens is removed). Never below empty. Best effort: a Redis failure
    /// leaves the tokens spent.
    ///
    /// # Errors
    /// [`Denied::Backend`] when Redis could not be reached.
    pub async fn release(&self, key: impl StableKey, n: u32) -> Result<(), Denied> {
        let id = key.key_digest();
        self.release_at(id, self.tier_of(&id), &n.into()).await
    }

    /// [`release`](Self::release) of `cost` for the key `id` on the plan `tier`.
    pub(crate) async fn release_at(
        &self,
        id: KeyDigest,
        tier: usize,
        cost: &Cost,
    ) -> Result<(), Denied> {
        let backend = self.backend_at(tier);
        match backend.price(cost) {
            (n, None) => backend.give_back(&self.key_of(&id), n).await,
            (n, Some(each)) => {
                let key = self.key_of(&id);
                let released = backend.release_booked(&key, n, 0, Some(&each)).await;
                released.map(drop).map_err(Denied::from)
            }
        }
    }

    /// What `cost` holds of the in-flight quotas of the plan `tier`, per quota, when it holds
    /// any.
    pub(crate) fn in_flight(&self, tier: usize, cost: &Cost) -> Option<Vec<u64>> {
        let backend = self.backend_at(tier);
        let held = backend.in_flight(&backend.amounts(cost));
        held.iter().any(|n| *n > 0).then_some(held)
    }

    /// Give back `held` (per quota) of the admission of `key` on the plan `tier` at `at_us`
    /// on the Redis clock: its request ended.
    pub(crate) async fn release_in_flight(
        &self,
        id: KeyDigest,
        tier: usize,
        held: &[u64],
        at_us: u64,
    ) -> Result<(), Denied> {
        let (backend, key) = (self.backend_at(tier), self.key_of(&id));
        let n = u32::try_from(held[0]).unwrap_or(u32::MAX);
        let released = backend.release_booked(&key, n, at_us, Some(held)).await;
        released.map(drop).map_err(Denied::from)
    }

    /// Wait until `n` tokens of `key`'s limit are available, then take them.
    ///
    /// As [`RedisBucket::acquire`](super::RedisBucket::acquire), per key: the waiter books
    /// the earliest instant its tokens fit in Redis, after every earlier booking of that key
    /// (within the booking horizon; else it sleeps until it is within it and asks again),
    /// then sleeps until that instant. Waiters for one key in every process are served in
    /// the order they reach Redis, whatever the algorithm; waiters for different keys do not
    /// wait for each other. Dropping the future while it sleeps gives its booking back, as
    /// [`RedisBucket::acquire`](super::RedisBucket::acquire) does.
    ///
    /// # Errors
    /// As [`RedisBucket::acquire`](super::RedisBucket::acquire).
    pub async fn acquire(&self, key: impl StableKey, n: u32) -> Result<(), Denied> {
        let id = key.key_digest();
        self.acquire_at(id, self.tier_of(&id), &n.into())
            .await
            .map(drop)
    }

    /// [`acquire`](Self::acquire) of `cost` for the key `id` on the plan `tier`.
    pub(crate) async fn acquire_at(
        &self,
        id: KeyDigest,
        tier: usize,
        cost: &Cost,
    ) -> Result<Option<u64>, Denied> {
        if cost.is_free() {
            return Ok(None);
        }
        let inner = &*self.inner;
        // The key's hint, shared by this process's waiters for it while any waits.
        let entered = inner.lanes.enter(id);
        let backend = self.backend_at(tier);
        let (n, each) = backend.price(cost);
        let key = self.key_of(&id);
        let booked = booking::book(backend, entered.lane(), &key, n, each, Priority::Normal);
        match booked.await {
            Ok(admission) => Ok(Some(admission.at_us)),
            Err(Unbooked::Exceeds(e)) => Err(e.into()),
            Err(Unbooked::Failed(e)) => {
                let local = self.local(&id, tier);
                let fallback = inner.backend.fallback();
                fallback.acquire(local.as_ref(), n, e).await.map(|()| None)
            }
        }
    }

    /// Hold every admission of `key`, in every process, for `cooldown`.
    ///
    /// As [`RedisBucket::pause`](super::RedisBucket::pause), for one key. With
    /// [`FailurePolicy::Local`] the key's local bucket is paused too.
    ///
    /// # Errors
    /// [`Denied::Backend`] when Redis fails and the policy is
    /// [`FailurePolicy::Closed`].
    pub async fn pause(&self, key: impl StableKey, cooldown: Duration) -> Result<(), Denied> {
        let inner = &*self.inner;
        let id = key.key_digest();
        let tier = self.tier_of(&id);
        let backend = self.backend_at(tier);
        // The key's waiters in this process asleep on a booked instant book again once the
        // pause is in Redis.
        let entered = inner.lanes.enter(id);
        let lane = entered.lane();
        let cooldown = booking::hold(backend, lane, cooldown);
        if let Some(local) = &inner.local {
            local.bucket(&id, tier).pause(cooldown);
        }
        lane.pause_made();
        let digest = id.to_string();
        let tell = Tell {
            channel: &told::keyed_channel(&backend.options.prefix),
            from: inner.listener.id(),
            key: Some(&digest),
        };
        booking::pause(backend, lane, &self.key_of(&id), cooldown, tell).await
    }
}

impl fmt::Debug for RedisKeyed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisKeyed")
            .field("prefix", &self.inner.backend.options.prefix)
            .field("plan", &self.plan())
            .field(
                "plans",
                &self
                    .inner
                    .tiers
                    .iter()
                    .map(|(n, p, _)| (n, p))
                    .collect::<Vec<_>>(),
            )
            .field("algorithm", &self.inner.backend.algorithm)
            .field("failure_policy", self.inner.backend.policy())
            .finish_non_exhaustive()
    }
}
