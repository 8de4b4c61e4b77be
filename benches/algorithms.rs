//! Each algorithm's `try_acquire` next to the token bucket and governor's `check`, in one run:
//! on one [`Bucket`], and per key on a [`KeyedBucket`] of 1,000 live keys (next to governor's
//! keyed `check_key`).
//!
//! ```text
//! cargo bench --bench algorithms -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Every limiter is configured never to refuse (a huge limit per short period), so these are
//! the costs of admitting. The sliding log keeps one entry per admission for its period
//! (1 ms here), so its figure includes expiring them.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::Criterion;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Algorithm, Bucket, Quota};

const ALGORITHMS: [(&str, Algorithm); 5] = [
    ("token_bucket", Algorithm::TokenBucket),
    ("leaky_bucket", Algorithm::leaky_bucket(1)),
    ("fixed_window", Algorithm::FixedWindow),
    ("sliding_window", Algorithm::SlidingWindow),
    ("sliding_log", Algorithm::SlidingLog),
];

/// A quota no run can exhaust, for `algorithm`.
fn never_refusing(algorithm: Algorithm) -> Quota {
    match algorithm {
        // Token and leaky buckets: 1 token per ns, a burst far beyond any run.
        Algorithm::TokenBucket | Algorithm::LeakyBucket { .. } => {
            Quota::with_period(Duration::from_nanos(1)).burst(1_000_000_000)
        }
        // Windows: far more per millisecond than a thread can ask.
        _ => Quota::new(u32::MAX / 2, Duration::from_millis(1)),
    }
}

fn bucket(algorithm: Algorithm) -> Bucket {
    let b = Bucket::builder(never_refusing(algorithm))
        .algorithm(algorithm)
        .build();
    for _ in 0..100_000 {
        assert!(b.try_acquire(1).is_ok(), "{algorithm:?} refused");
    }
    b
}

fn algorithms(c: &mut Criterion) {
    let _rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("try_acquire_by_algorithm");
    for (name, algorithm) in ALGORITHMS {
        let b = bucket(algorithm);
        g.bench_function(name, |bench| bench.iter(|| black_box(b.try_acquire(1))));
    }
    let governor = governor::RateLimiter::direct(
        governor::Quota::with_period(Duration::from_nanos(1))
            .expect("period")
            .allow_burst(NonZeroU32::MAX),
    );
    g.bench_function("governor_check", |bench| {
        bench.iter(|| black_box(governor.check()))
    });
    g.finish();
}

/// 1,000 keys in a fixed pseudo-random order.
fn keys() -> Vec<u64> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..1_000)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            x >> 1
        })
        .collect()
}

fn keyed(c: &mut Criterion) {
    let _rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let keys = keys();
    let mut g = c.benchmark_group("keyed_try_acquire_by_algorithm");
    for (name, algorithm) in ALGORITHMS {
        let b = KeyedBucket::builder(never_refusing(algorithm))
            .algorithm(algorithm)
            .build();
        for k in &keys {
            assert!(b.try_acquire(k, 1).is_ok(), "{algorithm:?} refused");
        }
        let mut i = 0;
        g.bench_function(name, |bench| {
            bench.iter(|| {
                i = if i + 1 == keys.len() { 0 } else { i + 1 };
                black_box(b.try_acquire(&keys[i], 1))
            })
        });
    }
    let governor = governor::RateLimiter::keyed(
        governor::Quota::with_period(Duration::from_nanos(1))
            .expect("period")
            .allow_burst(NonZeroU32::MAX),
    );
    let mut i = 0;
    g.bench_function("governor_check_key", |bench| {
        bench.iter(|| {
            i = if i + 1 == keys.len() { 0 } else { i + 1 };
            black_box(governor.check_key(&keys[i]))
        })
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    algorithms(&mut c);
    keyed(&mut c);
    c.final_summary();
}
