//! Fixed windows, aligned to the clock.

use super::aligned::Aligned;
use super::Align;
use super::Window;

/// At most `limit` tokens per aligned window.
#[derive(Debug)]
pub(crate) struct Fixed(Aligned);

impl Fixed {
    pub(crate) fn new(limit: u64, width: u64, now: u64, align: Align) -> Self {
        Fixed(Aligned::new(limit, width, now, 0, align))
    }
}

impl Window for Fixed {
    fn earliest(&self, tokens: u64, not_before: u64) -> u64 {
        let a = &self.0;
        let mut w = a.index(not_before);
        while a.count(w) + tokens > a.limit {
            w += 1;
        }
        not_before.max(a.start(w))
    }

    fn commit(&mut self, tokens: u64, at: u64) {
        self.0.commit(tokens, at);
    }

    fn release(&mut self, tokens: u64, at: u64) {
        self.0.release(tokens, at);
    }

    fn prune(&mut self, now: u64) {
        self.0.prune(now, 0);
    }

    fn available(&self, now: u64) -> u64 {
        let a = &self.0;
        a.limit.saturating_sub(a.count(a.index(now)))
    }

    fn clear_in(&self, now: u64) -> u64 {
        let a = &self.0;
        let w = a.index(now);
        if a.count(w) == 0 {
            0
        } else {
            a.start(w + 1) - now
        }
    }

    fn ramp_until(&self, end: u64) -> u64 {
        // The first window boundary a whole period after the pause: the rest of a window is
        // never let through at once.
        let a = &self.0;
        a.start(a.index(end.saturating_add(a.width - 1)).saturating_add(1))
    }

    fn set_limit(&mut self, limit: u64, width: u64, now: u64) {
        let available = self.available(now).min(limit);
        self.0 = self.0.reset(limit, width, now, 0);
        self.0.commit(limit - available, now);
    }

    fn follow_rate(&mut self, limit: u64, width: u64, now: u64) {
        let available = self.available(now).min(limit);
        self.0 = self.0.reset_keeping_end(limit, width, now, 0);
        self.0.commit(limit - available, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_windows_in_order() {
        let mut f = Fixed::new(3, 100, 0, Align::At(0));
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
