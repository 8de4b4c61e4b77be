//! The names kept as deprecated aliases still compile and mean what they meant.
#![allow(deprecated)]

use std::time::Duration;

use tower_throttle::{AcquireError, Algorithm, Bucket, Denied, Quota};

#[tokio::test(start_paused = true)]
async fn acquire_error_is_denied() {
    let bucket = Bucket::new(Quota::per_second(10).burst(5));
    let e: AcquireError = bucket.acquire(6).await.unwrap_err();
    assert!(matches!(e, AcquireError::ExceedsBurst(x) if x.burst() == 5));
    bucket.try_acquire(5).unwrap();
    let Err(Denied::Throttled(t)) = bucket.try_acquire(1) else {
        panic!("expected a wait");
    };
    assert!(!t.exceeds_burst(), "a wait is never 'never'");
    assert_eq!(t.wait(), Duration::from_millis(100));
}

#[test]
fn the_leaky_bucket_field_still_builds_and_matches() {
    let old = Algorithm::LeakyBucket { max_queue: 3 };
    assert_eq!(old, Algorithm::leaky_bucket(3));
    let Algorithm::LeakyBucket { max_queue } = old else {
        panic!("a leaky bucket");
    };
    assert_eq!(max_queue, 3);
    assert_eq!(old.max_queue(), Some(3));
}
