//! Weighted requests on the rejecting layer: a cost is charged to every limit it passes and
//! shows in the response fields. Time is paused: every instant is exact.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use tokio::time::advance;
use tower_layer::Layer;
use tower_throttle::extract::{HeaderKey, KeyDigest};
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::reject::Rejected;
use tower_throttle::{Bucket, Denied, Quota, RejectLayer};

mod support;
use support::server::{get, ok, send};

/// `/search` costs 10 tokens, `/huge` 100, anything else 1.
fn weight(req: &Request<String>) -> u32 {
    match req.uri().path() {
        "/search" => 10,
        "/huge" => 100,
        _ => 1,
    }
}

fn rejected<B>(res: &Response<B>) -> &Rejected {
    res.extensions().get::<Rejected>().expect("a rejection")
}

#[tokio::test(start_paused = true)]
async fn a_route_of_cost_ten_takes_ten_tokens_of_a_single_bucket() {
    // 60 a minute: a token a second, 20 at once.
    let bucket = Bucket::new(Quota::per_minute(60).burst(20));
    let mut svc = RejectLayer::new(bucket.clone())
        .cost(weight)
        .admitted_headers(true)
        .layer(ok());

    let first = send(&mut svc, get("/search", "a")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit"], "\"default\";r=10;t=1");
    let second = send(&mut svc, get("/search", "a")).await;
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(second.headers()["ratelimit"], "\"default\";r=0;t=1");
    assert_eq!(bucket.snapshot().available, 0);

    // The third waits for 10 tokens, not for one.
    let third = send(&mut svc, get("/search", "a")).await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.headers()["retry-after"], "10");
    assert_eq!(third.headers()["ratelimit"], "\"default\";r=0;t=10");
    assert_eq!(rejected(&third).wait(), Some(Duration::from_secs(10)));

    // A cheap route needs one token: a second.
    let cheap = send(&mut svc, get("/", "a")).await;
    assert_eq!(cheap.headers()["retry-after"], "1");
    advance(Duration::from_secs(1)).await;
    assert_eq!(send(&mut svc, get("/", "a")).await.status(), StatusCode::OK);
    advance(Duration::from_secs(9)).await;
    assert_eq!(
        send(&mut svc, get("/search", "a")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    advance(Duration::from_secs(1)).await;
    assert_eq!(
        send(&mut svc, get("/search", "a")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn a_cost_is_charged_to_the_key_and_to_the_global_ceiling() {
    let keyed = KeyedBucket::new(Quota::per_minute(60).burst(20));
    let global = Bucket::new(Quota::per_minute(60).burst(25));
    let mut svc = RejectLayer::keyed(keyed.clone(), HeaderKey::x_api_key())
        .global(global.clone())
        .cost(weight)
        .admitted_headers(true)
        .layer(ok());

    let first = send(&mut svc, get("/search", "a")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let fields: Vec<_> = first.headers().get_all("ratelimit").iter().collect();
    assert_eq!(fields, ["\"per-key\";r=10;t=1", "\"global\";r=15;t=1"]);
    assert_eq!(
        send(&mut svc, get("/search", "a")).await.status(),
        StatusCode::OK
    );
    assert_eq!(global.snapshot().available, 5);

    let by_key = send(&mut svc, get("/search", "a")).await;
    assert_eq!(by_key.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(rejected(&by_key).policy(), Some("per-key"));
    assert_eq!(by_key.headers()["retry-after"], "10");
    assert_eq!(
        global.snapshot().available,
        5,
        "a key's refusal costs the ceiling nothing"
    );

    // Another key fits its own bucket, but not the 5 tokens left in the ceiling; its key is
    // not charged.
    let by_global = send(&mut svc, get("/search", "b")).await;
    assert_eq!(by_global.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(rejected(&by_global).policy(), Some("global"));
    assert_eq!(by_global.headers()["retry-after"], "5");
    assert_eq!(keyed.snapshot(&KeyDigest::of_bytes(b"b")).available, 20);
    // A cheap request of that key still fits both.
    assert_eq!(send(&mut svc, get("/", "b")).await.status(), StatusCode::OK);
    assert_eq!(global.snapshot().available, 4);
    assert_eq!(keyed.snapshot(&KeyDigest::of_bytes(b"b")).available, 19);
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_burst_is_refused_without_a_retry_after() {
    let keyed = KeyedBucket::new(Quota::per_minute(60).burst(20));
    let mut svc = RejectLayer::keyed(keyed, HeaderKey::x_api_key())
        .cost(weight)
        .layer(ok());
    let res = send(&mut svc, get("/huge", "a")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().get("retry-after").is_none());
    let never = rejected(&res).denied().unwrap().exceeds_burst().unwrap();
    assert_eq!((never.requested(), never.burst()), (100, 20));
    // The key's bucket was not touched.
    assert_eq!(
        send(&mut svc, get("/search", "a")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        send(&mut svc, get("/search", "a")).await.status(),
        StatusCode::OK
    );

    let mut single = RejectLayer::new(Bucket::new(Quota::per_minute(60).burst(20)))
        .cost(weight)
        .layer(ok());
    let res = send(&mut single, get("/huge", "a")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().get("retry-after").is_none());
    assert!(matches!(
        rejected(&res).denied(),
        Some(Denied::ExceedsBurst(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_weighted_request_waits_for_all_its_tokens_within_max_wait() {
    let bucket = Bucket::new(Quota::per_minute(60).burst(20));
    let mut svc = RejectLayer::new(bucket.clone())
        .cost(weight)
        .max_wait(Duration::from_secs(10))
        .layer(ok());
    for _ in 0..2 {
        assert_eq!(
            send(&mut svc, get("/search", "a")).await.status(),
            StatusCode::OK
        );
    }
    let start = tokio::time::Instant::now();
    assert_eq!(
        send(&mut svc, get("/search", "a")).await.status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_secs(10));
}
