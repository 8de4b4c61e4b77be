//! The Redis backend: latency of one decision next to a `PING` round trip from the same kind
//! of client in the same run, the latency of one decision of each algorithm next to the
//! token bucket's, decisions per second from one process with 64 concurrent tasks on one
//! hot limit (one round trip per decision, and with leases of 16), and `redis-benchmark`'s
//! figures for the same script (`EVALSHA`) and for `PING`.
//!
//! Then 4 OS processes (this benchmark again) × 64 tasks on one hot limit with leases of 16
//! for 10 s: what they admitted against the stated bound, `burst + rate·t + 4 × 16`.
//!
//! `-- refusal` runs one group alone: the latency of a refused acquire on a full sliding log
//! of 100 000 entries beside a refused token-bucket acquire, alternating in the same run.
//!
//! `-- plans` runs another: a keyed check against a plan of three quotas (per second, per
//! minute and per day, the last two in fixed windows) beside a keyed check against one
//! quota and a `RedisBucket` decision, alternating in the same run.
//!
//! `-- classes` runs another: 60 waiters (20 of each priority class) saturating one
//! `RedisBucket` of 500 a second for 3 s, with and without `priority_weights`, alternating
//! in the same run: what each class was admitted, the script runs per admission, and what a
//! script run costs Redis (`INFO commandstats`, µs per `EVALSHA`; the benchmark resets
//! Redis' statistics).
//!
//! With `--features redis-cluster`, also keyed decisions (64 tasks, keys spread evenly)
//! on a private 3-primary Redis Cluster started by the benchmark, next to the same on one
//! primary, with each shard's share.
//!
//! ```text
//! cargo bench --features redis --bench redis
//! cargo bench --features redis --bench redis -- refusal
//! cargo bench --features redis --bench redis -- plans
//! cargo bench --features redis --bench redis -- classes
//! cargo bench --features redis-cluster --bench redis
//! TOWER_THROTTLE_REDIS_URL=redis://host:6379 cargo bench --features redis --bench redis
//! ```

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisKeyed};
use tower_throttle::{Algorithm, Plan, Quota};

/// The scripts as the crate puts them together.
#[path = "../src/redis/source.rs"]
#[allow(dead_code)]
mod source;

#[cfg(feature = "redis-cluster")]
#[path = "../tests/redis_support/cluster.rs"]
#[allow(dead_code, unreachable_pub)]
mod cluster;

const SAMPLES: usize = 20_000;
/// Samples per algorithm in the comparison of algorithms.
const ALGORITHM_SAMPLES: usize = 5_000;
const TASKS: usize = 64;
const THROUGHPUT_FOR: Duration = Duration::from_secs(3);

fn url() -> String {
    std::env::var("TOWER_THROTTLE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

struct Stats {
    mean: Duration,
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    let mean = v.iter().sum::<Duration>() / v.len() as u32;
    Stats {
        mean,
        p50: v[v.len() / 2],
        p99: v[v.len() * 99 / 100],
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A quota that always admits at these speeds, so every decision is a full read-write.
fn quota() -> Quota {
    Quota::per_second(1_000_000).burst(1_000_000)
}

async fn decision_bucket(prefix: &str) -> RedisBucket {
    algorithm_bucket(prefix, "bench", quota(), Algorithm::TokenBucket).await
}

async fn algorithm_bucket(
    prefix: &str,
    key: &str,
    quota: Quota,
    algorithm: Algorithm,
) -> RedisBucket {
    RedisBucket::builder(quota)
        .url(url())
        .key_prefix(prefix)
        .key(key)
        .algorithm(algorithm)
        .failure_policy(FailurePolicy::Closed)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_or_else(|e| panic!("the benchmark needs Redis at {}: {e}", url()))
}

/// The same hot limit with leases of up to `LEASE` tokens.
const LEASE: u32 = 16;

async fn leased_bucket(prefix: &str) -> RedisBucket {
    RedisBucket::builder(quota())
        .url(url())
        .key_prefix(prefix)
        .key("bench-leased")
        .failure_policy(FailurePolicy::Closed)
        .timeout(Duration::from_secs(1))
        .lease(LEASE)
        .build()
        .await
        .unwrap_or_else(|e| panic!("the benchmark needs Redis at {}: {e}", url()))
}

/// The number in a `redis-benchmark -q` line ("EVALSHA …: 38910.51 requests per second, …").
fn per_second(line: &str) -> Option<f64> {
    let (head, _) = line.split_once(" requests per second")?;
    head.rsplit(' ').next()?.parse().ok()
}

/// The least any decision script can do: read the clock, read the state, write it back.
const FLOOR_SCRIPT: &str = "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) \
     redis.call('SET', KEYS[1], t[1], 'PX', '1000') return {1, 0, 0}";

async fn latency(bucket: &RedisBucket, ping: &ConnectionManager, prefix: &str) -> [Stats; 3] {
    let floor = redis::Script::new(FLOOR_SCRIPT);
    let floor_key = format!("{prefix}:{{floor}}");
    let mut samples: [Vec<Duration>; 3] = Default::default();
    // Warm up, then alternate one of each, so all see the same conditions (this machine's
    // latency varies a lot from one second to the next).
    for i in 0..1_000 + SAMPLES {
        let mut c = ping.clone();
        let t0 = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
        let t1 = Instant::now();
        let _: Vec<i64> = floor.key(&floor_key).invoke_async(&mut c).await.unwrap();
        let t2 = Instant::now();
        bucket.try_acquire(1).await.unwrap();
        let t3 = Instant::now();
        if i >= 1_000 {
            samples[0].push(t1 - t0);
            samples[1].push(t2 - t1);
            samples[2].push(t3 - t2);
        }
    }
    samples.map(stats)
}

/// The algorithms compared, each with a quota that admits every decision at these speeds.
/// The sliding log's window is 100 ms: it holds every admission of the last 100 ms, the
/// work of its decisions growing with them (the count of entries is printed).
fn algorithms() -> [(&'static str, Algorithm, Quota); 5] {
    [
        ("token bucket", Algorithm::TokenBucket, quota()),
        ("leaky bucket", Algorithm::leaky_bucket(1), quota()),
        ("fixed window", Algorithm::FixedWindow, quota()),
        ("sliding window", Algorithm::SlidingWindow, quota()),
        (
            "sliding log (100 ms window)",
            Algorithm::SlidingLog,
            Quota::new(1_000_000, Duration::from_millis(100)),
        ),
    ]
}

/// One decision of each algorithm in turn (each on its own key), sequentially.
async fn algorithm_latency(prefix: &str) -> Vec<(&'static str, Stats, i64)> {
    let mut buckets = Vec::new();
    for (i, (name, algorithm, quota)) in algorithms().into_iter().enumerate() {
        let bucket = algorithm_bucket(prefix, &format!("algo{i}"), quota, algorithm).await;
        buckets.push((name, bucket));
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); buckets.len()];
    let mut log_entries = Vec::new();
    for i in 0..500 + ALGORITHM_SAMPLES {
        // Rotate who goes first: the first of a round pays for the idle gap before it.
        for j in 0..buckets.len() {
            let k = (i + j) % buckets.len();
            let bucket = &buckets[k].1;
            let t0 = Instant::now();
            bucket.try_acquire(1).await.unwrap();
            if i >= 500 {
                samples[k].push(t0.elapsed());
            }
        }
        if i % 500 == 499 {
            let client = redis::Client::open(url().as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let log = format!("{}:log", buckets[4].1.redis_key());
            let n: i64 = redis::cmd("ZCARD")
                .arg(&log)
                .query_async(&mut c)
                .await
                .unwrap();
            log_entries.push(n);
        }
    }
    let entries = log_entries.iter().sum::<i64>() / log_entries.len().max(1) as i64;
    buckets
        .iter()
        .zip(samples)
        .enumerate()
        .map(|(k, ((name, _), v))| (*name, stats(v), if k == 4 { entries } else { -1 }))
        .collect()
}

/// A keyed check (one key) against a plan of three quotas, against one quota, and a
/// `RedisBucket` decision of one quota, in turn: every decision admits.
async fn plans(prefix: &str) {
    let keyed = |plan: Plan, name: &str| {
        let prefix = format!("{prefix}-{name}");
        async move {
            RedisKeyed::builder(plan)
                .url(url())
                .key_prefix(prefix)
                .timeout(Duration::from_secs(1))
                .build()
                .await
                .unwrap_or_else(|e| panic!("the benchmark needs Redis at {}: {e}", url()))
        }
    };
    let three = Plan::new(quota())
        .and(Quota::per_minute(10_000_000))
        .algorithm(Algorithm::FixedWindow)
        .and(Quota::per_day(100_000))
        .algorithm(Algorithm::FixedWindow);
    let three = keyed(three, "three").await;
    let one = keyed(Plan::new(quota()), "one").await;
    let bucket = decision_bucket(prefix).await;
    let mut samples: [Vec<Duration>; 3] = Default::default();
    for i in 0..1_000 + ALGORITHM_SAMPLES {
        for j in 0..3 {
            // Rotate who goes first: the first of a round pays for the idle gap before it.
            let k = (i + j) % 3;
            let t0 = Instant::now();
            match k {
                0 => bucket.try_acquire(1).await.unwrap(),
                1 => one.try_acquire("key", 1).await.unwrap(),
                _ => three.try_acquire("key", 1).await.unwrap(),
            }
            if i >= 1_000 {
                samples[k].push(t0.elapsed());
            }
        }
    }
    let [b, o, t] = samples.map(stats);
    println!("\nplans on redis, sequential, {ALGORITHM_SAMPLES} samples each, alternating:");
    println!(
        "  {:<40} {:>9} {:>9} {:>9}",
        "", "mean µs", "p50 µs", "p99 µs"
    );
    for (name, s) in [
        ("RedisBucket::try_acquire, one quota", &b),
        ("RedisKeyed::try_acquire, one quota", &o),
        ("RedisKeyed::try_acquire, three quotas", &t),
    ] {
        println!(
            "  {name:<40} {:>9.1} {:>9.1} {:>9.1}",
            us(s.mean),
            us(s.p50),
            us(s.p99)
        );
    }
    println!(
        "  three quotas / one quota, keyed: {:.2}× (mean), {:.2}× (p50); / RedisBucket: \
         {:.2}× (mean), {:.2}× (p50)   target ≤ 1.3×",
        us(t.mean) / us(o.mean),
        us(t.p50) / us(o.p50),
        us(t.mean) / us(b.mean),
        us(t.p50) / us(b.p50)
    );
}

/// Entries in the full sliding log of the refusal group.
const FULL_LOG: u32 = 100_000;

/// A refused acquire on a sliding log holding `FULL_LOG` entries (one per admission, an
/// hour's window) next to a refused acquire on an empty token bucket, alternating.
async fn refusals(prefix: &str) {
    let hour = Duration::from_secs(3600);
    let log = algorithm_bucket(
        prefix,
        "full-log",
        Quota::new(FULL_LOG, hour),
        Algorithm::SlidingLog,
    )
    .await;
    let token = algorithm_bucket(
        prefix,
        "empty-token",
        Quota::new(1, hour),
        Algorithm::TokenBucket,
    )
    .await;
    let per_task = FULL_LOG as usize / TASKS;
    let fill: Vec<_> = (0..TASKS)
        .map(|i| {
            let log = log.clone();
            let n = if i == 0 {
                FULL_LOG as usize - per_task * (TASKS - 1)
            } else {
                per_task
            };
            tokio::spawn(async move {
                for _ in 0..n {
                    log.try_acquire(1).await.unwrap();
                }
            })
        })
        .collect();
    for task in fill {
        task.await.unwrap();
    }
    token.try_acquire(1).await.unwrap();
    let client = redis::Client::open(url().as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let entries: i64 = redis::cmd("ZCARD")
        .arg(format!("{}:log", log.redis_key()))
        .query_async(&mut c)
        .await
        .unwrap();
    let mut samples = [Vec::new(), Vec::new()];
    for i in 0..200 + ALGORITHM_SAMPLES {
        for j in 0..2 {
            let k = (i + j) % 2;
            let bucket = [&token, &log][k];
            let t0 = Instant::now();
            assert!(bucket.try_acquire(1).await.is_err());
            if i >= 200 {
                samples[k].push(t0.elapsed());
            }
        }
    }
    let [t, l] = samples.map(stats);
    println!("\nrefused acquire, sequential, {ALGORITHM_SAMPLES} samples each, alternating:");
    println!(
        "  {:<36} {:>9} {:>9} {:>9}",
        "", "mean µs", "p50 µs", "p99 µs"
    );
    for (name, s) in [
        ("token bucket, empty".to_owned(), &t),
        (format!("sliding log, full ({entries} entries)"), &l),
    ] {
        println!(
            "  {name:<36} {:>9.1} {:>9.1} {:>9.1}",
            us(s.mean),
            us(s.p50),
            us(s.p99)
        );
    }
    println!(
        "  log / token: {:.2}× (mean), {:.2}× (p50)   target ≤ 2×",
        us(l.mean) / us(t.mean),
        us(l.p50) / us(t.p50)
    );
}

async fn throughput<F, Fut>(op: F) -> f64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (op, done, stop) = (op.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    op().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await; // warm up
    let (n0, t0) = (done.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(THROUGHPUT_FOR).await;
    let (n1, t1) = (done.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
}

/// `host`, `port` of a plain `redis://host:port[/db]` URL.
fn host_port(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("redis://")?;
    let rest = rest.split('/').next()?;
    let rest = rest.rsplit('@').next()?;
    let (host, port) = rest.rsplit_once(':').unwrap_or((rest, "6379"));
    Some((host.to_owned(), port.to_owned()))
}

/// `redis-benchmark -q` for one command; its "requests per second" line.
fn redis_benchmark(host: &str, port: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-benchmark")
        .args(["-h", host, "-p", port, "-n", "200000", "-c", "64", "-q"])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(['\r', '\n'])
        .rfind(|l| l.contains("requests per second"))
        .map(|l| l.trim().to_owned())
}

/// Set in the worker processes of [`processes_on_one_hot_limit`]: "<prefix> <start µs>".
const WORKER_ENV: &str = "TOWER_THROTTLE_BENCH_LEASE_WORKER";
const PROCESSES: usize = 4;
const HOT_FOR: Duration = Duration::from_secs(10);

/// The hot limit the processes share: a rate their 4 × 64 tasks exceed, leases of 16.
fn hot_quota() -> Quota {
    Quota::per_second(20_000).burst(200)
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// One of the processes: 64 tasks take tokens of the hot limit (leases of 16) for
/// `HOT_FOR` from the common start; prints what it admitted and when it last did.
fn lease_worker(spec: &str) {
    let mut it = spec.split(' ');
    let prefix = it.next().unwrap().to_owned();
    let start_us: u64 = it.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (admitted, last_us) = rt.block_on(async move {
        let bucket = RedisBucket::builder(hot_quota())
            .url(url())
            .key_prefix(&prefix)
            .key("hot")
            .timeout(Duration::from_secs(1))
            .lease(LEASE)
            .build()
            .await
            .unwrap();
        let now = unix_us();
        tokio::time::sleep(Duration::from_micros(start_us.saturating_sub(now))).await;
        let deadline = tokio::time::Instant::now() + HOT_FOR;
        let admitted = Arc::new(AtomicU64::new(0));
        let last = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (b, admitted, last) = (bucket.clone(), admitted.clone(), last.clone());
                tokio::spawn(async move {
                    while tokio::time::Instant::now() < deadline {
                        match tokio::time::timeout_at(deadline, b.acquire(1)).await {
                            Ok(Ok(())) => {
                                admitted.fetch_add(1, Ordering::Relaxed);
                                last.fetch_max(unix_us(), Ordering::Relaxed);
                            }
                            Ok(Err(e)) => panic!("{e}"),
                            Err(_) => break,
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let s = bucket.stats();
        assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
        (
            admitted.load(Ordering::Relaxed),
            last.load(Ordering::Relaxed),
        )
    });
    println!("WORKER {admitted} {last_us}");
}

/// `PROCESSES` OS processes (this benchmark again) on one hot limit with leases of 16, for
/// `HOT_FOR`: what they admitted against `burst + rate·t + processes × lease`.
fn processes_on_one_hot_limit(prefix: &str) {
    let start_us = unix_us() + 1_500_000;
    let spec = format!("{prefix}-procs {start_us}");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .env(WORKER_ENV, &spec)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start a worker process")
        })
        .collect();
    let (mut admitted, mut last_us) = (0u64, 0u64);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("WORKER "))
            .unwrap_or_else(|| panic!("no report from a worker: {text}"));
        let mut f = line.split(' ').map(|v| v.parse::<u64>().unwrap());
        admitted += f.next().unwrap();
        last_us = last_us.max(f.next().unwrap());
    }
    let q = hot_quota();
    let t = last_us.saturating_sub(start_us) as f64 / 1e6;
    let bound =
        f64::from(q.burst_size()) + q.per_second_f64() * t + (PROCESSES as f64) * f64::from(LEASE);
    println!(
        "\n{PROCESSES} processes × {TASKS} tasks, one hot limit ({}/s, burst {}), leases of {LEASE}, {:?}:",
        q.per_second_f64(),
        q.burst_size(),
        HOT_FOR
    );
    println!(
        "  admitted {admitted} in {t:.3} s; bound burst + rate·t + {PROCESSES} × {LEASE} = {bound:.0}: {} ({:.3} of the rate)",
        if admitted as f64 <= bound { "within" } else { "EXCEEDED" },
        admitted as f64 / (q.per_second_f64() * t + f64::from(q.burst_size()))
    );
    assert!(admitted as f64 <= bound, "the stated bound does not hold");
}

/// Waiters of every class on one bucket, ranked by class or in arrival order.
async fn classes(prefix: &str) {
    use tower_throttle::{Cost, Priority};
    let client = redis::Client::open(url().as_str()).unwrap();
    let mut admin = ConnectionManager::new(client).await.unwrap();
    println!("\n60 waiters (20 per class), 500/s, burst 1, 3 s each, alternating:");
    println!(
        "  {:<22} {:>9} {:>9} {:>9} {:>13} {:>12}",
        "", "critical", "normal", "backgr.", "runs / adm.", "µs / run"
    );
    for round in 0..3 {
        for ranked in [false, true] {
            let mut builder = RedisBucket::builder(Quota::per_second(500).burst(1))
                .url(url())
                .key_prefix(prefix)
                .key(format!("classes-{round}-{ranked}"));
            if ranked {
                builder = builder.priority_weights([6, 3, 1]);
            }
            let bucket = builder.build().await.unwrap();
            let counts: Arc<[AtomicU64; 3]> = Arc::default();
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut admin)
                .await
                .unwrap();
            let tasks: Vec<_> = (0..60)
                .map(|i| {
                    let (bucket, counts) = (bucket.clone(), counts.clone());
                    let class = [Priority::Critical, Priority::Normal, Priority::Background][i % 3];
                    tokio::spawn(async move {
                        loop {
                            let charge = bucket.charge(Cost::new().priority(class)).await;
                            drop(charge.unwrap());
                            counts[i % 3].fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_secs(3)).await;
            tasks.iter().for_each(|t| t.abort());
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut admin)
                .await
                .unwrap();
            let field = |name: &str| -> f64 {
                let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:"));
                let line = line.unwrap_or_default();
                let at = line
                    .find(&format!("{name}="))
                    .map_or(line.len(), |i| i + name.len() + 1);
                let value = line[at..].split(',').next().unwrap_or("0");
                value.parse().unwrap_or(0.0)
            };
            let n: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
            let total = n.iter().sum::<u64>().max(1) as f64;
            let name = if ranked {
                "priority_weights 6:3:1"
            } else {
                "arrival order"
            };
            println!(
                "  {name:<22} {:>9} {:>9} {:>9} {:>13.2} {:>12.1}",
                n[0],
                n[1],
                n[2],
                field("calls") / total,
                field("usec_per_call")
            );
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        lease_worker(&spec);
        return;
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("tt-bench-{}-{nanos}", std::process::id());
    let url = url();
    println!(
        "Redis backend benchmark against {}",
        host_port(&url).map_or("(url)".into(), |(h, p)| format!("{h}:{p}"))
    );
    if std::env::args().any(|a| a == "plans") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(plans(&prefix));
        return;
    }
    if std::env::args().any(|a| a == "classes") {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(classes(&prefix));
        return;
    }
    if std::env::args().any(|a| a == "refusal") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(refusals(&prefix));
        return;
    }

    // Latency: one task at a time, on a single-threaded runtime (no cross-thread wake-ups).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bucket = decision_bucket(&prefix).await;
        let client = redis::Client::open(url.as_str()).unwrap();
        let ping = ConnectionManager::new(client).await.unwrap();
        let [p, f, d] = latency(&bucket, &ping, &prefix).await;
        println!("\nlatency, sequential, {SAMPLES} samples each, alternating:");
        println!(
            "  {:<36} {:>9} {:>9} {:>9}",
            "", "mean µs", "p50 µs", "p99 µs"
        );
        for (name, s) in [
            ("PING round trip", &p),
            ("bare TIME+GET+SET script (floor)", &f),
            ("RedisBucket::try_acquire", &d),
        ] {
            println!(
                "  {name:<36} {:>9.1} {:>9.1} {:>9.1}",
                us(s.mean),
                us(s.p50),
                us(s.p99)
            );
        }
        println!(
            "  decision / PING: {:.2}× (mean), {:.2}× (p50)   target ≤ 1.3×",
            us(d.mean) / us(p.mean),
            us(d.p50) / us(p.p50)
        );
        println!(
            "  decision / floor script: {:.2}× (mean), {:.2}× (p50)",
            us(d.mean) / us(f.mean),
            us(d.p50) / us(f.p50)
        );

        let rows = algorithm_latency(&prefix).await;
        println!(
            "\nlatency per algorithm, sequential, {ALGORITHM_SAMPLES} samples each, alternating:"
        );
        println!(
            "  {:<36} {:>9} {:>9} {:>9} {:>9}",
            "", "mean µs", "p50 µs", "p99 µs", "× token"
        );
        let base = us(rows[0].1.mean);
        for (name, s, entries) in &rows {
            let name = if *entries >= 0 {
                format!("{name}, ~{entries} entries")
            } else {
                (*name).to_owned()
            };
            println!(
                "  {name:<36} {:>9.1} {:>9.1} {:>9.1} {:>9.2}",
                us(s.mean),
                us(s.p50),
                us(s.p99),
                us(s.mean) / base
            );
        }
    });
    drop(rt);

    // Throughput: 64 tasks on a multi-threaded runtime.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let decisions = rt.block_on(async {
        let bucket = decision_bucket(&prefix).await;
        let leased = leased_bucket(&prefix).await;
        let client = redis::Client::open(url.as_str()).unwrap();
        let ping = ConnectionManager::new(client).await.unwrap();
        let b = bucket.clone();
        let decisions = throughput(move || {
            let b = b.clone();
            async move { b.try_acquire(1).await.unwrap() }
        })
        .await;
        let l = leased.clone();
        let with_leases = throughput(move || {
            let l = l.clone();
            async move { l.try_acquire(1).await.unwrap() }
        })
        .await;
        let pings = throughput({
            let ping = ping.clone();
            move || {
                let mut c = ping.clone();
                async move {
                    let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
                }
            }
        })
        .await;
        println!("\nthroughput, one process, {TASKS} concurrent tasks, one shared bucket:");
        println!("  RedisBucket::try_acquire  {decisions:>10.0} decisions/s");
        let ls = leased.stats();
        println!(
            "  … with .lease({LEASE})        {with_leases:>10.0} decisions/s   {:.1}× (target ≥ 5×); \
             {:.1} decisions per round trip",
            with_leases / decisions,
            ls.leased_admissions as f64 / ls.round_trips.max(1) as f64
        );
        println!("  PING                      {pings:>10.0} round trips/s");
        for s in [bucket.stats(), ls] {
            assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
        }
        with_leases
    });

    processes_on_one_hot_limit(&prefix);

    #[cfg(feature = "redis-cluster")]
    rt.block_on(cluster_throughput(&prefix));

    // The same script through redis-benchmark (64 connections, no client library).
    let Some((host, port)) = host_port(&url) else {
        println!("\nredis-benchmark: skipped (URL not of the form redis://host:port)");
        return;
    };
    let sha = rt.block_on(async {
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let script = source::one(source::Family::Token, source::Verb::Acquire);
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query_async(&mut c)
            .await
            .unwrap();
        sha
    });
    let key = format!("{prefix}:{{redis-benchmark}}");
    let log = format!("{key}:log");
    let q = quota();
    let t = q.interval().as_nanos() / 1000;
    let (t_us, burst) = (t.to_string(), q.burst_size().to_string());
    let tau = (t * u128::from(q.burst_size())).to_string();
    let (w_us, count) = (
        (q.period().as_nanos() / 1000).to_string(),
        q.count().to_string(),
    );
    let evalsha = redis_benchmark(
        &host,
        &port,
        &[
            "EVALSHA",
            &sha,
            "2",
            &key,
            &log,
            &t_us,
            &burst,
            "1",
            "3600000000",
            &tau,
            &w_us,
            &count,
        ],
    );
    let ping = redis_benchmark(&host, &port, &["PING"]);
    println!("\nredis-benchmark -n 200000 -c 64 -q (64 connections):");
    match (evalsha, ping) {
        (Some(e), Some(p)) => {
            let rate =
                |l: &str| per_second(l).map_or(l.to_owned(), |r| format!("{r:>10.0} requests/s"));
            println!("  EVALSHA (the decision script, one key): {}", rate(&e));
            println!("  PING:                                   {}", rate(&p));
            if let Some(evalsha) = per_second(&e) {
                println!(
                    "  leases of {LEASE} / EVALSHA: {:.1}× (target ≥ 2×)",
                    decisions / evalsha
                );
            }
        }
        _ => println!("  redis-benchmark not available"),
    }
}

/// Keyed decisions per second, 64 tasks over 10 000 keys, on one primary and on a
/// 3-primary cluster; each shard's share from the keys whose slot it owns.
#[cfg(feature = "redis-cluster")]
async fn cluster_throughput(prefix: &str) {
    use tower_throttle::redis::RedisKeyed;

    async fn keyed_rate(keyed: RedisKeyed) -> f64 {
        let next = Arc::new(AtomicU64::new(0));
        throughput(move || {
            let (keyed, next) = (keyed.clone(), next.clone());
            async move {
                let k = next.fetch_add(1, Ordering::Relaxed) % 10_000;
                keyed.try_acquire(k, 1).await.unwrap();
            }
        })
        .await
    }
    let single = RedisKeyed::builder(quota())
        .url(url())
        .key_prefix(format!("{prefix}-keyed"))
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let one = keyed_rate(single).await;

    let nodes = cluster::Cluster::start();
    let keyed = RedisKeyed::builder(quota())
        .cluster(nodes.urls())
        .key_prefix(format!("{prefix}-cluster"))
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let three = keyed_rate(keyed.clone()).await;
    let s = keyed.stats();
    assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
    // Each shard's share: the keys (used in turn, equally often) whose slot it owns.
    let mut per_shard = [0u32; 3];
    for k in 0..10_000u64 {
        per_shard[nodes.node_of(&keyed.redis_key(k))] += 1;
    }
    println!("\nkeyed decisions, one process, {TASKS} tasks, 10 000 keys:");
    println!("  one primary               {one:>10.0} decisions/s");
    println!(
        "  3-primary cluster         {three:>10.0} decisions/s   {:.2}× one primary",
        three / one
    );
    for (i, keys) in per_shard.iter().enumerate() {
        println!(
            "    shard {i}: {:>10.0} decisions/s ({keys} of the 10 000 keys)",
            three * f64::from(*keys) / 10_000.0
        );
    }
}
