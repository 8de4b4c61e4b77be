//! Exact sliding window: a log of admissions.

use std::collections::VecDeque;

use super::Window;

/// Admissions (instant, tokens) in time order, kept for one period.
#[derive(Debug)]
pub(crate) struct Log {
    limit: u64,
    width: u64,
    entries: VecDeque<(u64, u64)>,
}

impl Log {
    pub(crate) fn new(limit: u64, width: u64) -> Self {
        Log {
            limit,
            width,
            entries: VecDeque::new(),
        }
    }
}

impl Window for Log {
    fn earliest(&self, tokens: u64, not_before: u64) -> u64 {
        // An entry at x counts at t while x > t − width. From `not_before` on, drop the oldest
        // live entries until the rest fit: the last one dropped stops counting at x + width.
        let mut total = tokens
            + self
                .entries
                .iter()
                .filter(|e| e.0 + self.width > not_before)
                .map(|e| e.1)
                .sum::<u64>();
        let mut t = not_before;
        for &(x, n) in self
            .entries
            .iter()
            .filter(|e| e.0 + self.width > not_before)
        {
            if total <= self.limit {
                break;
            }
            total -= n;
            t = t.max(x + self.width);
        }
        t
    }

    fn commit(&mut self, tokens: u64, at: u64) {
        let i = self.entries.partition_point(|e| e.0 <= at);
        self.entries.insert(i, (at, tokens));
    }

    fn release(&mut self, tokens: u64, at: u64) {
        if let Some(i) = self.entries.iter().rposition(|e| *e == (at, tokens)) {
            self.entries.remove(i);
        }
    }

    fn prune(&mut self, now: u64) {
        while self
            .entries
            .front()
            .is_some_and(|e| e.0 + self.width <= now)
        {
            self.entries.pop_front();
        }
    }

    fn available(&self, now: u64) -> u64 {
        let live: u64 = self
            .entries
            .iter()
            .filter(|e| e.0 + self.width > now && e.0 <= now)
            .map(|e| e.1)
            .sum();
        self.limit.saturating_sub(live)
    }

    fn clear_in(&self, now: u64) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.0 <= now)
            .map(|e| (e.0 + self.width).saturating_sub(now))
            .max()
            .unwrap_or(0)
    }

    fn restart_at(&mut self, end: u64) {
        // As an empty bucket refilling at limit/width: one token at `end`, the others
        // coming back one per width/limit.
        let step = (self.width / self.limit).max(1);
        let first = (end + step).saturating_sub(self.width);
        for k in 0..self.limit - 1 {
            self.commit(1, first + k * step);
        }
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
    }
}
