//! What a Redis key may hold that no limit wrote — a state far in the future (a clock
//! stepped back after a failover, a restored dump, a stray write), values that do not parse,
//! entries of the wrong shape — for every algorithm, one key and per key, against a real
//! Redis server (`TOWER_THROTTLE_REDIS_URL`, default `redis://127.0.0.1:6379`). Such a state
//! is clamped to the furthest instant the algorithm can legitimately reach, so the first
//! refusal hints no further than that, and the key admits again once it has passed; nothing
//! panics, and nothing locks a key out.
#![cfg(feature = "redis")]

#[path = "redis_support/limit.rs"]
mod limit;
mod redis_support;

use std::time::Duration;

use limit::Limit;
use redis::aio::MultiplexedConnection;
use redis_support::{raw, redis_now_us, redis_url, unique_prefix};
use tower_throttle::{Algorithm, Denied, Quota};

/// The booking horizon of every quota here: `max(1 s, burst × interval, period)`.
const H: u64 = 1_000_000;
/// The longest pause, µs.
const P: u64 = 3_000_000;
/// A century, µs.
const CENTURY: u64 = 100 * 365 * 86_400_000_000;

/// The algorithms, each with its quota and what its state adds to the furthest instant it
/// reaches (a booking within `H` of now, or the end of a pause): the wait, µs, of one token
/// once a state reaching there is full.
/// - token bucket, 10/s burst 5: one interval (the bucket is full again at most `5·T` after
///   its last booking, and one token fits an interval before that);
/// - leaky bucket, 10/s: a weighted request of the burst drains for `5·T` after it;
/// - fixed window, 2 per 200 ms: the window after the one reached;
/// - sliding window: the one after that (the full window is still carried into the next);
/// - sliding log: a window after the entry reached.
fn algorithms() -> [(Algorithm, Quota, u64); 5] {
    let bucket = Quota::per_second(10).burst(5);
    let window = Quota::new(2, Duration::from_millis(200));
    [
        (Algorithm::TokenBucket, bucket, 100_000),
        (Algorithm::leaky_bucket(16), bucket, 500_000),
        (Algorithm::FixedWindow, window, 200_000),
        (Algorithm::SlidingWindow, window, 400_000),
        (Algorithm::SlidingLog, window, 200_000),
    ]
}

/// After a first answer `first` of `limit`: a refusal hints at most `bound`, and once its
/// hint has passed the key admits again (each refusal says how long to wait).
async fn admits_again(limit: &Limit, first: Result<(), Denied>, bound: Duration, case: &str) {
    let mut wait = match first {
        Ok(()) => return,
        Err(Denied::Throttled(t)) => t.wait(),
        Err(e) => panic!("{case}: {e:?}"),
    };
    assert!(
        wait <= bound,
        "{case}: a refusal hints {wait:?}, at most {bound:?}"
    );
    let deadline = tokio::time::Instant::now() + bound + Duration::from_secs(5);
    loop {
        tokio::time::sleep(wait).await;
        match limit.try_acquire(1).await {
            Ok(()) => return,
            Err(Denied::Throttled(t)) => wait = t.wait(),
            Err(e) => panic!("{case}: {e:?}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{case}: still refused"
        );
    }
}

async fn set(conn: &mut MultiplexedConnection, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .unwrap();
}

async fn zadd(conn: &mut MultiplexedConnection, key: &str, score: &str, member: &str) {
    let _: () = redis::cmd("ZADD")
        .arg(key)
        .arg(score)
        .arg(member)
        .query_async(conn)
        .await
        .unwrap();
}

async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// The state of `algorithm` full at `at` (µs, Redis clock), paused until `pause` if any,
/// with a ramp (windows) that lets nothing through before `at`: the value, and the log's
/// entry (the sliding log; `None` for the others).
fn full_at(algorithm: Algorithm, at: u64, pause: Option<u64>) -> (String, Option<u64>) {
    let pause = pause.map_or(String::new(), |p| format!(":{p}"));
    // The windows' width, µs.
    let w = 200_000;
    match algorithm {
        Algorithm::TokenBucket => (format!("{at}{pause}"), None),
        Algorithm::LeakyBucket { .. } => (format!("K{at}{pause}"), None),
        Algorithm::FixedWindow => (format!("F{}:2{pause}R{at}:{at}", at / w), None),
        Algorithm::SlidingWindow => (format!("S{}:2:2{pause}R{at}:{at}Q{at}", at / w), None),
        _ => (format!("L7:2{pause}R{at}:{at}"), Some(at)),
    }
}

/// Write the state `full_at(at, pause)` into the key, then: the first refusal of a fresh
/// handle hints at most `bound` µs, every key written carries a TTL, and once the hint has
/// passed the key admits again.
async fn clamped(per_key: bool, algorithm: Algorithm, quota: Quota, far: u64, paused: bool) {
    let (_, _, extra) = algorithms().into_iter().find(|a| a.0 == algorithm).unwrap();
    let mut conn = raw(&redis_url()).await;
    let prefix = unique_prefix("beyond-reach");
    let key = Limit::new(&prefix, quota, algorithm, Duration::from_micros(P), per_key)
        .await
        .key();
    let now = redis_now_us(&mut conn).await;
    let pause = paused.then_some(now + far);
    let (value, entry) = full_at(algorithm, now + far, pause);
    set(&mut conn, &key, &value).await;
    if let Some(at) = entry {
        zadd(&mut conn, &format!("{key}:log"), &at.to_string(), "1:2").await;
    }
    // As far as a booking within H of now, or a pause (cut to P) reaches, and no further.
    let reach = if paused { P.max(H) } else { H };
    let bound = Duration::from_micros(reach + extra);
    let case = format!(
        "{algorithm:?} {}, {far} µs ahead{}",
        if per_key { "per key" } else { "one key" },
        if paused { ", paused" } else { "" }
    );
    let limit = Limit::new(&prefix, quota, algorithm, Duration::from_micros(P), per_key).await;
    let first = limit.try_acquire(1).await;
    match &first {
        Err(Denied::Throttled(t)) => println!("{case}: the first refusal hints {:?}", t.wait()),
        other => panic!("{case}: expected a refusal, got {other:?}"),
    }
    // The clamp is written, with a TTL no longer than the state it keeps.
    assert_ttls(&mut conn, &key, bound, &case).await;
    admits_again(&limit, first, bound, &case).await;
}

/// Every key of the state carries a TTL, at most `bound` and two windows.
async fn assert_ttls(conn: &mut MultiplexedConnection, key: &str, bound: Duration, case: &str) {
    for k in [key.to_owned(), format!("{key}:log")] {
        let t = pttl(conn, &k).await;
        assert!(
            t != -1 && t <= (bound.as_millis() as i64) + 2 * 200 + 2,
            "{case}: {k} PTTL {t} ms"
        );
    }
}

async fn every_state_beyond_reach_is_clamped(per_key: bool) {
    let mut cases = Vec::new();
    for (algorithm, quota, _) in algorithms() {
        for far in [3_600_000_000, CENTURY] {
            for paused in [false, true] {
                cases.push(tokio::spawn(clamped(
                    per_key, algorithm, quota, far, paused,
                )));
            }
        }
    }
    for c in cases {
        c.await.unwrap();
    }
}

#[tokio::test]
async fn a_state_beyond_reach_is_clamped_to_what_the_algorithm_reaches() {
    every_state_beyond_reach_is_clamped(false).await;
}

#[tokio::test]
async fn a_keys_state_beyond_reach_is_clamped_to_what_the_algorithm_reaches() {
    every_state_beyond_reach_is_clamped(true).await;
}

/// The furthest any state of `algorithm` reaches here: a pause (cut to `P`), then what the
/// algorithm adds.
fn reach_of(algorithm: Algorithm) -> Duration {
    let (_, _, extra) = algorithms().into_iter().find(|a| a.0 == algorithm).unwrap();
    Duration::from_micros(P.max(H) + extra)
}

/// Values no limit writes: not numbers, negative, fractions, numbers beyond any double,
/// other algorithms' tags with bad fields, bad pauses, ramps and bookings.
fn garbage() -> Vec<String> {
    let big = "9".repeat(400);
    let huge = "99999999999999999999999";
    let mut values: Vec<String> = [
        "",
        "garbage",
        "-5",
        "1.5",
        "1e9",
        "inf",
        "nan",
        "12:x",
        "12:-5",
        "-1:-1",
        " 12",
        "K-1",
        "F-1:2",
        "F1:2:3:4:5",
        "F1:1Rx:y",
        "F1:1R5:",
        "S-1:0:0",
        "S1:1:1Qx",
        "L",
        "Lx:y",
        "L1:-1",
    ]
    .map(String::from)
    .to_vec();
    values.extend([
        format!("F1:{huge}"),
        format!("F1:1:{huge}"),
        format!("S0:0:0Q{huge}"),
        format!("L1:1R1:{huge}"),
        big.clone(),
        format!("K{big}"),
        format!("F{big}:{big}"),
        format!("S{big}:{big}:{big}"),
        format!("L{big}:{big}"),
    ]);
    values
}

/// Garbage at a limit's key, without a TTL: the first decision of a fresh handle admits,
/// or refuses with a hint no further than the algorithm can reach; the key gets a TTL; and
/// it admits again once the hint has passed. Never a panic, never an error.
async fn garbage_at_the_key(per_key: bool) {
    let mut conn = raw(&redis_url()).await;
    for (algorithm, quota, _) in algorithms() {
        let mut cases = Vec::new();
        for value in garbage() {
            let prefix = unique_prefix("garbage");
            let limit =
                Limit::new(&prefix, quota, algorithm, Duration::from_micros(P), per_key).await;
            let key = limit.key();
            set(&mut conn, &key, &value).await;
            cases.push(tokio::spawn(async move {
                let case = format!("{algorithm:?} per key {per_key}: {value:.40?}");
                let bound = reach_of(algorithm);
                let limit =
                    Limit::new(&prefix, quota, algorithm, Duration::from_micros(P), per_key).await;
                let first = limit.try_acquire(1).await;
                let mut conn = raw(&redis_url()).await;
                assert_ttls(&mut conn, &key, bound, &case).await;
                admits_again(&limit, first, bound, &case).await;
            }));
        }
        for c in cases {
            c.await.unwrap();
        }
    }
}

#[tokio::test]
async fn garbage_at_a_key_never_errors_nor_locks_it() {
    garbage_at_the_key(false).await;
}

#[tokio::test]
async fn garbage_at_a_keyed_limits_key_never_errors_nor_locks_it() {
    garbage_at_the_key(true).await;
}

/// What `<key>:log` may hold that no limit wrote: entries of bad shapes and scores, or a
/// value of another type.
async fn write_second(conn: &mut MultiplexedConnection, log: &str, which: usize, now: u64) {
    let now = now.to_string();
    let entries: &[(&str, &str)] = match which {
        0 => &[("5", "x")],
        1 => &[(&now, "1:abc")],
        2 => &[(&now, "1:-5")],
        3 => &[(&now, "1:999999")],
        4 => &[("-inf", "1:1"), ("+inf", "2:1")],
        5 => &[("-5", "1:1"), ("1e300", "2:1")],
        6 => &[(&now, "x:1:y")],
        7 => {
            set(conn, log, "x").await;
            return;
        }
        _ => {
            let _: () = redis::cmd("RPUSH")
                .arg(log)
                .arg("x")
                .query_async(conn)
                .await
                .unwrap();
            return;
        }
    };
    for (score, member) in entries {
        zadd(conn, log, score, member).await;
    }
}

/// Garbage in the sorted set beside a state of ours, without a TTL on either (the sliding
/// log's entries, the sliding window's bookings): a waiter is admitted, never an error, and
/// the set is a sorted set of ours again, with a TTL (or gone). The other algorithms never
/// read it and leave it alone.
async fn garbage_beside_the_key(per_key: bool) {
    let mut conn = raw(&redis_url()).await;
    for (algorithm, quota, _) in algorithms() {
        let mut cases = Vec::new();
        for which in 0..9 {
            let prefix = unique_prefix("garbage-set");
            let limit =
                Limit::new(&prefix, quota, algorithm, Duration::from_micros(P), per_key).await;
            let key = limit.key();
            let log = format!("{key}:log");
            let now = redis_now_us(&mut conn).await;
            // A state of ours with a booking ahead (the sliding window's set holds them).
            let state = match algorithm {
                Algorithm::SlidingWindow => {
                    let at = now + 300_000;
                    format!("S{}:0:0Q{at}", at / 200_000)
                }
                Algorithm::SlidingLog => "L5:1".to_owned(),
                _ => String::new(),
            };
            if !state.is_empty() {
                set(&mut conn, &key, &state).await;
            }
            write_second(&mut conn, &log, which, now).await;
            cases.push(tokio::spawn(async move {
                let case = format!("{algorithm:?} per key {per_key}: {state} and garbage {which}");
                let limit =
                    Limit::new(&prefix, quota, algorithm, Duration::from_micros(P), per_key).await;
                let bound = reach_of(algorithm);
                let went = tokio::time::timeout(bound, limit.acquire(1)).await;
                assert!(
                    matches!(went, Ok(Ok(()))),
                    "{case}: a waiter within {bound:?}: {went:?}"
                );
                let mut conn = raw(&redis_url()).await;
                if state.is_empty() {
                    // Not this algorithm's: left alone.
                    let t = pttl(&mut conn, &key).await;
                    assert!(t != -1, "{case}: {key} PTTL {t} ms");
                    return;
                }
                let kind: String = redis::cmd("TYPE")
                    .arg(&log)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert!(
                    kind == "none" || kind == "zset",
                    "{case}: {log} is a {kind}"
                );
                assert_ttls(&mut conn, &key, bound, &case).await;
            }));
        }
        for c in cases {
            c.await.unwrap();
        }
    }
}

#[tokio::test]
async fn garbage_beside_a_key_never_errors_nor_locks_it() {
    garbage_beside_the_key(false).await;
}

#[tokio::test]
async fn garbage_beside_a_keyed_limits_key_never_errors_nor_locks_it() {
    garbage_beside_the_key(true).await;
}
