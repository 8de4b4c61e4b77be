//! Admission accuracy and cost under contention, in real time.
//!
//! 200 tasks on a 2-worker runtime share one limiter of 1000 per second with a burst of 10
//! for 3 seconds. Each task loops: wait for permission, record the admission instant. At
//! 3 s every task is aborted and only admissions before 3 s count. The ideal is
//! `10 + 1000 × 3 = 3010` admissions, never more than 110 in any 100 ms (`+1` for rounding).
//! The leaky bucket spaces strictly (a burst of 1): its ideal is `1 + 1000 × 3 = 3001`, never
//! more than 101 in any 100 ms. A sliding log of 10 per 10 ms admits at most 10 per window:
//! its ideal is `3000`. Each row is measured against its own ideal. The leaky bucket's
//! reference is governor with a burst of 1, which spaces as strictly.
//!
//! Each wait is wrapped in a future that counts its polls: an acquire that has to wait costs
//! at least two (one to queue, one when woken), so *wakeups* are polls minus one per acquire.
//! CPU time is that of the whole process, read from `/proc`.
//!
//! Every limiter runs in three conditions:
//! - **quiet**: nothing else runs;
//! - **loaded**: two CPU-bound processes (`sh` busy loops) run beside it on the two cores;
//! - **stall**: one second in, the whole process is stopped for 60 ms (`SIGSTOP`, then
//!   `SIGCONT` from a helper process), as a busy machine or a debugger would: every timer is
//!   overdue at once when it resumes.
//!
//! ```text
//! cargo bench --bench accuracy
//! cargo bench --bench accuracy -- leaky governor   # only the rows whose names contain these
//! ```
//!
//! With `ACCURACY_GAPS=1` in the environment, each row also prints how the gaps between
//! consecutive admissions are spread (to standard error).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::num::NonZeroU32;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tower::{Service, ServiceExt};

const TASKS: usize = 200;
const WORKERS: usize = 2;
const RATE: u32 = 1000;
const BURST: u32 = 10;
const RUN: Duration = Duration::from_secs(3);
const WINDOW: Duration = Duration::from_millis(100);
const IDEAL: u64 = BURST as u64 + RATE as u64 * 3;
const WINDOW_IDEAL: u64 = BURST as u64 + RATE as u64 / 10;

/// What every task of one run shares.
struct Recorder {
    start: Instant,
    /// Polls of all the wait futures.
    polls: AtomicU64,
    /// Wait futures polled at least once.
    started: AtomicU64,
    /// Admission instants, relative to `start`.
    admitted: Mutex<Vec<Duration>>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            start: Instant::now(),
            polls: AtomicU64::new(0),
            started: AtomicU64::new(0),
            admitted: Mutex::new(Vec::with_capacity(8 * IDEAL as usize)),
        }
    }

    /// Waits for `wait`, counting its polls.
    async fn counted<F: Future>(&self, wait: F) -> F::Output {
        let mut wait = std::pin::pin!(wait);
        let mut first = true;
        std::future::poll_fn(|cx| {
            if std::mem::take(&mut first) {
                self.started.fetch_add(1, Ordering::Relaxed);
            }
            self.polls.fetch_add(1, Ordering::Relaxed);
            wait.as_mut().poll(cx)
        })
        .await
    }

    fn record(&self) {
        let t = self.start.elapsed();
        self.admitted.lock().unwrap().push(t);
    }
}

/// CPU time of the process, from `/proc/self/stat` (`utime + stime`, in clock ticks).
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces; `utime`
    // and `stime` are fields 14 and 15, i.e. the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Linux reports `/proc` CPU times in units of `USER_HZ`, 100 on every mainstream platform.
const TICKS_PER_SEC: f64 = 100.0;

/// CPU nanoseconds of each live thread of the process, from `/proc/self/task/*/schedstat`:
/// finer than `/proc/self/stat`, but blind to threads that have exited.
fn thread_cpu_ns() -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let ns = std::fs::read_to_string(entry.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        if let Some(ns) = ns {
            out.insert(tid, ns);
        }
    }
    out
}

fn cpu_ns_since(before: &HashMap<u64, u64>) -> u64 {
    thread_cpu_ns()
        .into_iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(&tid).copied().unwrap_or(0)))
        .sum()
}

/// What runs beside the limiter.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Quiet,
    Loaded,
    Stall,
}

impl Mode {
    fn describe(self) -> &'static str {
        match self {
            Mode::Quiet => "quiet",
            Mode::Loaded => "loaded: two CPU-bound processes beside it",
            Mode::Stall => "stall: the process stopped for 60 ms at 1 s (SIGSTOP/SIGCONT)",
        }
    }

    /// The most a correct limiter with `burst` admits: a stalled process admits nothing for
    /// 60 ms, and its bucket refills by at most the burst meanwhile.
    fn ideal(self, burst: u64) -> u64 {
        let ideal = burst + u64::from(RATE) * RUN.as_secs();
        match self {
            Mode::Stall => ideal - u64::from(RATE) * 60 / 1000 + burst,
            _ => ideal,
        }
    }

    /// The most a sliding log of `count` per `count` ms admits: `count` per whole window of
    /// the run, and a whole window's count at the end of a stall.
    fn ideal_log(self, count: u64) -> u64 {
        let ideal = u64::from(RATE) * RUN.as_secs();
        match self {
            Mode::Stall => ideal - u64::from(RATE) * 60 / 1000 + count,
            _ => ideal,
        }
    }

    /// Starts what disturbs the run; the children are killed when the run ends.
    fn disturb(self) -> Vec<Child> {
        let sh = |script: String| Command::new("sh").arg("-c").arg(script).spawn().unwrap();
        match self {
            Mode::Quiet => Vec::new(),
            Mode::Loaded => (0..2).map(|_| sh("while :; do :; done".into())).collect(),
            Mode::Stall => {
                let pid = std::process::id();
                vec![sh(format!(
                    "sleep 1; kill -STOP {pid}; sleep 0.06; kill -CONT {pid}"
                ))]
            }
        }
    }
}

struct Row {
    name: &'static str,
    /// The limiter's burst: its ideal and bound depend on it.
    burst: u64,
    /// A sliding log of this count per window: its own ideal.
    log: Option<u64>,
    admitted: u64,
    max_window: u64,
    polls: u64,
    wakeups: u64,
    cpu_stat_s: Option<f64>,
    cpu_ns: u64,
}

impl Row {
    /// A limiter whose burst is not [`BURST`].
    fn burst(self, burst: u64) -> Self {
        Row { burst, ..self }
    }

    /// A sliding log of `count` per `count` ms: its ideal is a whole count per window.
    fn log(self, count: u64) -> Self {
        Row {
            log: Some(count),
            ..self
        }
    }

    fn ideal(&self, mode: Mode) -> u64 {
        match self.log {
            Some(count) => mode.ideal_log(count),
            None => mode.ideal(self.burst),
        }
    }
}

/// Runs one peer: `make` builds the limiter inside the runtime, `task` is one task's loop.
fn run<L, T, Fut>(mode: Mode, name: &'static str, make: impl FnOnce() -> L, task: T) -> Option<Row>
where
    T: Fn(&L, Arc<Recorder>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run_tasks(mode, name, TASKS, make, task)
}

/// Whether the command line selects the row `name`: every argument that is not an option is
/// a substring of the rows to run (none: every row).
fn wanted(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

fn run_tasks<L, T, Fut>(
    mode: Mode,
    name: &'static str,
    tasks: usize,
    make: impl FnOnce() -> L,
    task: T,
) -> Option<Row>
where
    T: Fn(&L, Arc<Recorder>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    if !wanted(name) {
        return None;
    }
    let mut disturbance = mode.disturb();
    let ticks_before = cpu_ticks();
    let threads_before = thread_cpu_ns();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .unwrap();
    let rec = rt.block_on(async {
        let limiter = make();
        let rec = Arc::new(Recorder::new());
        let handles: Vec<_> = (0..tasks)
            .map(|_| tokio::spawn(task(&limiter, Arc::clone(&rec))))
            .collect();
        tokio::time::sleep_until((rec.start + RUN).into()).await;
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let _ = h.await;
        }
        rec
    });
    let cpu_ns = cpu_ns_since(&threads_before);
    drop(rt);
    for child in &mut disturbance {
        let _ = child.kill();
        let _ = child.wait();
    }
    let cpu_stat_s = match (ticks_before, cpu_ticks()) {
        (Some(a), Some(b)) => Some((b - a) as f64 / TICKS_PER_SEC),
        _ => None,
    };

    let mut ts: Vec<Duration> = rec
        .admitted
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|&t| t < RUN)
        .collect();
    ts.sort_unstable();
    let polls = rec.polls.load(Ordering::Relaxed);
    let started = rec.started.load(Ordering::Relaxed);
    if std::env::var_os("ACCURACY_GAPS").is_some() {
        print_gaps(name, &ts);
    }
    Some(Row {
        name,
        burst: u64::from(BURST),
        log: None,
        admitted: ts.len() as u64,
        max_window: max_in_window(&ts, WINDOW),
        polls,
        wakeups: polls - started,
        cpu_stat_s,
        cpu_ns,
    })
}

/// With `ACCURACY_GAPS` set: how the gaps between consecutive admissions are spread, and
/// the time lost in gaps longer than 2 ms.
fn print_gaps(name: &str, ts: &[Duration]) {
    let mut counts = [0u64; 6];
    let bounds_ms = [1, 2, 3, 5, 10, u64::MAX];
    let mut lost = Duration::ZERO;
    for pair in ts.windows(2) {
        let gap = pair[1] - pair[0];
        let i = bounds_ms
            .iter()
            .position(|&b| gap < Duration::from_millis(b).max(Duration::from_nanos(1)))
            .unwrap_or(5);
        counts[i] += 1;
        lost += gap.saturating_sub(Duration::from_millis(2));
    }
    eprintln!(
        "{name}: gaps <1 ms {}, 1-2 {}, 2-3 {}, 3-5 {}, 5-10 {}, >=10 {}; beyond 2 ms: {:?}; first at {:?}, last at {:?}",
        counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], lost,
        ts.first(), ts.last()
    );
}

/// The most instants of sorted `ts` in any half-open window `[t, t + w)`; checking windows
/// that start at an instant is enough.
fn max_in_window(ts: &[Duration], w: Duration) -> u64 {
    let mut best = 0;
    let mut end = 0;
    for (i, &t) in ts.iter().enumerate() {
        while end < ts.len() && ts[end] < t + w {
            end += 1;
        }
        best = best.max(end - i);
    }
    best as u64
}

/// One task's loop through a tower service: `ready().await` then `call().await`.
async fn through_service<S>(mut svc: S, rec: Arc<Recorder>)
where
    S: Service<()>,
    S::Error: std::fmt::Debug,
{
    loop {
        rec.counted(async {
            let ready = svc.ready().await.expect("service failed");
            ready.call(()).await.expect("call failed");
        })
        .await;
        rec.record();
    }
}

type Leaf = tower::util::ServiceFn<fn(()) -> std::future::Ready<Result<(), Infallible>>>;

/// The service behind every limiter: answers at once.
fn leaf() -> Leaf {
    let answer: fn(()) -> std::future::Ready<Result<(), Infallible>> =
        |()| std::future::ready(Ok(()));
    tower::service_fn(answer)
}

fn our_quota() -> tower_throttle::Quota {
    tower_throttle::Quota::per_second(RATE).burst(BURST)
}

fn rows(mode: Mode) -> Vec<Row> {
    [
        run(
            mode,
            "ours `Bucket::acquire(1)`",
            || tower_throttle::Bucket::new(our_quota()),
            |bucket, rec| acquire_loop(bucket.clone(), rec),
        ),
        run(
            mode,
            "ours `RateLimit` (a clone per task)",
            || tower_throttle::RateLimit::new(leaf(), tower_throttle::Bucket::new(our_quota())),
            |svc, rec| through_service(svc.clone(), rec),
        ),
        run(
            mode,
            "ours leaky bucket `acquire(1)`",
            || {
                let quota = tower_throttle::Quota::per_second(RATE);
                let leaky = tower_throttle::Algorithm::leaky_bucket(TASKS);
                tower_throttle::Bucket::builder(quota)
                    .algorithm(leaky)
                    .build()
            },
            |bucket, rec| acquire_loop(bucket.clone(), rec),
        )
        .map(|r| r.burst(1)),
        run(
            mode,
            "ours sliding log 10 per 10 ms `acquire(1)`",
            || {
                let quota = tower_throttle::Quota::new(10, Duration::from_millis(10));
                let log = tower_throttle::Algorithm::SlidingLog;
                tower_throttle::Bucket::builder(quota)
                    .algorithm(log)
                    .build()
            },
            |bucket, rec| acquire_loop(bucket.clone(), rec),
        )
        .map(|r| r.log(10)),
        governor_row(mode, "governor 0.10 `until_ready()`", BURST),
        governor_row(mode, "governor 0.10 `until_ready()`, burst 1", 1),
        run(
            mode,
            "leaky-bucket 1.1 `acquire_one()`",
            || {
                Arc::new(
                    leaky_bucket::RateLimiter::builder()
                        .initial(BURST as usize)
                        .max(BURST as usize)
                        .refill(1)
                        .interval(Duration::from_millis(1))
                        .build(),
                )
            },
            |limiter, rec| {
                let limiter = Arc::clone(limiter);
                async move {
                    loop {
                        rec.counted(limiter.acquire_one()).await;
                        rec.record();
                    }
                }
            },
        ),
        run(
            mode,
            "leaky-bucket 1.1, refill 10 every 10 ms",
            || {
                Arc::new(
                    leaky_bucket::RateLimiter::builder()
                        .initial(BURST as usize)
                        .max(BURST as usize)
                        .refill(10)
                        .interval(Duration::from_millis(10))
                        .build(),
                )
            },
            |limiter, rec| {
                let limiter = Arc::clone(limiter);
                async move {
                    loop {
                        rec.counted(limiter.acquire_one()).await;
                        rec.record();
                    }
                }
            },
        ),
        run(
            mode,
            "tower `Buffer(RateLimit)`, 1000 per 1 s",
            || {
                let rate = tower::limit::rate::Rate::new(u64::from(RATE), Duration::from_secs(1));
                tower::buffer::Buffer::new(tower::limit::RateLimit::new(leaf(), rate), 256)
            },
            |svc, rec| through_service(svc.clone(), rec),
        ),
        run(
            mode,
            "tower `Buffer(RateLimit)`, 10 per 10 ms",
            || {
                let rate = tower::limit::rate::Rate::new(10, Duration::from_millis(10));
                tower::buffer::Buffer::new(tower::limit::RateLimit::new(leaf(), rate), 256)
            },
            |svc, rec| through_service(svc.clone(), rec),
        ),
        floor(mode),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn main() {
    for mode in [Mode::Quiet, Mode::Loaded, Mode::Stall] {
        print_table(mode, &rows(mode));
    }
}

/// governor at [`RATE`] with `burst`, each task looping on `until_ready()`.
fn governor_row(mode: Mode, name: &'static str, burst: u32) -> Option<Row> {
    run(
        mode,
        name,
        || {
            let quota = governor::Quota::per_second(NonZeroU32::new(RATE).unwrap())
                .allow_burst(NonZeroU32::new(burst).unwrap());
            Arc::new(governor::RateLimiter::direct(quota))
        },
        |limiter, rec| {
            let limiter = Arc::clone(limiter);
            async move {
                loop {
                    rec.counted(limiter.until_ready()).await;
                    rec.record();
                }
            }
        },
    )
    .map(|r| r.burst(u64::from(burst)))
}

/// One task's loop on [`Bucket::acquire`](tower_throttle::Bucket::acquire).
async fn acquire_loop(bucket: tower_throttle::Bucket, rec: Arc<Recorder>) {
    loop {
        rec.counted(bucket.acquire(1)).await.expect("within burst");
        rec.record();
    }
}

/// Not a limiter: one task ticking every millisecond, the least a runtime can spend on
/// 1000 wakeups a second. Its polls are those of `Interval::tick`.
fn floor(mode: Mode) -> Option<Row> {
    run_tasks(
        mode,
        "(reference) 1 task on `tokio::time::interval(1 ms)`",
        1,
        || (),
        |_, rec| async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            loop {
                rec.counted(tick.tick()).await;
                rec.record();
            }
        },
    )
}

fn print_table(mode: Mode, rows: &[Row]) {
    println!(
        "\n### {}\n\n{TASKS} tasks, {WORKERS} workers, {RATE}/s burst {BURST}, {} s: ideal {} \
         admitted, at most {WINDOW_IDEAL} in any {} ms (leaky bucket: burst 1, ideal {}, \
         at most {}; sliding log: ideal {})\n",
        mode.describe(),
        RUN.as_secs(),
        mode.ideal(u64::from(BURST)),
        WINDOW.as_millis(),
        mode.ideal(1),
        WINDOW_IDEAL - u64::from(BURST) + 1,
        mode.ideal_log(10),
    );
    println!(
        "| limiter | admitted | / ideal | max in 100 ms | polls / adm. | wakeups / adm. \
         | CPU s (/proc/self/stat) | CPU ms (threads) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let adm = r.admitted.max(1) as f64;
        let stat = r
            .cpu_stat_s
            .map_or_else(|| "n/a".to_owned(), |s| format!("{s:.2}"));
        println!(
            "| {} | {} | {:.4} | {} | {:.2} | {:.2} | {} | {:.1} |",
            r.name,
            r.admitted,
            r.admitted as f64 / r.ideal(mode) as f64,
            r.max_window,
            r.polls as f64 / adm,
            r.wakeups as f64 / adm,
            stat,
            r.cpu_ns as f64 / 1e6,
        );
    }
    if let Some(ours) = rows.first() {
        println!(
            "\n{}: {:.3} admissions per poll, {:.3} admissions per wakeup",
            ours.name,
            ours.admitted as f64 / ours.polls.max(1) as f64,
            ours.admitted as f64 / ours.wakeups.max(1) as f64,
        );
    }
}
