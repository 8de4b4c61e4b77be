//! Fixed windows, aligned to the clock.

use std::collections::VecDeque;

use super::{epoch_phase, Window};

/// Counts per aligned window, from the window `base` on.
#[derive(Debug)]
pub(crate) struct Fixed {
    limit: u64,
    width: u64,
    phase: u64,
    base: u64,
    counts: VecDeque<u64>,
}

impl Fixed {
    pub(crate) fn new(limit: u64, width: u64, now: u64) -> Self {
        Self::with_phase(limit, width, epoch_phase(width, now), now)
    }

    pub(crate) fn with_phase(limit: u64, width: u64, phase: u64, now: u64) -> Self {
        let mut f = Fixed {
            limit,
            width,
            phase,
            base: 0,
            counts: VecDeque::new(),
        };
        f.base = f.index(now);
        f
    }

    fn index(&self, t: u64) -> u64 {
        (t + self.phase) / self.width
    }

    fn start(&self, w: u64) -> u64 {
        (w * self.width).saturating_sub(self.phase)
    }

    fn count(&self, w: u64) -> u64 {
        w.checked_sub(self.base)
            .and_then(|i| self.counts.get(i as usize))
            .copied()
            .unwrap_or(0)
    }

    fn slot(&mut self, w: u64) -> Option<&mut u64> {
        let i = usize::try_from(w.checked_sub(self.base)?).ok()?;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts.get_mut(i)
    }
}

impl Window for Fixed {
    fn earliest(&self, tokens: u64, not_before: u64) -> u64 {
        let mut w = self.index(not_before);
        while self.count(w) + tokens > self.limit {
            w += 1;
        }
        not_before.max(self.start(w))
    }

    fn commit(&mut self, tokens: u64, at: u64) {
        let w = self.index(at);
        if let Some(c) = self.slot(w) {
            *c += tokens;
        }
    }

    fn release(&mut self, tokens: u64, at: u64) {
        let w = self.index(at);
        if let Some(c) = self.slot(w) {
            *c = c.saturating_sub(tokens);
        }
    }

    fn prune(&mut self, now: u64) {
        let w = self.index(now);
        while self.base < w {
            self.counts.pop_front();
            self.base += 1;
        }
    }

    fn available(&self, now: u64) -> u64 {
        self.limit.saturating_sub(self.count(self.index(now)))
    }

    fn clear_in(&self, now: u64) -> u64 {
        let w = self.index(now);
        if self.count(w) == 0 {
            0
        } else {
            self.start(w + 1) - now
        }
    }

    fn restart_at(&mut self, end: u64) {
        // What is left of the window at `end`, in proportion to the time left in it.
        let w = self.index(end);
        let left = self.start(w + 1) - end;
        let cap = (u128::from(self.limit) * u128::from(left) / u128::from(self.width)) as u64;
        let floor = self.limit - cap.clamp(1, self.limit);
        if let Some(c) = self.slot(w) {
            *c = (*c).max(floor);
        }
    }

    fn set_limit(&mut self, limit: u64, width: u64, now: u64) {
        let available = self.available(now).min(limit);
        let phase = if width == self.width {
            self.phase
        } else {
            epoch_phase(width, now)
        };
        *self = Fixed::with_phase(limit, width, phase, now);
        self.commit(limit - available, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_windows_in_order() {
        let mut f = Fixed::with_phase(3, 100, 0, 0);
        for _ in 0..3 {
            let t = f.earliest(1, 10);
            assert_eq!(t, 10);
            f.commit(1, t);
        }
        assert_eq!(f.earliest(1, 10), 100);
        f.commit(2, 100);
        assert_eq!(f.earliest(2, 10), 200);
        f.release(1, 10);
        assert_eq!(f.earliest(1, 10), 10);
        f.prune(150);
        assert_eq!(f.available(150), 1);
        assert_eq!(f.clear_in(150), 50);
    }
}
