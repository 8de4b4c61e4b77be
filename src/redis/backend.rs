//! The connection to Redis and one call of a script: timeout, breaker, counters.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ::redis::Value;
use tokio::time::Instant;

use super::conn::Conn;
use super::error::{RedisError, RedisErrorKind};
use super::failure::FailurePolicy;
use super::script::{parse_grant, Reply, Scripts};
use crate::{Algorithm, Quota};

/// Every value the scripts handle stays below 2^53 µs (exact in a Lua double): the Redis
/// clock (about 2^50.7 µs in 2025, 2^52 in 2112) plus this much.
const MAX_SPAN_US: u64 = 1 << 52;

/// How far ahead, at least, a waiter of the token or leaky bucket books its admission
/// instant in Redis (µs); at least the tolerance (the scripts' `H`).
const RESERVE_HORIZON_US: u64 = 1_000_000;

/// Consecutive failed calls after which decisions skip Redis for a probe interval. One
/// transient error (a dropped packet, one slow reply) fails only its own call.
pub(crate) const BREAKER_THRESHOLD: u32 = 3;

/// Settings shared by both builders.
#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) url: Option<String>,
    /// A Redis Cluster's nodes, instead of `url`.
    pub(crate) cluster: Option<Vec<String>>,
    pub(crate) prefix: String,
    pub(crate) policy: FailurePolicy,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) probe_interval: Duration,
    pub(crate) max_pause: Duration,
    pub(crate) lazy: bool,
    pub(crate) algorithm: Algorithm,
    /// Leases (bucket only): the most tokens one lease takes, and how long it lasts.
    pub(crate) lease: Option<(u32, Duration)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            url: None,
            cluster: None,
            prefix: super::key::DEFAULT_PREFIX.to_owned(),
            policy: FailurePolicy::default(),
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            probe_interval: Duration::from_millis(500),
            max_pause: Duration::from_secs(3600),
            lazy: false,
            algorithm: Algorithm::TokenBucket,
            lease: None,
        }
    }
}

impl std::fmt::Debug for Options {
    // The URL may carry a password: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("cluster", &self.cluster.as_ref().map(Vec::len))
            .field("prefix", &self.prefix)
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("probe_interval", &self.probe_interval)
            .field("max_pause", &self.max_pause)
            .field("lazy", &self.lazy)
            .field("algorithm", &self.algorithm)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// Counters of a [`RedisBucket`](super::RedisBucket) or [`RedisKeyed`](super::RedisKeyed),
/// from `stats()`: for metrics and alerts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Scripts sent to Redis (each decision and pause is one).
    pub round_trips: u64,
    /// Round trips that failed: error, timeout or an unexpected reply.
    pub failures: u64,
    /// Decisions made by the [`FailurePolicy`] instead of Redis: after a failure, and while
    /// Redis is left alone after one.
    pub fallbacks: u64,
    /// Always 0: `try_acquire` asks Redis every time (what an earlier reply said may be
    /// stale once another process gives tokens back or the rate changes). Kept so that code
    /// reading it still builds.
    pub local_refusals: u64,
    /// Leases taken from Redis (with [`lease`](super::RedisBucketBuilder::lease)); each is one
    /// of the round trips.
    pub leases: u64,
    /// Tokens admitted with leases: from a lease's tokens, or from a refill that asked for
    /// them with the others waiting (no round trip of their own).
    pub leased_admissions: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    round_trips: AtomicU64,
    failures: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) leases: AtomicU64,
    pub(crate) leased_admissions: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A reply with the local instants around its round trip: the script ran in between.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timed {
    pub(crate) reply: Reply,
    /// Tokens granted: 0 or 1, or for a lease up to its size.
    pub(crate) granted: u32,
    /// Windows: the admission's instant on the Redis clock, µs (0: none said), which a
    /// release of a booking names.
    pub(crate) at_us: u64,
    pub(crate) sent: Instant,
    pub(crate) received: Instant,
}

/// The arguments of the scripts in force in this process, read together once per call: a
/// call never mixes the values of two rates (say an interval already lengthened with the
/// tolerance of the rate before, which the scripts would refuse as bad arguments).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// The configured quota in force in this process: the ceiling of a rate control.
    pub(crate) quota: Quota,
    /// Emission interval `T`, µs (rounded up); a rate control may lengthen it
    /// ([`set_rate`](Backend::set_rate)). Windows: the ramp's interval after a pause.
    pub(crate) interval_us: u64,
    /// `B`: the burst.
    pub(crate) burst: u32,
    /// GCRA tolerance `tau`, µs: `burst × interval` (token bucket) or `interval` (leaky
    /// bucket). The windows have none (`T`, which the scripts accept).
    pub(crate) tolerance_us: u64,
    /// `L`: what a window's state may hold (the scripts' clamps), and the largest request
    /// they take.
    limit: u32,
    /// `E`: windows, the tokens per window at the rate in force (`1..=max_cost`); the
    /// token and leaky bucket pass `L`.
    effective_limit: u32,
    /// The largest cost of one request: the burst (token and leaky bucket) or the tokens per
    /// window of the configured quota (windows), as for an in-process bucket.
    pub(crate) max_cost: u32,
    /// The largest time a valid reply can carry.
    reply_limit_us: u64,
    /// How far ahead a waiter books its instant, µs.
    reserve_us: u64,
    /// The parameters the state in Redis may still be kept in after a change, for the
    /// scripts to re-read it in the new ones: carried by every call until one is answered.
    convert: Option<Convert>,
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
    fn args(self) -> [u64; 3] {
        [
            self.interval_us,
            self.interval_us * self.tokens,
            u64::from(self.effective_limit),
        ]
    }
}

/// What a script call does, for the arguments it needs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// Take `n` tokens: now, or booked (`book`).
    Acquire { n: u32, book: bool },
    /// Give back `n` tokens of an admission (booked for `at_us`, or 0).
    Release { n: u32, at_us: u64 },
    /// Pause for this many µs.
    Pause { us: u64 },
    /// Take a lease of up to `want` tokens, at least `need`, giving back `back`.
    Lease { want: u32, need: u32, back: u32 },
}

/// The script arguments `ARGV[1]`–`ARGV[14]` of one call of `op` under `p` (see
/// `lua/common.lua`), and how many of them it sends: fewer when the script does not read
/// the rest. A request larger than the parameters allow (the quota changed since it was
/// checked) is cut to the most they take: a release gives back less, never more; a lease
/// takes less.
pub(crate) fn script_args(p: &Params, shape: &Shape, op: Op) -> ([u64; 14], usize) {
    let gcra = shape.algorithm.is_gcra();
    let most = if gcra { p.burst } else { p.limit };
    let (arg, book, need, back) = match op {
        Op::Acquire { n, book } => (u64::from(n), u64::from(book), 0, 0),
        Op::Release { n, at_us } => (u64::from(n.min(most)), at_us, 0, 0),
        Op::Pause { us } => (us, 0, 0, 0),
        Op::Lease { want, need, back } => {
            let want = want.min(p.burst).max(need);
            (u64::from(want), 0, need, back.min(p.burst))
        }
    };
    let [from_t, from_tau, from_e] = p.convert.map_or([0; 3], Convert::args);
    let all = [
        p.interval_us,
        u64::from(p.burst),
        arg,
        shape.max_pause_us,
        p.tolerance_us,
        shape.window_us,
        u64::from(p.limit),
        book,
        u64::from(need),
        u64::from(back),
        u64::from(p.effective_limit),
        from_t,
        from_tau,
        from_e,
    ];
    // The lease script reads two arguments more than the token and leaky bucket's others;
    // the windows three (the lease's two, unused, then `E`); a re-read after a change three
    // more.
    let len = if p.convert.is_some() {
        14
    } else if matches!(op, Op::Lease { .. }) {
        10
    } else if gcra {
        8
    } else {
        11
    };
    (all, len)
}

/// What the parameters are derived from: the algorithm and the shape the limit was built
/// with, which the state in Redis keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    algorithm: Algorithm,
    /// The quota at build.
    built: Quota,
    /// The window (the quota's period at build), µs (rounded up): it lays out the state in
    /// Redis, and stays.
    window_us: u64,
    /// Windows: the largest time a valid reply carries at the configured rate, but for the
    /// ramp's `L × T`.
    base_reply_us: u64,
    max_pause_us: u64,
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
    shape: Shape,
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

pub(crate) struct Backend {
    conn: Conn,
    scripts: Scripts,
    pub(crate) algorithm: Algorithm,
    /// The arguments in force; see [`Params`].
    rates: Rates,
    pub(crate) options: Options,
    /// Breaker: 0 = Redis healthy; else the instant (ns since `origin`, ≥ 1) until which
    /// decisions skip Redis after a failure.
    down_until: AtomicU64,
    /// Calls failed in a row (reset by any success).
    failed_in_a_row: AtomicU32,
    /// Runs of failures begun so far: a fallback sees a new outage when this moves.
    outages: AtomicU64,
    origin: Instant,
    pub(crate) counters: Counters,
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

impl Backend {
    /// Check the settings and connect (unless lazy), loading the scripts.
    pub(crate) async fn connect(options: Options, quota: Quota) -> Result<Self, RedisError> {
        super::key::check_prefix(&options.prefix)?;
        options.policy.local_quota(quota)?;
        if options.timeout.is_zero() || options.connect_timeout.is_zero() {
            return Err(RedisError::config(
                "redis timeouts must be longer than zero",
            ));
        }
        let algorithm = options.algorithm;
        let max_pause_us = u64::try_from(options.max_pause.as_micros()).unwrap_or(u64::MAX);
        let shape = Shape::new(algorithm, quota, max_pause_us)?;
        let conn = connect(&options).await?;
        let backend = Backend {
            conn,
            scripts: Scripts::new(algorithm, options.lease.is_some()),
            algorithm,
            rates: Rates::new(shape),
            down_until: AtomicU64::new(0),
            failed_in_a_row: AtomicU32::new(0),
            outages: AtomicU64::new(0),
            origin: Instant::now(),
            counters: Counters::default(),
            options,
        };
        if !backend.options.lazy {
            let load = async {
                let mut conn = backend.conn.clone();
                backend.scripts.acquire.load_async(&mut conn).await?;
                backend.scripts.pause.load_async(&mut conn).await?;
                if let Some(lease) = &backend.scripts.lease {
                    lease.load_async(&mut conn).await?;
                }
                Ok::<_, ::redis::RedisError>(())
            };
            match tokio::time::timeout(backend.options.connect_timeout, load).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(RedisError::from_client(e)),
                Err(_) => {
                    return Err(RedisError::new(
                        RedisErrorKind::Timeout,
                        "redis did not answer within the connect timeout",
                    ))
                }
            }
        }
        Ok(backend)
    }

    /// A handle on the connection, for commands beside the scripts.
    pub(crate) fn connection(&self) -> Conn {
        self.conn.clone()
    }

    pub(crate) fn policy(&self) -> &FailurePolicy {
        &self.options.policy
    }

    pub(crate) fn stats(&self) -> RedisStats {
        let c = &self.counters;
        RedisStats {
            round_trips: c.round_trips.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            fallbacks: c.fallbacks.load(Ordering::Relaxed),
            local_refusals: 0,
            leases: c.leases.load(Ordering::Relaxed),
            leased_admissions: c.leased_admissions.load(Ordering::Relaxed),
        }
    }

    /// The arguments in force, all of one rate.
    pub(crate) fn params(&self) -> Params {
        self.rates.params()
    }

    /// The configured quota in force in this process.
    pub(crate) fn quota(&self) -> Quota {
        self.rates.lock().quota
    }

    /// The largest cost of one request now.
    pub(crate) fn max_cost(&self) -> u32 {
        self.rates.lock().max_cost
    }

    /// Emission interval in ns, as the scripts see it (whole µs).
    pub(crate) fn interval_ns(&self) -> u64 {
        self.rates.lock().interval_us * 1000
    }

    /// Decide at the configured quota `quota` from now on: see [`Rates::set_quota`].
    pub(crate) fn set_quota(&self, quota: Quota) {
        self.rates.set_quota(quota);
    }

    /// Decide at the rate of `quota` from now on: see [`Rates::set_rate`].
    pub(crate) fn set_rate(&self, quota: Quota) {
        self.rates.set_rate(quota);
    }

    /// The GCRA tolerance in ns, as the scripts see it: `burst × interval` (token bucket) or
    /// `interval` (leaky bucket).
    pub(crate) fn tolerance_ns(&self) -> u64 {
        self.rates.lock().tolerance_us * 1000
    }

    /// How long after a pause ends the bucket is full again, beyond its first token (token
    /// and leaky bucket; nothing for the windows).
    pub(crate) fn refill(&self) -> Duration {
        if self.is_gcra() {
            Duration::from_nanos(self.tolerance_ns() - self.interval_ns())
        } else {
            Duration::ZERO
        }
    }

    /// Whether the algorithm is the token or leaky bucket (the state is "full again at").
    pub(crate) fn is_gcra(&self) -> bool {
        self.algorithm.is_gcra()
    }

    /// The longest pause honoured.
    pub(crate) fn max_pause(&self) -> Duration {
        Duration::from_micros(self.rates.shape.max_pause_us)
    }

    /// Take `n` (1..=max_cost) tokens of the bucket at `key`, if they fit now.
    pub(crate) async fn acquire(&self, key: &str, n: u32) -> Result<Timed, RedisError> {
        self.run(&self.scripts.acquire, key, Op::Acquire { n, book: false })
            .await
    }

    /// Token bucket with leases: give back `back` unused tokens of an expired lease, then
    /// take up to `want` tokens that fit now, if at least `need` do (`1 ≤ need ≤ want ≤
    /// burst`, `back ≤ burst`). The reply's `granted` is 0 or `need..=want`.
    pub(crate) async fn lease(
        &self,
        key: &str,
        want: u32,
        need: u32,
        back: u32,
    ) -> Result<Timed, RedisError> {
        let Some(script) = &self.scripts.lease else {
            return Err(RedisError::config("leases need the token bucket"));
        };
        bump(&self.counters.leases);
        self.run(script, key, Op::Lease { want, need, back }).await
    }

    /// Take `n` tokens of the bucket at `key` for the earliest instant they fit (after
    /// every earlier booking), if that is within the reservation horizon. An admitted
    /// reply's `wait` is the time from the script's run to that instant.
    pub(crate) async fn reserve(&self, key: &str, n: u32) -> Result<Timed, RedisError> {
        self.run(&self.scripts.acquire, key, Op::Acquire { n, book: true })
            .await
    }

    /// How far ahead [`reserve`](Self::reserve) books an instant.
    pub(crate) fn reserve_horizon(&self) -> Duration {
        Duration::from_micros(self.rates.lock().reserve_us)
    }

    /// Give back `n` tokens of an unused admission of the bucket at `key`.
    pub(crate) async fn release(&self, key: &str, n: u32) -> Result<Timed, RedisError> {
        self.release_booked(key, n, 0).await
    }

    /// Give back `n` tokens of an admission booked for the instant `at_us` (Redis clock,
    /// from its reply; 0: an admission made now) that was not used. The windows give them
    /// back to the window of that instant (the token and leaky bucket need no instant).
    pub(crate) async fn release_booked(
        &self,
        key: &str,
        n: u32,
        at_us: u64,
    ) -> Result<Timed, RedisError> {
        self.run(&self.scripts.release, key, Op::Release { n, at_us })
            .await
    }

    /// Publish `message` on `channel`, best effort (within the timeout; errors ignored).
    pub(crate) async fn publish(&self, channel: &str, message: &str) {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("PUBLISH");
        cmd.arg(channel).arg(message);
        let _ = tokio::time::timeout(self.options.timeout, cmd.query_async::<i64>(&mut conn)).await;
    }

    /// Pause the bucket at `key` for `d` (capped at `max_pause`).
    pub(crate) async fn pause(&self, key: &str, d: Duration) -> Result<Timed, RedisError> {
        // Rounded up: never end a pause early.
        let us = u64::try_from(d.as_nanos().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .min(self.rates.shape.max_pause_us);
        self.run(&self.scripts.pause, key, Op::Pause { us }).await
    }

    async fn run(&self, script: &::redis::Script, key: &str, op: Op) -> Result<Timed, RedisError> {
        self.breaker_admit()?;
        bump(&self.counters.round_trips);
        let mut conn = self.conn.clone();
        let log = format!("{key}:log");
        let keys = [key, log.as_str()];
        // One read: every argument of this call is of one rate.
        let p = self.params();
        let (all, len) = script_args(&p, &self.rates.shape, op);
        let args = &all[..len];
        let max_grant = if let Op::Lease { .. } = op {
            u32::try_from(all[2]).unwrap_or(u32::MAX)
        } else {
            1
        };
        let mut call = script.prepare_invoke();
        call.key(keys[0]).key(keys[1]);
        for a in args {
            call.arg(a);
        }
        let sent = Instant::now();
        // `invoke_async` loads a script Redis lacks and calls it again; when another client
        // flushed the cache in between, the script goes in whole (`EVAL`), which needs no
        // cache.
        let invoke = async {
            match call.invoke_async::<Value>(&mut conn).await {
                Err(e) if is_no_script(&e) => {
                    ::redis::cmd("EVAL")
                        .arg(self.scripts.source_of(script))
                        .arg(keys.len())
                        .arg(&keys[..])
                        .arg(args)
                        .query_async::<Value>(&mut conn)
                        .await
                }
                other => other,
            }
        };
        let result = tokio::time::timeout(self.options.timeout, invoke).await;
        let received = Instant::now();
        let result = match result {
            // The reply of a script run with `p`: bounded by `p`'s spans.
            Ok(Ok(value)) => parse_grant(&value, p.reply_limit_us, max_grant),
            Ok(Err(e)) => Err(RedisError::from_client(e)),
            Err(_) => Err(RedisError::new(RedisErrorKind::Timeout, "redis timed out")),
        };
        match result {
            Ok((reply, granted, at_us)) => {
                self.breaker_success();
                self.rates.answered(&p);
                Ok(Timed {
                    reply,
                    granted,
                    at_us,
                    sent,
                    received,
                })
            }
            Err(e) => {
                bump(&self.counters.failures);
                self.breaker_failure(&e);
                Err(e)
            }
        }
    }
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// How many runs of failures have begun: a local fallback starts afresh (empty) when
    /// this has moved since it last decided.
    pub(crate) fn outages(&self) -> u64 {
        self.outages.load(Ordering::Acquire)
    }

    /// Whether this call may go to Redis. After [`BREAKER_THRESHOLD`] failures in a row,
    /// calls skip Redis for `probe_interval`; then one call (the probe) goes, and the others
    /// keep skipping until it answers.
    fn breaker_admit(&self) -> Result<(), RedisError> {
        let until = self.down_until.load(Ordering::Acquire);
        if until == 0 {
            return Ok(());
        }
        let now = self.now_ns();
        let next = now.saturating_add(duration_ns(self.options.probe_interval));
        if now >= until
            && self
                .down_until
                .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(());
        }
        Err(RedisError::new(
            RedisErrorKind::Unavailable,
            "redis unavailable (a recent call failed; retrying shortly)",
        ))
    }

    fn breaker_success(&self) {
        self.failed_in_a_row.store(0, Ordering::Release);
        if self.down_until.swap(0, Ordering::AcqRel) != 0 {
            trace_event!(info, "redis answers again; decisions are shared again");
        }
    }

    fn breaker_failure(&self, e: &RedisError) {
        if e.is_key_specific() {
            trace_event!(warn, error = %e, "redis rate limit key unusable; failure policy applies");
            return;
        }
        let in_a_row = self.failed_in_a_row.fetch_add(1, Ordering::AcqRel);
        if in_a_row == 0 {
            self.outages.fetch_add(1, Ordering::AcqRel);
        }
        if in_a_row + 1 < BREAKER_THRESHOLD {
            return;
        }
        let next = self
            .now_ns()
            .saturating_add(duration_ns(self.options.probe_interval));
        if self.down_until.swap(next, Ordering::AcqRel) == 0 {
            trace_event!(warn, error = %e, policy = ?self.options.policy, "redis failing; failure policy applies");
        }
    }
}

/// The connection `options` name: a URL, or (feature `redis-cluster`) a cluster's nodes.
async fn connect(options: &Options) -> Result<Conn, RedisError> {
    let (timeout, connect_timeout) = (options.timeout, options.connect_timeout);
    match (&options.url, &options.cluster) {
        (Some(url), None) => Conn::single(url, timeout, connect_timeout),
        (None, Some(nodes)) => {
            if nodes.is_empty() {
                return Err(RedisError::config("redis cluster: no node given"));
            }
            if options.lazy {
                return Err(RedisError::config(
                    "a redis cluster connects at build: connect_lazily is not supported with it",
                ));
            }
            #[cfg(feature = "redis-cluster")]
            return Conn::cluster(nodes, timeout, connect_timeout).await;
            #[cfg(not(feature = "redis-cluster"))]
            return Err(RedisError::config(
                "a redis cluster needs the `redis-cluster` feature",
            ));
        }
        (Some(_), Some(_)) => Err(RedisError::config(
            "set either a redis url or a cluster's nodes, not both",
        )),
        (None, None) => Err(RedisError::config("redis url not set")),
    }
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
pub(crate) fn per_width(width_ns: u64, quota: Quota) -> u32 {
    let count = u128::from(quota.count());
    let tokens = (count * u128::from(width_ns) + count) / u128::from(quota.period_ns().max(1));
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

/// The largest cost of one request under `algorithm`, as for an in-process bucket.
pub(crate) fn max_cost(quota: Quota, algorithm: Algorithm) -> u32 {
    match algorithm {
        Algorithm::TokenBucket | Algorithm::LeakyBucket { .. } => quota.burst_size(),
        _ => quota.count(),
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("quota", &self.quota())
            .field("algorithm", &self.algorithm)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Redis answered `NOSCRIPT`: it does not have the script (it was flushed).
fn is_no_script(e: &::redis::RedisError) -> bool {
    e.kind() == ::redis::ErrorKind::Server(::redis::ServerErrorKind::NoScript)
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

    /// What `lua/common.lua` checks of its arguments, and what one rate is: `tau` the
    /// tolerance of `T` (`B × T`, or `T` for the leaky bucket), a request within `B` (token
    /// and leaky bucket) or `L` (windows).
    fn consistent(algorithm: Algorithm, args: &[u64; 14]) -> bool {
        let [t, b, x, _, tau, w, l, _, _, _, e, ft, ftau, fe] = *args;
        let one_rate = match algorithm {
            Algorithm::TokenBucket => tau == b * t && x <= b,
            Algorithm::LeakyBucket { .. } => tau == t && x <= b,
            _ => x <= l,
        };
        t >= 1
            && b >= 1
            && tau >= t
            && w >= 1
            && l >= 1
            && (1..=l).contains(&e)
            && (ft == 0 || ftau >= ft)
            && (ft > 0 || ftau == 0)
            && (fe == 0 || fe <= u64::from(u32::MAX))
            && one_rate
    }

    fn rates(algorithm: Algorithm, quota: Quota) -> Rates {
        Rates::new(Shape::new(algorithm, quota, 10_000_000).unwrap())
    }

    const ALGORITHMS: [Algorithm; 5] = [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket { max_queue: 16 },
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];

    /// The arguments of one call are of one rate, whatever changes at the same time: a rate
    /// control moving the rate up and down (a burst of 1: the tolerance is the interval,
    /// and an old interval beside a new tolerance is refused by the scripts) while calls
    /// read their arguments on other threads.
    #[test]
    fn one_call_never_mixes_two_rates() {
        // What a call reading the interval before a change and the tolerance after it sent
        // (a leaky bucket, the rate going back up): refused by the scripts, `tau < T`.
        let leaky = Algorithm::LeakyBucket { max_queue: 16 };
        let quota = Quota::per_second(100).burst(1);
        let changing = rates(leaky, quota);
        changing.set_rate(effective(quota, 10.0).unwrap());
        let slow = changing.params();
        changing.set_rate(quota);
        let fast = changing.params();
        let op = Op::Acquire { n: 1, book: true };
        let mut torn = script_args(&slow, &changing.shape, op).0;
        torn[4] = script_args(&fast, &changing.shape, op).0[4];
        assert!(!consistent(leaky, &torn), "{torn:?}");
        assert!(torn[4] < torn[0], "the scripts refuse it");

        for algorithm in ALGORITHMS {
            let quota = Quota::per_second(100).burst(1);
            let rates = std::sync::Arc::new(rates(algorithm, quota));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let changer = {
                let (rates, stop) = (rates.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        let rate = [100.0, 7.0, 55.0, 1.5][i as usize % 4];
                        rates.set_rate(effective(quota, rate).unwrap());
                        if i % 64 == 0 {
                            rates.set_quota(Quota::per_second(50 + i % 100).burst(1 + i % 3));
                        }
                        i = i.wrapping_add(1);
                    }
                })
            };
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let rates = rates.clone();
                    std::thread::spawn(move || {
                        for _ in 0..20_000 {
                            let p = rates.params();
                            let (args, _) =
                                script_args(&p, &rates.shape, Op::Acquire { n: 1, book: true });
                            assert!(consistent(algorithm, &args), "{algorithm:?}: {args:?}");
                            rates.answered(&p);
                        }
                    })
                })
                .collect();
            for r in readers {
                r.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            changer.join().unwrap();
        }
    }

    /// Every quota and rate gives arguments the scripts take.
    #[test]
    fn every_change_gives_arguments_the_scripts_take() {
        let quotas = [
            Quota::per_second(1),
            Quota::per_second(100).burst(10),
            Quota::per_minute(600),
            Quota::per_hour(5).burst(3),
            Quota::new(7, Duration::from_millis(3)),
            Quota::per_second(1_000_000).burst(1000),
        ];
        for algorithm in ALGORITHMS {
            for built in quotas {
                let rates = rates(algorithm, built);
                for quota in quotas {
                    rates.set_quota(quota);
                    for rate in [quota.per_second_f64(), quota.per_second_f64() / 3.0, 1e-3] {
                        rates.set_rate(effective(quota, rate).unwrap());
                        let p = rates.params();
                        for op in [
                            Op::Acquire {
                                n: p.max_cost,
                                book: false,
                            },
                            Op::Release {
                                n: u32::MAX,
                                at_us: 0,
                            },
                        ] {
                            let (args, len) = script_args(&p, &rates.shape, op);
                            let at = format!("{algorithm:?} {built:?} → {quota:?} at {rate}");
                            assert!(consistent(algorithm, &args), "{at}: {args:?}");
                            assert_eq!(len, 14, "{at}: the change is carried");
                        }
                    }
                }
            }
        }
    }

    /// A change is carried by every call until one made after it is answered; a call
    /// answered that was made before a later change does not end the later one.
    #[test]
    fn a_change_is_carried_until_a_call_made_after_it_is_answered() {
        let rates = rates(Algorithm::TokenBucket, Quota::per_second(10).burst(10));
        let args = |p: &Params| script_args(p, &rates.shape, Op::Acquire { n: 1, book: false });
        let before = rates.params();
        assert_eq!(args(&before).1, 8, "nothing to carry");
        rates.set_quota(Quota::per_second(5).burst(4));
        let first = rates.params();
        let (all, len) = args(&first);
        assert_eq!((len, &all[11..]), (14, &[100_000, 1_000_000, 10][..]));
        rates.set_quota(Quota::per_second(20).burst(8));
        rates.answered(&first);
        let second = rates.params();
        // Either state may be in Redis: the shorter interval, the fewer tokens.
        assert_eq!(&args(&second).0[11..], &[100_000, 400_000, 10][..]);
        rates.answered(&second);
        assert_eq!(args(&rates.params()).1, 8, "answered");
        assert_eq!(rates.params().quota, Quota::per_second(20).burst(8));
    }

    /// A window keeps its width: a new quota is its tokens per window of the width built,
    /// at least one.
    #[test]
    fn a_window_keeps_its_width_and_takes_the_new_rate_per_window() {
        let rates = rates(Algorithm::FixedWindow, Quota::per_second(100));
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
