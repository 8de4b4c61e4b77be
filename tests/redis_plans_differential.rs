//! Differential test for plans: a [`KeyedBucket`] with two plans of two quotas and the Redis
//! plan scripts make the same decisions (admit or refuse, and the wait) over random
//! sequences of arrivals and weighted costs, for every pair of algorithms, with the key's
//! plan raised in the middle of half of them.
//!
//! The scripts run with the clock read from their last argument (see
//! `redis_support/lua.rs`), and the in-process table on tokio's paused clock with its
//! windows falling on the test's start (a minute after the table's), which the scripts see at an instant that is a
//! multiple of every window (the Redis windows are aligned to the UNIX epoch). Every
//! instant is a whole number of µs after the start, and every quota has whole-µs
//! intervals: the in-process wait rounded up to whole µs must equal the script's.
//!
//! The raise changes both quotas at the same places: a faster rate and a larger burst for
//! the token and leaky bucket, more tokens in the same window for the windows (a lowered
//! window count is carried apart in each: in process the tokens left stay available, in
//! Redis the tokens counted stay counted; `tests/redis_plans.rs` holds both to the bound).
//!
//! A failure names the algorithms, the seed and the operation. To replay one sequence with
//! every decision and the stored states printed: `PLAN_DIFF_ONLY=<i>-<j>-<seed> cargo test
//! --all-features --test redis_plans_differential -- --nocapture`, `i` and `j` the places of
//! the algorithms in `ALL`.
#![cfg(feature = "redis")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower_throttle::{Algorithm, Denied, KeyedBucket, Plan, Quota};

#[path = "redis_support/lua.rs"]
mod lua;
mod redis_support;

use lua::{connection, int, invoke_keys, marker, plan_keys, plan_script, Args, Rng, ACQUIRE};

const ALL: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::leaky_bucket(16),
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// Sequences per pair of algorithms, operations per sequence.
const SEQUENCES: u64 = 24;
const OPS: usize = 40;

/// A multiple of every window here (1 s, 6 s), in µs of the scripts' clock: the start.
const ORIGIN_US: u64 = 1_700_006_400_000_000;

/// The plan before (`raised` false) and after the raise.
fn quotas(raised: bool) -> [Quota; 2] {
    if raised {
        [
            Quota::per_second(10).burst(8),
            Quota::new(20, Duration::from_secs(6)).burst(20),
        ]
    } else {
        [
            Quota::per_second(5).burst(5),
            Quota::new(12, Duration::from_secs(6)).burst(12),
        ]
    }
}

fn plan(algorithms: [Algorithm; 2], raised: bool) -> Plan {
    let [a, b] = quotas(raised);
    Plan::new(a)
        .algorithm(algorithms[0])
        .and(b)
        .algorithm(algorithms[1])
}

/// The scripts' arguments of a request of `n` tokens at `now_us`.
fn args(algorithms: [Algorithm; 2], raised: bool, n: u64, now_us: u64) -> Vec<String> {
    let mut all = Vec::with_capacity(31);
    let plan: Vec<_> = algorithms.into_iter().zip(quotas(raised)).collect();
    for &(algorithm, quota) in &plan {
        let call = Args::of(algorithm, quota).call(n, 0, now_us);
        all.extend(call[..14].iter().map(u64::to_string));
    }
    all.push(marker(&plan));
    // The base plan: the one before the raise (its keys carry no marker).
    let base: Vec<_> = algorithms.into_iter().zip(quotas(false)).collect();
    all.push(marker(&base));
    all.push(now_us.to_string());
    all
}

#[tokio::test(start_paused = true)]
async fn the_plan_scripts_decide_as_the_keyed_table_does() {
    let mut conn = connection();
    let prefix = redis_support::unique_prefix("plan-diff");
    for (i, &first) in ALL.iter().enumerate() {
        for (j, &second) in ALL.iter().enumerate() {
            let algorithms = [first, second];
            let acquire = plan_script(&algorithms, ACQUIRE);
            for seed in 0..SEQUENCES {
                // `PLAN_DIFF_ONLY=<first>-<second>-<seed>` replays one sequence, traced.
                let only = std::env::var("PLAN_DIFF_ONLY").ok();
                let trace = only.as_deref() == Some(&*format!("{i}-{j}-{seed}"));
                if only.is_some() && !trace {
                    continue;
                }
                let mut rng = Rng(seed * 31 + (i * 5 + j) as u64);
                let raised = Arc::new(AtomicBool::new(false));
                let told = Arc::clone(&raised);
                let table: KeyedBucket<u8> = KeyedBucket::builder(plan(algorithms, false))
                    .plan("raised", plan(algorithms, true))
                    .resolve(move |_| told.load(Ordering::Relaxed).then_some("raised"))
                    .window_origin(tokio::time::Instant::now())
                    .build();
                // A minute on: windows before the first one here, as on the Redis clock.
                tokio::time::advance(Duration::from_secs(60)).await;
                let key = format!("{prefix}:{{{i}-{j}-{seed}}}");
                let keys = plan_keys(&key, 2);
                let raise_at = if seed % 2 == 1 {
                    rng.range(1, OPS as u64 - 1) as usize
                } else {
                    OPS
                };
                let mut t_us = 0u64;
                for op in 0..OPS {
                    if op == raise_at {
                        raised.store(true, Ordering::Relaxed);
                    }
                    let step = match rng.range(0, 9) {
                        0 => rng.range(1_000_000, 7_000_000),
                        1..=3 => 0,
                        _ => rng.range(1, 400_000),
                    };
                    t_us += step;
                    tokio::time::advance(Duration::from_micros(step)).await;
                    let n = rng.range(1, 5);
                    let is_raised = raised.load(Ordering::Relaxed);
                    let local = table.try_acquire(&0, n as u32);
                    let reply = invoke_keys(
                        &mut conn,
                        &acquire,
                        &keys,
                        args(algorithms, is_raised, n, ORIGIN_US + t_us),
                    );
                    let (admitted, wait) = (int(&reply[0]) == 1, int(&reply[1]));
                    if trace {
                        let stored: Vec<Option<String>> = keys
                            .iter()
                            .filter(|k| !k.ends_with(":log"))
                            .map(|k| redis::cmd("GET").arg(k).query(&mut conn).unwrap_or(None))
                            .collect();
                        println!(
                            "op {op} t {t_us} n {n} raised {is_raised}: local {local:?}, \
                             redis {admitted} {wait}, stored {stored:?}"
                        );
                    }
                    let at = format!(
                        "{algorithms:?} seed {seed} op {op} ({n} tokens at {t_us} µs, raised \
                         {is_raised})"
                    );
                    match local {
                        Ok(()) => assert!(admitted, "{at}: admitted in process only"),
                        Err(Denied::Throttled(t)) => {
                            assert!(!admitted, "{at}: admitted in Redis only");
                            let local_us = t.wait().as_nanos().div_ceil(1000) as u64;
                            assert_eq!(local_us, wait, "{at}: the waits differ");
                        }
                        Err(e) => panic!("{at}: {e}"),
                    }
                }
                let _: () = redis::cmd("DEL").arg(&keys).query(&mut conn).unwrap();
            }
        }
    }
}
