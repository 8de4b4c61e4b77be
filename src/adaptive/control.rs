//! [`Control`]: one bucket's [`Law`], applied to the bucket through `set_quota`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::law::Law;
use super::Cut;
use crate::bucket::Shared;
use crate::Quota;

/// A new rate is applied to the bucket when it differs from the one in force by this
/// fraction or more (or at once after a push-back or a stated quota).
const APPLY_STEP: f64 = 0.01;

/// The rate control of one bucket, shared by its clones.
#[derive(Debug)]
pub(crate) struct Control {
    state: Mutex<State>,
    /// The rate in force, in tokens per second (`f64` bits), for lock-free reads.
    rate: AtomicU64,
    /// Nothing sent yet: the first request sent may start the ramp of a configured rate.
    fresh: AtomicBool,
    /// The ramp of a configured rate, a search or a verification runs: the gaps between
    /// sends are kept.
    measuring: AtomicBool,
    /// A pause began and the first request after it is not known yet: sends are looked at.
    after_pause: AtomicBool,
    /// When this control last asked a remote limit what other processes learned (ns since
    /// `origin`; 0: never).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares it
    synced: AtomicU64,
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    origin: Instant,
}

/// How often, at most, a bucket asks a remote limit what other processes learned.
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
const SYNC_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug)]
struct State {
    /// The configured quota: the ceiling, and the shape (count, period, burst) of every
    /// effective quota.
    configured: Quota,
    /// `None`: the rate stays at the configured one (pauses only).
    law: Option<Law>,
    /// The rate applied to the bucket last.
    applied: f64,
    /// The latest rates applied, with their instants: the rate a refused request was sent at.
    history: VecDeque<(Instant, f64)>,
    /// The rate a server stated last: taken once, when it first says it (a push-back at
    /// that rate then lowers the rate as any push-back does).
    stated: Option<f64>,
    /// The successes of the last second.
    meter: Meter,
    /// While the ramp of a configured rate, a search or a verification runs: every request
    /// sent (through [`RetryAfterLayer`](crate::RetryAfterLayer)) and how long after the one
    /// before it; a server without a burst admits a request only that far behind the one
    /// before, so its answer says whether the server's rate is above `1 / gap`.
    sends: VecDeque<(Instant, Option<Duration>)>,
    /// The latest request sent, while they run.
    last_send: Option<Instant>,
    /// When the last push-back was acted on (the rate lowered, here or in another process,
    /// or held): a push-back of a request sent before it answers what was decided then, and
    /// lowers nothing more.
    decided: Option<Instant>,
    /// The end of the latest pause (a push-back's cooldown).
    resume: Option<Instant>,
    /// The first request sent after the latest pause, and whether it went alone (no other
    /// at the same instant): refused, the server refused a request after a whole cooldown
    /// of silence, which no rate explains.
    first_after: Option<(Instant, bool)>,
    /// The push-back this bucket acted on last, made or adopted, as processes read it back
    /// ([`Cut::shared`]): read back from a remote limit, it is no news. (Converting its
    /// wall-clock instant to this process's clock would place it a little later or earlier
    /// each time, and a little later would be taken for a new push-back, undoing the rate
    /// climbed since.)
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares it
    acted: Option<Cut>,
}

/// Successes counted in bins of `1 / BINS` s over the last second, from an instant on (the
/// start, or the end of the last cooldown: a cooldown's silence says nothing of the rate).
#[derive(Debug)]
struct Meter {
    origin: Instant,
    /// Bin `i` of the ring counts the successes of bin number `n ≡ i (mod BINS)`.
    bins: [u32; BINS],
    /// The number of the latest bin counted (since `origin`).
    head: u64,
    /// Measure only over time after this instant.
    from: Instant,
}

/// Bins of the success meter: one second in 50 ms steps.
const BINS: usize = 20;
const BIN: Duration = Duration::from_millis(50);

impl Meter {
    fn new(now: Instant) -> Self {
        Meter {
            origin: now,
            bins: [0; BINS],
            head: 0,
            from: now,
        }
    }

    fn bin(&self, at: Instant) -> u64 {
        (at.saturating_duration_since(self.origin).as_nanos() / BIN.as_nanos()) as u64
    }

    /// Move the ring up to the bin of `now`, emptying the bins it passes.
    fn advance(&mut self, now: Instant) {
        let bin = self.bin(now);
        if bin > self.head {
            for n in (self.head + 1)..=bin.min(self.head + BINS as u64) {
                self.bins[(n % BINS as u64) as usize] = 0;
            }
            self.head = bin;
        }
    }

    fn record(&mut self, now: Instant) {
        self.advance(now);
        let i = (self.head % BINS as u64) as usize;
        self.bins[i] = self.bins[i].saturating_add(1);
    }

    /// Successes per second over the last second, if all of it lies after `from`.
    fn rate(&mut self, now: Instant) -> Option<f64> {
        if now.saturating_duration_since(self.from) < BIN * BINS as u32 {
            return None;
        }
        self.advance(now);
        Some(self.bins.iter().map(|n| f64::from(*n)).sum())
    }
}

/// Rates remembered, for requests still in flight.
const HISTORY: usize = 64;
/// Sends remembered while they run, for requests still in flight.
const SENDS: usize = 256;

impl State {
    /// No send kept: the next one tests nothing.
    fn forget_sends(&mut self) {
        self.sends.clear();
        self.last_send = None;
    }

    /// The rate a request sent at `sent` during the ramp, a search or a verification tested:
    /// `1 / gap` to the request sent before it, at most the rate in force when it went (a
    /// gap shortened by the timer's ticks does not make the ramp go faster); `0` for the
    /// first request. `None` when it was not sent then.
    fn tested(&self, sent: Instant) -> Option<f64> {
        let i = self.sends.binary_search_by_key(&sent, |(t, _)| *t).ok()?;
        Some(self.tested_by(self.sends[i]))
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

/// The lowest rate a push-back can lead to when nothing else says: one token an hour.
pub(crate) const DEFAULT_FLOOR: f64 = 1.0 / 3600.0;

impl Control {
    pub(crate) fn new(configured: Quota, mode: Mode) -> Self {
        let ceiling = configured.per_second_f64();
        let law = match mode {
            Mode::Converge => Some(Law::capped(ceiling, DEFAULT_FLOOR)),
            Mode::Fixed => None,
            Mode::Search { start, floor } => Some(Law::search(start, ceiling, floor)),
        };
        let rate = law.as_ref().map_or(ceiling, Law::rate);
        let fresh = mode == Mode::Converge;
        Control {
            state: Mutex::new(State {
                configured,
                law,
                applied: ceiling,
                history: VecDeque::from([(Instant::now(), ceiling)]),
                stated: None,
                meter: Meter::new(Instant::now()),
                sends: VecDeque::new(),
                last_send: None,
                decided: None,
                resume: None,
                first_after: None,
                acted: None,
            }),
            rate: AtomicU64::new(rate.to_bits()),
            fresh: AtomicBool::new(fresh),
            measuring: AtomicBool::new(matches!(mode, Mode::Search { .. })),
            after_pause: AtomicBool::new(false),
            synced: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock; recover the data if one ever did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configured quota (the ceiling).
    pub(crate) fn configured(&self) -> Quota {
        self.lock().configured
    }

    /// The rate in force, tokens per second.
    pub(crate) fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Acquire))
    }

    /// The rate the server refused (or stated) last, if any.
    pub(crate) fn limit(&self) -> Option<f64> {
        self.lock().law.as_ref().and_then(Law::limit)
    }

    /// Apply the start rate, when it is not the configured one (a search).
    pub(crate) fn start(&self, shared: &Shared) {
        let mut st = self.lock();
        if let Some(rate) = st.law.as_ref().map(Law::rate) {
            if rate != st.applied {
                self.apply(&mut st, shared, rate, true);
            }
        }
    }

    /// A server pushed back for `cooldown` on a request sent at `sent`: lower the rate,
    /// before the bucket is paused. Returns the cut, for other processes, if it made one.
    ///
    /// A request sent before the last push-back was acted on went at the old rate: its
    /// push-back is no news, however long after the cooldown it comes (a `Retry-After: 0`,
    /// or answers slower than the cooldown). Each one taken as news would lower the rate
    /// again, once per request in flight, down to the floor. And the first request after a
    /// pause, sent alone, tests no rate: refused, the server's quota ran out for a while
    /// (an outage answering `429` with `Retry-After: 1` for a minute), and each such refusal
    /// taken as news would leave the rate at a fraction of a request per second when the
    /// server comes back.
    pub(crate) fn pushed_back(
        &self,
        shared: &Shared,
        cooldown: Duration,
        sent: Instant,
    ) -> Option<Cut> {
        let mut st = self.lock();
        let now = Instant::now();
        let first = st
            .first_after
            .is_some_and(|(first, alone)| alone && first == sent);
        self.paused(&mut st, now.checked_add(cooldown).unwrap_or(now));
        if st.decided.is_some_and(|decided| sent < decided) {
            return None;
        }
        if first {
            // Refused after a whole cooldown of silence: the server's quota ran out for a
            // while (or another client took it), which no rate explains. The pause holds,
            // the rate too; the requests sent meanwhile follow this decision.
            st.decided = Some(now);
            st.meter.from = st.meter.from.max(st.resume.unwrap_or(now));
            trace_event!(
                info,
                "server refused the first request after a pause; holding the rate"
            );
            return None;
        }
        let verifying = st.law.as_ref().is_some_and(Law::verifying);
        // With a limit other processes share, the gap to this process's previous request
        // is not what the limit saw (others sent in between): the rate in force then is.
        let local = shared.remote().is_none();
        let refused = match st.tested(sent) {
            Some(tested) if tested > 0.0 && !verifying && local => tested,
            // The request that started the ramp went before it, at the configured rate.
            Some(tested) if tested == 0.0 && st.law.as_ref().is_some_and(Law::ramping) => {
                st.configured.per_second_f64()
            }
            _ => st.rate_at(sent),
        };
        // The successes of this process alone: with a limit other processes share, its
        // share of the rate, not what the limit let through (half of it would guess the
        // server's rate at a fraction of the shared one).
        let measured = st.meter.rate(now).filter(|_| local);
        if local && st.law.as_ref().is_some_and(Law::bracketing) {
            let before = st
                .sends
                .iter()
                .take_while(|(t, _)| *t < sent)
                .map(|send| st.tested_by(*send))
                .fold(0.0, f64::max);
            if let Some(law) = st.law.as_mut() {
                law.sent_before(before);
            }
        }
        let rate = st
            .law
            .as_mut()
            .and_then(|l| l.pushed_back(now, cooldown, refused, measured));
        let rate = rate?;
        st.decided = Some(now);
        self.measure_anew(&mut st);
        st.meter.from = now.checked_add(cooldown).unwrap_or(now);
        trace_event!(info, rate, "server pushed back; lowering the rate");
        self.apply(&mut st, shared, rate, true);
        let limit = st.law.as_ref().and_then(Law::limit)?;
        let resume = SystemTime::now().checked_add(cooldown)?;
        let cut = Cut { limit, resume };
        st.acted = Some(cut.shared());
        Some(cut)
    }

    /// Another process acted on a push-back: follow the same curve, unless this one already
    /// acted on that cooldown or a later one.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
    pub(crate) fn adopt(&self, shared: &Shared, cut: Cut) {
        let now = Instant::now();
        let since = match cut.resume.duration_since(SystemTime::now()) {
            Ok(ahead) => now.checked_add(ahead),
            Err(past) => now.checked_sub(past.duration()),
        };
        let Some(since) = since else { return };
        let mut st = self.lock();
        if st.acted == Some(cut.shared()) {
            return;
        }
        if since > now {
            self.paused(&mut st, since);
        }
        let rate = st.law.as_mut().and_then(|l| l.adopt(cut.limit, since));
        self.measure_over(&mut st);
        if let Some(rate) = rate {
            st.acted = Some(cut.shared());
            st.decided = Some(now);
            st.meter.from = st.meter.from.max(since);
            trace_event!(
                info,
                rate,
                "another process was pushed back; lowering the rate"
            );
            self.apply(&mut st, shared, rate, true);
        }
    }

    /// A pause until `until` began: the first request sent after it is looked for.
    fn paused(&self, st: &mut State, until: Instant) {
        if st.resume.is_none_or(|r| until > r) {
            st.resume = Some(until);
            st.first_after = None;
            self.after_pause.store(true, Ordering::Release);
        }
    }

    /// Note a request sent at `sent` while the first one after a pause is looked for: the
    /// first, another at the same instant, or the next one (the search ends).
    fn after_pause_sent(&self, sent: Instant) {
        let mut st = self.lock();
        if !self.after_pause.load(Ordering::Acquire) || st.resume.is_some_and(|r| sent < r) {
            return;
        }
        match st.first_after {
            None => st.first_after = Some((sent, true)),
            Some((first, _)) if first == sent => st.first_after = Some((first, false)),
            Some(_) => self.after_pause.store(false, Ordering::Release),
        }
    }

    /// Whether it is time to ask a remote limit what other processes learned (and if so,
    /// the clock starts again).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
    pub(crate) fn sync_due(&self) -> bool {
        if self.lock().law.is_none() {
            return false;
        }
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let last = self.synced.load(Ordering::Acquire);
        let every = SYNC_EVERY.as_nanos() as u64;
        (last == 0 || now.saturating_sub(last) >= every)
            && self
                .synced
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// A request is sent at `sent`: the first one starts the ramp of a configured rate,
    /// and the ramp (a search, a verification) keeps when each went. Lock-free once they
    /// are over.
    pub(crate) fn sending(&self, shared: &Shared, sent: Instant) {
        if self.fresh.load(Ordering::Acquire) && self.fresh.swap(false, Ordering::AcqRel) {
            let mut st = self.lock();
            if let Some(rate) = st.law.as_mut().and_then(Law::sending) {
                trace_event!(
                    debug,
                    rate,
                    "first request: the rate ramps to the configured one"
                );
                self.apply(&mut st, shared, rate, true);
                self.measuring.store(true, Ordering::Release);
            }
        }
        if self.after_pause.load(Ordering::Acquire) {
            self.after_pause_sent(sent);
        }
        if !self.measuring.load(Ordering::Acquire) {
            return;
        }
        let mut st = self.lock();
        if !self.measuring.load(Ordering::Acquire) {
            return;
        }
        let gap = st
            .last_send
            .map(|last| sent.saturating_duration_since(last));
        st.last_send = Some(sent.max(st.last_send.unwrap_or(sent)));
        if st.sends.len() == SENDS {
            st.sends.pop_front();
        }
        // Kept in order of sending, for the search by instant.
        let at = st.sends.partition_point(|(t, _)| *t <= sent);
        st.sends.insert(at, (sent, gap));
    }

    /// The ramp, search or verification ended (a push-back, back at the ceiling, a stated
    /// quota): stop keeping sends.
    fn measure_over(&self, st: &mut State) {
        if self.measuring.load(Ordering::Acquire) && !st.law.as_ref().is_some_and(Law::measuring) {
            self.measuring.store(false, Ordering::Release);
            st.forget_sends();
        }
    }

    /// A push-back: the gaps start again after the pause (the first request after it tested
    /// nothing), kept while the law measures (a guess is verified).
    fn measure_anew(&self, st: &mut State) {
        st.forget_sends();
        let measuring = st.law.as_ref().is_some_and(Law::measuring);
        self.measuring.store(measuring, Ordering::Release);
    }

    /// A request succeeded; `stated`: the rate the server's quota fields give, if any;
    /// `sent`: when it was sent, if known.
    pub(crate) fn succeeded(&self, shared: &Shared, stated: Option<f64>, sent: Option<Instant>) {
        let mut st = self.lock();
        let now = Instant::now();
        // Only the ramp, a search and a verification weigh what a success tested.
        let measuring = st.law.as_ref().is_some_and(Law::measuring);
        let local = shared.remote().is_none();
        let tested = sent.filter(|_| measuring).map(|s| {
            st.tested(s)
                .filter(|_| local)
                .unwrap_or_else(|| st.rate_at(s))
        });
        st.meter.record(now);
        // A stated rate is taken when it changes by a step or more (a pace read from
        // `Remaining / Reset` moves a little with every response).
        let stated = stated.filter(|s| {
            st.stated
                .is_none_or(|old| (s - old).abs() >= APPLY_STEP * old)
        });
        let Some(law) = st.law.as_mut() else { return };
        let rate = match stated {
            Some(stated) => law.stated(stated),
            None => law.succeeded(now, tested),
        };
        self.measure_over(&mut st);
        if stated.is_some() {
            st.stated = stated;
        }
        // A stated quota is applied exactly; a growing rate in steps.
        let exact = stated.is_some() && rate != st.applied;
        self.apply(&mut st, shared, rate, exact);
    }

    /// A new configured quota (from [`Bucket::set_quota`](crate::Bucket::set_quota)): the
    /// rate restarts at it, as the ceiling, forgetting what was learned (a search ends).
    pub(crate) fn reset(&self, quota: Quota) {
        let mut st = self.lock();
        let ceiling = quota.per_second_f64();
        st.configured = quota;
        st.applied = ceiling;
        st.history = VecDeque::from([(Instant::now(), ceiling)]);
        st.stated = None;
        st.meter = Meter::new(Instant::now());
        if let Some(law) = st.law.as_mut() {
            *law = Law::capped(ceiling, law.floor());
            self.fresh.store(true, Ordering::Release);
        }
        self.measuring.store(false, Ordering::Release);
        st.forget_sends();
        st.decided = None;
        st.resume = None;
        st.first_after = None;
        self.after_pause.store(false, Ordering::Release);
        self.rate.store(ceiling.to_bits(), Ordering::Release);
    }

    fn apply(&self, st: &mut State, shared: &Shared, rate: f64, always: bool) {
        self.rate.store(rate.to_bits(), Ordering::Release);
        shared.set_spaced(st.law.as_ref().is_some_and(Law::spaced));
        let step = (rate - st.applied).abs() / st.applied;
        if !always && step < APPLY_STEP {
            return;
        }
        let Some(quota) = effective(st.configured, rate) else {
            return;
        };
        st.applied = rate;
        if st.history.len() == HISTORY {
            st.history.pop_front();
        }
        st.history.push_back((Instant::now(), rate));
        shared.set_rate(quota);
        if let Some(o) = &shared.observer {
            o.rate(rate);
        }
    }
}

/// The configured quota's shape at `rate` tokens per second: the same count and burst over
/// a longer period. `None` when it cannot be built (a rate too low to represent).
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

    #[tokio::test(start_paused = true)]
    async fn the_meter_counts_the_last_whole_second_after_its_start() {
        let t0 = Instant::now();
        let mut meter = Meter::new(t0);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        for n in 0..150 {
            meter.record(ms(10 * n)); // 100 a second for 1.5 s
        }
        assert_eq!(meter.rate(ms(999)), None);
        let rate = meter.rate(ms(1_500)).unwrap();
        assert!((95.0..=105.0).contains(&rate), "{rate}");
        // Nothing for 3 s: the ring empties.
        assert_eq!(meter.rate(ms(4_500)), Some(0.0));
        // A cooldown's silence is not measured: a whole second after its end first.
        meter.from = ms(5_000);
        assert_eq!(meter.rate(ms(5_500)), None);
        meter.record(ms(5_600));
        assert_eq!(meter.rate(ms(6_000)), Some(1.0));
    }
}
