//! The GCRA decision for one key, as arithmetic on one number.
//!
//! A key's state is `tat`, the instant (nanoseconds on the store's clock) at which its bucket
//! is full again. With `T` the emission interval and `B` the burst, `n` tokens at `now` are
//! admitted at `max(tat, now) + n·T − B·T`, and `tat` moves to `max(tat, now) + n·T`. A
//! `tat` at or before `now` is a full bucket: the same as no state at all, which is what lets
//! the store forget such keys without losing anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Quota;

/// The quota as the arithmetic needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    /// Emission interval `T`, nanoseconds.
    pub(crate) interval: u64,
    /// `B·T`: how far `tat` may lie ahead of the admission instant.
    pub(crate) tolerance: u64,
    burst: u32,
}

/// The largest wait a reservation may be granted: keeps `tat` arithmetic far from overflow.
const MAX_AHEAD: u64 = u64::MAX / 8;

impl Rate {
    pub(crate) fn new(quota: Quota) -> Self {
        let interval = quota.interval_ns();
        Rate {
            interval,
            tolerance: interval * u64::from(quota.burst_size()),
            burst: quota.burst_size(),
        }
    }

    /// Bucket nanoseconds for `n` tokens, or `None` when `n` exceeds the burst.
    #[inline]
    pub(crate) fn cost(&self, n: u32) -> Option<u64> {
        (n <= self.burst).then(|| u64::from(n) * self.interval)
    }

    /// Admit `cost` at `now`, or (when `max_wait > 0`) reserve it for an instant at most
    /// `max_wait` later: the new `tat`. Otherwise the wait until it would fit, in nanoseconds.
    #[inline]
    pub(crate) fn admit(&self, tat: u64, now: u64, cost: u64, max_wait: u64) -> Result<u64, u64> {
        let new = tat.max(now) + cost;
        let admit_at = new.saturating_sub(self.tolerance);
        if admit_at <= now.saturating_add(max_wait.min(MAX_AHEAD)) {
            Ok(new)
        } else {
            Err(admit_at - now)
        }
    }

    /// When a reservation that moved `tat` to `new` may go.
    pub(crate) fn admit_at(&self, new: u64) -> u64 {
        new.saturating_sub(self.tolerance)
    }

    /// Whole tokens available at `now`.
    pub(crate) fn remaining(&self, tat: u64, now: u64) -> u64 {
        let ahead = tat.saturating_sub(now);
        u64::from(self.burst).saturating_sub(ahead.div_ceil(self.interval))
    }

    /// Time until one more token becomes available (zero for a full bucket).
    pub(crate) fn next_token(&self, tat: u64, now: u64) -> Duration {
        let ahead = tat.saturating_sub(now);
        if ahead == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((ahead - 1) % self.interval + 1)
    }
}

/// One bucket in one atomic: the state of the shared buckets (keyless requests, overflow).
#[derive(Debug, Default)]
pub(crate) struct Cell {
    tat: AtomicU64,
}

impl Cell {
    /// As [`Rate::admit`], with a compare-and-swap.
    pub(crate) fn admit(
        &self,
        rate: &Rate,
        now: u64,
        cost: u64,
        max_wait: u64,
    ) -> Result<u64, u64> {
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let new = rate.admit(tat, now, cost, max_wait)?;
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(new),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Take back `cost` admitted by the admission that moved `tat` to `after`, if nothing was
    /// admitted since (otherwise the tokens stay spent: never more than the quota).
    pub(crate) fn refund(&self, cost: u64, after: u64) {
        let _ = self.tat.compare_exchange(
            after,
            after.saturating_sub(cost),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    #[cfg(test)]
    pub(crate) fn tat(&self) -> u64 {
        self.tat.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_a_burst_then_spaces() {
        let rate = Rate::new(Quota::per_second(2).burst(2));
        let t = rate.interval;
        assert_eq!(t, 500_000_000);
        let mut tat = 0;
        for _ in 0..2 {
            tat = rate.admit(tat, 0, t, 0).unwrap();
        }
        assert_eq!(rate.admit(tat, 0, t, 0), Err(t));
        assert_eq!(rate.remaining(tat, 0), 0);
        assert_eq!(rate.next_token(tat, 0), Duration::from_millis(500));
        assert_eq!(rate.remaining(tat, t - 1), 0);
        assert_eq!(rate.remaining(tat, t), 1);
        // A reservation within the allowed wait moves `tat` and names its instant.
        let new = rate.admit(tat, 0, t, t).unwrap();
        assert_eq!(rate.admit_at(new), t);
        assert_eq!(rate.cost(3), None);
    }

    #[test]
    fn cell_refund_only_when_nothing_came_after() {
        let rate = Rate::new(Quota::per_second(1).burst(2));
        let t = rate.interval;
        let cell = Cell::default();
        let first = cell.admit(&rate, 0, t, 0).unwrap();
        let second = cell.admit(&rate, 0, t, 0).unwrap();
        cell.refund(t, first); // stale: `second` came after it
        assert_eq!(cell.tat(), second);
        cell.refund(t, second);
        assert_eq!(cell.tat(), first);
    }
}
