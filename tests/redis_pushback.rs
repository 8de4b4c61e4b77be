//! Push-back learned together: two "processes" (separate Redis clients on one key) share
//! what one of them learned of a server's rate, against a real Redis server.
#![cfg(feature = "redis")]

#[path = "redis_support/mod.rs"]
mod redis_support;

use std::time::{Duration, Instant};

use redis_support::{raw, redis_url, unique_prefix};
use tower_throttle::adaptive::Adaptive;
use tower_throttle::redis::RedisBucket;
use tower_throttle::{Bucket, Quota};

/// A separate Redis client on the shared key: what another process would build.
async fn process(prefix: &str, quota: Quota) -> (RedisBucket, Bucket) {
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(prefix)
        .key("api")
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    (redis.clone(), Bucket::from(redis))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_back_in_one_process_lowers_the_rate_of_the_others() {
    let prefix = unique_prefix("pushback");
    let quota = Quota::per_second(100).burst(1);
    let (redis_a, a) = process(&prefix, quota).await;
    let (_, b) = process(&prefix, quota).await;
    let mut conn = raw(&redis_url()).await;

    // Process A is refused while sending at 100/s: it takes the server's rate to be half of
    // that, holds just below it, and tells the others.
    a.push_back(Duration::from_secs(5));
    assert_eq!(a.rate(), 48.0);
    assert_eq!(a.learned_rate(), Some(50.0));
    let key = redis_a.learned_key();
    assert!(key.starts_with(&prefix) && key.ends_with(":rate"), "{key}");
    let deadline = Instant::now() + Duration::from_secs(3);
    let stored = loop {
        let v: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        match v {
            Some(v) => break v,
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            None => panic!("nothing written at {key}"),
        }
    };
    assert!(stored.starts_with("50:"), "{stored}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0, "{ttl}");

    // Process B learns it while its requests succeed (it asks at most every 250 ms).
    assert_eq!(b.learned_rate(), None);
    let deadline = Instant::now() + Duration::from_secs(3);
    while b.learned_rate().is_none() {
        assert!(
            Instant::now() < deadline,
            "process B never learned the rate"
        );
        b.record_success();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(b.learned_rate(), Some(50.0));
    // The same curve from the same instant: the same rate (the cooldown has not ended).
    assert_eq!(b.rate(), 48.0);
    assert_eq!(b.quota(), quota);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_bucket_on_redis_searches_below_the_shared_ceiling() {
    let prefix = unique_prefix("pushback-adaptive");
    let quota = Quota::per_second(100).burst(1);
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(&prefix)
        .key("api")
        .build()
        .await
        .unwrap();
    let bucket = redis
        .clone()
        .adaptive(Adaptive::new().start(Quota::per_second(10)));
    assert_eq!((bucket.rate(), bucket.quota()), (10.0, quota));
    // The shared limit decides at the rate in force: 10/s, one token every 100 ms.
    redis.try_acquire(1).await.unwrap();
    let wait = match redis.try_acquire(1).await {
        Err(tower_throttle::Denied::Throttled(t)) => t.wait(),
        other => panic!("{other:?}"),
    };
    assert!(wait > Duration::from_millis(50), "{wait:?}");
}
