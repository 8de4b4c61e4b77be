//! `Bucket::charge`: tokens taken on an estimate and settled once the real cost is known.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;
use tower_throttle::{Algorithm, Bucket, Cost, Quota};

const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

fn bucket(quota: Quota, algorithm: Algorithm) -> Bucket {
    // Windows start now: no test depends on where the clock's second falls.
    Bucket::builder(quota)
        .algorithm(algorithm)
        .window_origin(Instant::now())
        .fixed_rate()
        .build()
}

#[tokio::test(start_paused = true)]
async fn an_overestimate_comes_back_and_a_refund_gives_everything_back() {
    for algorithm in ALGORITHMS {
        let tokens = bucket(Quota::per_minute(10_000).burst(10_000), algorithm);
        let charge = tokens.charge(4_000).await.unwrap();
        assert_eq!(charge.estimate(), &Cost::from(4_000));
        assert_eq!(tokens.snapshot().available, 6_000, "{algorithm:?}");
        charge.settle(1_500);
        assert_eq!(tokens.snapshot().available, 8_500, "{algorithm:?}");
        tokens.try_charge(8_500).unwrap().refund();
        assert_eq!(tokens.snapshot().available, 8_500, "{algorithm:?}");
        // Dropped unsettled: the estimate stands.
        drop(tokens.try_charge(500).unwrap());
        assert_eq!(tokens.snapshot().available, 8_000, "{algorithm:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_overrun_is_owed_and_delays_the_next_request() {
    // 10 per second, burst 10: 2 estimated, 12 used.
    let tokens = bucket(Quota::per_second(10).burst(10), Algorithm::TokenBucket);
    tokens.charge(2).await.unwrap().settle(12);
    assert_eq!(tokens.snapshot().available, 0);
    let start = Instant::now();
    tokens.acquire(1).await.unwrap();
    // Two tokens owed beyond the burst, then the one asked for.
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn a_windows_overrun_counts_in_its_window() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingLog] {
        let tokens = bucket(Quota::per_second(10), algorithm);
        tokens.charge(2).await.unwrap().settle(12);
        assert_eq!(tokens.snapshot().available, 0, "{algorithm:?}");
        let start = Instant::now();
        tokens.acquire(1).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(1), "{algorithm:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn debt_is_bounded_whatever_the_usage_reported() {
    let tokens = bucket(Quota::per_second(10).burst(10), Algorithm::TokenBucket);
    for _ in 0..5 {
        tokens.charge(1).await.unwrap().settle(u32::MAX);
    }
    let start = Instant::now();
    tokens.acquire(1).await.unwrap();
    // At most one burst owed beyond an empty bucket: a second to work off, then a token.
    assert_eq!(start.elapsed(), Duration::from_millis(1_100));
}

#[tokio::test(start_paused = true)]
async fn a_refund_serves_the_waiters_in_their_order() {
    let tokens = bucket(Quota::per_second(10).burst(10), Algorithm::TokenBucket);
    let charge = tokens.charge(10).await.unwrap();
    let went = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut waiters = Vec::new();
    for (name, n) in [("a", 3), ("b", 2), ("c", 1)] {
        let (tokens, went) = (tokens.clone(), went.clone());
        waiters.push(tokio::spawn(async move {
            tokens.acquire(n).await.unwrap();
            went.lock().unwrap().push((name, start.elapsed()));
        }));
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(went.lock().unwrap().is_empty());
    // Five of the ten come back: `a` and `b` go at once, `c` when its token comes.
    charge.settle(5);
    for w in waiters {
        w.await.unwrap();
    }
    let went = went.lock().unwrap().clone();
    let ms = Duration::from_millis;
    assert_eq!(went, [("a", ms(10)), ("b", ms(10)), ("c", ms(100))]);
}

#[tokio::test(start_paused = true)]
async fn only_what_has_not_refilled_comes_back() {
    // 1 per second, burst 100: 100 estimated at 0, 40 more admitted at 50 s.
    let tokens = bucket(Quota::per_second(1).burst(100), Algorithm::TokenBucket);
    let charge = tokens.charge(100).await.unwrap();
    tokio::time::advance(Duration::from_secs(50)).await;
    tokens.try_acquire(40).unwrap();
    tokio::time::advance(Duration::from_secs(10)).await;
    charge.settle(0);
    // Had the first cost nothing, the bucket would have been full at 50 s, and would hold
    // 70 at 60 s; the 40 s of refill still ahead of the first admission come back.
    assert_eq!(tokens.snapshot().available, 60);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Charges settled at or under their estimate never leave the bucket holding more than a
    /// bucket that was charged the real costs at the same instants: that bucket admits every
    /// one of them.
    #[test]
    fn settled_charges_never_exceed_the_real_costs(
        ops in proptest::collection::vec((1u32..=6, 0u32..=6, 0u64..400, 0usize..4), 1..60),
        algorithm in proptest::sample::select(ALGORITHMS.to_vec()),
    ) {
        support::run_paused(async {
            let quota = Quota::per_second(10).burst(10);
            let real = bucket(quota, algorithm);
            let exact = bucket(quota, algorithm);
            let mut open: Vec<(tower_throttle::Charge, u32)> = Vec::new();
            for (estimate, used, ms, settle) in ops {
                tokio::time::advance(Duration::from_millis(ms)).await;
                let used = used.min(estimate);
                if let Ok(charge) = real.try_charge(estimate) {
                    prop_assert!(exact.try_acquire(used).is_ok(), "{algorithm:?}");
                    open.push((charge, used));
                }
                // Settle one of the open charges, some of the time.
                if settle < open.len() {
                    let (charge, used) = open.remove(settle);
                    charge.settle(used);
                }
                prop_assert!(
                    real.snapshot().available <= exact.snapshot().available,
                    "{algorithm:?}: {} > {}",
                    real.snapshot().available,
                    exact.snapshot().available
                );
            }
            Ok(())
        })?;
    }
}
