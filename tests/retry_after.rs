//! `RetryAfterLayer`: push-back, coordinated pause, safe retries, the caller sees the truth.

mod support;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use tokio::time::Instant;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_throttle::retry_after::{Jitter, Replay, RetryBudget, RetryInfo};
use tower_throttle::{Bucket, Quota, RateLimitLayer, RetryAfterLayer};

/// A scripted reply: a status with headers, or a transport error.
type Reply = Result<(u16, Vec<(&'static str, String)>), std::io::ErrorKind>;
type Log = Arc<Mutex<Vec<(Duration, Request<String>)>>>;

/// A scripted server: answers from a queue of (status, headers), then 200; logs every request.
#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    log: Log,
    start: Option<Instant>,
}

impl Script {
    fn new(replies: impl IntoIterator<Item = Reply>) -> Self {
        Script {
            replies: Arc::new(Mutex::new(replies.into_iter().collect())),
            log: Default::default(),
            start: Some(Instant::now()),
        }
    }

    fn service(
        &self,
    ) -> impl Service<
        Request<String>,
        Response = Response<String>,
        Error = std::io::Error,
        Future = impl Send,
    > + Clone
           + Send {
        let this = self.clone();
        service_fn(move |req: Request<String>| {
            let reply = this.replies.lock().unwrap().pop_front();
            this.log
                .lock()
                .unwrap()
                .push((this.start.unwrap().elapsed(), req));
            async move {
                match reply {
                    None => Ok(Response::new("ok".to_string())),
                    Some(Err(kind)) => Err(std::io::Error::from(kind)),
                    Some(Ok((status, headers))) => {
                        let mut resp = Response::new(String::new());
                        *resp.status_mut() = StatusCode::from_u16(status).unwrap();
                        for (k, v) in headers {
                            resp.headers_mut().append(k, v.parse().unwrap());
                        }
                        Ok(resp)
                    }
                }
            }
        })
    }

    fn times(&self) -> Vec<Duration> {
        self.log.lock().unwrap().iter().map(|x| x.0).collect()
    }
}

fn reply(status: u16, headers: &[(&'static str, &str)]) -> Reply {
    Ok((
        status,
        headers.iter().map(|(k, v)| (*k, v.to_string())).collect(),
    ))
}

fn get() -> Request<String> {
    Request::get("http://api.test/items")
        .body(String::new())
        .unwrap()
}

fn post() -> Request<String> {
    Request::post("http://api.test/items")
        .body("{}".to_string())
        .unwrap()
}

fn stack(
    bucket: &Bucket,
    layer: RetryAfterLayer,
    script: &Script,
) -> impl Service<Request<String>, Response = Response<String>, Error = BoxError, Future = impl Send>
       + Clone
       + Send
       + 'static {
    ServiceBuilder::new()
        .layer(layer)
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(script.service())
}

fn quiet(bucket: &Bucket) -> RetryAfterLayer {
    RetryAfterLayer::new(bucket.clone())
        .retry_after_jitter(Duration::ZERO)
        .backoff(
            Duration::from_millis(100),
            Duration::from_secs(10),
            Jitter::None,
        )
}

fn info(resp: &Response<String>) -> RetryInfo {
    *resp.extensions().get::<RetryInfo>().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_1_is_retried_exactly_1s_later() {
    let bucket = Bucket::new(Quota::per_second(10));
    let script = Script::new([reply(429, &[("retry-after", "1")]), reply(201, &[])]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert_eq!(info(&resp).attempts(), 2);
    assert_eq!(script.times(), [Duration::ZERO, Duration::from_secs(1)]);
}

#[tokio::test(start_paused = true)]
async fn semantic_4_retry_after_is_a_floor_jitter_only_adds() {
    for _ in 0..20 {
        let bucket = Bucket::new(Quota::per_second(10));
        let script = Script::new([reply(429, &[("retry-after", "1")])]);
        let layer =
            RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::from_millis(500));
        stack(&bucket, layer, &script).oneshot(get()).await.unwrap();
        let t = script.times()[1];
        assert!(
            t >= Duration::from_secs(1),
            "retried before the cooldown: {t:?}"
        );
        assert!(t <= Duration::from_millis(1_501), "{t:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn fifty_workers_hold_together_during_one_429() {
    let quota = Quota::per_second(50).burst(5);
    let bucket = Bucket::new(quota);
    // The 8th request the server sees is refused for 2 s.
    let mut replies: Vec<_> = (0..7).map(|_| reply(200, &[])).collect();
    replies.push(reply(429, &[("retry-after", "2")]));
    let script = Script::new(replies);
    let svc = stack(&bucket, quiet(&bucket), &script);
    let workers: Vec<_> = (0..50)
        .map(|_| tokio::spawn(svc.clone().oneshot(get())))
        .collect();
    for w in workers {
        assert!(w.await.unwrap().unwrap().status().is_success());
    }
    let times = script.times();
    assert_eq!(times.len(), 51); // 50 requests + 1 retry
    let refused_at = times[7];
    let during: Vec<_> = times
        .iter()
        .filter(|t| **t > refused_at && **t < refused_at + Duration::from_secs(2))
        .collect();
    assert!(
        during.is_empty(),
        "requests reached the server during the cooldown: {during:?}"
    );
    // And the restart is paced, not a burst: from an empty bucket, one per interval.
    support::assert_rate_bound(
        &times
            .iter()
            .filter(|t| **t >= refused_at + Duration::from_secs(2))
            .map(|t| (*t, 1))
            .collect::<Vec<_>>(),
        Quota::per_second(50).burst(1),
    );
}

#[tokio::test(start_paused = true)]
async fn http_date_is_measured_against_the_servers_date_header() {
    // The server's clock is a day behind ours: only the difference of its two dates counts.
    let server_now = SystemTime::now() - Duration::from_secs(86_400);
    let date = httpdate::fmt_http_date(server_now);
    let retry = httpdate::fmt_http_date(server_now + Duration::from_secs(3));
    let bucket = Bucket::new(Quota::per_second(10));
    let script = Script::new([reply(503, &[("date", &date), ("retry-after", &retry)])]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(script.times()[1], Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn each_http_date_form_and_a_past_date() {
    let forms = [
        "Sun, 06 Nov 1994 08:49:40 GMT",
        "Sunday, 06-Nov-94 08:49:40 GMT",
        "Sun Nov  6 08:49:40 1994",
    ];
    for form in forms {
        let bucket = Bucket::new(Quota::per_second(10));
        let script = Script::new([reply(
            429,
            &[
                ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ("retry-after", form),
            ],
        )]);
        stack(&bucket, quiet(&bucket), &script)
            .oneshot(get())
            .await
            .unwrap();
        assert_eq!(script.times()[1], Duration::from_secs(3), "{form}");
    }
    // A date in the past (no Date header; local clock): retry at once.
    let bucket = Bucket::new(Quota::per_second(10));
    let script = Script::new([reply(
        429,
        &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")],
    )]);
    stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(script.times(), [Duration::ZERO, Duration::ZERO]);
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_over_the_cap_returns_the_429_at_once() {
    let bucket = Bucket::new(Quota::per_second(10));
    let script = Script::new([reply(429, &[("retry-after", "86400")])]);
    let start = Instant::now();
    let resp = stack(
        &bucket,
        quiet(&bucket).max_retry_after(Duration::from_secs(60)),
        &script,
    )
    .oneshot(get())
    .await
    .unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "86400");
    assert_eq!(info(&resp).cooldown(), Some(Duration::from_secs(86_400)));
    assert_eq!(script.times().len(), 1);
    // Absurd values too: far-future dates, huge numbers.
    for absurd in ["99999999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"] {
        let script = Script::new([reply(429, &[("retry-after", absurd)])]);
        let resp = stack(&bucket, quiet(&bucket), &script)
            .oneshot(get())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(script.times().len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn an_endless_cooldown_under_an_endless_cap_waits_without_overflowing() {
    for endless in ["99999999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"] {
        let bucket = Bucket::new(Quota::per_second(10));
        let layer = RetryAfterLayer::new(bucket.clone())
            .retry_after_jitter(Duration::from_secs(1))
            .max_retry_after(Duration::MAX);
        let script = Script::new([reply(429, &[("retry-after", endless)]), reply(200, &[])]);
        let call = stack(&bucket, layer.clone(), &script).oneshot(get());
        let year = Duration::from_secs(365 * 24 * 3600);
        assert!(tokio::time::timeout(year, call).await.is_err(), "{endless}");
        assert_eq!(script.times().len(), 1, "{endless}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_caller_sees_the_last_real_response() {
    let bucket = Bucket::new(Quota::per_second(10));
    let script = Script::new((0..10).map(|_| reply(429, &[("retry-after", "1")])));
    let resp = stack(&bucket, quiet(&bucket).max_retries(2), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(info(&resp).attempts(), 3);
    assert_eq!(script.times(), [0, 1, 2].map(Duration::from_secs));
}

#[tokio::test(start_paused = true)]
async fn server_errors_back_off_exponentially_other_4xx_are_final() {
    let bucket = Bucket::new(Quota::per_second(100));
    let script = Script::new((0..3).map(|_| reply(500, &[])));
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        script.times(),
        [0, 100, 300, 700].map(Duration::from_millis)
    );

    let script = Script::new([reply(404, &[]), reply(200, &[])]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(script.times().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn post_after_a_429_is_retried_but_not_after_a_5xx_or_a_reset() {
    let bucket = Bucket::new(Quota::per_second(100));
    let script = Script::new([reply(429, &[("retry-after", "1")])]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(post())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(script.times().len(), 2);

    let script = Script::new([reply(502, &[])]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(post())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(script.times().len(), 1);

    let script = Script::new([Err(std::io::ErrorKind::ConnectionReset)]);
    let err = stack(&bucket, quiet(&bucket), &script)
        .oneshot(post())
        .await
        .unwrap_err();
    assert_eq!(
        err.downcast_ref::<std::io::Error>().unwrap().kind(),
        std::io::ErrorKind::ConnectionReset
    );
    assert_eq!(script.times().len(), 1);

    // A connection that was never made is retried for any method.
    let script = Script::new([Err(std::io::ErrorKind::ConnectionRefused)]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(post())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(script.times().len(), 2);

    // GET after a reset: idempotent, retried.
    let script = Script::new([Err(std::io::ErrorKind::ConnectionReset)]);
    stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(script.times().len(), 2);

    // Opt in to retrying non-idempotent requests.
    let script = Script::new([reply(502, &[])]);
    let layer = quiet(&bucket).retry_non_idempotent(true);
    stack(&bucket, layer, &script)
        .oneshot(post())
        .await
        .unwrap();
    assert_eq!(script.times().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn retries_are_identical_re_sends() {
    #[derive(Clone, Debug, PartialEq)]
    struct TraceId(u64);
    let bucket = Bucket::new(Quota::per_second(100));
    let script = Script::new([reply(503, &[("retry-after", "0")])]);
    let mut req = Request::put("http://api.test/items/7?x=1")
        .version(Version::HTTP_2)
        .header("authorization", "Bearer t")
        .header("x-multi", "a")
        .header("x-multi", "b")
        .body("payload".to_string())
        .unwrap();
    req.extensions_mut().insert(TraceId(42));
    stack(&bucket, quiet(&bucket), &script)
        .oneshot(req)
        .await
        .unwrap();
    let log = script.log.lock().unwrap();
    assert_eq!(log.len(), 2);
    let (a, b) = (&log[0].1, &log[1].1);
    assert_eq!(a.method(), b.method());
    assert_eq!(a.uri(), b.uri());
    assert_eq!(a.version(), b.version());
    assert_eq!(a.headers(), b.headers());
    assert_eq!(a.body(), b.body());
    assert_eq!(b.extensions().get::<TraceId>(), Some(&TraceId(42)));
}

/// A request whose body streams: it can be sent only once.
struct Streaming(Request<String>);

impl Replay for Streaming {
    fn replay(&self) -> Option<Self> {
        None
    }
    fn method(&self) -> &Method {
        self.0.method()
    }
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_is_never_re_sent() {
    let bucket = Bucket::new(Quota::per_second(100));
    let sent = Arc::new(Mutex::new(0));
    let inner = service_fn({
        let sent = sent.clone();
        move |_req: Streaming| {
            *sent.lock().unwrap() += 1;
            async {
                let mut resp = Response::new(String::new());
                *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                resp.headers_mut()
                    .insert("retry-after", "1".parse().unwrap());
                Ok::<_, Infallible>(resp)
            }
        }
    });
    let svc = ServiceBuilder::new().layer(quiet(&bucket)).service(inner);
    let resp = svc.oneshot(Streaming(get())).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(*sent.lock().unwrap(), 1);
    // The bucket is still paused for everyone else.
    assert!(bucket.try_acquire(1).is_err());
}

#[tokio::test(start_paused = true)]
async fn quota_headers_slow_down_before_the_429() {
    let bucket = Bucket::new(Quota::per_second(100));
    let script = Script::new([reply(
        200,
        &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "5")],
    )]);
    let svc = stack(&bucket, quiet(&bucket), &script);
    svc.clone().oneshot(get()).await.unwrap();
    let start = Instant::now();
    svc.oneshot(get()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));

    // IETF draft field.
    let bucket = Bucket::new(Quota::per_second(100));
    let script = Script::new([reply(200, &[("ratelimit", "\"default\";r=0;t=7")])]);
    stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(
        bucket.snapshot().paused_until,
        Some(Instant::now() + Duration::from_secs(7))
    );

    // Malformed or absurd values are never trusted into a pause.
    let bucket = Bucket::new(Quota::per_second(100));
    for (k, v) in [
        ("x-ratelimit-reset", "9999999999999"),
        ("x-ratelimit-reset", "soon"),
    ] {
        let script = Script::new([reply(200, &[("x-ratelimit-remaining", "0"), (k, v)])]);
        stack(&bucket, quiet(&bucket), &script)
            .oneshot(get())
            .await
            .unwrap();
        assert_eq!(bucket.snapshot().paused_until, None, "{v}");
    }
}

#[tokio::test(start_paused = true)]
async fn github_style_403_with_remaining_0_is_a_push_back() {
    let bucket = Bucket::new(Quota::per_second(100));
    let wall = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
    };
    let before = wall();
    let reset = before.as_secs() + 4;
    let script = Script::new([reply(
        403,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &reset.to_string()),
        ],
    )]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(post())
        .await
        .unwrap();
    let after = wall();
    assert_eq!(resp.status(), StatusCode::OK);
    // The reset is read against the wall clock when the 403 comes, between `before` and
    // `after` (paused tokio time: the wait itself takes none of it); 1 ms for the timer.
    let reset = Duration::from_secs(reset);
    let t = script.times()[1];
    assert!(
        t >= reset - after && t <= reset - before + Duration::from_millis(1),
        "{t:?}, the reset {:?} to {:?} away",
        reset - after,
        reset - before
    );
    // A plain 403 is final.
    let script = Script::new([reply(403, &[])]);
    let resp = stack(&bucket, quiet(&bucket), &script)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
}

#[tokio::test(start_paused = true)]
async fn the_budget_stops_a_retry_storm() {
    let bucket = Bucket::new(Quota::per_second(1000));
    let layer = quiet(&bucket)
        .max_retries(5)
        .budget(Some(RetryBudget::new(0.0, 3)));
    let script = Script::new((0..100).map(|_| reply(500, &[])));
    let svc = stack(&bucket, layer, &script);
    for _ in 0..3 {
        svc.clone().oneshot(get()).await.unwrap();
    }
    // 3 requests, 3 retries in all: the reserve, then nothing.
    assert_eq!(script.times().len(), 6);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_whole_request() {
    let bucket = Bucket::new(Quota::per_second(100));
    let script = Script::new((0..10).map(|_| reply(503, &[("retry-after", "2")])));
    let start = Instant::now();
    let resp = stack(
        &bucket,
        quiet(&bucket)
            .max_retries(10)
            .deadline(Duration::from_secs(5)),
        &script,
    )
    .oneshot(get())
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(start.elapsed(), Duration::from_secs(4));
    assert_eq!(script.times().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn missing_or_invalid_retry_after_uses_the_default_cooldown() {
    for headers in [vec![], vec![("retry-after", "soon")]] {
        let bucket = Bucket::new(Quota::per_second(100));
        let script = Script::new([reply(429, &headers)]);
        let layer = quiet(&bucket).default_cooldown(Duration::from_secs(3));
        stack(&bucket, layer, &script).oneshot(get()).await.unwrap();
        assert_eq!(script.times()[1], Duration::from_secs(3));
    }
    let _ = HeaderMap::new();
}

/// Only a push-back that means "not processed" is resent for a non-idempotent method.
#[tokio::test(start_paused = true)]
async fn only_unprocessed_push_backs_resend_a_post() {
    let bucket = Bucket::new(Quota::per_second(100));
    let with_403 = || {
        quiet(&bucket).push_back([
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::FORBIDDEN,
        ])
    };
    let sends = |layer: RetryAfterLayer, status: u16, headers: &[(&'static str, &str)], req| {
        let script = Script::new([reply(status, headers)]);
        let svc = stack(&bucket, layer, &script);
        async move {
            let resp = svc.oneshot(req).await.unwrap();
            (resp.status().as_u16(), script.times().len())
        }
    };
    // A 403 added to the push-back set: a POST is final, a GET is resent.
    assert_eq!(sends(with_403(), 403, &[], post()).await, (403, 1));
    // ... though the 403 still paused the bucket (1 s default cooldown) for everyone.
    assert_eq!(
        bucket.snapshot().paused_until,
        Some(Instant::now() + Duration::from_secs(1))
    );
    assert_eq!(sends(with_403(), 403, &[], get()).await, (200, 2));
    // The explicit opt-in: a 403 this server only sends unprocessed requests.
    let opted = quiet(&bucket).push_back_unprocessed([StatusCode::FORBIDDEN]);
    assert_eq!(sends(opted, 403, &[], post()).await, (200, 2));
    // So does retry_non_idempotent, for every push-back.
    let all = with_403().retry_non_idempotent(true);
    assert_eq!(sends(all, 403, &[], post()).await, (200, 2));
    // 429: never processed, resent for any method.
    assert_eq!(sends(quiet(&bucket), 429, &[], post()).await, (200, 2));
    // 503 with Retry-After: the server names when to come back, resent for any method.
    let ra = [("retry-after", "1")];
    assert_eq!(sends(quiet(&bucket), 503, &ra, post()).await, (200, 2));
    // 503 without it may be a failure after processing: only idempotent methods.
    assert_eq!(sends(quiet(&bucket), 503, &[], post()).await, (503, 1));
    assert_eq!(sends(quiet(&bucket), 503, &[], get()).await, (200, 2));
    // An unparseable Retry-After is not a Retry-After.
    let bad = [("retry-after", "soon")];
    assert_eq!(sends(quiet(&bucket), 503, &bad, post()).await, (503, 1));
}
