//! The control law: arithmetic on rates (tokens per second) and instants, nothing else.

use std::time::Duration;

use tokio::time::Instant;

use super::window::Window;

/// A first push-back with nothing else known: the limit is guessed at this fraction of the
/// rate refused, then verified upwards.
pub(crate) const DECREASE: f64 = 0.5;
/// Verifying a guess, each success after the cooldown adds this much (requests per second).
pub(crate) const VERIFY_STEP: f64 = 0.2;
/// After a push-back the rate rises above the rate held only from this many successes after
/// the cooldown: a server that admits the rate held refuses at most one request in 101.
pub(crate) const PROBE_AFTER: f64 = 100.0;
/// Once a limit is estimated, the rate holds at this fraction of it…
pub(crate) const HOLD: f64 = 0.96;
/// …or at this one once two windows showed a burst behind it (the burst absorbs jitter).
pub(crate) const HOLD_BURST: f64 = 0.98;
/// With the ramp, a configured rate starts at this fraction of itself…
pub(crate) const RAMP_FROM: f64 = 0.45;
/// …and grows by this factor per success (back in 21 successes); a refused step brackets
/// the server's limit to within the step.
pub(crate) const RAMP_STEP: f64 = 1.04;
/// After a deep cut the rate comes back with this time constant (seconds)…
pub(crate) const RECOVER_SECS: f64 = 0.5;
/// …then probes upwards, reaching the estimate again after this long (seconds).
pub(crate) const PROBE_SECS: f64 = 30.0;
/// A push-back this soon (seconds) after a cooldown, below the estimate: a burst the server
/// refilled during the pause let a rate above its own through.
pub(crate) const QUICK_SECS: f64 = 0.5;
/// Two windows estimate the server's rate when their lengths differ by this much (seconds).
pub(crate) const WINDOWS_APART_SECS: f64 = 0.1;
/// Two windows below this fraction of the rate that went through reveal a burst, and are
/// believed instead.
pub(crate) const BURST_SEEN: f64 = 0.9;
/// A push-back at most this long (seconds) after a cooldown ends a window for the estimate
/// behind a burst.
pub(crate) const WINDOW_SECS: f64 = 3.0;
/// A push-back at least this long (seconds) after a cooldown, at a rate that has gone
/// through since, from a server without a burst, is taken for a request delayed on its way…
pub(crate) const FORGIVE_AFTER_SECS: f64 = 2.0;
/// …at most once in this many seconds (a server just below the rate must lower it)…
pub(crate) const FORGIVE_EVERY_SECS: f64 = 10.0;
/// …at a rate at most this factor above the hold.
pub(crate) const FORGIVE_ABOVE_HOLD: f64 = 1.002;
/// Searching, each success adds `min(rate, 1 / SEARCH_SECS)`: doubling while low, then
/// `e`-fold every `SEARCH_SECS`.
pub(crate) const SEARCH_SECS: f64 = 0.35;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// A configured rate with the ramp, before any request.
    Fresh,
    /// A configured rate growing from `RAMP_FROM` of itself, `RAMP_STEP` per success, until
    /// it is back or a push-back comes.
    Ramp,
    /// At the ceiling, or at the rate a server stated: no growth.
    Hold,
    /// No limit known yet: growing until the first push-back.
    Search,
    /// Verifying a first push-back's guess: held for [`PROBE_AFTER`] successes after the
    /// cooldown, then rising in small steps.
    Verify,
    /// After a push-back: back towards `HOLD × limit` from `from`, from `since` (the end of
    /// the cooldown); probing above it once [`PROBE_AFTER`] successes came.
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
    /// Two windows showed a burst behind the server's rate.
    burst: bool,
    phase: Phase,
    /// Push-backs before this instant answer requests sent before the last decrease.
    settled: Option<Instant>,
    /// When a push-back was last taken for a request delayed on its way.
    forgiven: Option<Instant>,
    /// When the ramp of a configured rate went through at the ceiling.
    through: Option<Instant>,
    /// Searching: the rate before the last increase (the highest that went through).
    passed: f64,
    /// Successes since the end of the last cooldown (or since the rise of a verification
    /// began: see [`probing`](Self::probing)).
    count: f64,
    /// When the rate began to rise above the rate held after the last push-back: the
    /// [`PROBE_AFTER`]-th success after the end of its cooldown.
    probing: Option<Instant>,
    /// The window the last push-back ended, if it was at most [`WINDOW_SECS`] long.
    window: Option<Window>,
    /// The window running now and when it started: at the end of the last cooldown, or at
    /// the first success.
    current: (Option<Instant>, Window),
}

impl Law {
    /// At `ceiling` until a server pushes back.
    pub(crate) fn held(ceiling: f64, floor: f64) -> Self {
        Law {
            phase: Phase::Hold,
            ..Law::capped(ceiling, floor)
        }
    }

    /// At `ceiling` until the first request is sent (or the first success reported), which
    /// starts the ramp.
    pub(crate) fn capped(ceiling: f64, floor: f64) -> Self {
        Law {
            ceiling,
            floor: floor.min(ceiling),
            rate: ceiling,
            limit: None,
            burst: false,
            phase: Phase::Fresh,
            settled: None,
            forgiven: None,
            through: None,
            passed: 0.0,
            count: 0.0,
            probing: None,
            window: None,
            current: (None, Window::default()),
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

    /// A push-back during the ramp or a search, of a request sent after one that tested
    /// `tested` and has not been refused: it went through, or its refusal would have come
    /// first (a limiter refuses at once, where a success may take the application's time).
    pub(crate) fn sent_before(&mut self, tested: f64) {
        match self.phase {
            Phase::Ramp => self.passed = self.passed.max(tested.min(self.ceiling)),
            Phase::Search => self.passed = self.passed.max(tested.min(self.rate)),
            _ => {}
        }
    }

    /// Whether a push-back now reads what went before it from the sends (see
    /// [`sent_before`](Self::sent_before)).
    pub(crate) fn bracketing(&self) -> bool {
        matches!(self.phase, Phase::Ramp | Phase::Search)
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

    /// Whether the ramp of a configured rate runs.
    pub(crate) fn ramping(&self) -> bool {
        self.phase == Phase::Ramp
    }

    /// Whether what each request tested (its gap to the one before) is weighed: ramping,
    /// searching or verifying below the ceiling.
    pub(crate) fn measuring(&self) -> bool {
        match self.phase {
            Phase::Ramp => true,
            Phase::Search | Phase::Verify => self.rate < self.ceiling,
            _ => false,
        }
    }

    /// Whether a guess is being verified: its steps are finer than a gap's jitter, so a
    /// refusal is read at the rate in force when the request went, not at its gap.
    pub(crate) fn verifying(&self) -> bool {
        self.phase == Phase::Verify
    }

    /// Whether the bucket must space its admissions from the instants they went (see
    /// `Shared::set_spaced`): while a limit is known or the ramp measures it, unless the
    /// server showed a burst.
    pub(crate) fn spaced(&self) -> bool {
        (self.limit.is_some() || self.phase == Phase::Ramp) && !self.burst
    }

    /// The fraction of the estimated limit the rate holds at.
    fn hold(&self) -> f64 {
        if self.burst {
            HOLD_BURST
        } else {
            HOLD
        }
    }

    fn set(&mut self, rate: f64) -> f64 {
        self.rate = rate.clamp(self.floor, self.ceiling);
        self.rate
    }

    /// A push-back at `now` of a request sent at the rate `refused`, with the server's
    /// `cooldown`; `measured`: the rate of successes over the last whole second. Returns the
    /// new rate, or `None` for a request sent before the last decrease (one per cooldown).
    pub(crate) fn pushed_back(
        &mut self,
        now: Instant,
        cooldown: Duration,
        refused: f64,
        measured: Option<f64>,
    ) -> Option<f64> {
        if self.settled.is_some_and(|s| now < s) {
            return None;
        }
        let since = now.checked_add(cooldown).unwrap_or(now);
        // How long after the end of the last cooldown this push-back came, and the successes
        // since.
        let after = self.current.0.map_or(f64::INFINITY, |s| {
            now.saturating_duration_since(s).as_secs_f64()
        });
        let count = std::mem::take(&mut self.count);
        // A window for the estimate behind a burst, ended by this push-back.
        let current = (after < WINDOW_SECS).then(|| Window {
            count,
            secs: after,
            ..std::mem::take(&mut self.current.1)
        });
        let previous = std::mem::replace(&mut self.window, current.clone())
            .filter(|w| (after - w.secs).abs() >= WINDOWS_APART_SECS);
        self.settled = Some(since);
        // Before any decrease (a first push-back), the rate the request went at.
        let first = refused.min(self.ceiling);
        let refused = refused.min(self.rate);
        let estimate = previous
            .as_ref()
            .zip(current.as_ref())
            .and_then(|(a, b)| Window::estimate(a, b))
            // Below half the rate refused it contradicts the refusals themselves.
            .filter(|r| *r >= refused * DECREASE)
            .map(|r| r.min(refused));
        let forgivable = self
            .forgiven
            .is_none_or(|f| now.saturating_duration_since(f).as_secs_f64() >= FORGIVE_EVERY_SECS);
        let (limit, deep) = match (self.phase, self.limit) {
            // The limit lies between the last rate that went through and the rate refused.
            // Nothing went through at a rate it tested (the first request, or the first
            // after a pause): a guess, verified upwards, as at a first push-back.
            (Phase::Search | Phase::Verify, _) if self.passed <= 0.0 => {
                return Some(self.guess(refused, measured, since));
            }
            (Phase::Search | Phase::Verify, _) => {
                let passed = self.passed.min(refused);
                let limit = if passed >= refused * HOLD {
                    passed
                } else {
                    (passed * refused).sqrt()
                };
                // A burst let rates above the server's through: two windows see behind it.
                let limit = match estimate {
                    Some(e) if e < BURST_SEEN * limit => {
                        self.burst = true;
                        e
                    }
                    _ => limit,
                };
                (limit, false)
            }
            // A step of the ramp refused, the one before it through: the limit lies between
            // them; take the highest rate that went through.
            (Phase::Ramp, _) if self.passed > 0.0 => (self.passed.min(refused), false),
            // The ceiling has gone through for seconds: a request was delayed on its way.
            // Hold just below the ceiling; refused again soon, the rate follows.
            (Phase::Hold, None)
                if self.through.is_some_and(|t| {
                    now.saturating_duration_since(t).as_secs_f64() >= FORGIVE_AFTER_SECS
                }) =>
            {
                self.forgiven = Some(now);
                (self.ceiling, false)
            }
            // A first push-back at the configured rate: guess half (a rate up to twice the
            // server's lands just below it), then verify upwards in small steps.
            (_, None) => {
                let refused = if matches!(self.phase, Phase::Fresh | Phase::Ramp) {
                    first
                } else {
                    refused
                };
                return Some(self.guess(refused, measured, since));
            }
            // Two push-backs within seconds of the end of pauses: the server refilled the
            // same burst during each, the difference is its rate.
            (_, Some(_)) if estimate.is_some() => {
                self.burst = true;
                (estimate.unwrap_or(refused), false)
            }
            // Refused seconds after a pause at a rate that went through since, by a server
            // without a burst: a request delayed on its way. The estimate holds.
            (Phase::Recover { .. }, Some(limit))
                if !self.burst
                    && forgivable
                    && after >= FORGIVE_AFTER_SECS
                    && refused <= limit * self.hold() * FORGIVE_ABOVE_HOLD =>
            {
                self.forgiven = Some(now);
                (limit, false)
            }
            // Refused soon after a pause: cut deep and come back fast, to measure.
            (_, Some(_)) if after < QUICK_SECS => (refused, true),
            // Probing slowly from just below a known limit: the rate refused is close.
            (_, Some(_)) => (refused, false),
        };
        let from = if deep {
            refused * DECREASE
        } else {
            limit * self.hold()
        };
        Some(self.cut(limit, from, since))
    }

    /// The limit guessed at half of what was sent (`refused`, or `measured` when lower and
    /// not 0), then verified upwards from the end of the cooldown `since`.
    fn guess(&mut self, refused: f64, measured: Option<f64>, since: Instant) -> f64 {
        let sent = measured
            .filter(|m| *m > 0.0)
            .map_or(refused, |m| m.min(refused));
        let guess = sent * DECREASE;
        self.limit = Some(guess);
        self.passed = 0.0;
        self.probing = None;
        self.phase = Phase::Verify;
        let rate = self.set(guess * self.hold());
        self.current = (Some(since), Window::at(rate));
        rate
    }

    fn cut(&mut self, limit: f64, from: f64, since: Instant) -> f64 {
        self.limit = Some(limit);
        let from = self.set(from);
        self.phase = Phase::Recover { since, from };
        self.current = (Some(since), Window::at(from));
        self.count = 0.0;
        self.probing = None;
        from
    }

    /// Another process estimated the limit at `limit` on a push-back whose cooldown ends at
    /// `since`: follow the same curve. Returns the new rate, or `None` when this one already
    /// acted on that cooldown or a later one.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
    pub(crate) fn adopt(&mut self, limit: f64, since: Instant) -> Option<f64> {
        if self.settled.is_some_and(|s| since <= s) {
            return None;
        }
        self.settled = Some(since);
        Some(self.cut(limit, limit * self.hold(), since))
    }

    /// The first request is about to be sent: a configured rate starts its ramp (the
    /// request itself goes at once). Returns the new rate.
    pub(crate) fn sending(&mut self) -> Option<f64> {
        (self.phase == Phase::Fresh).then(|| self.start_ramp())
    }

    fn start_ramp(&mut self) -> f64 {
        self.phase = Phase::Ramp;
        self.passed = 0.0;
        self.set(self.ceiling * RAMP_FROM)
    }

    /// A success at `now` of a request that tested the rate `tested`, if known (`0`: it
    /// tested none, the first request). Returns the new rate.
    pub(crate) fn succeeded(&mut self, now: Instant, tested: Option<f64>) -> f64 {
        // A configured rate is a window from its first success. A search is not: it starts
        // far below any server's rate, a few requests at a time.
        if self.current.0.is_none() && self.phase != Phase::Search {
            self.current = (Some(now), Window::at(self.rate));
        }
        if self.settled.is_none_or(|s| now >= s) {
            self.count += 1.0;
        }
        let rate = self.next_rate(now, tested);
        if let Some(start) = self.current.0.filter(|s| now >= *s) {
            let s = now.saturating_duration_since(start).as_secs_f64();
            self.current.1.record(s, rate);
        }
        rate
    }

    /// The rate after a success at `now` of a request sent at `tested`.
    fn next_rate(&mut self, now: Instant, tested: Option<f64>) -> f64 {
        match self.phase {
            Phase::Fresh => self.start_ramp(),
            Phase::Ramp => {
                // The rate this request tested (its gap to the one before), or the rate in force.
                match tested {
                    Some(t) => self.passed = self.passed.max(t.min(self.ceiling)),
                    None => self.passed = self.rate,
                }
                // Over once a request at the ceiling went through.
                if self.passed >= self.ceiling {
                    self.phase = Phase::Hold;
                    self.through = Some(now);
                    return self.set(self.ceiling);
                }
                self.set(self.rate * RAMP_STEP)
            }
            Phase::Hold => self.rate,
            Phase::Verify => {
                // Answers to requests sent before the push-back say nothing of the guess.
                if self.settled.is_some_and(|s| now < s) {
                    return self.rate;
                }
                // A request sent more than two intervals behind the one before it (the
                // first after the pause) tested nothing.
                if tested.is_none_or(|t| t >= DECREASE * self.rate) {
                    self.passed = self.rate;
                }
                if self.probing.is_none() {
                    if self.count < PROBE_AFTER {
                        return self.rate;
                    }
                    // The rise is a window of its own: the server's bucket stayed full
                    // while the guess held below its rate.
                    self.probing = Some(now);
                    self.count = 0.0;
                    self.current = (Some(now), Window::at(self.rate));
                }
                self.set(self.rate + VERIFY_STEP)
            }
            Phase::Search => {
                // The highest rate a request tested and went through: not the rate before
                // the last increase, which the first request (a start hint) never tested.
                self.passed = match tested {
                    Some(t) => self.passed.max(t.min(self.rate)),
                    None => self.rate,
                };
                let step = self.rate.min(1.0 / SEARCH_SECS);
                self.set(self.rate + step)
            }
            Phase::Recover { since, from } => {
                let limit = self.limit.unwrap_or(self.ceiling);
                let t = now.saturating_duration_since(since).as_secs_f64();
                let hold = self.hold();
                let target = hold * limit;
                let back = target - (target - from) * (-t / RECOVER_SECS).exp();
                if self.probing.is_none() && self.count >= PROBE_AFTER {
                    self.probing = Some(now);
                }
                let probe = self.probing.map_or(0.0, |p| {
                    let t = now.saturating_duration_since(p).as_secs_f64();
                    (1.0 - hold) * limit * (t / PROBE_SECS).powi(3)
                });
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

    /// A stated quota expired at `now` (no response said it again): a rate held below the
    /// ceiling goes back towards it, as after a push-back, and probes.
    pub(crate) fn unstated(&mut self, now: Instant) {
        if self.phase != Phase::Hold || self.rate >= self.ceiling {
            return;
        }
        self.limit = None;
        self.phase = Phase::Recover {
            since: now,
            from: self.rate,
        };
        self.count = 0.0;
        self.probing = None;
        self.current = (Some(now), Window::at(self.rate));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    /// `PROBE_AFTER - 1` successes 10 ms apart from `from`, at which the rate holds: the
    /// instant of the next one, which may raise it.
    fn hold_for_probe(law: &mut Law, from: Instant) -> Instant {
        let held = law.rate();
        let mut t = from;
        for _ in 1..PROBE_AFTER as u32 {
            assert_eq!(law.succeeded(t, None), held);
            t += secs(0.01);
        }
        t
    }

    /// A configured law pushed back at 100/s, verified up to `limit` and refused one step
    /// above it: (the law, the end of the second cooldown).
    fn verified(limit: f64) -> (Law, Instant) {
        let mut law = Law::capped(100.0, 1.0);
        let t0 = Instant::now();
        law.pushed_back(t0, secs(1.0), 100.0, None);
        let mut t = hold_for_probe(&mut law, t0 + secs(1.0));
        while law.rate() + VERIFY_STEP <= limit {
            t += secs(0.02);
            law.succeeded(t, None);
        }
        let refused = law.succeeded(t + secs(0.02), None);
        let t = t + secs(0.04);
        law.pushed_back(t, secs(1.0), refused, None).unwrap();
        (law, t + secs(1.0))
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_push_back_guesses_half_the_rate_refused_and_verifies_it_upwards() {
        let mut law = Law::capped(100.0, 1.0);
        let t0 = Instant::now();
        assert_eq!(law.pushed_back(t0, secs(1.0), 100.0, None), Some(48.0));
        assert_eq!(law.limit(), Some(50.0));
        // More answers to requests sent before the decrease: ignored, as their successes.
        let again = law.pushed_back(t0 + secs(0.5), secs(1.0), 100.0, None);
        assert_eq!(again, None);
        assert_eq!(law.succeeded(t0 + secs(0.6), None), 48.0);
        // After the cooldown the guess holds for `PROBE_AFTER` successes, then each success
        // raises the rate one small step…
        let t = hold_for_probe(&mut law, t0 + secs(1.0));
        let r = law.succeeded(t, None);
        assert!(close(r, 48.0 + VERIFY_STEP), "{r}");
        let r = law.succeeded(t + secs(0.01), None);
        assert!(close(r, 48.0 + 2.0 * VERIFY_STEP), "{r}");
        // …until a push-back one step above what went through: that is the limit.
        let (law, _) = verified(90.0);
        let limit = law.limit().unwrap();
        assert!((89.7..=90.0).contains(&limit), "{limit}");
        assert!(close(law.rate(), HOLD * limit), "{}", law.rate());
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_push_back_below_the_configured_rate_halves_what_was_sent() {
        let mut law = Law::capped(100.0, 1.0);
        let t0 = Instant::now();
        // Only 60 successes in the last second: the client sent well below its ceiling.
        let rate = law.pushed_back(t0, secs(1.0), 100.0, Some(60.0)).unwrap();
        assert!(close(rate, 28.8), "{rate}");
        assert_eq!(law.limit(), Some(30.0));
        // A whole second without a success is no rate at all: half the rate refused.
        let mut law = Law::capped(100.0, 1.0);
        assert_eq!(law.pushed_back(t0, secs(1.0), 100.0, Some(0.0)), Some(48.0));
        // Nor is it when verifying: refused again with nothing through, half again.
        let rate = law.pushed_back(t0 + secs(1.5), secs(1.0), 48.0, Some(0.0));
        assert_eq!(rate, Some(23.04));
        assert_eq!(law.limit(), Some(24.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_push_back_holds_just_below_the_rate_refused() {
        let (mut law, end) = verified(50.0);
        let limit = law.limit().unwrap();
        // Held there for `PROBE_AFTER` successes (1 s), then probing slowly: within 1 % of
        // the hold 10 s after the cooldown…
        let t = hold_for_probe(&mut law, end);
        assert!(close(law.succeeded(t, None), HOLD * limit));
        let r = law.succeeded(end + secs(10.0), None);
        assert!((HOLD * limit..HOLD * limit * 1.01).contains(&r), "{r}");
        // …refused 20 s later: a close estimate, a mild cut.
        let probed = law.succeeded(end + secs(20.0), None);
        let rate = law.pushed_back(end + secs(20.0), secs(1.0), probed, None);
        assert!(close(rate.unwrap(), HOLD * probed), "{rate:?}");
        assert_eq!(law.limit(), Some(probed));
        // Beyond the estimate, up to the ceiling.
        let t = hold_for_probe(&mut law, end + secs(21.0));
        law.succeeded(t, None);
        assert_eq!(law.succeeded(end + secs(400.0), None), 100.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_waits_for_its_successes_however_slowly_they_come() {
        // Successes a second apart: counted from the end of the cooldown, the probe would
        // put the rate at 2.4 times the limit by the 100th. The rate holds until then, and
        // the probe starts from the hold.
        let (mut law, end) = verified(50.0);
        let limit = law.limit().unwrap();
        let mut t = end;
        for _ in 0..PROBE_AFTER as u32 {
            assert!(close(law.succeeded(t, None), HOLD * limit));
            t += secs(1.0);
        }
        // Back at the estimate `PROBE_SECS` after the 100th success.
        let t = t - secs(1.0) + secs(PROBE_SECS);
        assert!(close(law.succeeded(t, None), limit));
    }

    #[tokio::test(start_paused = true)]
    async fn push_backs_soon_after_pauses_measure_the_rate_behind_a_burst() {
        // A server at 50/s with a burst of 10, which refills during each cooldown; the
        // client's estimate is too high.
        let (mut law, end) = verified(96.1);
        let high = law.limit().unwrap();
        // 10 + 50 · 0.2 = 20 successes, refused 0.2 s after the cooldown: cut deep, at once.
        for i in 0..20 {
            law.succeeded(end + secs(0.01 * f64::from(i)), None);
        }
        let refused = law.rate();
        let rate = law.pushed_back(end + secs(0.2), secs(1.0), refused, None);
        assert!(close(rate.unwrap(), DECREASE * refused), "{rate:?} {high}");
        // 10 + 50 · 0.5 = 35 successes, refused 0.5 s after: the rate is the difference.
        let end = end + secs(1.2);
        for i in 0..35 {
            law.succeeded(end + secs(0.01 * f64::from(i)), None);
        }
        let rate = law.pushed_back(end + secs(0.5), secs(1.0), 70.0, None);
        // 15 more in 0.3 s more, and what the client sent below 50/s in its first 45 ms
        // back from the deep cut (0.09 tokens): 50.3/s.
        let limit = law.limit().unwrap();
        assert!((50.0..51.0).contains(&limit), "{limit}");
        // Behind a burst, closer to it, and no longer spaced: the burst absorbs jitter.
        assert!(close(rate.unwrap(), HOLD_BURST * limit), "{rate:?}");
        assert!(!law.spaced());
    }

    /// A configured law after its first success, and the instant of the next one.
    fn ramping(ceiling: f64) -> (Law, Instant) {
        let mut law = Law::capped(ceiling, 1.0);
        let t0 = Instant::now();
        assert_eq!(law.rate(), ceiling);
        assert!(!law.spaced());
        assert_eq!(law.succeeded(t0, None), ceiling * RAMP_FROM);
        assert!(law.spaced(), "the ramp measures: spaced");
        (law, t0 + secs(0.02))
    }

    #[tokio::test(start_paused = true)]
    async fn a_configured_rate_ramps_back_from_its_first_success_in_a_few_steps() {
        let (mut law, mut t) = ramping(100.0);
        let mut steps = 0;
        while law.rate() < 100.0 {
            let before = law.rate();
            let rate = law.succeeded(t, None);
            assert!(close(rate, (before * RAMP_STEP).min(100.0)), "{rate}");
            t += secs(0.02);
            steps += 1;
        }
        assert_eq!(steps, 21);
        // Back at the ceiling once a request at it went through: nothing learned, nothing
        // spaced, no more growth.
        assert!(law.spaced());
        assert_eq!(law.succeeded(t, None), 100.0);
        assert_eq!((law.limit(), law.spaced()), (None, false));
        assert_eq!(law.succeeded(t + secs(0.02), None), 100.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_step_of_the_ramp_brackets_the_limit_with_one_push_back() {
        // A server without a burst at 50/s: every step up to 50/s goes through, the next
        // is refused.
        for server in [46.0, 50.0, 80.0, 99.0] {
            let (mut law, mut t) = ramping(100.0);
            let mut passed = law.rate();
            while law.rate() <= server {
                passed = law.rate();
                law.succeeded(t, None);
                t += secs(0.02);
            }
            let refused = law.rate();
            let rate = law.pushed_back(t, secs(1.0), refused, None).unwrap();
            let limit = law.limit().unwrap();
            assert!(close(limit, passed), "{server}: {limit} {passed} {refused}");
            // Just below the server, and held there: no guess to verify.
            assert!(rate < server && rate >= 0.92 * server, "{server}: {rate}");
            assert!(law.spaced());
            let after = law.succeeded(t + secs(1.5), None);
            assert!(after < server, "{server}: {after}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_that_went_through_ends_the_ramp_at_the_ceiling() {
        // Requests sent together (a configured burst) tested a rate above the ceiling.
        let (mut law, t) = ramping(100.0);
        assert_eq!(law.succeeded(t, Some(f64::INFINITY)), 100.0);
        assert_eq!((law.limit(), law.spaced()), (None, false));
        assert_eq!(law.succeeded(t + secs(0.01), Some(50.0)), 100.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_first_step_of_the_ramp_guesses_and_verifies() {
        // A server more than twice slower: the ramp's first step is refused, and says only
        // that the limit is below it.
        let (mut law, t) = ramping(100.0);
        let start = law.rate();
        let rate = law.pushed_back(t, secs(1.0), start, None).unwrap();
        assert_eq!(law.limit(), Some(start * DECREASE));
        assert!(close(rate, HOLD * start * DECREASE), "{rate}");
        let t = hold_for_probe(&mut law, t + secs(1.0));
        assert!(close(law.succeeded(t, None), rate + VERIFY_STEP));
    }

    /// Against nginx without a burst, a search from 1/s taken as a window, with a quick
    /// push-back after the first cooldown, read 50 r/s as 24.5.
    #[tokio::test(start_paused = true)]
    async fn a_search_is_not_a_window() {
        let mut law = Law::search(1.0, 1000.0, 0.5);
        let mut t = Instant::now();
        while law.rate() < 52.0 {
            t += secs(1.0 / law.rate());
            law.succeeded(t, None);
        }
        let first = law.pushed_back(t, secs(1.0), law.rate(), None).unwrap();
        let end = t + secs(1.0);
        for i in 0..17 {
            law.succeeded(end + secs(0.02 * f64::from(i)), None);
        }
        law.pushed_back(end + secs(0.354), secs(1.0), first, None);
        let limit = law.limit().unwrap();
        assert!(limit >= 0.9 * first, "{limit} after {first}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_search_estimates_between_the_last_rate_passed_and_the_rate_refused() {
        let mut law = Law::search(1.0, 1000.0, 0.5);
        let t0 = Instant::now();
        assert_eq!(law.succeeded(t0, None), 2.0);
        assert_eq!(law.succeeded(t0, None), 4.0);
        assert_eq!(law.succeeded(t0, None), 4.0 + 1.0 / SEARCH_SECS);
        // Refused at 6.86/s after 4/s went through: the geometric middle.
        let rate = law.pushed_back(t0, secs(1.0), law.rate(), None).unwrap();
        let middle = (4.0 * (4.0 + 1.0 / SEARCH_SECS)).sqrt();
        assert!(close(law.limit().unwrap(), middle), "{:?}", law.limit());
        assert!(close(rate, 0.96 * middle), "{rate}");

        // Steps within the hold margin: the last rate that went through.
        let mut law = Law::search(100.0, 1000.0, 0.5);
        let passed = law.rate();
        let refused = law.succeeded(t0, None);
        law.pushed_back(t0, secs(1.0), refused, None);
        assert_eq!(law.limit(), Some(passed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_search_weighs_the_gaps_it_tested_until_the_ceiling() {
        // A start hint refused on the second request: the first tested nothing (0), so
        // nothing went through, and the limit is guessed at half the rate refused.
        let mut law = Law::search(10.0, 1000.0, 0.5);
        let t0 = Instant::now();
        assert!(law.measuring());
        let refused = law.succeeded(t0, Some(0.0));
        assert_eq!(
            law.pushed_back(t0, secs(1.0), refused, None),
            Some(0.96 * refused / 2.0)
        );
        assert!(law.measuring(), "the guess is verified");
        // A success tested what its gap allowed, not the rate before the last increase.
        let mut law = Law::search(10.0, 1000.0, 0.5);
        law.succeeded(t0, Some(0.0));
        law.succeeded(t0, Some(8.0));
        let refused = law.rate();
        law.pushed_back(t0, secs(1.0), refused, None);
        let middle = (8.0 * refused).sqrt();
        assert!(close(law.limit().unwrap(), middle), "{:?}", law.limit());
        // At the ceiling nothing is left to measure.
        let mut law = Law::search(10.0, 20.0, 0.5);
        law.succeeded(t0, Some(0.0));
        assert!(law.measuring());
        for _ in 0..4 {
            let tested = law.rate();
            law.succeeded(t0, Some(tested));
        }
        assert_eq!(law.rate(), 20.0);
        assert!(!law.measuring());
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_holds() {
        let mut law = Law::search(1.0, 1000.0, 0.5);
        let t0 = Instant::now();
        for _ in 0..20 {
            assert!(law.pushed_back(t0, Duration::ZERO, 1e9, None).is_some());
        }
        assert_eq!(law.rate(), 0.5);
    }

    #[test]
    fn a_stated_quota_is_taken_at_once_within_the_bounds() {
        let mut law = Law::search(1.0, 40.0, 0.1);
        assert_eq!(law.stated(25.0), 25.0);
        assert_eq!(law.succeeded(Instant::now(), None), 25.0);
        assert_eq!(law.stated(80.0), 40.0);
    }
}
