//! End to end over loopback: reqwest clients — through `reqwest-middleware`, and
//! `reqwest::Client` under the tower layers — against real axum servers.
#![cfg(feature = "reqwest")]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::Departures;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_throttle::reqwest::{RateLimitMiddleware, RetryAfterMiddleware};
use tower_throttle::retry_after::{Failure, Jitter, RetryInfo};
use tower_throttle::{Bucket, Denied, Quota, RateLimitLayer, RetryAfterLayer};

/// What reached the server, and what it answered.
#[derive(Debug, Clone)]
struct Arrival {
    at: Duration,
    status: StatusCode,
    retry_after: Option<Duration>,
    body: Bytes,
}

type Answer = Arc<dyn Fn(usize) -> (StatusCode, Option<u64>) + Send + Sync>;

#[derive(Clone)]
struct Server {
    addr: SocketAddr,
    start: Instant,
    log: Arc<Mutex<Vec<Arrival>>>,
    answer: Answer,
}

impl Server {
    /// A server that answers request number `i` (from 0) with `answer(i)`: a status and an
    /// optional `Retry-After` in seconds.
    async fn start<F>(answer: F) -> Server
    where
        F: Fn(usize) -> (StatusCode, Option<u64>) + Send + Sync + 'static,
    {
        async fn handler(State(s): State<Server>, body: Bytes) -> Response {
            // One lock for the decision and the log, so the log is in decision order.
            let mut log = s.log.lock().unwrap();
            let at = s.start.elapsed();
            let (status, retry_after) = (s.answer)(log.len());
            log.push(Arrival {
                at,
                status,
                retry_after: retry_after.map(Duration::from_secs),
                body,
            });
            match retry_after {
                Some(secs) => (status, [("retry-after", secs.to_string())], "").into_response(),
                None => (status, "ok").into_response(),
            }
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Server {
            addr: listener.local_addr().unwrap(),
            start: Instant::now(),
            log: Default::default(),
            answer: Arc::new(answer),
        };
        let app = Router::new()
            .route("/", any(handler))
            .with_state(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        server
    }

    /// A server that enforces `quota` with 429 + `Retry-After` (whole seconds, rounded up).
    async fn with_quota(quota: Quota) -> Server {
        let limit = Bucket::new(quota);
        Server::start(move |_| match limit.try_acquire(1) {
            Ok(()) => (StatusCode::OK, None),
            Err(t) => (StatusCode::TOO_MANY_REQUESTS, t.retry_after_secs()),
        })
        .await
    }

    /// Answers the first request 429 with `Retry-After: 1`, then 200.
    async fn one_429() -> Server {
        Server::start(|i| match i {
            0 => (StatusCode::TOO_MANY_REQUESTS, Some(1)),
            _ => (StatusCode::OK, None),
        })
        .await
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn log(&self) -> Vec<Arrival> {
        self.log.lock().unwrap().clone()
    }
}

fn middleware_client(bucket: &Bucket, layer: RetryAfterLayer) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(RetryAfterMiddleware::new(layer))
        .with(RateLimitMiddleware::new(bucket.clone()))
        .build()
}

fn tower_client(
    http: &reqwest::Client,
    bucket: &Bucket,
    layer: RetryAfterLayer,
) -> impl Service<reqwest::Request, Response = reqwest::Response, Error = BoxError> + Clone {
    ServiceBuilder::new()
        .layer(layer)
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(http.clone())
}

fn no_jitter(bucket: &Bucket) -> RetryAfterLayer {
    RetryAfterLayer::new(bucket.clone()).retry_after_jitter(Duration::ZERO)
}

fn info(resp: &reqwest::Response) -> RetryInfo {
    *resp.extensions().get::<RetryInfo>().expect("no RetryInfo")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_middleware_tasks_all_succeed_and_none_reaches_the_server_in_a_cooldown() {
    // The server allows 40/s with bursts of 15; the client is configured ten times as fast
    // (its ramp starts at 180/s), so the server pushes back, and the client must hold
    // everyone for each cooldown.
    let server = Server::with_quota(Quota::per_second(40).burst(15)).await;
    let (bucket, departures) = Departures::bucket(Quota::per_second(400).burst(5));
    let client = middleware_client(&bucket, no_jitter(&bucket).max_retries(10));

    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (client, url) = (client.clone(), server.url());
            tokio::spawn(async move { client.get(url).send().await })
        })
        .collect();
    for task in tasks {
        let resp = task.await.unwrap().expect("request failed");
        assert!(resp.status().is_success(), "{}", resp.status());
    }

    let log = server.log();
    let ok = log.iter().filter(|a| a.status.is_success()).count();
    let refused = log.iter().filter(|a| a.retry_after.is_some()).count();
    assert_eq!(ok, 50);
    assert!(
        refused > 0,
        "the server never pushed back: nothing was tested"
    );
    assert_eq!(log.len(), ok + refused);
    // Measured where requests leave the limiter (a request on the wire when a 429 came may
    // reach the server later, however late a loaded machine delivers it): nothing left
    // during a cooldown, but those admitted just before it (noted up to 100 ms late).
    let pauses = departures.assert_quiet_during_pauses(Duration::from_millis(100));
    assert!(pauses > 0, "the client never paused");
}

#[tokio::test]
async fn middleware_resends_a_post_after_the_cooldown_with_its_body() {
    let server = Server::one_429().await;
    let bucket = Bucket::new(Quota::per_second(10));
    let client = middleware_client(&bucket, no_jitter(&bucket));

    let start = Instant::now();
    let resp = client
        .post(server.url())
        .body("payload")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(info(&resp).attempts(), 2);
    assert_eq!(info(&resp).cooldown(), None);

    let log = server.log();
    assert_eq!(log.len(), 2);
    assert!(log[1].at - log[0].at >= Duration::from_secs(1));
    assert!(log.iter().all(|a| a.body == "payload"));
}

#[tokio::test]
async fn tower_stack_over_reqwest_returns_200_after_the_cooldown() {
    let server = Server::one_429().await;
    let bucket = Bucket::new(Quota::per_second(10));
    let http = reqwest::Client::new();
    let svc = tower_client(&http, &bucket, no_jitter(&bucket));

    let start = Instant::now();
    let req = http.get(server.url()).build().unwrap();
    let resp = svc.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(info(&resp).attempts(), 2);

    let log = server.log();
    assert_eq!(log.len(), 2);
    assert!(log[1].at - log[0].at >= Duration::from_secs(1));
}

#[tokio::test]
async fn a_streaming_body_is_sent_once() {
    let always_429 = || Server::start(|_| (StatusCode::TOO_MANY_REQUESTS, Some(1)));
    let streaming = || reqwest::Body::wrap(String::from("stream"));

    // reqwest-middleware
    let server = always_429().await;
    let bucket = Bucket::new(Quota::per_second(10));
    let client = middleware_client(&bucket, no_jitter(&bucket));
    let resp = client
        .put(server.url())
        .body(streaming())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(info(&resp).attempts(), 1);
    assert_eq!(server.log().len(), 1);
    assert_eq!(server.log()[0].body, "stream");
    // Not retried, but the push-back still pauses the shared bucket.
    assert!(bucket.snapshot().paused_until.is_some());

    // reqwest::Client under the tower layers
    let server = always_429().await;
    let bucket = Bucket::new(Quota::per_second(10));
    let http = reqwest::Client::new();
    let req = http.put(server.url()).body(streaming()).build().unwrap();
    let resp = tower_client(&http, &bucket, no_jitter(&bucket))
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(info(&resp).attempts(), 1);
    assert_eq!(server.log().len(), 1);
    assert_eq!(server.log()[0].body, "stream");
}

#[tokio::test]
async fn a_429_seen_by_the_middleware_holds_the_tower_stack_on_the_same_bucket() {
    let server = Server::one_429().await;
    let bucket = Bucket::new(Quota::per_second(10));
    let client = middleware_client(&bucket, no_jitter(&bucket).max_retries(0));
    let http = reqwest::Client::new();
    let svc = tower_client(&http, &bucket, no_jitter(&bucket));

    let resp = client.get(server.url()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(info(&resp).cooldown(), Some(Duration::from_secs(1)));
    let resp = svc
        .oneshot(http.get(server.url()).build().unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    let log = server.log();
    assert_eq!(log.len(), 2);
    assert!(
        log[1].at - log[0].at >= Duration::from_secs(1),
        "the tower stack went out during the cooldown: {log:?}"
    );
}

#[tokio::test]
async fn a_post_to_a_refused_connection_is_retried_and_classify_sees_reqwest_error() {
    // A port with nothing listening: the request never leaves, so any method may retry.
    let url = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/", l.local_addr().unwrap())
    };
    let bucket = Bucket::new(Quota::per_second(1000));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let layer = {
        let seen = seen.clone();
        RetryAfterLayer::new(bucket.clone())
            .max_retries(3)
            .backoff(
                Duration::from_millis(5),
                Duration::from_millis(20),
                Jitter::None,
            )
            .classify_error(move |e| {
                let failure = Failure::classify(e);
                let is_reqwest = e.downcast_ref::<reqwest::Error>().is_some();
                seen.lock().unwrap().push((is_reqwest, failure));
                failure
            })
    };
    let expected = vec![(true, Failure::NotSent); 4];

    let err = middleware_client(&bucket, layer.clone())
        .post(&url)
        .body("x")
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err}");
    assert_eq!(*seen.lock().unwrap(), expected, "1 attempt + 3 retries");

    seen.lock().unwrap().clear();
    let http = reqwest::Client::new();
    let req = http.post(&url).body("x").build().unwrap();
    let err = tower_client(&http, &bucket, layer)
        .oneshot(req)
        .await
        .unwrap_err();
    assert!(err.downcast_ref::<reqwest::Error>().is_some(), "{err}");
    assert_eq!(*seen.lock().unwrap(), expected, "1 attempt + 3 retries");
}

#[tokio::test]
async fn a_middleware_error_is_returned_at_once_and_nothing_is_sent() {
    let hits = Arc::new(AtomicUsize::new(0));
    let server = {
        let hits = hits.clone();
        Server::start(move |_| {
            hits.fetch_add(1, Ordering::SeqCst);
            (StatusCode::OK, None)
        })
        .await
    };
    let bucket = Bucket::new(Quota::per_second(10).burst(2));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryAfterMiddleware::new(RetryAfterLayer::new(
            bucket.clone(),
        )))
        .with(RateLimitMiddleware::new(bucket.clone()).cost(|_| 3))
        .build();
    let err = client.get(server.url()).send().await.unwrap_err();
    let reqwest_middleware::Error::Middleware(e) = err else {
        panic!("not a middleware error: {err}");
    };
    assert!(
        matches!(e.downcast_ref::<Denied>(), Some(Denied::ExceedsBurst(_))),
        "{e}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// Through the middleware as through the layers, a configured rate holds from the first
/// request until a server pushes back.
#[tokio::test]
async fn a_configured_rate_holds_through_the_middleware() {
    let server = Server::start(|_| (StatusCode::OK, None)).await;
    let bucket = Bucket::new(Quota::per_second(100).burst(1));
    let client = middleware_client(&bucket, no_jitter(&bucket));
    for _ in 0..8 {
        let status = client.get(server.url()).send().await.unwrap().status();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(bucket.rate(), 100.0);
    }
    assert_eq!(bucket.learned_rate(), None);
    assert_eq!(server.log().len(), 8);
}

/// Through the middleware as through the layers, the ramp of a configured rate (opted into)
/// starts when the first request goes, and each success weighs the gap at which its request went (the
/// rate limit tells the retry middleware when it admitted it). Eight workers that started
/// waiting at once never went faster than the ramp's rate, so the ramp goes on; taken at
/// the instant they started waiting, the requests queued before the ramp would have tested
/// the configured rate and ended it at once.
#[tokio::test]
async fn the_ramp_weighs_when_each_request_went_through_the_middleware() {
    let server = Server::start(|_| (StatusCode::OK, None)).await;
    let bucket = Bucket::builder(Quota::per_second(100).burst(1))
        .ramp()
        .build();
    let client = middleware_client(&bucket, no_jitter(&bucket));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (client.clone(), server.url());
            tokio::spawn(async move { client.get(url).send().await.unwrap().status() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    // 45 % of the configured rate, 4 % more per success.
    let ramp = 100.0 * 0.45 * 1.04_f64.powi(8);
    assert!((bucket.rate() - ramp).abs() < 1e-6, "{}", bucket.rate());
    assert_eq!(server.log().len(), 8);
}
