//! Sliding window, estimated from two aligned fixed windows.

use super::{epoch_phase, Window};
use std::collections::VecDeque;

/// Counts per aligned window from `base` on; the estimate at `t` in window `w` is
/// `count(w − 1) · (1 − f) + count(w)` with `f` the elapsed fraction of `w`.
#[derive(Debug)]
pub(crate) struct Sliding {
    limit: u64,
    width: u64,
    phase: u64,
    base: u64,
    counts: VecDeque<u64>,
}

impl Sliding {
    pub(crate) fn new(limit: u64, width: u64, now: u64) -> Self {
        Self::with_phase(limit, width, epoch_phase(width, now), now)
    }

    pub(crate) fn with_phase(limit: u64, width: u64, phase: u64, now: u64) -> Self {
        let mut s = Sliding {
            limit,
            width,
            phase,
            base: 0,
            counts: VecDeque::new(),
        };
        s.base = s.index(now).saturating_sub(1);
        s
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

    /// `count(w−1) · (window time left at t) / width`, rounded up.
    fn carried(&self, w: u64, t: u64) -> u64 {
        let prev = u128::from(w.checked_sub(1).map_or(0, |p| self.count(p)));
        let left = u128::from(self.start(w + 1).saturating_sub(t));
        (prev * left).div_ceil(u128::from(self.width)) as u64
    }
}

impl Window for Sliding {
    fn earliest(&self, tokens: u64, not_before: u64) -> u64 {
        let mut w = self.index(not_before);
        loop {
            let cur = self.count(w);
            if cur + tokens <= self.limit {
                let t = not_before.max(self.start(w));
                let room = self.limit - cur - tokens;
                if self.carried(w, t) <= room {
                    return t;
                }
                // The carried share falls linearly: ceil(prev · (end − t) / width) ≤ room
                // ⇔ t ≥ end − ⌊room · width / prev⌋.
                let prev = u128::from(self.count(w - 1));
                let end = self.start(w + 1);
                let reach = (u128::from(room) * u128::from(self.width) / prev) as u64;
                let t = end.saturating_sub(reach).max(t);
                if t < end {
                    return t;
                }
            }
            w += 1;
        }
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
        let keep = self.index(now).saturating_sub(1);
        while self.base < keep {
            self.counts.pop_front();
            self.base += 1;
        }
    }

    fn available(&self, now: u64) -> u64 {
        let w = self.index(now);
        self.limit
            .saturating_sub(self.count(w) + self.carried(w, now))
    }

    fn clear_in(&self, now: u64) -> u64 {
        let w = self.index(now);
        if self.count(w) > 0 {
            self.start(w + 2) - now
        } else if self.count(w.saturating_sub(1)) > 0 {
            self.start(w + 1) - now
        } else {
            0
        }
    }

    fn restart_at(&mut self, end: u64) {
        // Fill the current window so that one token fits at `end` and the rest come back as
        // the estimate slides.
        let w = self.index(end);
        let fill = self.limit - 1;
        if let Some(c) = self.slot(w) {
            *c = (*c).max(fill);
        }
    }

    fn set_limit(&mut self, limit: u64, width: u64, now: u64) {
        let available = self.available(now).min(limit);
        let phase = if width == self.width {
            self.phase
        } else {
            epoch_phase(width, now)
        };
        *self = Sliding::with_phase(limit, width, phase, now);
        self.commit(limit - available, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_window_fades_linearly() {
        let mut s = Sliding::with_phase(10, 1000, 0, 0);
        s.commit(10, 0);
        assert_eq!(s.earliest(1, 0), 1000 + 100);
        assert_eq!(s.earliest(5, 0), 1500);
        assert_eq!(s.earliest(10, 0), 2000);
        s.commit(1, 1100);
        assert_eq!(s.available(1100), 0);
        assert_eq!(s.available(1500), 4);
    }
}
