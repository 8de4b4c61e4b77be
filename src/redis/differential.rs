//! Differential test: for every algorithm, the in-process [`Bucket`] and the Redis scripts
//! make the same decisions — admit or refuse, and the wait — for thousands of random
//! sequences of arrivals, costs, pauses (and the ramps after them), releases (an
//! admission given back at once, as when another limit refused it) and bookings (a
//! waiter's acquire: Redis books the instant the in-process bucket says the tokens fit,
//! and both sides count them there; or, until the first pause, a waiter that books and goes
//! away at once: its booking given back, Redis must decide as if it had never been, its
//! turn included), so the two implementations cannot drift apart.
//! The per-key engine of [`KeyedBucket`] (a third implementation) is held to the same
//! decisions where it can be lined up: the token and leaky bucket and the sliding log (the
//! fixed and sliding windows of a keyed store take their own phase from the wall clock when
//! it is built), until the first pause (a keyed store has none).
//!
//! # How the two clocks are lined up
//! The in-process bucket runs on tokio's paused clock (nanoseconds), the scripts on Redis
//! `TIME` (microseconds). The test runs the production scripts with two lines changed:
//! - `now` is read from an extra argument (`ARGV[12]`, after the lease's two and the
//!   windows' `E`) instead of `TIME`, so both sides see the same instants;
//! - every TTL is ten minutes: Redis expires keys in real time, which here runs apart from
//!   the test's time, and the scripts never rely on expiry for a decision (a state past its
//!   horizon reads as fresh by arithmetic alone).
//!
//! Both sides start on a window boundary (the in-process one found from the bucket's
//! snapshot, the Redis one a multiple of the window since the UNIX epoch), and every instant
//! is a whole number of microseconds after that start. Quotas have whole-microsecond
//! intervals. Then the decisions must be identical, and the in-process wait rounded up to
//! whole microseconds must equal the script's.
//!
//! A window held below its configured count by a rate control (`E` tokens per window of the
//! `L` configured, `ARGV[11]`) must decide as a window configured at `E`: half the window
//! sequences run the scripts with `L` above the in-process bucket's count (that bucket's
//! count is `E`, and the scripts get its interval, `W / E`, as a rate control sends it).
//! Requests of more than `E` tokens, which only a lowered window sees, are checked apart
//! (`a_request_above_the_lowered_limit_goes_alone_in_its_window`).
//!
//! A failure names the algorithm, the seed, the operation and the instant. To replay one
//! sequence with every decision and the stored state printed: `DIFF_ONLY=<index>
//! DIFF_TRACE=1 cargo test --all-features --lib differential::<algorithm>`.

use std::time::Duration;

use ::redis::{Script, Value};

use super::script::sources;

/// The Redis integration tests' helpers: the same server and key prefixes.
#[path = "../../tests/redis_support/mod.rs"]
mod redis_support;
use crate::bucket::Backend;
use crate::{Algorithm, Bucket, Denied, KeyedBucket, Quota, Throttled};

/// Sequences per algorithm, operations per sequence.
const SEQUENCES: usize = 600;
const OPS: usize = 24;
/// The longest pause the scripts accept, µs.
const MAX_PAUSE_US: u64 = 10_000_000;

const CLOCK: &str = "local clock = redis.call('TIME')\n\
                     local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])";
const TTL: &str = "local ms = math.ceil((horizon - now) / 1000)";

/// The production script of `algorithm` and operation `op` (0 acquire, 1 pause, 2 release),
/// with the clock taken from `ARGV[12]` and ten-minute TTLs.
fn script(algorithm: Algorithm, op: usize) -> Script {
    let source = sources(algorithm)[op];
    assert!(
        source.contains(CLOCK) && source.contains(TTL),
        "the scripts changed"
    );
    let source = source
        .replace(CLOCK, "local now = tonumber(ARGV[12])")
        .replace(TTL, "local ms = 600000");
    Script::new(&source)
}

/// splitmix64: a small seeded generator, so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// One limit on both sides.
struct Pair<'a> {
    bucket: Bucket,
    /// Compared until the first pause, for the algorithms without windows to line up.
    keyed: Option<KeyedBucket<u8>>,
    algorithm: Algorithm,
    /// The in-process bucket's quota; for the windows its count is the scripts' `E`.
    quota: Quota,
    /// The scripts' configured count `L` (≥ `E`: above it, a rate control lowered the rate).
    limit: u64,
    conn: &'a mut ::redis::Connection,
    /// Acquire, pause, release.
    scripts: [Script; 3],
    key: String,
    /// Redis time of the start, µs.
    origin_us: u64,
    /// Test time since the start, µs.
    t_us: u64,
}

impl Pair<'_> {
    fn args(&self, arg: u64, book: u64) -> [u64; 12] {
        let q = &self.quota;
        let interval = q.interval_ns() / 1000;
        let burst = u64::from(q.burst_size());
        let tau = match self.algorithm {
            Algorithm::LeakyBucket { .. } => interval,
            _ => interval * burst,
        };
        let now = self.origin_us + self.t_us;
        let window = q.period_ns() / 1000;
        // Booking (`ARGV[8]`) only when asked: else a try decides now, as `try_acquire`
        // does; no lease (`ARGV[9]`, `ARGV[10]`); `E` the in-process count (`ARGV[11]`).
        [
            interval,
            burst,
            arg,
            MAX_PAUSE_US,
            tau,
            window,
            self.limit,
            book,
            0,
            0,
            u64::from(q.count()),
            now,
        ]
    }

    /// Run script `op` (0 acquire, 1 pause, 2 release): (admitted, µs).
    fn run(&mut self, op: usize, arg: u64) -> (bool, u64) {
        let (ok, us, _) = self.run_booking(op, arg, 0);
        (ok, us)
    }

    /// Run script `op` with `ARGV[8]` = `book`: (admitted, µs, the admission's instant when
    /// the reply says it — the windows' acquire — else 0).
    fn run_booking(&mut self, op: usize, arg: u64, book: u64) -> (bool, u64, u64) {
        let mut call = self.scripts[op].prepare_invoke();
        call.key(&self.key).key(format!("{}:log", self.key));
        for a in self.args(arg, book) {
            call.arg(a);
        }
        let reply: Value = call.invoke(self.conn).expect("script runs");
        let Value::Array(items) = reply else {
            panic!("reply {reply:?}")
        };
        let int = |v: &Value| match v {
            Value::Int(i) => u64::try_from(*i).expect("non-negative"),
            other => panic!("reply item {other:?}"),
        };
        let at = items.get(3).map_or(0, int);
        (int(&items[0]) == 1, int(&items[1]), at)
    }
}

/// Runs one random sequence and compares every decision; returns how many bookings it
/// cancelled (given back before anything else happened).
async fn sequence(
    conn: &mut ::redis::Connection,
    algorithm: Algorithm,
    seed: u64,
    key: String,
) -> u32 {
    let mut rng = Rng(seed);
    let interval_us = [250, 1_000, 3_000, 20_000][rng.range(0, 3) as usize];
    let count = rng.range(1, 6) as u32;
    let burst = rng.range(1, 6) as u32;
    let period = Duration::from_micros(interval_us * u64::from(count));
    let quota = Quota::new(count, period).burst(burst);
    if std::env::var("DIFF_TRACE").is_ok() {
        eprintln!("{algorithm:?} seed {seed:#x}: {quota:?}");
    }
    let width_us = quota.period_ns() / 1000;
    let bucket = Bucket::with_algorithm(quota, algorithm);
    let aligned = matches!(algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindow);
    let keyed = (!aligned).then(|| KeyedBucket::builder(quota).algorithm(algorithm).build());

    // Line both sides up on a window boundary, at least two windows after anything the
    // probe left behind.
    if algorithm.is_window() {
        bucket.try_acquire(1).unwrap();
        let mut end = bucket.snapshot().full_in;
        if algorithm == Algorithm::SlidingWindow {
            end = end.saturating_sub(period);
        }
        tokio::time::advance(end + 2 * period).await;
    }
    let epoch_us = 1_700_000_000_000_000u64;
    let mut pair = Pair {
        bucket,
        keyed,
        algorithm,
        quota,
        limit: u64::from(count),
        conn,
        scripts: [0, 1, 2].map(|op| script(algorithm, op)),
        key,
        origin_us: epoch_us - epoch_us % width_us + width_us,
        t_us: 0,
    };
    // Half the windows run in Redis below a configured count `L` larger than the bucket's
    // (drawn apart, so each seed's operations are those it always had).
    let mut lowered = Rng(!seed);
    if algorithm.is_window() && lowered.range(0, 1) == 1 {
        pair.limit += lowered.range(1, 6);
    }
    if std::env::var("DIFF_TRACE").is_ok() {
        eprintln!("{algorithm:?} seed {seed:#x}: L = {}", pair.limit);
    }
    let max_cost = if algorithm.is_window() { count } else { burst };
    let span = width_us.max(interval_us * u64::from(burst));
    let (mut paused, mut cancels) = (false, 0u32);

    for op in 0..OPS {
        // Gaps: often none (a burst), often short, sometimes longer than a window.
        let gap = match rng.range(0, 9) {
            0..=2 => 0,
            3..=6 => rng.range(1, interval_us),
            7 | 8 => rng.range(1, span),
            _ => rng.range(span, 3 * span),
        };
        tokio::time::advance(Duration::from_micros(gap)).await;
        pair.t_us += gap;
        let at = format!("{algorithm:?} seed {seed:#x} op {op} at {} µs", pair.t_us);
        if rng.range(0, 19) == 0 {
            let d = rng.range(1, 2 * span);
            pair.bucket.pause(Duration::from_micros(d));
            pair.keyed = None;
            paused = true;
            let (ok, _) = pair.run(1, d);
            if std::env::var("DIFF_TRACE").is_ok() {
                eprintln!("{at}: pause {d}");
            }
            assert!(ok, "{at}: pause");
            continue;
        }
        let n = rng.range(1, u64::from(max_cost)) as u32;
        // Now and then a waiter books and goes away at once, before anything else happens
        // (until the first pause: a release never moves the ramp back). Its booking given
        // back, Redis must decide everything after as if it had never been: the turn goes
        // back too. A booking in a later window than now's moves the windows a window
        // contains along (what they held before is no longer kept): that waiter stays and
        // goes at its instant, as below.
        if !paused && rng.range(0, 5) == 0 {
            let (admitted, wait_us, at_us) = pair.run_booking(0, u64::from(n), 1);
            let local = pair.bucket.try_acquire(n);
            if std::env::var("DIFF_TRACE").is_ok() {
                eprintln!(
                    "{at}: book-cancel n={n} local={local:?} redis=({admitted}, {wait_us}, {at_us})"
                );
            }
            assert!(
                admitted,
                "{at}: {n} refused by redis (every wait is within the horizon)"
            );
            match local {
                Ok(()) => {
                    // It fits now: an admission like any other, on both sides.
                    assert_eq!(wait_us, 0, "{at}: {n} admitted here, booked ahead by redis");
                    if let Some(keyed) = &pair.keyed {
                        assert_eq!(keyed.try_acquire(&7, n), Ok(()), "{at}: keyed {n}");
                    }
                }
                Err(Denied::Throttled(t)) => {
                    let local_us = t.wait().as_nanos().div_ceil(1000) as u64;
                    assert_eq!(local_us, wait_us, "{at}: booked instant for {n}");
                    let now_us = pair.origin_us + pair.t_us;
                    let later_window = algorithm.is_window()
                        && algorithm != Algorithm::SlidingLog
                        && at_us / width_us != now_us / width_us;
                    if later_window {
                        pair.keyed = None;
                        tokio::time::advance(Duration::from_micros(wait_us)).await;
                        pair.t_us += wait_us;
                        pair.bucket
                            .try_acquire(n)
                            .unwrap_or_else(|e| panic!("{at}: {n} fit at the booked instant: {e}"));
                    } else {
                        let (ok, _, _) = pair.run_booking(2, u64::from(n), at_us);
                        assert!(ok, "{at}: cancel");
                        cancels += 1;
                    }
                }
                Err(other) => panic!("{at}: {other}"),
            }
            continue;
        }
        // Now and then a waiter books: Redis admits it for the instant the in-process
        // bucket says its tokens fit, and both sides count them there.
        if rng.range(0, 5) == 0 {
            pair.keyed = None;
            let local = pair.bucket.try_acquire(n);
            let (admitted, wait_us, _) = pair.run_booking(0, u64::from(n), 1);
            if std::env::var("DIFF_TRACE").is_ok() {
                eprintln!("{at}: book n={n} local={local:?} redis=({admitted}, {wait_us})");
            }
            match local {
                Ok(()) => assert!(admitted && wait_us == 0, "{at}: book {n} at once"),
                Err(Denied::Throttled(t)) => {
                    let local_us = t.wait().as_nanos().div_ceil(1000) as u64;
                    // Within the booking horizon (every wait here is), Redis books it.
                    assert!(local_us <= 1_000_000, "{at}: a wait of {local_us} µs");
                    assert!(admitted, "{at}: {n} refused here, not booked by redis");
                    assert_eq!(local_us, wait_us, "{at}: booked instant for {n}");
                    tokio::time::advance(Duration::from_micros(wait_us)).await;
                    pair.t_us += wait_us;
                    pair.bucket
                        .try_acquire(n)
                        .unwrap_or_else(|e| panic!("{at}: {n} fit at the booked instant: {e}"));
                }
                Err(other) => panic!("{at}: {other}"),
            }
            continue;
        }
        // Now and then an admission is given back at once (another limit refused it).
        let (local, permit) = if rng.range(0, 5) == 0 {
            pair.keyed = None;
            let Backend::Local(engine) = pair.bucket.backend() else {
                panic!("an in-process bucket")
            };
            match engine.try_admit(n) {
                Ok(permit) => (Ok(()), Some(permit)),
                Err(ns) => (Err(Throttled::after(Duration::from_nanos(ns)).into()), None),
            }
        } else {
            (pair.bucket.try_acquire(n), None)
        };
        if let Some(keyed) = &pair.keyed {
            assert_eq!(
                keyed.try_acquire(&7, n),
                local,
                "{at}: keyed and bucket for {n}"
            );
        }
        let (admitted, wait_us) = pair.run(0, u64::from(n));
        if std::env::var("DIFF_TRACE").is_ok() {
            let state: Option<String> =
                ::redis::cmd("GET").arg(&pair.key).query(pair.conn).unwrap();
            let log: Vec<String> = ::redis::cmd("ZRANGE")
                .arg(format!("{}:log", pair.key))
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(pair.conn)
                .unwrap();
            eprintln!(
                "{at}: n={n} local={local:?} redis=({admitted}, {wait_us}) {state:?} {log:?}"
            );
        }
        match local {
            Ok(()) => assert!(admitted, "{at}: {n} admitted here, refused by redis"),
            Err(Denied::Throttled(t)) => {
                assert!(!admitted, "{at}: {n} refused here, admitted by redis");
                let local_us = t.wait().as_nanos().div_ceil(1000) as u64;
                assert_eq!(local_us, wait_us, "{at}: waits for {n}");
            }
            Err(other) => panic!("{at}: {other}"),
        }
        if let Some(permit) = permit {
            pair.bucket.give_back(permit);
            let (ok, _) = pair.run(2, u64::from(n));
            if std::env::var("DIFF_TRACE").is_ok() {
                eprintln!("{at}: release {n}");
            }
            assert!(ok, "{at}: release");
        }
    }
    if std::env::var("DIFF_TRACE").is_ok() {
        eprintln!("{algorithm:?} seed {seed:#x}: {cancels} bookings cancelled");
    }
    let _: () = ::redis::cmd("DEL")
        .arg(&pair.key)
        .arg(format!("{}:log", pair.key))
        .query(pair.conn)
        .expect("cleanup");
    cancels
}

fn connection() -> ::redis::Connection {
    let url = redis_support::redis_url();
    ::redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("redis at {url} (set TOWER_THROTTLE_REDIS_URL): {e}"))
}

async fn algorithm_agrees(algorithm: Algorithm, salt: u64) {
    let run = redis_support::unique_prefix("differential");
    let mut conn = connection();
    let only: Option<usize> = std::env::var("DIFF_ONLY").ok().and_then(|v| v.parse().ok());
    let mut cancels = 0;
    for i in 0..SEQUENCES {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let seed = salt << 32 | i as u64;
        let key = format!("{{{run}:{algorithm:?}:{i}}}");
        cancels += sequence(&mut conn, algorithm, seed, key).await;
    }
    // The cancellations are exercised, not skipped (a fixed window's booking ahead always
    // lies in a later window: it goes at its instant instead).
    println!("{algorithm:?}: {cancels} bookings cancelled");
    if only.is_none() && algorithm != Algorithm::FixedWindow {
        assert!(
            cancels >= 50,
            "{algorithm:?}: only {cancels} bookings cancelled"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn token_bucket_agrees_with_redis() {
    algorithm_agrees(Algorithm::TokenBucket, 1).await;
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_agrees_with_redis() {
    algorithm_agrees(Algorithm::leaky_bucket(16), 2).await;
}

#[tokio::test(start_paused = true)]
async fn fixed_window_agrees_with_redis() {
    algorithm_agrees(Algorithm::FixedWindow, 3).await;
}

#[tokio::test(start_paused = true)]
async fn sliding_window_agrees_with_redis() {
    algorithm_agrees(Algorithm::SlidingWindow, 4).await;
}

#[tokio::test(start_paused = true)]
async fn sliding_log_agrees_with_redis() {
    algorithm_agrees(Algorithm::SlidingLog, 5).await;
}

/// A window's scripts with `L` configured and `E` in force, at instants the test names.
struct Lowered {
    conn: ::redis::Connection,
    scripts: [Script; 3],
    key: String,
    /// Window, µs; `L`; `E`.
    width: u64,
    limit: u64,
    effective: u64,
    /// Redis time of the start (a window boundary), µs.
    origin: u64,
}

impl Lowered {
    fn new(algorithm: Algorithm, limit: u64, effective: u64) -> Self {
        let width = 1_000;
        Lowered {
            conn: connection(),
            scripts: [0, 1, 2].map(|op| script(algorithm, op)),
            key: format!(
                "{{{}}}",
                redis_support::unique_prefix(&format!("lowered-{algorithm:?}"))
            ),
            width,
            limit,
            effective,
            origin: 1_700_000_000_000_000,
        }
    }

    /// Acquire `n` tokens `t` µs after the start (`book`: a waiter's booking): (admitted, wait
    /// µs).
    fn acquire(&mut self, t: u64, n: u64, book: u64) -> (bool, u64) {
        // The interval a rate control sends: that of `E` per window.
        let interval = self.width.div_ceil(self.effective);
        let args = [
            interval,
            1,
            n,
            MAX_PAUSE_US,
            interval,
            self.width,
            self.limit,
            book,
            0,
            0,
            self.effective,
            self.origin + t,
        ];
        let mut call = self.scripts[0].prepare_invoke();
        call.key(&self.key).key(format!("{}:log", self.key));
        for a in args {
            call.arg(a);
        }
        let reply: Value = call.invoke(&mut self.conn).expect("script runs");
        let Value::Array(items) = reply else {
            panic!("reply {reply:?}")
        };
        let int = |v: &Value| match v {
            Value::Int(i) => u64::try_from(*i).expect("non-negative"),
            other => panic!("reply item {other:?}"),
        };
        (int(&items[0]) == 1, int(&items[1]))
    }
}

impl Drop for Lowered {
    fn drop(&mut self) {
        let _: Result<(), _> = ::redis::cmd("DEL")
            .arg(&self.key)
            .arg(format!("{}:log", self.key))
            .query(&mut self.conn);
    }
}

const WINDOWS: [Algorithm; 3] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

#[test]
fn a_lowered_window_admits_its_lowered_count() {
    for algorithm in WINDOWS {
        // 6 per window configured, 2 in force.
        let mut w = Lowered::new(algorithm, 6, 2);
        assert_eq!(w.acquire(0, 1, 0), (true, 0), "{algorithm:?}");
        assert_eq!(w.acquire(0, 1, 0), (true, 0), "{algorithm:?}");
        let (admitted, wait) = w.acquire(0, 1, 0);
        assert!(!admitted && wait > 0, "{algorithm:?}: a third token");
        // Two windows later nothing counts any more: two again, not more.
        assert_eq!(w.acquire(2_000, 2, 0), (true, 0), "{algorithm:?}");
        assert!(!w.acquire(2_000, 1, 0).0, "{algorithm:?}");
    }
}

#[test]
fn a_request_above_the_lowered_limit_goes_alone_in_its_window() {
    for algorithm in WINDOWS {
        let mut w = Lowered::new(algorithm, 6, 2);
        let at = |s: &str| format!("{algorithm:?}: {s}");
        // 3 > E = 2 tokens, within L = 6: an empty window lets them through.
        assert_eq!(
            w.acquire(0, 3, 0),
            (true, 0),
            "{}",
            at("3 into an empty window")
        );
        // Nothing else while they count: the next window for the fixed window and the log;
        // for the sliding window, once the share of the 3 carried into the next window is
        // at most 1 (⌈3 · (1000 − 667) / 1000⌉ = 1).
        let beside = if algorithm == Algorithm::SlidingWindow {
            1_667
        } else {
            1_000
        };
        assert_eq!(
            w.acquire(0, 1, 0),
            (false, beside),
            "{}",
            at("1 beside them")
        );
        // Two windows later: 1 goes, then 3 more wait for a window holding nothing else,
        // and a waiter books that instant (it never waits forever).
        assert_eq!(w.acquire(2_000, 1, 0), (true, 0), "{}", at("1"));
        let (admitted, wait) = w.acquire(2_000, 3, 0);
        assert!(!admitted, "{}", at("3 beside 1"));
        let expected = match algorithm {
            // The next window is empty.
            Algorithm::FixedWindow => 1_000,
            // The next window starts empty, and the one token carried is gone at its end.
            Algorithm::SlidingWindow => 2_000,
            // The token leaves the log a window after it came.
            _ => 1_000,
        };
        assert_eq!(wait, expected, "{}", at("the wait of 3 beside 1"));
        assert_eq!(
            w.acquire(2_000, 3, 1),
            (true, expected),
            "{}",
            at("a waiter of 3 books it")
        );
        // Later requests line up behind it.
        assert!(!w.acquire(2_000, 1, 0).0, "{}", at("1 behind the booking"));
        // Requests of at most E keep the lowered rate after it.
        let after = 2_000 + expected + 2_000;
        assert_eq!(w.acquire(after, 2, 0), (true, 0), "{}", at("2 later"));
        assert!(!w.acquire(after, 1, 0).0, "{}", at("a third later"));
    }
}

#[test]
fn a_lowered_limit_raised_mid_window_keeps_the_configured_bound() {
    for algorithm in WINDOWS {
        let mut w = Lowered::new(algorithm, 6, 2);
        assert_eq!(w.acquire(0, 2, 0), (true, 0), "{algorithm:?}");
        assert!(!w.acquire(0, 1, 0).0, "{algorithm:?}: E = 2");
        // The rate comes back: the tokens counted stay counted, so the window holds 6 in
        // all, never 2 + 6.
        w.effective = 6;
        assert_eq!(w.acquire(0, 4, 0), (true, 0), "{algorithm:?}: 4 more");
        assert!(!w.acquire(0, 1, 0).0, "{algorithm:?}: a seventh");
        // Lowered again mid-window: nothing more until the window has room under E.
        w.effective = 1;
        assert!(!w.acquire(999, 1, 0).0, "{algorithm:?}: lowered again");
    }
}
