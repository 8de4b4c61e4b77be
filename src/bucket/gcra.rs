//! The token bucket as GCRA: one atomic instant, `tat`, at which the bucket is full again.
//!
//! With `T` the emission interval and `B·T` the tolerance, `n` tokens at `now` are admitted at
//! `max(tat, now) + n·T − B·T` and move `tat` to `max(tat, now) + n·T`. Admitting at that instant
//! or later keeps every window of length `t` within `B + t/T` tokens. The leaky bucket is the
//! same schedule with a tolerance of one interval (see [`schedule`] for its weighted costs).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub(crate) struct Gcra {
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

impl std::ops::Deref for Padded {
    type Target = AtomicU64;

    fn deref(&self) -> &AtomicU64 {
        &self.0
    }
}

/// Admitting `cost` (`n·T`) at `now` with tolerance `τ`: `(tat after, admission instant)`.
///
/// `tat` moves to `max(tat, now) + n·T`, and the request goes `max(τ, n·T)` before that. For a
/// token bucket (`τ = B·T ≥ n·T`) this is plain GCRA. For the leaky bucket (`τ = T`) it is
/// `max(tat, now)`: a request goes once the previous one has drained, and its `n` tokens then
/// drain over the next `n` intervals, so an idle leaky bucket takes a request of any allowed
/// cost at once and the next admission comes `n·T` later.
#[inline]
pub(crate) fn schedule(tat: u64, now: u64, cost: u64, tolerance: u64) -> (u64, u64) {
    let new = tat.max(now).saturating_add(cost);
    (new, new.saturating_sub(tolerance.max(cost)))
}

/// Bucket state for a snapshot.
pub(crate) struct Level {
    pub(crate) available: u64,
    pub(crate) next_in: u64,
    pub(crate) full_in: u64,
}

impl Gcra {
    pub(crate) fn new(interval: u64, tolerance: u64) -> Self {
        Gcra {
            tat: Padded(AtomicU64::new(0)),
            interval: AtomicU64::new(interval),
            tolerance: AtomicU64::new(tolerance),
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
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let (interval, tolerance) = self.params();
            let (new, at) = schedule(tat, from, tokens.saturating_mul(interval), tolerance);
            if at > now {
                return Err(at);
            }
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok((at.max(from), new)),
                Err(actual) => tat = actual,
            }
        }
    }

    /// The instant `tokens` would fit, not before `from`, after `ahead` tokens queued before
    /// them have gone on schedule.
    pub(crate) fn earliest(&self, tokens: u64, ahead: u64, from: u64) -> u64 {
        let (interval, tolerance) = self.params();
        let tat = self
            .tat
            .load(Ordering::Acquire)
            .max(from)
            .saturating_add(ahead.saturating_mul(interval));
        schedule(tat, from, tokens.saturating_mul(interval), tolerance)
            .1
            .max(from)
    }

    /// The instant at which the bucket is full again.
    pub(crate) fn tat(&self) -> u64 {
        self.tat.load(Ordering::Acquire)
    }

    /// Hold at least as much as a bucket whose `tat` is `floor`. Under the lock.
    pub(crate) fn raise_tat(&self, floor: u64) {
        self.tat.fetch_max(floor, Ordering::AcqRel);
    }

    /// Undo an admission that sits in the chain after every admission since. Under the lock.
    pub(crate) fn release(&self, tokens: u64) {
        let interval = self.interval.load(Ordering::Acquire);
        let _ = self
            .tat
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_sub(tokens.saturating_mul(interval)))
            });
    }

    /// Empty at `end`, first token due then. Under the lock.
    pub(crate) fn restart_at(&self, end: u64) {
        let (interval, tolerance) = self.params();
        let floor = end.saturating_add(tolerance - interval.min(tolerance));
        self.tat.fetch_max(floor, Ordering::AcqRel);
    }

    /// Change interval and tolerance, keeping the tokens available now exactly, fraction
    /// included (a debt after a pause too), capped at the new burst. Under the lock.
    ///
    /// The bucket holds `(τ − ahead) / T` tokens, `ahead` being how far `tat` lies beyond
    /// `now`; the same number under the new parameters puts `tat` at
    /// `now + τ' − (τ − ahead) · T' / T`, rounded so that it never holds more.
    pub(crate) fn set_params(&self, interval: u64, tolerance: u64, now: u64) {
        let (old_interval, old_tolerance) = self.params();
        let ahead = self.tat.load(Ordering::Acquire).saturating_sub(now);
        // Tokens held, in nanoseconds of the new interval (negative: a debt).
        let held = (i128::from(old_tolerance) - i128::from(ahead)) * i128::from(interval);
        let held = held
            .div_euclid(i128::from(old_interval))
            .min(i128::from(tolerance));
        let ahead = u64::try_from(i128::from(tolerance) - held).unwrap_or(u64::MAX);
        self.interval.store(interval, Ordering::Release);
        self.tolerance.store(tolerance, Ordering::Release);
        self.tat.store(now.saturating_add(ahead), Ordering::Release);
    }

    /// The level at `now` once `ahead` queued tokens have been taken.
    pub(crate) fn level(&self, now: u64, ahead: u64) -> Level {
        let (interval, tolerance) = self.params();
        let tat = self.tat.load(Ordering::Acquire);
        let ahead = if ahead == 0 {
            tat.saturating_sub(now)
        } else {
            tat.max(now)
                .saturating_add(ahead.saturating_mul(interval))
                .saturating_sub(now)
        };
        let burst = tolerance / interval;
        Level {
            available: burst.saturating_sub(ahead.div_ceil(interval)),
            next_in: ahead.saturating_add(interval).saturating_sub(tolerance),
            full_in: ahead,
        }
    }
}
