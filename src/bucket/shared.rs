//! The state every clone of a [`Bucket`](super::Bucket) shares: its engine (the token and
//! leaky bucket's lock-free [`Cell`], or a window engine under the lock) and the line of
//! requests waiting for their turn ([`Queue`]).
//!
//! Admissions are recorded when requests go, never booked ahead; only the first in line may
//! go ([`turn`](super::turn)), counted back to its turn when its timer was late, within what
//! the [`guard`](super::guard) allows. The token and leaky bucket admit on the fast path
//! without the lock; everything else happens under it, and wakers and observer callbacks
//! are called after it is released. How this keeps waiting fair, quiet, drift-free,
//! cancel-safe and exact at the instants that count: `docs/semantics.md`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use super::cell::Cell;
use super::queue::{Entry, Queue};
use super::turn::price;
use super::waiter::Waiter;
use super::{Algorithm, ExceedsBurst, QueueFull};
use crate::clock::{Align, Clock};
use crate::engine::gcra::Gcra;
use crate::engine::{Engine as _, Log, Model, Paused, Phase, Price, Stack, Windows};
use crate::observe::Observer;
use crate::{Cost, Plan, Priority, Quota, Resource};

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) clock: Clock,
    pub(super) algorithm: Algorithm,
    /// The plan as configured; its first quota is the one that changes.
    pub(super) plan: Plan,
    /// The most tokens one request may take from the plan's other quotas.
    rest_capacity: u32,
    /// Where window boundaries fall.
    align: Align,
    /// The token and leaky bucket's state, for the lock-free path.
    pub(super) cell: Cell,
    /// The most tokens one request may take.
    pub(super) capacity: AtomicU32,
    pub(super) paused_until: AtomicU64,
    /// A late waiter is counted from when it goes, beyond a small slack (token and leaky
    /// bucket).
    pub(super) spaced: AtomicBool,
    /// Requests in the line: the fast path stands aside while there are any.
    pub(super) waiting: AtomicUsize,
    state: Mutex<State>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// Lock-free admissions are possible: a GCRA engine.
    lock_free: bool,
    /// The quotas of the plan that discover their provider's limit.
    discovered: Box<[usize]>,
    /// The share of each quota's capacity kept for critical requests (0: none).
    reserve: f64,
    /// The plan has an in-flight quota ([`Plan::in_flight`]).
    pub(crate) in_flight: bool,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) quota: Quota,
    pub(super) queue: Queue,
    /// Window engines: the latest instant committed; later commits go no earlier.
    pub(super) tail: u64,
    /// GCRA engines: the `tat` of a bucket one token larger fed with the instants waiters were
    /// actually admitted at (not the instants they were counted at), from when the line
    /// formed. A waiter goes only when this bucket too has room, so catching up after a late
    /// timer never puts more than `burst + 1 + rate·t` into any interval of actual instants.
    /// The sliding log: the same at its rate, fed with every admission.
    pub(super) guard: u64,
    /// The sliding log heeds its guard until this instant: a window's width after it last
    /// counted a late waiter back.
    pub(super) credited_until: u64,
    /// GCRA engines: the time given back so far, nanoseconds of `tat`.
    pub(super) refunded: u64,
    /// GCRA engines: the instant the last waiter went (0: none yet).
    pub(super) last_went: u64,
    /// A pause was set and no waiter went after its end yet (see
    /// [`AFTER_PAUSE`](super::guard::AFTER_PAUSE)).
    pub(super) resumed: bool,
    pub(super) engine: Kind,
    /// The limit stated last for each of [`Shared::discovered`] (`None` before one is).
    stated: Box<[Option<Quota>]>,
}

/// The engine a bucket decides with.
#[derive(Debug)]
pub(super) enum Kind {
    /// The token and leaky bucket, whose state is the [`Cell`].
    Gcra(Gcra),
    /// A window engine, with the ramp after a pause.
    Window(Box<dyn Model>),
}

/// An admission granted and not used yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permit {
    pub(super) tokens: u32,
    /// The instant it counts as admitted.
    pub(super) at: u64,
    /// GCRA: `tat` right after this admission; giving the permit back is exact before it.
    pub(super) tat: u64,
    /// GCRA: the time given back ([`State::refunded`]) before this admission, when it was
    /// made under the lock; else [`UNKNOWN`].
    pub(super) refunds: u64,
}

/// [`Permit::refunds`] of an admission made on the fast path.
pub(super) const UNKNOWN: u64 = u64::MAX;

impl Permit {
    /// The tokens this admission took.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // given back to Redis by count
    pub(crate) fn tokens(&self) -> u32 {
        self.tokens
    }

    /// `tokens` admitted at `at`, `tat` and `refunds` as [`Permit`] says.
    pub(super) fn new(tokens: u32, at: u64, tat: u64, refunds: u64) -> Self {
        Permit {
            tokens,
            at,
            tat,
            refunds,
        }
    }

    /// `tokens` admitted by a limit kept elsewhere (Redis), or none (`0`): only the count.
    pub(crate) fn tokens_only(tokens: u32) -> Self {
        Permit::new(tokens, 0, 0, UNKNOWN)
    }
}

/// What [`Shared::reserve`] hands out.
#[derive(Debug)]
pub(crate) enum Reservation {
    Now(Permit),
    Later(Waiter),
}

pub(crate) fn capacity_of(quota: &Quota, algorithm: Algorithm) -> u32 {
    match algorithm {
        Algorithm::TokenBucket | Algorithm::LeakyBucket { .. } => quota.burst_size(),
        _ => quota.count(),
    }
}

/// Whether a request of `tokens`, or of `each` (an amount per quota), can ever fit `engine`,
/// whose requests' capacity is `capacity`.
fn fits(
    engine: &Kind,
    capacity: u32,
    tokens: u32,
    each: Option<&[u64]>,
) -> Result<(), ExceedsBurst> {
    match (each, engine) {
        (Some(a), Kind::Window(w)) => {
            (a.iter().enumerate()).try_for_each(|(i, &n)| ExceedsBurst::check(n, w.capacity_at(i)))
        }
        _ => ExceedsBurst::check(tokens.into(), capacity.into()),
    }
}

fn engine_of(plan: &Plan, now: u64, align: Align) -> Kind {
    if plan.parts().len() > 1 {
        let stack = Stack::new(plan, |width| align.phase(width, now));
        return Kind::Window(Paused::boxed(stack));
    }
    let (quota, algorithm) = (plan.quota(), plan.parts()[0].algorithm);
    match algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingWindow => {
            let phase = align.phase(quota.period_ns(), now);
            Kind::Window(Paused::boxed(Windows::new(quota, algorithm, phase)))
        }
        Algorithm::SlidingLog => Kind::Window(Paused::boxed(Log::new(quota))),
        _ => Kind::Gcra(Gcra::new(quota, algorithm)),
    }
}

impl Shared {
    pub(crate) fn new(
        plan: Plan,
        clock: Clock,
        align: Align,
        observer: Option<Arc<dyn Observer>>,
        discovered: &[usize],
        weights: [u32; Priority::COUNT],
        reserve: f64,
    ) -> Self {
        let (quota, algorithm) = (plan.quota(), plan.parts()[0].algorithm);
        let in_flight = plan.parts().iter().any(|p| p.in_flight);
        let rest_capacity = plan.parts()[1..]
            .iter()
            .filter(|p| p.resource == Resource::REQUESTS)
            .map(|p| capacity_of(&p.quota, p.algorithm))
            .min()
            .unwrap_or(u32::MAX);
        Shared {
            algorithm,
            align,
            cell: Cell::new(&Gcra::new(quota, algorithm)),
            capacity: AtomicU32::new(capacity_of(&quota, algorithm).min(rest_capacity)),
            rest_capacity,
            paused_until: AtomicU64::new(0),
            spaced: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            state: Mutex::new(State {
                quota,
                queue: Queue::new(weights),
                tail: 0,
                guard: 0,
                credited_until: 0,
                refunded: 0,
                last_went: 0,
                resumed: false,
                engine: engine_of(&plan, clock.now_ns(), align),
                stated: vec![None; discovered.len()].into(),
            }),
            clock,
            lock_free: algorithm.is_gcra() && plan.parts().len() == 1 && reserve == 0.0,
            plan,
            observer,
            discovered: discovered.into(),
            reserve,
            in_flight,
        }
    }

    /// The hot path: admit `tokens` now with one clock read and one compare-and-swap, or
    /// `None` (not now, someone is waiting, or not a lock-free engine).
    #[inline]
    pub(crate) fn admit_now(&self, tokens: u32) -> Option<Permit> {
        if !self.lock_free || self.waiting.load(Ordering::Acquire) != 0 {
            return None;
        }
        let now = self.clock.now_ns();
        let tat = self.cell.try_admit(u64::from(tokens), now).ok()?;
        self.observe_admitted(tokens, 0);
        Some(Permit::new(tokens, now, tat, UNKNOWN))
    }

    /// Report an admission after `waited_ns` of waiting.
    #[inline]
    pub(crate) fn observe_admitted(&self, tokens: u32, waited_ns: u64) {
        if let Some(o) = &self.observer {
            self.report_admitted(o.as_ref(), tokens, waited_ns);
        }
    }

    #[cold]
    fn report_admitted(&self, o: &dyn Observer, tokens: u32, waited_ns: u64) {
        o.admitted(tokens, Duration::from_nanos(waited_ns));
        if waited_ns > 0 {
            o.tokens(self.level().0.available.try_into().unwrap_or(u32::MAX));
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock; recover the data if one ever did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    pub(crate) fn quota(&self) -> Quota {
        self.lock().quota
    }

    /// What `cost` charges: the first quota's amount, and the amount per quota where the
    /// plan has several.
    pub(super) fn price_of(&self, cost: &Cost) -> (u32, Option<Arc<[u64]>>) {
        Self::price(self.plan.amounts(cost))
    }

    /// What a request of `cost` took once it ended, as [`price_of`](Self::price_of): its
    /// in-flight quotas given back ([`Plan::in_flight`]).
    pub(super) fn ended_price(&self, cost: &Cost) -> (u32, Option<Arc<[u64]>>) {
        let parts = self.plan.parts().iter();
        Self::price(
            self.plan
                .amounts(cost)
                .zip(parts)
                .map(|(a, p)| a * u64::from(!p.in_flight)),
        )
    }

    /// The in-flight quotas of `permit`, admitted for `cost`, given back now: its request
    /// ended unsettled.
    pub(crate) fn end_in_flight(&self, permit: Permit, cost: &Cost) {
        if !self.in_flight {
            return;
        }
        let Some(held) = self.plan.in_flight_amounts(cost) else {
            return;
        };
        let tokens = u32::try_from(held[0]).unwrap_or(u32::MAX);
        let permit = Permit { tokens, ..permit };
        match held.len() {
            1 => self.give_back(permit),
            _ => self.give_back_each(permit, Some(&held)),
        }
    }

    fn price(mut amounts: impl ExactSizeIterator<Item = u64>) -> (u32, Option<Arc<[u64]>>) {
        let each = (amounts.len() > 1).then(|| amounts.by_ref().collect::<Arc<[u64]>>());
        let first = match &each {
            Some(each) => each[0],
            None => amounts.next().unwrap_or(0),
        };
        (u32::try_from(first).unwrap_or(u32::MAX), each)
    }

    /// [`check_price`](Self::check_price), taking the lock where it must.
    pub(super) fn check_cost(&self, tokens: u32, each: Option<&[u64]>) -> Result<(), ExceedsBurst> {
        match each {
            Some(_) => self.check_price(&self.lock(), tokens, each),
            None => self.check(tokens),
        }
    }

    /// Check a request's size, `tokens` or `each` (an amount per quota of a plan), against
    /// the capacity.
    pub(super) fn check_price(
        &self,
        st: &State,
        tokens: u32,
        each: Option<&[u64]>,
    ) -> Result<(), ExceedsBurst> {
        let capacity = self.capacity.load(Ordering::Acquire);
        fits(&st.engine, capacity, tokens, each)
    }

    /// With a reserve for critical requests, the earliest instant `≥ from` at which a request
    /// of class `priority`, of `tokens` (or `each`), fits and leaves the reserve of each quota
    /// it is charged to: `None` for a critical request, or without a reserve.
    #[inline]
    pub(super) fn reserved_fit(
        &self,
        st: &mut State,
        tokens: u32,
        each: Option<&[u64]>,
        priority: Priority,
        from: u64,
    ) -> Option<u64> {
        if self.reserve == 0.0 || priority == Priority::Critical {
            return None;
        }
        Some(self.fit_leaving_reserve(st, tokens, each, from))
    }

    #[cold]
    fn fit_leaving_reserve(
        &self,
        st: &mut State,
        tokens: u32,
        each: Option<&[u64]>,
        from: u64,
    ) -> u64 {
        // Each amount asked, and the reserve kept beside it (never more than it leaves).
        let kept = |amount: u64, capacity: u64| match amount {
            0 => 0,
            _ => {
                let reserve = (self.reserve * capacity as f64).ceil() as u64;
                amount + reserve.min(capacity.saturating_sub(amount))
            }
        };
        let Kind::Window(w) = &st.engine else {
            let capacity = self.capacity.load(Ordering::Acquire).into();
            let padded = u32::try_from(kept(tokens.into(), capacity)).unwrap_or(u32::MAX);
            return self.predict(st, padded, None, 0, from);
        };
        let padded: Vec<u64> = match each {
            Some(a) => a.to_vec(),
            None => self.plan.amounts(&Cost::from(tokens)).collect(),
        };
        let padded: Vec<u64> = (padded.iter().enumerate())
            .map(|(i, &a)| kept(a, w.capacity_at(i)))
            .collect();
        self.predict(st, tokens, Some(&padded), 0, from)
    }

    /// Whether a refused request of class `priority` was refused for the reserve alone: it
    /// would fit now without it.
    pub(crate) fn shed(&self, tokens: u32, each: Option<&[u64]>, priority: Priority) -> bool {
        if self.reserve == 0.0 || priority == Priority::Critical {
            return false;
        }
        let mut st = self.lock();
        let now = self.clock.now_ns();
        st.queue.is_empty() && self.predict(&mut st, tokens, each, 0, now) <= now
    }

    /// Check a request's size against the capacity.
    #[inline]
    pub(crate) fn check(&self, tokens: u32) -> Result<(), ExceedsBurst> {
        ExceedsBurst::check(tokens.into(), self.capacity.load(Ordering::Acquire).into())
    }

    /// Admit now or say how many nanoseconds until `tokens` fit. Never queues, never
    /// overtakes a waiter.
    #[inline]
    pub(crate) fn try_admit(&self, tokens: u32) -> Result<Permit, u64> {
        let now = self.clock.now_ns();
        if self.lock_free && self.waiting.load(Ordering::Acquire) == 0 {
            return self
                .cell
                .try_admit(u64::from(tokens), now)
                .map(|tat| Permit::new(tokens, now, tat, UNKNOWN));
        }
        self.try_admit_locked(tokens, None, Priority::Normal, now)
    }

    /// [`try_admit`](Self::try_admit) under the lock: a window engine, or waiters in line.
    #[inline(never)]
    pub(super) fn try_admit_locked(
        &self,
        tokens: u32,
        each: Option<&[u64]>,
        priority: Priority,
        now: u64,
    ) -> Result<Permit, u64> {
        let mut st = self.lock();
        if !st.queue.is_empty() {
            let ahead = st.queue.ahead(priority);
            let at = self.predict(&mut st, tokens, each, ahead, now);
            return Err(at.saturating_sub(now).max(1));
        }
        if let Some(at) = self.reserved_fit(&mut st, tokens, each, priority, now) {
            if at > now {
                return Err(at - now);
            }
        }
        self.commit(&mut st, tokens, each, now, now)
            .map_err(|at| at - now)
    }

    /// Admit now if possible, else join the line. `bounded`: refuse when a leaky bucket's
    /// line is full (the waiting layer applies backpressure instead).
    /// `fast`: admit on the fast path when it can (else only under the lock, as a
    /// [`Charge`](super::Charge) must be).
    /// `each`: an amount per quota of a plan whose quotas are charged apart.
    /// `priority`: the class it waits in.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        tokens: u32,
        each: Option<Arc<[u64]>>,
        priority: Priority,
        bounded: bool,
        fast: bool,
    ) -> Result<Reservation, QueueFull> {
        if fast {
            if let Some(p) = self.admit_now(tokens) {
                return Ok(Reservation::Now(p));
            }
        }
        let mut st = self.lock();
        if let Some(max_queue) = self.algorithm.max_queue() {
            if bounded && st.queue.len() >= max_queue {
                return Err(QueueFull { max_queue });
            }
        }
        let now = self.clock.now_ns();
        let armed = if st.queue.is_empty() {
            let shed = (self.reserved_fit(&mut st, tokens, each.as_deref(), priority, now))
                .filter(|at| *at > now);
            match shed.map_or_else(
                || self.commit(&mut st, tokens, each.as_deref(), now, now),
                Err,
            ) {
                Ok(permit) => {
                    drop(st);
                    self.observe_admitted(tokens, 0);
                    return Ok(Reservation::Now(permit));
                }
                Err(at) => {
                    // The line forms: its guard starts where the bucket is.
                    st.guard = st.guard.max(self.guard_behind(self.cell.tat()));
                    at
                }
            }
        } else if let Kind::Gcra(_) = st.engine {
            let ahead = st.queue.ahead(priority);
            self.predict(&mut st, tokens, None, ahead, now)
        } else {
            // A window waiter behind the first learns its turn at the hand-over.
            now
        };
        let mut entry = Entry::new(tokens, armed, priority);
        entry.first_since = now;
        // The quota may have shrunk below the request since the caller checked it.
        entry.failed = self.check_price(&st, tokens, each.as_deref()).is_err();
        entry.each = each;
        let key = st.queue.push(entry);
        self.waiting.store(st.queue.len(), Ordering::Release);
        Ok(Reservation::Later(Waiter::new(Arc::clone(self), key, now)))
    }

    /// Return an unused permit; the first in line may go earlier.
    pub(crate) fn give_back(&self, permit: Permit) {
        self.give_back_each(permit, None);
    }

    /// Return `permit`'s tokens or, where a plan's quotas are charged apart, `each`, an
    /// amount per quota.
    pub(crate) fn give_back_each(&self, permit: Permit, each: Option<&[u64]>) {
        if permit.tokens == 0 && each.is_none_or(|a| a.iter().all(|n| *n == 0)) {
            return;
        }
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let (tokens, at) = (u64::from(permit.tokens), permit.at);
        let credits = self.credits(&st);
        match &mut st.engine {
            // Only what has not come back by refilling since the admission, so the bucket
            // never holds more than it would had the admission taken fewer tokens, whatever
            // it admitted since. `tat` falls only by what is given back: the admission's
            // `tat`, less what was given back since, bounds what is still ahead of it.
            Kind::Gcra(g) => {
                let interval = g.interval;
                let since = match permit.refunds {
                    UNKNOWN => 0,
                    before => st.refunded.saturating_sub(before),
                };
                let ahead = permit.tat.saturating_sub(since).saturating_sub(now);
                let back = tokens.saturating_mul(interval).min(ahead);
                st.refunded = st.refunded.saturating_add(back);
                if back > 0 {
                    self.cell.update(|tat| *tat = tat.saturating_sub(back));
                    let (guard_interval, _) = self.guard_params();
                    let scaled =
                        u128::from(back) * u128::from(guard_interval) / u128::from(interval.max(1));
                    st.guard = st.guard.saturating_sub(scaled as u64);
                }
            }
            Kind::Window(w) => {
                w.release(price(permit.tokens, each), at);
                if credits {
                    let cost = tokens.saturating_mul(st.quota.interval_ns());
                    st.guard = st.guard.saturating_sub(cost);
                }
            }
        }
        let next = self.hand_over(&mut st, now);
        drop(st);
        next.into_iter().for_each(Waker::wake);
    }

    /// Charge `tokens` (or `each`, an amount per quota of a plan) now whether or not they
    /// fit: an admission that cost more than it took. One call owes at most one burst of
    /// each quota, and a token or leaky bucket never owes more than one burst beyond empty,
    /// so a debt lasts at most twice the time the bucket takes to fill.
    pub(crate) fn owe(&self, tokens: u32, each: Option<&[u64]>) {
        if tokens == 0 && each.is_none_or(|a| a.iter().all(|n| *n == 0)) {
            return;
        }
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let capacity = self.capacity.load(Ordering::Acquire);
        let tokens = u64::from(tokens.min(capacity));
        let tail = st.tail;
        match &mut st.engine {
            Kind::Gcra(g) => {
                let (interval, tolerance) = (g.interval, g.tolerance);
                let most = now
                    .saturating_add(tolerance)
                    .saturating_add(u64::from(capacity).saturating_mul(interval));
                self.cell.update(|tat| {
                    let owed = (*tat)
                        .max(now)
                        .saturating_add(tokens.saturating_mul(interval));
                    *tat = owed.min(most.max(*tat));
                });
            }
            Kind::Window(w) => {
                let capped: Option<Vec<u64>> = each.map(|a| {
                    a.iter()
                        .enumerate()
                        .map(|(i, n)| (*n).min(w.capacity_at(i)))
                        .collect()
                });
                let cost = match &capped {
                    Some(a) => Price::Each(a),
                    None => Price::One(tokens),
                };
                w.commit(cost, now.max(tail));
            }
        }
        st.tail = st.tail.max(now);
        drop(st);
        if let Some(o) = &self.observer {
            o.tokens(self.level().0.available.try_into().unwrap_or(u32::MAX));
        }
    }

    /// Hold every admission, waiters included, until `now + d`; restart as from an empty
    /// bucket whose first token is due when the cooldown ends. O(1) for any `d`. `held`:
    /// only the quotas of a plan it marks, the others going on ([`Engine::hold`]).
    pub(crate) fn pause(&self, d: Duration, held: Option<&[bool]>) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Clamp far-off pauses so arithmetic stays in range (about 146 years).
        let end = now.saturating_add(d).min(u64::MAX / 4);
        let alone = match (held, &mut st.engine) {
            (Some(held), Kind::Window(w)) => {
                w.hold(held, end);
                true
            }
            _ => false,
        };
        // `0` is also "never paused": a pause at the clock's origin (a bucket paused the
        // instant it was made) empties it too.
        let before = || self.paused_until.fetch_max(end, Ordering::AcqRel);
        if !alone && matches!(before(), b if b < end || b == 0) {
            st.resumed = true;
            let interval = st.quota.interval_ns();
            match &mut st.engine {
                Kind::Gcra(g) => self.cell.update(|tat| {
                    g.restart(tat, end);
                }),
                Kind::Window(w) => w.pause(end, interval),
            }
        }
        // A window's new ramp starts at the end of this pause: the first in line may be due
        // earlier than the ramp before it said.
        let next = self.hand_over(&mut st, now);
        drop(st);
        next.into_iter().for_each(Waker::wake);
        if let Some(o) = &self.observer {
            o.paused(Duration::from_nanos(d));
            if !alone {
                o.tokens(0);
            }
        }
    }

    /// Change the quota of the live bucket, never raising the tokens available now.
    pub(crate) fn set_quota(&self, quota: Quota) {
        self.enforce(quota, false);
    }

    /// Enforce `quota` from now on; `rate`: a rate control's new rate (see
    /// [`Phase::KeepEnd`]).
    fn enforce(&self, quota: Quota, rate: bool) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        st.quota = quota;
        let capacity = capacity_of(&quota, self.algorithm).min(self.rest_capacity);
        self.capacity.store(capacity, Ordering::Release);
        match &mut st.engine {
            Kind::Gcra(g) => {
                // Keep the tokens held at the end of a pause in force (an empty bucket then):
                // a pause's debt is time, not tokens, so a new rate neither shortens nor
                // stretches it.
                let paused = self.paused_until.load(Ordering::Acquire);
                let mut tat = self.cell.tat();
                *g = g.with_quota(&mut tat, quota, Phase::KeepEnd, now.max(paused));
                self.cell.set(g, tat);
                // Once spaced, the guard restarts one new token after the instant the last
                // waiter went: a rate control changes the rate often, and the next must keep
                // its distance at the new rate.
                st.guard = if self.spaced.load(Ordering::Acquire) && st.last_went > 0 {
                    st.last_went.saturating_add(self.guard_params().0)
                } else {
                    self.guard_behind(tat)
                };
            }
            Kind::Window(w) => {
                let phase = if rate {
                    Phase::KeepEnd
                } else {
                    Phase::At(self.align.phase(quota.period_ns(), now))
                };
                w.set_quota(quota, phase, now);
            }
        }
        self.rescheduled(st, capacity, now);
    }

    /// After a quota changed: the waiters that can no longer fit fail, the first in line is
    /// due at the new rate.
    fn rescheduled(&self, mut st: MutexGuard<'_, State>, capacity: u32, now: u64) {
        let State { queue, engine, .. } = &mut *st;
        let mut wakers: Vec<Waker> = queue
            .entries_mut()
            .filter(|e| !e.failed && fits(engine, capacity, e.tokens, e.each.as_deref()).is_err())
            .filter_map(|e| {
                e.failed = true;
                e.waker.take()
            })
            .collect();
        wakers.extend(self.hand_over(&mut st, now));
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// A provider states its limit of `resource`, per minute, and what `remains` of it: the
    /// quota that discovers it ([`BucketBuilder::discover`](super::BucketBuilder::discover))
    /// takes the limit if it changed, starting with what remains the first time.
    pub(crate) fn learn(&self, resource: &Resource, per_minute: u64, remains: Option<u64>) {
        let parts = self.plan.parts();
        let count = u32::try_from(per_minute).unwrap_or(u32::MAX);
        let Ok(quota) = Quota::try_new(count, Duration::from_secs(60)) else {
            return;
        };
        let Some(k) = (self.discovered.iter()).position(|&i| parts[i].resource == *resource) else {
            return;
        };
        let (i, mut st) = (self.discovered[k], self.lock());
        let first = st.stated[k].is_none();
        if st.stated[k].replace(quota) == Some(quota) {
            return;
        }
        let now = self.clock.now_ns();
        if let Kind::Window(w) = &mut st.engine {
            w.set_quota_at(i, quota, now);
            let spent = u64::from(count).saturating_sub(remains.unwrap_or(u64::MAX));
            if first && spent > 0 {
                let mut each = vec![0; parts.len()];
                each[i] = spent;
                let at = w.earliest(Price::Each(&each), now);
                w.commit(Price::Each(&each), at);
                st.tail = st.tail.max(at);
            }
        }
        let capacity = self.capacity.load(Ordering::Acquire);
        self.rescheduled(st, capacity, now);
    }

    /// The plan with `first` as its first quota, and the limit its provider stated last for
    /// each quota that discovers its own.
    pub(crate) fn plan_now(&self, first: Quota) -> Plan {
        let mut plan = self.plan.with_first(first);
        let st = self.lock();
        for (i, quota) in self.discovered.iter().zip(st.stated.iter()) {
            if let Some(quota) = quota {
                plan.set(*i, *quota);
            }
        }
        plan
    }

    /// The hook of a rate control ([`crate::adaptive`]): once a server's limit is known, the
    /// guard of the token and leaky bucket allows nothing beyond the bucket but 2 % of an
    /// interval, so that a waiter catching up on a late one never goes closer than 98 % of
    /// an interval after it: a server without a burst measures from the request it admitted
    /// last, and a late request followed by one on time would be refused. A late waiter is
    /// still counted at its turn, so a timer late by the same amount every time (tokio's
    /// millisecond ticks) costs nothing.
    pub(crate) fn set_spaced(&self, spaced: bool) {
        self.spaced.store(spaced, Ordering::Release);
    }

    /// The hook of a rate control ([`crate::adaptive`]): enforce `quota` from now on, as
    /// [`set_quota`](Self::set_quota) does.
    pub(crate) fn set_rate(&self, quota: Quota) {
        self.enforce(quota, true);
    }
}
