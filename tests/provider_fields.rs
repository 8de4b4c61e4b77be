//! `RetryAfterLayer` steered by the API providers' own rate-limit fields: OpenAI's
//! `x-ratelimit-*-{requests,tokens}` and `retry-after-ms`, Anthropic's
//! `anthropic-ratelimit-*`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::{service_fn, BoxError, Layer, Service, ServiceBuilder, ServiceExt};
use tower_throttle::adaptive::Adaptive;
use tower_throttle::{Bucket, Cost, Plan, Quota, RateLimitLayer, Resource, RetryAfterLayer};

type Headers = Vec<(&'static str, &'static str)>;
type Arrivals = Arc<Mutex<Vec<Duration>>>;

/// A server answering from a script of (status, headers), then `200`; it logs when each
/// request arrived.
fn server(
    script: Vec<(u16, Headers)>,
) -> (
    impl Service<Request<()>, Response = Response<()>, Error = BoxError> + Clone,
    Arrivals,
) {
    let start = Instant::now();
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let log = Arc::new(Mutex::new(Vec::new()));
    let svc = service_fn({
        let log = log.clone();
        move |_req: Request<()>| {
            log.lock().unwrap().push(start.elapsed());
            let (status, headers) = script.lock().unwrap().pop_front().unwrap_or((200, vec![]));
            async move {
                let mut resp = Response::new(());
                *resp.status_mut() = StatusCode::from_u16(status).unwrap();
                for (k, v) in headers {
                    resp.headers_mut().append(k, v.parse().unwrap());
                }
                Ok::<_, BoxError>(resp)
            }
        }
    });
    (svc, log)
}

/// [`send`], the first request answered `status` with `headers`.
async fn after(bucket: &Bucket, status: u16, headers: Headers, requests: usize) -> Vec<Duration> {
    send(bucket, vec![(status, headers)], requests).await
}

async fn send(bucket: &Bucket, script: Vec<(u16, Headers)>, requests: usize) -> Vec<Duration> {
    let (api, log) = server(script);
    let mut client = ServiceBuilder::new()
        .layer(RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO))
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(api);
    for _ in 0..requests {
        let resp = client
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let log = log.lock().unwrap().clone();
    log
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_is_followed_to_the_millisecond() {
    let bucket = Bucket::new(Quota::per_second(100));
    let times = send(
        &bucket,
        vec![(429, vec![("retry-after", "2"), ("retry-after-ms", "1500")])],
        1,
    )
    .await;
    assert_eq!(times, [Duration::ZERO, Duration::from_millis(1500)]);
}

#[tokio::test(start_paused = true)]
async fn a_429_for_tokens_waits_for_the_tokens_reset() {
    let bucket = Bucket::new(Quota::per_second(100));
    let times = after(
        &bucket,
        429,
        vec![
            ("retry-after", "1"),
            ("x-ratelimit-limit-requests", "6000"),
            ("x-ratelimit-remaining-requests", "5999"),
            ("x-ratelimit-reset-requests", "10ms"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "2.5s"),
        ],
        1,
    )
    .await;
    assert_eq!(times, [Duration::ZERO, Duration::from_millis(2500)]);
}

#[tokio::test(start_paused = true)]
async fn an_anthropic_quota_spent_on_a_200_holds_the_next_request_until_its_reset() {
    let bucket = Bucket::new(Quota::per_second(100));
    let times = after(
        &bucket,
        200,
        vec![
            // The reset is read against the server's `Date`, whatever the local clock.
            ("date", "Wed, 01 May 2024 12:00:00 GMT"),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2024-05-01T12:00:03Z"),
        ],
        2,
    )
    .await;
    assert_eq!(times, [Duration::ZERO, Duration::from_secs(3)]);
}

#[tokio::test(start_paused = true)]
async fn a_providers_request_limit_is_learned_from_the_first_response() {
    let bucket = Bucket::adaptive(Adaptive::new());
    let headers = vec![
        ("x-ratelimit-limit-requests", "120"),
        ("x-ratelimit-remaining-requests", "119"),
        ("x-ratelimit-reset-requests", "500ms"),
    ];
    let times = send(&bucket, vec![(200, headers.clone()), (200, headers)], 3).await;
    assert_eq!(bucket.rate(), 2.0, "120 requests per minute");
    // After the first answer, one request every 500 ms.
    assert_eq!(times[2] - times[1], Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn hostile_provider_fields_are_ignored() {
    let bucket = Bucket::new(Quota::per_second(100));
    let times = after(
        &bucket,
        200,
        vec![
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "87600h"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "9999-12-31T23:59:59Z"),
            ("x-ratelimit-limit-requests", "-1"),
        ],
        2,
    )
    .await;
    // Resets years away are not believed: nothing holds the next request.
    assert_eq!(times, [Duration::ZERO, Duration::ZERO]);
    assert_eq!(bucket.rate(), 100.0);
}

/// A `429` that names the tokens as spent holds the quota of tokens alone: a request that
/// costs no tokens goes at once, one that costs tokens waits for their reset, and the rate
/// of requests is not cut.
#[tokio::test(start_paused = true)]
async fn a_429_for_tokens_holds_the_tokens_alone() {
    let plan = Plan::new(Quota::per_second(100))
        .and(Quota::per_minute(1_000_000).burst(1_000_000))
        .counting(Resource::TOKENS);
    let bucket = Bucket::new(plan);
    let (api, log) = server(vec![(
        429,
        vec![
            ("retry-after", "1"),
            ("x-ratelimit-remaining-requests", "5999"),
            ("x-ratelimit-reset-requests", "10ms"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "2.5s"),
        ],
    )]);
    let client = ServiceBuilder::new()
        .layer(RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO))
        .layer(
            RateLimitLayer::new(bucket.clone()).charge(|r: &Request<()>| {
                let tokens = r
                    .headers()
                    .get("x-tokens")
                    .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
                Cost::new().and(Resource::TOKENS, tokens)
            }),
        )
        .service(api);
    let call = |tokens: &'static str, after: u64| {
        let client = client.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            let request = Request::builder()
                .header("x-tokens", tokens)
                .body(())
                .unwrap();
            client.oneshot(request).await.unwrap().status()
        }
    };
    let statuses = tokio::join!(call("10", 0), call("0", 100), call("10", 100));
    assert_eq!(statuses, (StatusCode::OK, StatusCode::OK, StatusCode::OK));
    let mut times = log.lock().unwrap().clone();
    times.sort();
    let ms = Duration::from_millis;
    // The 429, the request of no tokens, then the two of tokens from the reset on, the
    // quota of tokens restarting as from empty (20 tokens at 60 µs each, on 1 ms timers).
    assert_eq!(times[..2], [ms(0), ms(100)]);
    assert!(times[2] >= ms(2500) && times[3] <= ms(2503), "{times:?}");
    assert_eq!(bucket.rate(), 100.0);
}

/// With no quota configured, each resource's limit comes from the provider's fields of the
/// first response: the requests' as the rate, the tokens' as a quota per minute that starts
/// from what the provider says remains, and follows a later change.
#[tokio::test(start_paused = true)]
async fn each_resources_limit_is_learned_from_the_first_response() {
    let bucket = Bucket::builder(Quota::per_second(10_000).burst(1))
        .adaptive(Adaptive::new())
        .discover(Resource::TOKENS)
        .build();
    let stated = |tokens: &'static str| {
        vec![
            ("x-ratelimit-limit-requests", "600"),
            ("x-ratelimit-limit-tokens", tokens),
            ("x-ratelimit-remaining-tokens", "5000"),
        ]
    };
    let mut script = vec![(200, stated("6000")); 8];
    script.push((200, stated("12000")));
    let (api, log) = server(script);
    let mut client = ServiceBuilder::new()
        .layer(RetryAfterLayer::new(bucket.clone()))
        .layer(
            RateLimitLayer::new(bucket.clone())
                .charge(|_: &Request<()>| Cost::new().and(Resource::TOKENS, 1000)),
        )
        .service(api);
    for _ in 0..10 {
        let resp = client.ready().await.unwrap();
        assert_eq!(resp.call(Request::new(())).await.unwrap().status(), 200);
    }
    assert_eq!(bucket.rate(), 10.0, "600 requests per minute");
    let times = log.lock().unwrap().clone();
    let s = Duration::from_secs;
    // 5,000 tokens left after the first request, 100 more a second: five more requests at
    // the rate of requests, the seventh when 1,000 came back (10 s), the eighth 10 s later.
    assert!(times[5] < s(1), "{times:?}");
    assert!(
        times[6] >= s(10) && times[6] < s(10) + Duration::from_millis(10),
        "{times:?}"
    );
    assert!(times[7] - times[6] >= s(10), "{times:?}");
    // The ninth answer states twice the tokens: 200 a second from then on.
    let tokens = |b: &Bucket| b.plan().quotas().nth(1).unwrap().0;
    assert_eq!(tokens(&bucket), Quota::per_minute(12_000));
    assert!(
        times[9] - times[8] <= Duration::from_millis(5_010),
        "{times:?}"
    );
    assert!(times[9] - times[8] >= s(5), "{times:?}");

    // A quota the plan configures stays what it is.
    let configured = Bucket::builder(
        Plan::new(Quota::per_second(10))
            .and(Quota::per_minute(100).burst(100))
            .counting(Resource::TOKENS),
    )
    .discover(Resource::TOKENS)
    .build();
    let (api, _) = server(vec![(200, stated("6000"))]);
    let client = RetryAfterLayer::new(configured.clone()).layer(api);
    client.oneshot(Request::new(())).await.unwrap();
    assert_eq!(tokens(&configured), Quota::per_minute(100));
}
