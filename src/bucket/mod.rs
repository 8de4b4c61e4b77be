//! [`Bucket`]: one token bucket shared by every clone.
//!
//! ```
//! use std::time::Duration;
//! use tower_throttle::{Bucket, Quota};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let bucket = Bucket::new(Quota::per_second(2).burst(2));
//! let worker = bucket.clone(); // the same bucket, not a new one
//!
//! assert!(bucket.try_acquire(1).is_ok());
//! assert!(worker.try_acquire(1).is_ok());
//! let throttled = bucket.try_acquire(1).unwrap_err();
//! assert_eq!(throttled.wait(), Some(Duration::from_millis(500)));
//!
//! let start = tokio::time::Instant::now();
//! worker.acquire(1).await.unwrap(); // waits for the next token
//! assert_eq!(start.elapsed(), Duration::from_millis(500));
//! # }
//! ```

mod acquire;
mod builder;
mod cell;
mod charge;
mod feedback;
mod guard;
mod queue;
mod shared;
mod snapshot;
mod turn;
mod waiter;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub use self::acquire::Acquire;
pub use self::builder::BucketBuilder;
pub use self::charge::Charge;
#[cfg(feature = "redis")]
pub(crate) use self::charge::{differences, Settle};
#[cfg(feature = "redis")]
pub(crate) use self::feedback::Adopt;
pub use self::feedback::{Feedback, Sent};
pub(crate) use self::feedback::{Steered, Steering};
#[cfg(feature = "redis")]
pub(crate) use self::shared::capacity_of;
pub(crate) use self::shared::Shared;
pub(crate) use self::shared::{Permit, Reservation};
pub use self::snapshot::Snapshot;
pub(crate) use self::waiter::Waiter;
use crate::adaptive::{Adaptive, Control};
pub use crate::algorithm::Algorithm;
pub use crate::denied::{BackendError, Denied, ExceedsBurst, QueueFull, Throttled};
use crate::slot::Slot;
use crate::{Cost, Plan, Priority, Quota, Resource};

/// A token bucket shared by every clone of this handle.
///
/// Cloning a `Bucket` is cheap (an `Arc`) and never creates a new bucket: hand one clone to
/// each worker, layer and service and they all draw from the same tokens.
///
/// By default the bucket implements the generic cell rate algorithm (GCRA), which is an exact
/// token bucket kept in one atomic number: refill is computed from the clock when a request
/// comes (no background task), and a request that fits is admitted with one compare-and-swap.
/// [`BucketBuilder::algorithm`] picks a leaky bucket or a window instead (see [`Algorithm`]).
///
/// # Semantics
/// - **Rate invariant**: over any interval of length `t`, admitted tokens ≤ `burst + rate·t`.
/// - **Fair**: [`acquire`](Bucket::acquire) admits waiters first come, first served, and a
///   waiting request cannot be overtaken by [`try_acquire`](Bucket::try_acquire).
/// - **Quiet**: each waiter is woken once, at its turn; there is no polling loop.
/// - **Drift-free**: admission instants follow the schedule, not when a timer fired.
/// - **Cancel-safe**: dropping a waiting [`Acquire`] gives its place back to those behind it.
/// - **Pause**: [`pause`](Bucket::pause) holds every admission for a server's cooldown.
/// - **Follows push-back**: a push-back reported to [`feedback`](Bucket::feedback) (by
///   [`RetryAfterLayer`](crate::RetryAfterLayer)) pauses the bucket and lowers the rate, and
///   successes raise it back, never above the configured quota
///   ([`adaptive`](crate::adaptive)). Until then the configured rate holds.
///
/// Time is read from tokio's clock, so `#[tokio::test(start_paused = true)]` drives both the
/// decisions and the waits.
#[derive(Clone)]
pub struct Bucket {
    shared: Arc<Shared>,
    control: Arc<Steering>,
}

impl Bucket {
    /// A new, full token bucket enforcing `plan` (a [`Quota`], or a [`Plan`] of several
    /// quotas enforced together) from its first request.
    ///
    /// The configured rate holds until a server pushes back: under
    /// [`RetryAfterLayer`](crate::RetryAfterLayer) (or the reqwest middleware), a push-back
    /// pauses every clone for the server's cooldown and lowers the rate to just below the
    /// server's limit as estimated; successes then raise it back, never above `quota` (see
    /// [`adaptive`](crate::adaptive)). [`BucketBuilder::fixed_rate`] keeps `quota` whatever
    /// the server says; [`BucketBuilder::ramp`] starts it lower, to find a slower server's
    /// limit with one push-back.
    pub fn new(plan: impl Into<Plan>) -> Self {
        Self::builder(plan).build()
    }

    /// A builder, for the algorithm, the clock and the rate control.
    pub fn builder(plan: impl Into<Plan>) -> BucketBuilder {
        BucketBuilder::new(plan.into())
    }

    /// A token bucket that discovers a server's rate: it needs no quota, or only a hint.
    ///
    /// It starts at [`Adaptive`]'s start rate and searches upwards until the server pushes
    /// back, then settles just below the server's limit as estimated; when the server states
    /// its quota in rate-limit fields, the rate jumps to it. Never above 10 000 per second,
    /// burst 1: for another ceiling, `Bucket::builder(ceiling).adaptive(settings).build()`.
    /// See [`adaptive`](crate::adaptive) for the control law and its bounds.
    ///
    /// ```
    /// use tower_throttle::adaptive::Adaptive;
    /// use tower_throttle::{Bucket, Quota};
    ///
    /// let bucket = Bucket::adaptive(Adaptive::new().start(Quota::per_second(20)));
    /// assert_eq!(bucket.rate(), 20.0);
    /// assert_eq!(bucket.quota().burst_size(), 1);
    /// ```
    pub fn adaptive(settings: Adaptive) -> Self {
        Self::builder(Quota::per_second(10_000).burst(1))
            .adaptive(settings)
            .build()
    }

    pub(crate) fn from_parts(shared: Shared, control: Control) -> Self {
        let shared = Arc::new(shared);
        let control = Steering::start(control, Arc::clone(&shared) as Arc<dyn Steered>);
        Bucket { shared, control }
    }

    /// The configured quota: the most this bucket ever enforces (for an adaptive bucket, its
    /// ceiling). While a server pushes back the bucket enforces a lower rate:
    /// [`rate`](Self::rate), [`effective_quota`](Self::effective_quota).
    pub fn quota(&self) -> Quota {
        self.control.configured()
    }

    /// Which quota of the plan holds `cost` back longest now (`0` for a plan of one).
    pub(crate) fn holding_back(&self, cost: &Cost) -> usize {
        self.shared.holding_back(cost)
    }

    /// For a plan of several quotas: the time until its tightest quota has one more token.
    pub(crate) fn reset_in(&self) -> Option<Duration> {
        self.shared.reset_in().map(Duration::from_nanos)
    }

    /// The plan the bucket enforces, with its first quota as configured now
    /// ([`quota`](Self::quota)): that one is the rate a push-back lowers and
    /// [`set_quota`](Self::set_quota) changes. A quota that discovers its limit
    /// ([`BucketBuilder::discover`]) is the one its provider stated last.
    pub fn plan(&self) -> Plan {
        self.shared.plan_now(self.quota())
    }

    /// The quota the bucket enforces now: the configured one, or the same shape at a lower
    /// rate while the rate follows a server's push-back (see [`adaptive`](crate::adaptive)).
    pub fn effective_quota(&self) -> Quota {
        self.shared.quota()
    }

    /// The rate the bucket enforces now, in tokens per second.
    pub fn rate(&self) -> f64 {
        self.control.rate()
    }

    /// What the bucket has learned of the server's limit, in tokens per second: the limit
    /// estimated at its last push-back (see [`adaptive`](crate::adaptive)), or the rate it
    /// stated in its rate-limit fields. `None` until then.
    pub fn learned_rate(&self) -> Option<f64> {
        self.control.limit()
    }

    /// The algorithm this bucket decides with.
    pub fn algorithm(&self) -> Algorithm {
        self.shared.algorithm()
    }

    /// Whether `self` and `other` are handles to the same bucket.
    pub fn same_bucket(&self, other: &Bucket) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Take `n` tokens now, or say how long until they fit.
    ///
    /// Never waits and never queues. Fair to waiters: while requests wait in
    /// [`acquire`](Bucket::acquire), this refuses.
    ///
    /// # Errors
    /// [`Denied::Throttled`], carrying the wait until `n` tokens fit, or
    /// [`Denied::ExceedsBurst`] when `n` exceeds the burst (it can never fit).
    #[inline]
    pub fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        self.take(n).map(drop)
    }

    /// [`try_acquire`](Self::try_acquire), with the admission it grants.
    pub(crate) fn try_take(&self, n: u32) -> Result<Permit, Denied> {
        self.take(n)
    }

    #[inline(always)]
    fn take(&self, n: u32) -> Result<Permit, Denied> {
        let shared = &*self.shared;
        // `n` is 0 or more than one request may take: rare, and decided apart.
        if n.wrapping_sub(1) >= shared.capacity.load(Ordering::Relaxed) {
            return self.unsized_take(n);
        }
        match shared.try_admit(n) {
            Ok(permit) => {
                shared.observe_admitted(n, 0);
                Ok(permit)
            }
            Err(ns) => Err(self.refused(n, ns, None, Priority::Normal)),
        }
    }

    #[cold]
    fn unsized_take(&self, n: u32) -> Result<Permit, Denied> {
        self.shared.check(n)?;
        Ok(Permit::tokens_only(0))
    }

    /// A refusal of `n` tokens (or `each`) of class `priority` for `ns` nanoseconds,
    /// reported: shed when only the reserve for critical requests refused it.
    #[cold]
    #[inline(never)]
    fn refused(&self, n: u32, ns: u64, each: Option<&[u64]>, priority: Priority) -> Denied {
        let wait = Duration::from_nanos(ns);
        if let Some(o) = &self.shared.observer {
            o.refused(n, wait, false);
            o.tokens(self.snapshot().available);
        }
        match self.shared.shed(n, each, priority) {
            true => Denied::Shed(Throttled::after(wait)),
            false => Throttled::after(wait).into(),
        }
    }

    /// Take `n` tokens now as [`try_acquire`](Bucket::try_acquire) does, then give them back
    /// at once, as an admission left unused is given back. Not part of the API: the
    /// differential test of the Redis scripts (`tests/redis_differential.rs`) holds their
    /// release to it, and nothing public gives an admission back.
    #[doc(hidden)]
    pub fn try_acquire_and_give_back(&self, n: u32) -> Result<(), Denied> {
        self.check(n)?;
        match self.shared.try_admit(n) {
            Ok(permit) => {
                self.give_back(permit);
                Ok(())
            }
            Err(ns) => Err(Throttled::after(Duration::from_nanos(ns)).into()),
        }
    }

    /// The hot path of the layers: admit `n` tokens now without the lock, or `None`.
    #[inline]
    pub(crate) fn admit_now(&self, n: u32) -> Option<Permit> {
        self.shared.admit_now(n)
    }

    /// Admit now, or queue: callers check the size first. `bounded`: honour a leaky
    /// bucket's queue limit.
    pub(crate) fn reserve(&self, n: u32, bounded: bool) -> Result<Reservation, QueueFull> {
        self.shared
            .reserve(n, None, Priority::Normal, bounded, true)
    }

    /// Wait until `n` tokens are available, then take them.
    ///
    /// Waiters are served first come, first served. Dropping the future before it completes
    /// gives its place back. On a plan with an [in-flight](Plan::in_flight) quota, only the
    /// lease gives its slot back: take a [`charge`](Self::charge) instead.
    ///
    /// # Errors
    /// [`Denied::ExceedsBurst`], at once, when `n` is larger than the burst (it could never
    /// fit), and [`Denied::QueueFull`] when a leaky bucket's queue is full.
    pub fn acquire(&self, n: u32) -> Acquire<'_> {
        Acquire::new(self, n)
    }

    /// Take `estimate` now, to [`settle`](Charge::settle) once the real cost is known; as
    /// [`try_acquire`](Bucket::try_acquire) otherwise. A [`Cost`] names an amount per
    /// [`Resource`] (requests and tokens), charged to the quotas of the plan
    /// that count each, all of them or none; a number is that many requests.
    ///
    /// # Errors
    /// As [`try_acquire`](Bucket::try_acquire).
    pub fn try_charge(&self, estimate: impl Into<Cost>) -> Result<Charge, Denied> {
        let (shared, estimate) = (&*self.shared, estimate.into());
        let (tokens, each) = shared.price_of(&estimate);
        shared.check_cost(tokens, each.as_deref())?;
        // Under the lock: a charge knows what was given back before it.
        let (priority, now) = (estimate.class(), shared.clock.now_ns());
        match shared.try_admit_locked(tokens, each.as_deref(), priority, now) {
            Ok(permit) => {
                shared.observe_admitted(tokens, 0);
                Ok(Charge::new(self.clone(), permit, estimate, each))
            }
            Err(ns) => Err(self.refused(tokens, ns, each.as_deref(), priority)),
        }
    }

    /// Wait for `estimate`, then take it, to [`settle`](Charge::settle) once the real cost
    /// is known; as [`acquire`](Bucket::acquire) and [`try_charge`](Bucket::try_charge)
    /// otherwise.
    ///
    /// # Errors
    /// As [`acquire`](Bucket::acquire).
    pub async fn charge(&self, estimate: impl Into<Cost>) -> Result<Charge, Denied> {
        let estimate = estimate.into();
        let (tokens, each) = self.shared.price_of(&estimate);
        let mut acquire = Acquire::new(self, tokens).priority(estimate.class());
        acquire.fast = false;
        acquire.each = each.clone();
        let permit = std::future::poll_fn(|cx| acquire.poll_permit(cx)).await?;
        Ok(Charge::new(self.clone(), permit, estimate, each))
    }

    /// Hold every admission for `cooldown`: a server's `Retry-After`.
    ///
    /// Nothing is admitted before `now + cooldown`, queued waiters included. Then admission
    /// restarts as from an empty bucket: the first token is due when the cooldown ends, the
    /// next one interval later, so the end of a cooldown brings no burst. A shorter pause
    /// never shortens a longer one already in force.
    ///
    /// For a pause ending at `e` (unit costs), over any interval `[e, e + t)`:
    /// - token and leaky bucket: at most `1 + rate·t`;
    /// - fixed window: at most `1 + rate·t` until the first boundary a whole period after
    ///   `e` (the rest of a window never goes at once), and `count` per aligned window;
    /// - sliding window and sliding log: at most `1 + rate·t` for `t ≤ period`;
    /// - sliding log, also: never more than `count` in any window of length `period`,
    ///   weighted costs included, across the pause too: the admissions from before it
    ///   still count until they leave the window.
    ///
    /// Any `cooldown`, up to [`Duration::MAX`], takes constant time and memory.
    pub fn pause(&self, cooldown: Duration) {
        self.shared.pause(cooldown, None);
    }

    /// Whether every quota of the plan counts requests.
    pub(crate) fn counts_requests_only(&self) -> bool {
        self.shared.plan.counts_requests_only()
    }

    /// Hold only the quotas that count `resource` for `cooldown`, the others going on: a
    /// server said that resource ran out. Each held quota restarts as [`pause`](Self::pause)
    /// says for a token or leaky bucket; a window keeps its own bound, with no ramp. Where
    /// every quota counts `resource`, or none does, the whole bucket pauses.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_throttle::{Bucket, Cost, Plan, Quota, Resource};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let plan = Plan::new(Quota::per_minute(60))
    ///     .and(Quota::per_minute(10_000).burst(10_000))
    ///     .counting(Resource::TOKENS);
    /// let bucket = Bucket::new(plan);
    /// bucket.pause_resource(&Resource::TOKENS, Duration::from_secs(20));
    /// assert!(bucket.try_charge(Cost::new()).is_ok()); // a request alone goes
    /// assert!(bucket.try_charge(Cost::new().and(Resource::TOKENS, 1)).is_err());
    /// # }
    /// ```
    pub fn pause_resource(&self, resource: &Resource, cooldown: Duration) {
        let held = self.plan().held(resource);
        self.shared.pause(cooldown, held.as_deref());
    }

    /// What `permit`, admitted for `cost`, holds of the plan's in-flight quotas
    /// ([`Plan::in_flight`]), given back when the slot drops.
    pub(crate) fn slot(&self, permit: Permit, cost: &Cost) -> Slot {
        if self.shared.plan.in_flight_amounts(cost).is_none() {
            return Slot::default();
        }
        let (bucket, cost) = (self.clone(), cost.clone());
        Slot::new(move || bucket.shared.end_in_flight(permit, &cost))
    }

    /// A provider states its limit of `resource` per minute ([`BucketBuilder::discover`]).
    pub(crate) fn learn(&self, resource: &Resource, per_minute: u64, remains: Option<u64>) {
        self.shared.learn(resource, per_minute, remains);
    }

    /// Change the quota of this live bucket, for every clone, without rebuilding it.
    ///
    /// The change never lets a burst through: the tokens available right after it are at most
    /// those available right before (and at most the new burst); from then on the bucket
    /// refills at the new rate. Queued waiters keep their order and are rescheduled at the
    /// new rate; a waiter asking for more than the new burst fails with
    /// [`Denied::ExceedsBurst`].
    ///
    /// A lock-free decision made at the very instant of the change is taken under either the
    /// old or the new quota (for a token bucket, possibly the new interval against the old
    /// schedule, for that one decision).
    ///
    /// The rate control restarts at the new quota (see [`adaptive`](crate::adaptive)).
    ///
    pub fn set_quota(&self, quota: Quota) {
        self.control.reset(quota);
        self.shared.set_quota(quota);
    }

    pub(crate) fn check(&self, n: u32) -> Result<(), ExceedsBurst> {
        self.shared.check(n)
    }

    /// Give an unused admission back.
    pub(crate) fn give_back(&self, permit: Permit) {
        self.shared.give_back(permit);
    }
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("quota", &self.quota())
            .field("rate", &self.rate())
            .field("algorithm", &self.shared.algorithm())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod spaced_tests {
    use super::*;
    use tokio::task::JoinHandle;
    use tokio::time::Instant;

    type Times = Arc<std::sync::Mutex<Vec<Duration>>>;

    /// `n` waiters on `bucket`, each noting when it went, after `origin`.
    fn waiters(bucket: &Bucket, n: usize, origin: Instant) -> (Vec<JoinHandle<()>>, Times) {
        let times = Times::default();
        let tasks = (0..n)
            .map(|_| {
                let (bucket, times) = (bucket.clone(), times.clone());
                tokio::spawn(async move {
                    bucket.acquire(1).await.unwrap();
                    times.lock().unwrap().push(Instant::now() - origin);
                })
            })
            .collect();
        (tasks, times)
    }

    /// Every waiter done: the instants they went, in order.
    async fn went(tasks: Vec<JoinHandle<()>>, times: Times) -> Vec<Duration> {
        for t in tasks {
            t.await.unwrap();
        }
        let mut times = times.lock().unwrap().clone();
        times.sort();
        times
    }

    /// 300 waiters on 50/s with a burst of 1, once a server's limit is known, on a runtime
    /// that runs on millisecond ticks whose phase a stall shifts now and then: each timer is
    /// late by a different amount. The instants they go.
    async fn spaced_on_a_coarse_runtime(spaced: bool) -> Vec<Duration> {
        let bucket = Bucket::new(Quota::per_second(50).burst(1));
        bucket.shared.set_spaced(spaced);
        let (tasks, times) = waiters(&bucket, 300, Instant::now());
        let mut tick = 0u32;
        while times.lock().unwrap().len() < 300 {
            // tokio's millisecond ticks, and now and then a stall that shifts their phase.
            tick += 1;
            let step = if tick % 13 == 0 { 2_500 } else { 1_000 };
            tokio::time::advance(Duration::from_micros(step)).await;
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
        }
        went(tasks, times).await
    }

    /// A server without a burst measures from the request it admitted last: a late request
    /// followed by one on time would be refused. Once spaced, none is closer than 98 % of an
    /// interval to the one before, and the timers' lateness still costs no rate.
    #[tokio::test(start_paused = true)]
    async fn once_spaced_no_two_admissions_are_closer_than_98_percent_of_an_interval() {
        let closest = |times: &[Duration]| times.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        let times = spaced_on_a_coarse_runtime(true).await;
        let least = closest(&times);
        assert!(least >= Duration::from_micros(19_600), "{least:?}");
        let last = *times.last().unwrap();
        // What a stall delayed is not caught up closer than that on millisecond ticks: each
        // costs its lateness, and nothing more.
        assert!(
            last <= Duration::from_millis(299 * 20).mul_f64(1.05),
            "{last:?}"
        );
        // Not spaced, a waiter catches up on a late one: closer than that.
        let times = spaced_on_a_coarse_runtime(false).await;
        assert!(closest(&times) < Duration::from_micros(19_600));
    }

    /// Once spaced, the second waiter after a pause keeps 3 ms more from the first: the
    /// first request after a silence leaves late. Once per pause, and only spaced.
    #[tokio::test(start_paused = true)]
    async fn once_spaced_the_second_waiter_after_a_pause_keeps_3_ms_more() {
        for spaced in [true, false] {
            let bucket = Bucket::new(Quota::per_second(50).burst(1));
            bucket.shared.set_spaced(spaced);
            bucket.acquire(1).await.unwrap();
            bucket.pause(Duration::from_secs(1));
            let (tasks, times) = waiters(&bucket, 4, Instant::now() + Duration::from_secs(1));
            let times = went(tasks, times).await;
            let ms = |n: u64| Duration::from_millis(n);
            // Spaced: 98 % of 20 ms and 3 ms more, on the timer's millisecond ticks; then
            // the interval again.
            let expected = if spaced {
                [ms(0), ms(23), ms(43), ms(63)]
            } else {
                [ms(0), ms(20), ms(40), ms(60)]
            };
            assert_eq!(times, expected, "spaced {spaced}");
        }
    }

    /// A new rate during a pause neither shortens nor stretches it, spaced or not, whatever
    /// the burst: the first waiter goes at its end.
    #[tokio::test(start_paused = true)]
    async fn a_rate_changed_during_a_pause_keeps_its_end_when_spaced() {
        for (burst, spaced) in [(100, true), (100, false), (1, true), (10, true)] {
            let bucket = Bucket::new(Quota::per_second(100).burst(burst));
            bucket.shared.set_spaced(spaced);
            bucket.acquire(1).await.unwrap();
            let start = Instant::now();
            bucket.pause(Duration::from_secs(5));
            bucket
                .shared
                .set_rate(Quota::new(100, Duration::from_millis(2137)).burst(burst));
            bucket.acquire(1).await.unwrap();
            assert_eq!(
                start.elapsed(),
                Duration::from_secs(5),
                "burst {burst}, spaced {spaced}"
            );
        }
    }
}
