//! The post-pause rule, for every algorithm, after a pause that starts with the window full:
//! nothing before the pause ends, then at most `1 + rate·t` over any interval of length `t`
//! during the first period after it (one token when it ends, then one per interval), however
//! full the window was before it. Windows are aligned to the start of each test, so no
//! result depends on where the wall clock's second boundary falls.

mod support;

use std::time::Duration;

use support::{settle, Recorder};
use tokio::time::{advance, Instant};
use tower_throttle::{Algorithm, Bucket, Quota};

const MS: Duration = Duration::from_millis(1);

fn all() -> Vec<(&'static str, Algorithm)> {
    vec![
        ("token", Algorithm::TokenBucket),
        ("leaky", Algorithm::leaky_bucket(1000)),
        ("fixed", Algorithm::FixedWindow),
        ("sliding", Algorithm::SlidingWindow),
        ("log", Algorithm::SlidingLog),
    ]
}

/// Fills the window at 0, queues 30 waiters, pauses at `pause_at` for `cooldown`; returns
/// the admissions after the pause began and the instant it ends.
async fn scenario(
    algorithm: Algorithm,
    pause_at: Duration,
    cooldown: Duration,
) -> (Vec<Duration>, Duration) {
    let quota = Quota::new(10, Duration::from_secs(1));
    let bucket = Bucket::builder(quota)
        .algorithm(algorithm)
        .window_origin(Instant::now())
        .build();
    let rec = Recorder::new();
    while bucket.try_acquire(1).is_ok() {}
    let tasks: Vec<_> = (0..30)
        .map(|id| {
            let (b, rec) = (bucket.clone(), rec.clone());
            tokio::spawn(async move {
                b.acquire(1).await.unwrap();
                rec.record(1, id);
            })
        })
        .collect();
    settle().await;
    advance(pause_at).await;
    settle().await;
    let before = rec.entries().len();
    bucket.pause(cooldown);
    for t in tasks {
        t.await.unwrap();
    }
    let after = rec.admissions()[before..].iter().map(|a| a.0).collect();
    (after, pause_at + cooldown)
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_restarts_without_a_burst_after_a_pause_over_a_full_window() {
    let interval = 100 * MS; // 10 per second
    for (name, algorithm) in all() {
        for (pause_at, cooldown) in [(155, 400), (50, 0), (950, 100), (0, 2_000), (999, 1)] {
            let (pause_at, cooldown) = (pause_at * MS, cooldown * MS);
            let (after, end) = scenario(algorithm, pause_at, cooldown).await;
            let case = format!("{name}, pause at {pause_at:?} for {cooldown:?}");
            assert!(
                after.iter().all(|t| *t >= end),
                "{case}: admitted during the pause"
            );
            // Over the first period after the pause: 1 + rate·t in every interval.
            let first: Vec<Duration> = after
                .iter()
                .copied()
                .filter(|t| *t < end + Duration::from_secs(1))
                .collect();
            for (i, a) in first.iter().enumerate() {
                for len in [
                    MS,
                    50 * MS,
                    100 * MS,
                    150 * MS,
                    250 * MS,
                    500 * MS,
                    999 * MS,
                ] {
                    let n = first[i..].iter().take_while(|t| **t < *a + len).count();
                    let bound = 1 + (len.as_nanos() / interval.as_nanos()) as usize;
                    assert!(
                        n <= bound,
                        "{case}: {n} admitted within {len:?} from {a:?} (bound {bound})"
                    );
                }
            }
        }
    }
}

/// The sliding log restarts empty: its entries from before the pause do not expire into a
/// burst one period after they were made.
#[tokio::test(start_paused = true)]
async fn the_sliding_log_forgets_the_window_before_the_pause() {
    let (after, end) = scenario(Algorithm::SlidingLog, 155 * MS, 400 * MS).await;
    assert_eq!(end, 555 * MS);
    let at_one_second = after
        .iter()
        .filter(|t| **t == Duration::from_secs(1))
        .count();
    assert!(at_one_second <= 1, "{at_one_second} at 1 s");
    // One at the end, then one per 100 ms.
    assert_eq!(&after[..3], &[555 * MS, 655 * MS, 755 * MS]);
}

/// The fixed window does not let the rest of the window through when a pause ends inside
/// it: one at the end, then one per interval until a whole period has passed.
#[tokio::test(start_paused = true)]
async fn the_fixed_window_spaces_the_rest_of_the_window_after_a_pause() {
    let quota = Quota::new(10, Duration::from_secs(1));
    let bucket = Bucket::builder(quota)
        .algorithm(Algorithm::FixedWindow)
        .window_origin(Instant::now())
        .build();
    bucket.pause(Duration::from_millis(50));
    advance(50 * MS).await;
    assert!(bucket.try_acquire(1).is_ok());
    assert!(bucket.try_acquire(1).is_err());
    advance(100 * MS).await;
    assert!(bucket.try_acquire(1).is_ok());
    assert!(bucket.try_acquire(1).is_err());
}

/// Pauses never need memory or time in proportion to their length.
#[tokio::test(start_paused = true)]
async fn any_pause_length_is_constant_work_for_every_algorithm() {
    for (name, algorithm) in all() {
        for quota in [
            Quota::new(u32::MAX, Duration::from_secs(1)),
            Quota::new(1, Duration::from_nanos(1)),
            // The longest period a quota accepts.
            Quota::with_period(Duration::from_nanos(u64::MAX / 4 - 1)),
        ] {
            let bucket = Bucket::with_algorithm(quota, algorithm);
            bucket.pause(Duration::MAX);
            bucket.pause(Duration::from_secs(3600));
            assert!(bucket.try_acquire(1).is_err(), "{name} {quota:?}");
            let s = bucket.snapshot();
            assert!(s.paused_until.is_some(), "{name}");
        }
    }
}
