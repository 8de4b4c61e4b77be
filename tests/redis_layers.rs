//! The tower layers on a Redis-backed `Bucket`: one limit and one pause across "processes"
//! (separate Redis clients on one key), against a real Redis server.
#![cfg(feature = "redis")]

#[path = "redis_support/mod.rs"]
mod redis_support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use redis_support::{redis_url, unique_prefix};
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_throttle::redis::RedisBucket;
use tower_throttle::reject::ResponseBody;
use tower_throttle::{Bucket, Quota, RateLimitLayer, RejectLayer, RetryAfterLayer};

/// A separate Redis client on the shared key: what another process would build.
async fn process(prefix: &str, quota: Quota) -> RedisBucket {
    redis_process(prefix, quota).await
}

/// [`process`], as the Redis bucket it is made from.
async fn redis_process(prefix: &str, quota: Quota) -> RedisBucket {
    RedisBucket::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(prefix)
        .key("api")
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_layers_of_two_processes_share_one_redis_limit() {
    let prefix = unique_prefix("layers");
    let quota = Quota::per_second(20).burst(5);
    let (a, b) = (process(&prefix, quota).await, process(&prefix, quota).await);
    let start = Instant::now();
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, bucket) in [a, b].into_iter().cycle().take(40).enumerate() {
        let admitted = admitted.clone();
        let mut svc = ServiceBuilder::new()
            .layer(RateLimitLayer::new(bucket))
            .service(service_fn(move |()| {
                admitted.lock().unwrap().push((start.elapsed(), i % 2));
                async { Ok::<_, Infallible>(()) }
            }));
        tasks.push(tokio::spawn(async move {
            loop {
                svc.ready().await.unwrap().call(()).await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for t in &tasks {
        t.abort();
    }
    let admitted = admitted.lock().unwrap().clone();
    let n = admitted
        .iter()
        .filter(|a| a.0 < Duration::from_millis(1_500))
        .count();
    // burst + rate·t = 5 + 30 across both; either process alone could have taken 35.
    assert!(n <= 36, "{n} admitted in 1.5 s across both processes");
    assert!(n >= 28, "only {n} admitted");
    assert!(admitted.iter().any(|a| a.1 == 0) && admitted.iter().any(|a| a.1 == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_seen_by_one_process_holds_the_other() {
    let prefix = unique_prefix("pause");
    let quota = Quota::per_second(100).burst(10);
    let a = redis_process(&prefix, quota).await;
    let key = a.redis_key().to_owned();
    let (a, b) = (a, process(&prefix, quota).await);
    // Process A's server refuses with Retry-After: 2; A returns the 429 (no retries here).
    let api = service_fn(|_req: Request<String>| async {
        let mut resp = Response::new(String::new());
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        resp.headers_mut()
            .insert("retry-after", "2".parse().unwrap());
        Ok::<_, Infallible>(resp)
    });
    let client_a = ServiceBuilder::new()
        .layer(RetryAfterLayer::new(a.clone()).max_retries(0))
        .layer(RateLimitLayer::new(a))
        .service(api);
    // The pause is made after `sent`: it ends 2 s after it, or later.
    let sent = Instant::now();
    let resp = client_a.oneshot(Request::new(String::new())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);

    // Process B never saw the 429. The pause reaches Redis asynchronously: once it is there
    // (the state ends more than a second ahead, which at 100/s only a pause does), B's next
    // request must wait for the end of A's cooldown.
    let mut conn = redis_support::raw(&redis_url()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while redis_support::inspect(&mut conn, &key).await.1 < 1_000_000 {
        assert!(Instant::now() < deadline, "the pause never reached Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut svc_b =
        RateLimitLayer::new(b).layer(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    svc_b.ready().await.unwrap();
    let held = sent.elapsed();
    assert!(
        held >= Duration::from_millis(1_990),
        "process B went after {held:?}, inside A's 2 s cooldown"
    );
    // Held no longer than the cooldown, give or take a slow machine.
    assert!(held < Duration::from_secs(4), "{held:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejecting_layers_of_two_processes_share_one_redis_limit() {
    let prefix = unique_prefix("reject");
    let quota = Quota::per_minute(6).burst(6);
    let (a, b) = (process(&prefix, quota).await, process(&prefix, quota).await);
    let server = |bucket: RedisBucket| {
        RejectLayer::new(bucket).layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }))
    };
    let (server_a, server_b) = (server(a), server(b));
    let mut admitted = 0;
    for i in 0..20 {
        let svc = if i % 2 == 0 { &server_a } else { &server_b };
        let resp = svc
            .clone()
            .oneshot(Request::new(String::new()))
            .await
            .unwrap();
        match resp.status() {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let secs: u64 = resp.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=10).contains(&secs), "Retry-After {secs}");
            }
            other => panic!("unexpected {other}"),
        }
    }
    // 6 per minute in all: each process alone would have admitted 6.
    assert_eq!(admitted, 6);
}

async fn keyed_process(
    prefix: &str,
    quota: Quota,
) -> tower_throttle::KeyedLimit<tower_throttle::extract::KeyDigest> {
    let redis = tower_throttle::redis::RedisKeyed::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(prefix)
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    tower_throttle::KeyedLimit::from(redis)
}

fn keyed_request(key: &str) -> Request<String> {
    Request::builder()
        .header("x-api-key", key)
        .body(String::new())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_rejecting_layers_of_two_processes_share_each_keys_limit() {
    use tower_throttle::extract::HeaderKey;
    let prefix = unique_prefix("keyed-reject");
    let quota = Quota::per_minute(3).burst(3);
    let ok = || {
        service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        })
    };
    let a =
        RejectLayer::keyed(keyed_process(&prefix, quota).await, HeaderKey::x_api_key()).layer(ok());
    let b =
        RejectLayer::keyed(keyed_process(&prefix, quota).await, HeaderKey::x_api_key()).layer(ok());
    for key in ["alice", "bob"] {
        let mut admitted = 0;
        for i in 0..10 {
            let svc = if i % 2 == 0 { &a } else { &b };
            let resp = svc.clone().oneshot(keyed_request(key)).await.unwrap();
            admitted += u32::from(resp.status() == StatusCode::OK);
        }
        // 3 per minute for each key, across both processes; keys do not share.
        assert_eq!(admitted, 3, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_request_takes_its_cost_from_the_keys_redis_limit() {
    use tower_throttle::extract::HeaderKey;
    let prefix = unique_prefix("keyed-cost");
    // A token a second, 20 at once; every request costs 10.
    let quota = Quota::per_minute(60).burst(20);
    let ok = || {
        service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        })
    };
    let a = RejectLayer::keyed(keyed_process(&prefix, quota).await, HeaderKey::x_api_key())
        .cost(|_: &Request<String>| 10)
        .layer(ok());
    let b = RejectLayer::keyed(keyed_process(&prefix, quota).await, HeaderKey::x_api_key())
        .cost(|_: &Request<String>| 10)
        .layer(ok());
    let resp = a.clone().oneshot(keyed_request("alice")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = b.clone().oneshot(keyed_request("alice")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // Two requests of 10 spent the burst of both processes: the third waits for 10 tokens,
    // less what refilled since (a wait for one token would be a second at most).
    let refused = a.clone().oneshot(keyed_request("alice")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait = refused
        .extensions()
        .get::<tower_throttle::reject::Rejected>()
        .and_then(|r| r.wait())
        .unwrap();
    assert!(
        wait > Duration::from_secs(5) && wait <= Duration::from_secs(10),
        "{wait:?}"
    );
    let secs: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((6..=10).contains(&secs), "{secs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_refusal_gives_the_keys_redis_token_back() {
    use tower_throttle::extract::HeaderKey;
    let prefix = unique_prefix("keyed-refund");
    let quota = Quota::per_minute(3).burst(3);
    let ok = || {
        service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        })
    };
    // Process A has a local global ceiling of 2 per minute; process B has none.
    let a = RejectLayer::keyed(keyed_process(&prefix, quota).await, HeaderKey::x_api_key())
        .global(Bucket::new(Quota::per_minute(2).burst(2)))
        .layer(ok());
    let b =
        RejectLayer::keyed(keyed_process(&prefix, quota).await, HeaderKey::x_api_key()).layer(ok());
    for _ in 0..2 {
        let resp = a.clone().oneshot(keyed_request("alice")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    // The key has a token left; A's global ceiling refuses, and gives the key's token back.
    let refused = a.clone().oneshot(keyed_request("alice")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused
            .extensions()
            .get::<tower_throttle::reject::Rejected>()
            .and_then(|r| r.policy()),
        Some("global")
    );
    // The refund reaches Redis asynchronously; then process B still finds alice's last token.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resp = b.clone().oneshot(keyed_request("alice")).await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "the key's token was not given back"
    );
    let resp = b.oneshot(keyed_request("alice")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_refused_backend_answers_429_retry_after_one_second_with_the_denial() {
    use tower_throttle::redis::FailurePolicy;
    use tower_throttle::reject::Rejected;
    use tower_throttle::Denied;

    let prefix = unique_prefix("backend-429");
    let redis = RedisBucket::builder(Quota::per_second(10))
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(&prefix)
        .key("api")
        .failure_policy(FailurePolicy::Closed)
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL");
    // A key of another type: Redis refuses the script, and the policy refuses the request.
    let mut conn = redis_support::raw(&redis_url()).await;
    let _: () = redis::cmd("RPUSH")
        .arg(redis.redis_key())
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let svc = RejectLayer::new(redis).layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("served")))
    }));
    let res = svc.oneshot(Request::new(String::new())).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(res.headers()["ratelimit"], "\"default\";r=0;t=1");
    let rejected = res.extensions().get::<Rejected>().unwrap();
    assert!(matches!(rejected.denied(), Some(Denied::Backend(e)) if e.redis().is_some()));
    assert_eq!(rejected.wait(), Some(Duration::from_secs(1)));
}

#[tokio::test]
async fn a_readied_service_dropped_without_a_call_gives_its_redis_token_back() {
    let prefix = unique_prefix("unused");
    // One token an hour: only a release can make the second admission possible.
    let quota = Quota::per_hour(1).burst(1);
    let bucket = process(&prefix, quota).await;
    let mut svc = RateLimitLayer::new(bucket.clone())
        .layer(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    svc.ready().await.unwrap();
    assert!(
        process(&prefix, quota).await.try_acquire(1).await.is_err(),
        "the token is held"
    );
    // Readied, never called: the token goes back to Redis, written in the background, so
    // it lands within a bounded time.
    drop(svc);
    let deadline = Instant::now() + Duration::from_secs(2);
    while process(&prefix, quota).await.try_acquire(1).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the unused token never came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits, bounded, until the Redis key `key` is gone: a release that gave back the only
/// token of a one-an-hour bucket leaves it full again, which Redis stores as no state.
async fn until_given_back(key: &str) {
    let mut conn = redis_support::raw(&redis_url()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        if exists == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "the token never came back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_refused_handle_admits_once_another_process_gave_the_token_back() {
    let prefix = unique_prefix("stale-refusal");
    // One token an hour: only a release can make a second admission possible.
    let quota = Quota::per_hour(1).burst(1);
    let (a, b) = (process(&prefix, quota).await, process(&prefix, quota).await);
    let mut held =
        RateLimitLayer::new(b.clone()).layer(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    held.ready().await.unwrap();
    // A is refused, with a wait of about an hour, and remembers it.
    let wait = a
        .try_acquire(1)
        .await
        .expect_err("B holds the token")
        .wait()
        .expect("a throttled answer");
    assert!(wait > Duration::from_secs(3000), "{wait:?}");
    // B gives its token back (readied, never called).
    drop(held);
    until_given_back(&format!("{prefix}:{{api}}")).await;
    // A asks Redis again instead of repeating its refusal.
    a.try_acquire(1)
        .await
        .expect("the token B gave back is A's");
    assert!(b.try_acquire(1).await.is_err(), "one token an hour in all");
}

#[tokio::test]
async fn a_rejecting_layer_admits_once_another_process_gave_the_token_back() {
    let prefix = unique_prefix("stale-reject");
    let quota = Quota::per_hour(1).burst(1);
    let (a, b) = (process(&prefix, quota).await, process(&prefix, quota).await);
    let server = RejectLayer::new(a).layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let mut held = RateLimitLayer::new(b).layer(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    held.ready().await.unwrap();
    let status =
        |svc: &tower::util::BoxCloneService<Request<String>, Response<ResponseBody<String>>, _>| {
            svc.clone().oneshot(Request::new(String::new()))
        };
    let server = tower::util::BoxCloneService::new(server);
    let code = |r: Result<Response<ResponseBody<String>>, _>| r.unwrap().status();
    assert_eq!(code(status(&server).await), StatusCode::TOO_MANY_REQUESTS);
    drop(held);
    until_given_back(&format!("{prefix}:{{api}}")).await;
    assert_eq!(
        code(status(&server).await),
        StatusCode::OK,
        "asked Redis again"
    );
    assert_eq!(code(status(&server).await), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_keyed_rejecting_layer_admits_once_another_process_gave_the_token_back() {
    let prefix = unique_prefix("stale-keyed");
    let quota = Quota::per_hour(1).burst(1);
    let keyed = keyed_process(&prefix, quota).await;
    let other = tower_throttle::redis::RedisKeyed::builder(quota)
        .url(redis_url())
        .timeout(Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(&prefix)
        .build()
        .await
        .unwrap();
    let server = RejectLayer::keyed(keyed, tower_throttle::extract::HeaderKey::x_api_key()).layer(
        service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }),
    );
    let status = |server: &_| {
        let svc: tower::util::BoxCloneService<Request<String>, Response<ResponseBody<String>>, _> =
            tower::util::BoxCloneService::clone(server);
        async move { svc.oneshot(keyed_request("k")).await.unwrap().status() }
    };
    let server = tower::util::BoxCloneService::new(server);
    // The other process takes key k's token; this one is refused.
    other.try_acquire("k", 1).await.unwrap();
    assert_eq!(status(&server).await, StatusCode::TOO_MANY_REQUESTS);
    other.release("k", 1).await.unwrap();
    assert_eq!(status(&server).await, StatusCode::OK, "asked Redis again");
    assert_eq!(status(&server).await, StatusCode::TOO_MANY_REQUESTS);
}
