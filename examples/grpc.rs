//! A tonic server with a per-key and a global limit, and a tonic client of many workers
//! sharing one bucket behind the retry layer, against each other. No protoc: the service and
//! its codec are written by hand (`examples/grpc_support`).
//!
//! ```text
//! cargo run --example grpc --features grpc
//! ```
//!
//! The client is configured 25 % above the server's per-key rate. The server answers the
//! excess with `RESOURCE_EXHAUSTED` and `grpc-retry-pushback-ms`; every push-back pauses the
//! client's shared bucket, so all workers hold together, and every call succeeds.

#[path = "grpc_support/mod.rs"]
mod grpc_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tonic::transport::{Endpoint, Server};
use tower::ServiceBuilder;
use tower_throttle::extract::HeaderKey;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::observe::Counters;
use tower_throttle::retry_after::RetryInfo;
use tower_throttle::{Bucket, Quota, RateLimitLayer, RejectLayer, RetryAfterLayer};

use grpc_support::{say, Echo};

const WORKERS: usize = 16;
const CALLS: u64 = 120;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server: 20 calls per second per API key (burst 10), 100 per second in all.
    let refused = Arc::new(Counters::default());
    let limit = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_second(20).burst(10)),
        HeaderKey::x_api_key(),
    )
    .global(Bucket::new(Quota::per_second(100)))
    .grpc() // RESOURCE_EXHAUSTED + grpc-retry-pushback-ms
    .observer(refused.clone());
    let echo = Echo::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        Server::builder()
            .layer(limit)
            .add_service(echo.clone())
            .serve_with_incoming(incoming),
    );

    // The client: configured too fast (25/s), one bucket for every worker.
    let pauses = Arc::new(Counters::default());
    let bucket = Bucket::builder(Quota::per_second(25).burst(10))
        .observer(pauses.clone())
        .build();
    let channel = Endpoint::from_shared(url)?.connect().await?;
    let stack = ServiceBuilder::new()
        .layer(
            // A6 retry throttling (`.retry_throttle(RetryBudget::a6(10, 0.1))`) is
            // for failing servers: it would count every push-back here as a failure.
            RetryAfterLayer::new(bucket.clone()).max_retries(8).grpc(),
        )
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(channel);
    let client = tonic::client::Grpc::new(stack);

    let next = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (mut client, next, retries) = (client.clone(), next.clone(), retries.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < CALLS {
                    let reply = say(&mut client, "hello", &[("x-api-key", "alice")]).await?;
                    let attempts = reply
                        .extensions()
                        .get::<RetryInfo>()
                        .map_or(1, |i| i.attempts());
                    retries.fetch_add(u64::from(attempts - 1), Ordering::Relaxed);
                }
                Ok::<_, tonic::Status>(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    let elapsed = start.elapsed();
    println!("calls        {CALLS} from {WORKERS} workers, all succeeded");
    println!("served       {}", echo.arrivals().len());
    println!(
        "push-backs   {} RESOURCE_EXHAUSTED answers (server side)",
        refused.get().refused
    );
    println!(
        "pauses       {} of the client's shared bucket",
        pauses.get().paused
    );
    println!("retries      {}", retries.load(Ordering::Relaxed));
    println!(
        "rate         {:.1} calls/s achieved; server allows 20/s per key, client set to {:.0}/s",
        CALLS as f64 / elapsed.as_secs_f64(),
        bucket.quota().per_second_f64()
    );
    Ok(())
}
