//! A Redis backend: one limit shared by many processes, atomically (feature `redis`).
//!
//! When several processes — workers on several machines sharing one API token, or replicas
//! of a server — must share one limit, the bucket lives in Redis. [`RedisBucket`] is one
//! shared limit; [`RedisKeyed`] is one limit per key (user, API key, address). Each decision
//! is one Lua script run atomically by Redis, on the Redis clock, with the semantics of the
//! in-process [`Bucket`](crate::Bucket) for every [`Algorithm`](crate::Algorithm); waiters of
//! every process are served first come, first served; when Redis fails, the
//! [`FailurePolicy`] answers.
//!
//! ```no_run
//! use std::time::Duration;
//! use tower_throttle::redis::{FailurePolicy, RedisBucket};
//! use tower_throttle::{Algorithm, Quota};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let bucket = RedisBucket::builder(Quota::per_second(100).burst(10))
//!     .url("redis://127.0.0.1:6379")
//!     .key_prefix("myapp")
//!     .key("github-api")                                     // → Redis key "myapp:{github-api}"
//!     .algorithm(Algorithm::TokenBucket)                     // the default; any Algorithm works
//!     .failure_policy(FailurePolicy::Local { fraction: 0.25 }) // 4 processes; default Closed
//!     .timeout(Duration::from_millis(50))
//!     .build()
//!     .await?;
//!
//! let worker = bucket.clone();   // the same limit; so is a RedisBucket in another process
//! worker.acquire(1).await?;      // waits its turn
//! bucket.try_acquire(1).await.ok(); // or answers at once
//! bucket.pause(Duration::from_secs(30)).await?; // a 429 here holds every process
//! # Ok(())
//! # }
//! ```
//!
//! Every process of a limit uses the same URL, key prefix, key, [`Quota`](crate::Quota) and
//! algorithm. The layers take a [`RedisBucket`] (or a [`RedisKeyed`]) where they take a
//! [`Bucket`](crate::Bucket). Failure policy, leases,
//! keys, Redis Cluster and deployment:
//! [`docs/redis.md`](https://github.com/tower-throttle/tower-throttle/blob/main/docs/redis.md).

mod args;
mod backend;
mod booking;
mod breaker;
mod bucket;
mod builder;
mod config;
mod conn;
mod error;
mod failure;
mod key;
mod keyed;
mod lane;
mod lease;
mod observed;
mod params;
mod rate;
mod script;
mod source;
mod stats;
mod steer;
mod told;

pub use self::bucket::RedisBucket;
pub use self::builder::{RedisBucketBuilder, RedisKeyedBuilder};
pub use self::error::{RedisError, RedisErrorKind};
pub use self::failure::FailurePolicy;
pub use self::keyed::RedisKeyed;
pub use self::stats::RedisStats;
