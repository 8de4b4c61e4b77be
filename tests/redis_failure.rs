//! The failure policy keeps its word, against a private `redis-server` frozen with SIGSTOP
//! (connections stay open, nothing answers: every call runs into its timeout).
//!
//! - `Closed`: waiting callers — the head of the line and those queued behind it — get a
//!   typed error within the timeout (and less than a second timeout more), through
//!   `Bucket::acquire` and through the waiting layer; never a polling loop.
//! - One transient failure fails one call: the next decision is Redis's again.
//! - A run of failures does open the breaker: calls skip Redis until the probe.
#![cfg(feature = "redis")]

mod redis_support;

use std::convert::Infallible;
use std::time::Duration;

use redis_support::{free_port, PrivateRedis};
use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisErrorKind};
use tower_throttle::{BoxError, Denied, Quota, RateLimitLayer};

const TIMEOUT: Duration = Duration::from_millis(500);
/// Scheduling slack on a loaded machine: generous, but short of a second timeout (a caller
/// in line asking Redis again after the head of the line failed).
const SLACK: Duration = Duration::from_millis(400);

async fn bucket(url: &str, key: &str, probe: Duration) -> RedisBucket {
    RedisBucket::builder(Quota::per_second(10).burst(5))
        .url(url)
        .key(key)
        .failure_policy(FailurePolicy::Closed)
        .timeout(TIMEOUT)
        .probe_interval(probe)
        .build()
        .await
        .expect("connect to the private redis-server")
}

fn unavailable(e: &BoxError) -> bool {
    matches!(e.downcast_ref::<Denied>(), Some(Denied::Backend(_)))
}

/// The kind of the Redis failure behind a refusal.
fn redis_kind(r: Result<(), Denied>) -> RedisErrorKind {
    match r {
        Err(Denied::Backend(e)) => e.redis().expect("a Redis error").kind(),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_fails_waiting_callers_within_the_timeout() {
    let server = PrivateRedis::start(free_port());
    let redis = bucket(&server.url(), "closed", Duration::from_secs(5)).await;
    let shared = redis.clone();
    shared.acquire(1).await.unwrap(); // healthy: Redis admits

    server.signal("STOP");
    let t0 = Instant::now();
    // Three callers at once: one asks Redis, two queue behind it.
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let b = shared.clone();
            tokio::spawn(async move {
                let r = b.acquire(1).await;
                (r, t0.elapsed())
            })
        })
        .collect();
    for c in callers {
        let (r, took) = c.await.unwrap();
        assert!(matches!(r, Err(Denied::Backend(_))), "{r:?}");
        assert!(took <= TIMEOUT + SLACK, "answered after {took:?}");
    }

    // The waiting layer fails the call with the typed error (the service stays usable).
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(shared.clone()))
        .service(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let t1 = Instant::now();
    let err = svc.ready().await.unwrap().call(()).await.unwrap_err();
    assert!(unavailable(&err), "{err}");
    assert!(t1.elapsed() <= TIMEOUT + SLACK, "{:?}", t1.elapsed());
    // So does a weighted one.
    let mut weighted = ServiceBuilder::new()
        .layer(RateLimitLayer::new(shared.clone()).cost(|_: &()| 2))
        .service(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let t2 = Instant::now();
    let err = weighted.ready().await.unwrap().call(()).await.unwrap_err();
    assert!(unavailable(&err), "{err}");
    assert!(t2.elapsed() <= TIMEOUT + SLACK, "{:?}", t2.elapsed());

    server.signal("CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transient_failure_fails_one_call_only() {
    let server = PrivateRedis::start(free_port());
    // A long probe interval: were the breaker opened, the next call would be refused.
    let redis = bucket(&server.url(), "transient", Duration::from_secs(30)).await;
    redis.try_acquire(1).await.unwrap();

    server.signal("STOP");
    assert_eq!(
        redis_kind(redis.try_acquire(1).await),
        RedisErrorKind::Timeout
    );
    server.signal("CONT");

    let before = redis.stats();
    redis.try_acquire(1).await.expect("Redis decides again");
    let after = redis.stats();
    assert_eq!(after.round_trips, before.round_trips + 1, "{after:?}");
    assert_eq!(after.fallbacks, before.fallbacks, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_failures_skips_redis_until_the_probe() {
    let server = PrivateRedis::start(free_port());
    let probe = Duration::from_millis(600);
    let redis = bucket(&server.url(), "run", probe).await;
    redis.try_acquire(1).await.unwrap();

    server.signal("STOP");
    for _ in 0..3 {
        assert!(matches!(
            redis.try_acquire(1).await,
            Err(Denied::Backend(_))
        ));
    }
    let trips = redis.stats().round_trips;
    let t0 = Instant::now();
    assert_eq!(
        redis_kind(redis.try_acquire(1).await),
        RedisErrorKind::Unavailable
    );
    // (No timeout waited for: well within half of one, however slow the machine.)
    assert!(t0.elapsed() < TIMEOUT / 2, "answered at once");
    assert_eq!(redis.stats().round_trips, trips, "Redis skipped");
    server.signal("CONT");

    // After the probe interval, one call probes Redis, and decisions are Redis's again.
    tokio::time::sleep(probe).await;
    redis.try_acquire(1).await.expect("the probe reaches Redis");
    redis.try_acquire(1).await.expect("Redis decides");
}

/// The local fallback follows the rate the bucket learned, not only the configured one: an
/// adaptive bucket searching from 1 per second under a ceiling of 100 falls back, while
/// Redis is unreachable, at 1 per second.
#[tokio::test]
async fn the_local_fallback_follows_the_learned_rate() {
    let port = free_port(); // nothing listens there
    let redis = RedisBucket::builder(Quota::per_second(100).burst(1))
        .url(format!("redis://127.0.0.1:{port}"))
        .key("k")
        .connect_lazily()
        .timeout(Duration::from_millis(50))
        .failure_policy(FailurePolicy::Local { fraction: 1.0 })
        .adaptive(tower_throttle::adaptive::Adaptive::new())
        .build()
        .await
        .unwrap();
    let bucket = redis.clone();
    assert_eq!(bucket.rate(), 1.0);
    bucket.try_acquire(1).await.unwrap();
    let wait = match bucket.try_acquire(1).await {
        Err(Denied::Throttled(t)) => t.wait(),
        other => panic!("expected a throttled answer, got {other:?}"),
    };
    // At the ceiling the next token would be 10 ms away.
    assert!(wait > Duration::from_millis(500), "{wait:?}");
    assert_eq!(redis.stats().fallbacks, 2);
}
