//! Every algorithm behind the one `Bucket` interface: its own bound, FIFO, weighted costs,
//! cancel safety, pause and runtime reconfiguration — under tokio's paused clock.

mod support;

use std::time::Duration;

use proptest::prelude::*;
use support::{
    aligned, assert_fifo, assert_rate_bound, drive, most_in_a_window, run_paused, settle, Recorder,
};
use tokio::time::{advance, Instant};
use tower_throttle::{Algorithm, Bucket, Denied, Quota};

const MS: Duration = Duration::from_millis(1);

/// The offset of the first window boundary of a fresh window bucket: take one token and read
/// how long until it is forgotten.
fn boundary(bucket: &Bucket) -> Duration {
    bucket.try_acquire(1).unwrap();
    bucket.snapshot().full_in
}

fn arrivals() -> impl Strategy<Value = Vec<(u64, u32, bool)>> {
    prop::collection::vec((0u64..30, 1u32..4, any::<bool>()), 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn token_bucket_bound_and_fifo(arr in arrivals(), per_ms in 1u64..20, burst in 3u32..8) {
        let quota = Quota::with_period(Duration::from_millis(per_ms)).burst(burst);
        let (adm, e) = run_paused(drive(Bucket::new(quota), arr));
        assert_rate_bound(&adm, quota);
        assert_fifo(&e);
    }

    #[test]
    fn leaky_bucket_spaces_every_admission(arr in arrivals(), per_ms in 1u64..20) {
        let quota = Quota::with_period(Duration::from_millis(per_ms)).burst(4);
        let bucket = aligned(quota, Algorithm::leaky_bucket(1000));
        let (mut adm, e) = run_paused(drive(bucket, arr));
        adm.sort();
        for w in adm.windows(2) {
            // An admission of cost c drains over the c intervals after it.
            let gap = w[1].0 - w[0].0;
            prop_assert!(gap >= quota.interval() * w[0].1, "{gap:?} after a cost of {}", w[0].1);
        }
        assert_fifo(&e);
    }

    #[test]
    fn fixed_window_limit_per_aligned_window(arr in arrivals(), limit in 3u32..8) {
        let quota = Quota::new(limit, Duration::from_millis(100));
        let (adm, e, b) = run_paused(async move {
            let bucket = aligned(quota, Algorithm::FixedWindow);
            let b = boundary(&bucket);
            let (mut adm, e) = drive(bucket, arr).await;
            adm.push((Duration::ZERO, 1)); // the token `boundary` took
            (adm, e, b)
        });
        let width = Duration::from_millis(100);
        let window = |t: Duration| if t < b { 0 } else { 1 + ((t - b).as_nanos() / width.as_nanos()) as u64 };
        let mut per: std::collections::BTreeMap<u64, u32> = Default::default();
        for (t, c) in &adm {
            *per.entry(window(*t)).or_default() += c;
        }
        for (w, n) in per {
            prop_assert!(n <= limit, "{n} in aligned window {w}");
        }
        prop_assert!(most_in_a_window(&adm, width) <= 2 * limit);
        assert_fifo(&e);
    }

    #[test]
    fn sliding_window_within_its_documented_error(arr in arrivals(), limit in 3u32..8) {
        let quota = Quota::new(limit, Duration::from_millis(100));
        let (adm, e) = run_paused(drive(aligned(quota, Algorithm::SlidingWindow), arr));
        prop_assert!(most_in_a_window(&adm, Duration::from_millis(100)) <= 2 * limit);
        assert_fifo(&e);
    }

    #[test]
    fn sliding_log_is_exact(arr in arrivals(), limit in 3u32..8) {
        let quota = Quota::new(limit, Duration::from_millis(100));
        let (adm, e) = run_paused(drive(aligned(quota, Algorithm::SlidingLog), arr));
        prop_assert!(most_in_a_window(&adm, Duration::from_millis(100)) <= limit);
        assert_fifo(&e);
    }
}

fn all() -> Vec<(&'static str, Algorithm)> {
    vec![
        ("token", Algorithm::TokenBucket),
        ("leaky", Algorithm::leaky_bucket(1000)),
        ("fixed", Algorithm::FixedWindow),
        ("sliding", Algorithm::SlidingWindow),
        ("log", Algorithm::SlidingLog),
    ]
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_pause_holds_everyone_and_restarts_without_a_burst() {
    for (name, algo) in all() {
        let quota = Quota::new(10, Duration::from_secs(1)).burst(10);
        let bucket = aligned(quota, algo);
        let rec = Recorder::new();
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
        let before = rec.entries().len();
        let paused_at = Instant::now() - rec.start();
        bucket.pause(Duration::from_secs(5));
        for t in tasks {
            t.await.unwrap();
        }
        let end = paused_at + Duration::from_secs(5);
        let e = rec.admissions();
        assert!(
            e.iter().skip(before).all(|a| a.0 >= end),
            "{name}: admitted during the pause"
        );
        // No burst at the end of the cooldown: at most one at its first instant.
        let at_end = e.iter().filter(|a| a.0 == end).count();
        assert!(
            at_end <= 1,
            "{name}: {at_end} admitted at the end of the cooldown"
        );
        let first_second = e
            .iter()
            .filter(|a| a.0 >= end && a.0 < end + Duration::from_secs(1))
            .count();
        // One at the end, then one per interval, for every algorithm.
        assert!(
            first_second <= 11,
            "{name}: {first_second} in the first second after the pause"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_lets_one_token_in_when_a_pause_ends_after_earlier_admissions() {
    for (name, algo) in all() {
        let quota = Quota::new(10, Duration::from_secs(1)).burst(10);
        // Windows start now, wherever the wall clock's second boundary is.
        let bucket = Bucket::builder(quota)
            .algorithm(algo)
            .window_origin(Instant::now())
            .build();
        bucket.try_acquire(1).unwrap();
        if name == "sliding" {
            // Take the rest just before a boundary, so that the pause ends in the next
            // window with the previous one's share still counted.
            tokio::time::advance(Duration::from_secs(1) - 50 * MS).await;
        }
        if name != "leaky" {
            bucket.try_acquire(2).unwrap();
        }
        bucket.pause(Duration::from_millis(200));
        tokio::time::advance(Duration::from_millis(200)).await;
        // One token at the end of the cooldown, as from an empty bucket, and no burst.
        assert!(
            bucket.try_acquire(1).is_ok(),
            "{name}: nothing fits at the pause end"
        );
        if name != "fixed" {
            assert!(
                bucket.try_acquire(1).is_err(),
                "{name}: a burst at the pause end"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_weighted_costs_and_exceeds_burst() {
    for (name, algo) in all() {
        let bucket = aligned(Quota::new(4, Duration::from_secs(1)).burst(4), algo);
        assert!(
            matches!(bucket.acquire(5).await, Err(Denied::ExceedsBurst(_))),
            "{name}"
        );
        assert_eq!(bucket.try_acquire(5).unwrap_err().wait(), None, "{name}");
        assert!(
            bucket.try_acquire(5).unwrap_err().exceeds_burst().is_some(),
            "{name}"
        );
        let start = Instant::now();
        bucket.acquire(3).await.unwrap();
        let first = start.elapsed();
        let to_boundary = bucket.snapshot().full_in;
        bucket.acquire(3).await.unwrap();
        let waited = start.elapsed();
        match name {
            // 1 token left, 2 more at 4/s.
            "token" => assert_eq!(waited, Duration::from_millis(500)),
            // Idle: the first cost of 3 goes at once and drains over the next 3 intervals.
            "leaky" => {
                assert_eq!(first, Duration::ZERO);
                assert_eq!(waited, Duration::from_millis(750));
            }
            // The next aligned window (observed on tokio's 1 ms timer: never early).
            "fixed" => assert!(
                waited >= to_boundary && waited < to_boundary + MS,
                "{waited:?} for a boundary in {to_boundary:?}"
            ),
            // Until the first 3 leave the trailing second.
            "log" => assert_eq!(waited, Duration::from_secs(1)),
            // Until the previous window's 3 have faded to 1: 2/3 into the next window.
            _ => assert!(
                waited > Duration::ZERO && waited <= Duration::from_millis(1_667),
                "{name}: {waited:?}"
            ),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_is_cancel_safe() {
    for (name, algo) in all() {
        let quota = Quota::new(10, Duration::from_secs(1)).burst(1);
        let run = |drop_odd: bool| {
            let bucket = aligned(quota, algo);
            async move {
                while bucket.try_acquire(1).is_ok() {}
                let rec = Recorder::new();
                let mut kept = Vec::new();
                let mut gone = Vec::new();
                for id in 0..20 {
                    if !drop_odd && id % 2 == 1 {
                        continue;
                    }
                    let (b, rec) = (bucket.clone(), rec.clone());
                    let t = tokio::spawn(async move {
                        b.acquire(1).await.unwrap();
                        rec.record(1, id);
                    });
                    if id % 2 == 1 {
                        gone.push(t)
                    } else {
                        kept.push(t)
                    }
                }
                settle().await;
                advance(5 * MS).await;
                for t in gone {
                    t.abort();
                }
                for t in kept {
                    t.await.unwrap();
                }
                rec.entries()
                    .into_iter()
                    .map(|e| (e.0, e.2))
                    .collect::<Vec<_>>()
            }
        };
        let with_drops = run(true).await;
        let never_came = run(false).await;
        assert_eq!(with_drops.len(), 10, "{name}");
        // Relative to the first admission: window buckets are aligned to the wall clock.
        let rel = |v: &[(Duration, usize)]| -> Vec<(Duration, usize)> {
            v.iter().map(|(t, id)| (*t - v[0].0, *id)).collect()
        };
        if algo.is_window() {
            assert_eq!(
                with_drops.iter().map(|x| x.1).collect::<Vec<_>>(),
                never_came.iter().map(|x| x.1).collect::<Vec<_>>(),
                "{name}"
            );
            let last = with_drops.last().unwrap().0 - with_drops[0].0;
            assert!(
                last <= Duration::from_secs(1),
                "{name}: kept waiters slowed down: {last:?}"
            );
        } else {
            assert_eq!(
                rel(&with_drops),
                rel(&never_came),
                "{name}: dropped waiters slowed the others"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_refuses_beyond_its_queue() {
    let bucket = aligned(Quota::per_second(10), Algorithm::leaky_bucket(3));
    bucket.try_acquire(1).unwrap();
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let b = bucket.clone();
            tokio::spawn(async move { b.acquire(1).await })
        })
        .collect();
    settle().await;
    assert_eq!(bucket.snapshot().waiting, 3);
    assert!(matches!(
        bucket.acquire(1).await,
        Err(Denied::QueueFull(q)) if q.max_queue() == 3
    ));
    let start = Instant::now();
    for w in waiting {
        w.await.unwrap().unwrap();
    }
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn leaky_bucket_has_no_burst_even_when_idle() {
    let bucket = aligned(Quota::per_second(10).burst(10), Algorithm::leaky_bucket(10));
    advance(Duration::from_secs(60)).await;
    bucket.try_acquire(1).unwrap();
    assert_eq!(
        bucket.try_acquire(1).unwrap_err().wait().unwrap(),
        Duration::from_millis(100)
    );
}

#[tokio::test(start_paused = true)]
async fn fixed_window_boundary_burst_is_twice_the_limit() {
    let bucket = aligned(Quota::per_second(5), Algorithm::FixedWindow);
    let b = boundary(&bucket);
    // Wait until just before the boundary, take the rest of the window, then a whole new
    // window right after it: 10 within a millisecond — the documented boundary burst.
    advance(b - MS).await;
    for _ in 0..4 {
        bucket.try_acquire(1).unwrap();
    }
    assert!(bucket.try_acquire(1).is_err());
    advance(MS).await;
    for _ in 0..5 {
        bucket.try_acquire(1).unwrap();
    }
    assert_eq!(
        bucket.try_acquire(1).unwrap_err().wait().unwrap(),
        Duration::from_secs(1)
    );
}

#[tokio::test(start_paused = true)]
async fn set_quota_with_100_waiters_no_burst_nobody_starves() {
    for (name, algo) in all() {
        let quota = Quota::per_second(10).burst(5);
        let bucket = aligned(quota, algo);
        let rec = Recorder::new();
        let tasks: Vec<_> = (0..105)
            .map(|id| {
                let (b, rec) = (bucket.clone(), rec.clone());
                tokio::spawn(async move {
                    b.acquire(1).await.unwrap();
                    rec.record(1, id);
                })
            })
            .collect();
        settle().await;
        // Sleep (not `advance`): the paused clock then stops at every waiter's instant.
        tokio::time::sleep(Duration::from_millis(1_050)).await;
        settle().await;
        let changed_at = Instant::now() - rec.start();
        let new = Quota::per_second(50).burst(2);
        bucket.set_quota(new);
        assert_eq!(bucket.quota(), new, "{name}");
        for t in tasks {
            t.await.unwrap(); // nobody starves
        }
        let after: Vec<_> = rec
            .admissions()
            .into_iter()
            .filter(|a| a.0 >= changed_at)
            .collect();
        assert!(!after.is_empty(), "{name}");
        match algo {
            Algorithm::TokenBucket | Algorithm::LeakyBucket { .. } => {
                assert_rate_bound(&after, new)
            }
            _ => assert!(
                most_in_a_window(&after, Duration::from_secs(1)) <= 2 * 50,
                "{name}"
            ),
        }
        // No burst at the change: at most what the old bucket had left (nothing: 100 waited).
        let at_change = after.iter().filter(|a| a.0 == changed_at).count();
        assert!(at_change <= 1, "{name}: {at_change} admitted at the change");
        // The new, faster rate is used: 100 waiters at 50/s take about 2 s, not 10.
        let last = after.iter().map(|a| a.0).max().unwrap();
        assert!(
            last < changed_at + Duration::from_secs(3),
            "{name}: {last:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn set_quota_shrinking_the_burst_fails_waiters_that_no_longer_fit() {
    let bucket = Bucket::new(Quota::per_second(10).burst(5));
    bucket.try_acquire(5).unwrap();
    let big = tokio::spawn({
        let b = bucket.clone();
        async move { b.acquire(5).await }
    });
    settle().await;
    bucket.set_quota(Quota::per_second(10).burst(2));
    assert!(matches!(big.await.unwrap(), Err(Denied::ExceedsBurst(_))));
    assert!(bucket.try_acquire(3).unwrap_err().exceeds_burst().is_some());
}
