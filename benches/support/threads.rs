//! Two threads on one limiter, shared by the benches that measure contention.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `op` on two threads, `iters` times in all, and returns the wall time from the moment
/// both are released to the moment the last one finishes: criterion's time per iteration is
/// then the aggregate time per operation.
pub(crate) fn two_threads<F: Fn() -> bool + Sync>(iters: u64, op: F) -> Duration {
    let barrier = Barrier::new(2);
    let per_thread = [iters / 2, iters - iters / 2];
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = per_thread
            .iter()
            .map(|&n| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut refused = 0u64;
                    for _ in 0..n {
                        refused += u64::from(!op());
                    }
                    let end = Instant::now();
                    assert_eq!(refused, 0, "a limiter refused under contention");
                    (start, end)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    end - start
}
