//! A reserve for critical traffic: past the unreserved part of a limit, requests of every
//! other class are shed (`Denied::Shed`; `503` with `Retry-After` on the server) while
//! critical ones are served up to the whole limit; on every algorithm.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::{service_fn, ServiceExt};
use tower_layer::Layer;
use tower_throttle::{Algorithm, Bucket, Cost, Denied, Plan, Priority, Quota, RejectLayer};

/// The algorithms with a burst to keep a share of (a leaky bucket has none).
const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// 100 per minute (burst 100), 20 % of it kept for critical requests.
fn reserved(algorithm: Algorithm) -> Bucket {
    Bucket::builder(Quota::per_minute(100).burst(100))
        .algorithm(algorithm)
        .window_origin(Instant::now())
        .reserve_for_critical(0.2)
        .build()
}

fn of(p: Priority) -> Cost {
    Cost::new().priority(p)
}

#[tokio::test(start_paused = true)]
async fn others_are_shed_past_80_percent_and_critical_served_to_100() {
    for algorithm in ALGORITHMS {
        let bucket = reserved(algorithm);
        for i in 0..80 {
            let p = [Priority::Normal, Priority::Background][i % 2];
            assert!(bucket.try_charge(of(p)).is_ok(), "{algorithm:?}: {i}");
        }
        for p in [Priority::Normal, Priority::Background] {
            let shed = bucket.try_charge(of(p)).unwrap_err();
            assert!(matches!(shed, Denied::Shed(_)), "{algorithm:?}: {shed:?}");
            assert!(shed.wait().is_some_and(|w| w > Duration::ZERO));
        }
        assert!(matches!(bucket.try_acquire(1), Err(Denied::Shed(_))));
        for i in 80..100 {
            assert!(
                bucket.try_charge(of(Priority::Critical)).is_ok(),
                "{algorithm:?}: {i}"
            );
        }
        let full = bucket.try_charge(of(Priority::Critical)).unwrap_err();
        assert!(
            matches!(full, Denied::Throttled(_)),
            "{algorithm:?}: {full:?}"
        );
    }
}

/// The reserve is of the limit's whole use: critical traffic that came first leaves the
/// others only what is left of the unreserved part.
#[tokio::test(start_paused = true)]
async fn critical_use_counts_against_the_unreserved_part() {
    for algorithm in ALGORITHMS {
        let bucket = reserved(algorithm);
        for _ in 0..50 {
            let _ = bucket.try_charge(of(Priority::Critical)).unwrap();
        }
        let normal = (0..100)
            .take_while(|_| bucket.try_charge(of(Priority::Normal)).is_ok())
            .count();
        assert_eq!(normal, 30, "{algorithm:?}");
        let critical = (0..100)
            .take_while(|_| bucket.try_charge(of(Priority::Critical)).is_ok())
            .count();
        assert_eq!(critical, 20, "{algorithm:?}");
    }
}

/// Without a reserve nothing is shed; a plan's every quota keeps its own share.
#[tokio::test(start_paused = true)]
async fn a_plan_keeps_the_reserve_of_each_quota() {
    let none = Bucket::new(Quota::per_minute(10));
    assert_eq!(
        (0..20).take_while(|_| none.try_acquire(1).is_ok()).count(),
        10
    );
    let plan = Plan::new(Quota::per_second(100)).and(Quota::per_minute(10));
    let bucket = Bucket::builder(plan).reserve_for_critical(0.5).build();
    assert_eq!(
        (0..20)
            .take_while(|_| bucket.try_acquire(1).is_ok())
            .count(),
        5
    );
    assert!(matches!(bucket.try_acquire(1), Err(Denied::Shed(_))));
    assert_eq!(
        (0..20)
            .take_while(|_| bucket.try_charge(of(Priority::Critical)).is_ok())
            .count(),
        5
    );
}

/// A waiter of another class waits for the reserve to be whole again; a critical one goes
/// past it.
#[tokio::test(start_paused = true)]
async fn a_waiting_client_waits_for_the_reserve_critical_goes_first() {
    let bucket = Bucket::builder(Quota::per_second(10).burst(10))
        .reserve_for_critical(0.2)
        .build();
    let start = Instant::now();
    for _ in 0..8 {
        bucket.acquire(1).await.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    let normal = {
        let bucket = bucket.clone();
        tokio::spawn(async move {
            bucket.acquire(1).await.unwrap();
            start.elapsed()
        })
    };
    tokio::task::yield_now().await;
    bucket
        .acquire(1)
        .priority(Priority::Critical)
        .await
        .unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "critical takes the reserve at once"
    );
    // 1 token left: the normal request waits until 3 are (one for it, two kept).
    let waited = normal.await.unwrap();
    assert!(
        waited >= Duration::from_millis(200) && waited <= Duration::from_millis(202),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_server_answers_503_to_the_shed_and_429_past_the_whole_limit() {
    let bucket = Bucket::builder(Quota::per_minute(10).burst(10))
        .reserve_for_critical(0.2)
        .build();
    let svc = RejectLayer::new(bucket)
        .cost_per_resource(|r: &Request<()>| Cost::new().priority(Priority::of(r)))
        .layer(service_fn(|_: Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
    let send = |p: Option<Priority>| {
        let svc = svc.clone();
        async move {
            let mut request = Request::new(());
            if let Some(p) = p {
                request.extensions_mut().insert(p);
            }
            svc.oneshot(request).await.unwrap()
        }
    };
    for _ in 0..8 {
        assert_eq!(send(None).await.status(), StatusCode::OK);
    }
    let shed = send(Some(Priority::Background)).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    // 3 tokens needed of 2: one more in 6 s.
    assert_eq!(shed.headers()["retry-after"], "6");
    assert!(shed.headers().contains_key("ratelimit"));
    for _ in 0..2 {
        assert_eq!(
            send(Some(Priority::Critical)).await.status(),
            StatusCode::OK
        );
    }
    // The whole limit spent: a refusal of the limit itself, whatever the class.
    let full = send(Some(Priority::Critical)).await;
    assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(None).await.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A gRPC call shed gets a trailers-only `UNAVAILABLE` with the push-back, which gRFC A6
/// clients retry after it.
#[tokio::test(start_paused = true)]
async fn a_shed_grpc_call_is_unavailable_with_a_push_back() {
    let bucket = Bucket::builder(Quota::per_minute(10).burst(10))
        .reserve_for_critical(0.5)
        .build();
    for _ in 0..5 {
        bucket.try_acquire(1).unwrap();
    }
    let svc = RejectLayer::new(bucket).layer(service_fn(|_: Request<()>| async {
        Ok::<_, std::convert::Infallible>(Response::new(String::new()))
    }));
    let call = Request::post("/pkg.Service/Method")
        .version(http::Version::HTTP_2)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let res = svc.oneshot(call).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["grpc-status"], "14");
    assert_eq!(res.headers()["grpc-retry-pushback-ms"], "6000");
}
