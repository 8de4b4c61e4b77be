//! The token and leaky bucket's lock-free cell: the engine's `tat` in one atomic. Admitting
//! is one load and one compare-and-swap, with the engine's arithmetic
//! ([`schedule`](crate::engine::gcra::schedule)).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::gcra::{schedule, Gcra};

#[derive(Debug)]
pub(crate) struct Cell {
    /// On a cache line of its own: every admission writes it, while the parameters and the
    /// rest of the bucket are read on every decision and should stay cached on every core.
    tat: Padded,
    interval: AtomicU64,
    tolerance: AtomicU64,
}

/// An atomic alone on its cache line (128 bytes: adjacent-line prefetching pairs lines).
#[derive(Debug)]
#[repr(align(128))]
struct Padded(AtomicU64);

impl Cell {
    pub(crate) fn new(engine: &Gcra) -> Self {
        Cell {
            tat: Padded(AtomicU64::new(0)),
            interval: AtomicU64::new(engine.interval),
            tolerance: AtomicU64::new(engine.tolerance),
        }
    }

    /// `(interval, tolerance)`.
    #[inline]
    pub(crate) fn params(&self) -> (u64, u64) {
        (
            self.interval.load(Ordering::Acquire),
            self.tolerance.load(Ordering::Acquire),
        )
    }

    /// Admit `tokens` now: `Ok(tat after)`, or `Err(nanoseconds until they fit)`.
    #[inline]
    pub(crate) fn try_admit(&self, tokens: u64, now: u64) -> Result<u64, u64> {
        self.admit_from(tokens, now, now)
            .map(|(_, tat)| tat)
            .map_err(|at| at - now)
    }

    /// Admit `tokens` at `now`, counting them as taken at the earliest instant not before
    /// `from` (`from ≤ now`) at which they fit: `Ok((that instant, tat after))`, or
    /// `Err(instant at which they fit)` when that is after `now`.
    #[inline]
    pub(crate) fn admit_from(&self, tokens: u64, from: u64, now: u64) -> Result<(u64, u64), u64> {
        let mut tat = self.tat.0.load(Ordering::Acquire);
        loop {
            let (interval, tolerance) = self.params();
            let (new, at) = schedule(tat, from, tokens.saturating_mul(interval), tolerance);
            if at > now {
                return Err(at);
            }
            match self
                .tat
                .0
                .compare_exchange_weak(tat, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok((at.max(from), new)),
                Err(actual) => tat = actual,
            }
        }
    }

    /// The instant at which the bucket is full again.
    pub(crate) fn tat(&self) -> u64 {
        self.tat.0.load(Ordering::Acquire)
    }

    /// Change `tat` with `f`, in one atomic step (admissions of the fast path may race it).
    /// Under the lock.
    pub(crate) fn update(&self, f: impl Fn(&mut u64)) {
        let _ = self
            .tat
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |mut t| {
                f(&mut t);
                Some(t)
            });
    }

    /// Decide with `engine` from now on, at `tat`. Under the lock.
    pub(crate) fn set(&self, engine: &Gcra, tat: u64) {
        self.interval.store(engine.interval, Ordering::Release);
        self.tolerance.store(engine.tolerance, Ordering::Release);
        self.tat.0.store(tat, Ordering::Release);
    }
}
