//! Plans whose quotas count different resources: requests and tokens per minute in one
//! limit, decided together.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower_throttle::{Algorithm, Bucket, Cost, Denied, Plan, Quota, Resource};

/// The algorithms with a burst (a leaky bucket spaces every request).
const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// 2 requests per second (burst 2) and 100 tokens per second (burst 100), the tokens'
/// quota on `tokens`.
fn limit(tokens: Algorithm) -> Bucket {
    let plan = Plan::new(Quota::per_second(2).burst(2))
        .and(Quota::per_second(100).burst(100))
        .counting(Resource::TOKENS)
        .algorithm(tokens);
    // Windows start now: no test depends on where the clock's second falls.
    Bucket::builder(plan)
        .window_origin(Instant::now())
        .fixed_rate()
        .build()
}

fn tokens(n: u32) -> Cost {
    Cost::new().and(Resource::TOKENS, n)
}

#[tokio::test(start_paused = true)]
async fn a_request_refused_for_tokens_charges_no_request_and_the_reverse() {
    for algorithm in ALGORITHMS {
        let limit = limit(algorithm);
        drop(limit.try_charge(tokens(80)).unwrap());
        // 20 tokens left: refused, and no request is charged for it...
        assert!(limit.try_charge(tokens(30)).is_err(), "{algorithm:?}");
        // ... so the second request of the burst is still there.
        let second = limit.try_charge(tokens(20));
        assert!(
            second.is_ok(),
            "{algorithm:?}: the second request: {second:?}"
        );
        // No request left: refused, whatever its tokens.
        assert!(limit.try_charge(tokens(0)).is_err(), "{algorithm:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_wait_is_the_longest_and_a_refusal_for_requests_charges_no_token() {
    let limit = limit(Algorithm::TokenBucket);
    drop(limit.try_charge(tokens(50)).unwrap());
    drop(limit.try_charge(tokens(50)).unwrap());
    // Requests back in 500 ms, 5 tokens in 50 ms: 500 ms.
    let refused = limit.try_charge(tokens(5)).unwrap_err();
    assert_eq!(refused.wait(), Some(Duration::from_millis(500)));
    tokio::time::advance(Duration::from_millis(500)).await;
    // The refused request took none of the 50 tokens back by now.
    drop(limit.try_charge(tokens(50)).expect("all 50 tokens"));
}

/// A pause of the tokens holds their quota alone, on every algorithm: requests without
/// tokens go on, a request of tokens waits until the end, waiters included.
#[tokio::test(start_paused = true)]
async fn a_pause_of_one_resource_holds_its_quotas_alone() {
    for algorithm in ALGORITHMS {
        let limit = limit(algorithm);
        limit.pause_resource(&Resource::TOKENS, Duration::from_secs(3));
        let refused = limit.try_charge(tokens(1)).unwrap_err();
        assert_eq!(
            refused.wait(),
            Some(Duration::from_secs(3)),
            "{algorithm:?}"
        );
        assert!(limit.try_charge(tokens(0)).is_ok(), "{algorithm:?}");
        let start = Instant::now();
        let waiter = limit.charge(tokens(1)).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(3), "{algorithm:?}");
        drop(waiter);
        // Requests were never held: their quota refilled meanwhile.
        assert!(limit.try_charge(tokens(0)).is_ok(), "{algorithm:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_cost_of_one_number_counts_requests_only() {
    let limit = limit(Algorithm::TokenBucket);
    drop(limit.try_charge(tokens(100)).unwrap());
    // No tokens left; a request that names none still goes.
    limit.try_acquire(1).unwrap();
    assert!(limit.try_charge(tokens(1)).is_err());
}

#[tokio::test(start_paused = true)]
async fn waiters_wait_for_every_resource_in_their_order() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingLog] {
        let limit = limit(algorithm);
        drop(limit.try_charge(tokens(100)).unwrap());
        let start = Instant::now();
        let went = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // 50 tokens, then a request of none: the second waits behind the first.
        for (name, n) in [("tokens", 50), ("request", 0)] {
            let (limit, went) = (limit.clone(), went.clone());
            tasks.push(tokio::spawn(async move {
                let _charge = limit.charge(tokens(n)).await.unwrap();
                went.lock().unwrap().push((name, start.elapsed()));
            }));
            tokio::task::yield_now().await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        let went = went.lock().unwrap().clone();
        let at = match algorithm {
            Algorithm::TokenBucket => Duration::from_millis(500),
            _ => Duration::from_secs(1),
        };
        assert_eq!(went, [("tokens", at), ("request", at)], "{algorithm:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn settlement_is_per_resource() {
    for algorithm in ALGORITHMS {
        let limit = limit(algorithm);
        // 100 tokens estimated, 30 used: 70 come back, the request stays charged.
        limit.charge(tokens(100)).await.unwrap().settle(tokens(30));
        let back = limit.try_charge(tokens(70));
        assert!(back.is_ok(), "{algorithm:?}: the 70 given back: {back:?}");
        assert!(
            limit.try_charge(tokens(0)).is_err(),
            "{algorithm:?}: both requests used"
        );
    }
    let limit = limit(Algorithm::TokenBucket);
    // 10 estimated, 60 used: 50 owed, so 50 more are 1 s away, not 500 ms.
    limit.charge(tokens(10)).await.unwrap().settle(tokens(60));
    let refused = limit.try_charge(tokens(90)).unwrap_err();
    assert_eq!(refused.wait(), Some(Duration::from_millis(500)));
    // Never sent: every resource back.
    let charge = limit.try_charge(tokens(40)).unwrap();
    charge.refund();
    drop(limit.try_charge(tokens(40)).expect("the refund"));
}

#[tokio::test(start_paused = true)]
async fn a_cost_larger_than_its_quota_never_fits() {
    let limit = limit(Algorithm::TokenBucket);
    match limit.try_charge(tokens(101)) {
        Err(Denied::ExceedsBurst(e)) => assert_eq!((e.requested(), e.burst()), (101, 100)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        limit.charge(tokens(101)).await,
        Err(Denied::ExceedsBurst(_))
    ));
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_refuses_a_plan_that_counts_other_resources() {
    use tower_throttle::redis::{RedisErrorKind, RedisKeyed};
    let plan = Plan::new(Quota::per_second(2))
        .and(Quota::per_second(100))
        .counting(Resource::TOKENS);
    let built = RedisKeyed::builder(plan)
        .key_prefix("resources-test")
        .connect_lazily()
        .build()
        .await;
    assert_eq!(built.unwrap_err().kind(), RedisErrorKind::Config);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Charges of requests and tokens settled at or under their estimate: a limit charged
    /// the real costs at the same instants admits every request the settled one admits.
    #[test]
    fn settled_charges_never_admit_more_than_the_real_costs(
        ops in proptest::collection::vec((0u32..=60, 0u32..=60, 0u64..400, 0usize..4), 1..60),
        algorithm in proptest::sample::select(ALGORITHMS.to_vec()),
    ) {
        support::run_paused(async {
            let (real, exact) = (limit(algorithm), limit(algorithm));
            let mut open = Vec::new();
            for (estimate, used, ms, settle) in ops {
                tokio::time::advance(Duration::from_millis(ms)).await;
                let used = used.min(estimate);
                if let Ok(charge) = real.try_charge(tokens(estimate)) {
                    let fits = exact.try_charge(tokens(used));
                    proptest::prop_assert!(fits.is_ok(), "{algorithm:?}: {fits:?}");
                    open.push((charge, used));
                }
                if settle < open.len() {
                    let (charge, used) = open.remove(settle);
                    charge.settle(tokens(used));
                }
            }
            Ok(())
        })?;
    }
}
