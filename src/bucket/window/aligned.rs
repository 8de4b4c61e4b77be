//! Counts per window, for windows aligned to the clock: what the fixed and the sliding
//! window share.

use std::collections::VecDeque;

use super::Align;

/// Tokens committed per aligned window, from the window `base` on.
#[derive(Debug)]
pub(crate) struct Aligned {
    pub(crate) limit: u64,
    pub(crate) width: u64,
    align: Align,
    phase: u64,
    base: u64,
    counts: VecDeque<u64>,
}

impl Aligned {
    /// Windows aligned as `align` says; counts kept from `keep` windows before the one of
    /// `now`.
    pub(crate) fn new(limit: u64, width: u64, now: u64, keep: u64, align: Align) -> Self {
        let mut a = Aligned {
            limit,
            width,
            align,
            phase: align.phase(width, now),
            base: 0,
            counts: VecDeque::new(),
        };
        a.base = a.index(now).saturating_sub(keep);
        a
    }

    /// The same windows (or new ones, aligned the same way, if the width changed), emptied.
    pub(crate) fn reset(&self, limit: u64, width: u64, now: u64, keep: u64) -> Self {
        let mut a = Self::new(limit, width, now, keep, self.align);
        if width == self.width {
            a.phase = self.phase;
            a.base = a.index(now).saturating_sub(keep);
        }
        a
    }

    /// As [`reset`](Self::reset), but a new width is laid out so that the window of `now`
    /// ends where it ended under the old width (or at the first boundary before that, if the
    /// new width is shorter than what was left of it).
    pub(crate) fn reset_keeping_end(&self, limit: u64, width: u64, now: u64, keep: u64) -> Self {
        let mut a = self.reset(limit, width, now, keep);
        if width != self.width {
            let end = self.start(self.index(now).saturating_add(1));
            a.phase = (width - end % width) % width;
            a.base = a.index(now).saturating_sub(keep);
        }
        a
    }

    pub(crate) fn index(&self, t: u64) -> u64 {
        ((u128::from(t) + u128::from(self.phase)) / u128::from(self.width)) as u64
    }

    pub(crate) fn start(&self, w: u64) -> u64 {
        w.saturating_mul(self.width).saturating_sub(self.phase)
    }

    pub(crate) fn count(&self, w: u64) -> u64 {
        w.checked_sub(self.base)
            .and_then(|i| self.counts.get(i as usize))
            .copied()
            .unwrap_or(0)
    }

    /// The count of window `w`, created if need be. Windows before `w − 1` are forgotten
    /// first, so the counts kept stay O(1) however far `w` lies (commits are never in the
    /// future: those windows can no longer matter).
    pub(crate) fn slot(&mut self, w: u64) -> Option<&mut u64> {
        let first = w.saturating_sub(1);
        while self.base < first && !self.counts.is_empty() {
            self.counts.pop_front();
            self.base += 1;
        }
        if self.counts.is_empty() {
            self.base = self.base.max(first);
        }
        let i = usize::try_from(w.checked_sub(self.base)?).ok()?;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts.get_mut(i)
    }

    pub(crate) fn commit(&mut self, tokens: u64, at: u64) {
        let w = self.index(at);
        if let Some(c) = self.slot(w) {
            *c += tokens;
        }
    }

    pub(crate) fn release(&mut self, tokens: u64, at: u64) {
        let w = self.index(at);
        if let Some(c) = self.slot(w) {
            *c = c.saturating_sub(tokens);
        }
    }

    /// Forget the windows more than `keep` before the one of `now`.
    pub(crate) fn prune(&mut self, now: u64, keep: u64) {
        let first = self.index(now).saturating_sub(keep);
        while self.base < first && !self.counts.is_empty() {
            self.counts.pop_front();
            self.base += 1;
        }
        self.base = self.base.max(first);
    }
}
