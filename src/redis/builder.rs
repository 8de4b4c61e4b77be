//! The builders of [`RedisBucket`] and [`RedisKeyed`].

use std::sync::Arc;
use std::time::Duration;

use super::config::Options;
use super::error::RedisError;
use super::failure::FailurePolicy;
use super::keyed::Resolve;
use super::{RedisBucket, RedisKeyed};
use crate::adaptive::{Adaptive, Control, Mode};
use crate::extract::KeyDigest;
use crate::observe::Observer;
#[cfg(doc)]
use crate::Bucket;
use crate::{Algorithm, Plan};

/// The settings both builders share, with their docs.
macro_rules! shared_settings {
    () => {
        /// The Redis server: `redis://[user:password@]host[:port][/db]`, or
        /// `redis+unix:///path/to/socket`. Required. Never printed by `Debug` (it may hold a
        /// password).
        pub fn url(mut self, url: impl Into<String>) -> Self {
            self.options.url = Some(url.into());
            self
        }

        /// A Redis Cluster (or Valkey cluster) instead of one server: the URLs of some of
        /// its nodes (`redis://host:port`; one reachable node is enough, the client learns
        /// the others). Feature `redis-cluster`; set either this or [`url`](Self::url).
        ///
        /// Every script's keys share one hash slot (the `{…}` in every key name), so each
        /// decision runs on the primary that owns the limit's slot; `MOVED`, `ASK` and
        /// failovers are followed by the client, and the failure policy applies per call as
        /// with one server. The cluster connects at [`build`](Self::build)
        /// (`connect_lazily` is refused). See
        /// [Redis Cluster](https://github.com/tower-throttle/tower-throttle/blob/main/docs/redis.md#redis-cluster).
        #[cfg(feature = "redis-cluster")]
        pub fn cluster<I, S>(mut self, nodes: I) -> Self
        where
            I: IntoIterator<Item = S>,
            S: Into<String>,
        {
            self.options.cluster = Some(nodes.into_iter().map(Into::into).collect());
            self
        }

        /// The first part of every Redis key this limit uses: `<prefix>:{…}`. 1 to 64
        /// printable ASCII characters, no spaces or braces. Default `tower-throttle` for a
        /// [`RedisBucket`], which its [`key`](RedisBucketBuilder::key) names; a
        /// [`RedisKeyed`] must set one, which names the limit.
        ///
        /// Use one prefix per application and per limit, and keep other data out of it.
        pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
            self.options.prefix = prefix.into();
            self.options.prefix_named = true;
            self
        }

        /// How decisions are made: any [`Algorithm`], as for an in-process
        /// [`Bucket`](crate::Bucket); for a [`Plan`](crate::Plan), its first quota's.
        /// Default the plan's ([`Algorithm::TokenBucket`] for a [`Quota`](crate::Quota)).
        ///
        /// Every process of a limit must use the same algorithm: a process with another one
        /// does not misread the key, it resets it to a fresh state of its own. The local
        /// fallback of [`FailurePolicy::Local`] uses the same algorithm.
        /// `Algorithm::leaky_bucket(max_queue)` bounds only the waiters of an in-process
        /// bucket: the Redis backend does not use `max_queue`.
        pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
            self.options.algorithm = algorithm;
            self
        }

        /// What decisions do when Redis fails. Default [`FailurePolicy::Closed`] (see
        /// [which to pick](FailurePolicy)).
        pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
            self.options.policy = policy;
            self
        }

        /// The longest a decision waits for Redis before the failure policy answers.
        /// Default 50 ms.
        pub fn timeout(mut self, timeout: Duration) -> Self {
            self.options.timeout = timeout;
            self
        }

        /// The longest [`build`](Self::build) waits for Redis, and the timeout of each
        /// connection attempt. Default 1 s.
        pub fn connect_timeout(mut self, timeout: Duration) -> Self {
            self.options.connect_timeout = timeout;
            self
        }

        /// After 3 failures in a row, how long decisions skip Redis (answering from the
        /// failure policy at once, instead of each waiting for the timeout) before one call
        /// tries it again. Default 500 ms.
        pub fn probe_interval(mut self, interval: Duration) -> Self {
            self.options.probe_interval = interval;
            self
        }

        /// The longest pause honoured; longer ones are cut to this. It also bounds how long
        /// a corrupt or far-future state (a clock stepped back after a failover) can hold a
        /// key: only a stored pause reaches further than the booking horizon `H`, so at most
        /// `max(max_pause, H) + burst × interval` (token and leaky bucket,
        /// `H = max(1 s, burst × interval)`) or `max(max_pause, H) + 2 × period` (windows,
        /// `H = max(1 s, period)`). Default 1 hour.
        pub fn max_pause(mut self, max: Duration) -> Self {
            self.options.max_pause = max;
            self
        }

        /// Build without waiting for Redis: the connection is made on first use, and until
        /// Redis answers, decisions follow the failure policy. Default: `build` connects
        /// and fails if Redis does not answer.
        pub fn connect_lazily(mut self) -> Self {
            self.options.lazy = true;
            self
        }
    };
}

/// Builds a [`RedisBucket`]; from [`RedisBucket::builder`].
///
/// ```no_run
/// use std::time::Duration;
/// use tower_throttle::redis::{FailurePolicy, RedisBucket};
/// use tower_throttle::Quota;
///
/// # async fn run() -> Result<(), tower_throttle::BoxError> {
/// let bucket = RedisBucket::builder(Quota::per_second(100).burst(10))
///     .url("redis://127.0.0.1:6379")
///     .key_prefix("billing")
///     .key("github-api")
///     .failure_policy(FailurePolicy::Local { fraction: 0.25 }) // 4 processes
///     .timeout(Duration::from_millis(50))
///     .build()
///     .await?;
/// assert_eq!(bucket.redis_key(), "billing:{github-api}");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisBucketBuilder {
    plan: Plan,
    name: Option<String>,
    lease: Option<u32>,
    lease_period: Duration,
    observer: Option<Arc<dyn Observer>>,
    mode: Mode,
    ramp: bool,
    options: Options,
}

/// How long a lease lasts unless set.
const DEFAULT_LEASE_PERIOD: Duration = Duration::from_millis(100);
/// The longest lease period accepted.
const MAX_LEASE_PERIOD: Duration = Duration::from_secs(3600);

impl RedisBucket {
    /// The way to make a `RedisBucket`: a builder for the URL, key, failure policy, timeouts
    /// and more; [`build`](RedisBucketBuilder::build) connects.
    ///
    /// A [`Plan`] of several quotas is decided as one: a request goes when every quota
    /// has room, and is counted in all of them, in one script run on one key. The rate
    /// control and [`set_quota`](RedisBucket::set_quota) act on the first quota; leases need
    /// one quota.
    pub fn builder(plan: impl Into<Plan>) -> RedisBucketBuilder {
        RedisBucketBuilder::new(plan.into())
    }
}

impl RedisBucketBuilder {
    fn new(plan: Plan) -> Self {
        let options = Options {
            algorithm: plan.parts()[0].algorithm,
            ..Options::default()
        };
        RedisBucketBuilder {
            plan,
            name: None,
            lease: None,
            lease_period: DEFAULT_LEASE_PERIOD,
            observer: None,
            mode: Mode::Converge,
            ramp: false,
            options,
        }
    }

    /// The bucket's name: every process using the same URL, prefix and name shares one
    /// bucket, stored at `<prefix>:{<name>}`. 1 to 128 printable ASCII characters, no spaces
    /// or braces. Required.
    pub fn key(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    shared_settings!();

    /// Leases: hold up to `max` tokens taken from Redis ahead of demand and admit locally
    /// from them, for [`lease_period`](Self::lease_period) at most (default 100 ms); the
    /// tasks that find too few wait in line, and one round trip at a time takes what all
    /// of them need and the next lease. Unused tokens go back to Redis when the lease ends
    /// or the last handle is dropped. Off by default (one round trip per decision).
    ///
    /// A hot limit then costs a round trip per lease, not per request, at a bounded price:
    /// over any interval of length `t`, the processes admit at most
    /// `burst + rate·t + (tokens they hold in leases)`, that is at most
    /// `burst + rate·t + handles × max` (a handle and its clones share one lease); a pause
    /// made by another process holds this one within one lease period; a process that dies
    /// loses at most its leases (until the bucket refills); first come, first served across
    /// processes holds per lease, not per request. Lease sizes follow each handle's demand
    /// (doubling while used up within their period, up to `max`). See the
    /// [Redis docs](https://github.com/tower-throttle/tower-throttle/blob/main/docs/redis.md#leases).
    ///
    /// The token bucket only, and `1 ≤ max ≤ burst`: [`build`](Self::build) refuses
    /// anything else.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tower_throttle::redis::RedisBucket;
    /// use tower_throttle::Quota;
    ///
    /// # async fn run() -> Result<(), tower_throttle::BoxError> {
    /// let hot = RedisBucket::builder(Quota::per_second(50_000).burst(500))
    ///     .url("redis://127.0.0.1:6379")
    ///     .key("search-api")
    ///     .lease(16)
    ///     .lease_period(Duration::from_millis(100))
    ///     .build()
    ///     .await?;
    /// hot.acquire(1).await?; // one round trip brings up to 16 tokens
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease(mut self, max: u32) -> Self {
        self.lease = Some(max);
        self
    }

    /// How long a lease lasts (from its request): the longest a pause of another process
    /// takes to reach this one, and the longest unused tokens stay away from the others.
    /// Default 100 ms; longer than zero and at most an hour. Takes effect with
    /// [`lease`](Self::lease).
    pub fn lease_period(mut self, period: Duration) -> Self {
        self.lease_period = period;
        self
    }

    /// Keep the configured rate whatever servers say: a push-back pauses every process and
    /// nothing else (as [`BucketBuilder::fixed_rate`](crate::BucketBuilder::fixed_rate)).
    pub fn fixed_rate(mut self) -> Self {
        self.mode = Mode::Fixed;
        self
    }

    /// Start the configured rate with a ramp, as
    /// [`BucketBuilder::ramp`](crate::BucketBuilder::ramp) does.
    pub fn ramp(mut self) -> Self {
        self.ramp = true;
        self
    }

    /// Discover the server's rate, as [`Bucket::adaptive`] does, with this builder's quota
    /// as the ceiling: every process searches from `settings`' start rate and learns from
    /// the push-backs of all.
    pub fn adaptive(mut self, settings: Adaptive) -> Self {
        self.mode = Mode::Search {
            start: settings.start,
            floor: settings.floor,
        };
        self
    }

    /// Rank the waiters of every process by [`Priority`](crate::Priority) class, with
    /// these weights (critical, normal, background; each clamped to `1..=1000`): a booking
    /// takes a place within its class's share of the booking horizon, the share counted
    /// among the classes with bookings ahead or a waiter refused lately (an idle class's
    /// share goes to the others). So while several classes wait, each is admitted its
    /// weight's share of the rate within the horizon's tokens per class, in every process
    /// alike ([Redis docs](https://github.com/tower-throttle/tower-throttle/blob/main/docs/redis.md#priorities)).
    /// Default: waiters go in the order they reach Redis, whatever their class. Not with
    /// [`lease`](Self::lease).
    pub fn priority_weights(mut self, weights: [u32; 3]) -> Self {
        self.options.weights = Some(weights.map(|w| w.clamp(1, 1000)));
        self
    }

    /// Keep `share` of the limit for critical requests, in every process, as
    /// [`BucketBuilder::reserve_for_critical`](crate::BucketBuilder::reserve_for_critical)
    /// does in one: a request of another class is admitted only while, after it, at least
    /// `share` of each quota stays free; past that point it is
    /// [`Denied::Shed`](crate::Denied::Shed) (or it waits), decided in the same script run.
    /// Default: no reserve. Not with [`lease`](Self::lease).
    ///
    /// # Panics
    /// When `share` is not in `[0, 1)`.
    pub fn reserve_for_critical(mut self, share: f64) -> Self {
        assert!(
            (0.0..1.0).contains(&share),
            "the share kept for critical requests must be in [0, 1), not {share}"
        );
        self.options.reserve = share;
        self
    }

    /// Report to `observer` (see [`observe`](crate::observe)) what this limit decides, on
    /// every path: [`RedisBucket::acquire`], [`RedisBucket::try_acquire`],
    /// [`RedisBucket::pause`] and the layers report admissions (with the time waited),
    /// refusals and pauses, as an in-process bucket's observer
    /// ([`BucketBuilder::observer`](crate::BucketBuilder::observer)) does. Token levels
    /// are reported for the token and leaky bucket, whose replies say them (the windows'
    /// replies do not).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Check the settings and connect to Redis.
    ///
    /// Needs a tokio runtime (the connection runs on it).
    ///
    /// # Errors
    /// [`RedisErrorKind::Config`](super::RedisErrorKind::Config) for settings that cannot
    /// work; unless [`connect_lazily`](Self::connect_lazily) is set, an error of another kind
    /// when Redis does not answer within the connect timeout.
    pub async fn build(mut self) -> Result<RedisBucket, RedisError> {
        let ranked = self.options.weights.is_some() || self.options.reserve > 0.0;
        if self.lease.is_some() && ranked {
            return Err(RedisError::config(
                "leases admit in process: they cannot rank classes nor keep a reserve",
            ));
        }
        if self.lease.is_some() && !self.plan.counts_requests_only() {
            return Err(RedisError::config(
                "leases need a plan whose quotas count requests alone",
            ));
        }
        if let Some(max) = self.lease {
            let period = self.lease_period;
            if self.options.algorithm != Algorithm::TokenBucket {
                return Err(RedisError::config("leases need the token bucket algorithm"));
            }
            if max == 0 || max > self.plan.quota().burst_size() {
                return Err(RedisError::config(
                    "a lease must hold 1 to burst tokens (lease ≤ the quota's burst)",
                ));
            }
            if period.is_zero() || period > MAX_LEASE_PERIOD {
                return Err(RedisError::config(
                    "the lease period must be longer than zero and at most an hour",
                ));
            }
            self.options.lease = Some((max, period));
        }
        let name = self
            .name
            .as_deref()
            .ok_or(RedisError::config("redis bucket key not set"))?;
        let key = super::key::bucket_key(&self.options.prefix, name)?;
        let now = tokio::time::Instant::now();
        let plan = self.plan.with_algorithm(self.options.algorithm);
        let control = Control::new(plan.quota(), self.mode, self.ramp, true, now);
        RedisBucket::from_parts(self.options, plan, key, self.observer, control).await
    }
}

/// Builds a [`RedisKeyed`]; from [`RedisKeyed::builder`].
///
/// ```no_run
/// use tower_throttle::redis::{FailurePolicy, RedisKeyed};
/// use tower_throttle::Quota;
///
/// # async fn run() -> Result<(), tower_throttle::BoxError> {
/// let per_user = RedisKeyed::builder(Quota::per_second(10).burst(20))
///     .url("redis://127.0.0.1:6379")
///     .key_prefix("api-per-user")
///     .failure_policy(FailurePolicy::Local { fraction: 0.5 }) // 2 processes
///     .build()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisKeyedBuilder {
    plan: Plan,
    plans: Vec<(Box<str>, Plan)>,
    resolve: Option<Resolve>,
    local_capacity: usize,
    options: Options,
}

impl RedisKeyed {
    /// The way to make a `RedisKeyed`: a builder for the URL, key prefix, failure policy,
    /// timeouts and more; [`build`](RedisKeyedBuilder::build) connects.
    ///
    /// `plan` is the default plan: a [`Quota`](crate::Quota), or a [`Plan`] of several
    /// quotas decided as one, in one script run per request on the key's one Redis key.
    /// Other plans, for the keys [`resolve`](RedisKeyedBuilder::resolve) names, come from
    /// [`plan`](RedisKeyedBuilder::plan).
    pub fn builder(plan: impl Into<Plan>) -> RedisKeyedBuilder {
        RedisKeyedBuilder::new(plan.into())
    }
}

impl RedisKeyedBuilder {
    fn new(plan: Plan) -> Self {
        let options = Options {
            algorithm: plan.parts()[0].algorithm,
            ..Options::default()
        };
        RedisKeyedBuilder {
            plan,
            plans: Vec::new(),
            resolve: None,
            local_capacity: 10_000,
            options,
        }
    }

    /// Another plan, `name`, for the keys [`resolve`](Self::resolve) gives that name. A
    /// second plan of the same name replaces the first. Every process must know the same
    /// plans by the same names.
    pub fn plan(mut self, name: impl Into<Box<str>>, plan: impl Into<Plan>) -> Self {
        let name = name.into();
        self.plans.retain(|(n, _)| *n != name);
        self.plans.push((name, plan.into()));
        self
    }

    /// How to find a key's plan: the name of one given to [`plan`](Self::plan), or `None`
    /// (or a name no plan has) for the default plan. Called on every decision, with the key
    /// as the caller gave it (before it is digested), so keep it cheap: a lookup in a map
    /// of API keys to plan names, say.
    ///
    /// A key whose plan changes takes the new plan on its next request, in every process:
    /// each quota's state is carried into the new plan's quota at the same place, as
    /// [`RedisKeyed::set_quota`] does (no burst, its progress kept). A quota whose algorithm
    /// or window length changes starts afresh, as does a quota the old plan lacked.
    ///
    /// Keys are named by their digest ([`StableKey`](crate::extract::StableKey)), as
    /// [`HeaderKey`](crate::extract::HeaderKey) keys requests: map the digests of the keys,
    /// `KeyDigest::of_bytes(b"api-key")` or `"user-42".key_digest()`.
    pub fn resolve<F>(mut self, resolve: F) -> Self
    where
        F: Fn(&KeyDigest) -> Option<&str> + Send + Sync + 'static,
    {
        self.resolve = Some(Resolve(Arc::new(resolve)));
        self
    }

    shared_settings!();

    /// With [`FailurePolicy::Local`]: how many keys are kept in memory, each with a bucket
    /// of its own, while Redis fails; beyond that, the bucket holding the most makes room for
    /// a new key (it starts over empty when it comes back). Default 10 000.
    pub fn local_capacity(mut self, keys: usize) -> Self {
        self.local_capacity = keys.max(1);
        self
    }

    /// Check the settings and connect to Redis.
    ///
    /// Needs a tokio runtime (the connection runs on it).
    ///
    /// # Errors
    /// [`RedisErrorKind::Config`](super::RedisErrorKind::Config) for settings that cannot
    /// work, and when no [`key_prefix`](Self::key_prefix) was set: the prefix names the
    /// limit, and two keyed limits on one prefix would share their keys' state. Unless
    /// [`connect_lazily`](Self::connect_lazily) is set, an error of another kind when Redis
    /// does not answer within the connect timeout.
    pub async fn build(self) -> Result<RedisKeyed, RedisError> {
        if !self.options.prefix_named {
            return Err(RedisError::config(
                "a keyed limit needs a key_prefix of its own: keyed limits on one prefix share \
                 their keys",
            ));
        }
        let plan = self.plan.with_algorithm(self.options.algorithm);
        RedisKeyed::from_parts(
            self.options,
            plan,
            self.plans,
            self.resolve,
            self.local_capacity,
        )
        .await
    }
}
