//! Property tests: random arrival schedules and costs never break the rate bound, and waiters
//! are admitted in arrival order.

mod support;

use std::time::Duration;

use proptest::prelude::*;
use support::{assert_rate_bound, Recorder};
use tower_throttle::{Bucket, Quota};

fn run_paused<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_arrivals_keep_the_bound_and_fifo(
        per_ms in 1u32..50,
        burst in 1u32..8,
        arrivals in prop::collection::vec((0u64..40, 1u32..8, any::<bool>()), 1..80),
    ) {
        // Intervals in whole milliseconds so tokio's 1 ms timer cannot blur admission times.
        let quota = Quota::with_period(Duration::from_millis(u64::from(per_ms))).burst(burst);
        let (adm, order) = run_paused(async move {
            let bucket = Bucket::new(quota);
            let rec = Recorder::new();
            let mut tasks = Vec::new();
            for (id, (gap_ms, cost, try_only)) in arrivals.into_iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(gap_ms)).await;
                let cost = cost.min(burst);
                if try_only {
                    if bucket.try_acquire(cost).is_ok() {
                        rec.record(cost, usize::MAX);
                    }
                    continue;
                }
                let (b, rec) = (bucket.clone(), rec.clone());
                tasks.push(tokio::spawn(async move {
                    b.acquire(cost).await.unwrap();
                    rec.record(cost, id);
                }));
                tokio::task::yield_now().await;
            }
            for t in tasks {
                t.await.unwrap();
            }
            (rec.admissions(), rec.entries())
        });
        assert_rate_bound(&adm, quota);
        // FIFO: a waiter that arrived later is never admitted earlier.
        let mut waiters: Vec<_> = order.into_iter().filter(|e| e.2 != usize::MAX).collect();
        waiters.sort_by_key(|e| e.2);
        for w in waiters.windows(2) {
            prop_assert!(w[0].0 <= w[1].0, "waiter {} admitted after waiter {}", w[0].2, w[1].2);
        }
    }

    #[test]
    fn random_cancellations_keep_the_bound_and_lose_nothing(
        n in 2usize..60,
        cancel in prop::collection::vec(any::<bool>(), 60),
    ) {
        let quota = Quota::with_period(Duration::from_millis(10)).burst(1);
        let (adm, kept) = run_paused(async move {
            let bucket = Bucket::new(quota);
            bucket.try_acquire(1).unwrap();
            let rec = Recorder::new();
            let mut kept = Vec::new();
            let mut gone = Vec::new();
            for (id, &cancel) in cancel.iter().enumerate().take(n) {
                let (b, rec) = (bucket.clone(), rec.clone());
                let t = tokio::spawn(async move {
                    b.acquire(1).await.unwrap();
                    rec.record(1, id);
                });
                if cancel { gone.push(t) } else { kept.push(t) }
            }
            tokio::task::yield_now().await;
            for t in gone { t.abort(); }
            let kept_n = kept.len();
            for t in kept { t.await.unwrap(); }
            (rec.admissions(), kept_n)
        });
        prop_assert_eq!(adm.len(), kept);
        assert_rate_bound(&adm, quota);
        // Nothing lost: the kept waiters finish at the full rate, one per interval.
        if kept > 0 {
            let last = adm.iter().map(|a| a.0).max().unwrap();
            prop_assert_eq!(last, Duration::from_millis(10 * kept as u64));
        }
    }
}
