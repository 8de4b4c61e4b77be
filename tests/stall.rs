//! The rate invariant at the instants requests actually go, right after the runtime stalled:
//! 200 waiters at 1000/s burst 10, then every timer fires at once (`advance` by 60 ms in one
//! jump). Checked for every algorithm, through `acquire`, the waiting layer and the reject
//! layer's bounded wait.

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use support::{aligned, settle};
use tokio::time::{advance, Instant};
use tower::{service_fn, Service, ServiceExt};
use tower_layer::Layer;
use tower_throttle::{Algorithm, Bucket, Quota, RateLimitLayer, RejectLayer};

const MS: Duration = Duration::from_millis(1);
const STALL: Duration = Duration::from_millis(60);
/// Waiters queued when the runtime stalls.
const BEFORE: usize = 200;
/// Waiters that keep the line busy for the 3 s after it.
const AFTER: usize = 3_200;

/// Every algorithm at 1000 per second, with the bound it promises over any interval of
/// length `t` (in tokens, `t` in ms), plus one for the lateness credit.
/// The most tokens an algorithm admits within `t` ms.
type Bound = fn(u64) -> u64;

fn algorithms() -> Vec<(&'static str, Bucket, Bound)> {
    let token = Quota::per_second(1000).burst(10);
    let window = Quota::new(10, Duration::from_millis(10));
    vec![
        ("token", Bucket::new(token), |t| 10 + t + 1),
        // Strict spacing at 1 ms, finer than tokio's timer jitter: the guard's floor of
        // `⌈2 ms · rate⌉ + 1` tokens applies (see `a_leaky_bucket_*` below at 500/s).
        (
            "leaky",
            Bucket::builder(token)
                .algorithm(Algorithm::leaky_bucket(10_000))
                .build(),
            |t| 1 + t + 2,
        ),
        (
            "log",
            Bucket::builder(window)
                .algorithm(Algorithm::SlidingLog)
                .build(),
            |t| 10 + t + 1,
        ),
        // Up to twice the count across a boundary.
        ("sliding", aligned(window, Algorithm::SlidingWindow), |t| {
            20 + t + 1
        }),
        ("fixed", aligned(window, Algorithm::FixedWindow), |t| {
            20 + t + 1
        }),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Path {
    Acquire,
    WaitingLayer,
    RejectLayerMaxWait,
}

type Log = Arc<Mutex<Vec<Instant>>>;

/// One request through `path`, recording the instant it is let through.
async fn request(path: Path, bucket: Bucket, log: Log) {
    let record = {
        let log = log.clone();
        move || log.lock().unwrap().push(Instant::now())
    };
    match path {
        Path::Acquire => {
            bucket.acquire(1).await.unwrap();
            record();
        }
        Path::WaitingLayer => {
            let svc = RateLimitLayer::new(bucket).layer(service_fn(move |()| {
                record();
                async { Ok::<_, Infallible>(()) }
            }));
            svc.oneshot(()).await.unwrap();
        }
        Path::RejectLayerMaxWait => {
            let svc = RejectLayer::new(bucket)
                .max_wait(Duration::from_secs(3600))
                .layer(service_fn(move |_: Request<String>| {
                    record();
                    async { Ok::<_, Infallible>(Response::new(String::new())) }
                }));
            let res = svc.oneshot(Request::new(String::new())).await.unwrap();
            assert_eq!(res.status(), 200);
        }
    }
}

/// The most admissions in any half-open window of `width` starting at an admission.
fn most_in(times: &[Duration], width: Duration) -> usize {
    let mut j = 0;
    (0..times.len())
        .map(|i| {
            while j < times.len() && times[j] < times[i] + width {
                j += 1;
            }
            j - i
        })
        .max()
        .unwrap_or(0)
}

async fn stall(name: &str, bucket: Bucket, bound: Bound, path: Path) {
    let start = Instant::now();
    let log: Log = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..BEFORE {
        tasks.push(tokio::spawn(request(path, bucket.clone(), log.clone())));
    }
    settle().await;
    // The runtime stalls: every timer due in the next 60 ms fires at once.
    advance(STALL).await;
    for _ in 0..AFTER {
        tasks.push(tokio::spawn(request(path, bucket.clone(), log.clone())));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut times: Vec<Duration> = log.lock().unwrap().iter().map(|t| *t - start).collect();
    times.sort();
    assert_eq!(times.len(), BEFORE + AFTER);
    // One instant (a window narrower than any spacing): at most `bound(0)`, the burst plus
    // the one token of rounding.
    let at_once = most_in(&times, Duration::from_nanos(1));
    assert!(
        at_once as u64 <= bound(0),
        "{name} via {path:?}: {at_once} admitted at one instant (bound {})",
        bound(0)
    );
    // Every interval, not only those of the widths below: each bound is `bound(0) + t`.
    let over = excess(&times, 1.0);
    assert!(
        over <= bound(0) as f64 + 1e-9,
        "{name} via {path:?}: {over} over the rate in some interval (bound {})",
        bound(0)
    );
    for ms in [1u64, 2, 5, 10, 20, 50, 60, 100, 250, 500, 1000, 3000] {
        let most = most_in(&times, MS * ms as u32);
        assert!(
            most as u64 <= bound(ms),
            "{name} via {path:?}: {most} admitted within {ms} ms (bound {})",
            bound(ms)
        );
    }
    // The 3 s after the stall admit at the full rate: nothing lost to it. (The sliding
    // estimate rounds the previous window's share up, so at a count of 10 it admits 9 per
    // window when busy: that is the estimate, not the stall.)
    let after = times
        .iter()
        .filter(|t| **t >= STALL && **t < STALL + Duration::from_secs(3))
        .count();
    let least = if name == "sliding" { 2686 } else { 2985 };
    assert!(
        after >= least,
        "{name} via {path:?}: {after} admitted in the 3 s after the stall (ideal 3000)"
    );
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_holds_its_bound_at_the_instants_acquire_returns_after_a_stall() {
    for (name, bucket, bound) in algorithms() {
        stall(name, bucket, bound, Path::Acquire).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_waiting_layer_holds_the_bound_at_the_instants_it_calls_after_a_stall() {
    for (name, bucket, bound) in algorithms() {
        stall(name, bucket, bound, Path::WaitingLayer).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_reject_layers_bounded_wait_holds_the_bound_after_a_stall() {
    for (name, bucket, bound) in algorithms() {
        stall(name, bucket, bound, Path::RejectLayerMaxWait).await;
    }
}

/// Without stalls, the waiters follow the schedule exactly: 1000/s from the first token,
/// one wake (poll) per admission and none late.
#[tokio::test(start_paused = true)]
async fn without_a_stall_waiters_follow_the_schedule_without_drift() {
    let bucket = Bucket::new(Quota::per_second(1000).burst(10));
    let start = Instant::now();
    let log: Log = Arc::default();
    let tasks: Vec<_> = (0..2010)
        .map(|_| tokio::spawn(request(Path::Acquire, bucket.clone(), log.clone())))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let last = *log.lock().unwrap().iter().max().unwrap() - start;
    // 10 at once, then 2000 more, one per millisecond.
    assert_eq!(last, Duration::from_secs(2));
}

/// A stall of the waiters' own tasks (timers fire late, then the tasks run) does not make
/// the schedule slip: tokens due during the stall are not lost, only spread.
#[tokio::test(start_paused = true)]
async fn repeated_short_stalls_do_not_lower_the_rate() {
    let bucket = Bucket::new(Quota::per_second(1000).burst(10));
    let start = Instant::now();
    let log: Log = Arc::default();
    let tasks: Vec<_> = (0..1010)
        .map(|_| tokio::spawn(request(Path::Acquire, bucket.clone(), log.clone())))
        .collect();
    settle().await;
    // Time moves in uneven jumps, as on a busy machine.
    while log.lock().unwrap().len() < 1010 {
        advance(Duration::from_micros(2_700)).await;
        settle().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut times: Vec<Duration> = log.lock().unwrap().iter().map(|t| *t - start).collect();
    times.sort();
    assert!(most_in(&times, 100 * MS) <= 111);
    let last = *times.last().unwrap();
    assert!(
        last <= Duration::from_millis(1003),
        "{last:?} for 1000 tokens at 1000/s"
    );
}

/// `n` waiters on `bucket` through `acquire`, on a runtime that only runs every `jump`: the
/// instants they go, sorted.
async fn in_jumps(bucket: Bucket, n: usize, jump: Duration) -> Vec<Duration> {
    let start = Instant::now();
    let log: Log = Arc::default();
    let tasks: Vec<_> = (0..n)
        .map(|_| tokio::spawn(request(Path::Acquire, bucket.clone(), log.clone())))
        .collect();
    settle().await;
    while log.lock().unwrap().len() < n {
        advance(jump).await;
        settle().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut times: Vec<Duration> = log.lock().unwrap().iter().map(|t| *t - start).collect();
    times.sort();
    times
}

/// The leaky bucket (strict spacing, burst 1) at 500/s on a runtime that only runs every
/// `jump`: 1001 waiters, the instants they go.
async fn leaky_in_jumps(jump: Duration) -> Vec<Duration> {
    let bucket = Bucket::builder(Quota::per_second(500))
        .algorithm(Algorithm::leaky_bucket(2000))
        .build();
    let times = in_jumps(bucket, 1001, jump).await;
    // Never more than the burst plus the token of rounding in any interval `w`, however the
    // jumps fall: `1 + 500·w + 1`, so at most two at one instant.
    for us in [
        0.001, 1_801.0, 2_000.0, 3_601.0, 3_801.0, 5_401.0, 7_601.0, 2e4, 2e5,
    ] {
        let w = Duration::from_secs_f64(us / 1e6);
        let most = most_in(&times, w) as f64;
        let bound = 1.0 + us / 2_000.0 + 1.0;
        assert!(
            most <= bound,
            "{most} within {w:?} (bound {bound}, {jump:?} jumps)"
        );
    }
    times
}

/// Timers less than one interval late: the late waiter is counted at its turn, so the
/// schedule does not slip.
#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_keeps_its_rate_with_timers_up_to_one_interval_late() {
    let last = *leaky_in_jumps(Duration::from_micros(1_800))
        .await
        .last()
        .unwrap();
    assert!(
        last <= Duration::from_millis(2002),
        "{last:?} for 1 + 1000 tokens"
    );
}

/// Timers 1.9 intervals late: two go together once the one ahead was late, but the bound
/// allows no more than three in any two consecutive runs (`1 + 1.9 + 1`), so 1.5 per run is
/// the most it lets through: the bucket takes exactly that, and loses nothing more.
#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_with_late_timers_admits_all_the_bound_allows_and_no_more() {
    let times = leaky_in_jumps(Duration::from_micros(3_800)).await;
    let last = *times.last().unwrap();
    // 1000 tokens after the first at 1.5 per 3.8 ms: 2.5333 s.
    assert!(last <= Duration::from_micros(2_534_800), "{last:?}");
}

/// `Ready` from the waiting layer without a call in between still holds the bound for a
/// service polled ready by many tasks at once (a quick check on clones).
#[tokio::test(start_paused = true)]
async fn clones_of_a_waiting_service_share_the_line() {
    let bucket = Bucket::new(Quota::per_second(100).burst(1));
    let layer = RateLimitLayer::new(bucket);
    let log: Log = Arc::default();
    let start = Instant::now();
    let base = layer.layer(service_fn({
        let log = log.clone();
        move |()| {
            log.lock().unwrap().push(Instant::now());
            async { Ok::<_, Infallible>(()) }
        }
    }));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let mut svc = base.clone();
            tokio::spawn(async move { svc.ready().await.unwrap().call(()).await.unwrap() })
        })
        .collect();
    settle().await;
    advance(STALL).await;
    for t in tasks {
        t.await.unwrap();
    }
    let mut times: Vec<Duration> = log.lock().unwrap().iter().map(|t| *t - start).collect();
    times.sort();
    assert!(most_in(&times, 100 * MS) <= 1 + 10 + 1);
}

/// Waiters on a busy bucket are woken about once per admission: one poll to join the line,
/// one when their timer fires at their turn.
#[tokio::test(start_paused = true)]
async fn busy_waiters_are_polled_about_twice_per_admission() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use support::CountPolls;

    let token = Quota::per_second(1000).burst(10);
    let cases = [
        ("token", Bucket::new(token)),
        (
            "leaky",
            Bucket::builder(token)
                .algorithm(Algorithm::leaky_bucket(1000))
                .build(),
        ),
        (
            "log",
            Bucket::builder(Quota::new(10, Duration::from_millis(10)))
                .algorithm(Algorithm::SlidingLog)
                .build(),
        ),
    ];
    for (name, bucket) in cases {
        let polls = Arc::new(AtomicUsize::new(0));
        let admitted = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..200)
            .map(|_| {
                let (b, p, a) = (bucket.clone(), polls.clone(), admitted.clone());
                tokio::spawn(async move {
                    loop {
                        CountPolls::new(b.acquire(1), p.clone()).await.unwrap();
                        a.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(3)).await;
        for t in tasks {
            t.abort();
        }
        let admitted = admitted.load(Ordering::Relaxed);
        assert!(
            admitted >= 3000,
            "{name}: {admitted} admitted in 3 s at 1000/s"
        );
        let per = polls.load(Ordering::Relaxed) as f64 / admitted as f64;
        assert!(per <= 2.2, "{name}: {per:.2} polls per admission");
    }
}

/// Wakers and observer callbacks run after the bucket's lock is released: an observer that
/// reads the bucket from its callbacks does not deadlock.
#[test]
fn observer_callbacks_may_read_the_bucket() {
    use std::sync::OnceLock;
    use tower_throttle::observe::Observer;

    #[derive(Debug, Default)]
    struct Reads(OnceLock<Bucket>);
    impl Observer for Reads {
        fn admitted(&self, _: u32, _: Duration) {
            let _ = self.0.get().map(Bucket::snapshot);
        }
        fn refused(&self, _: u32, _: Duration, _: bool) {
            let _ = self.0.get().map(Bucket::snapshot);
        }
        fn paused(&self, _: Duration) {
            let _ = self.0.get().map(Bucket::snapshot);
        }
        fn tokens(&self, _: u32) {
            let _ = self.0.get().map(Bucket::snapshot);
        }
    }

    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        support::run_paused(async {
            let reads = Arc::new(Reads::default());
            let bucket = Bucket::builder(Quota::per_second(100).burst(2))
                .observer(reads.clone())
                .build();
            reads.0.set(bucket.clone()).unwrap();
            let waiters: Vec<_> = (0..5)
                .map(|_| {
                    let b = bucket.clone();
                    tokio::spawn(async move { b.acquire(1).await.unwrap() })
                })
                .collect();
            settle().await;
            let _ = bucket.try_acquire(1);
            bucket.pause(Duration::from_millis(30));
            bucket.set_quota(Quota::per_second(50).burst(2));
            for w in waiters {
                w.await.unwrap();
            }
        });
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("an observer callback deadlocked on the bucket's lock");
}

/// The most that sorted `times` put into any closed interval beyond `rate_per_ms` times its
/// length: the bound `burst + rate·t + 1` holds over every interval exactly when this is at
/// most `burst + 1`.
fn excess(times: &[Duration], rate_per_ms: f64) -> f64 {
    let mut most = 0.0f64;
    for (i, a) in times.iter().enumerate() {
        for (k, b) in times[i..].iter().enumerate() {
            let ms = (*b - *a).as_secs_f64() * 1e3;
            most = most.max((k + 1) as f64 - rate_per_ms * ms);
        }
    }
    most
}

/// A sliding log of 10 per 10 ms on a runtime that only runs every `jump`: 1000 waiters,
/// the instants they go.
async fn log_in_jumps(jump: Duration) -> Vec<Duration> {
    let quota = Quota::new(10, Duration::from_millis(10));
    in_jumps(
        Bucket::builder(quota)
            .algorithm(Algorithm::SlidingLog)
            .build(),
        1000,
        jump,
    )
    .await
}

/// Late timers: a sliding log catches up on what they delayed, and never puts more than its
/// count plus one, plus the rate, into any interval of the instants requests actually go.
#[tokio::test(start_paused = true)]
async fn a_sliding_log_with_late_timers_holds_the_bound_at_actual_instants_and_catches_up() {
    for jump_us in [1_000, 1_900, 2_500, 3_700, 6_100, 12_000] {
        let jump = Duration::from_micros(jump_us);
        let times = log_in_jumps(jump).await;
        let over = excess(&times, 1.0);
        assert!(over <= 11.0 + 1e-9, "{over} over the rate ({jump:?} jumps)");
        // Timers up to twice tokio's jitter late lose nothing: 990 tokens after the first 10
        // at 1 per ms, 990 ms; the last runs may split a window's worth that the bound does
        // not let go at once. Later timers are a stall each time.
        let last = *times.last().unwrap();
        if jump_us <= 4_000 {
            assert!(
                last <= Duration::from_millis(990) + 2 * jump,
                "{last:?} for 1000 tokens ({jump:?} jumps)"
            );
        }
    }
}
