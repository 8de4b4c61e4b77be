//! Waiters served by priority class with weighted fair shares, first come, first served
//! within a class, on every algorithm, on tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use tokio::time::Instant;
use tower::{service_fn, ServiceExt};
use tower_layer::Layer;
use tower_throttle::{Algorithm, Bucket, Cost, Priority, Quota, RateLimitLayer};

const CLASSES: [Priority; 3] = [Priority::Critical, Priority::Normal, Priority::Background];

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::TokenBucket,
    Algorithm::leaky_bucket(1000),
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

fn bucket(algorithm: Algorithm) -> Bucket {
    Bucket::builder(Quota::per_second(10).burst(1))
        .algorithm(algorithm)
        .window_origin(Instant::now())
        .build()
}

type Log = Arc<Mutex<Vec<usize>>>;

/// Keep 12 waiters of each busy class in line for `secs` seconds: the classes admitted, in
/// order.
async fn saturate(bucket: &Bucket, busy: [bool; 3], secs: u64) -> Vec<usize> {
    saturate_stalled(bucket, busy, secs, Duration::ZERO).await
}

/// [`saturate`], the clock jumping `stall` at once halfway through (a runtime that stalled).
async fn saturate_stalled(
    bucket: &Bucket,
    busy: [bool; 3],
    secs: u64,
    stall: Duration,
) -> Vec<usize> {
    // The burst of an idle bucket goes to whoever comes first: take it.
    while bucket.try_acquire(1).is_ok() {}
    let log: Log = Arc::default();
    let mut tasks = Vec::new();
    for (c, p) in CLASSES.into_iter().enumerate().filter(|(c, _)| busy[*c]) {
        // More than a window's burst each, so that no class empties at a window's start.
        for _ in 0..12 {
            let (bucket, log) = (bucket.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    bucket.acquire(1).priority(p).await.unwrap();
                    log.lock().unwrap().push(c);
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(secs / 2)).await;
    tokio::time::advance(stall).await;
    tokio::time::sleep(Duration::from_secs(secs - secs / 2)).await;
    tasks.iter().for_each(|t| t.abort());
    let log = log.lock().unwrap().clone();
    log
}

/// Admissions per class in each window of `width` admissions.
fn windows(log: &[usize], width: usize) -> Vec<[usize; 3]> {
    log.chunks_exact(width)
        .map(|w| {
            let mut n = [0; 3];
            w.iter().for_each(|c| n[*c] += 1);
            n
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn saturated_classes_share_by_weight_on_every_algorithm() {
    for algorithm in ALGORITHMS {
        let log = saturate(&bucket(algorithm), [true; 3], 60).await;
        assert!(log.len() >= 500, "{algorithm:?}: {}", log.len());
        for w in windows(&log, 100) {
            for (c, share) in [60, 30, 10].into_iter().enumerate() {
                assert!(w[c].abs_diff(share) <= 1, "{algorithm:?}: {w:?}");
            }
        }
    }
}

/// A clock that jumps 5 s at once (a stalled runtime) brings no burst beyond what the
/// algorithm holds, and the shares hold across it.
#[tokio::test(start_paused = true)]
async fn a_stalled_clock_keeps_the_shares_and_the_rate() {
    for algorithm in ALGORITHMS {
        let start = Instant::now();
        let stall = Duration::from_secs(5);
        let log = saturate_stalled(&bucket(algorithm), [true; 3], 30, stall).await;
        // 10 a second over the 35 s the clock moved, plus the most a window holds at once.
        let most = (start.elapsed().as_secs_f64() * 10.0) as usize + 11;
        assert!(log.len() <= most, "{algorithm:?}: {} > {most}", log.len());
        let steady = saturate(&bucket(algorithm), [true; 3], 30).await;
        assert!(
            log.len() >= steady.len() - 1,
            "{algorithm:?}: {} < {}",
            log.len(),
            steady.len()
        );
        for w in windows(&log, 100) {
            for (c, share) in [60, 30, 10].into_iter().enumerate() {
                assert!(w[c].abs_diff(share) <= 1, "{algorithm:?}: {w:?}");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_class_share_goes_to_the_others() {
    for algorithm in ALGORITHMS {
        let log = saturate(&bucket(algorithm), [true, false, true], 42).await;
        for w in windows(&log, 70) {
            assert!(w[0].abs_diff(60) <= 1 && w[1] == 0, "{algorithm:?}: {w:?}");
        }
        let alone = saturate(&bucket(algorithm), [false, true, false], 5).await;
        let all = saturate(&bucket(algorithm), [true; 3], 5).await;
        assert_eq!(
            alone.len(),
            all.len(),
            "{algorithm:?}: one class takes the whole rate"
        );
    }
}

/// A background request among saturated critical traffic goes within its share: after at
/// most six critical admissions (weights 6 : 1), 0.7 s at 10 per second.
#[tokio::test(start_paused = true)]
async fn a_lone_background_waiter_is_never_starved() {
    for algorithm in ALGORITHMS {
        let bucket = bucket(algorithm);
        let flood = {
            let bucket = bucket.clone();
            tokio::spawn(saturate_forever(bucket, Priority::Critical))
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        let start = Instant::now();
        bucket
            .acquire(1)
            .priority(Priority::Background)
            .await
            .unwrap();
        assert!(
            start.elapsed() <= Duration::from_millis(700),
            "{algorithm:?}"
        );
        flood.abort();
    }
}

async fn saturate_forever(bucket: Bucket, p: Priority) {
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let bucket = bucket.clone();
            tokio::spawn(async move {
                loop {
                    bucket.acquire(1).priority(p).await.unwrap();
                }
            })
        })
        .collect();
    struct Abort(Vec<tokio::task::JoinHandle<()>>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.iter().for_each(|t| t.abort());
        }
    }
    let _abort = Abort(tasks);
    std::future::pending::<()>().await;
}

/// The order of admission of waiters joining at once, by name; `cancel` leaves before any
/// goes.
async fn order(algorithm: Algorithm, cancel: Option<&'static str>) -> Vec<&'static str> {
    let bucket = bucket(algorithm);
    while bucket.try_acquire(1).is_ok() {}
    let log = Arc::new(Mutex::new(Vec::new()));
    let joins = [
        ("n1", Priority::Normal),
        ("b1", Priority::Background),
        ("n2", Priority::Normal),
        ("c1", Priority::Critical),
        ("n3", Priority::Normal),
        ("c2", Priority::Critical),
        ("b2", Priority::Background),
    ];
    let mut tasks = Vec::new();
    for (name, p) in joins {
        let (bucket, log) = (bucket.clone(), log.clone());
        tasks.push((
            name,
            tokio::spawn(async move {
                bucket.acquire(1).priority(p).await.unwrap();
                log.lock().unwrap().push(name);
            }),
        ));
        tokio::task::yield_now().await;
    }
    for (name, task) in &tasks {
        if Some(*name) == cancel {
            task.abort();
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = log.lock().unwrap().clone();
    log
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaves_everyone_elses_place() {
    for algorithm in ALGORITHMS {
        let all = order(algorithm, None).await;
        assert_eq!(all.len(), 7);
        // Critical first though it came fourth; then each class's first, then by weight;
        // each class first come, first served.
        assert_eq!(all[0], "c1", "{algorithm:?}: {all:?}");
        let of = |prefix: char| -> Vec<&str> {
            all.iter()
                .copied()
                .filter(|n| n.starts_with(prefix))
                .collect()
        };
        assert_eq!(of('n'), ["n1", "n2", "n3"]);
        assert_eq!(of('b'), ["b1", "b2"]);
        for gone in ["n1", "b1", "n2", "c1", "n3", "c2", "b2"] {
            let rest = order(algorithm, Some(gone)).await;
            let expected: Vec<_> = all.iter().copied().filter(|n| *n != gone).collect();
            assert_eq!(rest, expected, "{algorithm:?}: {gone} cancelled");
        }
    }
}

/// Through the layer: the priority rides on the request's cost, read from its extensions.
#[tokio::test(start_paused = true)]
async fn a_critical_request_overtakes_waiting_background_ones_through_the_layer() {
    let bucket = bucket(Algorithm::TokenBucket);
    let log = Arc::new(Mutex::new(Vec::new()));
    let api = service_fn({
        let log = log.clone();
        move |r: Request<&'static str>| {
            log.lock().unwrap().push(*r.body());
            async { Ok::<_, std::convert::Infallible>(Response::new(())) }
        }
    });
    let client = RateLimitLayer::new(bucket.clone())
        .charge(|r: &Request<&'static str>| Cost::new().priority(Priority::of(r)))
        .layer(api);
    let send = |name: &'static str, p: Priority, after: u64| {
        let client = client.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            let mut request = Request::new(name);
            request.extensions_mut().insert(p);
            client.oneshot(request).await.unwrap();
        }
    };
    let bg = |name, after| send(name, Priority::Background, after);
    tokio::join!(
        bg("b1", 0),
        bg("b2", 1),
        bg("b3", 2),
        bg("b4", 3),
        send("c1", Priority::Critical, 50),
        send("n1", Priority::from_name("not a class"), 60),
    );
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["b1", "c1", "n1", "b2", "b3", "b4"]);
}
