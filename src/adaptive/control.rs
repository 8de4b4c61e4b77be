//! [`Control`]: one bucket's [`Law`] as a state machine; each event returns the [`Decision`]
//! the bucket applies.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::law::{Law, DECREASE};
use super::meter::Meter;
use super::sends::Sends;
use super::Cut;
use crate::observe::Ignored;
use crate::Quota;

/// A new rate is applied when it moved by this fraction (at once after a push-back).
const APPLY_STEP: f64 = 0.01;
/// How often, at most, a control whose limit other processes share asks what they learned.
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
const ASK_EVERY: Duration = Duration::from_millis(250);
/// Rates remembered, for requests still in flight.
const HISTORY: usize = 64;

/// The lowest rate a push-back can lead to when nothing else says: one token an hour.
pub(crate) const DEFAULT_FLOOR: f64 = 1.0 / 3600.0;

/// The longest a stated rate lasts without a response saying it again.
pub(crate) const STATED_AT_MOST: Duration = Duration::from_secs(3600);

/// How long a stated rate lasts unrestated: two gaps at it, within 1 min and [`STATED_AT_MOST`].
fn stated_for(rate: f64) -> Duration {
    let gaps = 2.0 / rate;
    if gaps.is_finite() && gaps >= 0.0 {
        Duration::from_secs_f64(gaps.clamp(60.0, STATED_AT_MOST.as_secs_f64()))
    } else {
        STATED_AT_MOST
    }
}

/// How a bucket's rate reacts to push-back: chosen on the builder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    /// Lower on push-back, back up on success, never above the configured rate.
    Converge,
    /// Always the configured rate.
    Fixed,
    /// Search from `start` tokens per second, never below `floor`.
    Search { start: f64, floor: f64 },
}

/// What the bucket does after an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Decision {
    /// The rate in force, tokens per second.
    pub(crate) rate: f64,
    /// Whether the bucket spaces its admissions from the instants they went.
    pub(crate) spaced: bool,
    /// The quota to enforce from now on, when the rate moved enough to apply.
    pub(crate) enforce: Option<Quota>,
    /// A push-back acted on, to tell the other processes sharing the limit.
    pub(crate) publish: Option<Cut>,
}

/// The rate control of one bucket.
#[derive(Debug)]
pub(crate) struct Control {
    /// The configured quota: the ceiling, and the shape of every effective quota.
    configured: Quota,
    /// `None`: the rate stays at the configured one (pauses only).
    law: Option<Law>,
    /// A configured rate ramps up from its first request (see [`Law::capped`]).
    ramp: bool,
    /// Other processes share the limit: this process's gaps and successes are not the limit's.
    shared: bool,
    /// The rate applied to the bucket last.
    applied: f64,
    /// The latest rates applied, with their instants.
    history: VecDeque<(Instant, f64)>,
    /// The rate a server stated last, taken when it first says it.
    stated: Option<f64>,
    /// When the rate stated last expires ([`stated_for`]).
    stated_until: Option<Instant>,
    /// The successes of the last second.
    meter: Meter,
    /// The requests sent while the ramp, a search or a verification runs.
    sends: Sends,
    /// Nothing sent yet: the first request sent starts the ramp.
    fresh: bool,
    /// The ramp, a search or a verification runs: the gaps between sends are kept.
    measuring: bool,
    /// A pause began and the first request after it is not known yet.
    after_pause: bool,
    /// When the last push-back was acted on: requests sent before it lower nothing more.
    decided: Option<Instant>,
    /// The end of the latest pause (a push-back's cooldown).
    resume: Option<Instant>,
    /// The first request sent after the latest pause, and whether it went alone.
    first_after: Option<(Instant, bool)>,
    /// The push-back acted on last, as read back from the shared limit ([`Cut::shared`]).
    acted: Option<Cut>,
    /// When this control last asked what other processes learned.
    asked: Option<Instant>,
}

impl Control {
    /// A control at `configured`; `shared`: other processes share the limit.
    pub(crate) fn new(
        configured: Quota,
        mode: Mode,
        ramp: bool,
        shared: bool,
        now: Instant,
    ) -> Self {
        let ceiling = configured.per_second_f64();
        let law = match mode {
            Mode::Converge => Some(configured_law(ramp, ceiling, DEFAULT_FLOOR)),
            Mode::Fixed => None,
            Mode::Search { start, floor } => Some(Law::search(start, ceiling, floor)),
        };
        Control {
            configured,
            law,
            ramp,
            shared,
            applied: ceiling,
            history: VecDeque::from([(now, ceiling)]),
            stated: None,
            stated_until: None,
            meter: Meter::new(now),
            sends: Sends::default(),
            fresh: ramp && mode == Mode::Converge,
            measuring: matches!(mode, Mode::Search { .. }),
            after_pause: false,
            decided: None,
            resume: None,
            first_after: None,
            acted: None,
            asked: None,
        }
    }

    /// The configured quota (the ceiling).
    pub(crate) fn configured(&self) -> Quota {
        self.configured
    }

    /// The rate in force, tokens per second.
    pub(crate) fn rate(&self) -> f64 {
        self.law
            .as_ref()
            .map_or(self.configured.per_second_f64(), Law::rate)
    }

    /// The rate the server refused (or stated) last, if any.
    pub(crate) fn limit(&self) -> Option<f64> {
        self.law.as_ref().and_then(Law::limit)
    }

    /// Whether [`sending`](Self::sending) has anything to do.
    pub(crate) fn watches_sends(&self) -> bool {
        self.fresh || self.measuring || self.after_pause
    }

    /// The start rate, when it is not the configured one (a search).
    pub(crate) fn start(&mut self, now: Instant) -> Option<Decision> {
        let rate = self.law.as_ref().map(Law::rate)?;
        (rate != self.applied).then(|| self.apply(now, rate, true))
    }

    /// A server pushed back at `now` (`wall` on the system clock) for `cooldown`, on a
    /// request sent at `sent`: lower the rate, before the bucket is paused; the decision
    /// carries the cut for other processes. A request sent before the last push-back was
    /// acted on, or the first one after a pause sent alone, tests no rate: no news.
    pub(crate) fn pushed_back(
        &mut self,
        now: Instant,
        wall: SystemTime,
        cooldown: Duration,
        sent: Instant,
    ) -> Option<Decision> {
        let first = self
            .first_after
            .is_some_and(|(first, alone)| alone && first == sent);
        self.paused(now.checked_add(cooldown).unwrap_or(now));
        if self.decided.is_some_and(|decided| sent < decided) {
            return None;
        }
        if first {
            // Refused after a whole cooldown of silence, which no rate explains.
            self.decided = Some(now);
            self.meter.from = self.meter.from.max(self.resume.unwrap_or(now));
            trace_event!(
                info,
                "server refused the first request after a pause; holding the rate"
            );
            return None;
        }
        let verifying = self.law.as_ref().is_some_and(Law::verifying);
        // With a shared limit, the gap to this process's previous request is not the limit's.
        let local = !self.shared;
        let refused = match self.tested(sent) {
            Some(tested) if tested > 0.0 && !verifying && local => tested,
            // The request that started the ramp went before it, at the configured rate.
            Some(tested) if tested == 0.0 && self.law.as_ref().is_some_and(Law::ramping) => {
                self.configured.per_second_f64()
            }
            _ => self.rate_at(sent),
        };
        // This process's successes say nothing of a limit other processes share.
        let measured = self.meter.rate(now).filter(|_| local);
        if local && self.law.as_ref().is_some_and(Law::bracketing) {
            let before = self
                .sends
                .before(sent)
                .map(|send| self.tested_by(send))
                .fold(0.0, f64::max);
            if let Some(law) = self.law.as_mut() {
                law.sent_before(before);
            }
        }
        let rate = self
            .law
            .as_mut()
            .and_then(|l| l.pushed_back(now, cooldown, refused, measured))?;
        self.decided = Some(now);
        self.measure_anew();
        self.meter.from = now.checked_add(cooldown).unwrap_or(now);
        trace_event!(info, rate, "server pushed back; lowering the rate");
        let mut decision = self.apply(now, rate, true);
        let limit = self.law.as_ref().and_then(Law::limit);
        let cut = limit
            .zip(wall.checked_add(cooldown))
            .map(|(limit, resume)| Cut { limit, resume });
        if let Some(cut) = cut {
            self.acted = Some(cut.shared());
        }
        decision.publish = cut.filter(|_| self.shared);
        Some(decision)
    }

    /// Another process acted on a push-back (`cut`, read at `now`, `wall` on the system
    /// clock): follow the same curve, unless this one already acted on it or a later one. A
    /// cut deeper than one push-back (below [`DECREASE`] times the rate) is ignored.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
    pub(crate) fn adopt(
        &mut self,
        now: Instant,
        wall: SystemTime,
        cut: Cut,
    ) -> Result<Option<Decision>, Ignored> {
        let since = match cut.resume.duration_since(wall) {
            Ok(ahead) => now.checked_add(ahead),
            Err(past) => now.checked_sub(past.duration()),
        };
        let Some(since) = since else {
            return Err(Ignored::SharedResume);
        };
        if self.acted == Some(cut.shared()) {
            return Ok(None);
        }
        if self
            .law
            .as_ref()
            .is_some_and(|l| cut.limit < DECREASE * l.rate())
        {
            return Err(Ignored::SharedRate);
        }
        if since > now {
            self.paused(since);
        }
        let rate = self.law.as_mut().and_then(|l| l.adopt(cut.limit, since));
        self.measure_over();
        let Some(rate) = rate else {
            return Ok(None);
        };
        self.acted = Some(cut.shared());
        self.decided = Some(now);
        self.meter.from = self.meter.from.max(since);
        trace_event!(
            info,
            rate,
            "another process was pushed back; lowering the rate"
        );
        Ok(Some(self.apply(now, rate, true)))
    }

    /// Whether to ask the shared limit what other processes learned (every [`ASK_EVERY`]).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
    pub(crate) fn ask_others(&mut self, now: Instant) -> bool {
        let due = self.shared
            && self.law.is_some()
            && self
                .asked
                .is_none_or(|asked| now.saturating_duration_since(asked) >= ASK_EVERY);
        if due {
            self.asked = Some(now);
        }
        due
    }

    /// A pause until `until` began: the first request sent after it is looked for.
    fn paused(&mut self, until: Instant) {
        if self.resume.is_none_or(|r| until > r) {
            self.resume = Some(until);
            self.first_after = None;
            self.after_pause = true;
        }
    }

    /// A request is sent at `sent`: the first starts the ramp, the ramp (a search, a
    /// verification) keeps when each went, and the first after a pause is noted.
    pub(crate) fn sending(&mut self, sent: Instant) -> Option<Decision> {
        let mut decision = None;
        if std::mem::take(&mut self.fresh) {
            if let Some(rate) = self.law.as_mut().and_then(Law::sending) {
                trace_event!(
                    debug,
                    rate,
                    "first request: the rate ramps to the configured one"
                );
                decision = Some(self.apply(sent, rate, true));
                self.measuring = true;
            }
        }
        if self.after_pause {
            self.after_pause_sent(sent);
        }
        if self.measuring {
            self.sends.keep(sent);
        }
        decision
    }

    /// Note a request sent at `sent` while the first one after a pause is looked for.
    fn after_pause_sent(&mut self, sent: Instant) {
        if self.resume.is_some_and(|r| sent < r) {
            return;
        }
        match self.first_after {
            None => self.first_after = Some((sent, true)),
            Some((first, _)) if first == sent => self.first_after = Some((first, false)),
            Some(_) => self.after_pause = false,
        }
    }

    /// The ramp, search or verification ended: stop keeping sends.
    fn measure_over(&mut self) {
        if self.measuring && !self.law.as_ref().is_some_and(Law::measuring) {
            self.measuring = false;
            self.sends.forget();
        }
    }

    /// A push-back: the gaps start again after the pause, kept while the law measures.
    fn measure_anew(&mut self) {
        self.sends.forget();
        self.measuring = self.law.as_ref().is_some_and(Law::measuring);
    }

    /// The rate a request sent at `sent` tested: `1 / gap` to the one before it, at most the
    /// rate in force then; `0` for the first. `None` when it was not sent while measuring.
    fn tested(&self, sent: Instant) -> Option<f64> {
        self.sends.find(sent).map(|send| self.tested_by(send))
    }

    /// The rate the send `(sent, gap)` tested (see [`tested`](Self::tested)).
    fn tested_by(&self, (sent, gap): (Instant, Option<Duration>)) -> f64 {
        gap.map_or(0.0, |gap| (1.0 / gap.as_secs_f64()).min(self.rate_at(sent)))
    }

    /// The rate in force at `at`; the oldest remembered when `at` is older still.
    fn rate_at(&self, at: Instant) -> f64 {
        self.history
            .iter()
            .rev()
            .find(|(t, _)| *t <= at)
            .or(self.history.front())
            .map_or(self.applied, |(_, r)| *r)
    }

    /// A request sent at `sent` succeeded at `now`; `stated`: the rate the server stated.
    pub(crate) fn succeeded(
        &mut self,
        now: Instant,
        sent: Option<Instant>,
        stated: Option<f64>,
    ) -> Option<Decision> {
        // Only the ramp, a search and a verification weigh what a success tested.
        let measuring = self.law.as_ref().is_some_and(Law::measuring);
        let local = !self.shared;
        let tested = sent.filter(|_| measuring).map(|s| {
            self.tested(s)
                .filter(|_| local)
                .unwrap_or_else(|| self.rate_at(s))
        });
        self.meter.record(now);
        // A stated rate lasts while responses say it again; then the rate probes.
        match stated {
            Some(s) => self.stated_until = now.checked_add(stated_for(s)),
            None if self.stated_until.is_some_and(|u| now >= u) => {
                self.stated_until = None;
                self.stated = None;
                if let Some(law) = self.law.as_mut() {
                    law.unstated(now);
                }
            }
            None => {}
        }
        // A stated rate is taken when it changes by a step or more.
        let stated = stated.filter(|s| {
            self.stated
                .is_none_or(|old| (s - old).abs() >= APPLY_STEP * old)
        });
        let law = self.law.as_mut()?;
        let rate = match stated {
            Some(stated) => law.stated(stated),
            None => law.succeeded(now, tested),
        };
        self.measure_over();
        if stated.is_some() {
            self.stated = stated;
        }
        // A stated quota is applied exactly; a growing rate in steps.
        let exact = stated.is_some() && rate != self.applied;
        Some(self.apply(now, rate, exact))
    }

    /// A new configured quota: the rate restarts at it, forgetting what was learned.
    pub(crate) fn reset(&mut self, quota: Quota, now: Instant) {
        let ceiling = quota.per_second_f64();
        self.configured = quota;
        self.applied = ceiling;
        self.history = VecDeque::from([(now, ceiling)]);
        self.stated = None;
        self.stated_until = None;
        self.meter = Meter::new(now);
        if let Some(law) = self.law.as_mut() {
            *law = configured_law(self.ramp, ceiling, law.floor());
            self.fresh = self.ramp;
        }
        self.measuring = false;
        self.sends.forget();
        self.decided = None;
        self.resume = None;
        self.first_after = None;
        self.after_pause = false;
    }

    /// The decision to go to `rate` at `now`, enforced when it moved a step, or `always`.
    fn apply(&mut self, now: Instant, rate: f64, always: bool) -> Decision {
        let mut decision = Decision {
            rate,
            spaced: self.law.as_ref().is_some_and(Law::spaced),
            enforce: None,
            publish: None,
        };
        let step = (rate - self.applied).abs() / self.applied;
        if !always && step < APPLY_STEP {
            return decision;
        }
        let Some(quota) = effective(self.configured, rate) else {
            return decision;
        };
        self.applied = rate;
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((now, rate));
        decision.enforce = Some(quota);
        decision
    }
}

/// The law of a configured rate: with its ramp, or at the ceiling until a push-back.
fn configured_law(ramp: bool, ceiling: f64, floor: f64) -> Law {
    if ramp {
        Law::capped(ceiling, floor)
    } else {
        Law::held(ceiling, floor)
    }
}

/// The configured quota's count and burst over the period giving `rate` tokens per second;
/// `None` for a rate too low to represent.
pub(crate) fn effective(configured: Quota, rate: f64) -> Option<Quota> {
    let ceiling = configured.per_second_f64();
    if rate.is_nan() || rate <= 0.0 || rate >= ceiling {
        return Some(configured);
    }
    let period = configured.period().as_nanos() as f64 * ceiling / rate;
    if !period.is_finite() || period >= u64::MAX as f64 {
        return None;
    }
    let period = Duration::from_nanos(period.round() as u64).max(configured.period());
    Quota::try_new(configured.count(), period)
        .and_then(|q| q.try_burst(configured.burst_size()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_quota_keeps_the_shape_and_never_exceeds_the_ceiling() {
        let q = Quota::per_second(100).burst(10);
        let half = effective(q, 50.0).unwrap();
        assert_eq!(half.interval(), Duration::from_millis(20));
        assert_eq!((half.count(), half.burst_size()), (100, 10));
        assert_eq!(effective(q, 500.0), Some(q));
        assert_eq!(effective(q, f64::NAN), Some(q));
        assert_eq!(effective(q, 1e-300), None);
    }

    /// A process reads back the push-backs of every process sharing a limit, its own
    /// included, and converts their wall-clock instants to its own clock: its own read back
    /// (here two seconds later by tokio's paused clock) is no new push-back, and the rate it
    /// climbed since stays.
    #[tokio::test(start_paused = true)]
    async fn a_push_back_read_back_is_not_taken_again() {
        let now = Instant::now;
        let mut control = Control::new(Quota::per_second(100), Mode::Converge, false, true, now());
        let cooldown = Duration::from_secs(1);
        let decision = control.pushed_back(now(), SystemTime::now(), cooldown, now());
        let cut = decision.and_then(|d| d.publish).expect("a cut to publish");
        assert_eq!(control.rate(), 48.0);
        tokio::time::advance(Duration::from_secs(2)).await;
        // The guess holds for 100 successes, then rises.
        for _ in 0..110 {
            control.succeeded(now(), None, None);
        }
        let climbed = control.rate();
        assert!(climbed > 49.0, "{climbed}");
        assert_eq!(
            control.adopt(now(), SystemTime::now(), cut.shared()),
            Ok(None)
        );
        assert_eq!(control.rate(), climbed);
        // A later push-back of another process is followed.
        let later = Cut {
            limit: 30.0,
            resume: cut.resume + Duration::from_secs(5),
        };
        assert!(control
            .adopt(now(), SystemTime::now(), later)
            .unwrap()
            .is_some());
        assert_eq!(control.rate(), 30.0 * 0.96);
    }

    /// A stated rate holds while responses say it again; once they stop, it lasts at most
    /// an hour (here: a week-long window, one request a week), then the rate goes back up.
    #[tokio::test(start_paused = true)]
    async fn a_stated_rate_expires() {
        let now = Instant::now;
        let mut control = Control::new(Quota::per_second(100), Mode::Converge, false, false, now());
        let week = 1.0 / (7.0 * 86_400.0);
        control.succeeded(now(), None, Some(week));
        // Down to the floor, one an hour.
        let held = control.rate();
        assert_eq!(held, DEFAULT_FLOOR);
        tokio::time::advance(STATED_AT_MOST - Duration::from_secs(1)).await;
        control.succeeded(now(), None, None);
        assert_eq!(control.rate(), held);
        tokio::time::advance(Duration::from_secs(1)).await;
        control.succeeded(now(), None, None);
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(1)).await;
            control.succeeded(now(), None, None);
        }
        assert!(control.rate() > 90.0, "{}", control.rate());
        // Said again, it is taken again.
        control.succeeded(now(), None, Some(week));
        assert_eq!(control.rate(), held);
        // A rate of 1/s stated lasts a minute.
        control.succeeded(now(), None, Some(1.0));
        tokio::time::advance(Duration::from_secs(59)).await;
        control.succeeded(now(), None, None);
        assert_eq!(control.rate(), 1.0);
        tokio::time::advance(Duration::from_secs(5)).await;
        control.succeeded(now(), None, None);
        tokio::time::advance(Duration::from_secs(5)).await;
        control.succeeded(now(), None, None);
        assert!(control.rate() > 90.0, "{}", control.rate());
    }

    /// A cut deeper than one push-back makes (a limit below half the rate in force) is no
    /// process's: it is ignored, and the rate stays.
    #[tokio::test(start_paused = true)]
    async fn a_cut_deeper_than_one_push_back_is_ignored() {
        let now = Instant::now;
        let mut control = Control::new(Quota::per_second(100), Mode::Converge, false, true, now());
        let poisoned = Cut {
            limit: 1.0 / 3600.0,
            resume: SystemTime::now() + Duration::from_secs(1),
        };
        let rate = control.rate();
        let ignored = control.adopt(now(), SystemTime::now(), poisoned);
        assert_eq!(ignored, Err(Ignored::SharedRate));
        assert_eq!(control.rate(), rate);
        let half = Cut {
            limit: rate / 2.0,
            ..poisoned
        };
        assert!(control
            .adopt(now(), SystemTime::now(), half)
            .unwrap()
            .is_some());
        assert_eq!(control.rate(), rate / 2.0 * 0.96);
    }

    /// A cut is published only when other processes share the limit.
    #[tokio::test(start_paused = true)]
    async fn a_cut_is_published_only_for_a_shared_limit() {
        for shared in [false, true] {
            let now = Instant::now();
            let mut control =
                Control::new(Quota::per_second(100), Mode::Converge, false, shared, now);
            let decision = control
                .pushed_back(now, SystemTime::now(), Duration::from_secs(1), now)
                .unwrap();
            assert_eq!(decision.publish.is_some(), shared);
            let enforced = decision.enforce.unwrap().per_second_f64();
            assert!((enforced - 48.0).abs() < 1e-3, "{enforced}");
        }
    }
}
