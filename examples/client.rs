//! A hyper client stack — `RetryAfterLayer` → `RateLimitLayer` → concurrency limit → hyper —
//! runs a batch against a local axum server that enforces its own quota with the crate's
//! `RejectLayer` (429 + `Retry-After`).
//!
//! ```text
//! cargo run --example client
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::limit::ConcurrencyLimitLayer;
use tower::{ServiceBuilder, ServiceExt};
use tower_throttle::{Bucket, Quota, RateLimitLayer, RejectLayer, RetryAfterLayer};

const REQUESTS: usize = 300;
const WORKERS: usize = 32;

/// The server: 100 requests per second, burst 20; over that, the crate's rejecting layer
/// answers 429 with `Retry-After`.
async fn serve() -> SocketAddr {
    let limit = RejectLayer::new(Bucket::new(Quota::per_second(100).burst(20)));
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(limit);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::main]
async fn main() {
    let addr = serve().await;

    // The client: 90 % of the server's quota, shared by every worker.
    let bucket = Bucket::new(Quota::per_second(100).burst(20).headroom(0.9));
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(RetryAfterLayer::new(bucket.clone()).max_retries(5))
        .layer(RateLimitLayer::new(bucket.clone()))
        .layer(ConcurrencyLimitLayer::new(16))
        .service(hyper);

    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    let next = Arc::new(AtomicU64::new(0));
    let (ok, throttled) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (client, uri, next) = (client.clone(), uri.clone(), next.clone());
            let (ok, throttled) = (ok.clone(), throttled.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < REQUESTS as u64 {
                    let req = http::Request::get(uri.clone())
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    let resp = client.clone().oneshot(req).await.expect("request failed");
                    let info = resp
                        .extensions()
                        .get::<tower_throttle::retry_after::RetryInfo>()
                        .copied();
                    throttled.fetch_add(
                        u64::from(info.map_or(0, |i| i.attempts() - 1)),
                        Ordering::Relaxed,
                    );
                    if resp.status().is_success() {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = start.elapsed();
    println!("requests   {REQUESTS} from {WORKERS} workers");
    println!("succeeded  {}", ok.load(Ordering::Relaxed));
    println!("429s seen  {}", throttled.load(Ordering::Relaxed));
    println!(
        "rate       {:.1} req/s achieved, {:.1} req/s allowed by the client bucket",
        REQUESTS as f64 / elapsed.as_secs_f64(),
        bucket.quota().per_second_f64()
    );
}
