//! `RedisBucket::set_quota`: the decisions made in Redis follow the new
//! quota, every algorithm, with no burst at the change, against a real Redis server (time
//! from the Redis clock).
#![cfg(feature = "redis")]

#[path = "redis_support/mod.rs"]
mod redis_support;
#[path = "redis_support/windows.rs"]
mod windows;

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis_support::{on_redis_clock, raw, redis_now_us, redis_url, unique_prefix};
use tower_throttle::redis::RedisBucket;
use tower_throttle::{Algorithm, Bucket, Denied, Quota};
use windows::{admitted_in_one_window, window_start, WIDTH_US};

/// A Redis bucket deciding with `algorithm`, twice (the handle, and a clone).
async fn shared(tag: &str, quota: Quota, algorithm: Algorithm) -> (RedisBucket, RedisBucket) {
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(unique_prefix(tag))
        .key("api")
        .algorithm(algorithm)
        // A loaded machine must not turn a decision into the failure policy's refusal.
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    (redis.clone(), redis)
}

/// Single tokens admitted now, until the first refusal (its wait).
async fn at_once(bucket: &RedisBucket) -> (u32, Duration) {
    let mut admitted = 0;
    loop {
        match bucket.try_acquire(1).await {
            Ok(()) => admitted += 1,
            Err(Denied::Throttled(t)) => return (admitted, t.wait()),
            Err(e) => panic!("a decision failed: {e}"),
        }
    }
}

/// The Redis time `k` single-token waiters take, one after the other, µs.
async fn time_for(bucket: &RedisBucket, conn: &mut MultiplexedConnection, k: u32) -> u64 {
    let start = redis_now_us(conn).await;
    for _ in 0..k {
        bucket.acquire(1).await.expect("admitted");
    }
    redis_now_us(conn).await - start
}

/// Token and leaky bucket: lowered, then raised, the rate in Redis is the new one from the
/// change on, and the change lets no burst through (the bucket was emptied just before: in
/// process it would hold nothing after the change either).
async fn a_bucket_on_redis_follows_a_new_quota(algorithm: Algorithm) {
    let mut conn = raw(&redis_url()).await;
    let built = Quota::per_second(10).burst(5);
    let tag = if algorithm == Algorithm::TokenBucket {
        "set-quota-token"
    } else {
        "set-quota-leaky"
    };
    let (redis, bucket) = shared(tag, built, algorithm).await;
    let full = if algorithm == Algorithm::TokenBucket {
        5
    } else {
        1
    };
    // Every `at_once` below is timed on the Redis clock: on a slow machine, tokens refill
    // while it runs, at most one per interval (the shorter of the two) of the span measured.
    let refilled =
        |from: u64, to: u64, interval: u64| u32::try_from((to - from) / interval).unwrap();
    let (lo, (admitted, _), hi) = on_redis_clock(&mut conn, at_once(&bucket)).await;
    assert!(
        (full..=full + refilled(lo, hi, 100_000)).contains(&admitted),
        "{algorithm:?}: built, {admitted} at once"
    );

    // Lowered to 2/s: nothing at once, the next token one new interval (500 ms) after the
    // bucket emptied (after `lo`), less the part of an old interval (100 ms) that passed
    // before the change reached Redis (five times that part of a new one); not one old
    // interval.
    let lower = Quota::per_second(2).burst(5);
    bucket.set_quota(lower);
    assert_eq!((bucket.quota(), redis.quota()), (lower, lower));
    let (_, (admitted, wait), hi) = on_redis_clock(&mut conn, at_once(&bucket)).await;
    assert!(
        admitted <= refilled(lo, hi, 100_000),
        "{algorithm:?}: a burst at the change: {admitted}"
    );
    let least = Duration::from_micros(500_000u64.saturating_sub(6 * (hi - lo)));
    assert!(
        wait >= least && wait <= Duration::from_millis(500),
        "{algorithm:?}: {wait:?}, at least {least:?}"
    );
    // Five tokens at 2/s take at least four intervals (the first may be due at once), and
    // (bounded, however slow the machine) less than ten.
    let took = time_for(&bucket, &mut conn, 5).await;
    assert!(
        (1_900_000..5_000_000).contains(&took),
        "{algorithm:?}: 5 at 2/s took {took} µs"
    );

    // Raised to 50/s (the bucket emptied again just before): nothing at once, then 40
    // tokens in about 40 new intervals (800 ms), neither faster nor stalled.
    let (lo, _, _) = on_redis_clock(&mut conn, at_once(&bucket)).await;
    let higher = Quota::per_second(50).burst(5);
    bucket.set_quota(higher);
    assert_eq!(redis.quota(), higher);
    let (_, (admitted, wait), hi) = on_redis_clock(&mut conn, at_once(&bucket)).await;
    assert!(
        admitted <= refilled(lo, hi, 20_000),
        "{algorithm:?}: a burst at the raise: {admitted}"
    );
    assert!(wait <= Duration::from_millis(20), "{algorithm:?}: {wait:?}");
    let took = time_for(&bucket, &mut conn, 40).await;
    assert!(
        (760_000..3_000_000).contains(&took),
        "{algorithm:?}: 40 at 50/s took {took} µs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bucket_on_redis_follows_a_new_quota() {
    a_bucket_on_redis_follows_a_new_quota(Algorithm::TokenBucket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaky_bucket_on_redis_follows_a_new_quota() {
    a_bucket_on_redis_follows_a_new_quota(Algorithm::leaky_bucket(16)).await;
}

/// A larger burst is not handed out at the change: an emptied bucket whose burst goes from
/// 2 to 10 holds nothing more, and then refills to 10 at the rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_larger_burst_on_redis_is_not_handed_out_at_the_change() {
    let mut conn = raw(&redis_url()).await;
    let (_, bucket) = shared(
        "set-quota-burst",
        Quota::per_second(20).burst(2),
        Algorithm::TokenBucket,
    )
    .await;
    assert_eq!(at_once(&bucket).await.0, 2);
    bucket.set_quota(Quota::per_second(20).burst(10));
    let start = redis_now_us(&mut conn).await;
    let (admitted, _) = at_once(&bucket).await;
    let elapsed = redis_now_us(&mut conn).await - start;
    // At most what refilled at 20/s meanwhile (plus the one due).
    assert!(
        u64::from(admitted) <= 1 + elapsed / 50_000,
        "{admitted} at once after {elapsed} µs"
    );
    // Full again after 10 intervals: 10 at once (and what refilled while they were taken,
    // on a slow machine).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (lo, (admitted, _), hi) = on_redis_clock(&mut conn, at_once(&bucket)).await;
    let refilled = u32::try_from((hi - lo) / 50_000).unwrap();
    assert!(
        (10..=10 + refilled).contains(&admitted),
        "{admitted} at once"
    );
}

/// 20 per 1 s window, built.
const COUNT: u32 = 20;

/// How many single tokens `bucket` gets admitted in one quiet window of the Redis clock
/// ([`admitted_in_one_window`]).
async fn in_one_window(
    bucket: &RedisBucket,
    conn: &mut MultiplexedConnection,
    after: &mut u64,
) -> u32 {
    admitted_in_one_window(|| bucket.try_acquire(1), conn, after, u32::MAX).await
}

/// Windows: a new count with the same period is the count per window in Redis, lowered or
/// raised (above the one built too); a new period keeps the width built and takes the new
/// rate per window; a count raised mid-window adds nothing to the window in progress; a
/// request above the new count fails with `ExceedsBurst`, as in process.
async fn a_window_on_redis_follows_a_new_quota(algorithm: Algorithm) {
    let mut conn = raw(&redis_url()).await;
    let built = Quota::new(COUNT, Duration::from_micros(WIDTH_US));
    let (redis, bucket) = shared(&format!("set-quota-{algorithm:?}"), built, algorithm).await;
    let mut after = redis_now_us(&mut conn).await / WIDTH_US + 1;
    assert_eq!(
        in_one_window(&bucket, &mut conn, &mut after).await,
        COUNT,
        "{algorithm:?}: built"
    );

    bucket.set_quota(Quota::per_second(8));
    assert_eq!(redis.quota(), Quota::per_second(8));
    assert_eq!(
        in_one_window(&bucket, &mut conn, &mut after).await,
        8,
        "{algorithm:?}: lowered"
    );
    match bucket.acquire(9).await {
        Err(Denied::ExceedsBurst(e)) => assert_eq!((e.requested(), e.burst()), (9, 8)),
        other => panic!("{algorithm:?}: 9 of 8: {other:?}"),
    }
    match redis.try_acquire(9).await {
        Err(Denied::ExceedsBurst(e)) => assert_eq!((e.requested(), e.burst()), (9, 8)),
        other => panic!("{algorithm:?}: 9 of 8 on the Redis bucket: {other:?}"),
    }

    // Raised mid-window, 5 of 8 taken: the 3 left, not 25 more. A start in which the window
    // ended before the count was done (a slow machine) is dropped, and the test starts over
    // in a later window, from the count of 8.
    for starts in 1.. {
        assert!(
            starts <= 5,
            "{algorithm:?}: no window was long enough for the raise"
        );
        bucket.set_quota(Quota::per_second(8));
        let start = window_start(&mut conn, after).await;
        for _ in 0..5 {
            bucket.try_acquire(1).await.unwrap();
        }
        bucket.set_quota(Quota::per_second(30));
        let (admitted, _) = at_once(&bucket).await;
        let index = redis_now_us(&mut conn).await / WIDTH_US;
        after = index + 2;
        if index == start {
            assert_eq!(admitted, 3, "{algorithm:?}: a burst at the raise");
            break;
        }
    }
    assert_eq!(
        in_one_window(&bucket, &mut conn, &mut after).await,
        30,
        "{algorithm:?}: raised above the count built"
    );

    // A new period: 600 a minute is 10 per window of the width built (1 s).
    bucket.set_quota(Quota::per_minute(600));
    assert_eq!(
        in_one_window(&bucket, &mut conn, &mut after).await,
        10,
        "{algorithm:?}: a new period"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_on_redis_follows_a_new_quota() {
    a_window_on_redis_follows_a_new_quota(Algorithm::FixedWindow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_window_on_redis_follows_a_new_quota() {
    a_window_on_redis_follows_a_new_quota(Algorithm::SlidingWindow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_log_on_redis_follows_a_new_quota() {
    a_window_on_redis_follows_a_new_quota(Algorithm::SlidingLog).await;
}

/// A waiter asking for more than the new burst fails with `ExceedsBurst`, at the change, as
/// in process (here one that waits behind a pause, so it has not booked its instant yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_above_the_new_burst_fails_on_redis_as_in_process() {
    let quota = Quota::per_second(10).burst(5);
    let (_, on_redis) = shared("set-quota-waiter", quota, Algorithm::TokenBucket).await;
    let in_process = Bucket::new(quota);
    // The same steps on both: pause, a waiter for 4, the burst lowered to 2.
    macro_rules! fails_at_the_change {
        ($bucket:expr, $shared:expr, $pause:expr) => {{
            let (bucket, shared) = ($bucket, $shared);
            $pause;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let waiter = {
                let bucket = bucket.clone();
                tokio::spawn(async move { bucket.acquire(4).await })
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(
                !waiter.is_finished(),
                "shared {shared}: waits behind the pause"
            );
            bucket.set_quota(Quota::per_second(10).burst(2));
            let result = tokio::time::timeout(Duration::from_secs(1), waiter)
                .await
                .unwrap_or_else(|_| panic!("shared {shared}: still waiting after the change"))
                .unwrap();
            match result {
                Err(Denied::ExceedsBurst(e)) => {
                    assert_eq!((e.requested(), e.burst()), (4, 2), "shared {shared}")
                }
                other => panic!("shared {shared}: {other:?}"),
            }
        }};
    }
    fails_at_the_change!(&in_process, false, in_process.pause(Duration::from_secs(5)));
    fails_at_the_change!(
        &on_redis,
        true,
        on_redis.pause(Duration::from_secs(5)).await.unwrap()
    );
}

/// After a new quota, a push-back still lowers the rate decided in Redis, below the new
/// ceiling: token bucket and fixed window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_back_after_a_new_quota_lowers_the_redis_rate_below_it() {
    let mut conn = raw(&redis_url()).await;
    let (redis, bucket) = shared(
        "set-quota-pushback",
        Quota::per_second(100).burst(1),
        Algorithm::TokenBucket,
    )
    .await;
    bucket.set_quota(Quota::per_second(40).burst(1));
    let cooldown = Duration::from_millis(200);
    bucket.feedback().sending().pushed_back(cooldown, None);
    // Half of the 40/s refused, 96 % of it in force: 19.2/s, about 52 ms a token.
    assert_eq!(bucket.rate(), 19.2);
    assert_eq!(redis.quota(), Quota::per_second(40).burst(1));
    tokio::time::sleep(cooldown + Duration::from_millis(100)).await;
    let (_, due) = at_once(&bucket).await;
    // The next token, then a refusal: both decided within [lo, hi] (Redis clock), so the
    // refusal waits for one interval at 19.2/s (52 ms) after the admission, less at most
    // that span.
    tokio::time::sleep(due).await;
    let (lo, (admitted, wait), hi) = on_redis_clock(&mut conn, at_once(&bucket)).await;
    assert!(admitted >= 1, "the token due was not admitted");
    let span = Duration::from_micros(hi - lo);
    assert!(
        wait <= Duration::from_millis(53) && wait + span >= Duration::from_millis(52),
        "{wait:?}, decided within {span:?}"
    );
    // Ten tokens at 19.2/s: at least nine of its intervals (469 ms), not 40/s (225 ms).
    // (At most 1.5 s: bounded, however slow the machine.)
    let took = time_for(&bucket, &mut conn, 10).await;
    assert!((440_000..1_500_000).contains(&took), "10 took {took} µs");

    // A window: 20 per window built, 10 set, 4 per window after the push-back.
    let built = Quota::new(COUNT, Duration::from_micros(WIDTH_US));
    let (_, window) = shared("set-quota-pushback-window", built, Algorithm::FixedWindow).await;
    window.set_quota(Quota::per_second(10));
    window.feedback().sending().pushed_back(cooldown, None);
    assert_eq!(window.rate(), 4.8);
    let mut after = redis_now_us(&mut conn).await / WIDTH_US + 3;
    assert_eq!(in_one_window(&window, &mut conn, &mut after).await, 4);
}
