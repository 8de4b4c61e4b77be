//! [`Limit`] and [`KeyedLimit`]: the limits the layers take, kept in this process or in
//! Redis. The one place that knows where a limit is kept: the layers ask it, and never
//! look.

mod keyed;
mod turn;

use std::fmt;
use std::time::Duration;

pub use self::keyed::KeyedLimit;
pub(crate) use self::keyed::{KeyDecision, KeyHold, KeyTurn, Which};
pub(crate) use self::turn::Turn;
use crate::bucket::{Permit, Reservation};
#[cfg(feature = "redis")]
use crate::redis::RedisBucket;
use crate::slot::Slot;
use crate::{
    Bucket, Charge, Cost, Denied, ExceedsBurst, Feedback, Plan, Priority, QueueFull, Quota,
    Resource,
};

/// One limit for every request of a layer: a [`Bucket`] in this process, or a
/// `redis::RedisBucket` shared with other processes.
///
/// The layers take `impl Into<Limit>`, so either goes where a limit is asked for:
/// `RateLimitLayer::new(bucket)` or `RateLimitLayer::new(redis_bucket)`. Cloning is cheap
/// and shares the limit.
#[derive(Clone)]
pub struct Limit {
    store: Store,
}

#[derive(Clone)]
enum Store {
    Bucket(Bucket),
    #[cfg(feature = "redis")]
    Redis(RedisBucket),
}

/// Runs `$body` with `$s` bound to the limit, wherever it is kept.
macro_rules! on_store {
    ($store:expr, $s:ident => $body:expr) => {
        match $store {
            Store::Bucket($s) => $body,
            #[cfg(feature = "redis")]
            Store::Redis($s) => $body,
        }
    };
}

/// Whether a request admitted now, waits for its turn, or finds a leaky bucket's line full.
pub(crate) enum Reserved {
    Now(Permit),
    Later(Turn),
    Full(QueueFull),
}

/// A decision that may take a while: made now, or a turn to wait for.
pub(crate) enum Decision {
    Now(Result<Permit, Denied>),
    Later(Turn),
}

impl From<Bucket> for Limit {
    fn from(bucket: Bucket) -> Self {
        Limit {
            store: Store::Bucket(bucket),
        }
    }
}

#[cfg(feature = "redis")]
impl From<RedisBucket> for Limit {
    /// Every decision of the layers is Redis's: the waiting layer (weighted costs
    /// included), the rejecting layer (with `max_wait`, alone or as the global ceiling of a
    /// keyed layer), and a push-back seen by the retrying layer, which holds every process.
    /// When Redis fails and the failure policy refuses, the waiting layer fails the call
    /// with [`Denied::Backend`], and the rejecting layer answers 429 with `Retry-After: 1`.
    fn from(redis: RedisBucket) -> Self {
        Limit {
            store: Store::Redis(redis),
        }
    }
}

impl Limit {
    /// The plan, its first quota as configured now.
    pub(crate) fn plan(&self) -> Plan {
        on_store!(&self.store, l => l.plan())
    }

    /// Which quota of the plan holds `cost` back longest now (in Redis: the one that
    /// refused last).
    pub(crate) fn holding_back(&self, cost: &Cost) -> usize {
        match &self.store {
            Store::Bucket(b) => b.holding_back(cost),
            #[cfg(feature = "redis")]
            Store::Redis(r) => r.refused_by(),
        }
    }

    /// The configured quota: the most this limit ever enforces.
    pub(crate) fn quota(&self) -> Quota {
        on_store!(&self.store, l => l.quota())
    }

    /// Change the quota of the live limit, for every clone: [`Bucket::set_quota`], or
    /// `redis::RedisBucket::set_quota`.
    pub fn set_quota(&self, quota: Quota) {
        on_store!(&self.store, l => l.set_quota(quota))
    }

    /// The in-process bucket, if the limit is kept in this process.
    pub fn bucket(&self) -> Option<&Bucket> {
        match &self.store {
            Store::Bucket(b) => Some(b),
            #[cfg(feature = "redis")]
            Store::Redis(_) => None,
        }
    }

    /// Wait for `estimate`, then take it, to settle once the real cost is known
    /// ([`Bucket::charge`], or `RedisBucket::charge`).
    pub(crate) fn charge(
        &self,
        estimate: Cost,
    ) -> impl std::future::Future<Output = Result<Charge, Denied>> + Send + 'static {
        let store = self.store.clone();
        async move { on_store!(store, l => l.charge(estimate).await) }
    }

    /// Tell the limit's rate control about the requests it admits (see
    /// [`Bucket::feedback`]).
    pub(crate) fn feedback(&self) -> Feedback<'_> {
        on_store!(&self.store, l => l.feedback())
    }

    /// Hold every admission for `cooldown`; a limit kept in Redis holds this process at
    /// once and the others in the background.
    pub(crate) fn pause(&self, cooldown: Duration) {
        match &self.store {
            Store::Bucket(b) => b.pause(cooldown),
            #[cfg(feature = "redis")]
            Store::Redis(r) => r.pause_detached(cooldown),
        }
    }

    /// Hold only the quotas that count `resource` for `cooldown`, when the plan has others
    /// (`true`); else nothing (`false`: the caller pauses the whole limit).
    pub(crate) fn pause_resource(&self, resource: &Resource, cooldown: Duration) -> bool {
        if self.plan().held(resource).is_none() {
            return false;
        }
        match &self.store {
            Store::Bucket(b) => b.pause_resource(resource, cooldown),
            #[cfg(feature = "redis")]
            Store::Redis(r) => r.pause_resource_detached(resource, cooldown),
        }
        true
    }

    /// A provider states its limit of `resource` per minute, and what remains: a quota of an
    /// in-process bucket that discovers it takes it
    /// ([`BucketBuilder::discover`](crate::BucketBuilder::discover)).
    pub(crate) fn learn(&self, resource: &Resource, per_minute: u64, remains: Option<u64>) {
        match &self.store {
            Store::Bucket(b) => b.learn(resource, per_minute, remains),
            #[cfg(feature = "redis")]
            Store::Redis(_) => {}
        }
    }

    /// Wait until `n` tokens are admitted, then take them ([`Bucket::acquire`], or
    /// [`RedisBucket::acquire`]).
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))] // the reqwest middleware waits here
    pub(crate) async fn acquire(&self, n: u32) -> Result<(), Denied> {
        on_store!(&self.store, l => l.acquire(n).await)
    }

    /// Whether `self` and `other` are handles to the same limit.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) fn same_limit(&self, other: &Limit) -> bool {
        match (&self.store, &other.store) {
            (Store::Bucket(a), Store::Bucket(b)) => a.same_bucket(b),
            #[cfg(feature = "redis")]
            (Store::Redis(a), Store::Redis(b)) => a.same_bucket(b),
            #[cfg(feature = "redis")]
            _ => false,
        }
    }

    /// The hot path: admit `n` tokens now without a lock, or `None`.
    #[inline]
    pub(crate) fn admit_now(&self, n: u32) -> Option<Permit> {
        match &self.store {
            Store::Bucket(b) => b.admit_now(n),
            #[cfg(feature = "redis")]
            Store::Redis(_) => None,
        }
    }

    /// Whether `n` tokens can ever fit.
    pub(crate) fn check(&self, n: u32) -> Result<(), ExceedsBurst> {
        on_store!(&self.store, l => l.check(n))
    }

    /// Admit `n` tokens now, or a turn to wait for, however long (callers check the size
    /// first).
    pub(crate) fn reserve(&self, n: u32) -> Reserved {
        match &self.store {
            Store::Bucket(b) => match b.reserve(n, true) {
                Ok(Reservation::Now(p)) => Reserved::Now(p),
                Ok(Reservation::Later(w)) => Reserved::Later(Turn::queued(w)),
                Err(full) => Reserved::Full(full),
            },
            #[cfg(feature = "redis")]
            Store::Redis(r) => {
                let r = r.clone();
                let acquired = async move { r.acquire(n).await.map(|()| tokens_only(n)) };
                Reserved::Later(Turn::shared(acquired))
            }
        }
    }

    /// Admit `cost` now; else, when the wait is within `max_wait` (zero: never), a turn
    /// that comes within `max_wait` or is refused then. A plan that counts other resources
    /// than requests is charged (a charge dropped unsettled keeps what it took).
    pub(crate) fn decide(&self, cost: &Cost, max_wait: Duration) -> Decision {
        let n = cost.of(&Resource::REQUESTS);
        let waits =
            move |d: &Denied| !max_wait.is_zero() && d.wait().is_some_and(|w| w <= max_wait);
        // The admission the slot gives back (`Limit::slot`).
        let kept = move |c: Charge| c.kept().unwrap_or(Permit::tokens_only(n));
        match &self.store {
            Store::Bucket(b) if !b.counts_requests_only() || cost.class() != Priority::Normal => {
                match b.try_charge(cost.clone()) {
                    Err(denied) if waits(&denied) => {
                        let (b, cost) = (b.clone(), cost.clone());
                        let charged =
                            async move { b.charge(cost).await.map(|c| (kept(c), Slot::default())) };
                        Decision::Later(Turn::shared(within(max_wait, denied, charged)))
                    }
                    decided => Decision::Now(decided.map(kept)),
                }
            }
            #[cfg(feature = "redis")]
            Store::Redis(r)
                if !r.counts_requests_only()
                    || r.holds_in_flight()
                    || cost.class() != Priority::Normal =>
            {
                let (r, cost) = (r.clone(), cost.clone());
                // A charge that holds in-flight quotas holds them until the slot drops.
                let holds = r.holds_in_flight();
                let held = move |c: Charge| match holds {
                    true => (Permit::tokens_only(n), Slot::new(move || drop(c))),
                    false => tokens_only(n),
                };
                Decision::Later(Turn::shared(async move {
                    match r.try_charge(cost.clone()).await {
                        Err(denied) if waits(&denied) => {
                            let charged = async { r.charge(cost).await.map(held) };
                            within(max_wait, denied, charged).await
                        }
                        decided => decided.map(held),
                    }
                }))
            }
            Store::Bucket(b) => {
                let denied = match b.try_take(n) {
                    Ok(p) => return Decision::Now(Ok(p)),
                    Err(denied) => denied,
                };
                match denied.wait() {
                    Some(wait) if !max_wait.is_zero() && wait <= max_wait => {
                        match b.reserve(n, true) {
                            Ok(Reservation::Now(p)) => Decision::Now(Ok(p)),
                            Ok(Reservation::Later(w)) => {
                                Decision::Later(Turn::bounded(b.clone(), w, max_wait))
                            }
                            // A leaky bucket's queue is full: refused, with the wait it said.
                            Err(_) => Decision::Now(Err(denied)),
                        }
                    }
                    _ => Decision::Now(Err(denied)),
                }
            }
            #[cfg(feature = "redis")]
            Store::Redis(r) => {
                let r = r.clone();
                Decision::Later(Turn::shared(async move {
                    let within = r.try_acquire_within(n, max_wait).await;
                    within.map(|()| tokens_only(n))
                }))
            }
        }
    }

    /// What `permit`, admitted for `cost`, holds of the in-flight quotas of this limit's plan
    /// ([`Plan::in_flight`]), given back when the slot drops. Nothing for a limit kept in
    /// Redis, whose admissions carry their own ([`Turn::poll_held`]).
    pub(crate) fn slot(&self, permit: Permit, cost: &Cost) -> Slot {
        match &self.store {
            Store::Bucket(b) => b.slot(permit, cost),
            #[cfg(feature = "redis")]
            Store::Redis(_) => Slot::default(),
        }
    }

    /// Give an unused admission back where it was taken.
    pub(crate) fn give_back(&self, permit: Permit) {
        match &self.store {
            Store::Bucket(b) => b.give_back(permit),
            #[cfg(feature = "redis")]
            Store::Redis(r) => r.release_detached(permit.tokens()),
        }
    }

    /// The requests left and the time until the next token, when this process knows them
    /// (an in-process limit).
    pub(crate) fn level(&self) -> Option<(u64, Duration)> {
        let bucket = self.bucket()?;
        let (snap, stacked) = (bucket.snapshot(), bucket.reset_in());
        let reset = if snap.available == 0 {
            snap.next_token_in
        } else if let Some(reset) = stacked {
            reset
        } else {
            // Until the next token lands: the part of the refill shorter than one interval.
            let interval = snap.quota.interval().as_nanos().max(1);
            let ahead = snap.full_in.as_nanos();
            let ns = if ahead == 0 {
                0
            } else {
                (ahead - 1) % interval + 1
            };
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        };
        Some((u64::from(snap.available), reset))
    }
}

/// `decided`, unless `max_wait` passes first: then `refused`.
/// An admission of `n` requests that holds nothing in flight.
#[cfg(feature = "redis")]
fn tokens_only(n: u32) -> (Permit, Slot) {
    (Permit::tokens_only(n), Slot::default())
}

async fn within<T, F>(max_wait: Duration, refused: Denied, decided: F) -> Result<T, Denied>
where
    F: std::future::Future<Output = Result<T, Denied>>,
{
    tokio::time::timeout(max_wait, decided)
        .await
        .unwrap_or(Err(refused))
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        on_store!(&self.store, l => fmt::Debug::fmt(l, f))
    }
}
