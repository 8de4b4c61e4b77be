//! One limit in Redis, on one key or on one key of a keyed limit, behind one type, so that a
//! test runs the same checks on both. (A test file includes it beside `redis_support`:
//! `#[path = "redis_support/limit.rs"] mod limit;`.)
#![allow(dead_code)] // each test file uses what it needs

use std::time::Duration;

use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisKeyed};
use tower_throttle::{Algorithm, Denied, Quota};

use crate::redis_support::redis_url;

/// A `RedisBucket`, or the key `"user"` of a `RedisKeyed`.
#[derive(Clone)]
pub(crate) enum Limit {
    One(RedisBucket),
    PerKey(RedisKeyed),
}

impl Limit {
    /// A new handle on the limit under `prefix` (a fresh one knows nothing of what other
    /// handles did): failure policy `Closed`, a timeout of 5 s.
    pub(crate) async fn new(
        prefix: &str,
        quota: Quota,
        algorithm: Algorithm,
        max_pause: Duration,
        per_key: bool,
    ) -> Self {
        if per_key {
            let k = RedisKeyed::builder(quota)
                .url(redis_url())
                .key_prefix(prefix)
                .algorithm(algorithm)
                .max_pause(max_pause)
                .failure_policy(FailurePolicy::Closed)
                .timeout(Duration::from_secs(5))
                .build()
                .await
                .expect("connect to the test Redis");
            Limit::PerKey(k)
        } else {
            let b = RedisBucket::builder(quota)
                .url(redis_url())
                .key_prefix(prefix)
                .key("k")
                .algorithm(algorithm)
                .max_pause(max_pause)
                .failure_policy(FailurePolicy::Closed)
                .timeout(Duration::from_secs(5))
                .build()
                .await
                .expect("connect to the test Redis");
            Limit::One(b)
        }
    }

    /// The limit's key in Redis (the sliding log adds `<key>:log`).
    pub(crate) fn key(&self) -> String {
        match self {
            Limit::One(b) => b.redis_key().to_owned(),
            Limit::PerKey(k) => k.redis_key("user"),
        }
    }

    pub(crate) async fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        match self {
            Limit::One(b) => b.try_acquire(n).await,
            Limit::PerKey(k) => k.try_acquire("user", n).await,
        }
    }

    pub(crate) async fn acquire(&self, n: u32) -> Result<(), Denied> {
        match self {
            Limit::One(b) => b.acquire(n).await,
            Limit::PerKey(k) => k.acquire("user", n).await,
        }
    }

    pub(crate) async fn pause(&self, d: Duration) -> Result<(), Denied> {
        match self {
            Limit::One(b) => b.pause(d).await,
            Limit::PerKey(k) => k.pause("user", d).await,
        }
    }
}
