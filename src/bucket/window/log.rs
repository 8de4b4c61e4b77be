//! Exact sliding window: a log of admissions.

use std::collections::VecDeque;

use super::Window;

/// Admissions (instant, tokens) in time order, kept for one period, with their running total.
///
/// Decisions are amortised O(1): expired entries leave from the front once, admissions join
/// at the back; only a request that does not fit walks the oldest entries to find when it
/// will.
#[derive(Debug)]
pub(crate) struct Log {
    limit: u64,
    width: u64,
    entries: VecDeque<(u64, u64)>,
    total: u64,
}

impl Log {
    pub(crate) fn new(limit: u64, width: u64) -> Self {
        Log {
            limit,
            width,
            entries: VecDeque::new(),
            total: 0,
        }
    }

    /// The instant of the latest admission or reservation.
    pub(crate) fn last(&self) -> Option<u64> {
        self.entries.back().map(|e| e.0)
    }

    /// When nothing in the log counts any more (0 for an empty log).
    pub(crate) fn clear_at(&self) -> u64 {
        self.last().map_or(0, |t| t + self.width)
    }

    /// Tokens of entries after `t` (reservations in the future), walking from the back.
    fn after(&self, t: u64) -> u64 {
        self.entries
            .iter()
            .rev()
            .take_while(|e| e.0 > t)
            .map(|e| e.1)
            .sum()
    }
}

impl Window for Log {
    fn earliest(&self, tokens: u64, not_before: u64) -> u64 {
        // An entry at x counts at t while x > t − width. From `not_before` on, drop the oldest
        // entries until the rest fit: the last one dropped stops counting at x + width.
        let mut total = self.total + tokens;
        let mut t = not_before;
        for &(x, n) in &self.entries {
            let expired = x + self.width <= not_before;
            if !expired && total <= self.limit {
                break;
            }
            total -= n;
            if !expired {
                t = t.max(x + self.width);
            }
        }
        t
    }

    fn commit(&mut self, tokens: u64, at: u64) {
        self.total += tokens;
        if self.entries.back().is_none_or(|e| e.0 <= at) {
            self.entries.push_back((at, tokens));
        } else {
            let i = self.entries.partition_point(|e| e.0 <= at);
            self.entries.insert(i, (at, tokens));
        }
    }

    fn release(&mut self, tokens: u64, at: u64) {
        if let Some(i) = self.entries.iter().rposition(|e| *e == (at, tokens)) {
            self.entries.remove(i);
            self.total -= tokens;
        }
    }

    fn prune(&mut self, now: u64) {
        while let Some(&(x, n)) = self.entries.front() {
            if x + self.width > now {
                break;
            }
            self.entries.pop_front();
            self.total -= n;
        }
    }

    fn available(&self, now: u64) -> u64 {
        let expired: u64 = self
            .entries
            .iter()
            .take_while(|e| e.0 + self.width <= now)
            .map(|e| e.1)
            .sum();
        let live = self.total - expired - self.after(now);
        self.limit.saturating_sub(live)
    }

    fn clear_in(&self, now: u64) -> u64 {
        self.entries
            .iter()
            .rev()
            .find(|e| e.0 <= now)
            .map_or(0, |e| (e.0 + self.width).saturating_sub(now))
    }

    fn ramp_until(&self, end: u64) -> u64 {
        end.saturating_add(self.width)
    }

    fn slack(&self) -> u64 {
        self.width / self.limit
    }

    fn set_limit(&mut self, limit: u64, width: u64, now: u64) {
        // Keep the log; never make more available at `now` than under the old limit.
        let target = self.available(now).min(limit);
        self.limit = limit;
        self.width = width;
        let available = self.available(now);
        if available > target {
            self.commit(available - target, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_window() {
        let mut l = Log::new(3, 100);
        l.commit(1, 0);
        l.commit(2, 50);
        assert_eq!(l.earliest(1, 60), 100);
        assert_eq!(l.earliest(2, 60), 150);
        assert_eq!(l.earliest(3, 60), 150);
        l.prune(120);
        assert_eq!(l.available(120), 1);
        assert_eq!(l.clear_in(120), 30);
        // A reservation in the future does not count now, and later ones go after it.
        l.commit(1, 200);
        assert_eq!(l.available(120), 1);
        assert_eq!(l.earliest(2, 200), 200);
        assert_eq!(l.earliest(3, 200), 300);
        l.release(1, 200);
        assert_eq!(l.earliest(3, 200), 200);
    }
}
