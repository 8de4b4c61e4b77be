//! Reject mode: 429 with exact `Retry-After`, rate-limit fields, responses, bounded wait,
//! fallback and the tower contract. Time is paused: every instant is exact.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Request, Response, StatusCode};
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready_ok};
use tower::{service_fn, Service, ServiceExt};
use tower_layer::Layer;
use tower_throttle::extract::{HeaderKey, PeerIp};
use tower_throttle::headers::read_quota_hint;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::reject::{MissingKey, Rejected};
use tower_throttle::{Bucket, Quota, RejectLayer};

type Res = Response<String>;

/// The inner service: answers "ok" with a marker header, counting its calls.
fn inner(
    calls: Arc<AtomicUsize>,
) -> impl Service<
    Request<String>,
    Response = Res,
    Error = Infallible,
    Future = impl Future<Output = Result<Res, Infallible>> + Send,
> + Clone
       + Send {
    service_fn(move |_: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async {
            let mut res = Response::new(String::from("ok"));
            res.headers_mut().insert("x-inner", "1".parse().unwrap());
            Ok(res)
        }
    })
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

async fn send<S>(svc: &mut S, req: Request<String>) -> S::Response
where
    S: Service<Request<String>, Error = Infallible>,
{
    svc.ready().await.unwrap().call(req).await.unwrap()
}

fn plain() -> Request<String> {
    Request::new(String::new())
}

fn with_key(key: &str) -> Request<String> {
    Request::builder()
        .header("x-api-key", key)
        .body(String::new())
        .unwrap()
}

/// A key extractor that keeps the key readable, to look at its bucket.
fn api_key(req: &Request<String>) -> Option<String> {
    Some(req.headers().get("x-api-key")?.to_str().ok()?.to_owned())
}

fn header<'a, B>(res: &'a Response<B>, name: &str) -> &'a str {
    res.headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} field"))
        .to_str()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn over_the_limit_429_with_retry_after_equal_to_the_real_wait_rounded_up() {
    // Two per three seconds: a token every 1.5 s.
    let layer = RejectLayer::new(Bucket::new(Quota::new(2, Duration::from_secs(3))));
    let calls = counter();
    let mut svc = layer.layer(inner(calls.clone()));
    for _ in 0..2 {
        assert_eq!(send(&mut svc, plain()).await.status(), StatusCode::OK);
    }

    let res = send(&mut svc, plain()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "2"); // 1.5 s, rounded up
    let rejected = res.extensions().get::<Rejected>().unwrap();
    assert_eq!(rejected.policy(), Some("default"));
    assert_eq!(rejected.wait(), Some(Duration::from_millis(1500)));
    assert_eq!(res.body(), "Too Many Requests\n");
    assert_eq!(header(&res, "content-type"), "text/plain; charset=utf-8");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "a rejection never reaches the inner service"
    );

    // The wait is real: 1 ns before it the request is still refused (and told 1 s, never 0),
    // at it the request goes through.
    advance(Duration::from_millis(1500) - Duration::from_nanos(1)).await;
    let res = send(&mut svc, plain()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "1");
    assert_eq!(
        res.extensions().get::<Rejected>().unwrap().wait(),
        Some(Duration::from_nanos(1))
    );
    advance(Duration::from_nanos(1)).await;
    assert_eq!(send(&mut svc, plain()).await.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn retry_after_matches_the_wait_for_whole_and_long_waits() {
    let mut svc = RejectLayer::new(Bucket::new(Quota::per_minute(1))).layer(inner(counter()));
    send(&mut svc, plain()).await;
    let res = send(&mut svc, plain()).await;
    assert_eq!(header(&res, "retry-after"), "60");
    advance(Duration::from_millis(100)).await;
    let res = send(&mut svc, plain()).await;
    assert_eq!(header(&res, "retry-after"), "60"); // 59.9 s rounds up
    advance(Duration::from_millis(59_900)).await;
    assert_eq!(send(&mut svc, plain()).await.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_fields_are_present_and_parseable() {
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_second(4)),
        HeaderKey::x_api_key(),
    )
    .global(Bucket::new(Quota::per_minute(600)))
    .x_ratelimit_headers(true)
    .layer(inner(counter()));
    for _ in 0..4 {
        send(&mut svc, with_key("a")).await;
    }
    let res = send(&mut svc, with_key("a")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let policies: Vec<_> = res.headers().get_all("ratelimit-policy").iter().collect();
    assert_eq!(policies, ["\"per-key\";q=4;w=1", "\"global\";q=600;w=60"]);
    assert_eq!(header(&res, "ratelimit"), "\"per-key\";r=0;t=1");
    assert_eq!(header(&res, "x-ratelimit-limit"), "4");
    assert_eq!(header(&res, "x-ratelimit-remaining"), "0");
    assert_eq!(header(&res, "x-ratelimit-reset"), "1");
    let hint = read_quota_hint(res.headers(), SystemTime::now()).unwrap();
    assert_eq!(hint.remaining, 0);
    assert_eq!(hint.reset, Some(Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn under_the_limit_the_inner_response_is_untouched() {
    let mut svc = RejectLayer::new(Bucket::new(Quota::per_second(10))).layer(inner(counter()));
    let res = send(&mut svc, plain()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.body(), "ok");
    let names: Vec<_> = res.headers().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["x-inner"]);
    assert!(res.extensions().get::<Rejected>().is_none());
}

#[tokio::test(start_paused = true)]
async fn admitted_headers_describe_every_limit() {
    let global = Bucket::new(Quota::per_second(100));
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_second(4)),
        HeaderKey::x_api_key(),
    )
    .global(global)
    .admitted_headers(true)
    .layer(inner(counter()));
    let res = send(&mut svc, with_key("a")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.body(), "ok");
    let fields: Vec<_> = res.headers().get_all("ratelimit").iter().collect();
    assert_eq!(fields, ["\"per-key\";r=3;t=1", "\"global\";r=99;t=1"]);
    assert_eq!(
        read_quota_hint(res.headers(), SystemTime::now())
            .unwrap()
            .remaining,
        3
    );
}

#[tokio::test(start_paused = true)]
async fn keys_are_isolated() {
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(2)),
        HeaderKey::x_api_key(),
    )
    .layer(inner(counter()));
    for key in ["a", "b", "c"] {
        for _ in 0..2 {
            assert_eq!(send(&mut svc, with_key(key)).await.status(), StatusCode::OK);
        }
        assert_eq!(send(&mut svc, with_key(key)).await.status(), 429, "{key}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_global_ceiling_holds_across_keys() {
    let global = Bucket::new(Quota::per_minute(5));
    let calls = counter();
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(2)),
        HeaderKey::x_api_key(),
    )
    .global(global.clone())
    .layer(inner(calls.clone()));
    let mut admitted = 0;
    for i in 0..20 {
        let res = send(&mut svc, with_key(&format!("k{i}"))).await;
        if res.status() == StatusCode::OK {
            admitted += 1;
        } else {
            let rejected = res.extensions().get::<Rejected>().unwrap();
            assert_eq!(rejected.policy(), Some("global"));
            assert_eq!(header(&res, "retry-after"), "12");
            assert_eq!(header(&res, "ratelimit"), "\"global\";r=0;t=12");
        }
    }
    assert_eq!(admitted, 5);
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[tokio::test(start_paused = true)]
async fn a_per_key_rejection_leaves_the_global_bucket_untouched() {
    let global = Bucket::new(Quota::per_minute(100));
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(1)),
        HeaderKey::x_api_key(),
    )
    .global(global.clone())
    .layer(inner(counter()));
    send(&mut svc, with_key("a")).await;
    assert_eq!(global.snapshot().available, 99);
    for _ in 0..50 {
        let res = send(&mut svc, with_key("a")).await;
        assert_eq!(
            res.extensions().get::<Rejected>().unwrap().policy(),
            Some("per-key")
        );
    }
    assert_eq!(global.snapshot().available, 99);
}

#[tokio::test(start_paused = true)]
async fn a_global_rejection_leaves_the_key_untouched() {
    let global = Bucket::new(Quota::per_minute(1));
    let keyed = KeyedBucket::new(Quota::per_minute(10));
    let mut svc = RejectLayer::keyed(keyed.clone(), api_key)
        .global(global.clone())
        .layer(inner(counter()));
    assert_eq!(send(&mut svc, with_key("a")).await.status(), StatusCode::OK);
    for _ in 0..5 {
        let res = send(&mut svc, with_key("b")).await;
        assert_eq!(
            res.extensions().get::<Rejected>().unwrap().policy(),
            Some("global")
        );
    }
    // "b" was charged and refunded each time: its bucket is full, and not even tracked.
    assert_eq!(keyed.snapshot(&"b".to_owned()).available, 10);
    assert_eq!(keyed.snapshot(&"a".to_owned()).available, 9);
    assert_eq!(keyed.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn clones_and_services_share_the_buckets() {
    let layer = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(3)),
        HeaderKey::x_api_key(),
    );
    let mut one = layer.layer(inner(counter()));
    let mut two = layer.layer(inner(counter()));
    let mut three = one.clone();
    assert_eq!(send(&mut one, with_key("a")).await.status(), 200);
    assert_eq!(send(&mut two, with_key("a")).await.status(), 200);
    assert_eq!(send(&mut three, with_key("a")).await.status(), 200);
    assert_eq!(send(&mut one, with_key("a")).await.status(), 429);
    assert_eq!(send(&mut two, with_key("a")).await.status(), 429);
}

#[tokio::test(start_paused = true)]
async fn missing_header_keys_share_one_bucket_by_default() {
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(2)),
        HeaderKey::x_api_key(),
    )
    .layer(inner(counter()));
    // No header: the shared anonymous bucket, never a free pass.
    assert_eq!(send(&mut svc, plain()).await.status(), 200);
    assert_eq!(send(&mut svc, plain()).await.status(), 200);
    let res = send(&mut svc, plain()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        res.extensions().get::<Rejected>().unwrap().policy(),
        Some("per-key")
    );
    // A request with a key is not affected.
    assert_eq!(send(&mut svc, with_key("a")).await.status(), 200);
}

#[tokio::test(start_paused = true)]
async fn a_peer_ip_limit_without_a_peer_address_answers_500() {
    let calls = counter();
    let mut svc = RejectLayer::keyed(KeyedBucket::new(Quota::per_minute(2)), PeerIp::new())
        .layer(inner(calls.clone()));
    // The server does not record peer addresses: a wiring mistake, never one shared bucket.
    for _ in 0..3 {
        let res = send(&mut svc, plain()).await;
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(res.headers().get("retry-after").is_none());
        let rejected = res.extensions().get::<Rejected>().unwrap();
        assert_eq!(rejected.policy(), None);
        assert_eq!(rejected.status_code(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    // A gRPC call gets the status its client understands: INTERNAL, no push-back.
    let grpc = Request::post("/echo.Echo/Say")
        .version(http::Version::HTTP_2)
        .header("content-type", "application/grpc")
        .body(String::new())
        .unwrap();
    let res = send(&mut svc, grpc).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(header(&res, "grpc-status"), "13");
    assert!(res.headers().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // A request with an address is served.
    let mut req = plain();
    req.extensions_mut()
        .insert("192.0.2.1:5".parse::<SocketAddr>().unwrap());
    assert_eq!(send(&mut svc, req).await.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Sharing one bucket between address-less requests is still available, when asked for.
    let mut shared = RejectLayer::keyed(KeyedBucket::new(Quota::per_minute(2)), PeerIp::new())
        .on_missing_key(MissingKey::Shared)
        .layer(inner(counter()));
    assert_eq!(send(&mut shared, plain()).await.status(), 200);
    assert_eq!(send(&mut shared, plain()).await.status(), 200);
    assert_eq!(send(&mut shared, plain()).await.status(), 429);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_key_header_is_charged_to_the_first_key() {
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(1)),
        HeaderKey::x_api_key(),
    )
    .layer(inner(counter()));
    let twice = |first: &str, second: &str| {
        Request::builder()
            .header("x-api-key", first)
            .header("x-api-key", second)
            .body(String::new())
            .unwrap()
    };
    assert_eq!(send(&mut svc, with_key("a")).await.status(), 200);
    // Sending the key twice neither escapes nor lands in the anonymous bucket.
    let res = send(&mut svc, twice("a", "a")).await;
    assert_eq!(res.status(), 429);
    assert_eq!(send(&mut svc, twice("a", "b")).await.status(), 429);
    assert_eq!(send(&mut svc, twice("b", "a")).await.status(), 200);
    assert_eq!(send(&mut svc, with_key("b")).await.status(), 429);
    assert_eq!(
        send(&mut svc, plain()).await.status(),
        200,
        "anonymous untouched"
    );
}

#[tokio::test(start_paused = true)]
async fn a_repeated_key_header_can_be_refused() {
    use tower_throttle::extract::Repeated;
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(1)),
        HeaderKey::x_api_key().on_repeated(Repeated::NoKey),
    )
    .on_missing_key(MissingKey::Reject)
    .layer(inner(counter()));
    let req = Request::builder()
        .header("x-api-key", "a")
        .header("x-api-key", "a")
        .body(String::new())
        .unwrap();
    assert_eq!(send(&mut svc, req).await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(send(&mut svc, with_key("a")).await.status(), 200);
}

#[tokio::test(start_paused = true)]
async fn missing_keys_can_be_rejected_with_400() {
    let calls = counter();
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(2)),
        HeaderKey::x_api_key(),
    )
    .on_missing_key(MissingKey::Reject)
    .layer(inner(calls.clone()));
    let res = send(&mut svc, plain()).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert!(res.headers().get("retry-after").is_none());
    let rejected = res.extensions().get::<Rejected>().unwrap();
    assert_eq!(rejected.policy(), None);
    assert_eq!(rejected.retry_after_secs(), None);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_request_gets_a_trailers_only_refusal_that_its_client_understands() {
    let grpc = |key: Option<&str>| {
        let req = Request::builder()
            .method("POST")
            .version(http::Version::HTTP_2)
            .header("content-type", "application/grpc+proto");
        let req = match key {
            Some(key) => req.header("x-api-key", key),
            None => req,
        };
        req.body(String::new()).unwrap()
    };
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::new(2, Duration::from_secs(3)).burst(1)),
        HeaderKey::x_api_key(),
    )
    .on_missing_key(MissingKey::Reject)
    .layer(inner(counter()));
    assert_eq!(
        send(&mut svc, grpc(Some("a"))).await.status(),
        StatusCode::OK
    );

    // RESOURCE_EXHAUSTED in an HTTP 200 whose headers end the stream, the wait in ms.
    let res = send(&mut svc, grpc(Some("a"))).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(header(&res, "content-type"), "application/grpc");
    assert_eq!(header(&res, "grpc-status"), "8");
    assert_eq!(header(&res, "grpc-retry-pushback-ms"), "1500");
    assert_eq!(header(&res, "cache-control"), "no-store");
    assert_eq!(res.body(), "");
    assert!(res.headers().get("x-inner").is_none());
    // Without a key: INVALID_ARGUMENT, and no push-back (waiting does not help).
    let res = send(&mut svc, grpc(None)).await;
    assert_eq!(header(&res, "grpc-status"), "3");
    assert!(res.headers().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(header(&res, "cache-control"), "no-store");
    // Plain HTTP keeps its 429.
    let res = send(&mut svc, with_key("a")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.body(), "Too Many Requests\n");
}

#[tokio::test(start_paused = true)]
async fn a_get_with_a_grpc_content_type_gets_a_429_that_no_cache_keeps() {
    let mut svc =
        RejectLayer::new(Bucket::new(Quota::per_second(1).burst(1))).layer(inner(counter()));
    assert_eq!(send(&mut svc, plain()).await.status(), StatusCode::OK);
    for method in ["GET", "POST"] {
        let req = Request::builder()
            .method(method)
            .version(http::Version::HTTP_11)
            .header("content-type", "application/grpc")
            .body(String::new())
            .unwrap();
        let res = send(&mut svc, req).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{method}");
        assert!(res.headers().get("grpc-status").is_none());
        assert_eq!(header(&res, "cache-control"), "no-store");
        assert_eq!(res.body(), "Too Many Requests\n");
    }
}

#[tokio::test(start_paused = true)]
async fn refusals_are_not_stored_by_caches_and_fallback_answers_are_left_alone() {
    let limit = || RejectLayer::new(Bucket::new(Quota::per_second(1).burst(1)));
    let mut custom = limit()
        .on_reject(|_: &Rejected| Response::new(String::from("slow down")))
        .layer(inner(counter()));
    send(&mut custom, plain()).await;
    let res = send(&mut custom, plain()).await;
    assert_eq!(res.body(), "slow down");
    assert_eq!(header(&res, "cache-control"), "no-store");

    let mut own = limit()
        .on_reject(|_: &Rejected| {
            let mut res = Response::new(String::new());
            res.headers_mut()
                .insert("cache-control", "private, max-age=0".parse().unwrap());
            res
        })
        .layer(inner(counter()));
    send(&mut own, plain()).await;
    let res = send(&mut own, plain()).await;
    assert_eq!(header(&res, "cache-control"), "private, max-age=0");

    let mut fallback = limit().fallback(inner(counter())).layer(inner(counter()));
    send(&mut fallback, plain()).await;
    let res = send(&mut fallback, plain()).await;
    assert_eq!(header(&res, "x-inner"), "1");
    assert!(res.headers().get("cache-control").is_none());
}

#[tokio::test(start_paused = true)]
async fn missing_keys_can_be_allowed_under_the_global_ceiling() {
    let mut svc = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(1)),
        HeaderKey::x_api_key(),
    )
    .global(Bucket::new(Quota::per_minute(3)))
    .on_missing_key(MissingKey::Allow)
    .layer(inner(counter()));
    for _ in 0..3 {
        assert_eq!(send(&mut svc, plain()).await.status(), 200);
    }
    let res = send(&mut svc, plain()).await;
    assert_eq!(
        res.extensions().get::<Rejected>().unwrap().policy(),
        Some("global")
    );
}

#[tokio::test(start_paused = true)]
async fn custom_rejection_response_keeps_the_fields() {
    let mut svc = RejectLayer::new(Bucket::new(Quota::per_minute(1)))
        .on_reject(|rejected: &Rejected| {
            Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header("retry-after", "30")
                .body(format!("wait {:?}", rejected.wait().unwrap_or_default()))
                .unwrap()
        })
        .layer(inner(counter()));
    send(&mut svc, plain()).await;
    let res = send(&mut svc, plain()).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.body(), "wait 60s");
    assert_eq!(
        header(&res, "retry-after"),
        "30",
        "the response's own field wins"
    );
    assert_eq!(header(&res, "ratelimit"), "\"default\";r=0;t=60");
    assert!(res.extensions().get::<Rejected>().is_some());
}

#[tokio::test(start_paused = true)]
async fn fallback_serves_over_limit_requests() {
    let fallback = service_fn(|req: Request<String>| async move {
        let by = req.extensions().get::<Rejected>().and_then(|r| r.policy());
        Ok::<_, Infallible>(Response::new(format!("cached ({by:?})")))
    });
    let calls = counter();
    let mut svc = RejectLayer::new(Bucket::new(Quota::per_minute(1)))
        .fallback(fallback)
        .layer(inner(calls.clone()));
    assert_eq!(send(&mut svc, plain()).await.body(), "ok");
    let res = send(&mut svc, plain()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.body(), "cached (Some(\"default\"))");
    assert!(res.headers().get("retry-after").is_none());
    assert_eq!(header(&res, "ratelimit"), "\"default\";r=0;t=60");
    assert!(res.extensions().get::<Rejected>().is_some());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn bounded_wait_per_key() {
    // One token every 500 ms, no burst beyond one.
    let keyed = KeyedBucket::new(Quota::per_second(2).burst(1));
    let svc = RejectLayer::keyed(keyed, HeaderKey::x_api_key())
        .max_wait(Duration::from_millis(600))
        .layer(inner(counter()));
    let start = Instant::now();
    let first = send(&mut svc.clone(), with_key("a")).await;
    assert_eq!(first.status(), 200);
    // The second fits within 600 ms: it waits its turn, 500 ms.
    let second = tokio::spawn(svc.clone().oneshot(with_key("a")));
    tokio::task::yield_now().await;
    // The third would have to wait 1 s: refused at once, told when it would fit.
    let third = svc.clone().oneshot(with_key("a")).await.unwrap();
    assert_eq!(third.status(), 429);
    assert_eq!(
        third.extensions().get::<Rejected>().unwrap().wait(),
        Some(Duration::from_secs(1))
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    let second = second.await.unwrap().unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_gives_its_turn_back() {
    let keyed = KeyedBucket::new(Quota::per_second(2).burst(1));
    let svc = RejectLayer::keyed(keyed, HeaderKey::x_api_key())
        .max_wait(Duration::from_millis(600))
        .layer(inner(counter()));
    send(&mut svc.clone(), with_key("a")).await;
    let waiting = tokio::spawn(svc.clone().oneshot(with_key("a")));
    tokio::task::yield_now().await;
    waiting.abort(); // the client went away
    let _ = waiting.await;
    // Its 500 ms slot is free again: the next request gets it rather than 1 s.
    let start = Instant::now();
    let res = svc.clone().oneshot(with_key("a")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn bounded_wait_then_the_global_ceiling_refuses_and_refunds_the_key() {
    let keyed = KeyedBucket::new(Quota::per_second(2).burst(1));
    let global = Bucket::new(Quota::per_minute(2));
    let svc = RejectLayer::keyed(keyed.clone(), api_key)
        .global(global)
        .max_wait(Duration::from_secs(1))
        .layer(inner(counter()));
    assert_eq!(send(&mut svc.clone(), with_key("a")).await.status(), 200);
    assert_eq!(send(&mut svc.clone(), with_key("b")).await.status(), 200);
    // "a" waits 500 ms for its key, then meets the global ceiling.
    let start = Instant::now();
    let res = svc.clone().oneshot(with_key("a")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(res.status(), 429);
    assert_eq!(
        res.extensions().get::<Rejected>().unwrap().policy(),
        Some("global")
    );
    // The key's reservation was given back: its bucket is full again.
    assert_eq!(keyed.snapshot(&"a".to_owned()).available, 1);
}

#[tokio::test(start_paused = true)]
async fn bounded_wait_on_a_single_bucket_queues_fairly() {
    let svc = RejectLayer::new(Bucket::new(Quota::per_second(10).burst(1)))
        .max_wait(Duration::from_millis(250))
        .layer(inner(counter()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let res = svc.oneshot(plain()).await.unwrap();
                (res.status().as_u16(), start.elapsed().as_millis())
            })
        })
        .collect();
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    // Now, +100 ms, +200 ms; the next two would wait 300 and 400 ms: refused at once.
    assert_eq!(done, [(200, 0), (200, 100), (200, 200), (429, 0), (429, 0)]);
}

#[tokio::test(start_paused = true)]
async fn poll_ready_forwards_the_inner_service_and_errors_pass_through() {
    let layer = RejectLayer::new(Bucket::new(Quota::per_minute(1)));
    let (mut svc, mut handle) = tower_test::mock::spawn_layer::<Request<String>, Res, _>(layer);

    handle.allow(0);
    assert_pending!(svc.poll_ready());
    handle.allow(2);
    assert_ready_ok!(svc.poll_ready());

    let call = svc.call(plain());
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error(std::io::Error::other("boom"));
    let err = call.await.unwrap_err();
    assert_eq!(err.to_string(), "boom", "the inner error, unchanged");

    // Over the limit: answered without reaching the inner service.
    assert_ready_ok!(svc.poll_ready());
    let res = svc.call(plain()).await.unwrap();
    assert_eq!(res.status(), 429);
    assert!(handle.poll_request().is_pending());
}
