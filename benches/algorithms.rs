//! Each algorithm's `try_acquire` next to the token bucket and governor's `check`, in one run.
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
use tower_throttle::{Algorithm, Bucket, Quota};

fn bucket(algorithm: Algorithm) -> Bucket {
    let quota = match algorithm {
        // Token and leaky buckets: 1 token per ns, a burst far beyond any run.
        Algorithm::TokenBucket | Algorithm::LeakyBucket { .. } => {
            Quota::with_period(Duration::from_nanos(1)).burst(1_000_000_000)
        }
        // Windows: far more per millisecond than a thread can ask.
        _ => Quota::new(u32::MAX / 2, Duration::from_millis(1)),
    };
    let b = Bucket::with_algorithm(quota, algorithm);
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
    for (name, algorithm) in [
        ("token_bucket", Algorithm::TokenBucket),
        ("leaky_bucket", Algorithm::LeakyBucket { max_queue: 1 }),
        ("fixed_window", Algorithm::FixedWindow),
        ("sliding_window", Algorithm::SlidingWindow),
        ("sliding_log", Algorithm::SlidingLog),
    ] {
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

fn main() {
    let mut c = Criterion::default().configure_from_args();
    algorithms(&mut c);
    c.final_summary();
}
