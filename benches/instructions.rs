//! Instructions per decision on the in-process hot paths, for an instruction counter such as
//! valgrind's callgrind: the count does not move with the machine's load, where the times of
//! `benches/bucket.rs` and `benches/keyed.rs` do.
//!
//! `instructions ROW N` builds the limiter of the criterion row of the same name (the same
//! quota, never refusing), warms it up (a keyed row first inserts every key), then runs the
//! operation `N` times (default 200,000) in `measured_loop` or `measured_service`. Callgrind
//! counts those alone with `--toggle-collect`: the count divided by `N` is the cost of one
//! operation, the set-up left out. (The difference of whole runs at `N` and `2N`, divided by
//! `N`, agrees, but carries the variation of the keyed set-up.) The keys come from a fixed
//! LCG, in the keyed bench's order; the keyed tables' hasher is seeded per process, so the
//! keyed rows move by a few instructions from run to run.
//!
//! ```text
//! cargo bench --bench instructions --no-run
//! valgrind --tool=callgrind --toggle-collect='instructions::measured_*' \
//!     --callgrind-out-file=/dev/null target/release/deps/instructions-HASH keyed_1000 200000
//! ```
//!
//! Rows: `try_acquire` (`single_thread/ours_try_acquire`), `ready_call`
//! (`service_ready_call/ours_RateLimit_clone`), `keyed_1`, `keyed_1000`, `keyed_100000`
//! (`keyed_check/ours/N`), `keyed_3_quotas_1`, `keyed_3_quotas_1000`, `keyed_3_quotas_100000`
//! (`keyed_check/ours_3_quotas/N`), and `charge`, `charge_2_quotas`, `charge_2_resources`:
//! `try_charge` of one request on a plan of one quota and of two quotas of requests, and of
//! one request and 100 tokens on a plan of a quota of requests and one of tokens, the charge
//! dropped each time; `charge_in_flight`: one request on a quota of requests and an
//! in-flight quota, its slot given back as the charge drops.

use std::convert::Infallible;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use tower::{Service, ServiceExt};
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Algorithm, Bucket, Cost, Plan, Quota, RateLimit, Resource};

#[path = "support/keys.rs"]
mod support;
use support::keys;

const DEFAULT_N: u64 = 200_000;
const WARM_UP: u64 = 10_000;

const ROWS: &str = "try_acquire, ready_call, keyed_1, keyed_1000, keyed_100000, \
                    keyed_3_quotas_1, keyed_3_quotas_1000, keyed_3_quotas_100000, \
                    charge, charge_2_quotas, charge_2_resources, charge_in_flight";

/// As in `benches/bucket.rs`: one token per nanosecond, one second of burst.
fn always_allow() -> Quota {
    Quota::with_period(Duration::from_nanos(1)).burst(1_000_000_000)
}

/// As in `benches/keyed.rs`: a token a second, a burst of 10^9.
const BURST: u32 = 1_000_000_000;

fn keyed_quota() -> Quota {
    Quota::with_period(Duration::from_secs(1)).burst(BURST)
}

fn ours() -> KeyedBucket<u64> {
    KeyedBucket::builder(keyed_quota())
        .max_keys(4_000_000)
        .build()
}

/// Three quotas decided together, none of which refuses within a run.
fn ours_3_quotas() -> KeyedBucket<u64> {
    let plan = Plan::new(keyed_quota())
        .and(Quota::per_minute(BURST))
        .and(Quota::per_day(BURST))
        .algorithm(Algorithm::FixedWindow);
    KeyedBucket::builder(plan).max_keys(4_000_000).build()
}

/// `single_thread/ours_try_acquire`: no runtime, tokio's clock.
fn try_acquire(n: u64) {
    let bucket = Bucket::new(always_allow());
    let mut refused = 0u64;
    for _ in 0..WARM_UP {
        refused += u64::from(bucket.try_acquire(1).is_err());
    }
    refused += measured_loop(n, || black_box(bucket.try_acquire(black_box(1))).is_ok());
    assert_eq!(refused, 0, "the bucket refused");
}

/// `try_charge` of `cost` on `plan`, never refusing, the charge kept.
fn charge(plan: Plan, cost: Cost, n: u64) {
    let bucket = Bucket::new(plan);
    let mut refused = 0u64;
    for _ in 0..WARM_UP {
        refused += u64::from(bucket.try_charge(cost.clone()).is_err());
    }
    refused += measured_loop(n, || black_box(bucket.try_charge(cost.clone())).is_ok());
    assert_eq!(refused, 0, "the bucket refused");
}

/// `service_ready_call/ours_RateLimit_clone`: `ready` then `call` through a clone, on a
/// current-thread runtime with every driver enabled.
fn ready_call(n: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let leaf = tower::service_fn(|()| async { Ok::<_, Infallible>(()) });
    let original = RateLimit::new(leaf, Bucket::new(always_allow()));
    let mut svc = original.clone();
    rt.block_on(async {
        for _ in 0..WARM_UP {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
    });
    measured_service(&rt, &mut svc, n);
    drop(original);
}

/// `n` rounds of `ready().await` then `call(()).await`, in one `block_on` as the criterion
/// row drives them.
#[inline(never)]
fn measured_service<S>(rt: &tokio::runtime::Runtime, svc: &mut S, n: u64)
where
    S: Service<()>,
    S::Error: std::fmt::Debug,
{
    rt.block_on(async {
        for _ in 0..n {
            let ready = svc.ready().await.unwrap();
            black_box(ready.call(()).await.unwrap());
        }
    });
}

/// `keyed_check/ours/N` and `keyed_check/ours_3_quotas/N`: every key inserted first, then
/// checked in turn.
fn keyed(limiter: KeyedBucket<u64>, count: u64, n: u64) {
    let keys = keys(count);
    for k in &keys {
        assert!(limiter.try_acquire(k, 1).is_ok(), "refused");
    }
    assert_eq!(limiter.len() as u64, count);
    let mut i = 0;
    let refused = measured_loop(n, || {
        i = if i + 1 == keys.len() { 0 } else { i + 1 };
        black_box(limiter.try_acquire(&keys[i], 1)).is_ok()
    });
    assert_eq!(refused, 0, "refused");
}

/// Runs `op` `n` times and counts its refusals: the code a callgrind run measures alone with
/// `--toggle-collect='instructions::measured_*'`.
#[inline(never)]
fn measured_loop(n: u64, mut op: impl FnMut() -> bool) -> u64 {
    let mut refused = 0u64;
    for _ in 0..n {
        refused += u64::from(!op());
    }
    refused
}

fn main() -> ExitCode {
    // `cargo bench` adds `--bench`; criterion-style flags are not ours.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let Some(row) = args.first() else {
        println!("usage: instructions ROW [N]   (ROW: {ROWS}; N: {DEFAULT_N})");
        return ExitCode::SUCCESS;
    };
    let n = match args.get(1).map(|s| s.replace('_', "").parse::<u64>()) {
        None => DEFAULT_N,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("N must be a whole number");
            return ExitCode::FAILURE;
        }
    };
    match row.as_str() {
        "try_acquire" => try_acquire(n),
        "ready_call" => ready_call(n),
        "charge" => charge(Plan::new(always_allow()), Cost::new(), n),
        "charge_2_quotas" => charge(
            Plan::new(always_allow()).and(always_allow()),
            Cost::new(),
            n,
        ),
        "charge_in_flight" => charge(
            Plan::new(always_allow())
                .and(Quota::new(1_000_000, Duration::from_secs(3600)))
                .in_flight(),
            Cost::new(),
            n,
        ),
        "charge_2_resources" => {
            let plan = Plan::new(always_allow())
                .and(always_allow())
                .counting(Resource::TOKENS);
            charge(plan, Cost::new().and(Resource::TOKENS, 100), n)
        }
        other => {
            let (limiter, count) = if let Some(c) = other.strip_prefix("keyed_3_quotas_") {
                (ours_3_quotas(), c)
            } else if let Some(c) = other.strip_prefix("keyed_") {
                (ours(), c)
            } else {
                eprintln!("unknown row {other:?}; rows: {ROWS}");
                return ExitCode::FAILURE;
            };
            match count.parse::<u64>() {
                Ok(count) if count > 0 => keyed(limiter, count, n),
                _ => {
                    eprintln!("unknown row {other:?}; rows: {ROWS}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
