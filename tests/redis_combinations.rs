//! Every feature of the layers on a Redis-backed limit, as in process: all five algorithms,
//! `max_wait` (single bucket and per key), dry run, observers, the fallback service, and the
//! typed answers of the synchronous calls. Two handles on one key stand for two processes
//! (the multi-process cases are in `redis_distributed.rs`).
#![cfg(feature = "redis")]

mod redis_support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use redis_support::{redis_url, unique_prefix};
use tower::{service_fn, Layer, ServiceExt};
use tower_throttle::extract::{HeaderKey, KeyDigest};
use tower_throttle::observe::Observer;
use tower_throttle::redis::{RedisBucket, RedisKeyed};
use tower_throttle::reject::Rejected;
use tower_throttle::{Algorithm, Bucket, KeyedLimit, Quota, RejectLayer};

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::leaky_bucket(16),
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

async fn redis_bucket(prefix: &str, quota: Quota, algorithm: Algorithm) -> RedisBucket {
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(prefix)
        .key("limit")
        .algorithm(algorithm)
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    redis
}

fn ok(
) -> impl tower::Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    service_fn(|req: Request<String>| async move {
        // Tell the test whether the request came through a dry run's refusal.
        let body = if req.extensions().get::<Rejected>().is_some() {
            "dry-run"
        } else {
            "ok"
        };
        Ok::<_, Infallible>(Response::new(body.to_owned()))
    })
}

/// Send `n` requests alternately through `servers`; the statuses.
async fn send<S, B>(servers: &[S], n: usize) -> Vec<StatusCode>
where
    S: tower::Service<Request<String>, Response = Response<B>, Error = Infallible> + Clone,
{
    let mut out = Vec::new();
    for i in 0..n {
        let svc = servers[i % servers.len()].clone();
        out.push(
            svc.oneshot(Request::new(String::new()))
                .await
                .unwrap()
                .status(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_rejects_on_redis_as_in_process() {
    // An hour: no window boundary within the test (in all likelihood).
    let quota = Quota::per_hour(3).burst(3);
    for algorithm in ALGORITHMS {
        let prefix = unique_prefix("algorithms");
        let a = redis_bucket(&prefix, quota, algorithm).await;
        let b = redis_bucket(&prefix, quota, algorithm).await;
        let on_redis = [
            RejectLayer::new(a).layer(ok()),
            RejectLayer::new(b).layer(ok()),
        ];
        let local = Bucket::builder(quota).algorithm(algorithm).build();
        let in_process = [RejectLayer::new(local).layer(ok())];
        let (remote, local) = (send(&on_redis, 8).await, send(&in_process, 8).await);
        assert_eq!(remote, local, "{algorithm:?}");
        assert!(
            remote.contains(&StatusCode::TOO_MANY_REQUESTS),
            "{algorithm:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_wait_on_a_redis_bucket_waits_its_turn_or_refuses() {
    let prefix = unique_prefix("max-wait");
    let quota = Quota::per_second(5).burst(1);
    let waiting = RejectLayer::new(redis_bucket(&prefix, quota, Algorithm::TokenBucket).await)
        .max_wait(Duration::from_millis(500))
        .layer(ok());
    let impatient = RejectLayer::new(redis_bucket(&prefix, quota, Algorithm::TokenBucket).await)
        .max_wait(Duration::from_millis(20))
        .layer(ok());
    let req = || Request::new(String::new());
    assert_eq!(waiting.clone().oneshot(req()).await.unwrap().status(), 200);
    // The next token is 200 ms away in Redis: within 500 ms, so this one waits for it.
    let t0 = Instant::now();
    assert_eq!(waiting.clone().oneshot(req()).await.unwrap().status(), 200);
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    // The other handle, right after: 200 ms away, more than its 20 ms.
    let resp = impatient.oneshot(req()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_wait_per_key_on_redis_waits_its_turn() {
    let prefix = unique_prefix("max-wait-key");
    let quota = Quota::per_second(5).burst(1);
    let per_key = RedisKeyed::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(&prefix)
        .build()
        .await
        .unwrap();
    let svc = RejectLayer::keyed(
        KeyedLimit::<KeyDigest>::from(per_key),
        HeaderKey::x_api_key(),
    )
    .max_wait(Duration::from_millis(500))
    .layer(ok());
    let req = || {
        Request::builder()
            .header("x-api-key", "k")
            .body(String::new())
            .unwrap()
    };
    assert_eq!(svc.clone().oneshot(req()).await.unwrap().status(), 200);
    let t0 = Instant::now();
    assert_eq!(svc.oneshot(req()).await.unwrap().status(), 200);
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t0.elapsed()
    );
}

#[derive(Debug, Default)]
struct Refusals {
    dry: AtomicU32,
    real: AtomicU32,
}

impl Observer for Refusals {
    fn refused(&self, _: u32, _: Duration, dry_run: bool) {
        let n = if dry_run { &self.dry } else { &self.real };
        n.fetch_add(1, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_observer_and_fallback_on_redis() {
    let quota = Quota::per_hour(1).burst(1);
    let req = || Request::new(String::new());

    // Dry run: both go through; the second carries the refusal, and is reported as a dry run.
    let prefix = unique_prefix("dry-run");
    let seen = Arc::new(Refusals::default());
    let dry = RejectLayer::new(redis_bucket(&prefix, quota, Algorithm::TokenBucket).await)
        .dry_run(true)
        .observer(seen.clone())
        .layer(ok());
    let first = dry.clone().oneshot(req()).await.unwrap();
    let second = dry.oneshot(req()).await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(
        (first.body().as_str(), second.body().as_str()),
        ("ok", "dry-run")
    );
    assert_eq!(seen.dry.load(Ordering::Relaxed), 1);

    // Observer, for real: the refusal of the shared limit is reported.
    let prefix = unique_prefix("observer");
    let seen = Arc::new(Refusals::default());
    let observed = RejectLayer::new(redis_bucket(&prefix, quota, Algorithm::SlidingLog).await)
        .observer(seen.clone())
        .layer(ok());
    send(&[observed], 3).await;
    assert_eq!(seen.real.load(Ordering::Relaxed), 2);

    // The fallback service answers what the shared limit refuses.
    let prefix = unique_prefix("fallback");
    let cached = service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new("cached".to_owned()))
    });
    let with_fallback =
        RejectLayer::new(redis_bucket(&prefix, quota, Algorithm::FixedWindow).await)
            .fallback(cached)
            .layer(ok());
    let first = with_fallback.clone().oneshot(req()).await.unwrap();
    let second = with_fallback.oneshot(req()).await.unwrap();
    assert_eq!(
        (first.body().as_str(), second.body().as_str()),
        ("ok", "cached")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_bucket_is_asked_asynchronously() {
    let prefix = unique_prefix("typed");
    let quota = Quota::per_hour(2).burst(2);
    let a = redis_bucket(&prefix, quota, Algorithm::TokenBucket).await;
    let b = redis_bucket(&prefix, quota, Algorithm::TokenBucket).await;
    a.try_acquire(1).await.unwrap();
    b.try_acquire(1).await.unwrap();
    let refused = a.try_acquire(1).await.unwrap_err();
    assert!(
        refused.wait().unwrap() > Duration::from_secs(60),
        "{refused:?}"
    );
    let never = a.try_acquire(3).await.unwrap_err();
    assert!(never.exceeds_burst().is_some(), "{never:?}");
}
