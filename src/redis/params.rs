//! The parameters of a Redis limit's scripts: derived from the quota and algorithm it was
//! built with ([`Shape`]), and the ones in force ([`Rates`]), which a new quota or a rate
//! control's new rate changes.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::error::RedisError;
use crate::{Algorithm, Quota};

/// Every value the scripts handle stays below 2^53 µs (exact in a Lua double): the Redis
/// clock (about 2^50.7 µs in 2025, 2^52 in 2112) plus this much.
const MAX_SPAN_US: u64 = 1 << 52;

/// How far ahead, at least, a waiter of the token or leaky bucket books its admission
/// instant in Redis (µs); at least the tolerance (the scripts' `H`).
const RESERVE_HORIZON_US: u64 = 1_000_000;

/// The arguments of the scripts in force in this process, read together once per call: a
/// call never mixes the values of two rates (say an interval already lengthened with the
/// tolerance of the rate before, which the scripts would refuse as bad arguments).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// The configured quota in force in this process: the ceiling of a rate control.
    pub(crate) quota: Quota,
    /// Emission interval `T`, µs (rounded up); a rate control may lengthen it
    /// ([`Rates::set_rate`]). Windows: the ramp's interval after a pause.
    pub(crate) interval_us: u64,
    /// `B`: the burst.
    pub(crate) burst: u32,
    /// GCRA tolerance `tau`, µs: `burst × interval` (token bucket) or `interval` (leaky
    /// bucket). The windows have none (`T`, which the scripts accept).
    pub(crate) tolerance_us: u64,
    /// `L`: what a window's state may hold (the scripts' clamps), and the largest request
    /// they take.
    pub(crate) limit: u32,
    /// `E`: windows, the tokens per window at the rate in force (`1..=max_cost`); the
    /// token and leaky bucket pass `L`.
    pub(crate) effective_limit: u32,
    /// The largest cost of one request: the burst (token and leaky bucket) or the tokens per
    /// window of the configured quota (windows), as for an in-process bucket.
    pub(crate) max_cost: u32,
    /// The largest time a valid reply can carry.
    pub(crate) reply_limit_us: u64,
    /// How far ahead a waiter books its instant, µs.
    pub(crate) reserve_us: u64,
    /// The parameters the state in Redis may still be kept in after a change, for the
    /// scripts to re-read it in the new ones: carried by every call until one is answered.
    pub(crate) convert: Option<Convert>,
    /// Moved by every change that sets `convert`: an answer clears only its own.
    generation: u64,
}

/// The parameters a state in Redis may have been written with, for a call to re-read it in
/// its own (`ARGV[12]`–`ARGV[14]`): its tokens never more than before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Convert {
    /// GCRA: the interval, µs, and the whole tokens of the tolerance (`tau / T`: the burst,
    /// or 1 for the leaky bucket).
    interval_us: u64,
    tokens: u64,
    /// Windows: the tokens per window.
    effective_limit: u32,
}

impl Convert {
    fn of(p: &Params) -> Self {
        Convert {
            interval_us: p.interval_us,
            tokens: p.tolerance_us / p.interval_us.max(1),
            effective_limit: p.effective_limit,
        }
    }

    /// One set of parameters that counts at most the tokens either would: a state not yet
    /// re-read in `self`'s may still be in `earlier`'s. A GCRA state `ahead` µs from full
    /// holds `tokens − ahead / interval` tokens; the fewest tokens with the shortest interval
    /// is below both lines. A window holds `E − count`: the smaller `E`.
    fn merge(self, earlier: Option<Convert>) -> Self {
        match earlier {
            None => self,
            Some(e) => Convert {
                interval_us: self.interval_us.min(e.interval_us),
                tokens: self.tokens.min(e.tokens),
                effective_limit: self.effective_limit.min(e.effective_limit),
            },
        }
    }

    /// `ARGV[12]`–`ARGV[14]`: the interval and tolerance (token and leaky bucket), `E`
    /// (windows).
    pub(crate) fn args(self) -> [u64; 3] {
        [
            self.interval_us,
            self.interval_us * self.tokens,
            u64::from(self.effective_limit),
        ]
    }
}

/// What the parameters are derived from: the algorithm and the shape the limit was built
/// with, which the state in Redis keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) algorithm: Algorithm,
    /// The quota at build.
    built: Quota,
    /// The window (the quota's period at build), µs (rounded up): it lays out the state in
    /// Redis, and stays.
    pub(crate) window_us: u64,
    /// Windows: the largest time a valid reply carries at the configured rate, but for the
    /// ramp's `L × T`.
    base_reply_us: u64,
    pub(crate) max_pause_us: u64,
}

impl Shape {
    /// The shape of `quota` under `algorithm`, checked: every value the scripts handle
    /// must stay exact in Lua's doubles.
    pub(crate) fn new(
        algorithm: Algorithm,
        quota: Quota,
        max_pause_us: u64,
    ) -> Result<Self, RedisError> {
        let interval_us = micros_up(quota.interval());
        let burst = quota.burst_size();
        let window_us = micros_up(quota.period());
        let limit = quota.count();
        let too_long = || {
            RedisError::config(
                "quota burst × interval, or max_pause, too long for the redis backend",
            )
        };
        let tau = interval_us.checked_mul(u64::from(burst));
        let reply_us = tau
            .and_then(|tau| tau.checked_mul(2))
            .and_then(|t| t.checked_add(max_pause_us))
            .filter(|&span| span <= MAX_SPAN_US)
            .ok_or_else(too_long)?;
        let base_reply_us = if algorithm.is_gcra() {
            gcra_spans(algorithm, interval_us, burst, max_pause_us)
                .ok_or_else(too_long)?
                .2
        } else {
            // Windows: waits and states reach a few windows past a pause and the booking
            // horizon (counted twice: once more for a ramp booked ahead), and the scripts
            // multiply counts by window times.
            let horizon = RESERVE_HORIZON_US.max(window_us);
            let span = window_us
                .checked_mul(4)
                .and_then(|w| w.checked_add(horizon))
                .and_then(|w| w.checked_add(reply_us))
                .filter(|&span| span <= MAX_SPAN_US);
            let product = window_us
                .checked_mul(u64::from(limit))
                .filter(|&p| p < MAX_SPAN_US * 2);
            match (span, product) {
                (Some(span), Some(_)) => span
                    .checked_add(horizon)
                    .filter(|&span| span <= MAX_SPAN_US)
                    .ok_or_else(too_long)?,
                _ => {
                    return Err(RedisError::config(
                        "quota count × period too large for a redis window algorithm \
                             (count × period in µs must stay below 2^53)",
                    ))
                }
            }
        };
        Ok(Shape {
            algorithm,
            built: quota,
            window_us,
            base_reply_us,
            max_pause_us,
        })
    }

    /// The parameters of the configured quota `configured` deciding at `effective`'s rate
    /// (no change to carry).
    fn derive(&self, configured: Quota, effective: Quota) -> Params {
        if self.algorithm.is_gcra() {
            self.derive_gcra(configured, effective)
        } else {
            self.derive_window(configured, effective)
        }
    }

    /// Token and leaky bucket: the interval of `effective`, never shorter than the
    /// configured one, capped at what the scripts can represent (an interval of years).
    fn derive_gcra(&self, configured: Quota, effective: Quota) -> Params {
        let burst = configured.burst_size();
        let (algorithm, pause) = (self.algorithm, self.max_pause_us);
        // The longest interval whose spans always fit: `3 × tau + max_pause + 1 s`.
        let most = ((MAX_SPAN_US - pause - RESERVE_HORIZON_US) / 3 / u64::from(burst)).max(1);
        let fit = |t: u64| {
            if gcra_spans(algorithm, t, burst, pause).is_some() {
                t
            } else {
                most
            }
        };
        let configured_us = fit(micros_up(configured.interval()));
        let interval_us = micros_up(effective.interval()).max(configured_us);
        let interval_us = if interval_us == configured_us {
            configured_us
        } else {
            fit(interval_us).max(configured_us)
        };
        let (tolerance_us, reserve_us, reply_limit_us) =
            gcra_spans(algorithm, interval_us, burst, pause).unwrap_or((
                interval_us,
                RESERVE_HORIZON_US,
                MAX_SPAN_US,
            ));
        let limit = self.built.count();
        Params {
            quota: configured,
            interval_us,
            burst,
            tolerance_us,
            limit,
            effective_limit: limit,
            max_cost: burst,
            reply_limit_us,
            reserve_us,
            convert: None,
            generation: 0,
        }
    }

    /// Windows: the width `W` stays (it lays out the state in Redis); the configured quota
    /// becomes its tokens per `W` (`⌊count × W / period⌋`, at least 1), and `effective`
    /// lowers that to `E` (see [`Rates::set_rate`]).
    fn derive_window(&self, configured: Quota, effective: Quota) -> Params {
        let width_ns = self.built.period_ns();
        // `W × L` stays below 2^54 (the scripts multiply counts by window times).
        let cap = u32::try_from((MAX_SPAN_US * 2 - 1) / self.window_us).unwrap_or(u32::MAX);
        let window_limit = per_width(width_ns, configured).clamp(1, cap.max(1));
        let effective_limit = per_width(width_ns, effective).clamp(1, window_limit);
        let limit = self.built.count().max(window_limit);
        let configured_us = micros_up(configured.interval());
        let interval_us = if effective_limit == window_limit {
            configured_us
        } else {
            // The ramp of a lowered rate lets its next request through up to `limit × T`
            // ahead: keep the replies within the span the scripts can represent.
            let most = (MAX_SPAN_US - self.base_reply_us) / u64::from(limit);
            self.window_us
                .div_ceil(u64::from(effective_limit))
                .min(most)
                .max(configured_us)
        };
        Params {
            quota: configured,
            interval_us,
            burst: configured.burst_size(),
            tolerance_us: interval_us,
            limit,
            effective_limit,
            max_cost: window_limit,
            reply_limit_us: self
                .base_reply_us
                .saturating_add(u64::from(limit).saturating_mul(interval_us)),
            reserve_us: RESERVE_HORIZON_US.max(self.window_us),
            convert: None,
            generation: 0,
        }
    }
}

/// The parameters in force, changed by a new quota or a rate control's new rate.
#[derive(Debug)]
pub(crate) struct Rates {
    pub(crate) shape: Shape,
    params: Mutex<Params>,
}

impl Rates {
    pub(crate) fn new(shape: Shape) -> Self {
        let params = shape.derive(shape.built, shape.built);
        Rates {
            shape,
            params: Mutex::new(params),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Params> {
        // No code path panics while holding the lock; recover the data if one ever did.
        self.params.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn params(&self) -> Params {
        *self.lock()
    }

    /// Decide at the configured quota `quota` from now on, in this process (a new configured
    /// quota: [`Bucket::set_quota`](crate::Bucket::set_quota)), as the in-process bucket
    /// does where the state in Redis allows it.
    ///
    /// The learned rate restarts at `quota`, the new ceiling. The state in Redis is shared
    /// and was written at the quota before: the next calls re-read it at the new one (they
    /// carry the parameters before, until one is answered), so that it holds no more tokens
    /// than it did before the change (see `lua/gcra/state.lua` and
    /// `lua/window/convert.lua`).
    ///
    /// The token and leaky bucket take the new interval and burst at once (they are
    /// arguments of every call).
    ///
    /// The windows keep their width `W`, which lays out the state in Redis (see
    /// [`set_rate`](Self::set_rate)): the new quota becomes its tokens per `W`,
    /// `⌊count × W / period⌋` (at least 1): exactly the new count when the period is the
    /// same; for a new period, the same rate (rounded down) in windows of `W`. That is also
    /// the largest request now. A raised count adds nothing to the window in progress (the
    /// re-read charges it with the difference), as in process.
    pub(crate) fn set_quota(&self, quota: Quota) {
        let mut p = self.lock();
        let mut next = self.shape.derive(quota, quota);
        next.convert = Some(Convert::of(&p).merge(p.convert));
        next.generation = p.generation + 1;
        *p = next;
    }

    /// Decide at the rate of `quota` from now on (a rate control's effective quota: the
    /// configured count and burst over a longer period), never above the configured quota.
    ///
    /// The token and leaky bucket take its emission interval; the next calls re-read the
    /// state at it, as after [`set_quota`](Self::set_quota) (a lowered rate never finds more
    /// tokens in the state than the rate before did).
    ///
    /// The windows keep their width `W` and lower the tokens per window instead: `E =
    /// ⌊count × W / period⌋` (the effective quota's tokens in one configured window;
    /// `count × rate / ceiling`), at least 1, at most the configured tokens per window; their
    /// ramp after a pause takes the interval of `E` per window, `⌈W / E⌉`. The width stays
    /// because the state in Redis is laid out by it: window indices `⌊now / W⌋` (fixed and
    /// sliding window) and entries that count for `W` (sliding log) written by every process.
    /// A new width would misread them (a fixed window's count read as another window's) or
    /// need a migration every process agrees on, while a new `E` is read against the same
    /// state, so lowering or raising it mid-window is exact: the tokens already counted stay
    /// counted, and `L` (still passed) keeps bounding what a state may hold. A request of
    /// `n > E` tokens (within the configured tokens per window) goes when the window holds
    /// nothing else (it sees a limit of `max(E, n)`): it never waits forever, and the
    /// learned rate binds every request of at most `E` tokens.
    pub(crate) fn set_rate(&self, quota: Quota) {
        let mut p = self.lock();
        let mut next = self.shape.derive(p.quota, quota);
        if self.shape.algorithm.is_gcra() {
            next.convert = Some(Convert::of(&p).merge(p.convert));
            next.generation = p.generation + 1;
        } else {
            (next.convert, next.generation) = (p.convert, p.generation);
        }
        *p = next;
    }

    /// A call made with `p` was answered: the state in Redis is in the parameters in
    /// force, unless they changed again since.
    pub(crate) fn answered(&self, p: &Params) {
        if p.convert.is_none() {
            return;
        }
        let mut now = self.lock();
        if now.generation == p.generation {
            now.convert = None;
        }
    }
}

/// The GCRA spans a call reaches with interval `t` and burst `b`: the tolerance, the
/// booking horizon and the largest time a reply carries; `None` when they do not stay
/// within what the scripts represent.
fn gcra_spans(algorithm: Algorithm, t: u64, b: u32, max_pause_us: u64) -> Option<(u64, u64, u64)> {
    let tau = t.checked_mul(u64::from(b))?;
    let tolerance = match algorithm {
        Algorithm::LeakyBucket { .. } => t,
        _ => tau,
    };
    let reserve = RESERVE_HORIZON_US.max(tolerance);
    let reply = tau
        .checked_mul(2)?
        .checked_add(max_pause_us)?
        .checked_add(reserve)
        .filter(|&span| span <= MAX_SPAN_US)?;
    Some((tolerance, reserve, reply))
}

/// A duration in whole µs, rounded up, at least 1.
fn micros_up(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The tokens `quota` allows in a window of `width_ns`: `⌊count × width / period⌋`
/// (saturating). The period is rounded to whole ns (`adaptive::effective`): a rate of
/// exactly `k` tokens per window whose period was rounded up still gives `k` (the numerator
/// is raised by `count` ns' worth, less than one token).
fn per_width(width_ns: u64, quota: Quota) -> u32 {
    let count = u128::from(quota.count());
    let tokens = (count * u128::from(width_ns) + count) / u128::from(quota.period_ns().max(1));
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adaptive::effective;

    #[test]
    fn a_lowered_rate_keeps_its_share_of_each_window() {
        let q = Quota::per_second(100);
        let lowered = |q: Quota, e: Quota| per_width(q.period_ns(), e).clamp(1, q.count());
        let at = |rate: f64| lowered(q, effective(q, rate).unwrap());
        assert_eq!(at(100.0), 100);
        assert_eq!(at(500.0), 100, "never above the configured count");
        assert_eq!(at(50.0), 50);
        assert_eq!(at(48.0), 48);
        assert_eq!(at(47.9), 47, "rounded down");
        assert_eq!(at(33.0), 33);
        assert_eq!(at(0.5), 1, "at least one token per window");
        // Any period, any rate representable: `⌊count × rate / ceiling⌋`, within 1..=count.
        for (count, secs) in [(7, 1), (60, 60), (1000, 3600), (3, 10)] {
            let q = Quota::new(count, Duration::from_secs(secs));
            let ceiling = q.per_second_f64();
            for k in 1..=count {
                let rate = ceiling * f64::from(k) / f64::from(count);
                let e = lowered(q, effective(q, rate).unwrap());
                assert_eq!(e, k, "{count} per {secs} s at {rate}/s");
            }
        }
    }

    /// A window keeps its width: a new quota is its tokens per window of the width built,
    /// at least one.
    #[test]
    fn a_window_keeps_its_width_and_takes_the_new_rate_per_window() {
        let shape = Shape::new(Algorithm::FixedWindow, Quota::per_second(100), 10_000_000);
        let rates = Rates::new(shape.unwrap());
        let per_window = |q: Quota| {
            rates.set_quota(q);
            let p = rates.params();
            (p.effective_limit, p.max_cost, p.limit)
        };
        assert_eq!(per_window(Quota::per_second(40)), (40, 40, 100));
        assert_eq!(per_window(Quota::per_second(250)), (250, 250, 250));
        assert_eq!(per_window(Quota::per_minute(600)), (10, 10, 100));
        assert_eq!(
            per_window(Quota::new(9, Duration::from_secs(2))),
            (4, 4, 100)
        );
        assert_eq!(per_window(Quota::per_hour(100)), (1, 1, 100));
        // A rate control lowers it further, within it.
        rates.set_quota(Quota::per_second(40));
        rates.set_rate(effective(Quota::per_second(40), 10.0).unwrap());
        let p = rates.params();
        assert_eq!((p.effective_limit, p.max_cost), (10, 40));
    }
}
