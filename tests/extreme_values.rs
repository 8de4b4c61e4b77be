//! Any value a constructor accepts is safe afterwards: the largest and smallest quotas, every
//! pause length up to `Duration::MAX`, costs of 0, 1, the burst and one more, for every
//! algorithm. Each case runs in a child process (this test binary, re-executed) under a
//! virtual memory cap and a time limit, so an abort, an unbounded allocation or a hang fails
//! the test instead of taking the suite down.
//!
//! In release builds too: `cargo test --release --all-features --test extreme_values`.

use std::process::Command;
use std::time::Duration;

use tokio::time::timeout;
use tower_throttle::{Algorithm, Bucket, Quota};

/// Set in the child to the name of the case it runs.
const CHILD: &str = "TOWER_THROTTLE_EXTREME_CASE";
/// The child's address-space cap, in KiB (1 GiB: far below what any unbounded path asks).
const CAP_KIB: u64 = 1 << 20;
/// The child's time limit, in seconds.
const LIMIT_S: u64 = 120;

/// Runs `body` in a child process under the caps, or runs it here if this is that child.
fn isolated(name: &str, body: impl FnOnce()) {
    if std::env::var(CHILD).as_deref() == Ok(name) {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "ulimit -v {CAP_KIB} && exec timeout {LIMIT_S} \"$0\" --exact {name} --test-threads=1 --nocapture"
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(&exe)
        .env(CHILD, name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: the child failed ({}) under a {CAP_KIB} KiB cap:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The child really ran the case (and did not just filter it out).
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

fn algorithms() -> [Algorithm; 5] {
    [
        Algorithm::TokenBucket,
        Algorithm::leaky_bucket(16),
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ]
}

/// The longest period a quota accepts (burst × interval must stay below 2^62 ns).
fn longest() -> Duration {
    Duration::from_nanos(u64::MAX / 4 - 1)
}

/// Every extreme quota that construction accepts.
fn quotas() -> Vec<Quota> {
    let mut q = vec![
        Quota::new(u32::MAX, Duration::from_secs(1)),
        Quota::new(u32::MAX, Duration::from_nanos(1)),
        Quota::new(1, Duration::from_nanos(1)),
        Quota::with_period(longest()),
        Quota::per_second(u32::MAX).burst(u32::MAX),
    ];
    q.extend(Quota::try_new(u32::MAX, longest()).ok());
    q.extend(Quota::per_second(1).try_burst(u32::MAX).ok());
    q
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Costs 0, 1, the burst and one more, by `try_acquire` and by `acquire` (bounded by a
/// timeout on the paused clock).
async fn costs(bucket: &Bucket) {
    let burst = bucket.quota().burst_size().max(bucket.quota().count());
    for n in [0, 1, burst, burst.saturating_add(1), u32::MAX] {
        let _ = bucket.try_acquire(n);
        let _ = timeout(Duration::from_secs(1), bucket.acquire(n)).await;
        let _ = bucket.snapshot();
    }
}

#[test]
fn extreme_quotas_and_costs() {
    isolated("extreme_quotas_and_costs", || {
        runtime().block_on(async {
            for algorithm in algorithms() {
                for quota in quotas() {
                    let bucket = Bucket::builder(quota).algorithm(algorithm).build();
                    costs(&bucket).await;
                    for other in quotas() {
                        bucket.set_quota(other);
                        costs(&bucket).await;
                    }
                }
            }
        });
    });
}

#[test]
fn pauses_of_any_length() {
    isolated("pauses_of_any_length", || {
        runtime().block_on(async {
            let pauses = [
                Duration::ZERO,
                Duration::from_nanos(1),
                Duration::from_secs(1),
                Duration::from_secs(3600),
                Duration::from_secs(u64::MAX / 4),
                Duration::MAX,
            ];
            for algorithm in algorithms() {
                for quota in quotas() {
                    let bucket = Bucket::builder(quota).algorithm(algorithm).build();
                    // A waiter in line while the pauses come.
                    let waiter = {
                        let b = bucket.clone();
                        tokio::spawn(async move {
                            let _ = timeout(Duration::from_secs(2), b.acquire(1)).await;
                        })
                    };
                    let _ = bucket.try_acquire(quota.burst_size().min(quota.count()));
                    for pause in pauses {
                        bucket.pause(pause);
                        costs(&bucket).await;
                    }
                    bucket.set_quota(Quota::per_second(1));
                    waiter.await.unwrap();
                    let s = bucket.snapshot();
                    assert!(s.paused_until.is_some());
                }
            }
        });
    });
}

#[test]
fn a_window_after_an_hour_idle_on_a_1_ms_period() {
    isolated("a_window_after_an_hour_idle_on_a_1_ms_period", || {
        runtime().block_on(async {
            for algorithm in algorithms() {
                let bucket = Bucket::builder(Quota::new(5, Duration::from_millis(1)))
                    .algorithm(algorithm)
                    .build();
                bucket.try_acquire(1).unwrap();
                tokio::time::advance(Duration::from_secs(3600)).await;
                bucket.pause(Duration::from_secs(3600));
                tokio::time::advance(Duration::from_secs(3600)).await;
                assert!(bucket.try_acquire(1).is_ok(), "{algorithm:?}");
            }
        });
    });
}

/// Plans of two extreme quotas, every pair of algorithms, in a `Bucket` and per key, and a
/// key moved between two such plans back and forth.
#[test]
fn extreme_plans() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tower_throttle::{KeyedBucket, Plan};

    isolated("extreme_plans", || {
        runtime().block_on(async {
            let quotas = quotas();
            for first in algorithms() {
                for second in algorithms() {
                    for (i, q1) in quotas.iter().enumerate() {
                        for q2 in &quotas[i..] {
                            let plan = Plan::new(*q1).algorithm(first).and(*q2).algorithm(second);
                            let bucket = Bucket::new(plan.clone());
                            costs(&bucket).await;
                            bucket.set_quota(*q2);
                            costs(&bucket).await;

                            let other = Plan::new(*q2).algorithm(second).and(*q1);
                            let moved = Arc::new(AtomicBool::new(false));
                            let on_other = Arc::clone(&moved);
                            let keys: KeyedBucket<u8> = KeyedBucket::builder(plan)
                                .plan("other", other)
                                .resolve(move |_| {
                                    on_other.load(Ordering::Relaxed).then_some("other")
                                })
                                .build();
                            for n in [0, 1, u32::MAX] {
                                for _ in 0..2 {
                                    let _ = keys.try_acquire(&7, n);
                                    let _ = keys.snapshot(&7);
                                    moved.fetch_xor(true, Ordering::Relaxed);
                                }
                                tokio::time::advance(Duration::from_secs(1)).await;
                            }
                            keys.set_quota(*q2);
                            let _ = keys.try_acquire(&7, 1);
                        }
                    }
                }
            }
        });
    });
}

/// Priority classes at the weights' extremes, a reserve of nearly everything, and costs of
/// every class from 0 to `u32::MAX`, waiting and not, on every algorithm and extreme quota.
#[test]
fn extreme_priorities_and_reserves() {
    use tower_throttle::{Cost, Priority};
    isolated("extreme_priorities_and_reserves", || {
        runtime().block_on(async {
            for algorithm in algorithms() {
                for quota in quotas() {
                    let bucket = Bucket::builder(quota)
                        .algorithm(algorithm)
                        .priority_weights([0, u32::MAX, 1])
                        .reserve_for_critical(0.999_999)
                        .build();
                    let burst = quota.burst_size().max(quota.count());
                    for n in [0, 1, burst, burst.saturating_add(1), u32::MAX] {
                        for p in [Priority::Critical, Priority::Normal, Priority::Background] {
                            let _ = bucket.try_charge(Cost::from(n).priority(p));
                            let waited = bucket.acquire(n).priority(p);
                            let _ = timeout(Duration::from_millis(10), waited).await;
                            let charged = bucket.charge(Cost::from(n).priority(p));
                            let _ = timeout(Duration::from_millis(10), charged).await;
                        }
                    }
                    costs(&bucket).await;
                }
            }
        });
    });
}
