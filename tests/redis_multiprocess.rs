//! Several OS processes share one limit through Redis: the rate invariant holds across
//! them, and the same scenario against a naive `GET` + `SET` limiter overshoots (so this
//! test can fail).
//!
//! The parent test runs this test binary again as worker processes: the environment
//! variable `TOWER_THROTTLE_REDIS_WORKER` makes [`worker_process_entry_point`] run a worker
//! (in a normal run that test has nothing to do).
#![cfg(feature = "redis")]

mod redis_support;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_support::{raw, redis_url, unique_prefix};
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisKeyed};
use tower_throttle::{Algorithm, Plan, Quota};

const WORKER_ENV: &str = "TOWER_THROTTLE_REDIS_WORKER";
const PROCESSES: usize = 2;
const TASKS_PER_PROCESS: usize = 100; // 200 tasks in all
const RATE: u64 = 100; // per second
const BURST: u32 = 10;
const RUN: Duration = Duration::from_secs(3);

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// What one worker process reports.
#[derive(Debug, Default, Clone, Copy)]
struct Report {
    admitted: u64,
    errors: u64,
    /// Wall clock (µs since the epoch) of the last admission it saw.
    last_us: u64,
}

/// Runs a worker when started by the parent test; otherwise there is nothing to do.
#[test]
fn worker_process_entry_point() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let mut it = spec.split(' ');
    let mode = it.next().unwrap().to_owned();
    let prefix = it.next().unwrap().to_owned();
    let start_us: u64 = it.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(async move {
        match mode.as_str() {
            "script" => run_script_worker(&prefix, start_us).await,
            "naive" => run_naive_worker(&prefix, start_us).await,
            "plan" => run_plan_worker(&prefix, start_us).await,
            m => panic!("unknown worker mode {m}"),
        }
    });
    println!(
        "REPORT admitted={} errors={} last_us={}",
        report.admitted, report.errors, report.last_us
    );
}

/// Sleep until the common start instant (wall clock: the processes share it).
async fn until_unix(us: u64) {
    let now = unix_us();
    if us > now {
        tokio::time::sleep(Duration::from_micros(us - now)).await;
    }
}

struct Tally {
    admitted: AtomicU64,
    errors: AtomicU64,
    last_us: AtomicU64,
}

impl Tally {
    fn new() -> Arc<Self> {
        Arc::new(Tally {
            admitted: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_us: AtomicU64::new(0),
        })
    }
    fn admit(&self) {
        self.admitted.fetch_add(1, Ordering::Relaxed);
        self.last_us.fetch_max(unix_us(), Ordering::Relaxed);
    }
    fn report(&self) -> Report {
        Report {
            admitted: self.admitted.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            last_us: self.last_us.load(Ordering::Relaxed),
        }
    }
}

async fn run_script_worker(prefix: &str, start_us: u64) -> Report {
    let bucket = RedisBucket::builder(Quota::per_second(RATE as u32).burst(BURST))
        .url(redis_url())
        .key_prefix(prefix)
        .key("shared")
        .failure_policy(FailurePolicy::Closed) // an outage must not count as admissions
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("worker connects");
    waiters(start_us, move || {
        let bucket = bucket.clone();
        async move { bucket.acquire(1).await }
    })
    .await
}

/// The plan of the race on one key: the rate and burst above, and at most [`PLAN_CAP`] in
/// any minute (the sliding log: no window boundary to fall inside the run).
const PLAN_CAP: u64 = 200;

fn race_plan() -> Plan {
    Plan::new(Quota::per_second(RATE as u32).burst(BURST))
        .and(Quota::new(PLAN_CAP as u32, Duration::from_secs(60)))
        .algorithm(Algorithm::SlidingLog)
}

async fn run_plan_worker(prefix: &str, start_us: u64) -> Report {
    let keyed = RedisKeyed::builder(race_plan())
        .url(redis_url())
        .key_prefix(prefix)
        .failure_policy(FailurePolicy::Closed)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("worker connects");
    waiters(start_us, move || {
        let keyed = keyed.clone();
        async move { keyed.acquire("shared", 1).await }
    })
    .await
}

/// From the common start, [`TASKS_PER_PROCESS`] tasks that each wait for an admission
/// (`acquire`) again and again until the run ends: what they were admitted.
async fn waiters<F, Fut>(start_us: u64, acquire: F) -> Report
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), tower_throttle::Denied>> + Send,
{
    let tally = Tally::new();
    until_unix(start_us).await;
    let deadline = tokio::time::Instant::now() + RUN;
    let tasks: Vec<_> = (0..TASKS_PER_PROCESS)
        .map(|_| {
            let (acquire, tally) = (acquire.clone(), tally.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    match tokio::time::timeout_at(deadline, acquire()).await {
                        Ok(Ok(())) => tally.admit(),
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
    tally.report()
}

/// The classic race: read the state, decide in the application, write it back. The same
/// GCRA, the same clock source for every process (this host's wall clock), no atomicity.
async fn run_naive_worker(prefix: &str, start_us: u64) -> Report {
    let client = redis::Client::open(redis_url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{prefix}:{{naive}}");
    let interval_us = 1_000_000 / RATE;
    let tau = interval_us * u64::from(BURST);
    let tally = Tally::new();
    until_unix(start_us).await;
    let deadline = tokio::time::Instant::now() + RUN;
    let tasks: Vec<_> = (0..TASKS_PER_PROCESS)
        .map(|_| {
            let (mut conn, tally, key) = (conn.clone(), tally.clone(), key.clone());
            tokio::spawn(async move {
                while tokio::time::Instant::now() < deadline {
                    let stored: Option<u64> = redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let now = unix_us();
                    let tat = stored.unwrap_or(now).max(now);
                    let new_tat = tat + interval_us;
                    if new_tat - tau <= now {
                        let _: () = redis::cmd("SET")
                            .arg(&key)
                            .arg(new_tat)
                            .arg("PX")
                            .arg((new_tat - now).div_ceil(1000))
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                        tally.admit();
                    } else {
                        let wait = Duration::from_micros(new_tat - tau - now);
                        let _ = tokio::time::timeout_at(deadline, tokio::time::sleep(wait)).await;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    tally.report()
}

/// Spawn the worker processes, wait for them, and sum their reports. Returns the total and
/// the span `t` from the common start to the last admission.
fn run_processes(mode: &str) -> (u64, Duration) {
    let exe = std::env::current_exe().unwrap();
    let prefix = unique_prefix(mode);
    // Leave the workers time to start and connect.
    let start_us = unix_us() + 1_000_000;
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "worker_process_entry_point", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(WORKER_ENV, format!("{mode} {prefix} {start_us}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a worker process")
        })
        .collect();
    let mut total = Report::default();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "worker failed: {stdout}");
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("REPORT ").map(|(_, r)| r))
            .unwrap_or_else(|| panic!("no report from a worker: {stdout}"));
        let field = |name: &str| -> u64 {
            line.split(' ')
                .find_map(|kv| kv.trim().strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("bad report {line}"))
        };
        total.admitted += field("admitted");
        total.errors += field("errors");
        total.last_us = total.last_us.max(field("last_us"));
    }
    assert_eq!(total.errors, 0, "{mode}: decisions failed: {total:?}");
    let span = Duration::from_micros(total.last_us.saturating_sub(start_us));
    (total.admitted, span)
}

#[test]
fn processes_share_one_limit_and_a_naive_get_set_overshoots() {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { raw(&redis_url()).await });

    // The atomic scripts: within the bound, and close to it.
    let (admitted, span) = run_processes("script");
    let bound = f64::from(BURST) + RATE as f64 * span.as_secs_f64();
    let nominal = f64::from(BURST) + RATE as f64 * RUN.as_secs_f64();
    println!(
        "script: {admitted} admitted by {PROCESSES} processes × {TASKS_PER_PROCESS} tasks in \
         {span:?}; bound burst + rate·t = {bound:.1}"
    );
    assert!(
        admitted as f64 <= bound,
        "rate invariant broken across processes: {admitted} > {bound:.1}"
    );
    assert!(
        admitted as f64 >= 0.95 * nominal,
        "under-admitting: {admitted} < 95 % of {nominal}"
    );

    // The naive limiter in the same scenario: the test sees the overshoot.
    let (naive, span) = run_processes("naive");
    let bound = f64::from(BURST) + RATE as f64 * span.as_secs_f64();
    println!("naive GET/SET: {naive} admitted in {span:?}; bound {bound:.1}");
    assert!(
        naive as f64 > bound,
        "the naive limiter should overshoot ({naive} ≤ {bound:.1}): the scenario is too gentle \
         to tell a racy limiter from an atomic one"
    );
}

#[test]
fn processes_racing_on_one_key_of_a_plan_never_exceed_any_quota() {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { raw(&redis_url()).await });
    let (admitted, span) = run_processes("plan");
    // The rate quota, over the span to the last admission, and the minute's cap (the run
    // is shorter than a minute): the rate alone would allow more than the cap.
    let rate_bound = f64::from(BURST) + RATE as f64 * span.as_secs_f64();
    println!(
        "plan: {admitted} admitted by {PROCESSES} processes × {TASKS_PER_PROCESS} tasks in \
         {span:?}; rate bound {rate_bound:.1}, cap {PLAN_CAP}"
    );
    assert!(
        f64::from(BURST) + RATE as f64 * RUN.as_secs_f64() > PLAN_CAP as f64,
        "the scenario must reach the cap"
    );
    assert!(admitted <= PLAN_CAP, "the minute's cap broken: {admitted}");
    assert!(
        admitted as f64 <= rate_bound,
        "the rate quota broken: {admitted} > {rate_bound:.1}"
    );
    assert!(admitted > 0);
}
