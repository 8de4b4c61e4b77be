//! Property tests of cancellation: random drops never break the rate bound and lose nothing.
//! (Random arrival schedules and costs, per algorithm: `tests/algorithms.rs`.)

mod support;

use std::time::Duration;

use proptest::prelude::*;
use support::{assert_rate_bound, run_paused, Recorder};
use tower_throttle::{Bucket, Quota};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

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
