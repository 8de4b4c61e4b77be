//! Sliding window, estimated from two aligned fixed windows.

use super::aligned::Aligned;
use super::Align;
use super::Window;

/// The estimate at `t` in window `w` is `count(w − 1) · (1 − f) + count(w)`, with `f` the
/// elapsed fraction of `w`.
#[derive(Debug)]
pub(crate) struct Sliding(Aligned);

impl Sliding {
    pub(crate) fn new(limit: u64, width: u64, now: u64, align: Align) -> Self {
        Sliding(Aligned::new(limit, width, now, 1, align))
    }

    /// `count(w−1) · (window time left at t) / width`, rounded up.
    fn carried(&self, w: u64, t: u64) -> u64 {
        let a = &self.0;
        let prev = u128::from(w.checked_sub(1).map_or(0, |p| a.count(p)));
        let left = u128::from(a.start(w + 1).saturating_sub(t));
        (prev * left).div_ceil(u128::from(a.width)) as u64
    }
}

impl Window for Sliding {
    fn earliest(&self, tokens: u64, not_before: u64) -> u64 {
        let a = &self.0;
        let mut w = a.index(not_before);
        loop {
            let cur = a.count(w);
            if cur + tokens <= a.limit {
                let t = not_before.max(a.start(w));
                let room = a.limit - cur - tokens;
                if self.carried(w, t) <= room {
                    return t;
                }
                // The carried share falls linearly: ceil(prev · (end − t) / width) ≤ room
                // ⇔ t ≥ end − ⌊room · width / prev⌋.
                let prev = u128::from(a.count(w - 1));
                let end = a.start(w + 1);
                let reach = (u128::from(room) * u128::from(a.width) / prev) as u64;
                let t = end.saturating_sub(reach).max(t);
                if t < end {
                    return t;
                }
            }
            w += 1;
        }
    }

    fn commit(&mut self, tokens: u64, at: u64) {
        self.0.commit(tokens, at);
    }

    fn release(&mut self, tokens: u64, at: u64) {
        self.0.release(tokens, at);
    }

    fn prune(&mut self, now: u64) {
        self.0.prune(now, 1);
    }

    fn available(&self, now: u64) -> u64 {
        let a = &self.0;
        let w = a.index(now);
        a.limit.saturating_sub(a.count(w) + self.carried(w, now))
    }

    fn clear_in(&self, now: u64) -> u64 {
        let a = &self.0;
        let w = a.index(now);
        if a.count(w) > 0 {
            a.start(w + 2) - now
        } else if a.count(w.saturating_sub(1)) > 0 {
            a.start(w + 1) - now
        } else {
            0
        }
    }

    fn restart_at(&mut self, _end: u64) {
        // Nothing to forget: the ramp bounds what goes after the pause.
    }

    fn ramp_until(&self, end: u64) -> u64 {
        end.saturating_add(self.0.width)
    }

    fn set_limit(&mut self, limit: u64, width: u64, now: u64) {
        let available = self.available(now).min(limit);
        self.0 = self.0.reset(limit, width, now, 1);
        self.0.commit(limit - available, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_window_fades_linearly() {
        let mut s = Sliding::new(10, 1000, 0, Align::At(0));
        s.commit(10, 0);
        assert_eq!(s.earliest(1, 0), 1000 + 100);
        assert_eq!(s.earliest(5, 0), 1500);
        assert_eq!(s.earliest(10, 0), 2000);
        s.commit(1, 1100);
        assert_eq!(s.available(1100), 0);
        assert_eq!(s.available(1500), 4);
    }
}
