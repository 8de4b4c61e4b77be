//! The state every clone of a [`Bucket`](super::Bucket) shares: an engine (GCRA or a window
//! model) and the queue of reservations waiting for their turn.
//!
//! # Waiting
//! A request that has to wait *reserves* its admission instant at once (the engine commits it),
//! joins the queue with that instant and sleeps on one timer until then. So:
//! - **fair**: instants are handed out in arrival order;
//! - **quiet**: a waiter wakes once, when its turn comes, and nobody polls;
//! - **drift-free**: instants come from the schedule, not from when a timer fired;
//! - **cancel-safe**: a waiter dropped before its turn is taken out of the schedule, and
//!   everyone behind it is rescheduled as if it had never come (and woken to re-arm).
//!
//! Pauses and quota changes reschedule the queue the same way: release every queued
//! reservation, change the engine, reserve them again in arrival order.
//!
//! # Locking
//! The token and leaky buckets admit on the fast path with one clock read and one
//! compare-and-swap, without the lock; they cannot overtake a queued waiter, because while
//! anyone waits, `tat` lies beyond `now + B·T`. Every other change happens under the lock, so
//! the queue and the schedule move together. Window engines decide under the lock.

use std::future::Future as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::clock::Clock;
use super::gcra::{Gcra, Level};
use super::queue::{Entry, Queue};
use super::window::{Fixed, Log, Sliding, Window};
use super::{Algorithm, ExceedsBurst, QueueFull, Remote};
use crate::observe::Observer;
use crate::Quota;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) clock: Clock,
    algorithm: Algorithm,
    gcra: Gcra,
    /// The most tokens one request may take.
    capacity: AtomicU32,
    paused_until: AtomicU64,
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
    /// Arrival order of queued reservations.
    seq: u64,
    /// Window engines: the latest instant committed, so later arrivals go no earlier.
    tail: u64,
    window: Option<Box<dyn Window>>,
}

/// An admission granted and not used yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permit {
    tokens: u32,
    /// The admission instant.
    at: u64,
    /// GCRA: `tat` right after this admission; giving the permit back is exact before it.
    tat: u64,
}

impl Permit {
    /// An admission granted elsewhere (a remote limit): nothing to give back.
    pub(crate) fn remote() -> Self {
        Permit {
            tokens: 0,
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

fn engine_params(quota: &Quota, algorithm: Algorithm) -> (u64, u64) {
    let interval = quota.interval_ns();
    match algorithm {
        Algorithm::LeakyBucket { .. } => (interval, interval),
        _ => (interval, interval * u64::from(quota.burst_size())),
    }
}

fn capacity_of(quota: &Quota, algorithm: Algorithm) -> u32 {
    match algorithm {
        Algorithm::TokenBucket | Algorithm::LeakyBucket { .. } => quota.burst_size(),
        _ => quota.count(),
    }
}

fn window_of(quota: &Quota, algorithm: Algorithm, now: u64) -> Option<Box<dyn Window>> {
    let (limit, width) = (u64::from(quota.count()), quota.period_ns());
    match algorithm {
        Algorithm::FixedWindow => Some(Box::new(Fixed::new(limit, width, now))),
        Algorithm::SlidingWindow => Some(Box::new(Sliding::new(limit, width, now))),
        Algorithm::SlidingLog => Some(Box::new(Log::new(limit, width))),
        _ => None,
    }
}

impl Shared {
    pub(crate) fn new(
        quota: Quota,
        algorithm: Algorithm,
        clock: Clock,
        remote: Option<Arc<dyn Remote>>,
        observer: Option<Arc<dyn Observer>>,
    ) -> Self {
        let (interval, tolerance) = engine_params(&quota, algorithm);
        Shared {
            algorithm,
            gcra: Gcra::new(interval, tolerance),
            capacity: AtomicU32::new(capacity_of(&quota, algorithm)),
            paused_until: AtomicU64::new(0),
            state: Mutex::new(State {
                quota,
                queue: Queue::default(),
                seq: 0,
                tail: 0,
                window: window_of(&quota, algorithm, clock.now_ns()),
            }),
            clock,
            lock_free: algorithm.is_gcra() && remote.is_none(),
            remote,
            observer,
        }
    }

    /// The hot path: admit `tokens` now with one clock read and one compare-and-swap, or
    /// `None` (not now, or not a lock-free engine).
    #[inline]
    pub(crate) fn admit_now(&self, tokens: u32) -> Option<Permit> {
        if !self.lock_free {
            return None;
        }
        let now = self.clock.now_ns();
        let tat = self.gcra.try_admit(u64::from(tokens), now).ok()?;
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

    /// Admit now or say how many nanoseconds until `tokens` fit. Never queues.
    #[inline]
    pub(crate) fn try_admit(&self, tokens: u32) -> Result<Permit, u64> {
        let now = self.clock.now_ns();
        if self.algorithm.is_gcra() {
            return self
                .gcra
                .try_admit(u64::from(tokens), now)
                .map(|tat| Permit {
                    tokens,
                    at: now,
                    tat,
                });
        }
        let mut st = self.lock();
        let not_before = self.not_before(&st, now);
        let window = st.window.as_mut().expect("window engine");
        window.prune(now);
        let at = window.earliest(u64::from(tokens), not_before);
        if at > now {
            return Err(at - now);
        }
        window.commit(u64::from(tokens), now);
        st.tail = st.tail.max(now);
        Ok(Permit {
            tokens,
            at: now,
            tat: 0,
        })
    }

    fn not_before(&self, st: &State, now: u64) -> u64 {
        now.max(st.tail)
            .max(self.paused_until.load(Ordering::Acquire))
    }

    /// Commit `tokens` at their earliest instant after everything committed so far: the
    /// instant and (GCRA) the `tat` after it. Under the lock.
    fn commit(&self, st: &mut State, tokens: u32, now: u64) -> (u64, u64) {
        let not_before = self.not_before(st, now);
        match st.window.as_mut() {
            None => self.gcra.reserve(u64::from(tokens), now),
            Some(window) => {
                window.prune(now);
                let at = window.earliest(u64::from(tokens), not_before);
                window.commit(u64::from(tokens), at);
                st.tail = st.tail.max(at);
                (at, 0)
            }
        }
    }

    /// Admit now if possible, else reserve the earliest instant after everyone queued.
    /// `bounded`: refuse when a leaky bucket's queue is full (the waiting layer applies
    /// backpressure instead).
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
        let (at, tat) = self.commit(&mut st, tokens, now);
        if at <= now {
            drop(st);
            self.observe_admitted(tokens, 0);
            return Ok(Reservation::Now(Permit { tokens, at, tat }));
        }
        st.seq += 1;
        let seq = st.seq;
        let key = st.queue.insert(Entry {
            tokens,
            deadline: at,
            seq,
            waker: None,
            failed: false,
        });
        Ok(Reservation::Later(Waiter {
            shared: Arc::clone(self),
            key: Some(key),
            armed: None,
            since: now,
        }))
    }

    /// Return an unused permit; those queued move forward.
    pub(crate) fn give_back(&self, permit: Permit) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        self.undo(&mut st, permit, 0, now);
    }

    /// Take an unused admission out of the schedule and reschedule everyone queued after
    /// `after_seq`. For GCRA this is exact while the bucket has not refilled past the
    /// admission; after that its tokens would have come back anyway and nothing changes.
    fn undo(&self, st: &mut State, permit: Permit, after_seq: u64, now: u64) {
        if st.window.is_none() && now >= permit.tat {
            return;
        }
        self.reschedule(st, after_seq, now, |shared, st| match st.window.as_mut() {
            None => shared.gcra.release(u64::from(permit.tokens)),
            Some(w) => w.release(u64::from(permit.tokens), permit.at),
        });
    }

    /// Release every reservation queued after `after_seq`, apply `change`, then reserve them
    /// again in arrival order, waking those whose instant moved.
    fn reschedule(
        &self,
        st: &mut State,
        after_seq: u64,
        now: u64,
        change: impl FnOnce(&Self, &mut State),
    ) {
        let mut later: Vec<(u64, usize)> = st
            .queue
            .iter()
            .filter(|(_, e)| e.seq > after_seq && !e.failed)
            .map(|(k, e)| (e.seq, k))
            .collect();
        later.sort_unstable();
        for &(_, key) in later.iter().rev() {
            let e = st.queue.get_mut(key);
            let (tokens, at) = (u64::from(e.tokens), e.deadline);
            match st.window.as_mut() {
                None => self.gcra.release(tokens),
                Some(w) => w.release(tokens, at),
            }
        }
        st.tail = st
            .queue
            .iter()
            .filter(|(_, e)| e.seq <= after_seq && !e.failed)
            .map(|(_, e)| e.deadline)
            .max()
            .unwrap_or(0);
        change(self, st);
        let capacity = self.capacity.load(Ordering::Acquire);
        let mut wakers = Vec::new();
        for (_, key) in later {
            let tokens = st.queue.get_mut(key).tokens;
            let moved = if tokens > capacity {
                st.queue.get_mut(key).failed = true;
                true
            } else {
                let (at, _) = self.commit(st, tokens, now);
                let e = st.queue.get_mut(key);
                std::mem::replace(&mut e.deadline, at) != at
            };
            if moved {
                wakers.extend(st.queue.get_mut(key).waker.take());
            }
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Hold every admission, queued ones included, until `now + d`; restart as from an empty
    /// bucket whose first token is due when the cooldown ends.
    pub(crate) fn pause(&self, d: Duration) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Clamp far-off pauses so arithmetic stays in range (about 146 years).
        let end = now.saturating_add(d).min(u64::MAX / 4);
        if let Some(o) = &self.observer {
            o.paused(Duration::from_nanos(d));
            o.tokens(0);
        }
        if self.paused_until.fetch_max(end, Ordering::AcqRel) >= end {
            return;
        }
        self.reschedule(&mut st, 0, now, |shared, st| match st.window.as_mut() {
            None => shared.gcra.restart_at(end),
            Some(w) => w.restart_at(end),
        });
    }

    /// Change the quota of the live bucket, never raising the tokens available now.
    pub(crate) fn set_quota(&self, quota: Quota) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        st.quota = quota;
        let algorithm = self.algorithm;
        self.reschedule(&mut st, 0, now, |shared, st| {
            shared
                .capacity
                .store(capacity_of(&quota, algorithm), Ordering::Release);
            match st.window.as_mut() {
                None => {
                    let (interval, tolerance) = engine_params(&quota, algorithm);
                    shared.gcra.set_params(interval, tolerance, now);
                    // A pause in force still holds, at the new interval.
                    let until = shared.paused_until.load(Ordering::Acquire);
                    if until > now {
                        shared.gcra.restart_at(until);
                    }
                }
                Some(w) => w.set_limit(u64::from(quota.count()), quota.period_ns(), now),
            }
        });
    }

    /// The hook of a rate control ([`crate::adaptive`]): enforce `quota` from now on, as
    /// [`set_quota`](Self::set_quota) does.
    pub(crate) fn set_rate(&self, quota: Quota) {
        self.set_quota(quota);
        if let Some(remote) = &self.remote {
            remote.set_rate(quota);
        }
    }

    pub(crate) fn level(&self) -> (Level, u64, usize, Quota) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let not_before = self.not_before(&st, now);
        let paused = self.paused_until.load(Ordering::Acquire);
        let queued = st.queue.len();
        let quota = st.quota;
        let level = match st.window.as_mut() {
            None => self.gcra.level(now),
            Some(w) => {
                w.prune(now);
                Level {
                    available: if not_before > now {
                        0
                    } else {
                        w.available(now)
                    },
                    next_in: w.earliest(1, not_before) - now,
                    full_in: w.clear_in(now).max(not_before - now),
                }
            }
        };
        (level, paused.saturating_sub(now), queued, quota)
    }
}

/// A queued reservation. Dropping it before its turn gives its place back.
#[derive(Debug)]
pub(crate) struct Waiter {
    shared: Arc<Shared>,
    key: Option<usize>,
    /// The deadline the caller's timer is armed for.
    armed: Option<u64>,
    /// When it started waiting.
    since: u64,
}

impl Waiter {
    /// Wait for the reserved instant, sleeping on `sleep` (re-armed as needed).
    pub(crate) fn poll(
        &mut self,
        mut sleep: std::pin::Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Permit, ExceedsBurst>> {
        let key = self.key.expect("waiter polled after completion");
        loop {
            let (deadline, now) = {
                let mut st = self.shared.lock();
                let now = self.shared.clock.now_ns();
                let entry = st.queue.get_mut(key);
                if entry.failed || entry.deadline <= now {
                    let e = st.queue.remove(key);
                    self.key = None;
                    if e.failed {
                        return Poll::Ready(Err(ExceedsBurst {
                            requested: e.tokens,
                            burst: self.shared.capacity.load(Ordering::Acquire),
                        }));
                    }
                    let tat = if st.window.is_some() {
                        0
                    } else {
                        e.deadline + self.shared.gcra.tolerance()
                    };
                    drop(st);
                    self.shared.observe_admitted(e.tokens, now - self.since);
                    return Poll::Ready(Ok(Permit {
                        tokens: e.tokens,
                        at: e.deadline,
                        tat,
                    }));
                }
                match &entry.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => entry.waker = Some(cx.waker().clone()),
                }
                (entry.deadline, now)
            };
            if self.armed != Some(deadline) {
                self.armed = Some(deadline);
                sleep
                    .as_mut()
                    .reset(self.shared.clock.instant_at(deadline, now));
            }
            match sleep.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // The timer fired before the clock reached the deadline (a coarser timer):
                // re-arm a tick later rather than spin.
                Poll::Ready(()) if deadline > now => {
                    let later =
                        self.shared.clock.instant_at(deadline, now) + Duration::from_millis(1);
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
        let e = st.queue.remove(key);
        if e.failed {
            return;
        }
        let tat = e.deadline + self.shared.gcra.tolerance();
        let permit = Permit {
            tokens: e.tokens,
            at: e.deadline,
            tat,
        };
        self.shared.undo(&mut st, permit, e.seq, now);
    }
}
