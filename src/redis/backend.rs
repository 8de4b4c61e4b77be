//! One call of a script: the scripts of a limit, the parameters in force, the timeout, the
//! breaker and the counters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ::redis::Value;
use tokio::time::Instant;

use super::args::{base_marker, call_args, Op, Rank};
use super::breaker::Breaker;
use super::config::Options;
use super::conn::Conn;
use super::error::{RedisError, RedisErrorKind};
use super::failure::FailurePolicy;
use super::params::{Params, Rates, Shape};
use super::script::{parse_grant, Reply, Scripts};
use super::stats::{bump, Counters, RedisStats};
use crate::{Algorithm, Cost, Denied, ExceedsBurst, Plan, Priority, Quota};

/// A reply with the local instants around its round trip: the script ran in between.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timed {
    pub(crate) reply: Reply,
    /// Tokens granted: 0 or 1, or for a lease up to its size.
    pub(crate) granted: u32,
    /// The admission's instant on the Redis clock, µs (0: none said), which a release of a
    /// booking names.
    pub(crate) at_us: u64,
    /// A plan's refusal: the quota that alone would wait longest (0 otherwise).
    pub(crate) part: usize,
    pub(crate) sent: Instant,
    pub(crate) received: Instant,
}

/// A limit's scripts on its connection, with everything a call needs.
pub(crate) struct Backend {
    conn: Conn,
    scripts: Scripts,
    /// The algorithm of the (first) quota.
    pub(crate) algorithm: Algorithm,
    /// The arguments of the (first) quota in force; see [`Params`]. A new quota and the rate
    /// control act on it.
    rates: Rates,
    /// A plan's other quotas, at their configured parameters.
    rest: Box<[(Shape, Params)]>,
    /// The plan as built (its first quota is the one in force in `rates`).
    plan: Plan,
    /// Where the plan counts other resources than requests: 1 for each quota that counts
    /// requests, 0 for the others (a request's amounts, per token of it).
    requests: Option<Box<[u64]>>,
    /// The base plan's marker: what a plan's state with no marker was written with
    /// (`lua/stack/parts.lua`). A keyed limit's default plan as built, for all its plans.
    base: Arc<str>,
    /// Whether calls run the plan scripts (`lua/stack/`): for a plan of several quotas, and
    /// for every keyed limit (the marker in a key's state carries it across changes).
    stacked: bool,
    /// The quota of the plan that refused last.
    refused_by: AtomicUsize,
    pub(crate) options: Options,
    /// Shared by the backends of one keyed limit's plans.
    breaker: Arc<Breaker>,
    pub(crate) counters: Arc<Counters>,
}

impl Backend {
    /// Check the settings and connect (unless lazy), loading the scripts. A plan of one
    /// quota runs the scripts of one quota unless `stacked`.
    pub(crate) async fn connect(
        options: Options,
        plan: &Plan,
        stacked: bool,
    ) -> Result<Self, RedisError> {
        super::key::check_prefix(&options.prefix)?;
        options.policy.local_quota(plan.quota())?;
        if options.timeout.is_zero() || options.connect_timeout.is_zero() {
            return Err(RedisError::config(
                "redis timeouts must be longer than zero",
            ));
        }
        let conn = Conn::of(&options).await?;
        let breaker = Arc::new(Breaker::new(options.probe_interval));
        let base = base_marker(plan, &options)?;
        let backend = Backend::on(conn, options, plan, stacked, base, breaker, Arc::default())?;
        backend.load().await?;
        Ok(backend)
    }

    /// Another plan on this backend's connection, breaker and counters (a keyed limit's).
    pub(crate) async fn sibling(&self, plan: &Plan) -> Result<Self, RedisError> {
        let backend = Backend::on(
            self.conn.clone(),
            self.options.clone(),
            plan,
            true,
            Arc::clone(&self.base),
            Arc::clone(&self.breaker),
            Arc::clone(&self.counters),
        )?;
        backend.load().await?;
        Ok(backend)
    }

    fn on(
        conn: Conn,
        options: Options,
        plan: &Plan,
        stacked: bool,
        base: Arc<str>,
        breaker: Arc<Breaker>,
        counters: Arc<Counters>,
    ) -> Result<Self, RedisError> {
        let max_pause_us = u64::try_from(options.max_pause.as_micros()).unwrap_or(u64::MAX);
        let parts = plan.parts();
        let stacked = stacked || parts.len() > 1;
        let algorithm = parts[0].algorithm;
        if stacked && options.lease.is_some() {
            return Err(RedisError::config(
                "leases need a limit of one quota (a plan of several decides on all of them)",
            ));
        }
        let rates = Rates::new(Shape::new(algorithm, parts[0].quota, max_pause_us)?);
        let rest = parts[1..]
            .iter()
            .map(|part| {
                let rates = Rates::new(Shape::new(part.algorithm, part.quota, max_pause_us)?);
                Ok((rates.shape, rates.params()))
            })
            .collect::<Result<_, RedisError>>()?;
        let scripts = if stacked {
            let algorithms: Vec<Algorithm> = parts.iter().map(|p| p.algorithm).collect();
            Scripts::plan(&algorithms)
        } else {
            Scripts::one(algorithm, options.lease.is_some())
        };
        Ok(Backend {
            conn,
            scripts,
            algorithm,
            rates,
            rest,
            plan: plan.clone(),
            requests: (!plan.counts_requests_only()).then(|| plan.amounts(&1.into()).collect()),
            base,
            stacked,
            refused_by: AtomicUsize::new(0),
            breaker,
            counters,
            options,
        })
    }

    /// Load the scripts (unless lazy), within the connect timeout.
    async fn load(&self) -> Result<(), RedisError> {
        if !self.options.lazy {
            let load = async {
                let mut conn = self.conn.clone();
                self.scripts.acquire.load_async(&mut conn).await?;
                self.scripts.pause.load_async(&mut conn).await?;
                if let Some(lease) = &self.scripts.lease {
                    lease.load_async(&mut conn).await?;
                }
                Ok::<_, ::redis::RedisError>(())
            };
            match tokio::time::timeout(self.options.connect_timeout, load).await {
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
        Ok(())
    }

    /// A handle on the connection, for commands beside the scripts.
    pub(crate) fn connection(&self) -> Conn {
        self.conn.clone()
    }

    pub(crate) fn policy(&self) -> &FailurePolicy {
        &self.options.policy
    }

    pub(crate) fn stats(&self) -> RedisStats {
        self.counters.stats()
    }

    /// The arguments in force, all of one rate.
    pub(crate) fn params(&self) -> Params {
        self.rates.params()
    }

    /// The configured quota in force in this process.
    pub(crate) fn quota(&self) -> Quota {
        self.params().quota
    }

    /// The plan, its first quota the one in force in this process.
    pub(crate) fn plan(&self) -> Plan {
        self.plan.with_first(self.quota())
    }

    /// The quota of the plan that refused last (of a limit's own requests, a refusal just
    /// made).
    pub(crate) fn refused_by(&self) -> usize {
        self.refused_by.load(Ordering::Relaxed)
    }

    /// The largest cost of one request now.
    pub(crate) fn max_cost(&self) -> u32 {
        self.rest
            .iter()
            .map(|(_, p)| p.max_cost)
            .fold(self.params().max_cost, u32::min)
    }

    /// Whether a request of `n` tokens can ever fit now.
    pub(crate) fn check(&self, n: u32) -> Result<(), ExceedsBurst> {
        ExceedsBurst::check(n.into(), self.max_cost().into())
    }

    /// Emission interval in ns, as the scripts see it (whole µs).
    pub(crate) fn interval_ns(&self) -> u64 {
        self.params().interval_us * 1000
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
        self.params().tolerance_us * 1000
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

    /// Whether the limit is one quota of the token or leaky bucket (the state is "full again
    /// at").
    pub(crate) fn is_gcra(&self) -> bool {
        !self.stacked && self.algorithm.is_gcra()
    }

    /// The longest pause honoured.
    pub(crate) fn max_pause(&self) -> Duration {
        Duration::from_micros(self.rates.shape.max_pause_us)
    }

    /// Take `n` (1..=max_cost) tokens of the bucket at `key`, if they fit now; `each`: the
    /// amount of each quota of a plan, where they differ (else `n` requests). `book`: take
    /// them for the earliest instant they fit (after every earlier booking), if that is
    /// within the reservation horizon; an admitted reply's `wait` is the time from the
    /// script's run to that instant. `priority`: the request's class, for the reserve kept
    /// for critical requests and the classes' shares, where the limit has them.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        n: u32,
        book: bool,
        each: Option<&[u64]>,
        priority: Priority,
    ) -> Result<Timed, RedisError> {
        let rank = Rank::of(priority, self.options.reserve, self.options.weights);
        let op = Op::Acquire { n, book, rank };
        self.run(&self.scripts.acquire, key, op, each).await
    }

    /// Count `each` (an amount per quota) at `key` now, whether it fits or not: a
    /// settlement's overrun. The scripts' clamps bound the debt.
    pub(crate) async fn owe(&self, key: &str, each: &[u64]) -> Result<Timed, RedisError> {
        let op = Op::Owe { n: 0 };
        self.run(&self.scripts.acquire, key, op, Some(each)).await
    }

    /// Whether every quota of the plan counts requests.
    pub(crate) fn counts_requests_only(&self) -> bool {
        self.requests.is_none()
    }

    /// The requests `cost` counts, and its amount per quota when the plan counts other
    /// resources too.
    pub(crate) fn price(&self, cost: &Cost) -> (u32, Option<Arc<[u64]>>) {
        let each = (!self.counts_requests_only()).then(|| self.amounts(cost));
        (cost.of(&crate::Resource::REQUESTS), each)
    }

    /// What `cost` counts in each quota of the plan.
    pub(crate) fn amounts(&self, cost: &Cost) -> Arc<[u64]> {
        self.plan.amounts(cost).collect()
    }

    /// Whether the plan has an in-flight quota ([`Plan::in_flight`]).
    pub(crate) fn holds_in_flight(&self) -> bool {
        self.plan.parts().iter().any(|p| p.in_flight)
    }

    /// What a request admitted for `each` (an amount per quota) holds while in flight: its
    /// amount of each in-flight quota ([`Plan::in_flight`]), nothing of the others.
    pub(crate) fn in_flight(&self, each: &[u64]) -> Vec<u64> {
        let parts = self.plan.parts().iter();
        each.iter()
            .zip(parts)
            .map(|(a, p)| a * u64::from(p.in_flight))
            .collect()
    }

    /// Whether an amount per quota can ever fit now.
    pub(crate) fn check_each(&self, each: &[u64]) -> Result<(), ExceedsBurst> {
        let caps = std::iter::once(self.params().max_cost)
            .chain(self.rest.iter().map(|(_, p)| p.max_cost));
        caps.zip(each)
            .try_for_each(|(cap, &n)| ExceedsBurst::check(n, cap.into()))
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
        self.run(script, key, Op::Lease { want, need, back }, None)
            .await
    }

    /// How far ahead a booking ([`acquire`](Self::acquire)) takes an instant.
    pub(crate) fn reserve_horizon(&self) -> Duration {
        Duration::from_micros(self.params().reserve_us)
    }

    /// Give back `n` tokens of an unused admission of the bucket at `key`.
    pub(crate) async fn release(&self, key: &str, n: u32) -> Result<Timed, RedisError> {
        self.release_booked(key, n, 0, None).await
    }

    /// Give back `n` tokens of an admission booked for the instant `at_us` (Redis clock,
    /// from its reply; 0: an admission made now) that was not used. The windows give them
    /// back to the window of that instant (the token and leaky bucket need no instant).
    /// `each` as in [`acquire`](Self::acquire).
    pub(crate) async fn release_booked(
        &self,
        key: &str,
        n: u32,
        at_us: u64,
        each: Option<&[u64]>,
    ) -> Result<Timed, RedisError> {
        let op = Op::Release { n, at_us };
        self.run(&self.scripts.release, key, op, each).await
    }

    /// Give back `n` tokens of an admission of the limit at `key` that was not used: as
    /// [`release`](Self::release), checked as a request of `n` tokens first.
    pub(crate) async fn give_back(&self, key: &str, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        self.check(n)?;
        self.release(key, n).await.map(drop).map_err(Denied::from)
    }

    /// Redis failed a decision: the [`FailurePolicy`] answers it instead (counted in
    /// [`RedisStats::fallbacks`]).
    pub(crate) fn fallback(&self) -> &FailurePolicy {
        bump(&self.counters.fallbacks);
        self.policy()
    }

    /// Publish `message` on `channel`, best effort (within the timeout; errors ignored).
    pub(crate) async fn publish(&self, channel: &str, message: &str) {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("PUBLISH");
        cmd.arg(channel).arg(message);
        let _ = tokio::time::timeout(self.options.timeout, cmd.query_async::<i64>(&mut conn)).await;
    }

    /// Pause the bucket at `key` for `d` (capped at `max_pause`); `held`: only the quotas
    /// of a plan it marks (the others are sent a pause of 0 µs: none).
    pub(crate) async fn pause(
        &self,
        key: &str,
        d: Duration,
        held: Option<&[bool]>,
    ) -> Result<Timed, RedisError> {
        // Rounded up: never end a pause early; at least 1 µs, so that 0 says "not held".
        let us = u64::try_from(d.as_nanos().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .min(self.rates.shape.max_pause_us)
            .max(1);
        let each: Option<Vec<u64>> = held.map(|h| h.iter().map(|&h| us * u64::from(h)).collect());
        let rank = Rank::of(Priority::Normal, 0.0, self.options.weights);
        self.run(
            &self.scripts.pause,
            key,
            Op::Pause { us, rank },
            each.as_deref(),
        )
        .await
    }

    async fn run(
        &self,
        script: &::redis::Script,
        key: &str,
        op: Op,
        each: Option<&[u64]>,
    ) -> Result<Timed, RedisError> {
        self.breaker.admit()?;
        bump(&self.counters.round_trips);
        let mut conn = self.conn.clone();
        // One read: every argument of this call is of one rate.
        let p = self.params();
        // `n` requests, nothing of the other resources.
        let requests: Option<Vec<u64>> = match (each, &self.requests, op.amount()) {
            (None, Some(per), Some(n)) => Some(per.iter().map(|r| r * u64::from(n)).collect()),
            _ => None,
        };
        let each = each.or(requests.as_deref());
        let (keys, args, marker) = call_args(
            key,
            &p,
            &self.rates.shape,
            &self.rest,
            self.stacked,
            op,
            each,
        );
        // The plan scripts' markers: this call's and the base plan's.
        let markers = marker.as_deref().map(|m| [m, &*self.base]);
        let max_grant = if let Op::Lease { want, need, .. } = op {
            want.min(p.burst).max(need)
        } else {
            1
        };
        let reply_limit_us = self
            .rest
            .iter()
            .map(|(_, p)| p.reply_limit_us)
            .fold(p.reply_limit_us, u64::max);
        let mut call = script.prepare_invoke();
        for k in &keys {
            call.key(k);
        }
        for a in &args {
            call.arg(a);
        }
        for m in markers.iter().flatten() {
            call.arg(m);
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
                        .arg(&args[..])
                        .arg(markers.as_ref().map_or(&[][..], |m| &m[..]))
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
            Ok(Ok(value)) => parse_grant(&value, reply_limit_us, max_grant, self.rest.len() + 1),
            Ok(Err(e)) => Err(RedisError::from_client(e)),
            Err(_) => Err(RedisError::new(RedisErrorKind::Timeout, "redis timed out")),
        };
        match result {
            Ok((reply, granted, at_us, part)) => {
                if self.breaker.success() {
                    trace_event!(info, "redis answers again; decisions are shared again");
                }
                self.rates.answered(&p);
                if !reply.admitted {
                    self.refused_by.store(part, Ordering::Relaxed);
                }
                Ok(Timed {
                    reply,
                    granted,
                    at_us,
                    part,
                    sent,
                    received,
                })
            }
            Err(e) => {
                bump(&self.counters.failures);
                self.failed(&e);
                Err(e)
            }
        }
    }

    fn failed(&self, e: &RedisError) {
        if e.is_key_specific() {
            trace_event!(warn, error = %e, "redis rate limit key unusable; failure policy applies");
        } else if self.breaker.failure() {
            trace_event!(warn, error = %e, policy = ?self.options.policy, "redis failing; failure policy applies");
        }
    }

    /// How many runs of failures have begun: a local fallback starts afresh (empty) when
    /// this has moved since it last decided.
    pub(crate) fn outages(&self) -> u64 {
        self.breaker.outages()
    }
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
