//! The crate's Lua scripts run at instants the test names, and their arguments rebuilt from a
//! quota: for the differential test. (Included by the test that uses it:
//! `#[path = "redis_support/lua.rs"] mod lua;`.)
//!
//! The scripts are the production ones (`src/redis/lua`, put together as the crate does)
//! with two lines changed:
//! - `now` is read from an extra, last argument (`ARGV[15]` for one quota) instead of `TIME`, so that the test
//!   and Redis see the same instants;
//! - every TTL is ten minutes: Redis expires keys in real time, which here runs apart from
//!   the test's time, and the scripts never rely on expiry for a decision (a state past its
//!   horizon reads as fresh by arithmetic alone).
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use redis::{Script, Value};
use tower_throttle::{Algorithm, Quota};

/// The longest pause the scripts accept, µs.
pub const MAX_PAUSE_US: u64 = 10_000_000;

/// The scripts' operations, as [`script`] numbers them.
pub const ACQUIRE: usize = 0;
pub const PAUSE: usize = 1;
pub const RELEASE: usize = 2;

const CLOCK: &str = "local clock = redis.call('TIME')\n\
                     local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])";
const TTL: &str = "local ms = math.ceil((horizon - now) / 1000)";

#[path = "../../src/redis/source.rs"]
mod source;

use source::{Family, Verb};

/// The pieces of Lua of `algorithm`.
fn family(algorithm: Algorithm) -> Family {
    match algorithm {
        Algorithm::TokenBucket => Family::Token,
        Algorithm::LeakyBucket { .. } => Family::Leaky,
        Algorithm::FixedWindow => Family::Fixed,
        Algorithm::SlidingWindow => Family::Sliding,
        Algorithm::SlidingLog => Family::Log,
        other => panic!("no scripts for {other:?}"),
    }
}

fn verb(op: usize) -> Verb {
    [Verb::Acquire, Verb::Pause, Verb::Release][op]
}

/// A script, with its source for `EVAL`.
pub struct Lua {
    script: Script,
    source: String,
}

/// The production script of `algorithm` and operation `op` ([`ACQUIRE`], [`PAUSE`],
/// [`RELEASE`]), with the clock taken from the last argument (`ARGV[15]`) and ten-minute
/// TTLs.
pub fn script(algorithm: Algorithm, op: usize) -> Lua {
    testable(source::one(family(algorithm), verb(op)))
}

/// The production script of operation `op` on a plan whose quotas run `algorithms`, in
/// order: each quota's 14 arguments in turn, this call's and the base plan's markers
/// ([`marker`]), then the clock; the keys of [`plan_keys`].
pub fn plan_script(algorithms: &[Algorithm], op: usize) -> Lua {
    let families: Vec<Family> = algorithms.iter().map(|&a| family(a)).collect();
    testable(source::stack(&families, verb(op)))
}

/// The keys of a plan of `parts` quotas at `key`, as the crate names them: the state, then
/// each quota's sorted set.
pub fn plan_keys(key: &str, parts: usize) -> Vec<String> {
    let mut keys = vec![key.to_owned(), format!("{key}:log")];
    for i in 2..=parts {
        keys.push(format!("{key}:q{i}:log"));
    }
    keys
}

fn testable(source: String) -> Lua {
    assert!(
        source.contains(CLOCK) && source.contains(TTL),
        "the scripts changed"
    );
    let source = source
        .replace(CLOCK, "local now = tonumber(ARGV[#ARGV])")
        .replace(TTL, "local ms = 600000");
    Lua {
        script: Script::new(&source),
        source,
    }
}

/// The acquire, pause and release scripts of `algorithm`.
pub fn scripts(algorithm: Algorithm) -> [Lua; 3] {
    [ACQUIRE, PAUSE, RELEASE].map(|op| script(algorithm, op))
}

/// The marker of a plan (`lua/stack/parts.lua`), as the crate sends it.
pub fn marker(plan: &[(Algorithm, Quota)]) -> String {
    let args: Vec<[u64; 14]> = plan
        .iter()
        .map(|&(algorithm, quota)| {
            let call = Args::of(algorithm, quota).call(1, 0, 0);
            call[..14].try_into().expect("14 arguments")
        })
        .collect();
    source::marker(
        plan.iter()
            .zip(&args)
            .map(|(&(a, _), args)| (family(a), args)),
    )
}

/// A duration in whole µs, rounded up, at least 1: as the crate sends it.
pub fn micros_up(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(1000) as u64).max(1)
}

/// The parameters of a limit as the scripts take them (see `src/redis/lua/common.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Args {
    /// `T`, µs.
    pub interval: u64,
    /// `B`.
    pub burst: u64,
    /// `tau`, µs: `B × T` (token bucket) or `T` (leaky bucket; the windows too).
    pub tolerance: u64,
    /// `W`, µs.
    pub window: u64,
    /// `L`: what a window may hold.
    pub limit: u64,
    /// `E`: the tokens per window at the rate in force.
    pub effective: u64,
    /// After a change not answered yet: the interval, tolerance and `E` the state may still
    /// be kept in (`ARGV[12]`–`ARGV[14]`); else zeros.
    pub from: [u64; 3],
}

impl Args {
    /// A limit of `quota` under `algorithm`, as built: every argument from the quota.
    pub fn of(algorithm: Algorithm, quota: Quota) -> Self {
        let interval = micros_up(quota.interval());
        let burst = u64::from(quota.burst_size());
        Args {
            interval,
            burst,
            tolerance: match algorithm {
                Algorithm::TokenBucket => interval * burst,
                _ => interval,
            },
            window: micros_up(quota.period()),
            limit: u64::from(quota.count()),
            effective: u64::from(quota.count()),
            from: [0; 3],
        }
    }

    /// The arguments of one call with `ARGV[3]` = `arg` and `ARGV[8]` = `book`, at `now`
    /// (µs of the test's Redis clock). No lease (`ARGV[9]`, `ARGV[10]`).
    pub fn call(&self, arg: u64, book: u64, now: u64) -> [u64; 15] {
        let [from_t, from_tau, from_e] = self.from;
        [
            self.interval,
            self.burst,
            arg,
            MAX_PAUSE_US,
            self.tolerance,
            self.window,
            self.limit,
            book,
            0,
            0,
            self.effective,
            from_t,
            from_tau,
            from_e,
            now,
        ]
    }
}

/// A connection to the tests' Redis.
pub fn connection() -> redis::Connection {
    let url = crate::redis_support::redis_url();
    redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("redis at {url} (set TOWER_THROTTLE_REDIS_URL): {e}"))
}

/// Call `lua` on `key` (and `key:log`) with `args`: the items of its reply. Other tests on
/// the same server flush the script cache (`SCRIPT FLUSH`): flushed between the load and
/// the call, the script goes in whole (`EVAL`), as the crate's calls do.
pub fn invoke(
    conn: &mut redis::Connection,
    lua: &Lua,
    key: &str,
    args: impl IntoIterator<Item = u64>,
) -> Vec<Value> {
    invoke_keys(conn, lua, &[key.to_owned(), format!("{key}:log")], args)
}

/// Call `lua` on `keys` with `args`: the items of its reply.
pub fn invoke_keys<A: redis::ToRedisArgs>(
    conn: &mut redis::Connection,
    lua: &Lua,
    keys: &[String],
    args: impl IntoIterator<Item = A>,
) -> Vec<Value> {
    let args: Vec<A> = args.into_iter().collect();
    let mut call = lua.script.prepare_invoke();
    for k in keys {
        call.key(k);
    }
    for a in &args {
        call.arg(a);
    }
    let reply: Value = match call.invoke(conn) {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            redis::cmd("EVAL")
                .arg(&lua.source)
                .arg(keys.len())
                .arg(keys)
                .arg(&args)
                .query(conn)
        }
        other => other,
    }
    .expect("script runs");
    let Value::Array(items) = reply else {
        panic!("reply {reply:?}")
    };
    items
}

/// An integer item of a script's reply.
pub fn int(v: &Value) -> u64 {
    match v {
        Value::Int(i) => u64::try_from(*i).expect("non-negative"),
        other => panic!("reply item {other:?}"),
    }
}

/// Delete `key` and `key:log`.
pub fn forget(conn: &mut redis::Connection, key: &str) {
    let _: Result<(), _> = redis::cmd("DEL")
        .arg(key)
        .arg(format!("{key}:log"))
        .query(conn);
}

/// splitmix64: a small seeded generator, so a failure names its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}
