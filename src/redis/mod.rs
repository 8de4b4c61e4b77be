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
//!   (a clock stepped back after a failover, a stray write) is clamped to the furthest
//!   instant the algorithm reaches, and the clamp is written: a booking reaches the booking
//!   horizon `H` ahead (`max(1 s, burst × interval)` for the token and leaky bucket,
//!   `max(1 s, period)` for the windows), and only a stored pause reaches further, up to
//!   `max_pause`. So a key is held at most `max(max_pause, H) + burst × interval` (token
//!   and leaky bucket) or `max(max_pause, H) + 2 × period` (windows), and the first refusal
//!   says so; a key that lost its TTL gets it back on the next decision.
//! - **Keys**: `<prefix>:{<name>}` for a bucket; `<prefix>:v1:{<digest>}` for a key of a
//!   keyed limit, the digest specified and versioned (see
//!   [`StableKey`](crate::extract::StableKey)): the same in every process, build and platform,
//!   and the same through [`RedisKeyed`] and through the layers. The sliding log adds
//!   `<that key>:log`. The braces are the Redis Cluster hash tag: all the keys of one
//!   decision share one slot, so each decision runs on one shard of a cluster (see
//!   [Redis Cluster](#redis-cluster)).
//! - **One backend per limit.** A [`Bucket`](crate::Bucket) made from a [`RedisBucket`] (and
//!   a [`KeyedBucket`](crate::KeyedBucket) made from a [`RedisKeyed`]) is decided in Redis on
//!   every path that admits, waits or rejects; the in-process decisions are reachable only
//!   through a match on the bucket's backend, so no path can take them for a Redis limit by
//!   accident. The synchronous `try_acquire`, which cannot ask Redis, refuses
//!   ([`Denied::Undecided`](crate::Denied::Undecided)).
//! - **Fair waiting, without hammering Redis.** With every algorithm a waiter books its
//!   admission instant in Redis — the bucket is charged at once (a window counts the tokens
//!   in the window of that instant), so later requests of any process line up behind it —
//!   and sleeps until it: one round trip per admission, first come, first served across
//!   processes (a dropped waiter gives its tokens back). What a reply said only schedules when a waiter asks again: it never refuses on
//!   its own, since another process may give tokens back, or the rate change, meanwhile.
//!   `try_acquire` (and the rejecting layer) asks Redis every time.
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
//!   [`Bucket::set_quota`](crate::Bucket::set_quota) on a bucket made from a [`RedisBucket`]
//!   changes the quota of this process's calls only: change it in every process (meanwhile
//!   each decides at its own, and the state never holds more tokens than before the change).
//!   The windows keep the width they were built with (it lays out their state) and take a
//!   new quota as a count per window.
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
//! # Leases
//!
//! One Redis primary makes some tens of thousands of decisions a second, and each admission
//! of a Redis-backed limit costs a round trip. A hot limit can instead lease tokens:
//! [`RedisBucketBuilder::lease`]`(max)` makes a process take up to `max` tokens in one
//! script and admit locally from them.
//!
//! ```no_run
//! use std::time::Duration;
//! use tower_throttle::redis::RedisBucket;
//! use tower_throttle::Quota;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let hot = RedisBucket::builder(Quota::per_second(20_000).burst(200))
//!     .url("redis://127.0.0.1:6379")
//!     .key("search")
//!     .lease(16)                               // up to 16 tokens per round trip
//!     .lease_period(Duration::from_millis(100)) // the default
//!     .build()
//!     .await?;
//! hot.try_acquire(1).await?;
//! # Ok(())
//! # }
//! ```
//!
//! - **Charged when leased.** The lease script takes as many tokens as fit now (up to what
//!   the refill asks for, at least the smallest request in line), moving the bucket exactly
//!   as that many one-token requests would. Refused, a waiter books its admission instant
//!   as without leases.
//! - **One round trip for every task waiting.** A task that finds too few tokens in the
//!   lease waits in line. One refill is in flight per handle (a handle and its clones
//!   share one lease), run apart from the tasks, so a task that gives up leaves it to the
//!   others. It asks for the request of every task in line and for the lease beyond the
//!   first request, admits them in order with its reply (refusing those that Redis had too
//!   few tokens for), then the tasks that came meanwhile, from the lease's tokens; while
//!   tasks are left in line, the next refill leaves at once.
//! - **Sized from demand.** The first lease holds nothing beyond the request; a lease used up
//!   within its period doubles the next (up to `max`); an expired one sizes the next to
//!   what its period used.
//! - **Given back.** When a lease ends (its period is over, or the next refill replaces
//!   it), its unused tokens go back to Redis, as they do when the last clone of the handle
//!   is dropped, with the tokens taken for a task that left the line first: every token a
//!   lease takes is admitted or given back.
//! - **The bound.** Over any interval of length `t`, the processes admit at most
//!   `burst + rate·t + (the tokens their leases held or were bringing at its start)`, so
//!   at most `burst + rate·t + handles × max`: what a refill takes obeys the bucket, a task
//!   in line is admitted on Redis' decision exactly as its own request would be, and what
//!   a lease admits later it took earlier, at most `max` at a time.
//! - **Pauses** ([`RedisBucket::pause`], a 429 seen by
//!   [`RetryAfterLayer`](crate::RetryAfterLayer)) reach every process within one lease
//!   period: a lease ends `period` after it was asked for, and Redis refuses the next one
//!   until the pause ends. The process that pauses drops its own lease at once.
//! - **A process that dies** holds its lease's tokens until the bucket refills: the others
//!   lose at most one lease.
//! - **Failures.** A refill is one call like any other: when it fails, the
//!   [`FailurePolicy`] answers each task it asked for. Tokens a handle already holds were
//!   granted by Redis and are still admitted until their lease ends, so an outage's bound
//!   (see [`FailurePolicy`]) grows by at most one lease per handle; tokens that a failed
//!   refill was giving back stay charged (never admitted twice).
//! - **Fairness** across processes holds per lease, not per request: a process admits from
//!   its lease before others that must ask Redis.
//! - The token bucket only (the leaky bucket spaces every request, the windows count them),
//!   on [`RedisBucket`] only: `1 ≤ max ≤ burst`, refused at build otherwise.
//!
//! Measured on one 2-core machine busy with other work (`cargo bench --features redis
//! --bench redis`, three runs), 64 tasks of one process on one hot limit: one round trip
//! per decision 19 900–44 800 decisions/s, leases of 16 292 000–565 000 (7.9–15.7× in the
//! same run; 62–63 decisions per round trip), and `redis-benchmark -c 64` of the decision
//! script (`EVALSHA`) 14 300–23 100 a second. Four processes × 64 tasks on a 20 000/s limit
//! (burst 200) with leases of 16 for 10 s admitted 196 825–200 199 against bounds of
//! 200 336–200 351.
//!
//! # Redis Cluster
//!
//! With the feature `redis-cluster`, both builders take a cluster's nodes instead of a URL
//! ([`RedisBucketBuilder::cluster`], [`RedisKeyedBuilder::cluster`]), through the `redis`
//! crate's cluster client:
//!
//! ```no_run
//! # #[cfg(feature = "redis-cluster")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use tower_throttle::redis::RedisKeyed;
//! use tower_throttle::Quota;
//!
//! let per_user = RedisKeyed::builder(Quota::per_second(10))
//!     .cluster(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
//!     .key_prefix("api-per-user")
//!     .build()
//!     .await?;
//! per_user.try_acquire("alice", 1).await?; // on the shard owning alice's slot
//! # Ok(())
//! # }
//! ```
//!
//! - **One slot per decision.** Every key a script touches carries the limit's hash tag
//!   (`{<name>}` or `{<digest>}`), so each decision is one script on the primary owning
//!   that slot, atomic as on one server; the keys of a keyed limit spread over the shards.
//! - **Topology.** The client learns the slot map from any reachable node, follows `MOVED`
//!   and `ASK` redirections, refreshes the map after a failover or resharding, and loads
//!   the scripts on every primary (again on one that answers `NOSCRIPT`).
//! - **Failures.** The timeout bounds each call, redirections and retries included, and the
//!   [`FailurePolicy`] answers when it fails, as with one server. The breaker (3 failures
//!   in a row) belongs to the handle, not the shard: while one primary is down, a
//!   [`RedisKeyed`]'s keys on the other shards may be answered by the policy too for a
//!   probe interval at a time. A primary without replicas that dies loses its limits'
//!   state (a fresh bucket when it returns, as after a restart); with replicas, an
//!   asynchronous replication lag can lose the last decisions at a failover (at most what
//!   the lag held).
//! - **Valkey** speaks the same protocol and runs the same scripts: a Valkey cluster works
//!   the same way (as a single Valkey server does through [`url`](RedisBucketBuilder::url)).
//! - **Not supported:** anything across slots (one limit is one slot; a keyed limit's global
//!   ceiling is another limit, decided by its own call), reading from replicas (decisions
//!   write), `connect_lazily` (the cluster client connects at build), and a single hot
//!   limit spread over several shards — one limit is one slot on one primary; to take load
//!   off it, use [leases](#leases).
//!
//! Measured on one 2-core machine (`cargo bench --features redis-cluster --bench redis`),
//! one client process with 64 tasks over 10 000 keys: one primary 64 000–98 000 keyed
//! decisions/s, a 3-primary cluster 59 000–73 000 (0.75–1.06×; about 24 000 per shard, each
//! owning a third of the keys). The client process and the three servers share the same
//! two cores, so this machine cannot show a cluster's scaling, which needs primaries with
//! cores (machines) of their own (not measured here); what it shows is that the keys spread
//! evenly and that the cluster client costs about what one connection does.
//!
//! # When to use which
//!
//! | need | use | cost per admission |
//! |---|---|---|
//! | up to tens of thousands of decisions/s in all (measured: 65 000–109 000 from one process) | one Redis primary ([`url`](RedisBucketBuilder::url)) | one round trip, exact |
//! | one hot limit beyond what one round trip per decision allows | [leases](#leases) on that [`RedisBucket`] | one round trip per refill, for every task waiting; `+ handles × lease` overshoot, pauses within one lease period |
//! | many keyed limits, more than one primary can decide | a [Redis Cluster](#redis-cluster) | one round trip, exact, per shard |
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
//! | [`SlidingWindow`](crate::Algorithm::SlidingWindow) | one string, `"S<window>:<previous>:<current>[:<pause>][R<ramp>:<until>][Q<booked>]"` (`booked`: the latest instant booked, while ahead), and while bookings lie ahead a sorted set `<key>:log` of them (score = the booked instant, member = `"<instant>:<tokens>:<booked at>[:<k>]"`) | `GET`, `SET`; a booking ahead also `ZREMRANGEBYSCORE` of those passed (or `DEL`), `ZADD`, `PEXPIRE`; a cancelled one `ZRANGEBYSCORE`, `ZREM`, `ZRANGE` | until the next window ends (or the ramp, or the latest booking) |
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
//!   first boundary a whole period after it). The log keeps its entries: admissions from
//!   before the pause count until they leave the window, so no window of length `period`
//!   holds more than `count`, across the pause too. A release never moves the ramp back.
//! - **Release** ([`RedisKeyed::release`], used when a global ceiling refuses after the key
//!   admitted): the token and leaky bucket move their instant back, the windows lower the
//!   current window's count, the log removes the newest entry of that cost; never below
//!   empty. A [`RedisBucket::acquire`] waiter dropped before its booked instant gives its
//!   tokens back the same way, to the window of that instant while Redis still keeps it
//!   (the fixed window its last window, the sliding window its last two; the log removes
//!   the booked entry), and its turn with them: later requests go after the latest booking
//!   left (the sliding window keeps its bookings ahead in `<key>:log` for that). The same
//!   holds for a [`RedisKeyed::acquire`] waiter, per key.
//! - **Booking** ([`RedisBucket::acquire`] and [`RedisKeyed::acquire`], every algorithm): a
//!   request that fits within the booking horizon — `max(1 s, burst × interval)` for the
//!   token and leaky bucket, `max(1 s, period)` for the windows — is admitted at once for
//!   the earliest instant it fits, never before an instant booked earlier; the waiter
//!   sleeps until it. Beyond the
//!   horizon it is refused with the wait, and the waiter asks again once within it. A
//!   window's `try_acquire` also goes after the instants booked (first come, first served,
//!   as in process). Bookings made before a pause by another process keep their instants.
//! - `Algorithm::leaky_bucket(max_queue)` bounds the waiters of an in-process bucket only: the
//!   Redis backend does not use it (its waiters book their instants as for every algorithm).
//! - Waiting: each reply says when the request goes, so an admission costs one round trip
//!   (two when its instant lies beyond the booking horizon).
//! - **A learned rate** (a [`Bucket`](crate::Bucket) made from a [`RedisBucket`] follows a
//!   server's push-back, see [`adaptive`](crate::adaptive)): every process decides in Redis
//!   at the rate in force, with every algorithm. The token and leaky bucket take its
//!   interval. The windows keep their width `W` (stored window indices and log entries stay
//!   valid for every process) and take `E = ⌊count × rate / ceiling⌋` tokens per window, at
//!   least 1, with a ramp of one token per `⌈W / E⌉` after a pause; `count` still bounds
//!   what the state may hold, so a rate raised again mid-window never admits more than the
//!   configured quota. A request of more than `E` tokens (within `count`) goes when the
//!   window holds nothing else. A [`RedisKeyed`] has no rate control (a
//!   [`KeyedBucket`](crate::KeyedBucket) does not follow push-back), and leases need the
//!   token bucket, which follows the rate through its interval.

mod backend;
mod bucket;
mod builder;
mod conn;
#[cfg(test)]
mod differential;
mod error;
mod failure;
mod key;
mod keyed;
mod lane;
mod lease;
mod rate;
mod remote;
mod script;
mod told;

pub use self::backend::RedisStats;
pub use self::bucket::RedisBucket;
pub use self::builder::{RedisBucketBuilder, RedisKeyedBuilder};
#[allow(deprecated)]
pub use self::error::RedisDecisionError;
pub use self::error::{RedisError, RedisErrorKind};
pub use self::failure::FailurePolicy;
pub use self::keyed::RedisKeyed;
