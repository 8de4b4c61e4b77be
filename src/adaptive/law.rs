//! The control law: arithmetic on rates (tokens per second) and instants, nothing else.

use std::time::Duration;

use tokio::time::Instant;

/// Push-back cuts the rate to this fraction of the rate refused.
pub(crate) const DECREASE: f64 = 0.5;
/// After a push-back the rate climbs back towards this fraction of the rate refused…
pub(crate) const HOLD: f64 = 0.95;
/// …with this time constant (seconds): 95 % of the way back in three of them.
pub(crate) const RECOVER_SECS: f64 = 0.5;
/// Then it probes upwards, reaching the rate refused again after this long (seconds).
pub(crate) const PROBE_SECS: f64 = 30.0;
/// Searching (no limit known yet), each success adds `min(rate, 1 / SEARCH_SECS)`: the
/// rate doubles per success while low, then grows `e`-fold every `SEARCH_SECS`.
pub(crate) const SEARCH_SECS: f64 = 0.35;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// At the ceiling, or at the rate a server stated: no growth.
    Hold,
    /// No limit known yet: growing until the first push-back.
    Search,
    /// After a push-back: back towards `HOLD × limit` from `from`, then probing, from
    /// `since` (the end of the cooldown).
    Recover { since: Instant, from: f64 },
}

/// The state of one bucket's rate.
#[derive(Debug, Clone)]
pub(crate) struct Law {
    ceiling: f64,
    floor: f64,
    rate: f64,
    /// The rate the server refused last.
    limit: Option<f64>,
    phase: Phase,
    /// Push-backs before this instant answer requests sent before the last decrease.
    settled: Option<Instant>,
}

impl Law {
    /// At `ceiling` until a server pushes back.
    pub(crate) fn capped(ceiling: f64, floor: f64) -> Self {
        Law {
            ceiling,
            floor: floor.min(ceiling),
            rate: ceiling,
            limit: None,
            phase: Phase::Hold,
            settled: None,
        }
    }

    /// Searching upwards from `start` until a server pushes back or states its quota.
    pub(crate) fn search(start: f64, ceiling: f64, floor: f64) -> Self {
        let floor = floor.min(ceiling);
        Law {
            rate: start.clamp(floor, ceiling),
            phase: Phase::Search,
            ..Law::capped(ceiling, floor)
        }
    }

    /// The rate now.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// The rate the server refused last, if any.
    pub(crate) fn limit(&self) -> Option<f64> {
        self.limit
    }

    pub(crate) fn floor(&self) -> f64 {
        self.floor
    }

    fn set(&mut self, rate: f64) -> f64 {
        self.rate = rate.clamp(self.floor, self.ceiling);
        self.rate
    }

    /// A push-back at `now` of a request sent at the rate `refused`, with the server's
    /// `cooldown`. Returns the new rate, or `None`
    /// when the push-back answers a request sent before the last decrease (one decrease per
    /// cooldown: the requests in flight then were sent at the old rate).
    pub(crate) fn pushed_back(
        &mut self,
        now: Instant,
        cooldown: Duration,
        refused: f64,
    ) -> Option<f64> {
        if self.settled.is_some_and(|s| now < s) {
            return None;
        }
        let since = now.checked_add(cooldown).unwrap_or(now);
        self.settled = Some(since);
        let refused = refused.min(self.rate);
        self.limit = Some(refused);
        let from = self.set(refused * DECREASE);
        self.phase = Phase::Recover { since, from };
        Some(from)
    }

    /// Another process acted on a push-back at the rate `refused`, its cooldown ending at
    /// `since`: follow the same curve. Returns the new rate, or `None` when this one already
    /// acted on that cooldown or a later one.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
    pub(crate) fn adopt(&mut self, refused: f64, since: Instant) -> Option<f64> {
        if self.settled.is_some_and(|s| since <= s) {
            return None;
        }
        self.settled = Some(since);
        self.limit = Some(refused);
        let from = self.set(refused * DECREASE);
        self.phase = Phase::Recover { since, from };
        Some(from)
    }

    /// A success at `now`. Returns the new rate.
    pub(crate) fn succeeded(&mut self, now: Instant) -> f64 {
        match self.phase {
            Phase::Hold => self.rate,
            Phase::Search => {
                let step = self.rate.min(1.0 / SEARCH_SECS);
                self.set(self.rate + step)
            }
            Phase::Recover { since, from } => {
                let limit = self.limit.unwrap_or(self.ceiling);
                let t = now.saturating_duration_since(since).as_secs_f64();
                let target = HOLD * limit;
                let back = target - (target - from) * (-t / RECOVER_SECS).exp();
                let probe = (1.0 - HOLD) * limit * (t / PROBE_SECS).powi(3);
                let rate = self.set(back.max(from) + probe);
                if rate >= self.ceiling {
                    self.phase = Phase::Hold;
                }
                rate
            }
        }
    }

    /// The server stated its quota: `rate` tokens per second. Returns the new rate.
    pub(crate) fn stated(&mut self, rate: f64) -> f64 {
        self.limit = Some(rate);
        self.phase = Phase::Hold;
        self.set(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[tokio::test(start_paused = true)]
    async fn push_back_halves_once_per_cooldown_then_recovers_below_the_refused_rate() {
        let mut law = Law::capped(100.0, 1.0);
        let t0 = Instant::now();
        assert_eq!(law.pushed_back(t0, secs(1.0), 100.0), Some(50.0));
        // More answers to requests sent before the decrease: ignored.
        assert_eq!(law.pushed_back(t0 + secs(0.5), secs(1.0), 100.0), None);
        assert_eq!(law.rate(), 50.0);
        // Back to about 95 % of the refused rate within two seconds of the cooldown's end.
        let r = law.succeeded(t0 + secs(3.0));
        assert!((93.0..96.0).contains(&r), "{r}");
        // Then probing: the refused rate again after PROBE_SECS.
        let r = law.succeeded(t0 + secs(1.0 + PROBE_SECS));
        assert!((99.0..=100.0).contains(&r), "{r}");
        // The ceiling holds.
        assert_eq!(law.succeeded(t0 + secs(100.0)), 100.0);
    }

    #[tokio::test(start_paused = true)]
    async fn search_doubles_while_low_and_the_floor_holds() {
        let mut law = Law::search(1.0, 1000.0, 0.5);
        let t0 = Instant::now();
        assert_eq!(law.succeeded(t0), 2.0);
        assert_eq!(law.succeeded(t0), 4.0);
        assert_eq!(law.succeeded(t0), 4.0 + 1.0 / SEARCH_SECS);
        for _ in 0..10 {
            assert!(law.pushed_back(t0, Duration::ZERO, 1e9).is_some());
        }
        assert_eq!(law.rate(), 0.5);
    }

    #[test]
    fn a_stated_quota_is_taken_at_once_within_the_bounds() {
        let mut law = Law::search(1.0, 40.0, 0.1);
        assert_eq!(law.stated(25.0), 25.0);
        assert_eq!(law.succeeded(Instant::now()), 25.0);
        assert_eq!(law.stated(80.0), 40.0);
    }
}
