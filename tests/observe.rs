//! Operability: observers on buckets and rejecting layers, dry runs, the metrics facade.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_throttle::observe::Counters;
use tower_throttle::reject::Rejected;
use tower_throttle::{Bucket, Quota, RateLimitLayer, RejectLayer, RetryAfterLayer};

#[tokio::test(start_paused = true)]
async fn counters_see_admissions_delays_refusals_and_pauses() {
    let counters = Arc::new(Counters::default());
    let bucket = Bucket::builder(Quota::per_second(10).burst(2))
        .observer(counters.clone())
        .build();
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let tasks: Vec<_> = (0..5)
        .map(|_| tokio::spawn(svc.clone().oneshot(())))
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let c = counters.get();
    // 2 at once, then at 100, 200 and 300 ms.
    assert_eq!((c.admitted, c.delayed), (5, 3));
    assert_eq!(c.waited, Duration::from_millis(100 + 200 + 300));
    assert!(bucket.try_acquire(1).is_err());
    bucket.pause(Duration::from_secs(1));
    let c = counters.get();
    assert_eq!(
        (c.refused, c.dry_run_refused, c.paused, c.tokens),
        (1, 0, 1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn dry_run_admits_everything_and_counts_what_it_would_reject() {
    let counters = Arc::new(Counters::default());
    let would_reject = Arc::new(AtomicU64::new(0));
    let seen = would_reject.clone();
    let inner = service_fn(move |req: http::Request<String>| {
        if req.extensions().get::<Rejected>().is_some() {
            seen.fetch_add(1, Ordering::Relaxed);
        }
        async { Ok::<_, Infallible>(http::Response::new(String::from("ok"))) }
    });
    let bucket = Bucket::new(Quota::per_second(10).burst(3));
    let svc = ServiceBuilder::new()
        .layer(
            RejectLayer::new(bucket.clone())
                .dry_run(true)
                .observer(counters.clone()),
        )
        .service(inner);
    for _ in 0..10 {
        let resp = svc
            .clone()
            .oneshot(http::Request::new(String::new()))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let c = counters.get();
    assert_eq!((c.refused, c.dry_run_refused), (7, 7));
    assert_eq!(would_reject.load(Ordering::Relaxed), 7);
    // The same layer enforcing: the same 7 refused.
    let enforcing = ServiceBuilder::new()
        .layer(
            RejectLayer::new(Bucket::new(Quota::per_second(10).burst(3)))
                .observer(counters.clone()),
        )
        .service(service_fn(|_: http::Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }));
    let mut refused = 0;
    for _ in 0..10 {
        let resp = enforcing
            .clone()
            .oneshot(http::Request::new(String::new()))
            .await
            .unwrap();
        refused += u64::from(resp.status() == StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(refused, 7);
    let c = counters.get();
    assert_eq!((c.refused, c.dry_run_refused), (14, 7));
    let _ = Instant::now();
}

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn metrics_observer_reports_through_the_facade() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tower_throttle::observe::MetricsObserver;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let observer = metrics::with_local_recorder(&recorder, || MetricsObserver::new("api"));
    let bucket = Bucket::builder(Quota::per_second(10).burst(1))
        .observer(Arc::new(observer))
        .build();
    bucket.acquire(1).await.unwrap();
    bucket.acquire(1).await.unwrap();
    assert!(bucket.try_acquire(1).is_err());
    bucket.pause(Duration::from_secs(1));
    let values: Vec<(String, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key.key().name().to_string(), value))
        .collect();
    let counter = |name: &str| {
        values
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| match v {
                DebugValue::Counter(c) => *c,
                _ => 0,
            })
            .sum::<u64>()
    };
    assert_eq!(counter("tower_throttle_admitted_total"), 2);
    assert_eq!(counter("tower_throttle_delayed_total"), 1);
    assert_eq!(counter("tower_throttle_refused_total"), 1);
    assert_eq!(counter("tower_throttle_paused_total"), 1);
    assert!(values
        .iter()
        .any(|(n, v)| n == "tower_throttle_wait_seconds"
            && matches!(v, DebugValue::Histogram(h) if h.len() == 1)));
}

/// A server over its quota answers 429 + `Retry-After: 1`; it counts what reaches it.
async fn quota_server(arrivals: Arc<AtomicU64>, refused: Arc<AtomicU64>) -> SocketAddr {
    let limit = Bucket::new(Quota::per_second(40).burst(10));
    let app = Router::new().route(
        "/",
        get(move || {
            let (limit, arrivals, refused) = (limit.clone(), arrivals.clone(), refused.clone());
            async move {
                arrivals.fetch_add(1, Ordering::SeqCst);
                if limit.try_acquire(1).is_ok() {
                    "ok".into_response()
                } else {
                    refused.fetch_add(1, Ordering::SeqCst);
                    Response::builder()
                        .status(StatusCode::TOO_MANY_REQUESTS)
                        .header("retry-after", "1")
                        .body(axum::body::Body::empty())
                        .unwrap()
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_match_what_the_server_saw() {
    let (arrivals, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let addr = quota_server(arrivals.clone(), refused.clone()).await;
    let counters = Arc::new(Counters::default());
    // The client allows more than the server: some 429s are certain.
    let bucket = Bucket::builder(Quota::per_second(100).burst(20))
        .observer(counters.clone())
        .build();
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(
            RetryAfterLayer::new(bucket.clone())
                .max_retries(10)
                .retry_after_jitter(Duration::ZERO),
        )
        .layer(RateLimitLayer::new(bucket))
        .service(hyper);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let req = http::Request::get(format!("http://{addr}/"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            tokio::spawn(client.clone().oneshot(req))
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().unwrap().status().is_success());
    }
    let c = counters.get();
    assert!(
        refused.load(Ordering::SeqCst) > 0,
        "the server never pushed back"
    );
    // Every attempt took a token, and every 429 paused the bucket.
    assert_eq!(c.admitted, arrivals.load(Ordering::SeqCst));
    assert_eq!(c.paused, refused.load(Ordering::SeqCst));
    assert_eq!(c.admitted, 50 + c.paused);
}

#[tokio::test(start_paused = true)]
async fn set_quota_through_the_layers_shared_handle_changes_every_clone() {
    let layer = RateLimitLayer::new(Bucket::new(Quota::per_second(1).burst(1)));
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .service(service_fn(|()| async { Ok::<_, Infallible>(()) }));
    let (a, b) = (svc.clone(), svc);
    a.oneshot(()).await.unwrap();
    // Operators raise the limit at run time, on the layer's handle: no rebuild.
    layer.limit().set_quota(Quota::per_second(10).burst(1));
    let start = Instant::now();
    b.oneshot(()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}
