//! `reqwest::Client` as a tower service: `RetryAfterLayer` → `RateLimitLayer` → reqwest, run
//! as a batch against a local axum server that enforces its own quota with the crate's
//! `RejectLayer` (429 + `Retry-After`).
//!
//! The client's bucket is deliberately set 50 % above the server's quota, so the server
//! pushes back: watch every worker hold for the cooldown, then carry on.
//!
//! ```text
//! cargo run --example reqwest_client --features reqwest
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use tower::{ServiceBuilder, ServiceExt};
use tower_throttle::retry_after::RetryInfo;
use tower_throttle::{Bucket, Quota, RateLimitLayer, RejectLayer, RetryAfterLayer};

const REQUESTS: u64 = 150;
const WORKERS: usize = 16;

/// What the server saw: arrival times, and the 429s it sent (time, `Retry-After`).
#[derive(Clone)]
struct Seen {
    start: Instant,
    arrivals: Arc<Mutex<Vec<Duration>>>,
    refusals: Arc<Mutex<Vec<(Duration, u64)>>>,
}

/// The server: 100 requests per second, bursts of 30; over that, the crate's rejecting layer
/// answers 429 with `Retry-After`.
async fn serve() -> (SocketAddr, Seen) {
    let seen = Seen {
        start: Instant::now(),
        arrivals: Default::default(),
        refusals: Default::default(),
    };
    async fn record(State(seen): State<Seen>, req: Request, next: Next) -> Response {
        let at = seen.start.elapsed();
        seen.arrivals.lock().unwrap().push(at);
        let res = next.run(req).await;
        if res.status() == StatusCode::TOO_MANY_REQUESTS {
            let secs = res.headers()[header::RETRY_AFTER].to_str().unwrap();
            let secs = secs.parse().unwrap();
            seen.refusals.lock().unwrap().push((at, secs));
        }
        res
    }
    let limit = RejectLayer::new(Bucket::new(Quota::per_second(100).burst(30)));
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(limit)
        .layer(middleware::from_fn_with_state(seen.clone(), record));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

#[tokio::main]
async fn main() {
    let (addr, seen) = serve().await;

    // reqwest::Client implements tower's Service<reqwest::Request>: stack the layers on it.
    let bucket = Bucket::new(Quota::per_second(150).burst(10));
    let http = reqwest::Client::new();
    let client = ServiceBuilder::new()
        .layer(RetryAfterLayer::new(bucket.clone()).max_retries(5))
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(http.clone());

    let url = format!("http://{addr}/");
    let next = Arc::new(AtomicU64::new(0));
    let (ok, retries) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (client, http, url, next) =
                (client.clone(), http.clone(), url.clone(), next.clone());
            let (ok, retries) = (ok.clone(), retries.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < REQUESTS {
                    let req = http.get(&url).build().expect("a valid request");
                    let resp = client.clone().oneshot(req).await.expect("request failed");
                    if let Some(info) = resp.extensions().get::<RetryInfo>() {
                        retries.fetch_add(u64::from(info.attempts() - 1), Ordering::Relaxed);
                    }
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

    println!("requests    {REQUESTS} from {WORKERS} workers, one shared bucket");
    println!("succeeded   {}", ok.load(Ordering::Relaxed));
    println!("retries     {}", retries.load(Ordering::Relaxed));
    println!(
        "elapsed     {:.2} s ({:.1} req/s achieved)",
        elapsed.as_secs_f64(),
        REQUESTS as f64 / elapsed.as_secs_f64()
    );
    let arrivals = seen.arrivals.lock().unwrap().clone();
    for (at, secs) in seen.refusals.lock().unwrap().iter() {
        // Requests already on the wire when the 429 left may land a moment after it.
        let resumed = arrivals
            .iter()
            .filter(|t| **t > *at + Duration::from_millis(15))
            .min();
        match resumed {
            Some(r) => println!(
                "server      429 at {:.3} s (Retry-After: {secs}); next request at {:.3} s",
                at.as_secs_f64(),
                r.as_secs_f64()
            ),
            None => println!(
                "server      429 at {:.3} s (Retry-After: {secs})",
                at.as_secs_f64()
            ),
        }
    }
}
