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
//! `TIME` (microseconds). The test runs the production scripts with the clock read from an
//! extra argument, `ARGV[15]`, instead of `TIME`, and long TTLs (see `redis_support/lua.rs`),
//! so both sides see the same instants. The arguments are rebuilt from the quota as the
//! crate sends them (`Args`).
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
//! DIFF_TRACE=1 cargo test --all-features --test redis_differential <algorithm>` (a replay
//! fails even when the sequence agrees: the others did not run).
#![cfg(feature = "redis")]

use std::time::Duration;

use tower_throttle::{Algorithm, Bucket, Denied, KeyedBucket, Quota};

#[path = "redis_support/lua.rs"]
mod lua;
mod redis_support;

use lua::{
    connection, forget, int, invoke, micros_up, scripts, Args, Lua, Rng, ACQUIRE, PAUSE, RELEASE,
};

/// Sequences per algorithm, operations per sequence.
const SEQUENCES: usize = 600;
const OPS: usize = 24;

/// One limit on both sides.
struct Pair<'a> {
    bucket: Bucket,
    /// Compared until the first pause, for the algorithms without windows to line up.
    keyed: Option<KeyedBucket<u8>>,
    /// The scripts' arguments: the in-process bucket's quota, whose count is the windows'
    /// `E`, below a configured count `L` ≥ `E` (above it, a rate control lowered the rate).
    args: Args,
    conn: &'a mut redis::Connection,
    /// Acquire, pause, release.
    scripts: [Lua; 3],
    key: String,
    /// Redis time of the start, µs.
    origin_us: u64,
    /// Test time since the start, µs.
    t_us: u64,
}

impl Pair<'_> {
    /// Run script `op` ([`ACQUIRE`], [`PAUSE`], [`RELEASE`]): (admitted, µs).
    fn run(&mut self, op: usize, arg: u64) -> (bool, u64) {
        let (ok, us, _) = self.run_booking(op, arg, 0);
        (ok, us)
    }

    /// Run script `op` with `ARGV[8]` = `book` (a booking only when asked: else a try
    /// decides now, as `try_acquire` does): (admitted, µs, the admission's instant when the
    /// reply says it — the windows' acquire — else 0).
    fn run_booking(&mut self, op: usize, arg: u64, book: u64) -> (bool, u64, u64) {
        let args = self.args.call(arg, book, self.origin_us + self.t_us);
        let items = invoke(self.conn, &self.scripts[op], &self.key, args);
        let at = items.get(3).map_or(0, int);
        (int(&items[0]) == 1, int(&items[1]), at)
    }
}

/// Runs one random sequence and compares every decision; returns how many bookings it
/// cancelled (given back before anything else happened).
async fn sequence(
    conn: &mut redis::Connection,
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
    let width_us = micros_up(quota.period());
    let bucket = Bucket::builder(quota).algorithm(algorithm).build();
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
        args: Args::of(algorithm, quota),
        conn,
        scripts: scripts(algorithm),
        key,
        origin_us: epoch_us - epoch_us % width_us + width_us,
        t_us: 0,
    };
    // Half the windows run in Redis below a configured count `L` larger than the bucket's
    // (drawn apart, so each seed's operations are those it always had).
    let mut lowered = Rng(!seed);
    if algorithm.is_window() && lowered.range(0, 1) == 1 {
        pair.args.limit += lowered.range(1, 6);
    }
    if std::env::var("DIFF_TRACE").is_ok() {
        eprintln!("{algorithm:?} seed {seed:#x}: L = {}", pair.args.limit);
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
            let (ok, _) = pair.run(PAUSE, d);
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
            let (admitted, wait_us, at_us) = pair.run_booking(ACQUIRE, u64::from(n), 1);
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
                        let (ok, _, _) = pair.run_booking(RELEASE, u64::from(n), at_us);
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
            let (admitted, wait_us, _) = pair.run_booking(ACQUIRE, u64::from(n), 1);
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
        let given_back = rng.range(0, 5) == 0;
        let local = if given_back {
            pair.keyed = None;
            pair.bucket.try_acquire_and_give_back(n)
        } else {
            pair.bucket.try_acquire(n)
        };
        if let Some(keyed) = &pair.keyed {
            assert_eq!(
                keyed.try_acquire(&7, n),
                local,
                "{at}: keyed and bucket for {n}"
            );
        }
        let (admitted, wait_us) = pair.run(ACQUIRE, u64::from(n));
        if std::env::var("DIFF_TRACE").is_ok() {
            let state: Option<String> = redis::cmd("GET").arg(&pair.key).query(pair.conn).unwrap();
            let log: Vec<String> = redis::cmd("ZRANGE")
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
        if given_back && admitted {
            let (ok, _) = pair.run(RELEASE, u64::from(n));
            if std::env::var("DIFF_TRACE").is_ok() {
                eprintln!("{at}: release {n}");
            }
            assert!(ok, "{at}: release");
        }
    }
    if std::env::var("DIFF_TRACE").is_ok() {
        eprintln!("{algorithm:?} seed {seed:#x}: {cancels} bookings cancelled");
    }
    let _: () = redis::cmd("DEL")
        .arg(&pair.key)
        .arg(format!("{}:log", pair.key))
        .query(pair.conn)
        .expect("cleanup");
    cancels
}

async fn algorithm_agrees(algorithm: Algorithm, salt: u64) {
    let run = redis_support::unique_prefix("differential");
    let mut conn = connection();
    // A replay of one sequence (see the module docs) never passes: the rest did not run.
    let only: Option<usize> = std::env::var("DIFF_ONLY").ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("DIFF_ONLY={v:?}: not the index of a sequence"))
    });
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
    if let Some(i) = only {
        panic!("DIFF_ONLY={i}: sequence {i} agreed, and no other ran: unset DIFF_ONLY");
    }
    if algorithm != Algorithm::FixedWindow {
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
    conn: redis::Connection,
    scripts: [Lua; 3],
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
            scripts: scripts(algorithm),
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
        let args = Args {
            interval,
            burst: 1,
            tolerance: interval,
            window: self.width,
            limit: self.limit,
            effective: self.effective,
            from: [0; 3],
        };
        let args = args.call(n, book, self.origin + t);
        let items = invoke(&mut self.conn, &self.scripts[ACQUIRE], &self.key, args);
        (int(&items[0]) == 1, int(&items[1]))
    }
}

impl Drop for Lowered {
    fn drop(&mut self) {
        forget(&mut self.conn, &self.key);
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

/// The scripts of one limit called with the arguments the crate sends through the changes
/// of quota the test makes (rebuilt from the quotas: [`configured`], and the parameters
/// before a change carried until a call is answered), at instants the test names; beside an
/// in-process bucket given the same changes at the same instants.
struct Changing {
    conn: redis::Connection,
    scripts: [Lua; 3],
    key: String,
    algorithm: Algorithm,
    /// The quota the limit was built with: a window keeps its width.
    built: Quota,
    /// The arguments in force.
    args: Args,
    /// The interval (µs), the whole tokens of the tolerance and `E` that the state may
    /// still be kept in: those before the changes not answered yet, the fewest of each.
    carried: Option<(u64, u64, u64)>,
    bucket: Bucket,
    /// Redis time of the start (a window boundary), µs.
    origin: u64,
    /// Test time since the start, µs.
    t: u64,
}

/// The arguments the crate sends for a limit built at `built` and configured at `quota`
/// since, without a rate control: the token and leaky bucket take the new interval and
/// burst; a window keeps its width and takes the new count per window (the tests change the
/// count of a window, never its period), `L` never below the count built.
fn configured(algorithm: Algorithm, built: Quota, quota: Quota) -> Args {
    let mut args = Args::of(algorithm, quota);
    args.window = micros_up(built.period());
    if algorithm.is_window() {
        assert_eq!(quota.period(), built.period(), "a new count per window");
        args.limit = args.limit.max(u64::from(built.count()));
    } else {
        args.limit = u64::from(built.count());
        args.effective = args.limit;
    }
    args
}

impl Changing {
    fn new(algorithm: Algorithm, quota: Quota) -> Self {
        Changing {
            conn: connection(),
            scripts: scripts(algorithm),
            key: format!(
                "{{{}}}",
                redis_support::unique_prefix(&format!("changing-{algorithm:?}"))
            ),
            algorithm,
            built: quota,
            args: configured(algorithm, quota, quota),
            carried: None,
            bucket: Bucket::builder(quota)
                .algorithm(algorithm)
                .window_origin(tokio::time::Instant::now())
                .build(),
            origin: 1_700_000_000_000_000,
            t: 0,
        }
    }

    async fn advance(&mut self, us: u64) {
        tokio::time::advance(Duration::from_micros(us)).await;
        self.t += us;
    }

    /// Both sides take the new quota. The calls to Redis carry the parameters before until
    /// one is answered: the fewest tokens of those of every change since the last answer.
    fn set_quota(&mut self, quota: Quota) {
        self.bucket.set_quota(quota);
        let a = &self.args;
        let before = (a.interval, a.tolerance / a.interval, a.effective);
        self.carried = Some(match self.carried {
            None => before,
            Some((t, k, e)) => (t.min(before.0), k.min(before.1), e.min(before.2)),
        });
        self.args = configured(self.algorithm, self.built, quota);
    }

    /// Redis: acquire `n` now, as the crate sends it; (admitted, wait µs).
    fn redis(&mut self, n: u32) -> (bool, u64) {
        let mut args = self.args;
        if let Some((t, k, e)) = self.carried {
            args.from = [t, t * k, e];
        }
        let args = args.call(u64::from(n), 0, self.origin + self.t);
        let items = invoke(&mut self.conn, &self.scripts[ACQUIRE], &self.key, args);
        self.carried = None;
        (int(&items[0]) == 1, int(&items[1]))
    }

    /// Both sides take `n` tokens now: both must admit them.
    fn take(&mut self, n: u32, at: &str) {
        assert_eq!(self.bucket.try_acquire(n), Ok(()), "{at}: in process");
        assert!(self.redis(n).0, "{at}: redis");
    }

    /// How many single tokens each side admits now, and the wait (µs, rounded up) of its
    /// first refusal: (in process, redis).
    fn at_once(&mut self) -> ((u32, u64), (u32, u64)) {
        let mut here = 0;
        let here_wait = loop {
            match self.bucket.try_acquire(1) {
                Ok(()) => here += 1,
                Err(Denied::Throttled(t)) => break t.wait().as_nanos().div_ceil(1000) as u64,
                Err(e) => panic!("{e}"),
            }
        };
        let mut there = 0;
        let there_wait = loop {
            match self.redis(1) {
                (true, _) => there += 1,
                (false, wait) => break wait,
            }
        };
        ((here, here_wait), (there, there_wait))
    }
}

impl Drop for Changing {
    fn drop(&mut self) {
        forget(&mut self.conn, &self.key);
    }
}

/// `Bucket::set_quota` on Redis, token and leaky bucket: the state is re-read at the new
/// quota. A lower rate or a larger burst, or a bucket full, empty or in debt, keeps the
/// tokens held exactly as in process (the difference of a larger burst is not handed out,
/// an empty bucket raised to a higher rate does not stall), and the bucket then refills at
/// the new rate as in process; a higher rate or a smaller burst from a bucket partly used never
/// gives more than in process, and its next token comes within one new interval.
#[tokio::test(start_paused = true)]
async fn a_new_gcra_quota_keeps_the_tokens_held_as_in_process() {
    let per = |n: u32, burst: u32| Quota::per_second(n).burst(burst);
    let cases = [
        (per(10, 10), per(1, 10)),  // a lower rate
        (per(10, 4), per(10, 10)),  // a larger burst
        (per(10, 10), per(4, 10)),  // a lower rate, by 2.5
        (per(10, 10), per(10, 10)), // the same quota
        (per(10, 10), per(10, 3)),  // a smaller burst
        (per(10, 10), per(4, 6)),   // both lower
        (per(4, 4), per(10, 8)),    // a higher rate and a larger burst
        (per(1, 10), per(10, 10)),  // a rate ten times higher
    ];
    for algorithm in [Algorithm::TokenBucket, Algorithm::leaky_bucket(16)] {
        let leaky = algorithm != Algorithm::TokenBucket;
        for (from, to) in cases {
            let burst = from.burst_size();
            // Tokens taken, then µs later; whether that leaves the bucket full, empty or in
            // debt (a weighted leaky request still draining), which every change keeps as
            // in process.
            let fills: &[(u32, u64, bool)] = if leaky {
                &[
                    (0, 0, true),
                    (1, 0, true),
                    (1, 30_000, false),
                    (3, 0, true),
                    (3, 120_000, true),
                    (1, 2_000_000, true),
                ]
            } else {
                &[
                    (0, 0, true),
                    (1, 0, false),
                    (burst / 2, 50_000, false),
                    (burst, 0, true),
                    (burst, 150_000, false),
                ]
            };
            let slower = to.interval() >= from.interval();
            let larger = leaky || to.burst_size() >= burst;
            for &(used, later, kept) in fills {
                let at = format!("{algorithm:?} {from:?} → {to:?}, {used} used, {later} µs");
                let mut c = Changing::new(algorithm, from);
                if used > 0 {
                    c.take(used, &at);
                }
                c.advance(later).await;
                c.set_quota(to);
                let ((here, here_wait), (there, there_wait)) = c.at_once();
                assert!(there <= here, "{at}: {there} at once, {here} in process");
                if (slower && larger) || kept {
                    assert_eq!(
                        (there, there_wait),
                        (here, here_wait),
                        "{at}: as in process"
                    );
                    // Then both refill at the new rate: the next token at the same instant,
                    // and the one after it one new interval later.
                    c.advance(here_wait).await;
                    c.take(1, &at);
                    let (here, there) = c.at_once();
                    assert_eq!(there, here, "{at}: after the next token");
                    assert_eq!(there.1, micros_up(to.interval()), "{at}: the new interval");
                } else {
                    assert!(
                        there_wait <= micros_up(to.interval()),
                        "{at}: the next token in {there_wait} µs"
                    );
                }
            }
        }
    }
}

/// `Bucket::set_quota` on Redis, windows of the same period: a raised count adds nothing to
/// the window in progress (what fitted there still fits, as in process), and the next
/// window takes the new count; a lowered count never admits more than in process.
#[tokio::test(start_paused = true)]
async fn a_new_window_count_adds_nothing_to_the_window_in_progress() {
    let per_ms = |n: u32| Quota::new(n, Duration::from_millis(1));
    for algorithm in WINDOWS {
        // Raised: 6 → 10 per window, 4 taken before the change.
        let mut c = Changing::new(algorithm, per_ms(6));
        let at = format!("{algorithm:?} raised");
        c.take(4, &at);
        c.advance(100).await;
        c.set_quota(per_ms(10));
        let (here, there) = c.at_once();
        assert_eq!((here.0, there.0), (2, 2), "{at}: what was left");
        // Fixed window and log: the next window (1 100 µs: the log's entries of 0 and 100
        // µs have left it) takes the new count, on both sides.
        if algorithm != Algorithm::SlidingWindow {
            c.advance(1_000).await;
            let (here, there) = c.at_once();
            assert_eq!((here.0, there.0), (10, 10), "{at}: the next window");
        }

        // Lowered: 6 → 3 per window, 2 taken before the change.
        let mut c = Changing::new(algorithm, per_ms(6));
        let at = format!("{algorithm:?} lowered");
        c.take(2, &at);
        c.advance(100).await;
        c.set_quota(per_ms(3));
        let (here, there) = c.at_once();
        assert!(
            there.0 <= here.0,
            "{at}: {there:?} at once, {here:?} in process"
        );
        assert_eq!(
            there.0, 1,
            "{at}: the new count, less what the window holds"
        );
        if algorithm != Algorithm::SlidingWindow {
            c.advance(1_000).await;
            let (here, there) = c.at_once();
            assert_eq!((here.0, there.0), (3, 3), "{at}: the next window");
        }
    }
}

/// A change not answered yet is carried by the calls after it; a second change before any
/// answer re-reads the state from the parameters of either (the fewer tokens), never from
/// the last alone: a bucket emptied at 10/s is read at 1/s as 9 tokens held, while it held
/// none.
#[tokio::test(start_paused = true)]
async fn two_changes_before_an_answer_give_no_burst() {
    let mut c = Changing::new(Algorithm::TokenBucket, Quota::per_second(10).burst(10));
    c.take(10, "empty");
    c.set_quota(Quota::per_second(1).burst(10));
    c.set_quota(Quota::per_second(2).burst(10));
    let (here, there) = c.at_once();
    assert_eq!(here, (0, 500_000), "in process");
    assert_eq!(there, here, "redis");
}
