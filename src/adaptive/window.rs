//! A window of successes between two push-backs: two of them see the rate behind a
//! server's burst.

/// Two windows estimate a server's rate only when they show at least this burst behind it.
const BURST_MIN: f64 = 2.0;
/// Rate steps kept per window at most: a step is kept when the rate moved by
/// [`HISTORY_STEP`] since the last one kept, so a window from 1/s to 1000/s keeps about 350.
const HISTORY_MAX: usize = 512;
/// The relative change of the rate that makes a new step of a window's history.
const HISTORY_STEP: f64 = 0.02;

/// The successes from the end of a cooldown (or the first success) to the push-back that
/// ended it, over `secs` seconds, and the rates the client was at meanwhile: `(s, rate)`, the
/// rate in force from `s` seconds into the window.
///
/// Behind a burst `B`, a server admits `B + r·secs − d` in a window that starts with its
/// bucket refilled (a cooldown long enough) and ends when it is empty (the push-back), where
/// `d` is what the client sent below `r` while it was below it (the server's bucket was full
/// then, and stayed so). Two windows of different lengths give `r` without knowing `B`.
#[derive(Debug, Clone, Default)]
pub(super) struct Window {
    pub(super) count: f64,
    pub(super) secs: f64,
    pub(super) rates: Vec<(f64, f64)>,
}

impl Window {
    /// A window starting at `rate`.
    pub(super) fn at(rate: f64) -> Self {
        Window {
            rates: vec![(0.0, rate)],
            ..Window::default()
        }
    }

    /// The client went to `rate` at `s` seconds into the window.
    pub(super) fn record(&mut self, s: f64, rate: f64) {
        let moved = self
            .rates
            .last()
            .is_none_or(|&(_, last)| (rate - last).abs() >= HISTORY_STEP * last);
        if moved && self.rates.len() < HISTORY_MAX {
            self.rates.push((s, rate));
        }
    }

    /// What the client sent below `r` per second while it was below it, in tokens, and for
    /// how long it was below it; `None` when it was below `r` at the end (the window says
    /// nothing of the server).
    fn deficit(&self, r: f64) -> Option<(f64, f64)> {
        let &(_, last) = self.rates.last()?;
        if last < r {
            return None;
        }
        let ends = self
            .rates
            .iter()
            .skip(1)
            .map(|&(s, _)| s)
            .chain([self.secs]);
        let below = self
            .rates
            .iter()
            .zip(ends)
            .filter(|(&(_, rate), _)| rate < r)
            .map(|(&(from, rate), to)| {
                let secs = (to.min(self.secs) - from).max(0.0);
                (secs * (r - rate), secs)
            });
        Some(below.fold((0.0, 0.0), |(d, t), (dd, dt)| (d + dd, t + dt)))
    }

    /// The server's rate from two windows, each counted with what its client sent below it,
    /// when they show a burst of at least [`BURST_MIN`] behind it (without one, the rate
    /// refused is the better estimate, and a few successes more or less would swing theirs).
    ///
    /// It solves `r·(t₂ − t₁) = n₂ + d₂(r) − n₁ − d₁(r)`, piecewise linear in `r`, by
    /// Newton's method; an estimate that hangs on the deficits more than on the windows'
    /// lengths is not believed.
    pub(super) fn estimate(a: &Window, b: &Window) -> Option<f64> {
        let (a, b) = if a.secs <= b.secs { (a, b) } else { (b, a) };
        let span = b.secs - a.secs;
        let mut r = (b.count - a.count) / span;
        for _ in 0..16 {
            if !(r.is_finite() && r > 0.0) {
                return None;
            }
            let ((da, ta), (db, tb)) = (a.deficit(r)?, b.deficit(r)?);
            let slope = span - tb + ta;
            if slope < span / 4.0 {
                return None;
            }
            let next = r - (r * span - (b.count + db - a.count - da)) / slope;
            if (next - r).abs() <= 1e-9 * r {
                break;
            }
            r = next;
        }
        let burst = b.count + b.deficit(r)?.0 - r * b.secs;
        (r.is_finite() && r > 0.0 && burst >= BURST_MIN).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn a_window_counts_what_its_client_sent_below_the_rate() {
        let mut w = Window::at(25.0);
        w.record(0.1, 25.2); // within 2 %: not a step
        w.record(0.2, 40.0);
        w.record(0.5, 60.0);
        w.secs = 2.0;
        assert_eq!(w.rates, vec![(0.0, 25.0), (0.2, 40.0), (0.5, 60.0)]);
        // 0.2 s at 25 below 50, 0.3 s at 40.
        let (d, secs) = w.deficit(50.0).unwrap();
        assert!(
            close(d, 0.2 * 25.0 + 0.3 * 10.0) && close(secs, 0.5),
            "{d} {secs}"
        );
        assert_eq!(w.deficit(20.0), Some((0.0, 0.0)));
        // Still below 70/s at the end: it says nothing of a server at 70/s.
        assert_eq!(w.deficit(70.0), None);
    }

    #[test]
    fn two_windows_see_the_rate_behind_a_burst_and_only_a_burst() {
        // A server at 40/s with a burst of 10, refilled during each cooldown: a window from
        // above its rate, and one from a deep cut (0.5 s at 20/s, then 60/s).
        let quick = Window {
            count: 10.0 + 40.0 * 0.25,
            secs: 0.25,
            rates: vec![(0.0, 80.0)],
        };
        let deep = Window {
            count: 10.0 + 40.0 * 1.0 - 0.5 * 20.0,
            secs: 1.0,
            rates: vec![(0.0, 20.0), (0.5, 60.0)],
        };
        let r = Window::estimate(&quick, &deep).unwrap();
        assert!(close(r, 40.0), "{r}");
        // Without the deficit counted back in, the same windows read 26.7/s.
        assert!(close((deep.count - quick.count) / 0.75, 80.0 / 3.0));
        // No burst behind the rate: the windows hold no more than it, and are not believed.
        let flat = |count, secs| Window {
            count,
            secs,
            rates: vec![(0.0, 80.0)],
        };
        assert_eq!(Window::estimate(&flat(10.0, 0.25), &flat(40.0, 1.0)), None);
    }
}
