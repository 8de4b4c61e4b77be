//! A Redis backend: one limit shared by many processes, atomically (feature `redis`).
//!
//! When several processes — workers on several machines sharing one API token, or replicas
//! of a server — must share one limit, the bucket lives in Redis. [`RedisBucket`] is one
//! shared limit; [`RedisKeyed`] is one limit per key (user, API key, address).
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
//! # How it works
//! - **One script per decision.** The whole decision (read, compute, write) is one Lua script,
//!   which Redis runs atomically: two processes can never both spend the same token, the
//!   race that makes `GET` + `SET` limiters overshoot exactly under load. Scripts run with
//!   `EVALSHA`; after a Redis restart, failover or `SCRIPT FLUSH` they are loaded again
//!   transparently.
//! - **The Redis clock.** Time comes from `TIME` inside the script, never from the
//!   processes' clocks, so clock skew between machines does not matter. Arithmetic is in
//!   integer microseconds (exact in Lua's doubles).
//! - **Every write expires.** The state (see [Algorithms](#algorithms)) is written with
//!   `SET … PX`, the TTL being the time until the state no longer matters (the bucket is full
//!   again, the windows that count are over), rounded up: idle keys vanish, and a vanished
//!   key means a fresh limit, which is what it would be anyway.
//! - **Nothing locks a key forever.** A stored state further ahead than any legitimate one
//!   (a clock stepped back after a failover, a stray write) is clamped and the clamp is
//!   written, so a key is held at most `max_pause + burst × interval` plus the booking
//!   horizon, `max(1 s, burst × interval)` (token and leaky bucket), or
//!   `max_pause + 2 × period` (windows); a key that lost its TTL gets it back on
//!   the next decision.
//! - **Keys**: `<prefix>:{<name>}` for a bucket; `<prefix>:v1:{<digest>}` for a key of a
//!   keyed limit, the digest specified and versioned (see
//!   [`StableKey`](crate::keyed::StableKey)): the same in every process, build and platform,
//!   and the same through [`RedisKeyed`] and through the layers. The sliding log adds
//!   `<that key>:log`. The braces are the Redis Cluster hash tag: all the keys of one
//!   decision share one slot, so the scheme suits a cluster (the client itself connects to
//!   one server: a primary, or a cluster-aware proxy).
//! - **One backend per limit.** A [`Bucket`](crate::Bucket) made from a [`RedisBucket`] (and
//!   a [`KeyedBucket`](crate::KeyedBucket) made from a [`RedisKeyed`]) is decided in Redis on
//!   every path that admits, waits or rejects; the in-process decisions are reachable only
//!   through a match on the bucket's backend, so no path can take them for a Redis limit by
//!   accident. The synchronous `try_acquire`, which cannot ask Redis, refuses
//!   ([`Denied::Undecided`](crate::Denied::Undecided)).
//! - **Fair waiting, without hammering Redis.** With the token and leaky bucket a waiter
//!   books its admission instant in Redis — the bucket is charged at once, so later
//!   requests of any process line up behind it — and sleeps until it: one round trip per
//!   admission, first come, first served across processes (a dropped waiter gives its
//!   tokens back). With the windows, waiters of a process line up and only the first asks
//!   Redis. `try_acquire` refuses at once,
//!   without a round trip, when an earlier reply already says the tokens cannot fit yet.
//! - **Failures.** Each call is bounded by a timeout (default 50 ms). When Redis fails —
//!   unreachable, slow, a reply that makes no sense, a key of another type — the
//!   [`FailurePolicy`] decides: reject (`Closed`, the default: a waiting caller gets
//!   [`Denied::Backend`](crate::Denied::Backend) within the timeout),
//!   decide with an in-memory [`Bucket`](crate::Bucket) at a fraction of the quota, or admit.
//!   After 3 failures in a row, decisions skip Redis for a short while (one probe at a time),
//!   then use it again as soon as it answers: the connection reconnects by itself. What an
//!   outage can let through is bounded and documented on [`FailurePolicy`].
//!
//! # Deploying
//! - Every process of a limit must use the same URL, key prefix, key and [`Quota`](crate::Quota).
//! - Use a primary (writes go to it), and a Redis that does not evict keys before their TTL
//!   (`maxmemory-policy noeviction` or `volatile-ttl`): an evicted key is a full bucket.
//! - Keep other data out of the key prefix. A key of another type under it makes decisions
//!   fail with [`RedisErrorKind::WrongType`] (handled by the failure policy), never a panic.
//! - Every process of a limit must use the same [`Algorithm`](crate::Algorithm): a process
//!   with another one resets the key to a fresh state of its own (it never misreads it).
//! - The interval and the period are rounded up to whole microseconds (so at most 1 000 000
//!   tokens a second). For the windows, `count × period` in µs must stay below 2^53 (e.g. at
//!   most about 104 000 a day).
//! - The `redis` feature needs Rust 1.88 (the `redis` crate's minimum).
//!
//! # Algorithms
//!
//! Every [`Algorithm`](crate::Algorithm) works, chosen with
//! [`RedisBucketBuilder::algorithm`] / [`RedisKeyedBuilder::algorithm`], with the semantics of
//! the in-process [`Bucket`](crate::Bucket) on the Redis clock. Fixed and sliding windows are
//! aligned to the UNIX epoch (`TIME` is UNIX time), as in process. A decision is always one
//! round trip (one `EVALSHA`).
//!
//! | algorithm | Redis state (µs of the Redis clock) | work per decision | TTL |
//! |---|---|---|---|
//! | [`TokenBucket`](crate::Algorithm::TokenBucket) | one string, `"<tat>[:<pause>]"` | `GET`, `SET` | until full again |
//! | [`LeakyBucket`](crate::Algorithm::LeakyBucket) | one string, `"K<tat>[:<pause>]"` | `GET`, `SET` | until drained (`tat`) |
//! | [`FixedWindow`](crate::Algorithm::FixedWindow) | one string, `"F<window>:<count>[:<pause>][R<ramp>:<until>]"` | `GET`, `SET` | until the window ends (or the ramp) |
//! | [`SlidingWindow`](crate::Algorithm::SlidingWindow) | one string, `"S<window>:<previous>:<current>[:<pause>][R<ramp>:<until>]"` | `GET`, `SET` | until the next window ends (or the ramp) |
//! | [`SlidingLog`](crate::Algorithm::SlidingLog) | a string `"L<seq>:<total>[:<pause>][R<ramp>:<until>]"` (`total`: the tokens in the log) and a sorted set `<key>:log`, one entry per admission in the window (score = instant, member = `"<seq>:<tokens>"`) | admission: `GET`, `ZRANGEBYSCORE` + `ZREMRANGEBYSCORE` of the entries that left the window, `ZADD`, `SET`, `PEXPIRE`: O(log N) plus the entries that left (each leaves once); a refusal, pause or release reads the window's N entries (N ≤ `count`) | until the newest entry leaves the window (or the ramp) |
//!
//! - **Costs.** A request may cost up to the burst (token and leaky bucket) or the quota's
//!   count (windows), as in process. An idle leaky bucket admits one request of any allowed
//!   cost at once; a request goes once the previous one has drained, and its `n` tokens then
//!   drain over the next `n` intervals.
//! - **Pause.** For every algorithm nothing is admitted until the pause ends, then admission
//!   restarts as from an empty bucket. The windows restart on the ramp of the in-process
//!   ones (README "Semantics" item 3): one token when the pause ends, then one per interval
//!   (`R<ramp>:<until>`: when the ramp lets the next request through, and when it hands
//!   over to the window's own bound: a window after the pause, for the fixed window the
//!   first boundary a whole period after it); the log restarts empty. A release never moves
//!   the ramp back.
//! - **Release** ([`RedisKeyed::release`], used when a global ceiling refuses after the key
//!   admitted): the token and leaky bucket move their instant back, the windows lower the
//!   current window's count, the log removes the newest entry of that cost; never below
//!   empty.
//! - `Algorithm::leaky_bucket(max_queue)` bounds the waiters of an in-process bucket only: the
//!   Redis backend does not use it (its waiters line up per process as for every algorithm).
//! - Waiting: with the token and leaky bucket each reply says when the next request fits,
//!   so an admission costs one round trip; with the windows a process learns only from
//!   refusals, so a waiter may need a second round trip.

mod backend;
mod bucket;
mod builder;
#[cfg(test)]
mod differential;
mod error;
mod failure;
mod key;
mod keyed;
mod lane;
mod rate;
mod remote;
mod script;

pub use self::backend::RedisStats;
pub use self::bucket::RedisBucket;
pub use self::builder::{RedisBucketBuilder, RedisKeyedBuilder};
#[allow(deprecated)]
pub use self::error::RedisDecisionError;
pub use self::error::{RedisError, RedisErrorKind};
pub use self::failure::FailurePolicy;
pub use self::keyed::RedisKeyed;
