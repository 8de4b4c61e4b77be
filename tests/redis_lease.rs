//! Leases on a Redis-backed bucket: exact counts in one process, every token of a frozen
//! bucket admitted once by many tasks and handles (on one server and on a cluster), the
//! settings refused at construction, and across OS processes the stated bound (`burst +
//! rate·t + outstanding leases`), a pause reaching another process within one lease period,
//! and a process that dies holding a lease losing at most that lease.
//!
//! The parent runs this test binary again as workers: `TOWER_THROTTLE_LEASE_WORKER` makes
//! [`worker_process_entry_point`] run one (in a normal run it has nothing to do).
#![cfg(feature = "redis")]

mod redis_support;

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_support::workers::{
    print_report, print_values, report_and_values, spawn, unix_us, until_unix,
};
use redis_support::{raw, redis_url, unique_prefix};
use tower_throttle::redis::{RedisBucket, RedisBucketBuilder, RedisErrorKind};
use tower_throttle::{Algorithm, Denied, Quota};

const WORKER_ENV: &str = "TOWER_THROTTLE_LEASE_WORKER";
const TASKS: usize = 100;
const RATE: u32 = 100;
const BURST: u32 = 10;
const LEASE: u32 = 10;
const PERIOD: Duration = Duration::from_millis(200);
const RUN: Duration = Duration::from_secs(3);
/// A rate that never refills within a test: every count is exact.
fn frozen(burst: u32) -> Quota {
    Quota::per_hour(1).burst(burst)
}

async fn leased(prefix: &str, quota: Quota, lease: u32, period: Duration) -> RedisBucket {
    RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(prefix)
        .key("hot")
        .lease(lease)
        .lease_period(period)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connects")
}

async fn plain(prefix: &str, quota: Quota) -> RedisBucket {
    RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(prefix)
        .key("hot")
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connects")
}

/// Take one token at a time without a lease until refused: the tokens left in Redis.
async fn drain(bucket: &RedisBucket) -> u32 {
    let mut n = 0;
    loop {
        match bucket.try_acquire(1).await {
            Ok(()) => n += 1,
            Err(Denied::Throttled(_)) => return n,
            Err(e) => panic!("unexpected {e}"),
        }
    }
}

#[tokio::test]
async fn settings_a_lease_cannot_work_with_are_refused() {
    let prefix = unique_prefix("lease-config");
    let base = || {
        RedisBucket::builder(Quota::per_second(10).burst(5))
            .url(redis_url())
            .key_prefix(&prefix)
            .key("k")
            .connect_lazily()
    };
    for (what, builder) in [
        ("zero", base().lease(0)),
        ("above the burst", base().lease(6)),
        ("zero period", base().lease(2).lease_period(Duration::ZERO)),
        (
            "endless period",
            base().lease(2).lease_period(Duration::MAX),
        ),
        (
            "leaky bucket",
            base().lease(2).algorithm(Algorithm::leaky_bucket(0)),
        ),
        (
            "sliding log",
            base().lease(2).algorithm(Algorithm::SlidingLog),
        ),
    ] {
        let e = builder.build().await.expect_err(what);
        assert_eq!(e.kind(), RedisErrorKind::Config, "{what}: {e}");
    }
    base()
        .lease(5)
        .build()
        .await
        .expect("lease = burst is fine");
}

#[tokio::test]
async fn a_lease_admits_exactly_the_quota_with_fewer_round_trips() {
    let prefix = unique_prefix("lease-exact");
    let bucket = leased(&prefix, frozen(30), 8, Duration::from_secs(60)).await;
    let mut admitted = 0;
    while bucket.try_acquire(1).await.is_ok() {
        admitted += 1;
        assert!(admitted <= 30, "more than the burst");
    }
    assert_eq!(admitted, 30, "every token of the burst, no more");
    let s = bucket.stats();
    // Leases of 1, 2, 4, 8, 8, 7 (what was left), then a lease request that Redis refuses
    // (a refusal is never answered from an earlier reply, which may be stale).
    assert_eq!(s.leases, 7, "{s:?}");
    assert_eq!(s.round_trips, 7, "one round trip per lease: {s:?}");
    assert_eq!(s.leased_admissions, 30, "{s:?}");
}

/// Tokens charged in Redis for the bucket at `key` of a frozen quota (one token an hour).
async fn charged(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    let (_, left_us) = redis_support::inspect(conn, key).await;
    (left_us.max(0) as u64).div_ceil(3_600_000_000)
}

/// Poll Redis until `key` has `want` tokens charged (the give-back is a message sent in the
/// background); a deadline turns a lost give-back into a failure.
async fn until_charged(conn: &mut redis::aio::MultiplexedConnection, key: &str, want: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = charged(conn, key).await;
        if now == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key}: {now} tokens charged, {want} expected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Four handles of three tasks each take one token at a time from a frozen bucket of
/// 3000, with leases of up to 32 lasting 30 ms: tokens a lease holds when it ends go back
/// and are taken again, until every token is admitted, once. Two tasks of each handle give
/// up on a request that waits (at once, or after 1 ms): tokens asked for them go to the
/// lease, or back. A token charged and neither admitted nor given back would leave the
/// count short for good.
async fn every_token_of_a_frozen_bucket_is_admitted_once(
    builder: impl Fn() -> RedisBucketBuilder,
    node_of: impl Fn(&str) -> String,
) {
    const TOKENS: u32 = 3000;
    let mut handles = Vec::new();
    for _ in 0..4 {
        let handle = builder()
            .lease(32)
            .lease_period(Duration::from_millis(30))
            .timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("connects");
        handles.push(handle);
    }
    let key = handles[0].redis_key().to_owned();
    let mut conn = raw(&node_of(&key)).await;
    let admitted = Arc::new(AtomicU32::new(0));
    let patience = [None, Some(Duration::ZERO), Some(Duration::from_millis(1))];
    let tasks: Vec<_> = handles
        .iter()
        .flat_map(|h| patience.map(|p| (h.clone(), p)))
        .map(|(bucket, patience)| {
            let admitted = admitted.clone();
            tokio::spawn(async move {
                while admitted.load(Ordering::Relaxed) < TOKENS {
                    let asked = bucket.try_acquire(1);
                    let decision = match patience {
                        None => asked.await,
                        Some(p) => match tokio::time::timeout(p, asked).await {
                            Ok(decision) => decision,
                            Err(_) => continue,
                        },
                    };
                    match decision {
                        Ok(()) => {
                            let total = admitted.fetch_add(1, Ordering::Relaxed) + 1;
                            assert!(total <= TOKENS, "{total} admitted of {TOKENS}");
                            // A task's work: the lease's tokens wait for the next request.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        // The others hold the rest, until their leases end (30 ms).
                        Err(Denied::Throttled(_)) => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            })
        })
        .collect();
    // Done, or stalled: nothing admitted for 5 s, over a hundred lease periods.
    let mut last = (0, tokio::time::Instant::now());
    while admitted.load(Ordering::Relaxed) < TOKENS && last.1.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = admitted.load(Ordering::Relaxed);
        if now != last.0 {
            last = (now, tokio::time::Instant::now());
        }
    }
    let total = admitted.load(Ordering::Relaxed);
    let held: Vec<u32> = handles.iter().map(RedisBucket::leased_tokens).collect();
    let in_redis = charged(&mut conn, &key).await;
    assert_eq!(
        (total, in_redis),
        (TOKENS, u64::from(TOKENS)),
        "admitted, charged in Redis (leases hold {held:?})"
    );
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(held, [0; 4], "nothing left to hold");
    let (mut round_trips, mut leased) = (0, 0);
    for h in &handles {
        let s = h.stats();
        assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
        round_trips += s.round_trips;
        leased += s.leased_admissions;
    }
    assert!(
        leased > 0 && round_trips < u64::from(TOKENS),
        "leases in use: {round_trips} round trips, {leased} admitted from leases"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_many_tasks_and_handles_admit_every_token_once() {
    let prefix = unique_prefix("lease-count");
    let builder = || {
        RedisBucket::builder(frozen(3000))
            .url(redis_url())
            .key_prefix(&prefix)
            .key("hot")
    };
    every_token_of_a_frozen_bucket_is_admitted_once(builder, |_| redis_url()).await;
}

#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_many_tasks_and_handles_admit_every_token_once_on_a_cluster() {
    let cluster = redis_support::cluster::Cluster::start();
    let prefix = unique_prefix("lease-count-cluster");
    let builder = || {
        RedisBucket::builder(frozen(3000))
            .cluster(cluster.urls())
            .key_prefix(&prefix)
            .key("hot")
    };
    let node_of = |key: &str| cluster.urls()[cluster.node_of(key)].clone();
    every_token_of_a_frozen_bucket_is_admitted_once(builder, node_of).await;
}

#[tokio::test]
async fn unused_tokens_go_back_when_the_lease_ends_or_the_handle_is_dropped() {
    let mut conn = raw(&redis_url()).await;
    for ending in ["expiry", "drop"] {
        let prefix = unique_prefix("lease-back");
        let period = if ending == "expiry" {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(60)
        };
        let bucket = leased(&prefix, frozen(30), 8, period).await;
        let key = bucket.redis_key().to_owned();
        // Leases of 1, 2, 4 and 8: 15 tokens charged, 8 used, 7 held.
        for _ in 0..8 {
            bucket.try_acquire(1).await.unwrap();
        }
        assert_eq!(bucket.leased_tokens(), 7, "{ending}");
        assert_eq!(charged(&mut conn, &key).await, 15, "{ending}");
        if ending == "drop" {
            drop(bucket);
        } else {
            tokio::time::sleep(period).await;
            assert!(bucket.try_acquire(0).await.is_ok());
        }
        until_charged(&mut conn, &key, 8).await;
        // The others get them: 30 − 8 left, exactly.
        assert_eq!(
            drain(&plain(&prefix, frozen(30)).await).await,
            22,
            "{ending}"
        );
    }
}

#[tokio::test]
async fn the_process_that_pauses_drops_its_lease_at_once() {
    let prefix = unique_prefix("lease-pause");
    let bucket = leased(
        &prefix,
        Quota::per_second(1000).burst(100),
        50,
        Duration::from_secs(60),
    )
    .await;
    for _ in 0..8 {
        bucket.try_acquire(1).await.unwrap();
    }
    assert!(bucket.leased_tokens() > 0);
    bucket.pause(Duration::from_secs(2)).await.unwrap();
    assert_eq!(bucket.leased_tokens(), 0);
    let e = bucket.try_acquire(1).await.expect_err("paused");
    assert!(e.wait().is_some_and(|w| w > Duration::from_secs(1)), "{e}");
}

// ---- Across OS processes ----

/// Runs a worker when started by a parent test; otherwise there is nothing to do.
#[test]
fn worker_process_entry_point() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let args: Vec<String> = spec.split(' ').map(str::to_owned).collect();
    let (mode, prefix, start_us) = (&args[0], &args[1], args[2].parse::<u64>().unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        match mode.as_str() {
            "acquire" => hot_worker(prefix, start_us, true).await,
            "try" => hot_worker(prefix, start_us, false).await,
            "pauser" => pauser_worker(prefix, start_us).await,
            "dies" => dying_worker(prefix).await,
            m => panic!("unknown worker mode {m}"),
        }
    });
}

fn hot_quota() -> Quota {
    Quota::per_second(RATE).burst(BURST)
}

/// The pause scenario: demand (10 tasks, one request each per 20 ms: about 500/s) below
/// the rate, so leases grow to their maximum and a process holds many tokens when the
/// pause comes.
const PAUSE_TASKS: usize = 10;
const PAUSE_PACE: Duration = Duration::from_millis(20);
const PAUSE_LEASE: u32 = 50;
fn pause_quota() -> Quota {
    Quota::per_second(1000).burst(100)
}

/// `TASKS` tasks on one leased bucket for `RUN`: waiting (`acquire`) or asking and sleeping
/// the wait (`try_acquire`). Reports the admissions and their wall-clock instants.
async fn hot_worker(prefix: &str, start_us: u64, wait: bool) {
    let (quota, lease, tasks, pace) = if wait {
        (hot_quota(), LEASE, TASKS, Duration::ZERO)
    } else {
        (pause_quota(), PAUSE_LEASE, PAUSE_TASKS, PAUSE_PACE)
    };
    let bucket = leased(prefix, quota, lease, PERIOD).await;
    let times = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicU64::new(0));
    until_unix(start_us).await;
    let deadline = tokio::time::Instant::now() + RUN;
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let (bucket, times, errors) = (bucket.clone(), times.clone(), errors.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    // The decision lies between the asking and the answer.
                    let asked = unix_us();
                    let decision = if wait {
                        match tokio::time::timeout_at(deadline, bucket.acquire(1)).await {
                            Ok(d) => d,
                            Err(_) => break,
                        }
                    } else {
                        bucket.try_acquire(1).await
                    };
                    match decision {
                        Ok(()) => {
                            times.lock().unwrap().push((asked, unix_us()));
                            if !pace.is_zero() {
                                tokio::time::sleep(pace).await;
                            }
                        }
                        Err(Denied::Throttled(t)) => {
                            let until = (tokio::time::Instant::now() + t.wait()).min(deadline);
                            tokio::time::sleep_until(until).await;
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut times = times.lock().unwrap().clone();
    times.sort_unstable();
    let s = bucket.stats();
    let flat: Vec<u64> = times.iter().flat_map(|&(a, b)| [a, b]).collect();
    print_values(&flat);
    print_report(&[
        ("tokens", times.len() as u64),
        (
            "last_us",
            times
                .iter()
                .map(|&(_, answered)| answered)
                .max()
                .unwrap_or(0),
        ),
        ("errors", errors.load(Ordering::Relaxed)),
        ("leases", s.leases),
        ("leased_admissions", s.leased_admissions),
    ]);
}

const PAUSE_AT: Duration = Duration::from_millis(1000);
const PAUSE: Duration = Duration::from_millis(1500);

/// Pauses the bucket `PAUSE_AT` after the start; reports when the pause was sent and when
/// Redis confirmed it.
async fn pauser_worker(prefix: &str, start_us: u64) {
    let bucket = leased(prefix, pause_quota(), PAUSE_LEASE, PERIOD).await;
    until_unix(start_us + PAUSE_AT.as_micros() as u64).await;
    let sent = unix_us();
    bucket.pause(PAUSE).await.unwrap();
    let done = unix_us();
    print_report(&[("sent_us", sent), ("done_us", done)]);
}

/// Takes 16 tokens of a frozen bucket with leases of up to 10, reports what it holds, then
/// waits to be killed.
async fn dying_worker(prefix: &str) {
    let bucket = leased(prefix, frozen(30), LEASE, Duration::from_secs(60)).await;
    for _ in 0..16 {
        bucket.try_acquire(1).await.unwrap();
    }
    print_report(&[
        ("admitted", 16),
        ("held", u64::from(bucket.leased_tokens())),
    ]);
    std::future::pending::<()>().await;
}

fn field(report: &std::collections::HashMap<String, u64>, name: &str) -> u64 {
    *report
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {report:?}"))
}

#[test]
fn two_processes_with_leases_stay_within_burst_plus_rate_plus_the_leases() {
    let prefix = unique_prefix("lease-bound");
    let start_us = unix_us() + 1_000_000;
    let children: Vec<_> = (0..2)
        .map(|_| {
            spawn(
                "worker_process_entry_point",
                WORKER_ENV,
                &format!("acquire {prefix} {start_us}"),
            )
        })
        .collect();
    let (mut total, mut last_us) = (0, 0);
    for child in children {
        let (r, _) = report_and_values(child);
        assert_eq!(field(&r, "errors"), 0, "{r:?}");
        // Saturated, a lease takes what has refilled since the last one: often one token.
        assert!(field(&r, "leases") > 0, "leases in use: {r:?}");
        total += field(&r, "tokens");
        last_us = last_us.max(field(&r, "last_us"));
    }
    let t = Duration::from_micros(last_us.saturating_sub(start_us)).as_secs_f64();
    let bound = f64::from(BURST) + f64::from(RATE) * t + 2.0 * f64::from(LEASE);
    let nominal = f64::from(BURST) + f64::from(RATE) * RUN.as_secs_f64();
    println!("2 processes × {TASKS} tasks, lease {LEASE}: {total} admitted in {t:.3} s; bound {bound:.1}");
    assert!(
        total as f64 <= bound,
        "{total} > burst + rate·t + leases = {bound:.1}"
    );
    assert!(
        total as f64 >= 0.9 * nominal,
        "under-admitting: {total} < 90 % of {nominal}"
    );
}

#[test]
fn a_pause_reaches_a_leasing_process_within_one_lease_period() {
    let prefix = unique_prefix("lease-pause-procs");
    let start_us = unix_us() + 1_000_000;
    let hot = spawn(
        "worker_process_entry_point",
        WORKER_ENV,
        &format!("try {prefix} {start_us}"),
    );
    let pauser = spawn(
        "worker_process_entry_point",
        WORKER_ENV,
        &format!("pauser {prefix} {start_us}"),
    );
    let (p, _) = report_and_values(pauser);
    let (r, flat) = report_and_values(hot);
    // (asked, answered) of every admission: it was decided in between.
    let times: Vec<(u64, u64)> = flat.chunks(2).map(|c| (c[0], c[1])).collect();
    assert_eq!(field(&r, "errors"), 0, "{r:?}");
    assert!(
        field(&r, "leases") < field(&r, "leased_admissions"),
        "leases in use: {r:?}"
    );
    let (sent, done) = (field(&p, "sent_us"), field(&p, "done_us"));
    // Redis paused the bucket between `sent` and `done`: a lease taken before lasts until
    // at most `done + PERIOD`; the pause ends no earlier than `sent + PAUSE`.
    let held_from = done + PERIOD.as_micros() as u64 + 1_000;
    let held_until = sent + PAUSE.as_micros() as u64 - 1_000;
    let lease_end = times
        .iter()
        .filter(|&&(asked, _)| asked >= done && asked < held_from)
        .count();
    // Decided surely within the pause, past one lease period.
    let during: Vec<_> = times
        .iter()
        .filter(|&&(asked, answered)| asked >= held_from && answered < held_until)
        .collect();
    println!(
        "pause sent at +{} ms, confirmed at +{} ms; admissions of the other process within \
         the pause after one lease period: {}",
        (sent - start_us) / 1000,
        (done - start_us) / 1000,
        during.len()
    );
    println!("admitted from its lease within the lease period after the pause: {lease_end}");
    assert!(
        during.is_empty(),
        "admitted during the pause, past one lease period: {during:?}"
    );
    assert!(
        times.iter().any(|&(_, answered)| answered < sent),
        "admitted before the pause"
    );
    assert!(
        times.iter().any(|&(asked, _)| asked >= held_until),
        "admits again after the pause"
    );
}

#[test]
fn a_process_that_dies_holding_a_lease_loses_at_most_that_lease() {
    let prefix = unique_prefix("lease-dies");
    let mut child = spawn(
        "worker_process_entry_point",
        WORKER_ENV,
        &format!("dies {prefix} 0"),
    );
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout)
        .lines()
        .map(Result::unwrap)
        .find_map(|l| l.split_once("REPORT ").map(|(_, r)| r.to_owned()))
        .expect("a report before dying");
    child.kill().unwrap(); // SIGKILL: no destructor gives anything back
    child.wait().unwrap();
    let get = |name: &str| -> u32 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("bad report {line}"))
    };
    let (admitted, held) = (get("admitted"), get("held"));
    // Leases of 1, 2, 4, 8 and 10: 25 tokens charged, 16 used, 9 held when killed.
    assert_eq!((admitted, held), (16, 9));
    let left = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { drain(&plain(&prefix, frozen(30)).await).await });
    let lost = 30 - admitted - left;
    println!("killed holding {held} tokens: {lost} lost");
    assert_eq!(lost, held, "what the dead process held, no more");
    assert!(lost <= LEASE);
}

#[tokio::test]
async fn a_bucket_made_from_a_leased_redis_bucket_admits_from_the_lease() {
    let prefix = unique_prefix("lease-layers");
    let leased = leased(&prefix, frozen(30), 8, Duration::from_secs(60)).await;
    let bucket = leased.clone();
    for _ in 0..15 {
        bucket.acquire(1).await.unwrap();
    }
    // Leases of 1, 2, 4 and 8, all used: 4 round trips for 15 admissions.
    let s = leased.stats();
    assert_eq!((s.leases, s.leased_admissions), (4, 15), "{s:?}");
    assert_eq!(leased.leased_tokens(), 0);
}
