//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower_throttle::{Algorithm, Bucket, Quota};

/// A bucket of `algorithm` whose windows start now (not at the wall clock's period
/// boundary), so that no result depends on when the test runs.
pub fn aligned(quota: Quota, algorithm: Algorithm) -> Bucket {
    Bucket::builder(quota)
        .algorithm(algorithm)
        .window_origin(Instant::now())
        .build()
}

/// Checks the rate invariant over every window spanned by two admissions:
/// tokens admitted in `[t_i, t_j]` ≤ `burst + (t_j − t_i) / interval`.
/// `admissions` are (time since start, cost), in any order.
pub fn assert_rate_bound(admissions: &[(Duration, u32)], quota: Quota) {
    let mut a = admissions.to_vec();
    a.sort();
    let interval = quota.interval().as_nanos();
    let burst = u128::from(quota.burst_size());
    for i in 0..a.len() {
        let mut tokens = 0u128;
        for j in i..a.len() {
            tokens += u128::from(a[j].1);
            let span = (a[j].0 - a[i].0).as_nanos();
            assert!(
                tokens * interval <= burst * interval + span,
                "{tokens} tokens admitted in {:?} (from {:?} to {:?}) exceeds burst {burst} + rate·t for {quota:?}",
                a[j].0 - a[i].0,
                a[i].0,
                a[j].0,
            );
        }
    }
}

/// The most tokens admitted in any half-open window `[t, t + width)` starting at an
/// admission. `admissions` are (time since start, cost), in any order.
pub fn most_in_a_window(admissions: &[(Duration, u32)], width: Duration) -> u32 {
    let mut a = admissions.to_vec();
    a.sort();
    (0..a.len())
        .map(|i| {
            a[i..]
                .iter()
                .take_while(|x| x.0 < a[i].0 + width)
                .map(|x| x.1)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

/// Records admission times relative to a start instant.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    log: Arc<std::sync::Mutex<Vec<(Duration, u32, usize)>>>,
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            start: Instant::now(),
            log: Default::default(),
        }
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    pub fn record(&self, cost: u32, id: usize) {
        self.log
            .lock()
            .unwrap()
            .push((self.start.elapsed(), cost, id));
    }

    /// (time, cost, id) in the order recorded.
    pub fn entries(&self) -> Vec<(Duration, u32, usize)> {
        self.log.lock().unwrap().clone()
    }

    pub fn admissions(&self) -> Vec<(Duration, u32)> {
        self.entries().into_iter().map(|(t, c, _)| (t, c)).collect()
    }
}

/// Counts how often a future is polled.
pub struct CountPolls<F> {
    inner: Pin<Box<F>>,
    polls: Arc<AtomicUsize>,
}

impl<F> CountPolls<F> {
    pub fn new(inner: F, polls: Arc<AtomicUsize>) -> Self {
        CountPolls {
            inner: Box::pin(inner),
            polls,
        }
    }
}

impl<F: Future> Future for CountPolls<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.inner.as_mut().poll(cx)
    }
}

/// Lets every ready task run at the current (paused) instant.
pub async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// Runs `f` on a current-thread runtime with tokio's clock paused.
pub fn run_paused<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

/// Sends arrivals `(gap in ms, cost, try only)` through a bucket: waiters `acquire`, the others
/// `try_acquire` once. Returns the admissions and, per admission, (time, cost, waiter id;
/// `usize::MAX` for a `try_acquire`).
pub async fn drive(
    bucket: tower_throttle::Bucket,
    arrivals: Vec<(u64, u32, bool)>,
) -> (Vec<(Duration, u32)>, Vec<(Duration, u32, usize)>) {
    let rec = Recorder::new();
    let mut tasks = Vec::new();
    for (id, (gap_ms, cost, try_only)) in arrivals.into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        if try_only {
            if bucket.try_acquire(cost).is_ok() {
                rec.record(cost, usize::MAX);
            }
            continue;
        }
        let (b, rec) = (bucket.clone(), rec.clone());
        tasks.push(tokio::spawn(async move {
            b.acquire(cost).await.unwrap();
            rec.record(cost, id);
        }));
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    (rec.admissions(), rec.entries())
}

/// FIFO: a waiter that arrived later is never admitted earlier.
pub fn assert_fifo(entries: &[(Duration, u32, usize)]) {
    let mut waiters: Vec<_> = entries.iter().filter(|e| e.2 != usize::MAX).collect();
    waiters.sort_by_key(|e| e.2);
    for w in waiters.windows(2) {
        assert!(
            w[0].0 <= w[1].0,
            "waiter {} admitted after waiter {}",
            w[0].2,
            w[1].2
        );
    }
}

/// A bucket's observer that notes when each request left the limiter (the instant the
/// bucket admitted it) and each pause the bucket made (its start and end, exact).
#[derive(Debug, Default)]
pub struct Departures {
    bucket: std::sync::OnceLock<Bucket>,
    admitted: std::sync::Mutex<Vec<Instant>>,
    pauses: std::sync::Mutex<Vec<(Instant, Instant)>>,
}

impl Departures {
    /// A bucket of `quota` and the departures it notes.
    pub fn bucket(quota: Quota) -> (Bucket, Arc<Departures>) {
        let departures = Arc::new(Departures::default());
        let bucket = Bucket::builder(quota).observer(departures.clone()).build();
        departures.bucket.set(bucket.clone()).unwrap();
        (bucket, departures)
    }

    /// Assert that no request left the limiter during a pause, from `slack` after it began
    /// (an admission decided just before it is noted a moment later) until it ended; the
    /// number of pauses.
    pub fn assert_quiet_during_pauses(&self, slack: Duration) -> usize {
        let admitted = self.admitted.lock().unwrap();
        let pauses = self.pauses.lock().unwrap();
        for &(start, end) in pauses.iter() {
            let during: Vec<_> = admitted
                .iter()
                .filter(|t| **t >= start + slack && **t < end)
                .map(|t| t.duration_since(start))
                .collect();
            assert!(
                during.is_empty(),
                "left the limiter during a pause of {:?}, after {during:?}",
                end - start
            );
        }
        pauses.len()
    }
}

impl tower_throttle::observe::Observer for Departures {
    fn admitted(&self, _tokens: u32, _waited: Duration) {
        self.admitted.lock().unwrap().push(Instant::now());
    }

    fn paused(&self, cooldown: Duration) {
        let bucket = self.bucket.get().expect("the bucket is set when built");
        if let Some(end) = bucket.snapshot().paused_until {
            self.pauses.lock().unwrap().push((end - cooldown, end));
        }
    }
}

/// A server behind a rejecting layer, and requests with an API key.
pub mod server {
    use std::convert::Infallible;

    use http::{Request, Response};
    use tower::{service_fn, Service, ServiceExt};

    /// What the test servers answer.
    pub type Res = Response<String>;

    /// A service that answers "ok".
    pub fn ok() -> impl Service<Request<String>, Response = Res, Error = Infallible> + Clone {
        service_fn(|_: Request<String>| async { Ok(Response::new(String::from("ok"))) })
    }

    /// `GET path` with `x-api-key: key`.
    pub fn get(path: &str, key: &str) -> Request<String> {
        Request::get(path)
            .header("x-api-key", key)
            .body(String::new())
            .unwrap()
    }

    /// `req` sent through `svc` once it is ready.
    pub async fn send<S>(svc: &mut S, req: Request<String>) -> S::Response
    where
        S: Service<Request<String>, Error = Infallible>,
    {
        svc.ready().await.unwrap().call(req).await.unwrap()
    }
}
