//! gRPC end to end over loopback: real tonic servers and clients on 127.0.0.1, with a
//! hand-written codec and service (no protoc).
#![cfg(feature = "grpc")]

#[path = "../examples/grpc_support/mod.rs"]
mod grpc_support;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use grpc_support::{say, Arrival, Echo, StringCodec, COLLECT, SAY};
use http::uri::PathAndQuery;
use tonic::body::Body;
use tonic::client::Grpc;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Status};
use tower::util::MapRequest;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_throttle::extract::HeaderKey;
use tower_throttle::grpc::{GrpcRetry, GrpcRetryLayer};
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::observe::Observer;
use tower_throttle::retry_after::{Jitter, RetryBudget, RetryInfo};
use tower_throttle::{Bucket, Quota, RateLimit, RateLimitLayer, RejectLayer, RetryAfterLayer};

/// Serves `echo` behind `server` (a `Server` builder, layered or not) on a free port.
macro_rules! serve {
    ($server:expr, $echo:expr) => {{
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn($server.add_service($echo).serve_with_incoming(incoming));
        connect(format!("http://{addr}")).await
    }};
}

async fn connect(url: String) -> Channel {
    Endpoint::from_shared(url).unwrap().connect().await.unwrap()
}

/// What a bucket or a rejecting layer reported: refusals' waits, pauses.
#[derive(Debug, Default)]
struct Reports {
    refused: Mutex<Vec<Duration>>,
    paused: Mutex<Vec<(Instant, Duration)>>,
}

impl Observer for Reports {
    fn refused(&self, _: u32, wait: Duration, _: bool) {
        self.refused.lock().unwrap().push(wait);
    }

    fn paused(&self, cooldown: Duration) {
        self.paused.lock().unwrap().push((Instant::now(), cooldown));
    }
}

fn pushback_ms(status: &Status) -> Option<&str> {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")?
        .to_str()
        .ok()
}

fn ceil_ms(d: Duration) -> u128 {
    d.as_nanos().div_ceil(1_000_000)
}

fn push_back(ms: &str) -> Status {
    let mut meta = tonic::metadata::MetadataMap::new();
    meta.insert("grpc-retry-pushback-ms", ms.parse().unwrap());
    Status::with_metadata(Code::ResourceExhausted, "slow down", meta)
}

/// An echo service that pushes its first call back for `ms` milliseconds.
fn pushed_back_once(ms: &'static str) -> Echo {
    Echo::answering(move |n, _| if n == 0 { Err(push_back(ms)) } else { Ok(()) })
}

/// A tonic client on `channel` behind the retry layer and the rate limit of `bucket`,
/// stamping each call with the instant it leaves the stack (`x-sent-us`, since [`origin`]).
fn retrying(channel: Channel, bucket: &Bucket, retry: GrpcRetryLayer) -> Client {
    let stack = ServiceBuilder::new()
        .layer(retry)
        .layer(RateLimitLayer::new(bucket.clone()))
        .map_request(stamp as Stamp)
        .service(channel);
    Grpc::new(stack)
}

type Stamp = fn(http::Request<Body>) -> http::Request<Body>;
type Client = Grpc<GrpcRetry<RateLimit<MapRequest<Channel, Stamp>>>>;

fn stamp(mut req: http::Request<Body>) -> http::Request<Body> {
    let us = origin().elapsed().as_micros().to_string();
    req.headers_mut().insert("x-sent-us", us.parse().unwrap());
    req
}

/// Drives `svc` to readiness and calls it.
async fn send<S: Service<R>, R>(svc: &mut S, req: R) -> S::Response
where
    S::Error: std::fmt::Debug,
{
    svc.ready().await.unwrap();
    svc.call(req).await.unwrap()
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn since_origin(at: Instant) -> Duration {
    at.duration_since(origin())
}

#[tokio::test]
async fn over_the_limit_a_grpc_client_sees_resource_exhausted_with_the_servers_wait() {
    let reports = Arc::new(Reports::default());
    let limit = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(2)),
        HeaderKey::x_api_key(),
    )
    .global(Bucket::new(Quota::per_second(1000)))
    .grpc()
    .observer(reports.clone());
    let echo = Echo::new();
    let channel = serve!(Server::builder().layer(limit), echo.clone());
    // Every HTTP response the client receives, before tonic reads it.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = ServiceBuilder::new()
        .map_response({
            let seen = seen.clone();
            move |res: http::Response<Body>| {
                let status = res.headers().get("grpc-status").cloned();
                seen.lock().unwrap().push((res.status(), status));
                res
            }
        })
        .service(channel);
    let mut client = Grpc::new(recorded);

    for _ in 0..2 {
        let ok = say(&mut client, "hi", &[("x-api-key", "alice")])
            .await
            .unwrap();
        assert_eq!(ok.into_inner(), "hi");
    }
    let refused = say(&mut client, "hi", &[("x-api-key", "alice")])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "rate limit exceeded");
    let wait = *reports.refused.lock().unwrap().last().unwrap();
    assert!(
        wait > Duration::from_secs(29) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );
    assert_eq!(
        pushback_ms(&refused).unwrap(),
        ceil_ms(wait).to_string(),
        "push-back = the server's wait, rounded up to the ms"
    );
    // Another key has its own bucket.
    say(&mut client, "hi", &[("x-api-key", "bob")])
        .await
        .unwrap();
    assert_eq!(
        echo.arrivals().len(),
        3,
        "the refused call never reached the service"
    );

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter().all(|(http, _)| *http == http::StatusCode::OK),
        "no HTTP 429 reaches a gRPC client: {seen:?}"
    );
    assert_eq!(seen[2].1.as_ref().unwrap(), "8");
    println!(
        "refused after 2 calls: wait {wait:?}, grpc-retry-pushback-ms {}",
        pushback_ms(&refused).unwrap()
    );
}

#[tokio::test]
async fn calls_are_keyed_by_their_authorization_metadata() {
    let limit = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_minute(1)),
        HeaderKey::authorization(),
    )
    .grpc();
    let channel = serve!(Server::builder().layer(limit), Echo::new());
    let mut client = Grpc::new(channel);
    let a = [("authorization", "Bearer a")];
    say(&mut client, "1", &a).await.unwrap();
    let refused = say(&mut client, "2", &a).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(pushback_ms(&refused).unwrap().parse::<u64>().unwrap() > 59_000);
    say(&mut client, "3", &[("authorization", "Bearer b")])
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn plain_http_keeps_its_429_and_grpc_gets_a_trailers_only_answer() {
    use http_body::Body as _;
    let grpc_req = || {
        http::Request::builder()
            .method("POST")
            .version(http::Version::HTTP_2)
            .header("content-type", "application/grpc+proto")
            .body(String::new())
            .unwrap()
    };
    let http_req = || http::Request::new(String::new());

    // The default rejection, for bodies made from text (axum's).
    let mut svc = ServiceBuilder::new()
        .layer(RejectLayer::new(Bucket::new(Quota::per_second(4).burst(1))))
        .service(service_fn(|_: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
        }));
    send(&mut svc, http_req()).await;
    let plain = send(&mut svc, http_req()).await;
    assert_eq!(plain.status(), 429);
    assert_eq!(plain.headers()["retry-after"], "1");
    assert_eq!(plain.body(), "Too Many Requests\n");
    let grpc = send(&mut svc, grpc_req()).await;
    assert_eq!(grpc.status(), 200);
    assert_eq!(grpc.headers()["content-type"], "application/grpc");
    assert_eq!(grpc.headers()["grpc-status"], "8");
    assert_eq!(grpc.headers()["grpc-retry-pushback-ms"], "250");
    assert!(
        grpc.body().is_end_stream(),
        "trailers-only: the headers end the stream"
    );

    // The gRPC rejection, for tonic's body (which has no text form).
    let mut svc = ServiceBuilder::new()
        .layer(RejectLayer::new(Bucket::new(Quota::per_second(4).burst(1))).grpc())
        .service(service_fn(|_: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
        }));
    send(&mut svc, grpc_req()).await;
    tokio::time::advance(Duration::from_millis(100)).await;
    let grpc = send(&mut svc, grpc_req()).await;
    assert_eq!(grpc.status(), 200);
    assert_eq!(grpc.headers()["grpc-status"], "8");
    assert_eq!(grpc.headers()["grpc-retry-pushback-ms"], "150");
    assert_eq!(grpc.headers()["cache-control"], "no-store");
    assert!(grpc.body().is_end_stream());
    let plain = send(&mut svc, http_req()).await;
    assert_eq!(plain.status(), 429);
    assert_eq!(plain.headers()["cache-control"], "no-store");
    assert!(plain.body().is_end_stream());
}

#[tokio::test(start_paused = true)]
async fn a_get_or_http1_request_with_a_grpc_content_type_gets_a_429_from_the_grpc_rejection() {
    let mut svc = ServiceBuilder::new()
        .layer(RejectLayer::new(Bucket::new(Quota::per_second(1).burst(1))).grpc())
        .service(service_fn(|_: http::Request<Body>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
        }));
    send(&mut svc, grpc_call()).await;
    let get_h1 = http::Request::builder()
        .method("GET")
        .version(http::Version::HTTP_11)
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap();
    let get_h2 = http::Request::builder()
        .method("GET")
        .version(http::Version::HTTP_2)
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap();
    let post_h1 = http::Request::builder()
        .method("POST")
        .version(http::Version::HTTP_11)
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap();
    for req in [get_h1, get_h2, post_h1] {
        let res = send(&mut svc, req).await;
        assert_eq!(res.status(), 429);
        assert!(res.headers().get("grpc-status").is_none());
        assert_eq!(res.headers()["cache-control"], "no-store");
    }
}

// One thread (tokio's test default): between a worker's admission and the instant its call is
// stamped no other task runs, so a stamp inside the pause would be an admission inside it.
#[tokio::test]
async fn twenty_workers_hold_for_one_push_back_then_all_succeed() {
    const WORKERS: usize = 20;
    const CALLS: usize = 10;
    let echo = pushed_back_once("1000");
    let channel = serve!(Server::builder(), echo.clone());
    let reports = Arc::new(Reports::default());
    let bucket = Bucket::builder(Quota::per_second(200).burst(20))
        .observer(reports.clone())
        .build();
    let retry = RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO);
    let client = retrying(channel, &bucket, retry.grpc());

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let mut client = client.clone();
            tokio::spawn(async move {
                for i in 0..CALLS {
                    let msg = format!("{w}-{i}");
                    let reply = say(&mut client, &msg, &[]).await?;
                    assert_eq!(reply.into_inner(), msg);
                }
                Ok::<_, Status>(())
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap().expect("every call succeeds");
    }

    let paused = reports.paused.lock().unwrap().clone();
    assert_eq!(paused.len(), 1, "one push-back, one pause");
    let (at, cooldown) = paused[0];
    assert_eq!(cooldown, Duration::from_secs(1));
    let start = since_origin(at);
    let end = start + cooldown;
    let arrivals = echo.arrivals();
    assert_eq!(
        arrivals.len(),
        WORKERS * CALLS + 1,
        "every call once, the pushed-back one twice"
    );
    let mut in_flight = 0;
    let mut first_after = None::<Duration>;
    for a in &arrivals {
        let sent = Duration::from_micros(a.sent_us.unwrap());
        let arrived = since_origin(a.at);
        assert!(
            sent < start || sent >= end,
            "a call left the client {:?} into the pause",
            sent - start
        );
        if arrived >= start && arrived < end {
            assert!(
                sent < start,
                "only calls already on their way arrive during the pause"
            );
            in_flight += 1;
        }
        if sent >= start {
            first_after = Some(first_after.map_or(arrived, |f| f.min(arrived)));
        }
    }
    let first_after = first_after.unwrap();
    assert!(first_after >= end);
    println!(
        "{} calls from {WORKERS} workers; pause of {cooldown:?}; {in_flight} calls already in flight arrived during it; \
         first call sent after it arrived {:?} after the pause began",
        arrivals.len(),
        first_after - start
    );
}

#[tokio::test]
async fn a_negative_or_malformed_push_back_is_not_retried() {
    for (value, name) in [
        ("-1", "negative"),
        ("soon", "malformed"),
        ("2147483648", "out of range"),
    ] {
        let value = value.to_string();
        let echo = Echo::answering(move |_, _| Err(push_back(&value)));
        let channel = serve!(Server::builder(), echo.clone());
        let reports = Arc::new(Reports::default());
        let bucket = Bucket::builder(Quota::per_second(100))
            .observer(reports.clone())
            .build();
        let retry = RetryAfterLayer::new(bucket.clone()).max_retries(5);
        let mut client = retrying(channel, &bucket, retry.grpc());
        let status = say(&mut client, "hi", &[]).await.unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{name}");
        assert_eq!(echo.arrivals().len(), 1, "{name} push-back: not retried");
        assert!(
            reports.paused.lock().unwrap().is_empty(),
            "{name}: no pause"
        );
    }
}

#[tokio::test]
async fn a_streaming_call_is_never_resent_after_its_first_message() {
    let echo = Echo::answering(|_, a| {
        if a.method == COLLECT || a.message == "first" {
            Err(push_back("10"))
        } else {
            Ok(())
        }
    });
    let channel = serve!(Server::builder(), echo.clone());
    let bucket = Bucket::new(Quota::per_second(100));
    let retry = RetryAfterLayer::new(bucket.clone())
        .max_retries(3)
        .retry_after_jitter(Duration::ZERO);
    let mut client = retrying(channel, &bucket, retry.grpc());
    let collect = PathAndQuery::from_static(COLLECT);

    // A stream still open when the server answers: its first message was sent.
    let (tx, rx) = futures::channel::mpsc::unbounded::<String>();
    tx.unbounded_send("a".into()).unwrap();
    client.ready().await.unwrap();
    let status = client
        .client_streaming(tonic::Request::new(rx), collect.clone(), StringCodec)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    drop(tx);
    assert_eq!(echo.arrivals().len(), 1, "the open stream was not resent");

    // A stream whose two messages were all ready: still a stream, sent once.
    client.ready().await.unwrap();
    let two = futures::stream::iter(["b".to_string(), "c".to_string()]);
    let status = client
        .client_streaming(tonic::Request::new(two), collect, StringCodec)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        echo.arrivals().len(),
        2,
        "the two-message stream was not resent"
    );

    // The control: a unary call pushed back the same way is resent.
    let reply = say(&mut client, "first", &[]).await.unwrap_err();
    assert_eq!(
        reply.code(),
        Code::ResourceExhausted,
        "pushed back on every attempt"
    );
    let unary: Vec<Arrival> = echo
        .arrivals()
        .into_iter()
        .filter(|a| a.method == SAY)
        .collect();
    assert_eq!(unary.len(), 4, "a unary call is resent: 1 + 3 retries");
    let previous: Vec<_> = unary.iter().map(|a| a.previous_attempts).collect();
    assert_eq!(
        previous,
        [None, Some(1), Some(2), Some(3)],
        "A6 grpc-previous-rpc-attempts"
    );
}

#[tokio::test]
async fn retry_throttling_stops_retries_while_the_server_fails_and_resumes_after_successes() {
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let echo = Echo::answering({
        let failing = failing.clone();
        move |_, _| {
            if failing.load(std::sync::atomic::Ordering::SeqCst) {
                Err(Status::unavailable("down"))
            } else {
                Ok(())
            }
        }
    });
    let channel = serve!(Server::builder(), echo.clone());
    let bucket = Bucket::new(Quota::per_second(10_000).burst(100));
    let throttle = RetryBudget::a6(10, 0.1);
    let retry = RetryAfterLayer::new(bucket.clone())
        .max_retries(100)
        .backoff(
            Duration::from_millis(1),
            Duration::from_millis(1),
            Jitter::None,
        )
        .budget(None)
        .grpc()
        .retry_throttle(throttle.clone());
    let mut client = retrying(channel, &bucket, retry);
    let attempts = |before: usize| echo.arrivals().len() - before;

    // 10 tokens; each failure takes one; retries only while tokens > 5.
    let status = say(&mut client, "x", &[]).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(attempts(0), 5, "10 → 9, 8, 7, 6 (retried) → 5 (stop)");
    assert_eq!(throttle.tokens(), 5.0);
    say(&mut client, "x", &[]).await.unwrap_err();
    assert_eq!(attempts(5), 1, "at or below half: no retry");
    assert_eq!(throttle.tokens(), 4.0);

    // Successes give back 0.1 each: 21 of them lift 4 to 6.1.
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    for _ in 0..21 {
        say(&mut client, "ok", &[]).await.unwrap();
    }
    assert!(
        (throttle.tokens() - 6.1).abs() < 1e-9,
        "{}",
        throttle.tokens()
    );
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let before = echo.arrivals().len();
    say(&mut client, "x", &[]).await.unwrap_err();
    assert_eq!(attempts(before), 2, "6.1 → 5.1 (retried) → 4.1 (stop)");
    println!(
        "100 % failures: 5 attempts, then 1; after 21 successes (tokens 6.1) 2 attempts; tokens now {}",
        throttle.tokens()
    );
}

/// A call that reached a [`scripted`] server: when, and the `grpc-timeout` it carried.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    at: tokio::time::Instant,
    timeout: Option<String>,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// An in-process gRPC server answering call `n` (from 0) with the trailers-only status
/// `answer(n)` returns (`None`: a normal response, with headers), recording each call in
/// `calls`.
fn scripted(
    calls: &Calls,
    answer: impl Fn(usize) -> Option<(Code, Option<&'static str>)> + Clone + Send + 'static,
) -> impl Service<
    http::Request<Body>,
    Response = http::Response<Body>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    let calls = calls.clone();
    service_fn(move |req: http::Request<Body>| {
        let n = {
            let mut calls = calls.lock().unwrap();
            calls.push(Call {
                at: tokio::time::Instant::now(),
                timeout: grpc_timeout(req.headers()),
            });
            calls.len() - 1
        };
        let answer = answer(n);
        async move {
            let mut res = http::Response::new(Body::empty());
            let h = res.headers_mut();
            h.insert("content-type", "application/grpc".parse().unwrap());
            if let Some((code, pushback)) = answer {
                h.insert("grpc-status", (code as i32).into());
                if let Some(ms) = pushback {
                    h.insert("grpc-retry-pushback-ms", ms.parse().unwrap());
                }
            }
            Ok(res)
        }
    })
}

fn grpc_call() -> http::Request<Body> {
    http::Request::builder()
        .method("POST")
        .version(http::Version::HTTP_2)
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap()
}

fn grpc_call_within(timeout: &str) -> http::Request<Body> {
    let mut call = grpc_call();
    call.headers_mut()
        .insert("grpc-timeout", timeout.parse().unwrap());
    call
}

fn grpc_timeout(headers: &http::HeaderMap) -> Option<String> {
    let value = headers.get("grpc-timeout")?;
    Some(value.to_str().unwrap().to_owned())
}

#[tokio::test(start_paused = true)]
async fn unavailable_with_a_push_back_is_retried_exactly_after_it() {
    let calls = Calls::default();
    let server = scripted(&calls, |n| {
        (n == 0).then_some((Code::Unavailable, Some("200")))
    });
    let bucket = Bucket::new(Quota::per_second(100));
    let client = ServiceBuilder::new()
        .layer(
            RetryAfterLayer::new(bucket.clone())
                .retry_after_jitter(Duration::ZERO)
                .grpc(),
        )
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(server);
    let res = client.oneshot(grpc_call()).await.unwrap();
    assert!(res.headers().get("grpc-status").is_none());
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].at - calls[0].at, Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn only_the_retryable_codes_are_retried() {
    let internal = |_| Some((Code::Internal, None));
    let bucket = Bucket::new(Quota::per_second(100));
    let throttle = RetryBudget::a6(10, 0.1);
    let retry = RetryAfterLayer::new(bucket.clone()).backoff(
        Duration::from_millis(10),
        Duration::from_millis(10),
        Jitter::None,
    );

    let calls = Calls::default();
    let server = scripted(&calls, internal);
    let res = retry
        .clone()
        .grpc()
        .retry_throttle(throttle.clone())
        .layer(server)
        .oneshot(grpc_call())
        .await
        .unwrap();
    assert_eq!(res.headers()["grpc-status"], "13");
    assert_eq!(
        calls.lock().unwrap().len(),
        1,
        "INTERNAL is not in the default set"
    );
    assert_eq!(
        throttle.tokens(),
        10.0,
        "nor is it a failure for the throttle (A6)"
    );

    let calls = Calls::default();
    let server = scripted(&calls, internal);
    let res = retry
        .max_retries(2)
        .grpc()
        .retry_throttle(throttle.clone())
        .retryable([Code::Internal])
        .layer(server)
        .oneshot(grpc_call())
        .await
        .unwrap();
    assert_eq!(res.headers()["grpc-status"], "13");
    assert_eq!(
        calls.lock().unwrap().len(),
        3,
        "retried once in the set: 1 + 2 retries"
    );
    assert_eq!(throttle.tokens(), 7.0);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_call_without_a_key_is_invalid_argument_not_400() {
    use tower_throttle::reject::MissingKey;
    let mut svc = ServiceBuilder::new()
        .layer(
            RejectLayer::keyed(
                KeyedBucket::new(Quota::per_second(1)),
                HeaderKey::x_api_key(),
            )
            .on_missing_key(MissingKey::Reject)
            .grpc(),
        )
        .service(service_fn(|_: http::Request<Body>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
        }));
    let res = send(&mut svc, grpc_call()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["grpc-status"], "3", "INVALID_ARGUMENT");
    assert!(
        res.headers().get("grpc-retry-pushback-ms").is_none(),
        "waiting does not help"
    );
    let plain = send(&mut svc, http::Request::new(Body::empty())).await;
    assert_eq!(plain.status(), 400);
}

/// A tonic client call of `Say` with a deadline, as tonic writes it (`grpc-timeout`).
async fn say_within(
    client: &mut Client,
    message: &str,
    timeout: Option<Duration>,
) -> Result<tonic::Response<String>, Status> {
    let mut req = tonic::Request::new(message.to_string());
    if let Some(timeout) = timeout {
        req.set_timeout(timeout);
    }
    client.ready().await.unwrap();
    client
        .unary(req, PathAndQuery::from_static(SAY), StringCodec)
        .await
}

/// The retry layer, without jitter on push-backs, over the rate limit of `bucket`, over
/// `server`.
fn retrying_in_process<S>(
    bucket: &Bucket,
    retry: RetryAfterLayer,
    server: S,
) -> GrpcRetry<RateLimit<S>> {
    ServiceBuilder::new()
        .layer(retry.retry_after_jitter(Duration::ZERO).grpc())
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(server)
}

/// A retry layer on `bucket` whose backoff is `every`, without jitter.
fn backoff_of(bucket: &Bucket, every: Duration) -> RetryAfterLayer {
    RetryAfterLayer::new(bucket.clone()).backoff(every, every, Jitter::None)
}

#[tokio::test]
async fn over_a_channel_a_push_back_past_the_deadline_comes_back_before_it_would_end() {
    let echo = pushed_back_once("1000");
    let channel = serve!(Server::builder(), echo.clone());
    let bucket = Bucket::new(Quota::per_second(100));
    let retry = RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO);
    let mut client = retrying(channel, &bucket, retry.grpc());

    let start = Instant::now();
    let status = say_within(&mut client, "hi", Some(Duration::from_millis(300)))
        .await
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(echo.arrivals().len(), 1, "not retried");
    // Bounded, not fast: a retry would have gone after the whole second of push-back.
    assert!(took < Duration::from_secs(1), "{took:?}");
    println!("300 ms deadline, 1000 ms push-back: RESOURCE_EXHAUSTED after {took:?}");
}

#[tokio::test]
async fn over_a_channel_a_retry_carries_the_time_left_to_the_server() {
    // Each call's first attempt is pushed back for 200 ms.
    let echo = Echo::answering(|n, _| {
        if n % 2 == 0 {
            Err(push_back("200"))
        } else {
            Ok(())
        }
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = tower::util::MapRequestLayer::new({
        let seen = seen.clone();
        move |req: http::Request<Body>| {
            seen.lock().unwrap().push(grpc_timeout(req.headers()));
            req
        }
    });
    let channel = serve!(Server::builder().layer(record), echo.clone());
    let bucket = Bucket::new(Quota::per_second(100));
    let retry = RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO);
    let mut client = retrying(channel, &bucket, retry.grpc());

    let deadline = Duration::from_secs(2);
    let start = Instant::now();
    let reply = say_within(&mut client, "hi", Some(deadline)).await.unwrap();
    let took = start.elapsed();
    assert_eq!(reply.into_inner(), "hi");
    // A call without a deadline: retried as before, with no deadline on either attempt.
    say_within(&mut client, "no deadline", None).await.unwrap();
    assert_eq!(echo.arrivals().len(), 4);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].as_deref(),
        Some("2000000u"),
        "the first as the caller wrote it"
    );
    let second = seen[1].as_deref().unwrap();
    let left = match second.split_at(second.len() - 1) {
        (us, "u") => Duration::from_micros(us.parse().unwrap()),
        (ns, "n") => Duration::from_nanos(ns.parse().unwrap()), // under 100 ms left
        _ => panic!("{second}: more than the deadline's unit"),
    };
    // The retry left at least 200 ms after the call began, and before it ended.
    assert!(left <= deadline - Duration::from_millis(200), "{second}");
    assert!(
        left >= deadline.saturating_sub(took),
        "{second}, call took {took:?}"
    );
    assert_eq!(seen[2..], [None, None], "no deadline, none added");
    println!("2 s deadline, 200 ms push-back: the retry carried {second} (call took {took:?})");
}

#[tokio::test(start_paused = true)]
async fn a_retry_carries_the_time_left_until_the_deadline() {
    // Pushed back for 300 ms, 400 ms, then `third`, within a deadline of 1 s: 300 ms are left
    // at the third push-back, so 299 ms is retried (with 1 ms left) and 300 ms is not.
    for (third, retried) in [("299", true), ("300", false)] {
        let calls = Calls::default();
        let server = scripted(&calls, move |n| {
            ["300", "400", third]
                .get(n)
                .map(|ms| (Code::ResourceExhausted, Some(*ms)))
        });
        let bucket = Bucket::new(Quota::per_second(100));
        let client = retrying_in_process(&bucket, RetryAfterLayer::new(bucket.clone()), server);
        let start = tokio::time::Instant::now();
        let res = client.oneshot(grpc_call_within("1S")).await.unwrap();

        let seen: Vec<_> = calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.at - start, c.timeout.clone().unwrap()))
            .collect();
        let ms = Duration::from_millis;
        let mut expected = vec![(ms(0), "1S"), (ms(300), "700000u"), (ms(700), "300000u")];
        if retried {
            expected.push((ms(999), "1000000n"));
        }
        let expected: Vec<_> = expected
            .into_iter()
            .map(|(at, t)| (at, t.to_string()))
            .collect();
        assert_eq!(seen, expected, "third push-back {third} ms");
        let attempts = res.extensions().get::<RetryInfo>().unwrap().attempts();
        if retried {
            assert!(res.headers().get("grpc-status").is_none());
            assert_eq!(attempts, 4);
        } else {
            assert_eq!(res.headers()["grpc-status"], "8");
            assert_eq!(attempts, 3);
            assert_eq!(start.elapsed(), ms(700), "returned at once");
        }
    }
}

// A malformed `grpc-timeout` is no deadline (as tonic's server reads it), and goes on as it is.
#[tokio::test(start_paused = true)]
async fn a_push_back_past_the_deadline_goes_back_at_once_and_a_call_without_one_waits_it_out() {
    let no_deadline = [
        None,
        Some("300"),
        Some("-300m"),
        Some("123456789u"),
        Some("5x"),
    ];
    for deadline in [Some("300m")].into_iter().chain(no_deadline) {
        let calls = Calls::default();
        let server = scripted(&calls, |n| {
            (n == 0).then_some((Code::ResourceExhausted, Some("1000")))
        });
        let bucket = Bucket::new(Quota::per_second(100));
        let client = retrying_in_process(&bucket, RetryAfterLayer::new(bucket.clone()), server);
        let call = deadline.map_or_else(grpc_call, grpc_call_within);
        let start = tokio::time::Instant::now();
        let res = client.oneshot(call).await.unwrap();
        let calls = calls.lock().unwrap();
        if deadline == Some("300m") {
            assert_eq!(res.headers()["grpc-status"], "8");
            assert_eq!(start.elapsed(), Duration::ZERO, "at once");
            assert_eq!(calls.len(), 1, "no retry");
            assert!(
                bucket.snapshot().paused_until.is_some(),
                "the push-back still holds every worker"
            );
        } else {
            assert!(res.headers().get("grpc-status").is_none(), "{deadline:?}");
            assert_eq!(start.elapsed(), Duration::from_secs(1), "{deadline:?}");
            let timeouts: Vec<_> = calls.iter().map(|c| c.timeout.as_deref()).collect();
            assert_eq!(timeouts, [deadline, deadline]);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_already_past_gets_no_retry() {
    // UNAVAILABLE, without push-back, 400 ms into a 300 ms deadline.
    let calls = Calls::default();
    let server = scripted(&calls, |n| (n == 0).then_some((Code::Unavailable, None)));
    let slow = ServiceExt::<http::Request<Body>>::and_then(server, |res| async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        Ok::<_, std::convert::Infallible>(res)
    });
    let bucket = Bucket::new(Quota::per_second(100));
    let retry = backoff_of(&bucket, Duration::from_millis(10));
    let start = tokio::time::Instant::now();
    let res = retrying_in_process(&bucket, retry, slow)
        .oneshot(grpc_call_within("300m"))
        .await
        .unwrap();
    assert_eq!(res.headers()["grpc-status"], "14");
    assert_eq!(start.elapsed(), Duration::from_millis(400), "at once");
    assert_eq!(calls.lock().unwrap().len(), 1);

    // A deadline of zero: past as the call begins, even for a push-back of zero.
    let calls = Calls::default();
    let server = scripted(&calls, |n| {
        (n == 0).then_some((Code::ResourceExhausted, Some("0")))
    });
    let bucket = Bucket::new(Quota::per_second(100));
    let res = retrying_in_process(&bucket, RetryAfterLayer::new(bucket.clone()), server)
        .oneshot(grpc_call_within("0n"))
        .await
        .unwrap();
    assert_eq!(res.headers()["grpc-status"], "8");
    assert_eq!(calls.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_still_waiting_for_a_token_at_the_deadline_is_not_sent() {
    // One token a second: the retry, due 100 ms in, would get the next token at 1 s, past the
    // deadline of 500 ms.
    let calls = Calls::default();
    let server = scripted(&calls, |n| (n == 0).then_some((Code::Unavailable, None)));
    let bucket = Bucket::new(Quota::per_second(1));
    let retry = backoff_of(&bucket, Duration::from_millis(100));
    let start = tokio::time::Instant::now();
    let res = retrying_in_process(&bucket, retry, server)
        .oneshot(grpc_call_within("500m"))
        .await
        .unwrap();
    assert_eq!(res.headers()["grpc-status"], "14");
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(500),
        "returned at the deadline, not when the token comes"
    );
    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(res.extensions().get::<RetryInfo>().unwrap().attempts(), 1);
}
