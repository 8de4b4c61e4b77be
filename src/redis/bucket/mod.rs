//! [`RedisBucket`]: one limit in Redis, shared by every process that names it.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use super::backend::Backend;
use super::booking::{self, Tell, Unbooked};
use super::config::Options;
use super::error::RedisError;
use super::failure::{FailurePolicy, LocalBucket};
use super::lane::Hint;
use super::lease::Lease;
use super::observed::Outcome;
use super::script::Reply;
use super::stats::RedisStats;
use super::steer::Steer;
use super::told;
use crate::adaptive::Control;
use crate::bucket::{Steered, Steering};
use crate::observe::Observer;
use crate::{Algorithm, Bucket, Denied, Plan, Priority, Quota, Resource, Throttled};

mod charge;
mod leased;

/// A rate limit kept in Redis: one limit shared by every process, task and clone that uses
/// the same Redis, key prefix and key.
///
/// Cloning is cheap (an `Arc`) and never creates a new bucket. The semantics are those of
/// [`Bucket`] with the same [`Algorithm`] (default the token bucket, GCRA: bursts up to the
/// burst, then the rate; every algorithm: `pause` holds everything, then restarts as from an
/// empty bucket), with the state in Redis and time from the Redis clock:
///
/// - **Atomic**: each decision is one Lua script run by Redis; processes never race.
/// - **Invariant** across all processes, per algorithm (see [`Algorithm`]): e.g. for the
///   token bucket, over any interval of length `t`, admitted tokens ≤ `burst + rate·t` (the
///   interval is rounded up to whole microseconds); for the sliding log, at most `count` in
///   every window of length `period`.
/// - **Fair, quiet waiting**, every algorithm: an [`acquire`](RedisBucket::acquire) waiter
///   books its admission instant in Redis (one round trip) and sleeps until it: Redis
///   hands out instants in arrival order, so the waiters of every process are served
///   first come, first served, and replicas with more waiters see the same waits as the
///   others.
/// - **Failure policy**: every call is bounded by the timeout; when Redis fails, the
///   [`FailurePolicy`] answers (by default `Closed`: refuse), and Redis is used again as
///   soon as it answers.
///
/// ```no_run
/// use std::time::Duration;
/// use tower_throttle::redis::RedisBucket;
/// use tower_throttle::Quota;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// // In every process: the same URL and key mean the same bucket.
/// let bucket = RedisBucket::builder(Quota::per_second(10))
///     .url("redis://127.0.0.1:6379")
///     .key("github-api")
///     .build()
///     .await?;
///
/// bucket.acquire(1).await?; // waits for a token shared by all processes
/// match bucket.try_acquire(1).await {
///     Ok(()) => { /* send */ }
///     Err(e) => println!("not now: {e}"),
/// }
/// bucket.pause(Duration::from_secs(30)).await?; // a 429 seen here holds every process
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisBucket {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    backend: Arc<Backend>,
    key: String,
    /// With [`lease`](super::RedisBucketBuilder::lease): the tokens this handle holds.
    lease: Option<Lease>,
    hint: Hint,
    local: Option<LocalBucket>,
    /// Told what this limit decides.
    observer: Option<Arc<dyn Observer>>,
    /// The rate control (set once, when the bucket is built).
    control: OnceLock<Arc<Steering>>,
    /// Listens for the pauses of the other processes (see [`told`](super::told)); stopped
    /// when the last handle goes.
    listener: told::Listener,
}

impl RedisBucket {
    pub(crate) async fn from_parts(
        options: Options,
        plan: Plan,
        key: String,
        observer: Option<Arc<dyn Observer>>,
        control: Control,
    ) -> Result<Self, RedisError> {
        let algorithm = options.algorithm;
        let local = options
            .policy
            .local_quota(plan.quota())?
            .map(|q| LocalBucket::new(q, algorithm));
        let lease = options.lease.map(|(max, period)| Lease::new(max, period));
        let subscribe = told::Subscribe::of(&options);
        let backend = Arc::new(Backend::connect(options, &plan, false).await?);
        let inner = Arc::new(Inner {
            backend,
            key,
            lease,
            hint: Hint::new(),
            local,
            observer,
            control: OnceLock::new(),
            listener: told::Listener::new(),
        });
        let steer = Arc::new(Steer(Arc::downgrade(&inner))) as Arc<dyn Steered>;
        let _ = inner.control.set(Steering::start(control, steer));
        told::start(subscribe, told::channel(&inner.key), &inner).await;
        Ok(RedisBucket { inner })
    }

    pub(super) fn from_inner(inner: Arc<Inner>) -> Self {
        RedisBucket { inner }
    }

    pub(super) fn control(&self) -> &Arc<Steering> {
        self.inner
            .control
            .get()
            .expect("the control is set when the bucket is built")
    }

    pub(super) fn observer(&self) -> Option<&dyn Observer> {
        self.inner.observer.as_deref()
    }

    /// The configured quota: the one it was built with, or the one set since
    /// ([`set_quota`](Self::set_quota)).
    pub fn quota(&self) -> Quota {
        self.inner.backend.quota()
    }

    /// The plan: the one it was built with, its first quota [`quota`](Self::quota).
    pub fn plan(&self) -> Plan {
        self.inner.backend.plan()
    }

    /// Change the quota of this live limit, without rebuilding it.
    ///
    /// The change is this process's: its decisions in Redis follow the new quota from the
    /// next call, those of every clone of this handle too ([`quota`](Self::quota) says it),
    /// and the local fallback of [`FailurePolicy::Local`] takes its share of it. The rate
    /// control restarts at the new quota. Other processes sharing the key keep
    /// deciding at their own configured quota until they change it too: each process passes
    /// its quota with every call, as it does from the start. The state in Redis is shared
    /// and says not which quota wrote it: the calls after the change re-read it at the new
    /// quota, so that it never holds more tokens than before the change (no burst). Per
    /// algorithm:
    /// - **token and leaky bucket**: the new rate and burst apply at once. A lower rate or a
    ///   larger burst keeps the tokens held exactly as in process (a larger burst is not
    ///   handed out), as does a bucket full, empty or owing (a pause, a weighted request still
    ///   draining; in Redis also instants booked ahead by waiters), whose debt is kept in
    ///   tokens; the bucket then refills at the new rate. A higher rate or a smaller burst,
    ///   from a bucket partly used, holds the fewer of the tokens held before and what the
    ///   time it still needs to be full again leaves at the new rate and burst (possibly
    ///   none: its next token then comes within one new interval). A state re-read twice
    ///   (calls racing at the very instant of the change, or another process changing the
    ///   same way after this one wrote) never holds more tokens than it did (none, when it
    ///   owed).
    /// - **windows** (fixed, sliding, log): the width of the windows stays the period the
    ///   Redis bucket was built with (`W`: it lays out the state in Redis, the window
    ///   indices and log entries every process writes). The new quota becomes its tokens per
    ///   `W`, `⌊count × W / period⌋`, at least 1: exactly the new count for the same period;
    ///   for a new period, the same rate (rounded down) in windows of `W` (a quota of fewer
    ///   than one token per `W` runs at one per `W`: build a Redis bucket with that period
    ///   instead). That count is also the largest request. A raised count adds nothing to
    ///   the window in progress, as in process; a lowered one applies to it at once (in
    ///   process the window in progress keeps what it had left, up to the new count).
    ///
    /// A Redis waiter asking for more than the new burst (token and leaky bucket) or count
    /// per window (windows) fails with [`Denied::ExceedsBurst`] at the change, as in process,
    /// unless it has already booked its instant in Redis (within the booking horizon): its
    /// tokens are taken, and it keeps it.
    pub fn set_quota(&self, quota: Quota) {
        self.control().reset(quota);
        let inner = &*self.inner;
        inner.backend.set_quota(quota);
        self.set_fallback_quota(quota);
        self.forget_hint();
        inner.hint.quota_changed();
    }

    /// The algorithm this bucket decides with (set by
    /// [`algorithm`](super::RedisBucketBuilder::algorithm); default
    /// [`Algorithm::TokenBucket`]).
    pub fn algorithm(&self) -> Algorithm {
        self.inner.backend.algorithm
    }

    /// The Redis key holding the bucket's state. (The sliding log also keeps its entries in
    /// a sorted set at this key followed by `:log`.)
    pub fn redis_key(&self) -> &str {
        &self.inner.key
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        *self.inner.backend.policy()
    }

    /// Counters since this handle was built (shared by its clones).
    pub fn stats(&self) -> RedisStats {
        self.inner.backend.stats()
    }

    /// Tokens this handle and its clones hold in their lease now (0 without
    /// [`lease`](super::RedisBucketBuilder::lease)): admitted locally until the lease ends, then
    /// given back.
    pub fn leased_tokens(&self) -> u32 {
        self.inner.lease.as_ref().map_or(0, Lease::tokens)
    }

    /// The local fallback of [`FailurePolicy::Local`] takes its share of `quota`.
    pub(super) fn set_fallback_quota(&self, quota: Quota) {
        let inner = &*self.inner;
        if let (Some(local), Ok(Some(share))) =
            (&inner.local, inner.backend.policy().local_quota(quota))
        {
            local.bucket().set_quota(share);
        }
    }

    pub(super) fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    /// Forget what earlier replies said of when tokens fit: the parameters changed.
    pub(super) fn forget_hint(&self) {
        self.inner.hint.forget();
    }

    /// Whether `self` and `other` are clones of one handle.
    pub fn same_bucket(&self, other: &RedisBucket) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The local fallback's bucket, if the policy has one (see [`LocalBucket::fallback`]).
    fn local(&self) -> Option<&Bucket> {
        let inner = &*self.inner;
        let outage = inner.backend.outages();
        inner.local.as_ref().map(|local| local.fallback(outage))
    }

    /// Take `n` tokens now, or say how long until they fit.
    ///
    /// One round trip to Redis, every time: what an earlier reply said never refuses here,
    /// since another process may have given tokens back, or the rate may have changed,
    /// since then (with a [lease](super::RedisBucketBuilder::lease), tokens held in it are admitted
    /// without a round trip, and a request that finds too few shares the next refill's). It
    /// never waits for tokens or queues behind this process's waiters in
    /// [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// - [`Denied::Throttled`] with the wait until `n` tokens fit;
    /// - [`Denied::ExceedsBurst`] at once when `n` is larger than the burst
    ///   (token and leaky bucket) or the quota's count (windows);
    /// - when Redis fails, whatever the [`FailurePolicy`] says: nothing (`Open`),
    ///   [`Denied::Backend`] (`Closed`), the local bucket's answer (`Local`).
    pub async fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        self.try_acquire_outcome(n).await.report(self.observer(), n)
    }

    /// [`try_acquire`](Self::try_acquire), with what an observer is told.
    pub(crate) async fn try_acquire_outcome(&self, n: u32) -> Outcome {
        if n == 0 {
            return Outcome::bare(Ok(Duration::ZERO));
        }
        let inner = &*self.inner;
        if let Err(e) = inner.backend.check(n) {
            return Outcome::bare(Err(e.into()));
        }
        let fallback = |e| {
            let r = inner.backend.fallback().try_acquire(self.local(), n, e);
            Outcome::bare(r.map(|()| Duration::ZERO))
        };
        if let Some(lease) = &inner.lease {
            return match self.take_leased(lease, n, false).await {
                Ok(None) => Outcome::bare(Ok(Duration::ZERO)),
                Ok(Some(wait)) => Outcome::bare(Err(Throttled::after(wait).into())),
                Err(e) => fallback(e),
            };
        }
        match (inner
            .backend
            .acquire(&inner.key, n, false, None, Priority::Normal))
        .await
        {
            Ok(t) => {
                let reply = booking::learn(&inner.backend, &inner.hint, &t, n);
                Outcome {
                    result: reply.decision().map(|()| Duration::ZERO),
                    available: self.available(&reply),
                }
            }
            Err(e) => fallback(e),
        }
    }

    /// The whole tokens left once a decision `reply` takes effect (its booked instant, for
    /// an admission booked later), when the algorithm's state says it: token and leaky
    /// bucket. The windows' replies do not.
    fn available(&self, reply: &Reply) -> Option<u32> {
        let backend = &self.inner.backend;
        if !backend.is_gcra() {
            return None;
        }
        let mut full = reply.full_in;
        if reply.admitted {
            full = full.saturating_sub(reply.wait);
        }
        let full = u64::try_from(full.as_nanos()).unwrap_or(u64::MAX);
        let free = backend.tolerance_ns().saturating_sub(full) / backend.interval_ns().max(1);
        Some(u32::try_from(free).unwrap_or(u32::MAX))
    }

    /// Wait until `n` tokens are available, then take them.
    ///
    /// The waiter books the earliest instant its tokens fit in Redis, after every earlier
    /// booking (if within the booking horizon: `max(1 s, burst × interval)` for the token
    /// and leaky bucket, `max(1 s, period)` for the windows; else it sleeps until it is and
    /// asks again), then sleeps until that instant: waiters of every process are served
    /// in the order they reach Redis, whatever the algorithm. A window counts a booking in
    /// the window of its instant at once. Dropping the future while it sleeps gives its
    /// tokens back (the next to ask gets them; waiters already booked keep their instants;
    /// a window gives them back while it is still kept in Redis; the turn goes back too, so
    /// later requests go after the latest booking left, with every algorithm). Instants
    /// booked before a
    /// [`pause`](Self::pause) of another process are kept: at most the booking horizon's
    /// worth of tokens.
    ///
    /// Dropped during its round trip, it leaves the reply to a task that gives the tokens
    /// back.
    ///
    /// # Errors
    /// - [`Denied::ExceedsBurst`] at once when `n` is larger than the burst
    ///   (token and leaky bucket) or the quota's count (windows);
    /// - when Redis fails, whatever the [`FailurePolicy`] says: admit (`Open`),
    ///   [`Denied::Backend`] (`Closed`), wait on the local bucket (`Local`).
    pub async fn acquire(&self, n: u32) -> Result<(), Denied> {
        self.acquire_outcome(n).await.report(self.observer(), n)
    }

    /// [`acquire`](Self::acquire), with what an observer is told.
    pub(crate) async fn acquire_outcome(&self, n: u32) -> Outcome {
        if n == 0 {
            return Outcome::bare(Ok(Duration::ZERO));
        }
        let inner = &*self.inner;
        if let Err(e) = inner.backend.check(n) {
            return Outcome::bare(Err(e.into()));
        }
        let asked = Instant::now();
        if let Some(lease) = &inner.lease {
            match self.take_leased(lease, n, true).await {
                Ok(None) => return Outcome::bare(Ok(Duration::ZERO)),
                // Refused: book an instant, as without leases (first come, first served).
                Ok(Some(_)) => {}
                Err(e) => return self.acquire_fallback(n, e, asked).await,
            }
        }
        let booked = booking::book(
            &inner.backend,
            &inner.hint,
            &inner.key,
            n,
            None,
            Priority::Normal,
        );
        match booked.await {
            Ok(admission) => Outcome {
                result: Ok(if admission.slept {
                    asked.elapsed()
                } else {
                    Duration::ZERO
                }),
                available: self.available(&admission.reply),
            },
            Err(Unbooked::Exceeds(e)) => Outcome::bare(Err(e.into())),
            Err(Unbooked::Failed(e)) => self.acquire_fallback(n, e, asked).await,
        }
    }

    /// Redis failed an `acquire` of `n` tokens asked at `asked`: the failure policy answers.
    async fn acquire_fallback(&self, n: u32, error: RedisError, asked: Instant) -> Outcome {
        let r = self
            .inner
            .backend
            .fallback()
            .acquire(self.local(), n, error);
        Outcome::bare(r.await.map(|()| asked.elapsed()))
    }

    /// Give back `n` tokens of an admission that was not used. Exact while the bucket has
    /// not refilled past it (as [`RedisKeyed::release`](super::RedisKeyed::release)).
    pub(crate) async fn release(&self, n: u32) -> Result<(), Denied> {
        self.inner.backend.give_back(&self.inner.key, n).await
    }

    /// Hold every admission, in every process, for `cooldown`: a server's `Retry-After`.
    ///
    /// Nothing is admitted before `now + cooldown` (by the Redis clock); then admission
    /// restarts as from an empty bucket, the first token due when the cooldown ends, with no
    /// burst (for the windows, as the in-process [`Bucket`]: one token when the cooldown
    /// ends, then one per interval, until the window's own bound takes over; the sliding
    /// log's admissions from before the pause count until they leave the window). A
    /// shorter pause never shortens a longer one. Pauses longer than
    /// [`max_pause`](super::RedisBucketBuilder::max_pause) are cut to it. This process holds its
    /// own decisions at once, whatever Redis does; its waiters already asleep on an instant
    /// booked inside the pause book again once the pause has reached Redis (the pause
    /// emptied the bucket there, voiding their bookings). The other processes hear of the
    /// pause on the limit's channel (`<key>:paused`, Redis pub/sub: each handle listens on a
    /// connection of its own, so the Redis user needs `PUBLISH` and `SUBSCRIBE`), and their
    /// waiters booked inside it book again too. Best effort: with Redis Cluster, or while a
    /// listener reconnects, such a waiter goes at its instant, within the booking horizon
    /// (1 s).
    ///
    /// # Errors
    /// [`Denied::Backend`] when Redis fails and the policy is
    /// [`FailurePolicy::Closed`].
    pub async fn pause(&self, cooldown: Duration) -> Result<(), Denied> {
        let cooldown = self.hold_here(cooldown);
        self.pause_in_redis(cooldown).await
    }

    /// Whether every quota of the plan counts requests.
    pub(crate) fn counts_requests_only(&self) -> bool {
        self.inner.backend.counts_requests_only()
    }

    /// Whether the plan has an in-flight quota ([`Plan::in_flight`](crate::Plan::in_flight)).
    pub(crate) fn holds_in_flight(&self) -> bool {
        self.inner.backend.holds_in_flight()
    }

    /// Hold only the quotas that count `resource` for `cooldown`, in every process, as
    /// [`Bucket::pause_resource`] does: in Redis alone (this process's waiters booked on
    /// those quotas keep their instants). Where every quota counts `resource`, or none
    /// does, this is [`pause`](Self::pause).
    ///
    /// # Errors
    /// [`Denied::Backend`] when Redis fails and the policy is
    /// [`FailurePolicy::Closed`].
    pub async fn pause_resource(
        &self,
        resource: &Resource,
        cooldown: Duration,
    ) -> Result<(), Denied> {
        let Some(held) = self.plan().held(resource) else {
            return self.pause(cooldown).await;
        };
        if let Some(o) = self.observer() {
            o.paused(cooldown);
        }
        let backend = &self.inner.backend;
        match backend.pause(&self.inner.key, cooldown, Some(&held)).await {
            Ok(_) => Ok(()),
            Err(e) => backend.policy().pause(e),
        }
    }

    /// The part of [`pause`](Self::pause) this process does at once: hold its own
    /// decisions and waiters, and tell the observer. Returns the cooldown, capped at
    /// `max_pause`.
    pub(crate) fn hold_here(&self, cooldown: Duration) -> Duration {
        let capped = self.inner.hold(cooldown);
        self.inner.hint.pause_made();
        if let Some(o) = self.observer() {
            o.paused(cooldown);
            o.tokens(0);
        }
        capped
    }

    /// The part of [`pause`](Self::pause) that holds every process: in Redis.
    pub(crate) async fn pause_in_redis(&self, cooldown: Duration) -> Result<(), Denied> {
        let inner = &*self.inner;
        let tell = Tell {
            channel: &told::channel(&inner.key),
            from: inner.listener.id(),
            key: None,
        };
        booking::pause(&inner.backend, &inner.hint, &inner.key, cooldown, tell).await
    }
}

impl Inner {
    /// Hold this process's decisions and waiters for `cooldown`, cut to `max_pause`
    /// (returned).
    fn hold(&self, cooldown: Duration) -> Duration {
        let cooldown = booking::hold(&self.backend, &self.hint, cooldown);
        if let Some(local) = &self.local {
            local.bucket().pause(cooldown);
        }
        // The lease's tokens are charged in Redis, which the pause holds: nothing to give back.
        if let Some(lease) = &self.lease {
            lease.clear();
        }
        cooldown
    }
}

impl told::Told for Inner {
    fn listener(&self) -> &told::Listener {
        &self.listener
    }

    /// Another process paused the limit, in Redis already: this one's waiters asleep on an
    /// instant inside the pause book again (at once: Redis gives them instants after it).
    fn paused_elsewhere(&self, remaining: Duration, _key: Option<&str>) {
        self.hold(remaining);
        self.hint.pause_seen();
    }
}

impl fmt::Debug for RedisBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBucket")
            .field("key", &self.inner.key)
            .field("quota", &self.inner.backend.quota())
            .field("algorithm", &self.inner.backend.algorithm)
            .field("failure_policy", self.inner.backend.policy())
            .field("lease", &self.inner.backend.options.lease)
            .finish_non_exhaustive()
    }
}
