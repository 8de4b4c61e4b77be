//! Who goes first on a real Redis: the priority classes of `RedisBucketBuilder::priority_weights`
//! share the rate among the waiters of every process by weight, and
//! `RedisBucketBuilder::reserve_for_critical` keeps a share of a limit for critical requests
//! in every process.
//!
//! The shares are counted in the order of admissions, never against a clock: 50 per second
//! with a burst of 1 gives a booking horizon of 1 s, 50 tokens, so at 6 : 3 : 1 the classes
//! hold at most 30, 15 and 5 bookings ahead, the bound each stretch of admissions keeps.
#![cfg(feature = "redis")]

#[path = "redis_support/windows.rs"]
#[allow(dead_code)]
mod windows;

mod redis_support;

use std::sync::{Arc, Mutex};

use redis_support::{raw, redis_now_us, redis_url, unique_prefix};
use tower_throttle::redis::{RedisBucket, RedisErrorKind};
use tower_throttle::{Algorithm, Cost, Denied, Plan, Priority, Quota};

const CLASSES: [Priority; 3] = [Priority::Critical, Priority::Normal, Priority::Background];

fn of(p: Priority) -> Cost {
    Cost::new().priority(p)
}

/// A handle on the bucket `name` under `prefix`, ranking classes 6 : 3 : 1.
async fn ranked(prefix: &str, name: &str, plan: impl Into<Plan>) -> RedisBucket {
    RedisBucket::builder(plan)
        .url(redis_url())
        .key_prefix(prefix)
        .key(name)
        .priority_weights([6, 3, 1])
        .build()
        .await
        .unwrap()
}

/// `tasks` waiters of each class in `classes` on each handle, charging one request after
/// another; the classes in the order they were admitted, once `total` were.
async fn admissions(
    handles: &[RedisBucket],
    classes: &[Priority],
    tasks: usize,
    total: usize,
) -> Vec<Priority> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(tokio::sync::Notify::new());
    let mut all = Vec::new();
    for handle in handles {
        for &class in classes {
            for _ in 0..tasks {
                let (handle, log, done) = (handle.clone(), log.clone(), done.clone());
                all.push(tokio::spawn(async move {
                    loop {
                        let _ = handle.charge(of(class)).await.unwrap();
                        let mut log = log.lock().unwrap();
                        log.push(class);
                        if log.len() == total {
                            done.notify_one();
                        }
                    }
                }));
            }
        }
    }
    done.notified().await;
    for task in all {
        task.abort();
    }
    let log = log.lock().unwrap();
    log[..total].to_vec()
}

fn count(log: &[Priority], class: Priority) -> usize {
    log.iter().filter(|&&c| c == class).count()
}

/// Every class's admissions in `log`, against its share of `weights` (their sum among the
/// classes waiting) within its share of the horizon's `room` tokens, and one more.
fn assert_shares(log: &[Priority], weights: &[(Priority, usize)], room: usize) {
    let sum: usize = weights.iter().map(|(_, w)| w).sum();
    for &(class, w) in weights {
        let got = count(log, class);
        let share = log.len() * w / sum;
        let bound = room * w / sum + 1;
        assert!(
            got.abs_diff(share) <= bound,
            "{class:?}: {got} of {}, its share {share} ± {bound}",
            log.len()
        );
    }
}

#[tokio::test]
async fn classes_share_the_rate_by_weight_across_processes() {
    let prefix = unique_prefix("classes");
    let quota = Quota::per_second(50).burst(1);
    let a = ranked(&prefix, "api", quota).await;
    let b = ranked(&prefix, "api", quota).await;
    // 6 waiters of every class in each process, fewer than the critical class's share of
    // the horizon; the first horizon booked before the classes all wait is left out.
    let log = admissions(&[a, b], &CLASSES, 6, 350).await;
    let weights = [(CLASSES[0], 6), (CLASSES[1], 3), (CLASSES[2], 1)];
    assert_shares(&log[50..], &weights, 50);
}

#[tokio::test]
async fn an_idle_class_leaves_its_share_to_the_others() {
    let prefix = unique_prefix("classes-idle");
    let quota = Quota::per_second(50).burst(1);
    let a = ranked(&prefix, "api", quota).await;
    let b = ranked(&prefix, "api", quota).await;
    let busy = [Priority::Critical, Priority::Background];
    let log = admissions(&[a, b], &busy, 24, 260).await;
    assert_eq!(count(&log, Priority::Normal), 0);
    assert_shares(&log[50..], &[(busy[0], 6), (busy[1], 1)], 50);
}

/// A lone background waiter among saturated critical ones of another process goes within
/// the horizon's tokens of its asking, twice over.
#[tokio::test]
async fn a_lone_background_waiter_is_never_starved() {
    let prefix = unique_prefix("classes-lone");
    let quota = Quota::per_second(50).burst(1);
    let busy = ranked(&prefix, "api", quota).await;
    let lone = ranked(&prefix, "api", quota).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut critical = Vec::new();
    for _ in 0..12 {
        let (busy, log) = (busy.clone(), log.clone());
        critical.push(tokio::spawn(async move {
            loop {
                let _ = busy.charge(of(Priority::Critical)).await.unwrap();
                log.lock().unwrap().push(Priority::Critical);
            }
        }));
    }
    while log.lock().unwrap().len() < 60 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let joined = log.lock().unwrap().len();
    let _ = lone.charge(of(Priority::Background)).await.unwrap();
    let went = log.lock().unwrap().len();
    for task in critical {
        task.abort();
    }
    assert!(
        went - joined <= 100,
        "{} critical went first",
        went - joined
    );
}

/// 20 % kept for critical requests: the others of any process are shed past 8 of 10, and
/// critical requests go to 10, on every algorithm with a burst to keep a share of, and per
/// quota of a plan.
#[tokio::test]
async fn a_reserve_holds_across_processes() {
    let prefix = unique_prefix("reserve");
    let url = redis_url();
    let mut conn = raw(&url).await;
    let mut after = 0;
    let cases = [
        (Algorithm::TokenBucket, Quota::per_hour(10)),
        (Algorithm::SlidingLog, Quota::per_hour(10)),
        (Algorithm::FixedWindow, Quota::per_second(10)),
        (Algorithm::SlidingWindow, Quota::per_second(10)),
    ];
    for (i, (algorithm, quota)) in cases.into_iter().enumerate() {
        let windowed = quota.period() < std::time::Duration::from_secs(60);
        // A window's trial runs inside one window of the Redis clock: run again in a fresh
        // key when it did not.
        for attempt in 0.. {
            assert!(attempt < 5, "{algorithm:?}: no quiet window");
            let name = format!("r{i}-{attempt}");
            let handle = || async {
                RedisBucket::builder(quota)
                    .url(&url)
                    .key_prefix(&prefix)
                    .key(&name)
                    .algorithm(algorithm)
                    .reserve_for_critical(0.2)
                    .build()
                    .await
                    .unwrap()
            };
            let (a, b) = (handle().await, handle().await);
            let window = if windowed {
                Some(windows::window_start(&mut conn, after).await)
            } else {
                None
            };
            for k in 0..8 {
                let h = [&a, &b][k % 2];
                let p = [Priority::Normal, Priority::Background][k / 2 % 2];
                assert!(h.try_charge(of(p)).await.is_ok(), "{algorithm:?}: {k}");
            }
            let shed = b.try_acquire(1).await;
            let critical = [
                a.try_charge(of(Priority::Critical)).await,
                b.try_charge(of(Priority::Critical)).await,
            ];
            let full = a.try_charge(of(Priority::Critical)).await;
            let normal = a.try_acquire(1).await;
            if let Some(w) = window {
                let now = redis_now_us(&mut conn).await / windows::WIDTH_US;
                after = now + 1;
                if now != w {
                    continue;
                }
            }
            assert!(
                matches!(shed, Err(Denied::Shed(_))),
                "{algorithm:?}: {shed:?}"
            );
            assert!(critical.iter().all(Result::is_ok), "{algorithm:?}");
            assert!(
                matches!(full, Err(Denied::Throttled(_))),
                "{algorithm:?}: {full:?}"
            );
            assert!(
                matches!(normal, Err(Denied::Throttled(_))),
                "{algorithm:?}: {normal:?}"
            );
            break;
        }
    }
    // Per quota of a plan: half of the 10 per hour kept.
    let plan = Plan::new(Quota::per_second(100)).and(Quota::per_hour(10));
    let bucket = RedisBucket::builder(plan)
        .url(&url)
        .key_prefix(&prefix)
        .key("plan")
        .reserve_for_critical(0.5)
        .build()
        .await
        .unwrap();
    let mut others = 0;
    while bucket.try_acquire(1).await.is_ok() {
        others += 1;
    }
    assert_eq!(others, 5);
    assert!(matches!(bucket.try_acquire(1).await, Err(Denied::Shed(_))));
    let mut critical = 0;
    while bucket.try_charge(of(Priority::Critical)).await.is_ok() {
        critical += 1;
    }
    assert_eq!(critical, 5);
}

/// A waiter of another class waits for the reserve (it is never shed while it waits); a
/// critical request takes the reserve at once.
#[tokio::test]
async fn a_waiting_client_waits_for_the_reserve() {
    let prefix = unique_prefix("reserve-wait");
    let bucket = RedisBucket::builder(Quota::per_second(20).burst(10))
        .url(redis_url())
        .key_prefix(&prefix)
        .key("wait")
        .reserve_for_critical(0.2)
        .build()
        .await
        .unwrap();
    let mut now = 0;
    while bucket.try_acquire(1).await.is_ok() {
        now += 1;
    }
    assert!((8..=9).contains(&now), "{now}");
    let _ = bucket.charge(of(Priority::Critical)).await.unwrap();
    let started = tokio::time::Instant::now();
    let _ = bucket.charge(of(Priority::Normal)).await.unwrap();
    // Never sooner than three tokens' refill after the critical one took the reserve's first.
    assert!(started.elapsed() >= std::time::Duration::from_millis(50));
}

#[tokio::test]
async fn leases_refuse_classes_and_a_reserve() {
    let build = |b: tower_throttle::redis::RedisBucketBuilder| async move {
        b.url(redis_url()).key("leased").lease(4).build().await
    };
    let quota = Quota::per_second(100).burst(10);
    for builder in [
        RedisBucket::builder(quota).priority_weights([6, 3, 1]),
        RedisBucket::builder(quota).reserve_for_critical(0.1),
    ] {
        let e = build(builder).await.unwrap_err();
        assert_eq!(e.kind(), RedisErrorKind::Config);
    }
}

/// Garbage in the classes' account reads as no account: waiters still go, and the account
/// is written anew.
#[tokio::test]
async fn garbage_in_the_account_is_no_account() {
    let prefix = unique_prefix("classes-garbage");
    let quota = Quota::per_second(50).burst(1);
    let bucket = ranked(&prefix, "g", quota).await;
    let key = bucket.redis_key().to_owned();
    let mut conn = raw(&redis_url()).await;
    let _: () = redis::cmd("SET")
        .arg(format!("{key}:classes"))
        .arg("99999999:x:-5")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{key}:booked"))
        .arg("not a set")
        .query_async(&mut conn)
        .await
        .unwrap();
    for class in CLASSES.into_iter().cycle().take(6) {
        let _ = bucket.charge(of(class)).await.unwrap();
    }
    let kind: String = redis::cmd("TYPE")
        .arg(format!("{key}:booked"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(kind == "zset" || kind == "none", "{kind}");
}

/// A `RedisBucket` behind the rejecting layer: the shed get `503` with `Retry-After`, and
/// past the whole limit every class gets `429`.
#[tokio::test]
async fn the_server_answers_503_to_the_shed() {
    use http::{Request, Response, StatusCode};
    use tower::{service_fn, ServiceExt};
    use tower_layer::Layer;
    use tower_throttle::RejectLayer;

    let bucket = RedisBucket::builder(Quota::per_hour(10))
        .url(redis_url())
        .key_prefix(unique_prefix("reserve-server"))
        .key("server")
        .reserve_for_critical(0.2)
        .build()
        .await
        .unwrap();
    let svc = RejectLayer::new(bucket)
        .cost_per_resource(|r: &Request<()>| Cost::new().priority(Priority::of(r)))
        .layer(service_fn(|_: Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
    let send = |p: Priority| {
        let svc = svc.clone();
        async move {
            let mut request = Request::new(());
            request.extensions_mut().insert(p);
            svc.oneshot(request).await.unwrap()
        }
    };
    for _ in 0..8 {
        assert_eq!(send(Priority::Normal).await.status(), StatusCode::OK);
    }
    let shed = send(Priority::Background).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(shed.headers().contains_key("retry-after"));
    assert!(shed.headers().contains_key("ratelimit"));
    for _ in 0..2 {
        assert_eq!(send(Priority::Critical).await.status(), StatusCode::OK);
    }
    assert_eq!(
        send(Priority::Critical).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}
