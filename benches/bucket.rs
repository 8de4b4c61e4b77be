//! Hot-path cost of admission, side by side with governor and tower.
//!
//! Every limiter is configured so that it never refuses: these numbers are the price of a
//! decision, not of waiting.
//!
//! ```text
//! cargo bench --bench bucket -- --warm-up-time 1 --measurement-time 3
//! ```

use std::convert::Infallible;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::Criterion;
use tower::{Service, ServiceExt};

#[path = "support/threads.rs"]
mod threads;
use threads::two_threads;

const WARM_UP: Duration = Duration::from_secs(1);
const MEASURE: Duration = Duration::from_secs(3);

/// Ours, never refusing: one token per nanosecond, one second of burst.
fn always_allow() -> tower_throttle::Quota {
    tower_throttle::Quota::with_period(Duration::from_nanos(1)).burst(1_000_000_000)
}

/// Ours on tokio's clock, the default.
fn our_bucket() -> tower_throttle::Bucket {
    tower_throttle::Bucket::new(always_allow())
}

/// Ours on the CPU's time-stamp counter (feature `quanta`).
#[cfg(feature = "quanta")]
fn our_tsc_bucket() -> tower_throttle::Bucket {
    tower_throttle::Bucket::builder(always_allow())
        .tsc_clock()
        .build()
}

/// Governor, never refusing: one cell per nanosecond, the largest burst.
fn governor_limiter() -> governor::DefaultDirectRateLimiter {
    let quota = governor::Quota::with_period(Duration::from_nanos(1))
        .expect("non-zero period")
        .allow_burst(NonZeroU32::MAX);
    governor::RateLimiter::direct(quota)
}

/// Tower's fixed window, never refusing.
fn tower_rate() -> tower::limit::rate::Rate {
    tower::limit::rate::Rate::new(u64::MAX, Duration::from_secs(3600))
}

/// Fails loudly if a configuration could refuse, which would make its figures meaningless.
fn check_always_allow() {
    let ours = our_bucket();
    let gov = governor_limiter();
    for _ in 0..1_000_000 {
        assert!(ours.try_acquire(1).is_ok(), "our bucket refused");
        assert!(gov.check().is_ok(), "governor refused");
    }
    #[cfg(feature = "quanta")]
    {
        let tsc = our_tsc_bucket();
        for _ in 0..1_000_000 {
            assert!(tsc.try_acquire(1).is_ok(), "our TSC bucket refused");
        }
    }
}

fn single_thread(c: &mut Criterion) {
    check_always_allow();
    let mut g = c.benchmark_group("single_thread");
    g.warm_up_time(WARM_UP).measurement_time(MEASURE);

    let ours = our_bucket();
    g.bench_function("ours_try_acquire", |b| {
        b.iter(|| black_box(ours.try_acquire(black_box(1))).is_ok())
    });

    #[cfg(feature = "quanta")]
    {
        let tsc = our_tsc_bucket();
        g.bench_function("ours_try_acquire_tsc_clock", |b| {
            b.iter(|| black_box(tsc.try_acquire(black_box(1))).is_ok())
        });
    }

    let gov = governor_limiter();
    g.bench_function("governor_check", |b| {
        b.iter(|| black_box(gov.check()).is_ok())
    });

    g.finish();
}

/// The clock reads underneath: ours reads tokio's clock by default, governor reads quanta's.
fn clocks(c: &mut Criterion) {
    use governor::clock::Clock as _;

    let mut g = c.benchmark_group("clock_read");
    g.warm_up_time(WARM_UP).measurement_time(MEASURE);
    g.bench_function("tokio_Instant_now", |b| b.iter(tokio::time::Instant::now));
    g.bench_function("std_Instant_now", |b| b.iter(Instant::now));
    let quanta = governor::clock::QuantaClock::default();
    g.bench_function("governor_QuantaClock_now", |b| b.iter(|| quanta.now()));
    g.finish();
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads");
    g.warm_up_time(WARM_UP).measurement_time(MEASURE);

    let ours = our_bucket();
    g.bench_function("ours_try_acquire", |b| {
        b.iter_custom(|iters| two_threads(iters, || black_box(ours.try_acquire(1)).is_ok()))
    });

    #[cfg(feature = "quanta")]
    {
        let tsc = our_tsc_bucket();
        g.bench_function("ours_try_acquire_tsc_clock", |b| {
            b.iter_custom(|iters| two_threads(iters, || black_box(tsc.try_acquire(1)).is_ok()))
        });
    }

    let gov = governor_limiter();
    g.bench_function("governor_check", |b| {
        b.iter_custom(|iters| two_threads(iters, || black_box(gov.check()).is_ok()))
    });

    g.finish();
}

/// `iters` rounds of `ready().await` then `call(()).await` on `svc`, on `rt`.
fn drive<S>(rt: &tokio::runtime::Runtime, svc: &mut S, iters: u64) -> Duration
where
    S: Service<()>,
    S::Error: std::fmt::Debug,
{
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            let ready = svc.ready().await.unwrap();
            black_box(ready.call(()).await.unwrap());
        }
        start.elapsed()
    })
}

fn service_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Tower's `RateLimit` and `Buffer` need a runtime when they are built.
    let _guard = rt.enter();
    let leaf = || tower::service_fn(|()| async { Ok::<_, Infallible>(()) });

    let mut g = c.benchmark_group("service_ready_call");
    g.warm_up_time(WARM_UP).measurement_time(MEASURE);

    let mut bare = leaf();
    g.bench_function("bare_service_fn", |b| {
        b.iter_custom(|iters| drive(&rt, &mut bare, iters))
    });

    let original = tower_throttle::RateLimit::new(leaf(), our_bucket());
    let mut ours = original.clone();
    g.bench_function("ours_RateLimit_clone", |b| {
        b.iter_custom(|iters| drive(&rt, &mut ours, iters))
    });

    #[cfg(feature = "quanta")]
    {
        let mut tsc = tower_throttle::RateLimit::new(leaf(), our_tsc_bucket()).clone();
        g.bench_function("ours_RateLimit_clone_tsc_clock", |b| {
            b.iter_custom(|iters| drive(&rt, &mut tsc, iters))
        });
    }

    let mut tower_rl = tower::limit::RateLimit::new(leaf(), tower_rate());
    g.bench_function("tower_RateLimit", |b| {
        b.iter_custom(|iters| drive(&rt, &mut tower_rl, iters))
    });

    let mut buffered =
        tower::buffer::Buffer::new(tower::limit::RateLimit::new(leaf(), tower_rate()), 1024);
    g.bench_function("tower_Buffer_RateLimit", |b| {
        b.iter_custom(|iters| drive(&rt, &mut buffered, iters))
    });

    g.finish();
    drop(original);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    single_thread(&mut c);
    clocks(&mut c);
    contended(&mut c);
    service_path(&mut c);
    c.final_summary();
}
