//! The post-pause rule, for every algorithm, after a pause that starts with the window full:
//! nothing before the pause ends, then at most `1 + rate·t` over any interval of length `t`
//! during the first period after it (one token when it ends, then one per interval), however
//! full the window was before it. Windows are aligned to the start of each test, so no
//! result depends on where the wall clock's second boundary falls.

mod support;

use std::time::Duration;

use support::{most_in_a_window, settle, Recorder};
use tokio::task::JoinHandle;
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

/// Waiters of `costs` tokens each, queued in this order; each records its admission.
fn waiters(bucket: &Bucket, rec: &Recorder, costs: &[u32]) -> Vec<JoinHandle<()>> {
    costs
        .iter()
        .enumerate()
        .map(|(id, &cost)| {
            let (b, rec) = (bucket.clone(), rec.clone());
            tokio::spawn(async move {
                b.acquire(cost).await.unwrap();
                rec.record(cost, id);
            })
        })
        .collect()
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
    let tasks = waiters(&bucket, &rec, &[1; 30]);
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

/// The sliding log keeps its entries from before the pause: the window filled at 0 holds
/// everything until 1 s, and when they leave, the ramp (until a period after the pause
/// ends) lets them go one per interval, not at once.
#[tokio::test(start_paused = true)]
async fn the_sliding_log_counts_the_window_before_the_pause() {
    let (after, end) = scenario(Algorithm::SlidingLog, 155 * MS, 400 * MS).await;
    assert_eq!(end, 555 * MS);
    assert_eq!(
        &after[..5],
        &[1000 * MS, 1100 * MS, 1200 * MS, 1300 * MS, 1400 * MS]
    );
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
            let bucket = Bucket::builder(quota).algorithm(algorithm).build();
            bucket.pause(Duration::MAX);
            bucket.pause(Duration::from_secs(3600));
            assert!(bucket.try_acquire(1).is_err(), "{name} {quota:?}");
            let s = bucket.snapshot();
            assert!(s.paused_until.is_some(), "{name}");
        }
    }
}

/// The sliding log keeps its bound across a pause: admissions from before it still count
/// until they leave the window, so no window of length `period` ever holds more than
/// `count`, weighted costs included; and the end of the pause still ramps (one token when
/// it ends, then one per interval).
#[tokio::test(start_paused = true)]
async fn the_sliding_log_counts_the_window_before_a_pause() {
    let period = Duration::from_secs(1);
    // (admitted before the pause, one per `gap` ms; waiters' costs, in arrival order;
    // pause at, for (ms))
    let cases: [(u32, u64, &[u32], u64, u64); 6] = [
        (10, 0, &[1; 20], 0, 300),
        (10, 0, &[6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 0, 300),
        (10, 90, &[1; 20], 900, 300),
        (10, 90, &[10, 1, 1, 1, 1, 1, 1, 1, 1, 1], 850, 200),
        (5, 100, &[4, 3, 1, 1, 1, 1, 1, 1, 1, 1], 500, 100),
        (10, 0, &[1; 20], 400, 700),
    ];
    for (before, gap, costs, pause_at, cooldown) in cases {
        let case = format!(
            "{before} every {gap} ms, waiters {costs:?}, pause at {pause_at} ms for {cooldown} ms"
        );
        let bucket = Bucket::builder(Quota::new(10, period).burst(4))
            .algorithm(Algorithm::SlidingLog)
            .window_origin(Instant::now())
            .build();
        let rec = Recorder::new();
        for i in 0..before {
            if i > 0 {
                advance(Duration::from_millis(gap)).await;
            }
            bucket.try_acquire(1).unwrap();
            rec.record(1, usize::MAX);
        }
        let tasks = waiters(&bucket, &rec, costs);
        settle().await;
        let elapsed = rec.start().elapsed();
        advance(Duration::from_millis(pause_at).saturating_sub(elapsed)).await;
        settle().await;
        bucket.pause(Duration::from_millis(cooldown));
        let end = rec.start().elapsed() + Duration::from_millis(cooldown);
        for t in tasks {
            t.await.unwrap();
        }
        let all = rec.admissions();
        let most = most_in_a_window(&all, period);
        assert!(
            most <= 10,
            "{case}: {most} tokens in one window of {period:?}"
        );
        let after: Vec<_> = all.iter().filter(|a| a.0 >= end).copied().collect();
        assert!(
            all.iter().filter(|a| a.0 > elapsed).all(|a| a.0 >= end),
            "{case}: admitted during the pause"
        );
        // The ramp: one request when the pause ends, then one token per interval.
        for (i, a) in after.iter().enumerate() {
            for b in &after[i + 1..] {
                let tokens: u32 = after[i..]
                    .iter()
                    .take_while(|x| x.0 <= b.0)
                    .map(|x| x.1)
                    .sum();
                let bound = a.1 + ((b.0 - a.0).as_millis() / 100) as u32;
                assert!(
                    b.0 >= end + period || tokens <= bound.max(b.1 + a.1),
                    "{case}: {tokens} tokens from {:?} to {:?}",
                    a.0,
                    b.0
                );
            }
        }
    }
}

/// The same across a pause on a runtime whose timers fire late (it runs every `jump`): a
/// late waiter is credited back to its turn, never into the pause nor into a window that
/// admissions from before the pause still fill. Late timers loosen the log to the rate
/// bound at the instants requests go (`count + 1 + rate·t`, Semantic 1); every window that
/// starts before the pause still holds at most `count`.
#[tokio::test(start_paused = true)]
async fn the_sliding_log_counts_the_window_before_a_pause_with_late_timers() {
    let period = 10 * MS;
    for jump_us in [1_000, 1_900, 2_500, 3_700, 6_100] {
        for (pause_at, cooldown) in [(0, 1), (0, 3), (3, 4), (5, 1), (9, 7)] {
            let case = format!("jumps of {jump_us} µs, pause at {pause_at} ms for {cooldown} ms");
            let bucket = Bucket::builder(Quota::new(10, period))
                .algorithm(Algorithm::SlidingLog)
                .window_origin(Instant::now())
                .build();
            let rec = Recorder::new();
            while bucket.try_acquire(1).is_ok() {
                rec.record(1, usize::MAX);
            }
            let tasks = waiters(&bucket, &rec, &[1; 60]);
            settle().await;
            let mut paused = None;
            while rec.entries().len() < 70 {
                advance(Duration::from_micros(jump_us)).await;
                if paused.is_none() && rec.start().elapsed() >= pause_at * MS {
                    bucket.pause(cooldown * MS);
                    paused = Some(rec.start().elapsed());
                }
                settle().await;
            }
            for t in tasks {
                t.await.unwrap();
            }
            let all = rec.admissions();
            let paused = paused.unwrap();
            let before: Vec<_> = all.iter().filter(|a| a.0 <= paused).collect();
            for a in before {
                let n: u32 = all
                    .iter()
                    .filter(|x| x.0 >= a.0 && x.0 < a.0 + period)
                    .map(|x| x.1)
                    .sum();
                assert!(n <= 10, "{case}: {n} in the window from {:?}", a.0);
            }
            assert!(
                all.iter()
                    .all(|a| a.0 <= paused || a.0 >= paused + cooldown * MS),
                "{case}: admitted during the pause"
            );
            let times: Vec<Duration> = all.iter().map(|a| a.0).collect();
            for (i, a) in times.iter().enumerate() {
                for (k, b) in times[i..].iter().enumerate() {
                    // `k + 1` admissions from `a` to `b`, at most `11 + rate·t`.
                    let bound = 11 + (*b - *a).as_micros() / 1000;
                    assert!((k as u128) < bound, "{case}: {} from {a:?} to {b:?}", k + 1);
                }
            }
        }
    }
}
