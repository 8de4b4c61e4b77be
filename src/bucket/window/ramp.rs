//! The ramp a window restarts on after a pause: one token when the pause ends, then one per
//! interval, as from an empty token bucket of burst 1.

use crate::bucket::schedule;

/// A leaky bucket of one token laid over a window model from the end of a pause until
/// `until`, when the window's own bound takes over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ramp {
    /// When the ramp is full again (GCRA `tat`, tolerance one interval).
    tat: u64,
    interval: u64,
    until: u64,
}

impl Ramp {
    pub(crate) fn new(end: u64, interval: u64, until: u64) -> Self {
        Ramp {
            tat: end,
            interval,
            until,
        }
    }

    /// Whether the ramp still bounds admissions at `t`.
    pub(crate) fn active(&self, t: u64) -> bool {
        t < self.until
    }

    /// The earliest instant `≥ from` the ramp lets `tokens` through: never after it hands
    /// over (from then on the window's own bound alone decides).
    pub(crate) fn earliest(&self, tokens: u64, from: u64) -> u64 {
        let cost = tokens.saturating_mul(self.interval);
        let at = schedule(self.tat, from, cost, self.interval).1;
        at.min(self.until).max(from)
    }

    pub(crate) fn commit(&mut self, tokens: u64, at: u64) {
        self.tat = schedule(self.tat, at, tokens.saturating_mul(self.interval), 0).0;
    }

    pub(crate) fn set_interval(&mut self, interval: u64) {
        self.interval = interval;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_then_one_per_interval() {
        let mut r = Ramp::new(1000, 100, 5000);
        assert_eq!(r.earliest(1, 0), 1000);
        r.commit(1, 1000);
        assert_eq!(r.earliest(1, 1000), 1100);
        assert_eq!(r.earliest(1, 1500), 1500);
        r.commit(3, 1500);
        assert_eq!(r.earliest(1, 1500), 1800);
        assert!(r.active(4999) && !r.active(5000));
        // Booked past the hand-over: the window's bound alone decides from then on.
        r.commit(40, 4900);
        assert_eq!(r.earliest(1, 4950), 5000);
    }
}
