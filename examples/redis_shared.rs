//! One limit shared by every process through Redis: 8 workers here, and as many more in any
//! other process running this example against the same Redis, stay within 5 requests per
//! second together.
//!
//! ```text
//! cargo run --example redis_shared --features redis             # alone: about 5/s
//! cargo run --example redis_shared --features redis & cargo run --example redis_shared --features redis
//!                                                               # two processes: about 2.5/s each
//! ```
//!
//! The Redis is `TOWER_THROTTLE_REDIS_URL`, by default `redis://127.0.0.1:6379`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_throttle::redis::RedisBucket;
use tower_throttle::{Quota, RateLimitLayer};

const WORKERS: usize = 8;
const RUN: Duration = Duration::from_secs(6);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("TOWER_THROTTLE_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Every process of the limit: the same URL, key prefix, key and quota.
    let redis = RedisBucket::builder(Quota::per_second(5).burst(1))
        .url(url.as_str())
        .key_prefix("tower-throttle-example")
        .key("shared")
        .build()
        .await?;

    let sent = Arc::new(AtomicU64::new(0));
    let api = {
        let sent = sent.clone();
        service_fn(move |_: ()| {
            sent.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, std::convert::Infallible>(()) }
        })
    };
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(redis)) // every decision made in Redis
        .service(api);

    let start = Instant::now();
    let end = tokio::time::Instant::now() + RUN;
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move {
                // A waiter dropped at the end gives its turn back to the other processes.
                while let Ok(sent) = tokio::time::timeout_at(end, svc.clone().oneshot(())).await {
                    sent?;
                }
                Ok::<_, tower_throttle::BoxError>(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    let n = sent.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{n} requests from {WORKERS} workers in {secs:.1} s: {:.1}/s (the limit in {url}: 5/s for every process together)",
        n as f64 / secs
    );
    Ok(())
}
