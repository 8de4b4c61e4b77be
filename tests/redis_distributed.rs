//! Two OS processes on one Redis-backed limit, through the layers: a keyed layer's global
//! ceiling, weighted costs, and an outage (a private `redis-server` stopped and restarted
//! mid-run). Every count is checked against its bound, across both processes.
//!
//! The parent runs this test binary again as workers: `TOWER_THROTTLE_DISTRIBUTED_WORKER`
//! makes [`worker_process_entry_point`] run one (in a normal run it has nothing to do).
#![cfg(feature = "redis")]

mod redis_support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use redis_support::workers::{
    print_report, print_values, report, report_and_values, shared_start, spawn, unix_us,
};
use redis_support::{free_port, raw, redis_url, unique_prefix, PrivateRedis};
use tower::{service_fn, Service, ServiceExt};
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisKeyed};
use tower_throttle::{Algorithm, KeyedBucket, Quota, RateLimitLayer, RejectLayer};

const WORKER_ENV: &str = "TOWER_THROTTLE_DISTRIBUTED_WORKER";
const PROCESSES: usize = 2;

/// What a worker counts: admissions (tokens), and the wall clock of the last one.
#[derive(Default)]
struct Tally {
    tokens: AtomicU64,
    last_us: AtomicU64,
    errors: AtomicU64,
}

impl Tally {
    fn admit(&self, tokens: u64) {
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
        self.last_us.fetch_max(unix_us(), Ordering::Relaxed);
    }

    fn print(&self) {
        print_report(&[
            ("tokens", self.tokens.load(Ordering::Relaxed)),
            ("last_us", self.last_us.load(Ordering::Relaxed)),
            ("errors", self.errors.load(Ordering::Relaxed)),
        ]);
    }
}

/// Runs a worker when started by a parent test; otherwise there is nothing to do.
#[test]
fn worker_process_entry_point() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let args: Vec<String> = spec.split(' ').map(str::to_owned).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tally = Arc::new(Tally::default());
    let start_us: u64 = args[2].parse().unwrap();
    rt.block_on(async {
        match args[0].as_str() {
            "keyed-global" => keyed_global_worker(&args[1], start_us, &tally).await,
            "weighted" => weighted_worker(&args[1], start_us, &tally).await,
            "outage" => outage_worker(&args[1], start_us, &args[3], &args[4], &tally).await,
            "fair" => fair_worker(&args[1], start_us, args[3].parse().unwrap(), &tally).await,
            "fair-window" => {
                let algorithm = window_algorithm(&args[4]);
                fair_window_worker(
                    &args[1],
                    start_us,
                    args[3].parse().unwrap(),
                    algorithm,
                    &tally,
                )
                .await
            }
            "fair-keyed" => {
                let algorithm = keyed_algorithm(&args[4]);
                fair_keyed_worker(
                    &args[1],
                    start_us,
                    args[3].parse().unwrap(),
                    algorithm,
                    &tally,
                )
                .await
            }
            m => panic!("unknown worker mode {m}"),
        }
    });
    tally.print();
}

/// Spawn the workers with `spec(i)`, wait for them, and sum their reports: the tokens
/// admitted and the span from `start_us` to the last admission.
fn sum(children: Vec<std::process::Child>, start_us: u64) -> (u64, Duration) {
    let (mut tokens, mut last_us) = (0, 0);
    for child in children {
        let r = report(child);
        assert_eq!(r["errors"], 0, "a worker saw errors: {r:?}");
        tokens += r["tokens"];
        last_us = u64::max(last_us, r["last_us"]);
    }
    (
        tokens,
        Duration::from_micros(last_us.saturating_sub(start_us)),
    )
}

fn workers(spec: impl Fn(usize) -> String) -> Vec<std::process::Child> {
    (0..PROCESSES)
        .map(|i| spawn("worker_process_entry_point", WORKER_ENV, &spec(i)))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Keyed + global ceiling in Redis, rejecting.

const GLOBAL_RATE: u32 = 10;
const GLOBAL_BURST: u32 = 5;
const KEYED_RUN: Duration = Duration::from_secs(2);

async fn keyed_global_worker(prefix: &str, start_us: u64, tally: &Arc<Tally>) {
    let global = RedisBucket::builder(Quota::per_second(GLOBAL_RATE).burst(GLOBAL_BURST))
        .url(redis_url())
        .key_prefix(prefix)
        .key("global")
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("worker connects");
    // Per-user limits in this process (users sticky to replicas), generous; the shared
    // global ceiling in Redis.
    let per_user = KeyedBucket::<String>::new(Quota::per_second(1_000).burst(100));
    let svc = tower::ServiceBuilder::new()
        .layer(RejectLayer::keyed(per_user, by_user).global(global))
        .service(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let deadline = shared_start(start_us).await + KEYED_RUN;
    let tasks: Vec<_> = (0..10)
        .map(|t| {
            let (svc, tally) = (svc.clone(), tally.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    let req = Request::builder()
                        .header("x-user", format!("user-{}", t % 4))
                        .body(String::new())
                        .unwrap();
                    let resp = svc.clone().oneshot(req).await.unwrap();
                    match resp.status() {
                        StatusCode::OK => tally.admit(1),
                        StatusCode::TOO_MANY_REQUESTS => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        _ => {
                            tally.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

fn by_user(req: &Request<String>) -> Option<String> {
    Some(req.headers().get("x-user")?.to_str().ok()?.to_owned())
}

#[test]
fn two_replicas_with_a_keyed_layer_share_the_redis_global_ceiling() {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { raw(&redis_url()).await });
    let prefix = unique_prefix("keyed-global");
    let start_us = unix_us() + 1_000_000;
    let (admitted, span) = sum(
        workers(|_| format!("keyed-global {prefix} {start_us}")),
        start_us,
    );
    let bound = f64::from(GLOBAL_BURST) + f64::from(GLOBAL_RATE) * span.as_secs_f64();
    println!(
        "keyed + global in Redis: {admitted} admitted by {PROCESSES} replicas in {span:?}; \
         bound burst + rate·t = {bound:.1} (each replica alone could reach it)"
    );
    assert!(
        admitted as f64 <= bound,
        "the global ceiling was enforced per replica: {admitted} > {bound:.1}"
    );
    let nominal = f64::from(GLOBAL_BURST) + f64::from(GLOBAL_RATE) * KEYED_RUN.as_secs_f64();
    assert!(
        admitted as f64 >= 0.8 * nominal,
        "under-admitting: {admitted} < 80 % of {nominal}"
    );
}

// ---------------------------------------------------------------------------------------
// Weighted costs through the waiting layer.

const WEIGHT_RATE: u32 = 20;
const WEIGHT_BURST: u32 = 10;
const COST: u32 = 5;
const WEIGHT_RUN: Duration = Duration::from_secs(2);

async fn weighted_worker(prefix: &str, start_us: u64, tally: &Arc<Tally>) {
    let shared = RedisBucket::builder(Quota::per_second(WEIGHT_RATE).burst(WEIGHT_BURST))
        .url(redis_url())
        .key_prefix(prefix)
        .key("weighted")
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("worker connects");
    let counted = tally.clone();
    let svc = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::new(shared).cost(|_: &()| COST))
        .service(service_fn(move |()| {
            counted.admit(u64::from(COST));
            async { Ok::<_, Infallible>(()) }
        }));
    let deadline = shared_start(start_us).await + WEIGHT_RUN;
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (mut svc, tally) = (svc.clone(), tally.clone());
            tokio::spawn(async move {
                loop {
                    let call = async { svc.ready().await?.call(()).await };
                    match tokio::time::timeout_at(deadline, call).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => {
                            tally.errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[test]
fn weighted_costs_through_two_processes_stay_within_the_redis_limit() {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { raw(&redis_url()).await });
    let prefix = unique_prefix("weighted");
    let start_us = unix_us() + 1_000_000;
    let (tokens, span) = sum(
        workers(|_| format!("weighted {prefix} {start_us}")),
        start_us,
    );
    let bound = f64::from(WEIGHT_BURST) + f64::from(WEIGHT_RATE) * span.as_secs_f64();
    println!(
        "weighted (cost {COST}): {tokens} tokens admitted by {PROCESSES} processes in \
         {span:?}; bound burst + rate·t = {bound:.1}"
    );
    assert!(
        tokens as f64 <= bound,
        "weighted requests were charged one token in Redis: {tokens} > {bound:.1}"
    );
    let nominal = f64::from(WEIGHT_BURST) + f64::from(WEIGHT_RATE) * WEIGHT_RUN.as_secs_f64();
    assert!(
        tokens as f64 >= 0.5 * nominal,
        "under-admitting: {tokens} < 50 % of {nominal}"
    );
}

// ---------------------------------------------------------------------------------------
// An outage: Redis stopped and restarted mid-run.

const OUTAGE_RATE: u32 = 100;
const OUTAGE_BURST: u32 = 10;
const OUTAGE_RUN: Duration = Duration::from_secs(5);
const DOWN_AT: Duration = Duration::from_millis(1_500);
const DOWN_FOR: Duration = Duration::from_millis(2_000);
/// How far ahead a waiter books its instant in Redis: admissions booked before the outage
/// still happen in its first second.
const BOOKING: Duration = Duration::from_millis(1_000);
const TIMEOUT: Duration = Duration::from_millis(50);
const PROBE: Duration = Duration::from_millis(100);
/// How late an admission may be noted after it was decided, on a loaded machine.
const LATE: Duration = Duration::from_millis(300);
/// The connection's longest reconnect delay (see the failure policy's documentation).
const RECONNECT: Duration = Duration::from_millis(500);

async fn outage_worker(prefix: &str, start_us: u64, url: &str, policy: &str, tally: &Arc<Tally>) {
    let policy = match policy {
        "closed" => FailurePolicy::Closed,
        "local" => FailurePolicy::Local {
            fraction: 1.0 / PROCESSES as f64,
        },
        p => panic!("unknown policy {p}"),
    };
    let bucket = RedisBucket::builder(Quota::per_second(OUTAGE_RATE).burst(OUTAGE_BURST))
        .url(url)
        .key_prefix(prefix)
        .key("outage")
        .failure_policy(policy)
        .timeout(TIMEOUT)
        .probe_interval(PROBE)
        .build()
        .await
        .expect("worker connects");
    let deadline = shared_start(start_us).await + OUTAGE_RUN;
    // When each token was admitted (noted when `acquire` returned), for the parent to
    // count those while Redis was down.
    let admitted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (bucket, tally, admitted) = (bucket.clone(), tally.clone(), admitted.clone());
            tokio::spawn(async move {
                loop {
                    match tokio::time::timeout_at(deadline, bucket.acquire(1)).await {
                        Ok(Ok(())) => {
                            tally.admit(1);
                            admitted.lock().unwrap().push(unix_us());
                        }
                        // `Closed` refusing while Redis is down: expected, not an error.
                        Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(10)).await,
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    print_values(&admitted.lock().unwrap());
}

/// Run the outage scenario with `policy`: the tokens admitted, the run's span, the
/// admissions while Redis was down, past the instants booked before (a span measured
/// around the stop and the restart), and that span.
fn outage_run(policy: &str) -> (u64, Duration, u64, Duration) {
    let port = free_port();
    let mut server = PrivateRedis::start(port);
    let url = server.url();
    let prefix = unique_prefix("outage");
    let start_us = unix_us() + 1_000_000;
    let children = workers(|_| format!("outage {prefix} {start_us} {url} {policy}"));
    std::thread::sleep(Duration::from_micros(start_us - unix_us()) + DOWN_AT);
    server.stop();
    let down_us = unix_us();
    std::thread::sleep(DOWN_FOR);
    let up_us = unix_us();
    let _server = PrivateRedis::start(port); // empty: the restarted limit starts full
    drop(server);
    // Instants booked before Redis went down are over after BOOKING; an admission is noted
    // when `acquire` returns (up to LATE later on a loaded machine).
    let quiet_from = down_us + (BOOKING + LATE).as_micros() as u64;
    let (mut tokens, mut last_us, mut during) = (0, 0, 0);
    for child in children {
        let (r, admitted) = report_and_values(child);
        tokens += r["tokens"];
        last_us = u64::max(last_us, r["last_us"]);
        during += admitted
            .iter()
            .filter(|t| (quiet_from..up_us).contains(t))
            .count() as u64;
    }
    let span = Duration::from_micros(last_us.saturating_sub(start_us));
    let quiet = Duration::from_micros(up_us.saturating_sub(quiet_from));
    (tokens, span, during, quiet)
}

#[test]
fn an_outage_stays_within_its_documented_bound() {
    let rate = f64::from(OUTAGE_RATE);
    let burst = f64::from(OUTAGE_BURST);
    // A restart without persistence loses the state: one more burst.
    let restarts = 1.0;

    let (closed, span, during, quiet) = outage_run("closed");
    let bound = burst * (1.0 + restarts) + rate * span.as_secs_f64();
    println!(
        "outage, Closed: {closed} admitted in {span:?}, {during} in the {quiet:?} while Redis \
         was down past the booked instants; bound {bound:.1}"
    );
    assert!(closed as f64 <= bound, "Closed: {closed} > {bound:.1}");
    assert_eq!(during, 0, "Closed admitted while Redis was down");

    let (local, span, during, quiet) = outage_run("local");
    // d: local decisions last at most the outage, plus the reconnect delay, the probe
    // interval and one timeout.
    let d = (DOWN_FOR + RECONNECT + PROBE + TIMEOUT).as_secs_f64();
    let bound = burst * (1.0 + restarts) + rate * (span.as_secs_f64() + d) + PROCESSES as f64;
    println!(
        "outage, Local {{ 1/{PROCESSES} }}: {local} admitted in {span:?}, {during} in the \
         {quiet:?} while Redis was down past the booked instants; bound {bound:.1}"
    );
    assert!(local as f64 <= bound, "Local: {local} > {bound:.1}");
    // The local fallback decided while Redis was down, at about its share of the rate (over
    // the span, and the admissions before it noted in it).
    assert!(during > 0, "Local admitted nothing while Redis was down");
    assert!(
        during as f64 <= rate * (quiet + LATE).as_secs_f64() + PROCESSES as f64 + 1.0,
        "Local over its share while Redis was down: {during}"
    );
}

// ---------------------------------------------------------------------------------------
// Fair across processes: waiters of every process in arrival order.

const FAIR_RATE: u32 = 20;
const FAIR_RUN: Duration = Duration::from_secs(4);
/// Waits that began before this are the start-up burst, not the steady state.
const FAIR_WARM_UP: Duration = Duration::from_millis(1_500);
const FAIR_WAITERS: [usize; 2] = [2, 18];

async fn fair_worker(prefix: &str, start_us: u64, waiters: usize, tally: &Arc<Tally>) {
    let bucket = RedisBucket::builder(Quota::per_second(FAIR_RATE).burst(1))
        .url(redis_url())
        .key_prefix(prefix)
        .key("fair")
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("worker connects");
    let start = shared_start(start_us).await;
    let deadline = start + FAIR_RUN;
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let (bucket, tally) = (bucket.clone(), tally.clone());
            tokio::spawn(async move {
                let mut waits = Vec::new();
                loop {
                    let asked = tokio::time::Instant::now();
                    match tokio::time::timeout_at(deadline, bucket.acquire(1)).await {
                        Ok(Ok(())) => {
                            tally.admit(1);
                            if asked >= start + FAIR_WARM_UP {
                                waits.push(asked.elapsed().as_micros() as u64);
                            }
                        }
                        Ok(Err(_)) => {
                            tally.errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => break waits,
                    }
                }
            })
        })
        .collect();
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.unwrap());
    }
    print_values(&waits);
}

#[test]
fn waiters_of_every_process_are_served_in_arrival_order() {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { raw(&redis_url()).await });
    let prefix = unique_prefix("fair");
    let start_us = unix_us() + 1_000_000;
    let children: Vec<_> = FAIR_WAITERS
        .iter()
        .map(|w| {
            let spec = format!("fair {prefix} {start_us} {w}");
            spawn("worker_process_entry_point", WORKER_ENV, &spec)
        })
        .collect();
    let mut all = Vec::new();
    let mut means = Vec::new();
    for (child, waiters) in children.into_iter().zip(FAIR_WAITERS) {
        let (r, waits) = report_and_values(child);
        assert_eq!(r["errors"], 0, "{r:?}");
        assert!(!waits.is_empty(), "no steady-state waits");
        let mean = waits.iter().sum::<u64>() as f64 / waits.len() as f64 / 1e6;
        println!(
            "fair: {waiters} waiters: {} admissions measured, mean wait {mean:.3} s",
            waits.len()
        );
        means.push(mean);
        all.extend(waits);
    }
    all.sort_unstable();
    let median = all[all.len() / 2] as f64 / 1e6;
    let worst = *all.last().unwrap() as f64 / 1e6;
    println!("fair: median wait {median:.3} s, worst {worst:.3} s");
    // First come, first served: every waiter waits for all the others, whatever its process.
    let (lo, hi) = (means[0].min(means[1]), means[0].max(means[1]));
    assert!(hi <= 1.25 * lo, "unequal mean waits: {means:?}");
    assert!(worst <= 2.0 * median, "worst {worst} > 2 × median {median}");
}

// ---------------------------------------------------------------------------------------
// The windows: first come, first served across processes, within the window's own bound.

/// One window of 20 a second, as the token bucket's fairness test (2 and 18 waiters).
const WINDOW_FAIR_RUN: Duration = Duration::from_secs(5);
const WINDOW_FAIR_WARM_UP: Duration = Duration::from_millis(2_000);

fn window_algorithm(name: &str) -> Algorithm {
    match name {
        "fixed" => Algorithm::FixedWindow,
        "sliding" => Algorithm::SlidingWindow,
        "log" => Algorithm::SlidingLog,
        other => panic!("unknown window {other}"),
    }
}

/// A shared limit the fairness workers wait on: a bucket, or one key of a keyed limit.
#[derive(Clone)]
enum Limit {
    Bucket(RedisBucket),
    Key(RedisKeyed),
}

impl Limit {
    async fn acquire(&self, n: u32) -> Result<(), tower_throttle::Denied> {
        match self {
            Limit::Bucket(b) => b.acquire(n).await,
            Limit::Key(k) => k.acquire("shared-user", n).await,
        }
    }
}

/// Waiters in a loop on one window limit; prints, per admission, the wall clock when it
/// returned and its wait (+1, µs) when measured after the warm-up, else 0.
async fn fair_window_worker(
    prefix: &str,
    start_us: u64,
    waiters: usize,
    algorithm: Algorithm,
    tally: &Arc<Tally>,
) {
    let bucket = RedisBucket::builder(Quota::per_second(FAIR_RATE))
        .url(redis_url())
        .key_prefix(prefix)
        .key("fair-window")
        .algorithm(algorithm)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("worker connects");
    fair_waiters(Limit::Bucket(bucket), start_us, waiters, tally).await;
}

/// As [`fair_window_worker`], on one key of a keyed limit (burst 1 for the token bucket).
async fn fair_keyed_worker(
    prefix: &str,
    start_us: u64,
    waiters: usize,
    algorithm: Algorithm,
    tally: &Arc<Tally>,
) {
    let keyed = RedisKeyed::builder(Quota::per_second(FAIR_RATE).burst(1))
        .url(redis_url())
        .key_prefix(prefix)
        .algorithm(algorithm)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("worker connects");
    fair_waiters(Limit::Key(keyed), start_us, waiters, tally).await;
}

/// `waiters` tasks acquiring one token of `bucket` in a loop for [`WINDOW_FAIR_RUN`] from
/// `start_us`; prints what [`fair_window_worker`] says it prints.
async fn fair_waiters(bucket: Limit, start_us: u64, waiters: usize, tally: &Arc<Tally>) {
    let start = shared_start(start_us).await;
    let deadline = start + WINDOW_FAIR_RUN;
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let (bucket, tally) = (bucket.clone(), tally.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    let asked = tokio::time::Instant::now();
                    match tokio::time::timeout_at(deadline, bucket.acquire(1)).await {
                        Ok(Ok(())) => {
                            tally.admit(1);
                            let measured = asked >= start + WINDOW_FAIR_WARM_UP;
                            let wait = asked.elapsed().as_micros() as u64;
                            seen.push(unix_us());
                            seen.push(if measured { wait + 1 } else { 0 });
                        }
                        Ok(Err(_)) => {
                            tally.errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => break seen,
                    }
                }
            })
        })
        .collect();
    let mut seen = Vec::new();
    for t in tasks {
        seen.extend(t.await.unwrap());
    }
    print_values(&seen);
}

/// Runs 2 and 18 waiters in two processes on one 20/s window; returns, per process, the
/// measured waits (µs), and every admission's wall clock (µs).
fn run_fair_window(algorithm: &str) -> (Vec<Vec<u64>>, Vec<u64>) {
    run_fair("fair-window", algorithm)
}

/// As [`run_fair_window`], with the workers of `mode`.
fn run_fair(mode: &str, algorithm: &str) -> (Vec<Vec<u64>>, Vec<u64>) {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { raw(&redis_url()).await });
    let prefix = unique_prefix(&format!("{mode}-{algorithm}"));
    let start_us = unix_us() + 1_000_000;
    let children: Vec<_> = FAIR_WAITERS
        .iter()
        .map(|w| {
            let spec = format!("{mode} {prefix} {start_us} {w} {algorithm}");
            spawn("worker_process_entry_point", WORKER_ENV, &spec)
        })
        .collect();
    let (mut waits, mut instants) = (Vec::new(), Vec::new());
    for child in children {
        let (r, values) = report_and_values(child);
        assert_eq!(r["errors"], 0, "{r:?}");
        let mut mine = Vec::new();
        for pair in values.chunks(2) {
            instants.push(pair[0]);
            if pair[1] > 0 {
                mine.push(pair[1] - 1);
            }
        }
        assert!(!mine.is_empty(), "no steady-state waits");
        waits.push(mine);
    }
    instants.sort_unstable();
    (waits, instants)
}

/// Equal mean waits in both processes (within 25 %), the worst within twice the median.
fn assert_fair(algorithm: &str, waits: &[Vec<u64>]) {
    let means: Vec<f64> = waits
        .iter()
        .map(|w| w.iter().sum::<u64>() as f64 / w.len() as f64 / 1e6)
        .collect();
    let mut all: Vec<u64> = waits.concat();
    all.sort_unstable();
    let median = all[all.len() / 2] as f64 / 1e6;
    let worst = *all.last().unwrap() as f64 / 1e6;
    println!(
        "fair {algorithm}: {} waits, means {means:?} s, median {median:.3} s, worst {worst:.3} s",
        all.len()
    );
    let (lo, hi) = (means[0].min(means[1]), means[0].max(means[1]));
    assert!(
        hi <= 1.25 * lo,
        "{algorithm}: unequal mean waits: {means:?}"
    );
    assert!(
        worst <= 2.0 * median,
        "{algorithm}: worst {worst} > 2 × median {median}"
    );
}

/// A wall clock an admission is read at lies after its instant in Redis (the same clock,
/// one machine) by at most this: a reply and a timer, on a loaded machine.
const READ_LATE_US: u64 = 100_000;
const WINDOW_US: u64 = 1_000_000;

/// Every aligned window holds at most 20 admissions: those read at least `READ_LATE_US`
/// into a window surely went in it; and in all, no more than 20 per window the run
/// touched.
fn assert_fixed_bound(instants: &[u64]) {
    let limit = u64::from(FAIR_RATE);
    let (first, last) = (instants[0], *instants.last().unwrap());
    let windows = (last / WINDOW_US) - (first.saturating_sub(READ_LATE_US) / WINDOW_US) + 1;
    let total = instants.len() as u64;
    println!("fair fixed: {total} admissions over {windows} windows");
    assert!(total <= limit * windows, "{total} in {windows} windows");
    let mut per_window = std::collections::HashMap::<u64, u64>::new();
    for &t in instants {
        if t % WINDOW_US >= READ_LATE_US {
            *per_window.entry(t / WINDOW_US).or_default() += 1;
        }
    }
    for (w, n) in per_window {
        assert!(n <= limit, "window {w}: {n} admissions");
    }
}

/// Any interval of a window's length holds at most 20 admissions (read up to
/// `READ_LATE_US` late: those read within `W − READ_LATE_US` went within `W`).
fn assert_log_bound(instants: &[u64]) {
    let limit = FAIR_RATE as usize;
    for (i, &t) in instants.iter().enumerate() {
        let within = instants[i..]
            .iter()
            .take_while(|&&u| u < t + WINDOW_US - READ_LATE_US)
            .count();
        assert!(
            within <= limit,
            "{within} admissions within a window from {t}"
        );
    }
}

#[test]
fn fixed_window_waiters_of_every_process_are_served_in_arrival_order() {
    let (waits, instants) = run_fair_window("fixed");
    assert_fair("fixed", &waits);
    assert_fixed_bound(&instants);
}

#[test]
fn sliding_window_waiters_of_every_process_are_served_in_arrival_order() {
    let (waits, instants) = run_fair_window("sliding");
    assert_fair("sliding", &waits);
    // The estimate's own bound: at most the count per window on average.
    let (first, last) = (instants[0], *instants.last().unwrap());
    let windows = (last / WINDOW_US) - (first.saturating_sub(READ_LATE_US) / WINDOW_US) + 1;
    assert!(instants.len() as u64 <= u64::from(FAIR_RATE) * windows);
}

#[test]
fn sliding_log_waiters_of_every_process_are_served_in_arrival_order() {
    let (waits, instants) = run_fair_window("log");
    assert_fair("log", &waits);
    assert_log_bound(&instants);
}

// ---------------------------------------------------------------------------------------
// One key of a keyed limit: first come, first served across processes, every algorithm.

fn keyed_algorithm(name: &str) -> Algorithm {
    match name {
        "token" => Algorithm::TokenBucket,
        "leaky" => Algorithm::leaky_bucket(16),
        other => window_algorithm(other),
    }
}

/// The token and leaky bucket at 20/s, burst 1: any interval of length `t` admits at most
/// `1 + 20·t` (read up to `READ_LATE_US` late: those read within `t − READ_LATE_US` of each
/// other went within `t`).
fn assert_gcra_bound(instants: &[u64]) {
    let per_s = u64::from(FAIR_RATE);
    for (i, &t) in instants.iter().enumerate() {
        for (j, &u) in instants[i..].iter().enumerate() {
            let span = (u - t) + READ_LATE_US;
            let (count, most) = (j as u64 + 1, 1 + per_s * span / 1_000_000);
            assert!(
                count <= most,
                "{count} admissions within {span} µs from {t}"
            );
        }
    }
}

fn keyed_fair(algorithm: &str) {
    let (waits, instants) = run_fair("fair-keyed", algorithm);
    assert_fair(&format!("keyed {algorithm}"), &waits);
    match algorithm {
        "token" | "leaky" => assert_gcra_bound(&instants),
        "fixed" => assert_fixed_bound(&instants),
        "log" => assert_log_bound(&instants),
        _ => {
            let (first, last) = (instants[0], *instants.last().unwrap());
            let windows = (last / WINDOW_US) - (first.saturating_sub(READ_LATE_US) / WINDOW_US) + 1;
            assert!(instants.len() as u64 <= u64::from(FAIR_RATE) * windows);
        }
    }
}

#[test]
fn keyed_token_bucket_waiters_of_every_process_are_served_in_arrival_order() {
    keyed_fair("token");
}

#[test]
fn keyed_leaky_bucket_waiters_of_every_process_are_served_in_arrival_order() {
    keyed_fair("leaky");
}

#[test]
fn keyed_fixed_window_waiters_of_every_process_are_served_in_arrival_order() {
    keyed_fair("fixed");
}

#[test]
fn keyed_sliding_window_waiters_of_every_process_are_served_in_arrival_order() {
    keyed_fair("sliding");
}

#[test]
fn keyed_sliding_log_waiters_of_every_process_are_served_in_arrival_order() {
    keyed_fair("log");
}
