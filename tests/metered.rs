//! Metered APIs through the layers: an estimate charged before a request goes, settled from
//! its response; and a client that keeps a provider's requests and tokens per minute.

#[cfg(feature = "reqwest")]
mod provider;
mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_throttle::{Bucket, Charge, Cost, Denied, Plan, Quota, RateLimitLayer, Resource};

fn tokens(n: u32) -> Cost {
    Cost::new().and(Resource::TOKENS, n)
}

/// 60 requests and 1,000 tokens per minute, both with their whole minute as burst.
fn plan() -> Bucket {
    Bucket::new(
        Plan::new(Quota::per_minute(60).burst(60))
            .and(Quota::per_minute(1_000).burst(1_000))
            .counting(Resource::TOKENS),
    )
}

/// Whether `limit` has `n` tokens now (taken and given straight back).
fn has(limit: &Bucket, n: u32) -> bool {
    limit.try_charge(tokens(n)).map(|c| c.refund()).is_ok()
}

/// An API whose answer says, in `x-used`, the tokens it used; calls are counted.
fn api(
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<u32>, Response = Response<()>, Error = Infallible, Future: Send> + Clone {
    service_fn(move |request: Request<u32>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let used = *request.body() / 2;
        async move { Ok(Response::builder().header("x-used", used).body(()).unwrap()) }
    })
}

#[tokio::test(start_paused = true)]
async fn the_estimate_waits_goes_with_the_response_and_settles_once() {
    let limit = plan();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::new(limit.clone()).charge(|r: &Request<u32>| tokens(*r.body()));
    let mut svc = layer.layer(api(calls.clone()));

    let response = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(600))
        .await
        .unwrap();
    let charge = response.extensions().get::<Charge>().unwrap().clone();
    assert_eq!(charge.estimate(), &tokens(600));
    assert!(!has(&limit, 401), "the estimate is taken");
    // Settled from the header: 300 used, 300 back.
    assert!(charge.settle(tokens(300)));
    assert!(has(&limit, 700) && !has(&limit, 701));
    // A second settlement, from any clone, changes nothing.
    let again = response.extensions().get::<Charge>().unwrap();
    assert!(again.is_settled());
    assert!(!again.settle(tokens(1_000)));
    assert!(!again.refund());
    assert!(has(&limit, 700) && !has(&limit, 701));

    // 800 does not fit: the call waits, in its future, for the tokens to come back.
    let start = tokio::time::Instant::now();
    let response = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(800))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(6)); // 100 tokens at 1,000 per minute
    drop(response); // dropped unsettled: the estimate stands
    assert!(!has(&limit, 1));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_layer_above_settles_from_the_headers() {
    let limit = plan();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = ServiceBuilder::new()
        .map_response(|response: Response<()>| {
            let used = response.headers()["x-used"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            response
                .extensions()
                .get::<Charge>()
                .unwrap()
                .settle(tokens(used));
            response
        })
        .layer(RateLimitLayer::new(limit.clone()).charge(|r: &Request<u32>| tokens(*r.body())))
        .service(api(calls));
    for _ in 0..3 {
        svc.ready()
            .await
            .unwrap()
            .call(Request::new(400))
            .await
            .unwrap();
    }
    // Three estimates of 400 would not fit in 1,000; three answers of 200 leave 400.
    assert!(has(&limit, 400) && !has(&limit, 401));
}

#[tokio::test(start_paused = true)]
async fn a_refused_or_cancelled_request_is_charged_nothing_and_an_error_keeps_its_estimate() {
    let limit = plan();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::new(limit.clone()).charge(|r: &Request<u32>| tokens(*r.body()));
    let mut svc = layer.layer(api(calls.clone()));

    // More than the burst: refused at once, never sent, nothing charged.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(1_001))
        .await
        .unwrap_err();
    assert!(
        Denied::find(&*err)
            .and_then(Denied::exceeds_burst)
            .is_some(),
        "{err}"
    );
    assert!(has(&limit, 1_000));

    // A waiter cancelled before it goes leaves no charge and keeps no one waiting.
    let held = limit.try_charge(tokens(900)).unwrap();
    let waiting = svc.ready().await.unwrap().call(Request::new(500));
    let mut second = svc.clone();
    let behind = tokio::spawn(second.ready().await.unwrap().call(Request::new(100)));
    let cancelled = tokio::time::timeout(Duration::from_secs(1), waiting).await;
    assert!(cancelled.is_err(), "still waiting after a second");
    let response = behind.await.unwrap().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the second went");
    drop((held, response));
    // 900 + 100 taken, a second's refill (16.7) back: nothing of the cancelled 500.
    assert!(has(&limit, 16) && !has(&limit, 17));
    tokio::time::sleep(Duration::from_secs(60)).await;

    // The inner service failed: the request may have gone, so its estimate stands.
    let failing = RateLimitLayer::new(limit.clone())
        .charge(|r: &Request<u32>| tokens(*r.body()))
        .layer(service_fn(|_: Request<u32>| async {
            Err::<Response<()>, _>(std::io::Error::other("reset by peer"))
        }));
    failing.oneshot(Request::new(300)).await.unwrap_err();
    assert!(has(&limit, 700) && !has(&limit, 701));
}

#[cfg(feature = "reqwest")]
mod over_http {
    use std::sync::Arc;
    use std::time::Duration;

    use super::provider::{self, Provider};
    use reqwest_middleware::ClientBuilder;
    use tokio::time::Instant;
    use tower_throttle::reqwest::RateLimitMiddleware;
    use tower_throttle::{Algorithm, Bucket, Charge, Plan, Quota, Resource};

    use super::{has, tokens};

    #[tokio::test(start_paused = true)]
    async fn a_request_that_cannot_connect_is_refunded() {
        let limit = super::plan();
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(RateLimitMiddleware::new(limit.clone()).charge(provider::estimate))
            .build();
        // A port nobody listens on.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let sent = client
            .post(format!("http://{closed}/v1/chat/completions"))
            .body(provider::request_body(100, 500))
            .send()
            .await;
        assert!(sent.unwrap_err().is_connect());
        assert!(has(&limit, 1_000), "the estimate of 600 came back");
    }

    /// A streamed answer: the usage comes in its last event. Read to its end, the charge is
    /// settled from it; dropped before, the estimate stands.
    #[tokio::test(start_paused = true)]
    async fn a_streamed_answer_is_settled_at_its_end_and_keeps_its_estimate_when_dropped() {
        let server = Provider::new(200, 100_000);
        let addr = server.serve().await;
        // 1,000 tokens an hour in a sliding log: nothing comes back while the answer streams.
        let limit = Bucket::new(
            Plan::new(Quota::per_minute(60))
                .and(Quota::per_hour(1_000))
                .counting(Resource::TOKENS)
                .algorithm(Algorithm::SlidingLog),
        );
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(RateLimitMiddleware::new(limit.clone()).charge(provider::estimate))
            .build();
        let url = format!("http://{addr}/v1/chat/completions");
        // 400 of prompt, up to 500 more: an estimate of 900.
        let send = || {
            client
                .post(&url)
                .body(provider::streamed_body(400, 500))
                .send()
        };

        let mut response = send().await.unwrap();
        let charge = response.extensions().get::<Charge>().unwrap().clone();
        let mut used = None;
        while let Some(event) = response.chunk().await.unwrap() {
            if let Some(n) = provider::total_tokens(&event) {
                used = Some(n);
                assert!(charge.settle(tokens(n)));
            }
        }
        let used = used.expect("the last event carries the usage");
        assert!(used < 900, "{used}");
        assert!(has(&limit, 1_000 - used) && !has(&limit, 1_001 - used));

        // A fresh hour, then an answer dropped after its first event.
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        let mut response = send().await.unwrap();
        response.chunk().await.unwrap().unwrap();
        drop(response);
        assert!(
            has(&limit, 100) && !has(&limit, 101),
            "the estimate of 900 stands"
        );
    }

    /// 16 workers send prompts of 100 to 4,000 tokens asking for up to 100 to 1,000 more,
    /// for five minutes, against a provider of 200 requests and 100,000 tokens per rolling
    /// minute. The client's minute is a second longer than the server's: a request reaches
    /// the server a moment after it leaves.
    #[tokio::test(start_paused = true)]
    async fn a_client_keeps_inside_both_limits_of_a_provider() {
        let server = Provider::new(200, 100_000);
        let addr = server.serve().await;
        let minute = Duration::from_secs(61);
        let plan = Plan::new(Quota::new(200, minute))
            .algorithm(Algorithm::SlidingLog)
            .and(Quota::new(100_000, minute))
            .counting(Resource::TOKENS)
            .algorithm(Algorithm::SlidingLog);
        let limit = Bucket::new(plan);
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(RateLimitMiddleware::new(limit.clone()).charge(provider::estimate))
            .build();
        let url = Arc::new(format!("http://{addr}/v1/chat/completions"));
        let start = Instant::now();
        let end = start + Duration::from_secs(300);
        let workers: Vec<_> = (0..16u64)
            .map(|w| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move {
                    let mut i = w;
                    while Instant::now() < end {
                        i += 16;
                        let prompt = 100 + i * 2_654_435_761 % 3_901;
                        let max_tokens = 100 + i * 40_503 % 901;
                        let response = client
                            .post(url.as_str())
                            .body(provider::request_body(prompt, max_tokens))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(response.status(), 200, "{:?}", response.headers());
                        let charge = response.extensions().get::<Charge>().unwrap().clone();
                        let body = response.bytes().await.unwrap();
                        assert!(charge.settle(tokens(provider::total_tokens(&body).unwrap())));
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        let seen = server.seen();
        assert!(seen.refused.is_empty(), "refused: {:?}", &seen.refused[..]);
        // The budget is used: in the four whole minutes after the first, at least 85 % of
        // the tokens.
        let late = start + Duration::from_secs(60)..end;
        let used: u64 = seen
            .answered
            .iter()
            .filter(|(t, _)| late.contains(t))
            .map(|(_, n)| n)
            .sum();
        let share = used as f64 / 4.0 / 100_000.0;
        assert!(
            share >= 0.85,
            "{:.1} % of the tokens per minute used",
            share * 100.0
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_answer_keeps_its_request_and_gives_its_tokens_back() {
    let limit = plan();
    let refused = service_fn(|_: Request<u32>| async {
        Ok::<_, Infallible>(Response::builder().status(429).body(()).unwrap())
    });
    let svc = RateLimitLayer::new(limit.clone())
        .charge(|r: &Request<u32>| tokens(*r.body()))
        .layer(refused);
    let response = svc.oneshot(Request::new(600)).await.unwrap();
    let charge = response.extensions().get::<Charge>().unwrap();
    assert!(charge.is_settled(), "settled by the layer");
    assert!(!charge.settle(tokens(600)));
    assert!(has(&limit, 1_000), "the tokens came back");
    // The request stays counted: 59 of the minute's 60 requests left.
    for _ in 0..59 {
        drop(limit.try_charge(Cost::new()).unwrap());
    }
    assert!(limit.try_charge(Cost::new()).is_err());
}
