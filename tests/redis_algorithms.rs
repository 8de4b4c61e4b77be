//! Every `Algorithm` on the Redis backend, against a real Redis server
//! (`TOWER_THROTTLE_REDIS_URL`, default `redis://127.0.0.1:6379`): two handles (separate
//! connections, as two processes) on one key, weighted costs, exact waits, pause, release,
//! TTLs, corrupt state and a change of algorithm. These tests fail, loudly, when Redis is
//! unreachable.
#![cfg(feature = "redis")]

mod redis_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis_support::{
    micros, on_redis_clock, raw, redis_now_us, redis_url, unique_prefix, wait_range,
};
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisErrorKind, RedisKeyed};
use tower_throttle::{Algorithm, Denied, Quota, RejectLayer};

const LEAKY: Algorithm = Algorithm::leaky_bucket(16);
const ALL: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    LEAKY,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// One "process": its own connection to the shared key `<prefix>:{k}`.
async fn handle(prefix: &str, quota: Quota, algorithm: Algorithm) -> RedisBucket {
    raw(&redis_url()).await; // a clear message when Redis is not there
    RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(prefix)
        .key("k")
        .algorithm(algorithm)
        .failure_policy(FailurePolicy::Closed)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connect to the test Redis")
}

async fn keyed(prefix: &str, quota: Quota, algorithm: Algorithm) -> RedisKeyed {
    RedisKeyed::builder(quota)
        .url(redis_url())
        .key_prefix(prefix)
        .algorithm(algorithm)
        .failure_policy(FailurePolicy::Closed)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connect to the test Redis")
}

fn wait_of(r: Result<(), Denied>) -> Duration {
    match r {
        Err(Denied::Throttled(t)) => t.wait(),
        other => panic!("expected a throttled answer, got {other:?}"),
    }
}

/// The UNIX time, µs. The test Redis runs on this machine's clock (`TIME` is UNIX time);
/// `clock_skew` checks that.
fn unix_us() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

/// Skew between this process's clock and Redis's, µs (tolerated in the window checks).
async fn clock_skew(conn: &mut MultiplexedConnection) -> u64 {
    let before = unix_us();
    let redis = redis_now_us(conn).await;
    let after = unix_us();
    let mid = (before + after) / 2;
    redis.abs_diff(mid) + (after - before) / 2
}

/// Sleep until `offset` µs past the start of a window of `width` µs on the Redis clock
/// (this one's, if that instant is still ahead, else the next one's). Sleeping may take
/// longer on a loaded machine: a test that needs a phase checks, on the Redis clock, the
/// one it got.
async fn align(conn: &mut MultiplexedConnection, width: u64, offset: u64) {
    let now = redis_now_us(conn).await;
    let mut at = now - now % width + offset;
    if at <= now + 1_000 {
        at += width;
    }
    tokio::time::sleep(Duration::from_micros(at - now)).await;
}

/// The most starts a test makes, starting over when a window boundary fell within its
/// setup (only a stalled machine lets that happen even once).
const STARTS: u32 = 5;

/// Wait, on the Redis clock, until at least `left` µs remain of the current window of
/// `width` µs: a test of a few calls then sees no boundary.
async fn clear_of_boundary(conn: &mut MultiplexedConnection, width: u64, left: u64) {
    let now = redis_now_us(conn).await;
    let remaining = width - now % width;
    if remaining < left {
        tokio::time::sleep(Duration::from_micros(remaining + 1_000)).await;
    }
}

/// One admission: the UNIX time (µs) before the request was sent and after its reply came;
/// Redis decided in between.
#[derive(Debug, Clone, Copy)]
struct Admission {
    sent: u64,
    received: u64,
    tokens: u32,
}

/// Two handles hammer the key with requests of `tokens` for `run`; every admission, in
/// order of sending.
async fn hammer(handles: &[RedisBucket], tokens: u32, run: Duration) -> Vec<Admission> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let end = tokio::time::Instant::now() + run;
    let mut tasks = Vec::new();
    for h in handles {
        for _ in 0..2 {
            let (h, log) = (h.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                while tokio::time::Instant::now() < end {
                    let sent = unix_us();
                    match h.try_acquire(tokens).await {
                        Ok(()) => log.lock().unwrap().push(Admission {
                            sent,
                            received: unix_us(),
                            tokens,
                        }),
                        Err(Denied::Throttled(t)) => {
                            tokio::time::sleep(t.wait().min(Duration::from_millis(2))).await;
                        }
                        Err(e) => panic!("{e}: {e:?}"),
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut v = log.lock().unwrap().clone();
    v.sort_by_key(|a| a.sent);
    v
}

/// The most tokens surely admitted within any span shorter than `span` µs: admissions whose
/// whole [sent, received] lies in `[a.sent, a.sent + span)`.
fn most_in_any_span(admissions: &[Admission], span: u64) -> u32 {
    admissions
        .iter()
        .map(|a| {
            admissions
                .iter()
                .filter(|b| b.sent >= a.sent && b.received < a.sent + span)
                .map(|b| b.tokens)
                .sum::<u32>()
        })
        .max()
        .unwrap_or(0)
}

/// Tokens surely admitted in each aligned window of `width` µs (skew tolerated): admissions
/// whose [sent − skew, received + skew] lies within one window.
fn per_window(admissions: &[Admission], width: u64, skew: u64) -> Vec<(u64, u32)> {
    let mut out: Vec<(u64, u32)> = Vec::new();
    for a in admissions {
        let (lo, hi) = ((a.sent - skew) / width, (a.received + skew) / width);
        if lo != hi {
            continue;
        }
        match out.iter_mut().find(|(w, _)| *w == lo) {
            Some((_, n)) => *n += a.tokens,
            None => out.push((lo, a.tokens)),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_two_processes_take_at_most_the_count_per_aligned_window() {
    let prefix = unique_prefix("fixed");
    let mut conn = raw(&redis_url()).await;
    let skew = clock_skew(&mut conn).await + 500;
    let quota = Quota::new(6, Duration::from_millis(250));
    let a = handle(&prefix, quota, Algorithm::FixedWindow).await;
    let b = handle(&prefix, quota, Algorithm::FixedWindow).await;
    assert_eq!(a.algorithm(), Algorithm::FixedWindow);
    // Start early in a window (Redis clock): the first window is hammered whole.
    align(&mut conn, 250_000, 10_000).await;
    let admitted = hammer(&[a, b], 1, Duration::from_millis(1_300)).await;
    let windows = per_window(&admitted, 250_000, skew);
    for &(w, n) in &windows {
        assert!(n <= 6, "{n} admitted in window {w}");
    }
    // Hammered, a window fills up to exactly its count (how many do depends on how fast
    // this machine hammers).
    assert!(windows.iter().any(|&(_, n)| n == 6), "{windows:?}");
    let total: u32 = admitted.iter().map(|a| a.tokens).sum();
    assert!(total <= 6 * 7, "{total}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_lets_twice_the_count_through_across_a_boundary() {
    let mut conn = raw(&redis_url()).await;
    let w = 1_000_000;
    let quota = Quota::new(5, Duration::from_micros(w));
    // Late in a window (Redis clock): A takes the count, and B is refused until the window
    // ends. A start in which a boundary fell among these calls (a stalled machine) is
    // dropped before any of its decisions is looked at, and the test starts over on a fresh
    // key.
    let mut starts = 0;
    let (a, b, start, wait) = loop {
        starts += 1;
        assert!(starts <= STARTS, "no start within one window");
        let prefix = unique_prefix("fixed-boundary");
        let a = handle(&prefix, quota, Algorithm::FixedWindow).await;
        let b = handle(&prefix, quota, Algorithm::FixedWindow).await;
        align(&mut conn, w, 800_000).await;
        let start = redis_now_us(&mut conn).await;
        let mut taken = Vec::new();
        for _ in 0..5 {
            taken.push(a.try_acquire(1).await);
        }
        let (lo, refused, hi) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
        if start / w != hi / w {
            continue;
        }
        for r in taken {
            r.unwrap();
        }
        // B waits for the end of the window, from the instant Redis decided (in [lo, hi]).
        let end = (start / w + 1) * w;
        let wait = wait_of(refused);
        assert!(
            (end - hi..=end - lo).contains(&micros(wait)),
            "wait {wait:?}, window ends in {}..={} µs",
            end - hi,
            end - lo
        );
        break (a, b, start, wait);
    };
    // Right after the boundary, the count again.
    tokio::time::sleep(wait).await;
    for _ in 0..5 {
        b.try_acquire(1).await.unwrap();
    }
    let (lo, refused, _) = on_redis_clock(&mut conn, a.try_acquire(1)).await;
    // Twice the count within less than a window: A's five from `start` on, B's before `lo`.
    let span = lo - start;
    assert!(span < w, "2 × 5 admitted within {span} µs");
    // And no more: the new window is full.
    let _ = wait_of(refused);
}

#[tokio::test]
async fn fixed_window_weighted_costs_and_the_exact_wait() {
    let mut conn = raw(&redis_url()).await;
    let w = 500_000;
    let quota = Quota::new(5, Duration::from_micros(w));
    // Early in a window (Redis clock). A start in which a boundary fell among the calls
    // below (a stalled machine) is dropped before any of its decisions is looked at, and the
    // test starts over on a fresh key.
    let mut starts = 0;
    let (b, wait_b) = loop {
        starts += 1;
        assert!(starts <= STARTS, "no start within one window");
        let prefix = unique_prefix("fixed-wait");
        let a = handle(&prefix, quota, Algorithm::FixedWindow).await;
        // Another handle: no local knowledge of what A did.
        let b = handle(&prefix, quota, Algorithm::FixedWindow).await;
        align(&mut conn, w, 20_000).await;
        let start = redis_now_us(&mut conn).await;
        let taken = [a.try_acquire(3).await, a.try_acquire(2).await];
        let (lo, refused, hi) = on_redis_clock(&mut conn, a.try_acquire(1)).await;
        let too_many = a.try_acquire(6).await;
        let (lo_b, refused_b, hi_b) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
        if start / w != hi_b / w {
            continue;
        }
        for r in taken {
            r.unwrap();
        }
        // The wait is the end of the window, from the instant Redis decided (in [lo, hi]).
        let end = (start / w + 1) * w;
        let wait = wait_of(refused);
        assert!(
            (end - hi..=end - lo).contains(&micros(wait)),
            "wait {wait:?}, window ends in {}..={} µs",
            end - hi,
            end - lo
        );
        // More than the count can never fit.
        match too_many {
            Err(Denied::ExceedsBurst(e)) => assert_eq!((e.requested(), e.burst()), (6, 5)),
            other => panic!("{other:?}"),
        }
        // The other handle hears the same from Redis.
        let wait_b = wait_of(refused_b);
        assert!(
            (end - hi_b..=end - lo_b).contains(&micros(wait_b)),
            "B's wait {wait_b:?}, window ends in {}..={} µs",
            end - hi_b,
            end - lo_b
        );
        assert!(wait_b <= wait, "{wait_b:?} {wait:?}");
        break (b, wait_b);
    };
    tokio::time::sleep(wait_b).await;
    b.try_acquire(5).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_stays_within_its_bound_and_fills_a_fresh_window_exactly() {
    let mut conn = raw(&redis_url()).await;
    let w = 300_000;
    let quota = Quota::new(8, Duration::from_micros(w));
    // A fresh window: exactly the count, then a refusal. A start in which a boundary fell
    // among these calls (a stalled machine) is dropped before any of its decisions is
    // looked at, and the test starts over on a fresh key.
    let mut starts = 0;
    let (a, b) = loop {
        starts += 1;
        assert!(starts <= STARTS, "no start within one window");
        let prefix = unique_prefix("sliding");
        let a = handle(&prefix, quota, Algorithm::SlidingWindow).await;
        let b = handle(&prefix, quota, Algorithm::SlidingWindow).await;
        align(&mut conn, w, 5_000).await;
        let start = redis_now_us(&mut conn).await;
        let mut taken = Vec::new();
        for i in 0..8 {
            let h = if i % 2 == 0 { &a } else { &b };
            taken.push(h.try_acquire(1).await);
        }
        let refused = [a.try_acquire(1).await, b.try_acquire(1).await];
        if start / w != redis_now_us(&mut conn).await / w {
            continue;
        }
        for r in taken {
            r.unwrap();
        }
        for r in refused {
            let _ = wait_of(r);
        }
        break (a, b);
    };
    // Hammered: never more than twice the count in any span of one window.
    let admitted = hammer(&[a, b], 1, Duration::from_millis(1_200)).await;
    let most = most_in_any_span(&admitted, 300_000);
    assert!(most <= 16, "{most} admitted within 300 ms");
    let total: u32 = admitted.iter().map(|a| a.tokens).sum();
    // Three windows and a bit after a full one: each lets in about 7 as the previous
    // window's share fades (and never more than 8 + 8).
    assert!((18..=40).contains(&total), "{total}");
}

#[tokio::test]
async fn sliding_window_wait_is_the_instant_the_estimate_lets_it_in() {
    let mut conn = raw(&redis_url()).await;
    let w = 400_000;
    let quota = Quota::new(10, Duration::from_micros(w));
    // Early in a window (Redis clock), the whole count, then two refusals. A start in which
    // a boundary fell among these calls (a stalled machine) is dropped before any of its
    // decisions is looked at, and the test starts over on a fresh key.
    let mut starts = 0;
    let (a, next, (lo, refused, hi), (lo5, refused5, hi5)) = loop {
        starts += 1;
        assert!(starts <= STARTS, "no start within one window");
        let a = handle(
            &unique_prefix("sliding-wait"),
            quota,
            Algorithm::SlidingWindow,
        )
        .await;
        align(&mut conn, w, 10_000).await;
        let start = redis_now_us(&mut conn).await;
        let taken = a.try_acquire(10).await;
        let one = on_redis_clock(&mut conn, a.try_acquire(1)).await;
        let five = on_redis_clock(&mut conn, a.try_acquire(5)).await;
        if start / w != five.2 / w {
            continue;
        }
        taken.unwrap();
        break (a, (start / w + 1) * w, one, five);
    };
    // Each wait runs from the instant Redis decided, within [lo, hi] of its call.
    let within = |wait: Duration, fits: u64, lo: u64, hi: u64| {
        assert!(
            (fits - hi..=fits - lo).contains(&micros(wait)),
            "wait {wait:?}, expected {}..={} µs",
            fits - hi,
            fits - lo
        );
    };
    // In the next window the previous one's 10 carry 10 · (time left) / W: one token fits
    // once a tenth of that window has passed.
    let wait = wait_of(refused);
    within(wait, next + w / 10, lo, hi);
    // Five tokens fit half-way through the next window.
    within(wait_of(refused5), next + w / 2, lo5, hi5);
    tokio::time::sleep(wait).await;
    a.try_acquire(1).await.unwrap();
    // That token counts: eight more fit once the carried share is down to one, nine tenths
    // into the window (eight tenths, had it not counted).
    let (lo, refused, hi) = on_redis_clock(&mut conn, a.try_acquire(8)).await;
    within(wait_of(refused), next + 9 * w / 10, lo, hi);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log_two_processes_take_at_most_the_count_in_every_window() {
    let prefix = unique_prefix("log");
    let quota = Quota::new(5, Duration::from_millis(250));
    let a = handle(&prefix, quota, Algorithm::SlidingLog).await;
    let b = handle(&prefix, quota, Algorithm::SlidingLog).await;
    let admitted = hammer(&[a.clone(), b.clone()], 1, Duration::from_millis(1_000)).await;
    let most = most_in_any_span(&admitted, 250_000 - 1_000);
    assert!(most <= 5, "{most} admitted within one window");
    // Every L + 1 admissions span at least a window.
    for six in admitted.windows(6) {
        let last = six.iter().map(|a| a.received).max().unwrap();
        let span = last - six[0].sent;
        assert!(span >= 249_000, "6 admissions within {span} µs");
    }
    let total: u32 = admitted.iter().map(|a| a.tokens).sum();
    assert!((18..=25).contains(&total), "{total}");
}

#[tokio::test]
async fn sliding_log_weighted_costs_and_the_exact_wait() {
    let prefix = unique_prefix("log-wait");
    let quota = Quota::new(5, Duration::from_millis(300));
    let a = handle(&prefix, quota, Algorithm::SlidingLog).await;
    // Each instant Redis stamps lies between the local clock readings around its call, so
    // each wait is bounded from both sides, however slow the machine is.
    let t0 = (unix_us(), a.try_acquire(2).await.unwrap(), unix_us());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t1 = (unix_us(), a.try_acquire(3).await.unwrap(), unix_us());
    // One token fits when the first entry (2 tokens) leaves; four when the second does.
    let before = unix_us();
    let wait = u64::try_from(wait_of(a.try_acquire(1).await).as_micros()).unwrap();
    let after = unix_us();
    let within = |w: u64, (lo, (), hi): (u64, (), u64), before: u64, after: u64| {
        (lo + 300_000).saturating_sub(after + 1_000) <= w && w <= hi + 300_000 + 1_000 - before
    };
    assert!(
        within(wait, t0, before, after),
        "{wait} µs; {t0:?}, {before}..{after}"
    );
    let b = handle(&prefix, quota, Algorithm::SlidingLog).await;
    let before = unix_us();
    let wait4 = u64::try_from(wait_of(b.try_acquire(4).await).as_micros()).unwrap();
    let after = unix_us();
    assert!(
        within(wait4, t1, before, after),
        "{wait4} µs; {t1:?}, {before}..{after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_spaces_admissions_across_processes() {
    let prefix = unique_prefix("leaky");
    let quota = Quota::per_second(25).burst(3); // T = 40 ms
    let a = handle(&prefix, quota, LEAKY).await;
    let b = handle(&prefix, quota, LEAKY).await;
    let admitted = hammer(&[a, b], 1, Duration::from_millis(1_000)).await;
    for pair in admitted.windows(2) {
        let gap = pair[1].received - pair[0].sent;
        assert!(gap >= 39_000, "two admissions {gap} µs apart");
    }
    // One per 40 ms over the span the decisions fell in (about 25 in the second hammered);
    // at least half of that: a loaded machine hammers slower.
    let (first, last) = (admitted[0], admitted[admitted.len() - 1]);
    let most = 1 + (last.received - first.sent) / 40_000;
    let n = admitted.len() as u64;
    assert!((12..=most).contains(&n), "{n} admitted, at most {most}");
}

#[tokio::test]
async fn an_idle_leaky_bucket_admits_any_cost_at_once_then_spaces_by_cost() {
    let mut conn = raw(&redis_url()).await;
    let prefix = unique_prefix("leaky-cost");
    let quota = Quota::per_second(20).burst(4); // T = 50 ms

    // A refusal waits until the bucket drains, `drain` µs after the admission before it.
    let drains = |wait: Duration, drain: u64, admitted: (u64, u64), asked: (u64, u64)| {
        let range = wait_range(admitted, drain, asked);
        assert!(
            range.contains(&micros(wait)),
            "wait {wait:?}, expected {range:?} µs"
        );
    };
    let a = handle(&prefix, quota, LEAKY).await;
    let (a_lo, taken, a_hi) = on_redis_clock(&mut conn, a.try_acquire(4)).await;
    taken.unwrap();
    // Its 4 tokens drain over the next 4 intervals: the next single token waits for 200 ms
    // after that admission.
    let (lo, refused, hi) = on_redis_clock(&mut conn, a.try_acquire(1)).await;
    let wait = wait_of(refused);
    drains(wait, 200_000, (a_lo, a_hi), (lo, hi));
    tokio::time::sleep(wait).await;
    // Drained: a cost of 3 goes at once, from another process, and holds the next for 150 ms.
    let b = handle(&prefix, quota, LEAKY).await;
    let (b_lo, taken, b_hi) = on_redis_clock(&mut conn, b.try_acquire(3)).await;
    taken.unwrap();
    let (lo, refused, hi) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
    let wait1 = wait_of(refused);
    drains(wait1, 150_000, (b_lo, b_hi), (lo, hi));
    match b.try_acquire(5).await {
        Err(Denied::ExceedsBurst(e)) => assert_eq!(e.burst(), 4),
        other => panic!("{other:?}"),
    }
    // Idle again: a cost of 4 goes at once.
    tokio::time::sleep(wait1).await;
    let c = handle(&prefix, quota, LEAKY).await;
    c.try_acquire(4).await.unwrap();
}

/// A pause of 300 ms made by the first of three handles on one key, whose interval is
/// `t_us`: how long the third, which never saw it, was held, the least that hold can be (Redis
/// clock); how many single tokens the three get right after the pause, and the most that
/// one token per interval from the end of the pause allows by the time they were asked
/// for (1, unless the machine stalled for an interval).
async fn after_pause(
    conn: &mut MultiplexedConnection,
    algorithm: Algorithm,
    quota: Quota,
    t_us: u64,
) -> (Duration, u64, u64, u64) {
    let prefix = unique_prefix("pause");
    let a = handle(&prefix, quota, algorithm).await;
    let b = handle(&prefix, quota, algorithm).await;
    let t = handle(&prefix, quota, algorithm).await;
    a.try_acquire(1).await.unwrap();
    let paused = redis_now_us(conn).await;
    a.pause(Duration::from_millis(300)).await.unwrap();
    // Held: both handles, and a third that never saw the pause.
    let _ = wait_of(a.try_acquire(1).await);
    let (_, held, asked) = on_redis_clock(conn, t.try_acquire(1)).await;
    let held = wait_of(held);
    // The pause ends at least 300 ms after `paused`, and `held` after an instant before
    // `asked`.
    let least = (paused + 300_000).saturating_sub(asked);
    let end = asked + micros(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = wait_of(b.try_acquire(1).await);
    // After the pause: what comes through at once (no burst).
    let now = redis_now_us(conn).await;
    tokio::time::sleep(Duration::from_micros(end.saturating_sub(now) + 1_000)).await;
    let mut admitted = 0;
    for _ in 0..10 {
        for h in [&a, &b, &t] {
            admitted += u64::from(h.try_acquire(1).await.is_ok());
        }
    }
    let last = redis_now_us(conn).await;
    let allowed = 1 + last.saturating_sub(paused + 300_000) / t_us;
    (held, least, admitted, allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_every_process_then_restarts_without_a_burst() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(10, Duration::from_secs(2)).burst(10);
    for algorithm in ALL {
        let (held, least, admitted, allowed) =
            after_pause(&mut conn, algorithm, quota, 200_000).await;
        assert!(
            micros(held) >= least && held <= Duration::from_millis(300),
            "{algorithm:?}: held {held:?}, at least {least} µs"
        );
        // Every algorithm, windows included, restarts with one token (the next is due an
        // interval later), wherever the pause ends in a window.
        assert!(
            (1..=allowed).contains(&admitted),
            "{algorithm:?}: {admitted} admitted right after the pause (at most {allowed})"
        );
    }
}

/// After a pause, a window on Redis restarts on the ramp the in-process windows use: one
/// token when the pause ends, then one per interval, whichever process asks and however
/// little of the window was used before the pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_restarts_on_a_ramp_after_a_pause() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(10, Duration::from_secs(2)).burst(10);
    let interval = 200_000;
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let prefix = unique_prefix("ramp");
        let a = handle(&prefix, quota, algorithm).await;
        let b = handle(&prefix, quota, algorithm).await;
        a.try_acquire(1).await.unwrap();
        a.pause(Duration::from_millis(100)).await.unwrap();
        let held = wait_of(b.try_acquire(1).await);
        tokio::time::sleep(held + Duration::from_millis(2)).await;
        let (mut lo, taken, mut hi) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
        taken.unwrap();
        for step in 0..4 {
            // The window has room, yet the next token waits: it is due an interval after
            // the last admission.
            let h = if step % 2 == 0 { &a } else { &b };
            let (r_lo, refused, r_hi) = on_redis_clock(&mut conn, h.try_acquire(1)).await;
            let wait = wait_of(refused);
            let due = wait_range((lo, hi), interval, (r_lo, r_hi));
            assert!(
                due.contains(&micros(wait)),
                "{algorithm:?} step {step}: waits {wait:?} on the ramp, expected {due:?} µs"
            );
            tokio::time::sleep(wait + Duration::from_millis(2)).await;
            let taken;
            (lo, taken, hi) = on_redis_clock(&mut conn, h.try_acquire(1)).await;
            taken.unwrap();
        }
    }
}

#[tokio::test]
async fn a_shorter_pause_never_shortens_a_longer_one() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(10, Duration::from_secs(1));
    for algorithm in ALL {
        let prefix = unique_prefix("pause-short");
        let a = handle(&prefix, quota, algorithm).await;
        // Another handle: it hears of the pause from Redis alone.
        let b = handle(&prefix, quota, algorithm).await;
        let paused = redis_now_us(&mut conn).await;
        a.pause(Duration::from_millis(600)).await.unwrap();
        a.pause(Duration::from_millis(100)).await.unwrap();
        let (_, refused, asked) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
        let wait = wait_of(refused);
        // The longer pause ends at least 600 ms after `paused`; B asked before `asked`.
        let least = (paused + 600_000).saturating_sub(asked);
        assert!(
            micros(wait) >= least,
            "{algorithm:?}: {wait:?}, at least {least} µs"
        );
    }
}

#[tokio::test]
async fn release_gives_back_the_tokens_of_an_unused_admission() {
    // Windows of an hour, and at least 10 s of the current one left (Redis clock): no
    // boundary falls inside the test.
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(4, Duration::from_secs(3600)).burst(4);
    clear_of_boundary(&mut conn, 3_600_000_000, 10_000_000).await;
    for algorithm in ALL {
        let prefix = unique_prefix("release");
        let k = keyed(&prefix, quota, algorithm).await;
        assert_eq!(k.algorithm(), algorithm);
        let n = if algorithm == LEAKY { 1 } else { 4 };
        k.try_acquire("alice", n).await.unwrap();
        let _ = wait_of(k.try_acquire("alice", 1).await);
        k.release("alice", n).await.unwrap();
        k.try_acquire("alice", n).await.unwrap();
        // Never below empty: releasing more than was taken gives back only that.
        k.release("alice", n).await.unwrap();
        k.release("alice", n).await.unwrap();
        k.try_acquire("alice", n).await.unwrap();
        let _ = wait_of(k.try_acquire("alice", 1).await);
        // Another key is untouched.
        k.try_acquire("bob", 1).await.unwrap();
    }
}

/// PTTL of a key (ms; −2 when it does not exist, −1 without TTL).
async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

/// Every key of the state carries a TTL of at most `max_ms`. A short TTL may run out before
/// it is read on a slow machine (PTTL 0, or -2 once the key is gone): that key had one too;
/// only -1 (no TTL) fails.
async fn assert_ttls(conn: &mut MultiplexedConnection, key: &str, max_ms: i64, when: &str) {
    let t = pttl(conn, key).await;
    assert!(
        t != -1 && t <= max_ms,
        "{when}: {key} PTTL {t} (max {max_ms})"
    );
    let log = format!("{key}:log");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&log)
        .query_async(conn)
        .await
        .unwrap();
    if exists == 1 {
        let t = pttl(conn, &log).await;
        assert!(
            t != -1 && t <= max_ms,
            "{when}: {log} PTTL {t} (max {max_ms})"
        );
    }
}

#[tokio::test]
async fn every_write_carries_a_ttl_and_a_lost_ttl_comes_back() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(3, Duration::from_millis(400)).burst(3);
    for algorithm in ALL {
        // Longest state: a window past the next one (sliding), a pause of 300 ms; with the
        // pause of 500 ms below, two windows past it (the fixed window's ramp).
        let max = 2 * 400 + 300 + 2;
        let max_paused = 2 * 400 + 500 + 2;
        // B's refusal below must fall in A's window (or, for the buckets, before they
        // drained): a start in which it did not (a stalled machine: B is admitted) is
        // dropped, and the test starts over on a fresh key.
        let mut starts = 0;
        let (a, key) = loop {
            starts += 1;
            assert!(starts <= STARTS, "{algorithm:?}: B was never refused");
            let prefix = unique_prefix("ttl");
            let a = handle(&prefix, quota, algorithm).await;
            if algorithm.is_window() {
                // Early in a window (Redis clock).
                align(&mut conn, 400_000, 5_000).await;
            }
            let key = a.redis_key().to_owned();
            // The leaky bucket takes all three at once: they drain over 400 ms, and B's
            // refusal below comes well within them (and the pause, longer, still sets its
            // TTL).
            let first = if algorithm == LEAKY { 3 } else { 1 };
            a.try_acquire(first).await.unwrap();
            assert_ttls(&mut conn, &key, max, &format!("{algorithm:?} admission")).await;
            let n = if algorithm == LEAKY { 1 } else { 2 };
            let _ = a.try_acquire(n).await;
            let _ = a.try_acquire(3).await;
            assert_ttls(&mut conn, &key, max, &format!("{algorithm:?} refusal")).await;
            for k in [key.clone(), format!("{key}:log")] {
                let _: () = redis::cmd("PERSIST")
                    .arg(&k)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            // A new handle (no local knowledge) is refused by Redis, which repairs the TTL.
            let b = handle(&prefix, quota, algorithm).await;
            let refused = b.try_acquire(3).await;
            if refused.is_ok() {
                continue;
            }
            let _ = wait_of(refused);
            assert_ttls(
                &mut conn,
                &key,
                max,
                &format!("{algorithm:?} refusal repair"),
            )
            .await;
            break (a, key);
        };
        let paused = redis_now_us(&mut conn).await;
        a.pause(Duration::from_millis(500)).await.unwrap();
        assert_ttls(&mut conn, &key, max_paused, &format!("{algorithm:?} pause")).await;
        // The pause ends at least 500 ms after `paused`; the key must live until then. Its
        // PTTL, read before `read`, says until when (whole ms: 1 ms of rounding).
        let left = pttl(&mut conn, &key).await;
        let read = redis_now_us(&mut conn).await;
        let lives_until = i64::try_from(read).unwrap() + left * 1_000 + 1_000;
        assert!(
            lives_until >= i64::try_from(paused + 500_000).unwrap(),
            "{algorithm:?}: pause outlives its TTL (PTTL {left} ms, {} µs after the pause was \
             asked for)",
            read - paused
        );
    }
    let prefix = unique_prefix("ttl-release");
    for algorithm in ALL {
        // The leaky bucket's second request must be refused: an interval of 1.3 s.
        let quota = if algorithm == LEAKY {
            Quota::new(3, Duration::from_secs(4)).burst(3)
        } else {
            quota
        };
        let k = keyed(&prefix, quota, algorithm).await;
        k.try_acquire("x", 1).await.unwrap();
        let _ = k.try_acquire("x", 1).await;
        k.release("x", 1).await.unwrap();
        if algorithm == LEAKY {
            // The second was refused: the release drained the bucket, and the key is gone.
            assert_eq!(pttl(&mut conn, &k.redis_key("x")).await, -2);
            continue;
        }
        assert_ttls(
            &mut conn,
            &k.redis_key("x"),
            2 * 400 + 2,
            &format!("{algorithm:?} release"),
        )
        .await;
    }
}

#[tokio::test]
async fn a_key_of_another_type_is_a_wrongtype_error() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(3, Duration::from_secs(1));
    for algorithm in ALL {
        let prefix = unique_prefix("wrongtype");
        let a = handle(&prefix, quota, algorithm).await;
        let _: () = redis::cmd("RPUSH")
            .arg(a.redis_key())
            .arg("x")
            .query_async(&mut conn)
            .await
            .unwrap();
        for r in [
            a.try_acquire(1).await,
            a.pause(Duration::from_millis(10)).await,
        ] {
            match r {
                Err(Denied::Backend(e)) => {
                    assert_eq!(
                        e.redis().unwrap().kind(),
                        RedisErrorKind::WrongType,
                        "{algorithm:?}: {e}"
                    );
                }
                other => panic!("{algorithm:?}: {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn an_unparsable_value_is_a_fresh_state_and_is_overwritten() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(2, Duration::from_secs(1)).burst(2);
    for algorithm in ALL {
        let prefix = unique_prefix("garbage");
        let a = handle(&prefix, quota, algorithm).await;
        let key = a.redis_key().to_owned();
        for garbage in ["garbage", "F1:2:3:4:5", "S-1:0:0", "L", "K12x", ""] {
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(garbage)
                .query_async(&mut conn)
                .await
                .unwrap();
            let b = handle(&prefix, quota, algorithm).await;
            b.try_acquire(1).await.unwrap_or_else(|e| {
                panic!("{algorithm:?}: {garbage:?} should be a fresh state: {e}")
            });
            // Overwritten, with a TTL (the garbage has none). The TTL of a window that ends
            // right after the admission may run out before it is read: a key gone (or at
            // PTTL 0) had one too.
            if let Some(value) = get(&mut conn, &key).await {
                assert_ne!(value, garbage, "{algorithm:?}");
                assert_ne!(pttl(&mut conn, &key).await, -1, "{algorithm:?}: no TTL");
            }
        }
    }
}

#[tokio::test]
async fn a_far_future_window_state_is_clamped_and_written_back_on_a_refusal() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(3, Duration::from_millis(200));
    let cases = [
        (Algorithm::FixedWindow, "F9999999999999:3"),
        (Algorithm::SlidingWindow, "S9999999999999:3:3"),
        (Algorithm::SlidingLog, "L7:3"),
    ];
    for (algorithm, value) in cases {
        let prefix = unique_prefix("far");
        let a = handle(&prefix, quota, algorithm).await;
        let key = a.redis_key().to_owned();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(value)
            .query_async(&mut conn)
            .await
            .unwrap();
        if algorithm == Algorithm::SlidingLog {
            // Three tokens logged a day from now.
            let at = redis_now_us(&mut conn).await + 86_400_000_000;
            let _: () = redis::cmd("ZADD")
                .arg(format!("{key}:log"))
                .arg(at)
                .arg("1:3")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        // Clamped to the booking horizon (max(1 s, W) = 1 s) past now, whose window (and,
        // for the sliding window, the next) still counts.
        let wait = wait_of(a.try_acquire(1).await);
        assert!(
            wait <= Duration::from_millis(1_000 + 2 * 200 + 1),
            "{algorithm:?}: {wait:?}"
        );
        assert_ne!(get(&mut conn, &key).await.unwrap(), value, "{algorithm:?}");
        assert_ttls(
            &mut conn,
            &key,
            1_000 + 3 * 200 + 2,
            &format!("{algorithm:?} clamp"),
        )
        .await;
        tokio::time::sleep(wait).await;
        a.try_acquire(1).await.unwrap();
    }
}

#[tokio::test]
async fn a_far_future_ramp_is_clamped_and_written_back_on_a_refusal() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(3, Duration::from_millis(200));
    for (algorithm, window) in [
        (Algorithm::FixedWindow, "F0:0"),
        (Algorithm::SlidingWindow, "S0:0:0"),
        (Algorithm::SlidingLog, "L0:0"),
    ] {
        let prefix = unique_prefix("far-ramp");
        let a = handle(&prefix, quota, algorithm).await;
        let key = a.redis_key().to_owned();
        // A ramp that lets nothing through for a day.
        let day = redis_now_us(&mut conn).await + 86_400_000_000;
        let value = format!("{window}R{day}:{day}");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query_async(&mut conn)
            .await
            .unwrap();
        // Clamped: the next request goes within the booking horizon (1 s) and L·T (3
        // intervals), the ramp ends within 2·W.
        let wait = wait_of(a.try_acquire(1).await);
        assert!(
            wait <= Duration::from_millis(1_000 + 201),
            "{algorithm:?}: {wait:?}"
        );
        assert_ne!(get(&mut conn, &key).await.unwrap(), value, "{algorithm:?}");
        assert_ttls(
            &mut conn,
            &key,
            2 * 200 + 2,
            &format!("{algorithm:?} ramp clamp"),
        )
        .await;
        tokio::time::sleep(wait).await;
        a.try_acquire(1).await.unwrap();
    }
}

#[tokio::test]
async fn switching_the_algorithm_of_a_key_resets_it_cleanly() {
    let mut conn = raw(&redis_url()).await;
    let prefix = unique_prefix("switch");
    let quota = Quota::new(2, Duration::from_secs(10)).burst(2);
    let order = [
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        LEAKY,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
    ];
    // Two seconds of the current 10 s window left (Redis clock): no boundary frees a
    // window in the middle of a step.
    clear_of_boundary(&mut conn, 10_000_000, 2_000_000).await;
    let mut key = String::new();
    for algorithm in order {
        let h = handle(&prefix, quota, algorithm).await;
        key = h.redis_key().to_owned();
        // The previous algorithm left the key exhausted; this one starts fresh.
        let first = if algorithm == LEAKY { 2 } else { 1 };
        h.try_acquire(first)
            .await
            .unwrap_or_else(|e| panic!("{algorithm:?}: {e}"));
        if algorithm != LEAKY {
            h.try_acquire(1).await.unwrap();
        }
        let _ = wait_of(h.try_acquire(1).await);
        let value = get(&mut conn, &key).await.unwrap();
        let tag = match algorithm {
            Algorithm::TokenBucket => value.chars().next().unwrap().is_ascii_digit(),
            Algorithm::LeakyBucket { .. } => value.starts_with('K'),
            Algorithm::FixedWindow => value.starts_with('F'),
            Algorithm::SlidingWindow => value.starts_with('S'),
            _ => value.starts_with('L'),
        };
        assert!(tag, "{algorithm:?} stored {value:?}");
        let log: i64 = redis::cmd("EXISTS")
            .arg(format!("{key}:log"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            log == 1,
            algorithm == Algorithm::SlidingLog,
            "{algorithm:?}: the log's entries"
        );
    }
    assert!(!key.is_empty());
}

#[tokio::test]
async fn window_settings_out_of_range_are_config_errors() {
    // count × period (µs) must stay below 2^53 for the window scripts.
    let quota = Quota::new(u32::MAX, Duration::from_secs(86_400 * 30));
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let e = RedisBucket::builder(quota)
            .url(redis_url())
            .key("k")
            .algorithm(algorithm)
            .build()
            .await
            .unwrap_err();
        assert_eq!(e.kind(), RedisErrorKind::Config, "{algorithm:?}");
    }
}

#[tokio::test]
async fn the_local_fallback_follows_the_algorithm() {
    // Nothing listens on this port: every decision falls back to the local bucket.
    let port = redis_support::free_port();
    let quota = Quota::new(3, Duration::from_secs(60)).burst(3);
    let b = RedisBucket::builder(quota)
        .url(format!("redis://127.0.0.1:{port}"))
        .key("k")
        .algorithm(LEAKY)
        .failure_policy(FailurePolicy::Local { fraction: 1.0 })
        .connect_timeout(Duration::from_millis(100))
        .connect_lazily()
        .build()
        .await
        .unwrap();
    assert_eq!(b.algorithm(), LEAKY);
    // A leaky bucket admits one request, then spaces them: no burst of 3.
    b.try_acquire(1).await.unwrap();
    let _ = wait_of(b.try_acquire(1).await);
    let k = RedisKeyed::builder(quota)
        .url(format!("redis://127.0.0.1:{port}"))
        .key_prefix("lazy-keyed")
        .algorithm(Algorithm::FixedWindow)
        .failure_policy(FailurePolicy::Local { fraction: 1.0 })
        .connect_timeout(Duration::from_millis(100))
        .connect_lazily()
        .build()
        .await
        .unwrap();
    // The key's local fixed window: the whole count at once, then nothing.
    k.try_acquire("a", 3).await.unwrap();
    let _ = wait_of(k.try_acquire("a", 1).await);
    assert!(k.stats().fallbacks >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_rejecting_layers_on_a_sliding_log_share_each_keys_window() {
    use std::convert::Infallible;

    use http::{Request, Response, StatusCode};
    use tower::{service_fn, Layer, ServiceExt};
    use tower_throttle::extract::HeaderKey;

    let prefix = unique_prefix("keyed-log");
    let quota = Quota::per_minute(3).burst(3);
    let server = |redis: RedisKeyed| {
        assert_eq!(redis.algorithm(), Algorithm::SlidingLog);
        RejectLayer::keyed(
            tower_throttle::KeyedLimit::<tower_throttle::extract::KeyDigest>::from(redis),
            HeaderKey::x_api_key(),
        )
        .layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }))
    };
    let a = server(keyed(&prefix, quota, Algorithm::SlidingLog).await);
    let b = server(keyed(&prefix, quota, Algorithm::SlidingLog).await);
    let request = |key: &str| {
        Request::builder()
            .header("x-api-key", key)
            .body(String::new())
            .unwrap()
    };
    for key in ["alice", "bob"] {
        let mut admitted = 0;
        for i in 0..8 {
            let svc = if i % 2 == 0 { &a } else { &b };
            let resp = svc.clone().oneshot(request(key)).await.unwrap();
            match resp.status() {
                StatusCode::OK => admitted += 1,
                StatusCode::TOO_MANY_REQUESTS => {
                    // The oldest entry leaves the one-minute window in about a minute.
                    let secs: u64 = resp.headers()["retry-after"]
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert!((58..=60).contains(&secs), "Retry-After {secs}");
                }
                other => panic!("unexpected {other}"),
            }
        }
        // 3 per minute for each key, across both processes.
        assert_eq!(admitted, 3, "{key}");
    }
}

#[tokio::test]
async fn a_log_total_out_of_step_with_its_entries_is_recounted() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(3, Duration::from_millis(300));
    for total in ["0", "99999"] {
        let prefix = unique_prefix("log-total");
        let a = handle(&prefix, quota, Algorithm::SlidingLog).await;
        let key = a.redis_key().to_owned();
        // Three tokens logged just now, under a total that says otherwise.
        let now = redis_now_us(&mut conn).await;
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(format!("L1:{total}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("ZADD")
            .arg(format!("{key}:log"))
            .arg(now)
            .arg("1:3")
            .query_async(&mut conn)
            .await
            .unwrap();
        let wait = wait_of(a.try_acquire(1).await);
        assert!(wait <= Duration::from_millis(300), "{total}: {wait:?}");
        assert_eq!(get(&mut conn, &key).await.unwrap(), "L1:3", "{total}");
        assert_ttls(&mut conn, &key, 302, total).await;
    }
}

/// Polls `b.try_acquire(1)` (a refusal takes nothing) until its wait satisfies `ok`, for at
/// most 3 s; returns that wait.
async fn until_wait(b: &RedisBucket, ok: impl Fn(Duration) -> bool, what: &str) -> Duration {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let wait = wait_of(b.try_acquire(1).await);
        if ok(wait) {
            return wait;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {wait:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_window_waiter_books_its_turn_across_processes_and_gives_it_back_when_cancelled() {
    let mut conn = raw(&redis_url()).await;
    // One token per 2 s window: the booking horizon is the window.
    let quota = Quota::new(1, Duration::from_secs(2));
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingLog] {
        let prefix = unique_prefix("book");
        let (a, b) = (
            handle(&prefix, quota, algorithm).await,
            handle(&prefix, quota, algorithm).await,
        );
        // Start just after a window boundary (the fixed window's are aligned to the epoch).
        let into = redis_now_us(&mut conn).await % 2_000_000;
        tokio::time::sleep(Duration::from_micros(2_000_000 - into + 20_000)).await;
        a.try_acquire(1).await.unwrap();
        // A waiter of A books the next turn, about 2 s ahead.
        let waiter = tokio::spawn({
            let a = a.clone();
            async move { a.acquire(1).await }
        });
        // B (another process) finds itself behind that booking: about 4 s.
        until_wait(
            &b,
            |w| w > Duration::from_millis(3_000),
            &format!("{algorithm:?}: B behind A's booking"),
        )
        .await;
        assert!(!waiter.is_finished(), "{algorithm:?}");
        // A's waiter goes away: its turn comes back, and B's wait is the booked turn's.
        waiter.abort();
        let wait = until_wait(
            &b,
            |w| w <= Duration::from_millis(2_000),
            &format!("{algorithm:?}: the cancelled turn given back"),
        )
        .await;
        assert!(
            wait >= Duration::from_millis(1_000),
            "{algorithm:?}: {wait:?}"
        );
    }
}

#[tokio::test]
async fn a_window_waiter_costs_one_round_trip_per_admission() {
    // 2 per 200 ms: every wait lies within the booking horizon (1 s), so each admission is
    // one booking, whatever the window.
    let quota = Quota::new(2, Duration::from_millis(200));
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let b = handle(&unique_prefix("book-trips"), quota, algorithm).await;
        let start = tokio::time::Instant::now();
        for _ in 0..6 {
            b.acquire(1).await.unwrap();
        }
        // Six tokens at 2 per window take at least two more windows.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(200),
            "{algorithm:?}: {took:?}"
        );
        assert_eq!(b.stats().round_trips, 6, "{algorithm:?}: {:?}", b.stats());
    }
}

/// Polls `k.try_acquire(key, 1)` as [`until_wait`] polls a bucket.
async fn until_key_wait(
    k: &RedisKeyed,
    key: &str,
    ok: impl Fn(Duration) -> bool,
    what: &str,
) -> Duration {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let wait = wait_of(k.try_acquire(key, 1).await);
        if ok(wait) {
            return wait;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {wait:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_keyed_waiter_books_its_turn_across_processes_and_gives_it_back_when_cancelled() {
    let mut conn = raw(&redis_url()).await;
    // One token per 2 s: the booking horizon is 2 s, whatever the algorithm.
    let quota = Quota::new(1, Duration::from_secs(2)).burst(1);
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::leaky_bucket(16),
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let prefix = unique_prefix("keyed-book");
        let (a, b) = (
            keyed(&prefix, quota, algorithm).await,
            keyed(&prefix, quota, algorithm).await,
        );
        // Start just after a window boundary (the fixed window's are aligned to the epoch).
        let into = redis_now_us(&mut conn).await % 2_000_000;
        tokio::time::sleep(Duration::from_micros(2_000_000 - into + 20_000)).await;
        a.try_acquire("user", 1).await.unwrap();
        // Another key is another limit: untouched by what follows.
        b.try_acquire("other", 1).await.unwrap();
        // A waiter of A books the key's next turn, about 2 s ahead.
        let waiter = tokio::spawn({
            let a = a.clone();
            async move { a.acquire("user", 1).await }
        });
        // B (another process) finds itself behind that booking: about 4 s.
        until_key_wait(
            &b,
            "user",
            |w| w > Duration::from_millis(3_000),
            &format!("{algorithm:?}: B behind A's booking"),
        )
        .await;
        assert!(!waiter.is_finished(), "{algorithm:?}");
        // A's waiter goes away: its turn comes back, and B's wait is the booked turn's.
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled(), "{algorithm:?}");
        let wait = until_key_wait(
            &b,
            "user",
            |w| w <= Duration::from_millis(2_000),
            &format!("{algorithm:?}: the cancelled turn given back"),
        )
        .await;
        assert!(
            wait >= Duration::from_millis(1_000),
            "{algorithm:?}: {wait:?}"
        );
        // B takes that turn by waiting for it: one booking, admitted at that instant.
        let (started, trips) = (tokio::time::Instant::now(), b.stats().round_trips);
        b.acquire("user", 1).await.unwrap();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took <= Duration::from_millis(2_300),
            "{algorithm:?}: {took:?}"
        );
        assert_eq!(b.stats().round_trips, trips + 1, "{algorithm:?}");
    }
}

/// A Redis limit: a bucket, or the key "user" of a keyed limit.
#[derive(Clone)]
enum Shared {
    Bucket(RedisBucket),
    Key(RedisKeyed),
}

impl Shared {
    async fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        match self {
            Shared::Bucket(b) => b.try_acquire(n).await,
            Shared::Key(k) => k.try_acquire("user", n).await,
        }
    }

    async fn acquire(&self, n: u32) -> Result<(), Denied> {
        match self {
            Shared::Bucket(b) => b.acquire(n).await,
            Shared::Key(k) => k.acquire("user", n).await,
        }
    }

    fn redis_key(&self) -> String {
        match self {
            Shared::Bucket(b) => b.redis_key().to_owned(),
            Shared::Key(k) => k.redis_key("user"),
        }
    }
}

/// The instant (µs after `start`, Redis clock) a request of one token of `b` fits, as its
/// refusal says: read just before the call, so never late, early by at most a round trip.
async fn fits_at(conn: &mut MultiplexedConnection, b: &Shared, start: u64) -> i64 {
    let before = redis_now_us(conn).await;
    let wait = wait_of(b.try_acquire(1).await);
    (before + wait.as_micros() as u64) as i64 - start as i64
}

#[tokio::test]
async fn a_cancelled_sliding_window_booking_gives_its_turn_back() {
    // 4 per 2 s window: the booking horizon is the window.
    let quota = Quota::new(4, Duration::from_secs(2));
    let prefix = unique_prefix("sliding-cancel");
    let (a, b) = (
        handle(&prefix, quota, Algorithm::SlidingWindow).await,
        handle(&prefix, quota, Algorithm::SlidingWindow).await,
    );
    sliding_cancel(Shared::Bucket(a), Shared::Bucket(b)).await;
    // The same for one key of a keyed limit.
    let prefix = unique_prefix("sliding-cancel-keyed");
    let (a, b) = (
        keyed(&prefix, quota, Algorithm::SlidingWindow).await,
        keyed(&prefix, quota, Algorithm::SlidingWindow).await,
    );
    sliding_cancel(Shared::Key(a), Shared::Key(b)).await;
}

/// Two handles `a`, `b` (as of two processes) on one sliding window of 4 per 2 s. Instants
/// below are µs from the start of a window `w` ([0, 2 s) is w, [2 s, 4 s) is w + 1).
async fn sliding_cancel(a: Shared, b: Shared) {
    let mut conn = raw(&redis_url()).await;
    let key = a.redis_key();
    // 1.5 s into a window.
    let now = redis_now_us(&mut conn).await;
    let mut start = now - now % 2_000_000;
    if now - start > 1_400_000 {
        start += 2_000_000;
    }
    tokio::time::sleep(Duration::from_micros(start + 1_500_000 - now)).await;
    a.try_acquire(4).await.unwrap();
    // A waiter of A books 2 tokens: window w is full, and in w + 1 the estimate carries
    // 4 × (4 s − t) / 2 s of it, which leaves room for 2 from 3 s.
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.acquire(2).await }
    });
    // B (another process) goes after that booking: 1 more token fits from 3.5 s.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    let behind = loop {
        let at = fits_at(&mut conn, &b, start).await;
        if at > 3_000_000 || tokio::time::Instant::now() > deadline {
            break at;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!((3_400_000..=3_510_000).contains(&behind), "{behind}");
    assert!(!waiter.is_finished());
    // A's waiter goes away: its turn comes back. B's token fits where it would have without
    // that booking, 2.5 s — not after the cancelled instant (3 s).
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    // Given back in the background: bounded, not fast (the window's 2.5 s is ~1 s away).
    let deadline = tokio::time::Instant::now() + Duration::from_millis(900);
    let back = loop {
        let at = fits_at(&mut conn, &b, start).await;
        if at < 2_900_000 || tokio::time::Instant::now() > deadline {
            break at;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!((2_400_000..=2_510_000).contains(&back), "{back}");
    let state = get(&mut conn, &key).await.unwrap();
    assert!(!state.contains('Q'), "no booking left ahead: {state}");
    // B books that turn and goes at it.
    b.acquire(1).await.unwrap();
    let went = redis_now_us(&mut conn).await as i64 - start as i64;
    assert!((2_490_000..=2_900_000).contains(&went), "{went}");
}

#[tokio::test]
async fn a_far_future_sliding_window_booking_is_clamped_and_expires() {
    let mut conn = raw(&redis_url()).await;
    let quota = Quota::new(3, Duration::from_millis(200));
    let prefix = unique_prefix("far-booking");
    let k = keyed(&prefix, quota, Algorithm::SlidingWindow).await;
    let key = k.redis_key("user");
    // A booking a day ahead (a clock stepped back, a stray write), no set of bookings.
    let day = redis_now_us(&mut conn).await + 86_400_000_000;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(format!("S1:0:0Q{day}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    // A release that gives nothing back writes no state, but the set of bookings the
    // clamp wrote expires all the same.
    k.release("user", 1).await.unwrap();
    let t = pttl(&mut conn, &format!("{key}:log")).await;
    assert!(t > 0 && t <= 1_000 + 2, "bookings' PTTL {t}");
    // A request goes after the booking, clamped to the booking horizon (1 s) past now.
    let wait = wait_of(k.try_acquire("user", 1).await);
    assert!(
        wait > Duration::from_millis(800) && wait <= Duration::from_millis(1_001),
        "{wait:?}"
    );
    let state = get(&mut conn, &key).await.unwrap();
    assert!(!state.contains(&day.to_string()), "{state}");
    assert_ttls(&mut conn, &key, 1_000 + 3 * 200 + 2, "refusal").await;
}
