//! The state every clone of a [`Bucket`](super::Bucket) shares: a GCRA schedule and its
//! wait queue.
//!
//! # The schedule
//! The bucket keeps one number, `tat` ("theoretical arrival time"): the instant at which the
//! bucket would be full again. With `T` the emission interval and `B` the burst, a request of
//! `n` tokens at `now` is admitted at `max(tat, now) + n·T − B·T` and moves `tat` to
//! `max(tat, now) + n·T`. Admitting at that instant — or later — keeps every window of length
//! `t` within `B + t/T` tokens.
//!
//! # Waiting
//! A request that has to wait *reserves* its admission instant at once (it moves `tat`), joins
//! the queue with that instant and sleeps on one timer until then. So:
//! - **fair**: instants are handed out in arrival order;
//! - **quiet**: a waiter wakes once, when its turn comes, and nobody polls;
//! - **drift-free**: instants come from the schedule, not from when a timer fired;
//! - **cancel-safe**: a waiter dropped before its turn takes its cost out of `tat` and moves
//!   everyone behind it forward by that cost (waking them to re-arm their timers).
//!
//! The fast path (admit now or refuse) is one clock read and one compare-and-swap; it never
//! takes the queue's lock. It cannot overtake a queued waiter: while anyone waits, `tat` lies
//! beyond `now + B·T`, so nothing fits without a reservation of its own.
//!
//! Every change of `tat` that is not a fast-path admission (reserve, cancel, give-back, pause)
//! happens under the queue's lock, so the queue and `tat` move together.

use std::future::Future as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::clock::Clock;
use super::queue::{Entry, Queue};
use crate::Quota;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) quota: Quota,
    /// Emission interval `T`, nanoseconds.
    pub(crate) interval: u64,
    /// `B·T`: how far `tat` may lie ahead of `now` for a request to still fit.
    pub(crate) tolerance: u64,
    pub(crate) clock: Clock,
    tat: AtomicU64,
    paused_until: AtomicU64,
    queue: Mutex<Queue>,
}

/// An admission that has been granted but not used yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permit {
    /// Cost in bucket nanoseconds.
    cost: u64,
    /// `tat` right after this admission: before that instant, giving the permit back is exact.
    tat: u64,
}

/// What [`Shared::reserve`] hands out.
#[derive(Debug)]
pub(crate) enum Reservation {
    Now(Permit),
    Later(Waiter),
}

/// Outcome of a decision made without waiting.
pub(crate) enum Decision {
    Admit(Permit),
    /// Nanoseconds until the request would fit.
    Wait(u64),
}

impl Shared {
    pub(crate) fn new(quota: Quota) -> Self {
        let interval = quota.interval_ns();
        Shared {
            quota,
            interval,
            tolerance: interval * u64::from(quota.burst_size()),
            clock: Clock::new(),
            tat: AtomicU64::new(0),
            paused_until: AtomicU64::new(0),
            queue: Mutex::new(Queue::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // No code path panics while holding the lock; recover the data if one ever did.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admit `cost` (bucket nanoseconds, ≤ tolerance) now, or say how long until it fits.
    #[inline]
    pub(crate) fn try_admit(&self, cost: u64, now: u64) -> Decision {
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let new = tat.max(now) + cost;
            let admit_at = new.saturating_sub(self.tolerance);
            if admit_at > now {
                return Decision::Wait(admit_at - now);
            }
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Decision::Admit(Permit { cost, tat: new }),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Admit now if possible, else reserve the earliest instant after everyone queued.
    pub(crate) fn reserve(self: &Arc<Self>, cost: u64) -> Reservation {
        let now = self.clock.now_ns();
        if let Decision::Admit(p) = self.try_admit(cost, now) {
            return Reservation::Now(p);
        }
        let mut queue = self.lock();
        let now = self.clock.now_ns();
        let mut tat = self.tat.load(Ordering::Acquire);
        let (new, admit_at) = loop {
            let new = tat.max(now) + cost;
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break (new, new.saturating_sub(self.tolerance)),
                Err(actual) => tat = actual,
            }
        };
        if admit_at <= now {
            // Refilled between the fast path and the lock.
            return Reservation::Now(Permit { cost, tat: new });
        }
        let key = queue.insert(Entry {
            cost,
            deadline: admit_at,
            waker: None,
        });
        Reservation::Later(Waiter {
            shared: Arc::clone(self),
            key: Some(key),
            armed: None,
        })
    }

    /// Return an unused permit. Exact while the bucket has not refilled past it; after that
    /// its tokens would have been back anyway and nothing is returned.
    pub(crate) fn give_back(&self, permit: Permit) {
        let mut queue = self.lock();
        let now = self.clock.now_ns();
        if now >= permit.tat {
            return;
        }
        self.sub_tat(permit.cost);
        let wakers = shift_earlier(&mut queue, now, permit.cost);
        drop(queue);
        wakers.into_iter().for_each(Waker::wake);
    }

    fn sub_tat(&self, cost: u64) {
        // Under the lock; only fast-path admissions race, and `fetch_update` keeps them.
        let _ = self
            .tat
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_sub(cost))
            });
    }

    /// Hold every admission, queued ones included, until `now + d`; restart from an empty
    /// bucket whose first token is due when the cooldown ends.
    pub(crate) fn pause(&self, d: Duration) {
        let mut queue = self.lock();
        let now = self.clock.now_ns();
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Clamp far-off pauses so arithmetic stays in range (about 146 years).
        let end = now.saturating_add(d).min(u64::MAX / 4);
        self.paused_until.fetch_max(end, Ordering::AcqRel);
        // The first queued waiter may go at `end + (its cost − T)`; everyone behind keeps
        // their spacing.
        let shift = queue.first().map_or(0, |first| {
            let earliest = end + first.cost - self.interval;
            earliest.saturating_sub(first.deadline)
        });
        let floor = end + self.tolerance - self.interval;
        let _ = self
            .tat
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(shift).max(floor))
            });
        let mut wakers = Vec::new();
        if shift > 0 {
            for e in queue.iter_mut() {
                e.deadline += shift;
                wakers.extend(e.waker.take());
            }
        }
        drop(queue);
        wakers.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn tat(&self) -> u64 {
        self.tat.load(Ordering::Acquire)
    }

    pub(crate) fn paused_until(&self) -> u64 {
        self.paused_until.load(Ordering::Acquire)
    }

    pub(crate) fn queued(&self) -> usize {
        self.lock().len()
    }
}

/// Move every waiter due after `after` forward by `cost`; returns the wakers to call once the
/// lock is released.
fn shift_earlier(queue: &mut Queue, after: u64, cost: u64) -> Vec<Waker> {
    let mut wakers = Vec::new();
    for e in queue.iter_mut().filter(|e| e.deadline > after) {
        e.deadline -= cost;
        wakers.extend(e.waker.take());
    }
    wakers
}

/// A queued reservation. Dropping it before its turn gives its place back.
#[derive(Debug)]
pub(crate) struct Waiter {
    shared: Arc<Shared>,
    key: Option<usize>,
    /// The deadline the caller's timer is armed for.
    armed: Option<u64>,
}

impl Waiter {
    /// Wait for the reserved instant, sleeping on `sleep` (re-armed as needed).
    pub(crate) fn poll(
        &mut self,
        mut sleep: std::pin::Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Permit> {
        let key = self.key.expect("waiter polled after completion");
        loop {
            let (deadline, now) = {
                let mut queue = self.shared.lock();
                let now = self.shared.clock.now_ns();
                let entry = queue.get_mut(key);
                if entry.deadline <= now {
                    let e = queue.remove(key);
                    self.key = None;
                    return Poll::Ready(Permit {
                        cost: e.cost,
                        tat: e.deadline + self.shared.tolerance,
                    });
                }
                match &entry.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => entry.waker = Some(cx.waker().clone()),
                }
                (entry.deadline, now)
            };
            if self.armed != Some(deadline) {
                self.armed = Some(deadline);
                sleep.as_mut().reset(self.shared.clock.instant_at(deadline));
            }
            match sleep.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // The timer fired before the clock reached the deadline (a coarser timer):
                // re-arm a tick later rather than spin.
                Poll::Ready(()) if deadline > now => {
                    let later = self.shared.clock.instant_at(deadline) + Duration::from_millis(1);
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
        let mut queue = self.shared.lock();
        let now = self.shared.clock.now_ns();
        let e = queue.remove(key);
        if e.deadline <= now {
            // Its turn came and went unused; the tokens flowed at the scheduled time.
            return;
        }
        self.shared.sub_tat(e.cost);
        let wakers = shift_earlier(&mut queue, e.deadline, e.cost);
        drop(queue);
        wakers.into_iter().for_each(Waker::wake);
    }
}
