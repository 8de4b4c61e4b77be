//! The builders of [`RedisBucket`] and [`RedisKeyed`].

use std::time::Duration;

use super::backend::Options;
use super::error::RedisError;
use super::failure::FailurePolicy;
use super::{RedisBucket, RedisKeyed};
use crate::{Algorithm, Quota};

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

        /// The first part of every Redis key this limit uses: `<prefix>:{…}`. 1 to 64
        /// printable ASCII characters, no spaces or braces. Default `tower-throttle`.
        ///
        /// Use one prefix per application and per limit, and keep other data out of it.
        pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
            self.options.prefix = prefix.into();
            self
        }

        /// How decisions are made: any [`Algorithm`], as for an in-process
        /// [`Bucket`](crate::Bucket). Default [`Algorithm::TokenBucket`].
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
        /// key: at most `max_pause + burst × interval` plus the booking horizon
        /// (`max(1 s, burst × interval)`). Default 1 hour.
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
    quota: Quota,
    name: Option<String>,
    options: Options,
}

impl RedisBucketBuilder {
    pub(crate) fn new(quota: Quota) -> Self {
        RedisBucketBuilder {
            quota,
            name: None,
            options: Options::default(),
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

    /// Check the settings and connect to Redis.
    ///
    /// Needs a tokio runtime (the connection runs on it).
    ///
    /// # Errors
    /// [`RedisErrorKind::Config`](super::RedisErrorKind::Config) for settings that cannot
    /// work; unless [`connect_lazily`](Self::connect_lazily) is set, an error of another kind
    /// when Redis does not answer within the connect timeout.
    pub async fn build(self) -> Result<RedisBucket, RedisError> {
        let name = self
            .name
            .as_deref()
            .ok_or(RedisError::config("redis bucket key not set"))?;
        let key = super::key::bucket_key(&self.options.prefix, name)?;
        RedisBucket::from_parts(self.options, self.quota, key).await
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
    quota: Quota,
    local_capacity: usize,
    options: Options,
}

impl RedisKeyedBuilder {
    pub(crate) fn new(quota: Quota) -> Self {
        RedisKeyedBuilder {
            quota,
            local_capacity: 10_000,
            options: Options::default(),
        }
    }

    shared_settings!();

    /// With [`FailurePolicy::Local`]: how many keys get an in-memory bucket of their own
    /// while Redis fails; beyond that, new keys share one. Default 10 000.
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
    /// work; unless [`connect_lazily`](Self::connect_lazily) is set, an error of another kind
    /// when Redis does not answer within the connect timeout.
    pub async fn build(self) -> Result<RedisKeyed, RedisError> {
        RedisKeyed::from_parts(self.options, self.quota, self.local_capacity).await
    }
}
