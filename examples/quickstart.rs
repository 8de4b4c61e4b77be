//! 50 workers share one bucket through clones of one service and call a local stand-in API.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_throttle::{Bucket, Quota, RateLimitLayer};

const WORKERS: usize = 50;
const PER_WORKER: usize = 6;

#[tokio::main]
async fn main() {
    let quota = Quota::per_second(100).burst(10);
    let bucket = Bucket::new(quota);

    // The stand-in API: counts what reaches it.
    let served = Arc::new(AtomicU64::new(0));
    let api = {
        let served = served.clone();
        service_fn(move |_req: usize| {
            served.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, Infallible>("201 Created") }
        })
    };
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(bucket.clone()))
        .service(api);

    let start = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let svc = svc.clone(); // a clone: the same bucket, not a new one
            tokio::spawn(async move {
                for i in 0..PER_WORKER {
                    svc.clone().oneshot(w * PER_WORKER + i).await.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = start.elapsed();

    let n = served.load(Ordering::Relaxed);
    let achieved = n as f64 / elapsed.as_secs_f64();
    // The most a (rate, burst) bucket can admit in `elapsed`, for comparison.
    let ideal = f64::from(quota.burst_size()) + quota.per_second_f64() * elapsed.as_secs_f64();
    println!("workers          {WORKERS} (each with a clone of one service)");
    println!(
        "configured       {} req/s, burst {}",
        quota.per_second_f64(),
        quota.burst_size()
    );
    println!("requests served  {n} in {:.3} s", elapsed.as_secs_f64());
    println!(
        "achieved rate    {achieved:.1} req/s ({:.1} % of the bound burst + rate·t = {ideal:.0})",
        100.0 * n as f64 / ideal
    );
    assert!(n as f64 <= ideal.ceil());
}
