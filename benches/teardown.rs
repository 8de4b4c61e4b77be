//! Mass cancellation: 20,000 queued waiters dropped at once (client timeouts, a shutdown),
//! against governor's whole 3-second run with 20,000 waiters, in the same process.
//!
//! Ours: a bucket of 1000/s, burst 10, emptied; 20,000 `acquire(1)` futures polled once (so
//! they wait in line), then dropped in arrival, reverse or random order. The CPU time of the
//! dropping thread is read from `/proc/thread-self/schedstat` around the drops alone.
//!
//! governor: 20,000 tasks loop on `until_ready()` at the same quota for 3 s on a 2-worker
//! runtime, as in `accuracy`; the CPU time of every thread of the process over the run.
//!
//! ```text
//! cargo bench --bench teardown
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

const WAITERS: usize = 20_000;
const RATE: u32 = 1000;
const BURST: u32 = 10;
const RUN: Duration = Duration::from_secs(3);

/// CPU nanoseconds of the calling thread.
fn own_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat")
}

/// CPU nanoseconds of each live thread of the process.
fn thread_cpu_ns() -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let ns = std::fs::read_to_string(entry.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        if let Some(ns) = ns {
            out.insert(tid, ns);
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Order {
    Arrival,
    Reverse,
    Random,
}

/// A deterministic shuffle (xorshift).
fn shuffle<T>(v: &mut [T]) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// (CPU ns to queue the waiters, CPU ns to drop them).
fn ours(order: Order) -> (u64, u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let quota = tower_throttle::Quota::per_second(RATE).burst(BURST);
        let bucket = tower_throttle::Bucket::new(quota);
        while bucket.try_acquire(1).is_ok() {}
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let before = own_cpu_ns();
        let mut waiters: Vec<Pin<Box<dyn Future<Output = _> + '_>>> = (0..WAITERS)
            .map(|_| {
                let mut w: Pin<Box<dyn Future<Output = _> + '_>> = Box::pin(bucket.acquire(1));
                assert!(matches!(w.as_mut().poll(&mut cx), Poll::Pending));
                w
            })
            .collect();
        let queued = own_cpu_ns() - before;
        assert_eq!(bucket.snapshot().waiting, WAITERS);
        match order {
            Order::Arrival => waiters.reverse(),
            Order::Reverse => {}
            Order::Random => shuffle(&mut waiters),
        }
        let before = own_cpu_ns();
        while waiters.pop().is_some() {}
        let dropped = own_cpu_ns() - before;
        assert_eq!(bucket.snapshot().waiting, 0);
        (queued, dropped)
    })
}

/// CPU ns of governor's 3 s run with `WAITERS` tasks on `until_ready()`.
fn governor() -> u64 {
    let before = thread_cpu_ns();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let quota = governor::Quota::per_second(NonZeroU32::new(RATE).unwrap())
            .allow_burst(NonZeroU32::new(BURST).unwrap());
        let limiter = Arc::new(governor::RateLimiter::direct(quota));
        let start = Instant::now();
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move {
                    loop {
                        limiter.until_ready().await;
                    }
                })
            })
            .collect();
        tokio::time::sleep_until((start + RUN).into()).await;
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let cpu = thread_cpu_ns()
        .into_iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(&tid).copied().unwrap_or(0)))
        .sum();
    drop(rt);
    cpu
}

fn main() {
    let governor = governor();
    println!("{WAITERS} waiters, {RATE}/s burst {BURST}\n");
    println!("| run | CPU ms | / governor's 3 s run |");
    println!("|---|---:|---:|");
    println!(
        "| governor 0.10: 3 s of `until_ready()` with {WAITERS} tasks | {:.1} | 1 |",
        governor as f64 / 1e6
    );
    for order in [Order::Arrival, Order::Reverse, Order::Random] {
        let (queued, dropped) = ours(order);
        println!(
            "| ours: drop {WAITERS} queued `acquire(1)`, {order:?} order | {:.2} | {:.4} |",
            dropped as f64 / 1e6,
            dropped as f64 / governor as f64
        );
        println!(
            "| ours: (queue them, for reference) | {:.2} | {:.4} |",
            queued as f64 / 1e6,
            queued as f64 / governor as f64
        );
    }
}
