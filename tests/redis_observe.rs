//! An observer on a `RedisBucket` sees every decision of every path (the waiting
//! layer, `RedisBucket::acquire`, `RedisBucket::try_acquire`, the rejecting layer), as it does
//! in process, against a real Redis server.
#![cfg(feature = "redis")]

mod redis_support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use redis_support::{redis_url, unique_prefix};
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_throttle::observe::{Counters, Counts};
use tower_throttle::redis::RedisBucket;
use tower_throttle::{Algorithm, Quota, RateLimitLayer, RejectLayer};

async fn observed(tag: &str, quota: Quota, algorithm: Algorithm) -> (RedisBucket, Arc<Counters>) {
    let (bucket, counters, _) = observed_redis(tag, quota, algorithm).await;
    (bucket, counters)
}

/// As `observed`, with the Redis bucket itself (whose own calls are not reported).
async fn observed_redis(
    tag: &str,
    quota: Quota,
    algorithm: Algorithm,
) -> (RedisBucket, Arc<Counters>, RedisBucket) {
    let counters = Arc::new(Counters::default());
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(unique_prefix(tag))
        .key("api")
        .algorithm(algorithm)
        .timeout(Duration::from_secs(1))
        .observer(counters.clone())
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    (redis.clone(), counters, redis)
}

/// Two of the four admissions wait about 100 ms each (10/s, burst 2): the total is bounded
/// from both sides, with room for a loaded machine above.
fn assert_two_waits_of_a_tenth(seen: &Counts, elapsed: Duration) {
    assert_eq!((seen.admitted, seen.delayed), (4, 2), "{seen:?}");
    assert_eq!((seen.refused, seen.paused), (0, 0), "{seen:?}");
    assert!(
        seen.waited >= Duration::from_millis(150) && seen.waited <= elapsed,
        "waited {:?} of {elapsed:?}",
        seen.waited
    );
    // The last admission's booked instant left the bucket empty.
    assert_eq!(seen.tokens, 0, "{seen:?}");
}

#[tokio::test]
async fn the_waiting_layer_reports_admissions_with_their_waits() {
    let (bucket, counters) = observed(
        "observe-layer",
        Quota::per_second(10).burst(2),
        Algorithm::TokenBucket,
    )
    .await;
    let mut svc =
        RateLimitLayer::new(bucket).layer(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let start = Instant::now();
    for _ in 0..4 {
        svc.ready().await.unwrap().call(()).await.unwrap();
    }
    assert_two_waits_of_a_tenth(&counters.get(), start.elapsed());
}

#[tokio::test]
async fn bucket_acquire_reports_admissions_with_their_waits() {
    let (bucket, counters) = observed(
        "observe-acquire",
        Quota::per_second(10).burst(2),
        Algorithm::leaky_bucket(16),
    )
    .await;
    // The leaky bucket spaces every request: only the first goes at once.
    let start = Instant::now();
    for _ in 0..3 {
        bucket.acquire(1).await.unwrap();
    }
    let seen = counters.get();
    assert_eq!((seen.admitted, seen.delayed), (3, 2), "{seen:?}");
    assert!(
        seen.waited >= Duration::from_millis(150) && seen.waited <= start.elapsed(),
        "{seen:?}"
    );
    assert_eq!(seen.tokens, 0, "{seen:?}");
    let (bucket, counters) = observed(
        "observe-acquire-tb",
        Quota::per_second(10).burst(2),
        Algorithm::TokenBucket,
    )
    .await;
    let start = Instant::now();
    for _ in 0..4 {
        bucket.acquire(1).await.unwrap();
    }
    assert_two_waits_of_a_tenth(&counters.get(), start.elapsed());
}

#[tokio::test]
async fn try_acquire_reports_admissions_refusals_and_token_levels() {
    let (bucket, counters) = observed(
        "observe-try",
        Quota::per_hour(2).burst(2),
        Algorithm::TokenBucket,
    )
    .await;
    bucket.try_acquire(1).await.unwrap();
    bucket.try_acquire(1).await.unwrap();
    let wait = bucket.try_acquire(1).await.unwrap_err().wait().unwrap();
    let seen = counters.get();
    assert_eq!(
        (seen.admitted, seen.delayed, seen.refused, seen.waited),
        (2, 0, 1, Duration::ZERO),
        "{seen:?}"
    );
    assert_eq!(seen.tokens, 0, "the refusal reports the empty bucket");
    assert!(wait > Duration::from_secs(1700), "{wait:?}");
    bucket.pause(Duration::from_secs(5)).await.unwrap();
    assert_eq!(counters.get().paused, 1);
}

#[tokio::test]
async fn the_rejecting_layer_reports_to_the_buckets_observer() {
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let (bucket, counters) =
            observed("observe-reject", Quota::per_hour(1).burst(1), algorithm).await;
        let server =
            RejectLayer::new(bucket.clone()).layer(service_fn(|_: Request<String>| async {
                Ok::<_, Infallible>(Response::new(String::new()))
            }));
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let resp = server
                .clone()
                .oneshot(Request::new(String::new()))
                .await
                .unwrap();
            statuses.push(resp.status());
        }
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::TOO_MANY_REQUESTS
            ],
            "{algorithm:?}"
        );
        let seen = counters.get();
        assert_eq!(
            (seen.admitted, seen.refused),
            (1, 2),
            "{algorithm:?}: {seen:?}"
        );
        bucket.pause(Duration::from_secs(1)).await.unwrap();
        assert_eq!(counters.get().paused, 1, "{algorithm:?}");
    }
}

#[tokio::test]
async fn a_window_on_redis_reports_its_waits_through_acquire() {
    // After a pause a window restarts on its ramp: one token when the pause ends, then one
    // per interval (100 ms): both admissions wait, about 300 ms and 100 ms.
    let (bucket, counters, redis) = observed_redis(
        "observe-window",
        Quota::per_second(10),
        Algorithm::FixedWindow,
    )
    .await;
    redis.pause(Duration::from_millis(300)).await.unwrap();
    let start = Instant::now();
    for _ in 0..2 {
        bucket.acquire(1).await.unwrap();
    }
    let seen = counters.get();
    // The pause is the handle's own: reported too.
    assert_eq!(
        (seen.admitted, seen.delayed, seen.paused),
        (2, 2, 1),
        "{seen:?}"
    );
    assert!(
        seen.waited >= Duration::from_millis(300) && seen.waited <= start.elapsed(),
        "{seen:?}"
    );
}

#[tokio::test]
async fn the_rejecting_layers_bounded_wait_reports_the_time_waited() {
    // 10/s, burst 1: the second request waits about 100 ms for its turn, within max_wait.
    let (bucket, counters) = observed(
        "observe-max-wait",
        Quota::per_second(10).burst(1),
        Algorithm::TokenBucket,
    )
    .await;
    let server = RejectLayer::new(bucket)
        .max_wait(Duration::from_secs(1))
        .layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let start = Instant::now();
    for _ in 0..2 {
        let resp = server
            .clone()
            .oneshot(Request::new(String::new()))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let seen = counters.get();
    assert_eq!(
        (seen.admitted, seen.delayed, seen.refused),
        (2, 1, 0),
        "{seen:?}"
    );
    assert!(
        seen.waited >= Duration::from_millis(50) && seen.waited <= start.elapsed(),
        "{seen:?}"
    );
}
