//! Keyed limits side by side with governor's keyed limiter: the cost of a check at 1, 1,000
//! and 100,000 live keys, and the memory per key at 1,000,000 `u64` keys. Beside each
//! one-quota row, `ours_3_quotas` checks a plan of three quotas (per second, per minute, and
//! per day in fixed windows), so the price of stacking reads off the same run.
//! `keyed_two_threads_one_key` checks one key from two threads at once, the contended path.
//!
//! ```text
//! cargo bench --bench keyed -- --warm-up-time 1 --measurement-time 3
//! cargo bench --bench keyed --features quanta -- --warm-up-time 1 --measurement-time 3
//! cargo bench --bench keyed -- 'keyed_check/ours(_3_quotas)?/(1|1000)$'
//! cargo bench --bench keyed --features quanta -- keyed_two_threads_one_key
//! ```
//!
//! Both limiters are configured never to refuse within a run (a token a second, a burst of
//! 10^9), so the figures are the price of a decision; and every key stays tracked (its bucket
//! is never full again during the run: ours could otherwise forget it and look up a smaller
//! table). The keys are checked in a fixed pseudo-random order. Memory is measured in a child
//! process of this binary that does nothing but insert the keys: the growth of its resident
//! set, next to (for ours) the bytes the tables report.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::Command;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Algorithm, Plan, Quota};

#[path = "support/keys.rs"]
mod support;
use support::keys;

#[path = "support/threads.rs"]
mod threads;
use threads::two_threads;

const CHILD: &str = "KEYED_BENCH_CHILD";
const MEMORY_KEYS: u64 = 1_000_000;

const BURST: u32 = 1_000_000_000;

fn quota() -> Quota {
    Quota::with_period(Duration::from_secs(1)).burst(BURST)
}

fn ours() -> KeyedBucket<u64> {
    KeyedBucket::builder(quota()).max_keys(4_000_000).build()
}

/// Three quotas decided together, none of which refuses within a run.
fn ours_3_quotas() -> KeyedBucket<u64> {
    let plan = Plan::new(quota())
        .and(Quota::per_minute(BURST))
        .and(Quota::per_day(BURST))
        .algorithm(Algorithm::FixedWindow);
    KeyedBucket::builder(plan).max_keys(4_000_000).build()
}

#[cfg(feature = "quanta")]
fn ours_tsc() -> KeyedBucket<u64> {
    KeyedBucket::builder(quota())
        .max_keys(4_000_000)
        .tsc_clock()
        .build()
}

fn governor() -> governor::DefaultKeyedRateLimiter<u64> {
    let quota = governor::Quota::with_period(Duration::from_secs(1))
        .expect("non-zero period")
        .allow_burst(NonZeroU32::new(BURST).expect("non-zero burst"));
    governor::RateLimiter::keyed(quota)
}

fn check(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_check");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for n in [1u64, 1_000, 100_000] {
        let keys = keys(n);

        let mine = ours();
        for k in &keys {
            assert!(mine.try_acquire(k, 1).is_ok(), "ours refused");
        }
        assert_eq!(mine.len() as u64, n);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("ours", n), &keys, |b, keys| {
            b.iter(|| {
                i = if i + 1 == keys.len() { 0 } else { i + 1 };
                black_box(mine.try_acquire(&keys[i], 1)).is_ok()
            })
        });

        let stacked = ours_3_quotas();
        for k in &keys {
            assert!(stacked.try_acquire(k, 1).is_ok(), "ours (3 quotas) refused");
        }
        assert_eq!(stacked.len() as u64, n);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("ours_3_quotas", n), &keys, |b, keys| {
            b.iter(|| {
                i = if i + 1 == keys.len() { 0 } else { i + 1 };
                black_box(stacked.try_acquire(&keys[i], 1)).is_ok()
            })
        });

        #[cfg(feature = "quanta")]
        {
            let mine = ours_tsc();
            for k in &keys {
                assert!(mine.try_acquire(k, 1).is_ok(), "ours (tsc) refused");
            }
            let mut i = 0;
            g.bench_with_input(BenchmarkId::new("ours_tsc_clock", n), &keys, |b, keys| {
                b.iter(|| {
                    i = if i + 1 == keys.len() { 0 } else { i + 1 };
                    black_box(mine.try_acquire(&keys[i], 1)).is_ok()
                })
            });
        }

        let gov = governor();
        for k in &keys {
            assert!(gov.check_key(k).is_ok(), "governor refused");
        }
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("governor", n), &keys, |b, keys| {
            b.iter(|| {
                i = if i + 1 == keys.len() { 0 } else { i + 1 };
                black_box(gov.check_key(&keys[i])).is_ok()
            })
        });
    }
    g.finish();
}

/// One key, checked from two threads at once: the contended path of a keyed limit.
fn one_key_two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_two_threads_one_key");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mine = ours();
    g.bench_function("ours", |b| {
        b.iter_custom(|iters| two_threads(iters, || black_box(mine.try_acquire(&7, 1)).is_ok()))
    });
    #[cfg(feature = "quanta")]
    {
        let mine = ours_tsc();
        g.bench_function("ours_tsc_clock", |b| {
            b.iter_custom(|iters| two_threads(iters, || black_box(mine.try_acquire(&7, 1)).is_ok()))
        });
    }
    let gov = governor();
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| two_threads(iters, || black_box(gov.check_key(&7)).is_ok()))
    });
    g.finish();
}

/// Resident set size of this process, bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// In the child: insert the keys into one limiter, print `rss_growth reported_bytes len`.
fn child(which: &str) {
    let keys = keys(MEMORY_KEYS);
    let before = rss();
    if which == "ours" {
        let mine = ours();
        for k in &keys {
            assert!(mine.try_acquire(k, 1).is_ok());
        }
        println!(
            "{} {} {}",
            rss() - before,
            mine.allocated_bytes(),
            mine.len()
        );
    } else {
        let gov = governor();
        for k in &keys {
            assert!(gov.check_key(k).is_ok());
        }
        println!("{} 0 {}", rss() - before, gov.len());
    }
}

fn memory() {
    let exe = std::env::current_exe().expect("own path");
    println!("memory per key at {MEMORY_KEYS} u64 keys (resident set growth of a child process):");
    for which in ["ours", "governor"] {
        let out = Command::new(&exe)
            .env(CHILD, which)
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&out.stdout);
        let fields: Vec<u64> = text
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [grown, reported, len] = fields[..] else {
            println!(
                "  {which}: child failed: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        };
        let per = |bytes: u64| bytes as f64 / len as f64;
        if which == "ours" {
            println!(
                "  {which:<9} {:>6.1} B/key measured, {:>6.1} B/key in its tables ({len} keys)",
                per(grown),
                per(reported)
            );
        } else {
            println!(
                "  {which:<9} {:>6.1} B/key measured ({len} keys)",
                per(grown)
            );
        }
    }
}

fn main() {
    if let Ok(which) = std::env::var(CHILD) {
        child(&which);
        return;
    }
    memory();
    let mut c = Criterion::default().configure_from_args();
    check(&mut c);
    one_key_two_threads(&mut c);
    c.final_summary();
}
