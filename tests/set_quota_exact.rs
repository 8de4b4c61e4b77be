//! `set_quota` keeps the fractional progress of a token bucket exactly, as Go's
//! `x/time/rate` does across `SetLimit` and `SetBurst`.

use std::time::Duration;

use tokio::time::advance;
use tower_throttle::{Bucket, Quota};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn re_setting_the_same_quota_keeps_the_next_token_where_it_was() {
    let quota = Quota::per_second(5);
    let bucket = Bucket::new(quota);
    bucket.try_acquire(5).unwrap();
    advance(100 * MS).await;
    bucket.set_quota(quota);
    // Half a token had accrued: the next one is still due at 200 ms, not 300 ms.
    assert_eq!(bucket.snapshot().next_token_in, 100 * MS);
    advance(100 * MS - Duration::from_nanos(1)).await;
    assert!(bucket.try_acquire(1).is_err());
    advance(Duration::from_nanos(1)).await;
    assert!(bucket.try_acquire(1).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_new_rate_carries_the_fraction_over() {
    let bucket = Bucket::new(Quota::per_second(5));
    bucket.try_acquire(5).unwrap();
    advance(100 * MS).await;
    // Half a token at 5/s is half a token at 10/s: 50 ms of the new interval to go.
    bucket.set_quota(Quota::per_second(10).burst(5));
    assert_eq!(bucket.snapshot().next_token_in, 50 * MS);
}

/// Go: `SetBurst` keeps the tokens there are (no gift when the burst grows, capped when it
/// shrinks); they refill up to the new burst at the rate.
#[tokio::test(start_paused = true)]
async fn a_burst_change_keeps_the_tokens_as_go_does() {
    // Growing: 1 token accrued of 5 stays 1 under a burst of 10, then refills to 10.
    let bucket = Bucket::new(Quota::per_second(10).burst(5));
    bucket.try_acquire(5).unwrap();
    advance(100 * MS).await;
    bucket.set_quota(Quota::per_second(10).burst(10));
    let s = bucket.snapshot();
    assert_eq!(s.available, 1);
    assert_eq!(s.full_in, 900 * MS);
    advance(900 * MS - Duration::from_nanos(1)).await;
    assert!(bucket.try_acquire(10).is_err());
    advance(Duration::from_nanos(1)).await;
    bucket.try_acquire(10).unwrap();
    assert!(bucket.try_acquire(1).is_err());

    // Shrinking: a full bucket of 10 holds 3 under a burst of 3.
    let bucket = Bucket::new(Quota::per_second(10).burst(10));
    bucket.set_quota(Quota::per_second(10).burst(3));
    assert_eq!(bucket.snapshot().available, 3);
    bucket.try_acquire(3).unwrap();
    assert_eq!(bucket.try_acquire(1).unwrap_err().wait(), Some(100 * MS));

    // A debt (a pause) is kept too: the first token after it stays where it was.
    let bucket = Bucket::new(Quota::per_second(10).burst(10));
    bucket.pause(Duration::from_millis(350));
    bucket.set_quota(Quota::per_second(10).burst(10));
    assert_eq!(bucket.try_acquire(1).unwrap_err().wait(), Some(350 * MS));
}

#[tokio::test(start_paused = true)]
async fn a_new_rate_during_a_pause_neither_shortens_nor_stretches_it() {
    for per_second in [5, 10, 20] {
        let bucket = Bucket::new(Quota::per_second(10).burst(10));
        bucket.pause(Duration::from_millis(350));
        tokio::time::advance(50 * MS).await;
        bucket.set_quota(Quota::per_second(per_second).burst(10));
        // The pause still ends at 350 ms, from an empty bucket at the new rate.
        assert_eq!(
            bucket.try_acquire(1).unwrap_err().wait(),
            Some(300 * MS),
            "{per_second}/s"
        );
        tokio::time::advance(300 * MS).await;
        bucket.try_acquire(1).unwrap();
        let interval = Duration::from_secs(1) / per_second;
        assert_eq!(
            bucket.try_acquire(1).unwrap_err().wait(),
            Some(interval),
            "{per_second}/s"
        );
    }
}
