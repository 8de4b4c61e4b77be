//! [`RedisBucket`]: one limit in Redis, shared by every process that names it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::backend::{bump, Backend, Options, RedisStats};
use super::builder::RedisBucketBuilder;
use super::error::RedisError;
use super::failure::{acquire_fallback, pause_fallback, try_acquire_fallback, FailurePolicy};
use super::lane::Hint;
use super::lease::{Lease, Turn, Waited};
use super::script::Reply;
use super::told;
use crate::bucket::Outcome;
use crate::observe::Observer;
use crate::{Algorithm, Bucket, Denied, ExceedsBurst, Quota, Throttled};

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

struct Inner {
    backend: Arc<Backend>,
    key: String,
    /// With [`RedisBucketBuilder::lease`]: the tokens this handle holds.
    lease: Option<Lease>,
    hint: Hint,
    local: Option<Bucket>,
    /// The run of failures the local fallback last decided in.
    local_outage: AtomicU64,
    /// Told what a [`Bucket`] made from this one decides.
    observer: Option<Arc<dyn Observer>>,
    /// Wakes the waiters asleep before booking when the quota changes: they check their
    /// request against it again.
    quota_changed: Notify,
    /// Listens for the pauses of the other processes (see [`told`](super::told)); stopped
    /// when the last handle goes.
    listener: told::Listener,
}

impl RedisBucket {
    /// The way to make a `RedisBucket`: a builder for the URL, key, failure policy, timeouts
    /// and more; [`build`](RedisBucketBuilder::build) connects.
    pub fn builder(quota: Quota) -> RedisBucketBuilder {
        RedisBucketBuilder::new(quota)
    }

    /// Connect to the bucket `key` at `url`, with the default settings (see
    /// [`RedisBucketBuilder`]).
    ///
    /// # Errors
    /// As [`RedisBucketBuilder::build`].
    #[deprecated(note = "use `RedisBucket::builder(quota).url(url).key(key).build()`")]
    pub async fn connect(url: &str, key: &str, quota: Quota) -> Result<Self, RedisError> {
        Self::builder(quota).url(url).key(key).build().await
    }

    pub(crate) async fn from_parts(
        options: Options,
        quota: Quota,
        key: String,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<Self, RedisError> {
        let algorithm = options.algorithm;
        let local = options
            .policy
            .local_quota(quota)?
            .map(|q| Bucket::with_algorithm(q, algorithm));
        let lease = options.lease.map(|(max, period)| Lease::new(max, period));
        let subscribe = told::Subscribe::of(&options);
        let backend = Arc::new(Backend::connect(options, quota).await?);
        let inner = Arc::new(Inner {
            backend,
            key,
            lease,
            hint: Hint::new(),
            local,
            local_outage: AtomicU64::new(0),
            observer,
            quota_changed: Notify::new(),
            listener: told::Listener::new(),
        });
        told::start(subscribe, told::channel(&inner.key), &inner).await;
        Ok(RedisBucket { inner })
    }

    /// The quota this bucket enforces: the one it was built with, or the one set since on a
    /// [`Bucket`] made from it ([`Bucket::set_quota`], which every clone of this handle
    /// follows).
    pub fn quota(&self) -> Quota {
        self.inner.backend.quota()
    }

    /// Decide at `quota` from now on, in this process: every clone of this handle and the
    /// [`Bucket`] made from it (see [`Bucket::set_quota`]). The local fallback of
    /// [`FailurePolicy::Local`] takes its share of the new quota.
    pub(crate) fn set_quota(&self, quota: Quota) {
        let inner = &*self.inner;
        inner.backend.set_quota(quota);
        self.set_fallback_quota(quota);
        self.forget_hint();
        inner.quota_changed.notify_waiters();
    }

    /// The algorithm this bucket decides with (set by
    /// [`RedisBucketBuilder::algorithm`]; default [`Algorithm::TokenBucket`]).
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
    /// [`lease`](RedisBucketBuilder::lease)): admitted locally until the lease ends, then
    /// given back.
    pub fn leased_tokens(&self) -> u32 {
        self.inner.lease.as_ref().map_or(0, Lease::tokens)
    }

    /// A [`Bucket`] builder on this shared limit, with its observer.
    pub(crate) fn bucket_builder(self) -> crate::BucketBuilder {
        let mut builder = Bucket::builder(self.quota()).algorithm(self.algorithm());
        if let Some(observer) = &self.inner.observer {
            builder = builder.observer(Arc::clone(observer));
        }
        builder.remote(Arc::new(self) as Arc<dyn crate::bucket::Remote>)
    }

    /// The local fallback of [`FailurePolicy::Local`] takes its share of `quota`.
    pub(super) fn set_fallback_quota(&self, quota: Quota) {
        let inner = &*self.inner;
        if let (Some(local), Ok(Some(share))) =
            (&inner.local, inner.backend.policy().local_quota(quota))
        {
            local.set_quota(share);
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

    fn check(&self, n: u32) -> Result<u64, ExceedsBurst> {
        let max = self.inner.backend.max_cost();
        if n > max {
            return Err(ExceedsBurst {
                requested: n,
                burst: max,
            });
        }
        Ok(u64::from(n) * self.inner.backend.interval_ns())
    }

    /// The instant `n` tokens (`cost` ns) should fit, from what earlier replies said.
    fn likely_fits_at(&self, n: u32, cost: u64) -> Instant {
        let inner = &*self.inner;
        if inner.backend.is_gcra() {
            inner
                .hint
                .likely_fits_at(cost, inner.backend.tolerance_ns())
        } else {
            inner.hint.window_fits_at(n)
        }
    }

    /// The local fallback bucket, emptied when a new run of failures has begun since it last
    /// decided: it continues this process's share of the rate, never with a fresh burst.
    fn fallback(&self) -> Option<&Bucket> {
        let inner = &*self.inner;
        let local = inner.local.as_ref()?;
        let outage = inner.backend.outages();
        if inner.local_outage.swap(outage, Ordering::AcqRel) != outage {
            local.pause(Duration::ZERO);
        }
        Some(local)
    }

    /// Learn from a reply to a request of `n` tokens.
    fn learn(&self, t: &super::backend::Timed, n: u32) -> Reply {
        let hint = &self.inner.hint;
        if self.inner.backend.is_gcra() {
            hint.observe(t);
        } else if !t.reply.admitted {
            hint.refused(t, n);
        }
        t.reply
    }

    /// Take `n` tokens now, or say how long until they fit.
    ///
    /// One round trip to Redis, every time: what an earlier reply said never refuses here,
    /// since another process may have given tokens back, or the rate may have changed,
    /// since then (with a [lease](RedisBucketBuilder::lease), tokens held in it are admitted
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
        self.try_acquire_outcome(n).await.result.map(drop)
    }

    /// [`try_acquire`](Self::try_acquire), with what an observer is told.
    pub(crate) async fn try_acquire_outcome(&self, n: u32) -> Outcome {
        if n == 0 {
            return Outcome::bare(Ok(Duration::ZERO));
        }
        let cost = match self.check(n) {
            Ok(cost) => cost,
            Err(e) => return Outcome::bare(Err(e.into())),
        };
        let inner = &*self.inner;
        let fallback = |e| {
            bump(&inner.backend.counters.fallbacks);
            let r = try_acquire_fallback(inner.backend.policy(), self.fallback(), n, e);
            Outcome::bare(r.map(|()| Duration::ZERO))
        };
        if let Some(lease) = &inner.lease {
            return match self.take_leased(lease, n, cost, false).await {
                Ok(None) => Outcome::bare(Ok(Duration::ZERO)),
                Ok(Some(wait)) => Outcome::bare(Err(Throttled::after(wait).into())),
                Err(e) => fallback(e),
            };
        }
        match inner.backend.acquire(&inner.key, n).await {
            Ok(t) => {
                let reply = self.learn(&t, n);
                let result = if reply.admitted {
                    Ok(Duration::ZERO)
                } else {
                    Err(Throttled::after(reply.wait).into())
                };
                Outcome {
                    result,
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
    /// Dropped during its round trip, the tokens may have been taken.
    ///
    /// # Errors
    /// - [`Denied::ExceedsBurst`] at once when `n` is larger than the burst
    ///   (token and leaky bucket) or the quota's count (windows);
    /// - when Redis fails, whatever the [`FailurePolicy`] says: admit (`Open`),
    ///   [`Denied::Backend`] (`Closed`), wait on the local bucket (`Local`).
    pub async fn acquire(&self, n: u32) -> Result<(), Denied> {
        self.acquire_outcome(n).await.result.map(drop)
    }

    /// [`acquire`](Self::acquire), with what an observer is told.
    pub(crate) async fn acquire_outcome(&self, n: u32) -> Outcome {
        if n == 0 {
            return Outcome::bare(Ok(Duration::ZERO));
        }
        let cost = match self.check(n) {
            Ok(cost) => cost,
            Err(e) => return Outcome::bare(Err(e.into())),
        };
        let inner = &*self.inner;
        let asked = Instant::now();
        let fallback = |e| async move {
            bump(&inner.backend.counters.fallbacks);
            let r = acquire_fallback(inner.backend.policy(), self.fallback(), n, e).await;
            Outcome::bare(r.map(|()| asked.elapsed()))
        };
        if let Some(lease) = &inner.lease {
            match self.take_leased(lease, n, cost, true).await {
                Ok(None) => return Outcome::bare(Ok(Duration::ZERO)),
                // Refused: book an instant, as without leases (first come, first served).
                Ok(Some(_)) => {}
                Err(e) => return fallback(e).await,
            }
        }
        self.acquire_reserving(n).await
    }

    /// With a lease: admit `n` tokens (`cost` ns) from it, or wait in line for a refill.
    /// `Ok(None)`: admitted; `Ok(Some(wait))`: refused, the tokens fit in about `wait`.
    ///
    /// `books`: the caller books an instant when refused, so a refill that the last replies
    /// say cannot serve it yet is skipped (Redis decides the booking; a stale hint only
    /// costs the lease, never the admission). A `try_acquire` always asks.
    async fn take_leased(
        &self,
        lease: &Lease,
        n: u32,
        cost: u64,
        books: bool,
    ) -> Result<Option<Duration>, RedisError> {
        let inner = &*self.inner;
        let admitted = || {
            bump(&inner.backend.counters.leased_admissions);
            Ok(None)
        };
        if lease.take(n, Instant::now()) {
            return admitted();
        }
        let likely = || {
            self.likely_fits_at(n, cost)
                .saturating_duration_since(Instant::now())
        };
        if books && !likely().is_zero() {
            return Ok(Some(likely()));
        }
        let ticket = match lease.turn(n, Instant::now()) {
            Turn::Taken => return admitted(),
            Turn::Wait(ticket) => ticket,
            Turn::Refill(ticket) => {
                // Run apart from this task: this task gone (a timeout, a dropped request)
                // leaves the others their refill.
                let refill = self.clone().refill();
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => drop(rt.spawn(refill)),
                    Err(_) => refill.await,
                }
                ticket
            }
        };
        match ticket.wait().await {
            Waited::Admitted => admitted(),
            Waited::Refused(wait) => Ok(Some(wait.max(likely()))),
            Waited::Failed(e) => Err(e),
        }
    }

    /// Refill the lease while tasks wait in line: one round trip at a time, each for
    /// every request in line and the lease beyond them.
    async fn refill(self) {
        let inner = &*self.inner;
        let Some(lease) = &inner.lease else {
            return;
        };
        let mut refill = lease.refill();
        while let Some(ask) = refill.ask(inner.backend.max_cost(), Instant::now()) {
            let reply = inner
                .backend
                .lease(&inner.key, ask.want, ask.need, ask.back);
            match reply.await {
                Ok(t) => {
                    inner.hint.observe(&t);
                    if let Some((generation, end)) = refill.granted(t.granted, t.sent, t.reply.wait)
                    {
                        self.give_back_at(end, generation);
                    }
                }
                Err(e) => refill.failed(&e),
            }
            // The tasks just served may ask again at once: let them join the line first.
            tokio::task::yield_now().await;
        }
    }

    /// When the lease `generation` ends at `end`, give back its unused tokens (unless a
    /// newer lease did it, or the handle is gone).
    fn give_back_at(&self, end: Instant, generation: u64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::downgrade(&self.inner);
        rt.spawn(async move {
            tokio::time::sleep_until(end).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let back = inner.lease.as_ref().map_or(0, |l| l.expire(generation));
            if back > 0 {
                let _ = inner.backend.release(&inner.key, back).await;
            }
        });
    }

    /// Book the admission instant in Redis, then sleep until it.
    ///
    /// Redis hands out instants in the order requests reach it, whichever process sends
    /// them, so waiters of every process are served first come, first served, as by the
    /// in-process bucket (every algorithm). A waiter whose instant lies beyond the reservation horizon sleeps
    /// until it is within it (as far as the last reply knows) and asks again. Dropped while
    /// sleeping on a booked instant, it gives the tokens back.
    async fn acquire_reserving(&self, n: u32) -> Outcome {
        let inner = &*self.inner;
        let asked = Instant::now();
        let mut slept = false;
        loop {
            // Re-checked after every sleep, and at once when the quota changes
            // (`Bucket::set_quota`; listened to before the check, so no change is missed):
            // a new quota may have lowered the burst below the request, as for a waiter
            // of an in-process bucket.
            let mut changed = std::pin::pin!(inner.quota_changed.notified());
            changed.as_mut().enable();
            let cost = match self.check(n) {
                Ok(cost) => cost,
                Err(e) => return Outcome::bare(Err(e.into())),
            };
            let horizon = inner.backend.reserve_horizon();
            // Re-read after every sleep: a pause may have moved the instant later.
            let at = self.likely_fits_at(n, cost);
            if let Some(early) = at.checked_sub(horizon) {
                if early > Instant::now() {
                    slept = true;
                    let _ = tokio::time::timeout_at(early, changed).await;
                    continue;
                }
            }
            // Booked before a pause of this process reached Redis, an instant would fall
            // inside it. (Past the end of the pause held here, it books: a pause that long
            // on its way has ended anyway.)
            if inner.hint.pause_pending() && inner.hint.pauses_landed().await {
                continue;
            }
            // A pause made (or heard of) while the booking is on its way voids it too.
            let voids = inner.hint.voids();
            match inner.backend.reserve(&inner.key, n).await {
                Ok(t) => {
                    let reply = self.learn(&t, n);
                    if reply.admitted {
                        if !reply.wait.is_zero() {
                            // The script ran before the reply came: never early.
                            let booked = Booked::new(self, n, t.at_us);
                            let at = t.received + reply.wait;
                            slept = true;
                            let voided = inner.hint.voided_before(voids, at).await;
                            booked.used();
                            if voided {
                                // Booked before this process's pause reached Redis (or
                                // just after it: a slot lost, never one too many): the
                                // pause emptied the bucket there, so nothing to give back.
                                // Book again once the pause is there.
                                continue;
                            }
                        }
                        let waited = if slept {
                            asked.elapsed()
                        } else {
                            Duration::ZERO
                        };
                        return Outcome {
                            result: Ok(waited),
                            available: self.available(&reply),
                        };
                    }
                }
                Err(e) => {
                    bump(&inner.backend.counters.fallbacks);
                    let r = acquire_fallback(inner.backend.policy(), self.fallback(), n, e).await;
                    return Outcome::bare(r.map(|()| asked.elapsed()));
                }
            }
        }
    }

    /// Give back `n` tokens of an admission that was not used. Exact while the bucket has
    /// not refilled past it (as [`RedisKeyed::release`](super::RedisKeyed::release)).
    pub(crate) async fn release(&self, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        self.check(n)?;
        let inner = &*self.inner;
        inner
            .backend
            .release(&inner.key, n)
            .await
            .map(drop)
            .map_err(Denied::from)
    }

    /// Hold every admission, in every process, for `cooldown`: a server's `Retry-After`.
    ///
    /// Nothing is admitted before `now + cooldown` (by the Redis clock); then admission
    /// restarts as from an empty bucket, the first token due when the cooldown ends, with no
    /// burst (for the windows, as the in-process [`Bucket`]: one token when the cooldown
    /// ends, then one per interval, until the window's own bound takes over; the sliding
    /// log's admissions from before the pause count until they leave the window). A
    /// shorter pause never shortens a longer one. Pauses longer than
    /// [`max_pause`](RedisBucketBuilder::max_pause) are cut to it. This process holds its
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

    /// The part of [`pause`](Self::pause) this process does at once: hold its own
    /// decisions and waiters. Returns the cooldown, capped at `max_pause`.
    pub(crate) fn hold_here(&self, cooldown: Duration) -> Duration {
        let inner = &*self.inner;
        let cooldown = cooldown.min(inner.backend.max_pause());
        inner.hold(cooldown);
        inner.hint.pause_made();
        cooldown
    }

    /// The part of [`pause`](Self::pause) that holds every process: in Redis.
    pub(crate) async fn pause_in_redis(&self, cooldown: Duration) -> Result<(), Denied> {
        let inner = &*self.inner;
        let backend = &inner.backend;
        let result = backend.pause(&inner.key, cooldown).await;
        inner.hint.pause_done();
        match result {
            Ok(t) => {
                // The other processes' waiters booked inside it book again.
                let told = told::message(inner.listener.id(), t.reply.wait, None);
                backend.publish(&told::channel(&inner.key), &told).await;
                if backend.is_gcra() {
                    inner.hint.observe(&t);
                }
                Ok(())
            }
            Err(e) => pause_fallback(backend.policy(), e),
        }
    }
}

/// Tokens booked in Redis for a later instant: given back if the waiter goes away first.
struct Booked<'a> {
    bucket: Option<&'a RedisBucket>,
    n: u32,
    /// The booked instant on the Redis clock, µs, as the reply said (windows; else 0).
    at_us: u64,
}

impl<'a> Booked<'a> {
    fn new(bucket: &'a RedisBucket, n: u32, at_us: u64) -> Self {
        Booked {
            bucket: Some(bucket),
            n,
            at_us,
        }
    }

    /// The instant came: the tokens are spent.
    fn used(mut self) {
        self.bucket = None;
    }
}

impl Drop for Booked<'_> {
    fn drop(&mut self) {
        let Some(bucket) = self.bucket.take() else {
            return;
        };
        let (bucket, n, at_us) = (bucket.clone(), self.n, self.at_us);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let inner = &*bucket.inner;
                let _ = inner.backend.release_booked(&inner.key, n, at_us).await;
            });
        }
    }
}

impl Inner {
    /// Hold this process's decisions and waiters for `cooldown`.
    fn hold(&self, cooldown: Duration) {
        self.hint.hold(
            Instant::now(),
            cooldown.saturating_add(self.backend.refill()),
        );
        if let Some(local) = &self.local {
            local.pause(cooldown);
        }
        // The lease's tokens are charged in Redis, which the pause holds: nothing to give back.
        if let Some(lease) = &self.lease {
            lease.clear();
        }
    }
}

impl told::Told for Inner {
    fn listener(&self) -> &told::Listener {
        &self.listener
    }

    /// Another process paused the limit, in Redis already: this one's waiters asleep on an
    /// instant inside the pause book again (at once: Redis gives them instants after it).
    fn paused_elsewhere(&self, remaining: Duration, _key: Option<&str>) {
        self.hold(remaining.min(self.backend.max_pause()));
        self.hint.pause_seen();
    }
}

impl Drop for Inner {
    /// The last handle is gone: give back the lease's unused tokens.
    fn drop(&mut self) {
        let back = self.lease.as_ref().map_or(0, Lease::clear);
        if back == 0 {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (backend, key) = (self.backend.clone(), std::mem::take(&mut self.key));
            rt.spawn(async move {
                let _ = backend.release(&key, back).await;
            });
        }
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
