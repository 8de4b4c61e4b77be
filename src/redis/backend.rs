//! The connection to Redis and one call of a script: timeout, breaker, counters.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
    /// Tokens admitted from leases, without a round trip of their own.
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

pub(crate) struct Backend {
    conn: Conn,
    scripts: Scripts,
    pub(crate) quota: Quota,
    pub(crate) algorithm: Algorithm,
    /// Emission interval, µs (rounded up); a rate control may lengthen it
    /// ([`set_rate`](Self::set_rate)). Windows: the ramp's interval after a pause, `W / E`.
    interval_us: AtomicU64,
    pub(crate) burst: u32,
    /// GCRA tolerance, µs: `burst × interval` (token bucket) or `interval` (leaky bucket).
    tolerance_us: AtomicU64,
    /// The window (the quota's period), µs (rounded up), and the tokens per window.
    window_us: u64,
    limit: u32,
    /// Windows: the tokens per window at the rate in force (`E`, `1..=limit`); a rate
    /// control may lower it ([`set_rate`](Self::set_rate)).
    effective_limit: AtomicU32,
    /// Windows: the largest time a valid reply carries at the configured rate; a lowered
    /// rate's ramp adds `limit × interval` to it.
    base_reply_us: u64,
    /// The largest cost of one request: the burst (token and leaky bucket) or the count
    /// (windows), as for an in-process bucket.
    pub(crate) max_cost: u32,
    max_pause_us: u64,
    /// The largest time a valid reply can carry.
    reply_limit_us: AtomicU64,
    /// How far ahead a waiter of the token or leaky bucket books its instant, µs.
    reserve_us: AtomicU64,
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
        let interval_us = micros_up(quota.interval());
        let burst = quota.burst_size();
        let max_pause_us = u64::try_from(options.max_pause.as_micros()).unwrap_or(u64::MAX);
        let window_us = micros_up(quota.period());
        let limit = quota.count();
        let tau = interval_us.checked_mul(u64::from(burst));
        let reply_limit_us = tau
            .and_then(|tau| tau.checked_mul(2))
            .and_then(|t| t.checked_add(max_pause_us))
            .filter(|&span| span <= MAX_SPAN_US)
            .ok_or(RedisError::config(
                "quota burst × interval, or max_pause, too long for the redis backend",
            ))?;
        let tau = tau.unwrap_or(u64::MAX);
        let (tolerance_us, reply_limit_us) = match algorithm {
            Algorithm::TokenBucket => (tau, reply_limit_us),
            Algorithm::LeakyBucket { .. } => (interval_us, reply_limit_us),
            _ => {
                // Windows: waits and states reach a few windows past a pause and the booking
                // horizon (counted below, once more here for a ramp booked ahead), and the
                // scripts multiply counts by window times.
                let span = window_us
                    .checked_mul(4)
                    .and_then(|w| w.checked_add(RESERVE_HORIZON_US.max(window_us)))
                    .and_then(|w| w.checked_add(reply_limit_us))
                    .filter(|&span| span <= MAX_SPAN_US);
                let product = window_us
                    .checked_mul(u64::from(limit))
                    .filter(|&p| p < MAX_SPAN_US * 2);
                match (span, product) {
                    (Some(span), Some(_)) => (tau, span),
                    _ => {
                        return Err(RedisError::config(
                            "quota count × period too large for a redis window algorithm \
                             (count × period in µs must stay below 2^53)",
                        ))
                    }
                }
            }
        };

        // A booked instant may lie the booking horizon ahead: replies and states reach that
        // much further. The token and leaky bucket book up to `max(1 s, tau)` ahead, the
        // windows up to `max(1 s, W)` (`HW` in their scripts).
        let reserve_us = if matches!(
            algorithm,
            Algorithm::TokenBucket | Algorithm::LeakyBucket { .. }
        ) {
            RESERVE_HORIZON_US.max(tolerance_us)
        } else {
            RESERVE_HORIZON_US.max(window_us)
        };
        let reply_limit_us = reply_limit_us
            .checked_add(reserve_us)
            .filter(|&span| span <= MAX_SPAN_US)
            .ok_or(RedisError::config(
                "quota burst × interval, or max_pause, too long for the redis backend",
            ))?;

        let conn = connect(&options).await?;
        let backend = Backend {
            conn,
            scripts: Scripts::new(algorithm, options.lease.is_some()),
            quota,
            algorithm,
            interval_us: AtomicU64::new(interval_us),
            burst,
            tolerance_us: AtomicU64::new(tolerance_us),
            window_us,
            limit,
            effective_limit: AtomicU32::new(limit),
            base_reply_us: reply_limit_us,
            max_cost: max_cost(quota, algorithm),
            max_pause_us,
            reply_limit_us: AtomicU64::new(reply_limit_us),
            reserve_us: AtomicU64::new(reserve_us),
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

    /// Emission interval in ns, as the scripts see it (whole µs).
    pub(crate) fn interval_ns(&self) -> u64 {
        self.interval_us.load(Ordering::Acquire) * 1000
    }

    /// Decide at the rate of `quota` from now on (a rate control's effective quota: the
    /// configured count and burst over a longer period), never above the configured quota.
    ///
    /// The token and leaky bucket take its emission interval ([`set_interval`]).
    ///
    /// The windows keep their width `W` and lower the tokens per window instead: `E =
    /// ⌊count × W / period⌋` (the effective quota's tokens in one configured window;
    /// `count × rate / ceiling`), at least 1, at most the configured count; their ramp after
    /// a pause takes the interval of `E` per window, `⌈W / E⌉`. The width stays because the
    /// state in Redis is laid out by it: window indices `⌊now / W⌋` (fixed and sliding
    /// window) and entries that count for `W` (sliding log) written by every process. A new
    /// width would misread them (a fixed window's count read as another window's) or need a
    /// migration every process agrees on, while a new `E` is read against the same state, so
    /// lowering or raising it mid-window is exact: the tokens already counted stay counted,
    /// and `count` (still passed) keeps bounding what a state may hold. A request of `n > E`
    /// tokens (within the configured count) goes when the window holds nothing else (it sees a
    /// limit of `max(E, n)`): it never waits forever, and the learned rate binds every
    /// request of at most `E` tokens.
    ///
    /// [`set_interval`]: Self::set_interval
    pub(crate) fn set_rate(&self, quota: Quota) {
        if self.is_gcra() {
            self.set_interval(quota.interval());
        } else {
            self.set_window_limit(quota);
        }
    }

    /// Windows: decide at `E` tokens per window, `E` from `quota` (see
    /// [`set_rate`](Self::set_rate)).
    fn set_window_limit(&self, quota: Quota) {
        let e = effective_limit(self.quota, quota);
        let configured = micros_up(self.quota.interval());
        let interval_us = if e == self.limit {
            configured
        } else {
            // The ramp of a lowered rate lets its next request through up to `limit × T`
            // ahead: keep the replies within the span the scripts can represent.
            let most = (MAX_SPAN_US - self.base_reply_us) / u64::from(self.limit);
            self.window_us
                .div_ceil(u64::from(e))
                .min(most)
                .max(configured)
        };
        let extra = if interval_us > configured {
            u64::from(self.limit) * interval_us
        } else {
            0
        };
        // Never lowered: a call sent with a longer interval may still be answered.
        self.reply_limit_us
            .fetch_max(self.base_reply_us + extra, Ordering::AcqRel);
        self.interval_us.store(interval_us, Ordering::Release);
        self.effective_limit.store(e, Ordering::Release);
    }

    /// Decide at a longer emission `interval` from now on (a rate control lowering the
    /// rate; the token and leaky bucket only, rounded up to whole µs and capped at what the
    /// scripts can represent), never below the configured one.
    fn set_interval(&self, interval: Duration) {
        if !self.is_gcra() {
            return;
        }
        let configured = micros_up(self.quota.interval());
        let interval_us = micros_up(interval).max(configured);
        // The tolerance, the booking horizon and replies scale with the interval: keep them
        // within the span the scripts can represent.
        let most =
            (MAX_SPAN_US - self.max_pause_us - RESERVE_HORIZON_US) / 3 / u64::from(self.burst);
        let interval_us = interval_us.min(most.max(configured));
        let tau = interval_us * u64::from(self.burst);
        let tolerance_us = match self.algorithm {
            Algorithm::LeakyBucket { .. } => interval_us,
            _ => tau,
        };
        let reserve_us = RESERVE_HORIZON_US.max(tolerance_us);
        self.reserve_us.store(reserve_us, Ordering::Release);
        self.reply_limit_us
            .store(tau * 2 + self.max_pause_us + reserve_us, Ordering::Release);
        self.tolerance_us.store(tolerance_us, Ordering::Release);
        self.interval_us.store(interval_us, Ordering::Release);
    }

    /// The GCRA tolerance in ns, as the scripts see it: `burst × interval` (token bucket) or
    /// `interval` (leaky bucket).
    pub(crate) fn tolerance_ns(&self) -> u64 {
        self.tolerance_us.load(Ordering::Acquire) * 1000
    }

    /// Whether the algorithm is the token or leaky bucket (the state is "full again at").
    pub(crate) fn is_gcra(&self) -> bool {
        matches!(
            self.algorithm,
            Algorithm::TokenBucket | Algorithm::LeakyBucket { .. }
        )
    }

    /// The longest pause honoured.
    pub(crate) fn max_pause(&self) -> Duration {
        Duration::from_micros(self.max_pause_us)
    }

    /// Take `n` (1..=max_cost) tokens of the bucket at `key`, if they fit now.
    pub(crate) async fn acquire(&self, key: &str, n: u32) -> Result<Timed, RedisError> {
        self.run(&self.scripts.acquire, key, u64::from(n), 0, None)
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
        self.run(script, key, u64::from(want), 0, Some((need, back)))
            .await
    }

    /// Take `n` tokens of the bucket at `key` for the earliest instant they fit (after
    /// every earlier booking), if that is within the reservation horizon. An admitted
    /// reply's `wait` is the time from the script's run to that instant.
    pub(crate) async fn reserve(&self, key: &str, n: u32) -> Result<Timed, RedisError> {
        self.run(&self.scripts.acquire, key, u64::from(n), 1, None)
            .await
    }

    /// How far ahead [`reserve`](Self::reserve) books an instant.
    pub(crate) fn reserve_horizon(&self) -> Duration {
        Duration::from_micros(self.reserve_us.load(Ordering::Acquire))
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
        self.run(&self.scripts.release, key, u64::from(n), at_us, None)
            .await
    }

    /// Pause the bucket at `key` for `d` (capped at `max_pause`).
    pub(crate) async fn pause(&self, key: &str, d: Duration) -> Result<Timed, RedisError> {
        // Rounded up: never end a pause early.
        let us = u64::try_from(d.as_nanos().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .min(self.max_pause_us);
        self.run(&self.scripts.pause, key, us, 0, None).await
    }

    async fn run(
        &self,
        script: &::redis::Script,
        key: &str,
        arg: u64,
        book: u64,
        lease: Option<(u32, u32)>,
    ) -> Result<Timed, RedisError> {
        self.breaker_admit()?;
        bump(&self.counters.round_trips);
        let mut conn = self.conn.clone();
        let log = format!("{key}:log");
        let keys = [key, log.as_str()];
        let (need, back) = lease.unwrap_or_default();
        let interval_us = self.interval_us.load(Ordering::Acquire);
        let mut tolerance_us = self.tolerance_us.load(Ordering::Acquire);
        if !self.is_gcra() {
            // The windows have no tolerance (`tau` is only checked against `T`), and their
            // `T` follows a rate control.
            tolerance_us = tolerance_us.max(interval_us);
        }
        let all = [
            interval_us,
            u64::from(self.burst),
            arg,
            self.max_pause_us,
            tolerance_us,
            self.window_us,
            u64::from(self.limit),
            book,
            u64::from(need),
            u64::from(back),
            u64::from(self.effective_limit.load(Ordering::Acquire)),
        ];
        // The lease script takes two arguments more; the windows three (the lease's two,
        // unused, then `E`).
        let args = if lease.is_some() {
            &all[..10]
        } else if self.is_gcra() {
            &all[..8]
        } else {
            &all[..]
        };
        let max_grant = if lease.is_some() {
            u32::try_from(arg).unwrap_or(u32::MAX)
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
            Ok(Ok(value)) => parse_grant(
                &value,
                self.reply_limit_us.load(Ordering::Acquire),
                max_grant,
            ),
            Ok(Err(e)) => Err(RedisError::from_client(e)),
            Err(_) => Err(RedisError::new(RedisErrorKind::Timeout, "redis timed out")),
        };
        match result {
            Ok((reply, granted, at_us)) => {
                self.breaker_success();
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

/// The tokens per window of `configured` width that `effective` allows: `⌊count × period /
/// effective period⌋`, at least 1 and at most the configured count. The effective period is
/// rounded to whole ns (`adaptive::effective`): a rate of exactly `k` tokens per window whose
/// period was rounded up still gives `k` (the numerator is raised by `count` ns' worth, less
/// than one token).
pub(crate) fn effective_limit(configured: Quota, effective: Quota) -> u32 {
    let count = u128::from(effective.count());
    let tokens = (count * u128::from(configured.period_ns()) + count)
        / u128::from(effective.period_ns().max(1));
    let most = configured.count();
    u32::try_from(tokens).map_or(most, |e| e.clamp(1, most))
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
            .field("quota", &self.quota)
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
        let at = |rate: f64| effective_limit(q, effective(q, rate).unwrap());
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
                let e = effective_limit(q, effective(q, rate).unwrap());
                assert_eq!(e, k, "{count} per {secs} s at {rate}/s");
            }
        }
    }
}
