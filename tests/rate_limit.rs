//! `RateLimitLayer` / `RateLimit`: the tower contract and sharing through clones.

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use support::{assert_rate_bound, settle, Recorder};
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready_ok};
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_test::mock;
use tower_throttle::{Algorithm, Bucket, Quota, RateLimit, RateLimitLayer};

type Echo = tower::util::ServiceFn<fn(u32) -> std::future::Ready<Result<u32, Infallible>>>;

fn echo() -> Echo {
    service_fn(|n: u32| std::future::ready(Ok(n)))
}

#[tokio::test(start_paused = true)]
async fn semantic_2_shared_layer_and_clones_use_one_bucket() {
    let bucket = Bucket::new(Quota::per_second(4).burst(4));
    let layer = RateLimitLayer::new(bucket.clone());
    // One layer applied to two services, and a clone of each: all four share the bucket.
    let a = layer.layer(echo());
    let b = layer.clone().layer(echo());
    let mut svcs = vec![a.clone(), a, b.clone(), b];
    for s in &mut svcs {
        assert!(s.limit().bucket().unwrap().same_bucket(&bucket));
        s.ready().await.unwrap().call(1).await.unwrap();
    }
    assert_eq!(bucket.snapshot().available, 0);
    let mut fifth = svcs[0].clone();
    let start = Instant::now();
    fifth.ready().await.unwrap().call(1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn semantic_1_rate_invariant_1000_tasks_through_service_clones() {
    let quota = Quota::per_second(200).burst(20);
    let bucket = Bucket::new(quota);
    let rec = Recorder::new();
    let inner = {
        let rec = rec.clone();
        service_fn(move |id: usize| {
            rec.record(1, id);
            async { Ok::<_, Infallible>(()) }
        })
    };
    let svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(bucket))
        .service(inner);
    let mut tasks = Vec::new();
    for id in 0..1000 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move { svc.oneshot(id).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let adm = rec.admissions();
    assert_eq!(adm.len(), 1000);
    assert_rate_bound(&adm, quota);
    assert_eq!(
        adm.iter().map(|a| a.0).max().unwrap(),
        Duration::from_millis(4_900)
    );
}

#[tokio::test(start_paused = true)]
async fn semantic_7_ready_means_the_next_call_is_admitted() {
    let bucket = Bucket::new(Quota::per_second(1).burst(1));
    let (mut svc, mut handle) = mock::spawn_with(|s| RateLimit::new(s, bucket.clone()));
    assert_ready_ok!(svc.poll_ready());
    // The token is reserved by poll_ready: nobody else can take it before call.
    assert!(bucket.try_acquire(1).is_err());
    let resp = svc.call("hello");
    let (req, send) = handle.next_request().await.unwrap();
    assert_eq!(req, "hello");
    send.send_response("world");
    assert_eq!(resp.await.unwrap(), "world");
    // The next one waits a full interval.
    assert_pending!(svc.poll_ready());
    advance(Duration::from_millis(999)).await;
    assert_pending!(svc.poll_ready());
    advance(Duration::from_millis(1)).await;
    assert_ready_ok!(svc.poll_ready());
}

#[tokio::test]
#[should_panic(expected = "poll_ready must be called first")]
async fn semantic_7_call_without_poll_ready_panics() {
    let mut svc = RateLimit::new(echo(), Bucket::new(Quota::per_second(10)));
    drop(svc.call(1));
}

#[tokio::test(start_paused = true)]
async fn semantic_7_call_twice_after_one_poll_ready_panics() {
    let mut svc = RateLimit::new(echo(), Bucket::new(Quota::per_second(10)));
    svc.ready().await.unwrap();
    drop(svc.call(1));
    let second = std::panic::AssertUnwindSafe(async { svc.call(2).await })
        .catch_unwind()
        .await;
    assert!(second.is_err(), "a second call rode on one reservation");
}

#[tokio::test(start_paused = true)]
async fn reservation_dropped_without_call_is_given_back() {
    let bucket = Bucket::new(Quota::per_second(1).burst(1));
    let mut svc = RateLimit::new(echo(), bucket.clone());
    svc.ready().await.unwrap();
    assert_eq!(bucket.snapshot().available, 0);
    drop(svc);
    assert_eq!(bucket.snapshot().available, 1);
    bucket.try_acquire(1).unwrap();
    // A clone does not inherit the reservation.
    let mut svc = RateLimit::new(echo(), Bucket::new(Quota::per_second(1).burst(1)));
    svc.ready().await.unwrap();
    let clone = svc.clone();
    drop(clone);
    assert_eq!(svc.limit().bucket().unwrap().snapshot().available, 0);
    svc.call(7).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn inner_not_ready_takes_no_token() {
    let bucket = Bucket::new(Quota::per_second(1).burst(1));
    let (mut svc, mut handle) =
        mock::spawn_with::<(), (), _, _>(|s| RateLimit::new(s, bucket.clone()));
    handle.allow(0);
    assert_pending!(svc.poll_ready());
    assert_eq!(bucket.snapshot().available, 1);
    handle.allow(1);
    assert_ready_ok!(svc.poll_ready());
    assert_eq!(bucket.snapshot().available, 0);
}

#[tokio::test(start_paused = true)]
async fn waiting_service_dropped_gives_its_place_back() {
    let bucket = Bucket::new(Quota::per_second(10).burst(1));
    bucket.try_acquire(1).unwrap();
    let mut first = RateLimit::new(echo(), bucket.clone());
    let mut second = RateLimit::new(echo(), bucket.clone());
    let mut f1 = tokio_test::task::spawn(first.ready());
    assert!(f1.poll().is_pending());
    drop(f1);
    drop(first); // queued for 100 ms, gone at 0 ms
    let start = Instant::now();
    second.ready().await.unwrap().call(1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_full_leaky_bucket_line_fails_the_call_at_once() {
    let bucket = Bucket::builder(Quota::per_second(10))
        .algorithm(Algorithm::leaky_bucket(2))
        .build();
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = {
        let calls = calls.clone();
        service_fn(move |n: u32| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok::<_, Infallible>(n))
        })
    };
    let layer = RateLimitLayer::new(bucket.clone());
    let mut svcs: Vec<_> = (0..4).map(|_| layer.layer(inner.clone())).collect();
    let mut polls: Vec<_> = svcs
        .iter_mut()
        .map(|s| tokio_test::task::spawn(futures::future::poll_fn(move |cx| s.poll_ready(cx))))
        .collect();
    assert_ready_ok!(polls[0].poll()); // admitted now
    assert_pending!(polls[1].poll()); // waits 100 ms
    assert_pending!(polls[2].poll()); // waits 200 ms: the line is full
    assert_ready_ok!(polls[3].poll()); // ready, to fail its call
    drop(polls);
    let err = svcs[3].call(3).await.unwrap_err();
    assert!(
        matches!(
            err.downcast_ref::<tower_throttle::Denied>(),
            Some(tower_throttle::Denied::QueueFull(q)) if q.max_queue() == 2
        ),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The waiting ones keep their places; a later caller waits again once there is room.
    let start = Instant::now();
    svcs[0].call(0).await.unwrap();
    svcs[1].ready().await.unwrap().call(1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    let mut third = tokio_test::task::spawn(svcs[3].ready());
    assert_pending!(third.poll());
    drop(third);
    svcs[2].ready().await.unwrap().call(2).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    svcs[3].ready().await.unwrap().call(3).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn per_request_cost_is_charged_before_sending() {
    let quota = Quota::per_second(10).burst(5);
    let bucket = Bucket::new(quota);
    let rec = Recorder::new();
    let inner = {
        let rec = rec.clone();
        service_fn(move |size: u32| {
            rec.record(size, 0);
            async { Ok::<_, Infallible>(()) }
        })
    };
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(bucket.clone()).cost(|size: &u32| *size))
        .service(inner);
    for size in [5, 3, 0, 4] {
        svc.ready().await.unwrap().call(size).await.unwrap();
    }
    let e = rec.admissions();
    assert_eq!(
        e.iter().map(|x| x.0).collect::<Vec<_>>(),
        [0, 300, 400, 700].map(Duration::from_millis)
    );
    assert_rate_bound(&e, quota);
    // More than the burst can never fit: an error, and the inner service is not called.
    let err = svc.ready().await.unwrap().call(6).await.unwrap_err();
    assert!(
        matches!(
            err.downcast_ref::<tower_throttle::Denied>(),
            Some(tower_throttle::Denied::ExceedsBurst(_))
        ),
        "{err}"
    );
    assert_eq!(rec.admissions().len(), 4);
    settle().await;
}

#[tokio::test(start_paused = true)]
async fn a_cost_left_above_a_shrunk_burst_fails_without_calling_the_service() {
    let calls = Arc::new(AtomicUsize::new(0));
    let bucket = Bucket::new(Quota::per_second(10).burst(5));
    let counted = calls.clone();
    let mut svc = RateLimitLayer::new(bucket.clone())
        .cost(|size: &u32| *size)
        .layer(service_fn(move |_: u32| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(()) }
        }));
    bucket.try_acquire(5).unwrap(); // empty: the first token is due in 100 ms
    let mut call = Box::pin(async { svc.ready().await.unwrap().call(4).await });
    assert!(futures::poll!(call.as_mut()).is_pending());
    advance(Duration::from_millis(150)).await; // the first token is spent; 3 more wait
    assert!(futures::poll!(call.as_mut()).is_pending());
    bucket.set_quota(Quota::per_second(10).burst(2)); // 3 can never fit any more
    let err = call.await.unwrap_err();
    assert!(
        matches!(
            err.downcast_ref::<tower_throttle::Denied>(),
            Some(tower_throttle::Denied::ExceedsBurst(_))
        ),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// An outer middleware's error that wraps the rate limit's.
#[derive(Debug)]
struct Outer(tower_throttle::BoxError);

impl std::fmt::Display for Outer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad("outer middleware failed")
    }
}

impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

#[tokio::test(start_paused = true)]
async fn denied_is_found_in_the_layer_error_and_through_wrappers() {
    use tower_throttle::Denied;

    let mut svc = RateLimitLayer::new(Bucket::new(Quota::per_second(10).burst(5)))
        .cost(|size: &u32| *size)
        .layer(service_fn(|_: u32| async { Ok::<_, Infallible>(()) }));
    let err = svc.ready().await.unwrap().call(6).await.unwrap_err();
    let never = Denied::find(&*err).and_then(Denied::exceeds_burst).unwrap();
    assert_eq!((never.requested(), never.burst()), (6, 5));

    let wrapped = Outer(err);
    let found = Denied::find(&wrapped).unwrap();
    assert_eq!(found.exceeds_burst().unwrap().requested(), 6);

    // An error without a `Denied` in its chain has none.
    let other: tower_throttle::BoxError = "connection reset".into();
    assert!(Denied::find(&*other).is_none());
    assert!(Denied::find(&Outer(other)).is_none());
}
