//! The state every clone of a [`Bucket`](super::Bucket) shares: an engine (GCRA or a window
//! model) and the line of requests waiting for their turn.
//!
//! # Admission happens when the request goes
//! The engine only ever records admissions at the instant they are handed out: when
//! [`try_acquire`](super::Bucket::try_acquire) succeeds, when an `acquire` future completes,
//! when a waiting layer's `poll_ready` returns ready. Nothing is reserved ahead. So the rate
//! invariant (`burst + rate·t` over any interval) holds at the instants that count, also
//! right after the runtime stalled: a waiter whose timer fired 60 ms late is checked against
//! the bucket *then*, and the waiters behind it are spaced from there, instead of every
//! overdue reservation going out at once.
//!
//! # Waiting
//! A request that does not fit joins a FIFO line ([`Queue`]). Only the first in line may be
//! admitted; it sleeps on one timer until the engine says its tokens fit, and when it goes it
//! hands the turn to the next one. So:
//! - **fair**: admissions follow arrival order, and the lock-free fast path stands aside
//!   while anyone waits;
//! - **quiet**: every waiter also gets a *predicted* instant when it joins (for the token and
//!   leaky bucket: the schedule after everyone ahead of it), and sleeps until then. A waiter
//!   whose timer fires before its turn (the one ahead went late) waits for the hand-over, and
//!   the hand-over wakes the next in line only when its timer would be wrong (too late, after
//!   a cancellation; or already fired). Without stalls or cancellations each waiter is woken
//!   once, by its own timer. Window waiters behind the first are woken by the hand-over
//!   (at most one wake more each);
//! - **drift-free**: a waiter woken late by a coarse timer is counted as admitted at its
//!   turn (for the token and leaky bucket, its place in the schedule; for the sliding log,
//!   the instant its timer was armed for), if that is at most `slack` ago and not before the
//!   one ahead of it was counted (a hand-over passes the credit on, so a late first in line
//!   does not make everyone behind it late). The schedule therefore does not slip by the
//!   lateness of the timer. `slack` is twice one emission interval, or twice 2 ms (tokio's
//!   1 ms timer granularity and as much for the task to run) if that is longer: the timer's
//!   own lateness, and as much again when the guard (below) made it wait for a later timer.
//!   None for the aligned windows, whose boundaries do not move. Without a late timer no
//!   credit is taken;
//! - **exact at the instants that count**: a credit alone would let the waiters whose turns
//!   all passed during a late wake-up go together, above the bound (at 1000/s with a burst
//!   of 10, after a stall: twelve at one instant). So the token and leaky bucket also
//!   keep a *guard* while anyone waits: a bucket one token larger, fed with the instants
//!   waiters are actually admitted at. A waiter goes only when both have room, so over any
//!   interval `t` of actual admission instants at most `burst + rate·t + 1` are admitted
//!   (the `+1` is the guard's extra token, which is what lets a late waiter catch up at
//!   all), whatever the rate and however late the timers. When the line empties, the bucket
//!   takes over what the guard saw, so the lock-free path keeps the bound too. The sliding
//!   log, the one window that credits late waiters, feeds its guard (`count + 1` tokens at
//!   its rate) with every admission and heeds it for one period after each credit, for the
//!   same bound (without a credit the log alone keeps it, and decides exactly as the Redis
//!   log does); before it had one, a runtime running every 1.9 ms let 11.8 tokens above
//!   `rate·t` into one interval, and timers 3.7 ms late let its schedule slip by 10 %.
//!
//!   One exception, where tokio's timer cannot do better: a bucket whose burst lasts less
//!   than 2 ms plus one interval (`(burst + 1)·interval < 2 ms`, e.g. a leaky bucket above
//!   500 per second) gets a guard of `⌈2 ms · rate⌉ + 1` tokens instead, a bound of
//!   `⌈2 ms · rate⌉ + 1 + rate·t` (a leaky bucket at 1000/s: `1 + rate·t + 2`).
//!   Timers fire on 1 ms ticks with up to 2 ms of jitter, so two waiters an interval apart
//!   often run closer than that; a `+1` guard would hold each such pair back a tick and lose
//!   7 % of a 1000/s leaky bucket's rate (measured). What a guard forbids is lost, and only
//!   that: with timers at most one interval late nothing is;
//! - **cancel-safe**: nothing was reserved, so a waiter that leaves takes nothing with it;
//!   it unlinks itself in O(1) and, if it was first, wakes the next. Those behind a
//!   cancelled waiter have predictions that are now late; each learns its real turn at its
//!   hand-over.
//!
//! A pause or a quota change only changes the engine: the first in line is woken if its turn
//! came earlier (a window's ramp restarts at the end of each pause), else it re-reads its
//! turn when its timer fires. A pause keeps a window's admissions: they count until they
//! leave the window, and a credit never counts a late waiter before the end of a pause. A
//! pause is O(1) for any length.
//!
//! Only the first in line may go, so a first waiter whose task is slow to run (a busy
//! worker) holds those behind it until it does, as a fair lock would: that is what admission
//! in arrival order means. A dropped waiter never holds anyone.
//!
//! # Locking
//! The token and leaky buckets admit on the fast path with one clock read, one load of the
//! waiter count and one compare-and-swap, without the lock. Everything else happens under
//! the lock, and wakers and observer callbacks are called after it is released.

use std::future::Future as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::cell::Cell;
use super::queue::{Entry, Queue};
use super::{Algorithm, ExceedsBurst, QueueFull, Remote};
use crate::clock::{Align, Clock};
use crate::engine::gcra::{schedule, Gcra};
use crate::engine::{Engine as _, Log, Model, Paused, Phase, View, Windows};
use crate::observe::Observer;
use crate::Quota;

/// How late tokio's timer may fire and still not slow the schedule down: its 1 ms
/// granularity, plus as much again for the task to be polled.
const TIMER_SLACK: u64 = 2_000_000;

/// The guard's tolerance: one token more than the bucket's, or as many as it takes for the
/// bucket and its guard together to cover [`TIMER_SLACK`] of timer jitter beyond one
/// interval: `burst + 1` tokens, or `1 + ⌈TIMER_SLACK / interval⌉` if that is more.
///
/// Without that floor a bucket whose burst lasts less than the jitter (a leaky bucket above
/// 500 per second) would have to refuse every pair of waiters a late timer brings closer
/// together than their interval, and each refusal costs a timer tick more: measured at
/// 1000/s, 7 % of its rate lost.
fn guard_tolerance(interval: u64, tolerance: u64) -> u64 {
    let floor = TIMER_SLACK
        .div_ceil(interval.max(1))
        .saturating_add(1)
        .saturating_mul(interval);
    tolerance.saturating_add(interval).max(floor)
}

/// Once a server's limit is known, two admissions are never closer than this fraction of an
/// interval below one interval (see [`Shared::set_spaced`]).
const SPACED_MARGIN: f64 = 0.02;

/// Once a server's limit is known, the waiter that goes second after a pause keeps this much
/// more distance from the first (ns). The first request after a second of silence leaves
/// late: measured against nginx, 1.5 ms from the client's call to the wire where the others
/// took 0.1 ms, and 2–3 ms short of the interval at the server, which refused the second
/// request after one pause in four. Once per pause.
const AFTER_PAUSE: u64 = 3_000_000;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) clock: Clock,
    algorithm: Algorithm,
    /// Where window boundaries fall.
    align: Align,
    /// The token and leaky bucket's state, for the lock-free path.
    cell: Cell,
    /// The most tokens one request may take.
    capacity: AtomicU32,
    paused_until: AtomicU64,
    /// A late waiter is counted from when it goes, beyond a small slack (token and leaky
    /// bucket).
    spaced: AtomicBool,
    /// Requests in the line: the fast path stands aside while there are any.
    waiting: AtomicUsize,
    state: Mutex<State>,
    remote: Option<Arc<dyn Remote>>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// Lock-free admissions are possible: a GCRA engine deciding locally.
    lock_free: bool,
}

#[derive(Debug)]
struct State {
    quota: Quota,
    queue: Queue,
    /// Window engines: the latest instant committed; later commits go no earlier.
    tail: u64,
    /// GCRA engines: the `tat` of a bucket one token larger fed with the instants waiters were
    /// actually admitted at (not the instants they were counted at), from when the line
    /// formed. A waiter goes only when this bucket too has room, so catching up after a late
    /// timer never puts more than `burst + 1 + rate·t` into any interval of actual instants.
    /// The sliding log: the same at its rate, fed with every admission.
    guard: u64,
    /// The sliding log heeds its guard until this instant: a window's width after it last
    /// counted a late waiter back.
    credited_until: u64,
    /// GCRA engines: the instant the last waiter went (0: none yet).
    last_went: u64,
    /// A pause was set and no waiter went after its end yet (see [`AFTER_PAUSE`]).
    resumed: bool,
    engine: Kind,
}

/// The engine a bucket decides with.
#[derive(Debug)]
enum Kind {
    /// The token and leaky bucket, whose state is the [`Cell`].
    Gcra(Gcra),
    /// A window engine, with the ramp after a pause.
    Window(Box<dyn Model>),
}

/// An admission granted and not used yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permit {
    tokens: u32,
    /// The instant it counts as admitted.
    at: u64,
    /// GCRA: `tat` right after this admission; giving the permit back is exact before it.
    tat: u64,
}

impl Permit {
    /// The tokens this admission took.
    pub(crate) fn tokens(&self) -> u32 {
        self.tokens
    }

    /// `tokens` admitted by a remote limit: giving the permit back releases them there.
    pub(crate) fn remote(tokens: u32) -> Self {
        Permit {
            tokens,
            at: 0,
            tat: 0,
        }
    }
}

/// What [`Shared::reserve`] hands out.
#[derive(Debug)]
pub(crate) enum Reservation {
    Now(Permit),
    Later(Waiter),
}

fn capacity_of(quota: &Quota, algorithm: Algorithm) -> u32 {
    match algorithm {
        Algorithm::TokenBucket | Algorithm::LeakyBucket { .. } => quota.burst_size(),
        _ => quota.count(),
    }
}

fn engine_of(quota: Quota, algorithm: Algorithm, now: u64, align: Align) -> Kind {
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
        quota: Quota,
        algorithm: Algorithm,
        clock: Clock,
        align: Align,
        remote: Option<Arc<dyn Remote>>,
        observer: Option<Arc<dyn Observer>>,
    ) -> Self {
        Shared {
            algorithm,
            align,
            cell: Cell::new(&Gcra::new(quota, algorithm)),
            capacity: AtomicU32::new(capacity_of(&quota, algorithm)),
            paused_until: AtomicU64::new(0),
            spaced: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            state: Mutex::new(State {
                quota,
                queue: Queue::default(),
                tail: 0,
                guard: 0,
                credited_until: 0,
                last_went: 0,
                resumed: false,
                engine: engine_of(quota, algorithm, clock.now_ns(), align),
            }),
            clock,
            lock_free: algorithm.is_gcra() && remote.is_none(),
            remote,
            observer,
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
        Some(Permit {
            tokens,
            at: now,
            tat,
        })
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

    pub(crate) fn remote(&self) -> Option<&Arc<dyn Remote>> {
        self.remote.as_ref()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock; recover the data if one ever did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    pub(crate) fn quota(&self) -> Quota {
        self.lock().quota
    }

    /// Check a request's size against the capacity.
    #[inline]
    pub(crate) fn check(&self, tokens: u32) -> Result<(), ExceedsBurst> {
        let capacity = self.capacity.load(Ordering::Acquire);
        if tokens > capacity {
            return Err(ExceedsBurst {
                requested: tokens,
                burst: capacity,
            });
        }
        Ok(())
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
                .map(|tat| Permit {
                    tokens,
                    at: now,
                    tat,
                });
        }
        let mut st = self.lock();
        if !st.queue.is_empty() {
            let ahead = st.queue.tokens();
            let at = self.predict(&mut st, tokens, ahead, now);
            return Err(at.saturating_sub(now).max(1));
        }
        self.commit(&mut st, tokens, now, now)
            .map_err(|at| at - now)
    }

    /// How far back a late waiter may be counted as admitted. The GCRA engines and the
    /// sliding log, whose guard bounds what a credit can let through, allow twice a late
    /// timer: the timer's own lateness, and as much again when the guard made it wait for a
    /// later timer.
    fn slack(&self, st: &State) -> u64 {
        match &st.engine {
            Kind::Gcra(_) => st.quota.interval_ns().max(TIMER_SLACK).saturating_mul(2),
            Kind::Window(_) if self.credits() => {
                let interval = st.quota.period_ns() / u64::from(st.quota.count());
                interval.max(TIMER_SLACK).saturating_mul(2)
            }
            Kind::Window(_) => 0,
        }
    }

    /// Whether a window counts a late waiter back to its turn: the sliding log. The aligned
    /// windows' boundaries do not move.
    fn credits(&self) -> bool {
        self.algorithm == Algorithm::SlidingLog
    }

    /// The GCRA engines' guard, as the cost of a token and a tolerance: one token more than
    /// the bucket ([`guard_tolerance`]). Once a server's limit is known, the bucket itself
    /// at a rate 2 % higher instead, so that a waiter catching up on a late one never goes
    /// closer than 98 % of an interval after it (see [`set_spaced`](Self::set_spaced)).
    fn guard_params(&self) -> (u64, u64) {
        let (interval, tolerance) = self.cell.params();
        if self.spaced.load(Ordering::Acquire) {
            let faster = |v: u64| v - (v as f64 * SPACED_MARGIN) as u64;
            (faster(interval), faster(tolerance))
        } else {
            (interval, guard_tolerance(interval, tolerance))
        }
    }

    /// Where the bucket's `tat` must be raised to when the line empties, from the guard's
    /// `tat`: the fast path then admits no earlier than the guard would have.
    fn guard_takeover(&self, guard: u64) -> u64 {
        if self.spaced.load(Ordering::Acquire) {
            guard.saturating_add(self.guard_lag())
        } else {
            // Less the guard's extra token.
            guard.saturating_sub(self.cell.params().0)
        }
    }

    /// Once spaced: how far the guard's `tat` lies behind the engine's when both admit one
    /// token at the same instant (the guard's bucket is 2 % smaller beyond its first token).
    /// Exact to the nanosecond: a deadline a nanosecond late is a timer tick late.
    fn guard_lag(&self) -> u64 {
        let (interval, tolerance) = self.cell.params();
        let (unit, guard_tolerance) = self.guard_params();
        let beyond = tolerance.saturating_sub(interval);
        beyond.saturating_sub(guard_tolerance.saturating_sub(unit))
    }

    /// The guard that admits exactly when the engine at `tat` does (the inverse of
    /// [`guard_takeover`](Self::guard_takeover) once spaced): a guard put at `tat` itself
    /// would hold a full bucket back by 2 % of its burst.
    fn guard_behind(&self, tat: u64) -> u64 {
        if self.spaced.load(Ordering::Acquire) {
            tat.saturating_sub(self.guard_lag())
        } else {
            tat
        }
    }

    /// The earliest instant `≥ from` at which the engine takes `tokens`, after `ahead` queued
    /// tokens (GCRA; the windows only know the first in line, `ahead = 0`).
    fn predict(&self, st: &mut State, tokens: u32, ahead: u64, from: u64) -> u64 {
        if self.check(tokens).is_err() {
            // Never (the quota shrank below the request since it was checked).
            return u64::MAX;
        }
        let from = from.max(self.paused_until.load(Ordering::Acquire));
        let slack = self.slack(st);
        let window = match &mut st.engine {
            Kind::Gcra(g) => {
                let mut tat = self.cell.tat();
                if ahead > 0 {
                    // Those ahead go on schedule.
                    g.commit(&mut tat, ahead, from);
                }
                return g.earliest(&tat, u64::from(tokens), from);
            }
            Kind::Window(w) => w,
        };
        let from = from.max(st.tail);
        // Keep what a late waiter, credited back by the slack, still has to count.
        window.forget(from.saturating_sub(slack));
        window.earliest(u64::from(tokens), from)
    }

    /// Admit `tokens` at `now`, counted at the earliest instant `≥ from` they fit (`from ≤
    /// now`), or `Err(instant they fit)`. Under the lock.
    fn commit(&self, st: &mut State, tokens: u32, from: u64, now: u64) -> Result<Permit, u64> {
        if self.check(tokens).is_err() {
            return Err(u64::MAX);
        }
        let from = from.max(self.paused_until.load(Ordering::Acquire));
        if let Kind::Gcra(_) = st.engine {
            let (at, tat) = self.cell.admit_from(u64::from(tokens), from, now)?;
            return Ok(Permit { tokens, at, tat });
        }
        let at = self.predict(st, tokens, 0, from);
        if at > now {
            return Err(at);
        }
        // A window that credits late waiters (the sliding log) feeds its guard with every
        // admission, and heeds it for a window's width after a credit: until then those it
        // counts at `now` may follow the credited ones closely. Without a credit the log
        // alone keeps the bound, and decides exactly as a remote log does.
        if self.credits() {
            let interval = st.quota.interval_ns();
            let tolerance = guard_tolerance(
                interval,
                interval.saturating_mul(u64::from(st.quota.count())),
            );
            let cost = u64::from(tokens).saturating_mul(interval);
            let (guard, due) = schedule(st.guard, now, cost, tolerance);
            if due > now && now < st.credited_until {
                return Err(due);
            }
            if at < now {
                st.credited_until = now.saturating_add(st.quota.period_ns());
            }
            // Never more than full: an admission it did not heed leaves no debt behind.
            st.guard = guard.min(now.saturating_add(tolerance));
        }
        if let Kind::Window(w) = &mut st.engine {
            w.commit(u64::from(tokens), at);
        }
        st.tail = st.tail.max(at);
        Ok(Permit { tokens, at, tat: 0 })
    }

    /// [`commit`](Self::commit) for the first in line, which may be counted up to `slack`
    /// back. The GCRA engines also check the [`guard`](State::guard) at `now`: when it has
    /// no room, the answer is the later of the instant it has and the instant the engine has.
    fn commit_first(
        &self,
        st: &mut State,
        tokens: u32,
        from: u64,
        now: u64,
    ) -> Result<Permit, u64> {
        if let Kind::Window(_) = st.engine {
            return self.commit(st, tokens, from, now);
        }
        let (unit, tolerance) = self.guard_params();
        let cost = u64::from(tokens).saturating_mul(unit);
        let (guard, at) = schedule(st.guard, now, cost, tolerance);
        if at > now {
            return Err(at.max(self.predict(st, tokens, 0, from)));
        }
        let permit = self.commit(st, tokens, from, now)?;
        st.guard = guard;
        st.last_went = now;
        if st.resumed {
            let end = self.paused_until.load(Ordering::Acquire);
            // The first to go after the pause (not a waiter long after it).
            if now >= end {
                st.resumed = false;
                if self.spaced.load(Ordering::Acquire) && now - end <= self.slack(st) {
                    st.guard = st.guard.saturating_add(AFTER_PAUSE);
                }
            }
        }
        Ok(permit)
    }

    /// The first in line may have to learn its turn: its timer is armed too late (someone
    /// ahead left, or gave a permit back), or has fired already (it waits for this hand-over),
    /// or its request failed. Its waker, to call once the lock is released.
    fn hand_over(&self, st: &mut State, now: u64) -> Option<Waker> {
        let key = st.queue.head()?;
        let e = st.queue.get_mut(key);
        if e.failed || e.armed <= now {
            return e.waker.take();
        }
        let (tokens, armed) = (e.tokens, e.armed);
        let due = self.predict(st, tokens, 0, now);
        if due < armed {
            return st.queue.get_mut(key).waker.take();
        }
        None
    }

    /// Leave the line; the waker of the next in line if it must learn its turn. `counted_at`:
    /// the instant the leaver was admitted at, from which the next may be credited.
    fn leave(
        &self,
        st: &mut State,
        key: usize,
        now: u64,
        counted_at: Option<u64>,
    ) -> (Entry, Option<Waker>) {
        let was_first = st.queue.head() == Some(key);
        let e = st.queue.remove(key);
        self.waiting.store(st.queue.len(), Ordering::Release);
        if let (true, Kind::Gcra(_)) = (st.queue.is_empty(), &st.engine) {
            // The fast path takes over: it must see what the guard saw.
            let floor = self.guard_takeover(st.guard);
            self.cell.update(|tat| *tat = (*tat).max(floor));
        }
        let next = if was_first {
            if let Some(k) = st.queue.head() {
                st.queue.get_mut(k).first_since = counted_at.unwrap_or(now);
            }
            self.hand_over(st, now)
        } else {
            None
        };
        (e, next)
    }

    /// Admit now if possible, else join the line. `bounded`: refuse when a leaky bucket's
    /// line is full (the waiting layer applies backpressure instead).
    pub(crate) fn reserve(
        self: &Arc<Self>,
        tokens: u32,
        bounded: bool,
    ) -> Result<Reservation, QueueFull> {
        if let Some(p) = self.admit_now(tokens) {
            return Ok(Reservation::Now(p));
        }
        let mut st = self.lock();
        if let Some(max_queue) = self.algorithm.max_queue() {
            if bounded && st.queue.len() >= max_queue {
                return Err(QueueFull { max_queue });
            }
        }
        let now = self.clock.now_ns();
        let armed = if st.queue.is_empty() {
            match self.commit(&mut st, tokens, now, now) {
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
            let ahead = st.queue.tokens();
            self.predict(&mut st, tokens, ahead, now)
        } else {
            // A window waiter behind the first learns its turn at the hand-over.
            now
        };
        let mut entry = Entry::new(tokens, armed);
        entry.first_since = now;
        // The quota may have shrunk below the request since the caller checked it.
        entry.failed = self.check(tokens).is_err();
        let key = st.queue.push(entry);
        self.waiting.store(st.queue.len(), Ordering::Release);
        Ok(Reservation::Later(Waiter {
            shared: Arc::clone(self),
            key: Some(key),
            armed: None,
            since: now,
        }))
    }

    /// Return an unused permit; the first in line may go earlier.
    pub(crate) fn give_back(&self, permit: Permit) {
        if permit.tokens == 0 {
            return;
        }
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let (tokens, at) = (u64::from(permit.tokens), permit.at);
        match &mut st.engine {
            // Exact while the bucket has not refilled past the admission; after that its
            // tokens would have come back anyway.
            Kind::Gcra(g) if now < permit.tat => {
                self.cell.update(|tat| g.release(tat, tokens, at));
                let cost = tokens.saturating_mul(self.guard_params().0);
                st.guard = st.guard.saturating_sub(cost);
            }
            Kind::Gcra(_) => {}
            Kind::Window(w) => {
                w.release(tokens, at);
                if self.credits() {
                    let cost = u64::from(permit.tokens).saturating_mul(st.quota.interval_ns());
                    st.guard = st.guard.saturating_sub(cost);
                }
            }
        }
        let next = self.hand_over(&mut st, now);
        drop(st);
        next.into_iter().for_each(Waker::wake);
    }

    /// Hold every admission, waiters included, until `now + d`; restart as from an empty
    /// bucket whose first token is due when the cooldown ends. O(1) for any `d`.
    pub(crate) fn pause(&self, d: Duration) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Clamp far-off pauses so arithmetic stays in range (about 146 years).
        let end = now.saturating_add(d).min(u64::MAX / 4);
        // `0` is also "never paused": a pause at the clock's origin (a bucket paused the
        // instant it was made) empties it too.
        let before = self.paused_until.fetch_max(end, Ordering::AcqRel);
        if before < end || before == 0 {
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
            o.tokens(0);
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
        let capacity = capacity_of(&quota, self.algorithm);
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
        let mut wakers: Vec<Waker> = st
            .queue
            .entries_mut()
            .filter(|e| e.tokens > capacity && !e.failed)
            .filter_map(|e| {
                e.failed = true;
                e.waker.take()
            })
            .collect();
        wakers.extend(self.hand_over(&mut st, now));
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
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
        if let Some(remote) = &self.remote {
            remote.set_rate(quota);
        }
    }

    pub(crate) fn level(&self) -> (View, u64, usize, Quota) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let paused = self.paused_until.load(Ordering::Acquire);
        let queued = st.queue.len();
        let quota = st.quota;
        let not_before = now.max(st.tail).max(paused);
        let slack = self.slack(&st);
        let ahead = st.queue.tokens();
        let mut level = match &mut st.engine {
            Kind::Gcra(g) => {
                let mut tat = self.cell.tat();
                if ahead > 0 {
                    // Once those in line have gone.
                    g.commit(&mut tat, ahead, now);
                }
                g.view(&tat, now)
            }
            Kind::Window(w) => {
                w.forget(now.saturating_sub(slack));
                let view = w.view(now);
                View {
                    available: if not_before > now { 0 } else { view.available },
                    next_in: 0,
                    full_in: view.full_in.max(not_before - now),
                }
            }
        };
        if let Kind::Window(_) = st.engine {
            level.next_in = self.predict(&mut st, 1, 0, now) - now;
            if let (Kind::Window(w), true) = (&st.engine, level.next_in > 0) {
                if w.ramping(now) {
                    level.available = 0;
                }
            }
        }
        if queued > 0 {
            level.available = 0;
        }
        (level, paused.saturating_sub(now), queued, quota)
    }
}

/// A request in the line. Dropping it before its turn gives its place up.
#[derive(Debug)]
pub(crate) struct Waiter {
    shared: Arc<Shared>,
    key: Option<usize>,
    /// The instant the caller's timer is armed for.
    armed: Option<u64>,
    /// When it started waiting.
    since: u64,
}

impl Waiter {
    /// Wait for the turn, sleeping on `sleep` (re-armed as needed).
    pub(crate) fn poll(
        &mut self,
        mut sleep: std::pin::Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Permit, ExceedsBurst>> {
        let key = self.key.expect("waiter polled after completion");
        let shared = Arc::clone(&self.shared);
        loop {
            let (deadline, now) = {
                let mut st = shared.lock();
                let now = shared.clock.now_ns();
                let first = st.queue.head() == Some(key);
                let e = st.queue.get_mut(key);
                let (tokens, failed) = (e.tokens, e.failed);
                // A late timer is credited back to its turn, never before the instant the one
                // ahead was counted at (a hand-over passes the credit on): the engine counts
                // it at the earliest instant from there at which it fits. (Its timer may have
                // been armed later than that, for the guard.)
                let since = e.first_since;
                let turn = if failed {
                    Some(Err(ExceedsBurst {
                        requested: tokens,
                        burst: shared.capacity.load(Ordering::Acquire),
                    }))
                } else if first {
                    let from = now.saturating_sub(shared.slack(&st)).max(since);
                    match shared.commit_first(&mut st, tokens, from, now) {
                        Ok(permit) => Some(Ok(permit)),
                        Err(at) => {
                            st.queue.get_mut(key).armed = at;
                            None
                        }
                    }
                } else {
                    None
                };
                if let Some(result) = turn {
                    let counted_at = result.as_ref().ok().map(|p| p.at);
                    let (_, next) = shared.leave(&mut st, key, now, counted_at);
                    self.key = None;
                    drop(st);
                    next.into_iter().for_each(Waker::wake);
                    if result.is_ok() {
                        shared.observe_admitted(tokens, now - self.since);
                    }
                    return Poll::Ready(result);
                }
                let e = st.queue.get_mut(key);
                match &e.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => e.waker = Some(cx.waker().clone()),
                }
                (e.armed, now)
            };
            if deadline <= now {
                // Due, but someone ahead has not gone yet: the hand-over wakes us.
                return Poll::Pending;
            }
            if self.armed != Some(deadline) {
                self.armed = Some(deadline);
                sleep.as_mut().reset(shared.clock.instant_at(deadline, now));
            }
            match sleep.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // The timer fired before the clock reached the deadline (a coarser timer):
                // re-arm a tick later rather than spin.
                Poll::Ready(()) if deadline > shared.clock.now_ns() => {
                    let later = shared.clock.instant_at(deadline, now) + Duration::from_millis(1);
                    sleep.as_mut().reset(later);
                }
                Poll::Ready(()) => {}
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        let mut st = self.shared.lock();
        let now = self.shared.clock.now_ns();
        let (_, next) = self.shared.leave(&mut st, key, now, None);
        drop(st);
        next.into_iter().for_each(Waker::wake);
    }
}
