//! Push-back learned together: two "processes" (separate Redis clients on one key) share
//! what one of them learned of a server's rate, against a real Redis server.
#![cfg(feature = "redis")]

#[path = "redis_support/mod.rs"]
mod redis_support;
#[path = "redis_support/windows.rs"]
mod windows;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis_support::{raw, redis_now_us, redis_url, unique_prefix};
use tower_throttle::adaptive::Adaptive;
use tower_throttle::observe::Counters;
use tower_throttle::redis::{RedisBucket, RedisBucketBuilder};
use tower_throttle::{Algorithm, Denied, Quota};
use windows::{admitted_in_one_window, window_start, WIDTH_US};

/// A separate Redis client on the shared key: what another process would build.
async fn process(prefix: &str, quota: Quota) -> (RedisBucket, RedisBucket) {
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(prefix)
        .key("api")
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    (redis.clone(), redis)
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
    a.feedback()
        .sending()
        .pushed_back(Duration::from_secs(5), None);
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
        b.feedback().sending().through(None);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(b.learned_rate(), Some(50.0));
    // The same curve from the same instant: the same rate (the cooldown has not ended).
    assert_eq!(b.rate(), 48.0);
    assert_eq!(b.quota(), quota);
}

/// Sends requests that go through until `done`, at most 3 s (a process asks what the others
/// learned at most every 250 ms, while its requests succeed).
async fn succeed_until(bucket: &RedisBucket, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        bucket.feedback().sending().through(None);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_learned_rate_is_ignored_and_reported() {
    let prefix = unique_prefix("pushback-poison");
    let quota = Quota::per_second(100).burst(1);
    let counters = Arc::new(Counters::default());
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(&prefix)
        .key("api")
        .observer(counters.clone())
        .build()
        .await
        .unwrap();
    let (redis_a, a) = process(&prefix, quota).await;
    let b = redis.clone();
    let conn = raw(&redis_url()).await;
    let unix_ms = |ahead: Duration| {
        (SystemTime::now() + ahead)
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    let poison = |value: String| {
        let mut conn = conn.clone();
        let key = redis.learned_key();
        async move {
            let () = redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    let hour = 1.0 / 3600.0;

    // One token an hour, resuming in a century: the resume is beyond any pause.
    let century = Duration::from_secs(100 * 365 * 86_400);
    poison(format!("{hour}:{}", unix_ms(century))).await;
    succeed_until(&b, "the century-long pause was never read", || {
        counters.get().ignored >= 1
    })
    .await;
    // One token an hour, resuming in a second: deeper than one push-back cuts.
    poison(format!("{hour}:{}", unix_ms(Duration::from_secs(1)))).await;
    succeed_until(&b, "the hourly rate was never read", || {
        counters.get().ignored >= 2
    })
    .await;
    assert_eq!(b.learned_rate(), None);
    b.try_acquire(1)
        .await
        .expect("no pause was taken from the poisoned value");

    // Recovery goes on: the ramp reaches the configured rate.
    succeed_until(&b, "the rate never came back", || b.rate() == 100.0).await;
    // A real push-back of another process is still followed.
    a.feedback()
        .sending()
        .pushed_back(Duration::from_secs(5), None);
    assert_eq!(redis_a.learned_key(), redis.learned_key());
    succeed_until(&b, "the real push-back was never learned", || {
        b.learned_rate() == Some(50.0)
    })
    .await;
    assert_eq!(b.rate(), 48.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_bucket_on_redis_searches_below_the_shared_ceiling() {
    let prefix = unique_prefix("pushback-adaptive");
    let quota = Quota::per_second(100).burst(1);
    let redis = RedisBucket::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(&prefix)
        .key("api")
        .adaptive(Adaptive::new().start(Quota::per_second(10)))
        .build()
        .await
        .unwrap();
    let bucket = redis.clone();
    assert_eq!((bucket.rate(), bucket.quota()), (10.0, quota));
    // The shared limit decides at the rate in force: 10/s, one token every 100 ms.
    redis.try_acquire(1).await.unwrap();
    let wait = match redis.try_acquire(1).await {
        Err(Denied::Throttled(t)) => t.wait(),
        other => panic!("{other:?}"),
    };
    assert!(wait > Duration::from_millis(50), "{wait:?}");
}

/// The window algorithms, each of which keeps its width in Redis and lowers its count.
const WINDOWS: [Algorithm; 3] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// 20 per 1 s window, configured.
const COUNT: u32 = 20;

/// The builder of a separate Redis client on the shared key with a window `algorithm`.
fn window_builder(prefix: &str, algorithm: Algorithm) -> RedisBucketBuilder {
    RedisBucket::builder(Quota::new(COUNT, Duration::from_micros(WIDTH_US)))
        .url(redis_url())
        .key_prefix(prefix)
        .key("api")
        .algorithm(algorithm)
        // A loaded machine must not turn a decision into the failure policy's refusal.
        .timeout(Duration::from_secs(2))
}

/// A separate Redis client on the shared key with a window `algorithm`.
async fn window_process(prefix: &str, algorithm: Algorithm) -> (RedisBucket, RedisBucket) {
    let redis = window_builder(prefix, algorithm)
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    (redis.clone(), redis)
}

/// The tokens per window a bucket's rate in force allows: `⌊count × rate / ceiling⌋`, at
/// least 1.
fn per_window(bucket: &RedisBucket) -> u32 {
    let ceiling = bucket.quota().per_second_f64();
    ((f64::from(COUNT) * bucket.rate() / ceiling + 1e-9).floor() as u32).max(1)
}

/// How many single tokens `redis` gets admitted in one quiet window of the Redis clock
/// ([`admitted_in_one_window`]).
async fn in_one_window(
    redis: &RedisBucket,
    conn: &mut MultiplexedConnection,
    after: &mut u64,
) -> u32 {
    admitted_in_one_window(|| redis.try_acquire(1), conn, after, COUNT).await
}

/// Every window algorithm on Redis decides at the rate a push-back lowered it to — in the
/// process that was pushed back and in another that learned it through `<key>:rate` — and
/// rises with the rate again; a request above the lowered count still goes.
async fn a_window_on_redis_follows_the_learned_rate(algorithm: Algorithm) {
    let prefix = unique_prefix(&format!("pushback-{algorithm:?}"));
    let (redis_a, a) = window_process(&prefix, algorithm).await;
    let (redis_b, b) = window_process(&prefix, algorithm).await;
    // A is pushed back at once (no second of its own traffic measured yet): half the
    // configured rate is the guess, 96 % of it the rate in force.
    let cooldown = Duration::from_millis(100);
    a.feedback().sending().pushed_back(cooldown, None);
    let lowered = per_window(&a);
    assert!(
        lowered < COUNT / 2,
        "{algorithm:?}: {} → {lowered}",
        a.rate()
    );
    let mut conn = raw(&redis_url()).await;
    // The pause, and the ramp after it, are over two windows later.
    let mut after = redis_now_us(&mut conn).await / WIDTH_US + 3;

    // B has not learned it yet: a window admits the configured count.
    assert_eq!(
        in_one_window(&redis_b, &mut conn, &mut after).await,
        COUNT,
        "{algorithm:?}: B before it learned"
    );
    assert_eq!(
        in_one_window(&redis_a, &mut conn, &mut after).await,
        lowered,
        "{algorithm:?}: A at {}/s",
        a.rate()
    );

    // B learns it while its requests succeed, and decides in Redis at it too.
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.learned_rate().is_none() {
        assert!(
            Instant::now() < deadline,
            "{algorithm:?}: process B never learned the rate"
        );
        b.feedback().sending().through(None);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let learned = per_window(&b);
    assert!(learned < COUNT / 2, "{algorithm:?}: B at {}/s", b.rate());
    assert_eq!(
        in_one_window(&redis_b, &mut conn, &mut after).await,
        learned,
        "{algorithm:?}: B at {}/s",
        b.rate()
    );

    // A request of more tokens than the lowered count, within the configured one, goes
    // (when the window holds nothing else), behind a window filled to the lowered count.
    let index = window_start(&mut conn, after).await;
    for _ in 0..lowered {
        redis_a.try_acquire(1).await.unwrap();
    }
    let big = lowered + 5;
    tokio::time::timeout(Duration::from_secs(10), a.acquire(big))
        .await
        .unwrap_or_else(|_| panic!("{algorithm:?}: {big} tokens waited forever"))
        .unwrap_or_else(|e| panic!("{algorithm:?}: {big} tokens: {e}"));
    after = after.max(index) + 4;

    // The rate rises with A's successes after the cooldown (the guess holds for 100 of
    // them); Redis follows.
    for _ in 0..130 {
        a.feedback().sending().through(None);
    }
    let raised = per_window(&a);
    assert!(
        raised > lowered && raised < COUNT,
        "{algorithm:?}: {} → {raised}",
        a.rate()
    );
    assert_eq!(
        in_one_window(&redis_a, &mut conn, &mut after).await,
        raised,
        "{algorithm:?}: A raised to {}/s",
        a.rate()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_on_redis_follows_the_learned_rate() {
    a_window_on_redis_follows_the_learned_rate(Algorithm::FixedWindow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_window_on_redis_follows_the_learned_rate() {
    a_window_on_redis_follows_the_learned_rate(Algorithm::SlidingWindow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_log_on_redis_follows_the_learned_rate() {
    a_window_on_redis_follows_the_learned_rate(Algorithm::SlidingLog).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_window_on_redis_starts_at_its_start_rate() {
    for algorithm in WINDOWS {
        let prefix = unique_prefix(&format!("pushback-start-{algorithm:?}"));
        // A search from 5 of the 20 per second configured: 5 per window.
        let redis = window_builder(&prefix, algorithm)
            .adaptive(Adaptive::new().start(Quota::per_second(5)))
            .build()
            .await
            .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
        let bucket = redis.clone();
        assert_eq!(per_window(&bucket), 5, "{algorithm:?}");
        let mut conn = raw(&redis_url()).await;
        let mut after = redis_now_us(&mut conn).await / WIDTH_US + 1;
        assert_eq!(
            in_one_window(&redis, &mut conn, &mut after).await,
            5,
            "{algorithm:?}"
        );
    }
}

/// Two processes on one Redis limit against a server whose quota runs out for 3 s (every
/// request answered with `429` and `Retry-After: 1`): the first refusal lowers the rate once,
/// and the first request after each pause, sent alone after a whole second of silence,
/// holds it, in either process. Read as push-backs, they lowered it again (learned 4.1 to
/// 16.8/s). The first guess is half the shared rate: each process's own gaps, or its own
/// successes, are only its share of it (they guessed 8.6 or 15.5/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_lowers_the_shared_rate_once_on_redis() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use tower::{service_fn, ServiceBuilder, ServiceExt};
    use tower_throttle::{RateLimitLayer, RetryAfterLayer};

    let prefix = unique_prefix("pushback-outage");
    let quota = Quota::per_second(40).burst(1);
    let start = Instant::now();
    let (from, to) = (Duration::from_millis(1_500), Duration::from_millis(4_500));
    let refused = Arc::new(AtomicU64::new(0));
    let server = {
        let refused = refused.clone();
        service_fn(move |_req: http::Request<String>| {
            let refused = refused.clone();
            async move {
                let at = start.elapsed();
                let mut resp = http::Response::new(String::new());
                if at >= from && at < to {
                    refused.fetch_add(1, Ordering::SeqCst);
                    *resp.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                    resp.headers_mut()
                        .insert("retry-after", http::HeaderValue::from_static("1"));
                }
                Ok::<_, std::io::Error>(resp)
            }
        })
    };
    let mut buckets = Vec::new();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (_, bucket) = process(&prefix, quota).await;
        for _ in 0..4 {
            let client = ServiceBuilder::new()
                .layer(
                    RetryAfterLayer::new(bucket.clone())
                        .max_retries(u32::MAX)
                        .budget(None),
                )
                .layer(RateLimitLayer::new(bucket.clone()))
                .service(server.clone());
            workers.push(tokio::spawn(async move {
                while start.elapsed() < Duration::from_millis(6_000) {
                    let resp = client
                        .clone()
                        .oneshot(http::Request::new(String::new()))
                        .await
                        .unwrap();
                    assert_eq!(resp.status(), http::StatusCode::OK);
                }
            }));
        }
        buckets.push(bucket);
    }
    for w in workers {
        w.await.unwrap();
    }
    let learned: Vec<_> = buckets.iter().map(RedisBucket::learned_rate).collect();
    let refused = refused.load(Ordering::SeqCst);
    println!("learned after the outage {learned:?}, {refused} refused");
    for learned in learned {
        // Lowered once: the first refusal is a first push-back at 40/s, whose guess is
        // half of it; none of the others lowered it further.
        let learned = learned.unwrap();
        assert!(learned >= 0.99 * 20.0, "{learned}");
    }
    // One refusal per cooldown across both processes (the pause is shared, and waiters
    // booked before it book again after it): 3 in the 3 s outage. Up to 10: a process that
    // hears of a pause late (a loaded machine) may send one more each time.
    assert!(refused <= 10, "{refused}");
}

/// The Redis builder sets the rate control as the in-process builder does: by default a
/// push-back lowers the rate; `fixed_rate` keeps it; `ramp` starts it at 45 % on the first
/// request sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_builder_sets_the_rate_control_as_the_bucket_builder_does() {
    let prefix = unique_prefix("pushback-modes");
    let quota = Quota::per_second(100).burst(1);
    let built = |name: &'static str| {
        RedisBucket::builder(quota)
            .url(redis_url())
            .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
            .key_prefix(&prefix)
            .key(name)
    };
    let converging = built("converge").build().await.unwrap();
    let fixed = built("fixed").fixed_rate().build().await.unwrap();
    let ramped = built("ramp").ramp().build().await.unwrap();
    for bucket in [&converging, &fixed, &ramped] {
        assert_eq!(bucket.rate(), 100.0);
    }
    for bucket in [&converging, &fixed] {
        bucket
            .feedback()
            .sending()
            .pushed_back(Duration::ZERO, None);
    }
    assert!(converging.rate() < 100.0, "{}", converging.rate());
    assert_eq!(fixed.rate(), 100.0);
    let _sent = ramped.feedback().sending();
    assert_eq!(ramped.rate(), 45.0);
}
