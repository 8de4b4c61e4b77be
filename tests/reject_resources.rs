//! Costs per resource on the server side: a key's plan and the global ceiling count
//! requests and tokens, a request is charged to every quota or to none, and the response
//! fields state each policy with its unit. Time is paused: every instant is exact.

use std::time::Duration;

use http::{Request, StatusCode};
use tokio::time::{advance, Instant};
use tower_layer::Layer;
use tower_throttle::extract::{HeaderKey, KeyDigest};
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Algorithm, Bucket, Cost, Denied, Plan, Quota, RejectLayer, Resource};

mod support;
use support::server::{get, ok, send};

/// The algorithms with a burst (a leaky bucket spaces every request).
const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// 2 requests per second (burst 2) and 100 tokens per second (burst 100), the tokens' quota
/// on `tokens`.
fn plan(tokens: Algorithm) -> Plan {
    Plan::new(Quota::per_second(2).burst(2))
        .and(Quota::per_second(100).burst(100))
        .counting(Resource::TOKENS)
        .named("tps")
        .algorithm(tokens)
}

fn keyed(tokens: Algorithm) -> KeyedBucket<KeyDigest> {
    // Windows start now: no test depends on where the clock's second falls.
    KeyedBucket::builder(plan(tokens))
        .window_origin(Instant::now())
        .build()
}

fn tokens(n: u32) -> Cost {
    Cost::new().and(Resource::TOKENS, n)
}

/// The tokens a request asks for, in its `x-tokens` field.
fn asked(req: &Request<String>) -> Cost {
    let n = req
        .headers()
        .get("x-tokens")
        .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
    tokens(n)
}

fn get_tokens(key: &str, n: u32) -> Request<String> {
    let mut req = get("/", key);
    req.headers_mut().insert("x-tokens", n.into());
    req
}

#[tokio::test(start_paused = true)]
async fn a_key_refused_for_tokens_is_charged_no_request_and_the_reverse() {
    for algorithm in ALGORITHMS {
        let keys = KeyedBucket::<&str>::builder(plan(algorithm))
            .window_origin(Instant::now())
            .build();
        keys.try_acquire_cost(&"a", &tokens(80)).unwrap();
        // 20 tokens left: refused, and no request charged for it...
        assert!(
            keys.try_acquire_cost(&"a", &tokens(30)).is_err(),
            "{algorithm:?}"
        );
        // ... so the second request of the burst is still there.
        keys.try_acquire_cost(&"a", &tokens(20)).unwrap();
        // No request left: refused whatever its tokens, and no token charged for it.
        assert!(
            keys.try_acquire_cost(&"a", &tokens(0)).is_err(),
            "{algorithm:?}"
        );
        // Another key has its own.
        keys.try_acquire_cost(&"b", &tokens(100)).unwrap();
        // A cost larger than a quota never fits.
        let never = keys.try_acquire_cost(&"c", &tokens(101)).unwrap_err();
        assert!(
            matches!(never, Denied::ExceedsBurst(e) if e.requested() == 101 && e.burst() == 100)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_layer_refuses_a_key_short_of_tokens_with_the_fields_of_each_policy() {
    for algorithm in ALGORITHMS {
        let mut svc = RejectLayer::keyed(keyed(algorithm), HeaderKey::x_api_key())
            .cost_per_resource(asked)
            .layer(ok());
        assert_eq!(
            send(&mut svc, get_tokens("a", 90)).await.status(),
            StatusCode::OK
        );
        let refused = send(&mut svc, get_tokens("a", 50)).await;
        assert_eq!(
            refused.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{algorithm:?}"
        );
        let policies: Vec<_> = refused
            .headers()
            .get_all("ratelimit-policy")
            .iter()
            .collect();
        assert_eq!(
            policies,
            ["\"per-key-1s\";q=2;w=1", "\"tps\";q=100;w=1;qu=\"tokens\""],
            "{algorithm:?}"
        );
        // Until 50 tokens fit: the sliding window still weighs the last window's 90.
        let wait = match algorithm {
            Algorithm::SlidingWindow => "2",
            _ => "1",
        };
        assert_eq!(refused.headers()["retry-after"], wait, "{algorithm:?}");
        // Refused for its tokens, it took no request: one of few tokens still goes.
        assert_eq!(
            send(&mut svc, get_tokens("a", 10)).await.status(),
            StatusCode::OK
        );
        assert_eq!(
            send(&mut svc, get_tokens("b", 100)).await.status(),
            StatusCode::OK,
            "{algorithm:?}: another key"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_global_ceiling_of_tokens_refuses_and_costs_the_key_nothing() {
    let global = Bucket::builder(
        Plan::new(Quota::per_second(100).burst(100))
            .and(Quota::per_second(150).burst(150))
            .counting(Resource::TOKENS),
    )
    .fixed_rate()
    .build();
    let mut svc = RejectLayer::keyed(keyed(Algorithm::TokenBucket), HeaderKey::x_api_key())
        .global(global.clone())
        .cost_per_resource(asked)
        .layer(ok());
    assert_eq!(
        send(&mut svc, get_tokens("a", 100)).await.status(),
        StatusCode::OK
    );
    // The global 50 tokens left refuse 60 of another key, which keeps its own 100.
    let refused = send(&mut svc, get_tokens("b", 60)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(global
        .try_charge(Cost::from(0).and(Resource::TOKENS, 51))
        .is_err());
    advance(Duration::from_secs(1)).await;
    assert_eq!(
        send(&mut svc, get_tokens("b", 100)).await.status(),
        StatusCode::OK
    );
}

/// A key short of tokens waits for them within `max_wait`.
#[tokio::test(start_paused = true)]
async fn a_key_waits_for_its_tokens_within_max_wait() {
    let mut svc = RejectLayer::keyed(keyed(Algorithm::TokenBucket), HeaderKey::x_api_key())
        .cost_per_resource(asked)
        .max_wait(Duration::from_secs(1))
        .layer(ok());
    assert_eq!(
        send(&mut svc, get_tokens("a", 100)).await.status(),
        StatusCode::OK
    );
    let start = Instant::now();
    assert_eq!(
        send(&mut svc, get_tokens("a", 50)).await.status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    // 100 more in a second: within `max_wait`, it waits.
    assert_eq!(
        send(&mut svc, get_tokens("a", 100)).await.status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_millis(1500));
}

/// A refusal for tokens by a single limit names the tokens' quota, and `RateLimit` reports
/// it; a refusal for requests names the requests' quota.
#[tokio::test(start_paused = true)]
async fn a_refusal_names_the_quota_of_the_resource_that_ran_out() {
    let bucket = Bucket::builder(plan(Algorithm::TokenBucket))
        .fixed_rate()
        .build();
    let mut svc = RejectLayer::new(bucket)
        .cost_per_resource(asked)
        .layer(ok());
    assert_eq!(
        send(&mut svc, get_tokens("a", 90)).await.status(),
        StatusCode::OK
    );
    let for_tokens = send(&mut svc, get_tokens("a", 50)).await;
    assert_eq!(for_tokens.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(for_tokens.headers()["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"tps\";"));
    assert_eq!(
        send(&mut svc, get_tokens("a", 10)).await.status(),
        StatusCode::OK
    );
    let for_requests = send(&mut svc, get_tokens("a", 0)).await;
    assert_eq!(for_requests.status(), StatusCode::TOO_MANY_REQUESTS);
    let field = for_requests.headers()["ratelimit"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(field.starts_with("\"default-1s\";"), "{field}");
}

/// A single limit of requests and tokens lets a request wait for its tokens within
/// `max_wait`, and refuses at once one that would wait longer.
#[tokio::test(start_paused = true)]
async fn a_single_limit_waits_for_tokens_within_max_wait() {
    // 50 tokens a second, 100 at once.
    let plan = Plan::new(Quota::per_second(2).burst(2))
        .and(Quota::per_second(50).burst(100))
        .counting(Resource::TOKENS);
    let bucket = Bucket::builder(plan).fixed_rate().build();
    let mut svc = RejectLayer::new(bucket)
        .cost_per_resource(asked)
        .max_wait(Duration::from_secs(1))
        .layer(ok());
    assert_eq!(
        send(&mut svc, get_tokens("a", 100)).await.status(),
        StatusCode::OK
    );
    let start = Instant::now();
    assert_eq!(
        send(&mut svc, get_tokens("a", 25)).await.status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    // 100 tokens more would take two seconds: refused at once, charged nothing.
    let refused = send(&mut svc, get_tokens("a", 100)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "2");
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(
        send(&mut svc, get_tokens("a", 50)).await.status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_millis(1500));
}
