//! 20,000 queued waiters dropped at once (client timeouts, shutdown), in arrival, reverse and
//! random order: the survivors keep their order and the rate, and lose no capacity.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use support::{aligned, assert_fifo, assert_rate_bound, settle, Recorder};
use tokio::time::Instant;
use tower_throttle::{Algorithm, Bucket, Quota};

const DOOMED: usize = 20_000;
/// One survivor after every `EVERY − 1` doomed waiters.
const EVERY: usize = 101;

#[derive(Clone, Copy, Debug)]
enum Order {
    Arrival,
    Reverse,
    Random,
}

/// A deterministic shuffle (xorshift), so a failure reproduces.
fn shuffle<T>(v: &mut [T]) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// Queues `DOOMED` waiters with survivors among them, drops the doomed in `order`, and
/// returns the survivors' admissions `(time, cost, id)`.
async fn run(bucket: Bucket, order: Order) -> Vec<(Duration, u32, usize)> {
    while bucket.try_acquire(1).is_ok() {}
    let rec = Recorder::new();
    let mut doomed: Vec<Pin<Box<dyn Future<Output = _> + '_>>> = Vec::new();
    let mut survivors = Vec::new();
    for i in 0..DOOMED + DOOMED / (EVERY - 1) {
        if i % EVERY == EVERY - 1 {
            let (b, rec) = (bucket.clone(), rec.clone());
            survivors.push(tokio::spawn(async move {
                b.acquire(1).await.unwrap();
                rec.record(1, i);
            }));
            tokio::task::yield_now().await; // it joins the line now, in its place
        } else {
            let mut fut: Pin<Box<dyn Future<Output = _> + '_>> = Box::pin(bucket.acquire(1));
            assert!(futures::poll!(fut.as_mut()).is_pending());
            doomed.push(fut);
        }
    }
    assert_eq!(bucket.snapshot().waiting, doomed.len() + survivors.len());
    match order {
        Order::Arrival => doomed.reverse(),
        Order::Reverse => {}
        Order::Random => shuffle(&mut doomed),
    }
    // Dropped one by one from the back of the vector.
    while doomed.pop().is_some() {}
    assert_eq!(bucket.snapshot().waiting, survivors.len());
    settle().await;
    for s in survivors {
        s.await.unwrap();
    }
    rec.entries()
}

#[tokio::test(start_paused = true)]
async fn survivors_keep_order_and_rate_whatever_order_the_rest_leave_in() {
    let quota = Quota::per_second(1000).burst(10);
    for order in [Order::Arrival, Order::Reverse, Order::Random] {
        let start = Instant::now();
        let entries = run(Bucket::new(quota), order).await;
        assert_eq!(entries.len(), DOOMED / (EVERY - 1));
        assert_fifo(&entries);
        let adm: Vec<_> = entries.iter().map(|e| (e.0, e.1)).collect();
        assert_rate_bound(&adm, quota);
        // Nothing the leavers held is lost: the 200 survivors go one per millisecond from the
        // first token after the burst, as if the others had never come.
        let last = entries.iter().map(|e| e.0).max().unwrap();
        assert_eq!(last, Duration::from_millis(200), "{order:?}");
        assert_eq!(start.elapsed(), Duration::from_millis(200), "{order:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_survives_mass_cancellation_in_order() {
    let algorithms = [
        Algorithm::leaky_bucket(100_000),
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];
    for algorithm in algorithms {
        for order in [Order::Arrival, Order::Reverse, Order::Random] {
            let quota = Quota::new(10, Duration::from_millis(10));
            let entries = run(aligned(quota, algorithm), order).await;
            assert_eq!(
                entries.len(),
                DOOMED / (EVERY - 1),
                "{algorithm:?} {order:?}"
            );
            assert_fifo(&entries);
            // 200 survivors at 1000/s, windows from the start: done by 200 ms (the sliding
            // estimate runs a little slower).
            let last = entries.iter().map(|e| e.0).max().unwrap();
            let most = if algorithm == Algorithm::SlidingWindow {
                240
            } else {
                200
            };
            assert!(
                last <= Duration::from_millis(most),
                "{algorithm:?} {order:?}: the last survivor went at {last:?}"
            );
        }
    }
}
