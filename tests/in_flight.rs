//! Requests in flight (`Plan::in_flight`): at most N per key between admission and the end
//! of the response body, in process; a slot comes back when the body ends or is dropped,
//! when the request fails or is cancelled, and after its lease at the latest; decided with
//! the rate quotas, refused by either and charged to neither. On tokio's paused clock.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::{service_fn, BoxError, Service, ServiceExt};
use tower_layer::Layer;
use tower_throttle::extract::HeaderKey;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Bucket, Cost, Plan, Quota, RateLimitLayer, RejectLayer};

const LEASE: Duration = Duration::from_secs(30);

/// At most `n` in flight, a slot lasting `LEASE` at most.
fn in_flight(n: u32) -> Plan {
    Plan::new(Quota::new(n, LEASE)).in_flight()
}

type Body = axum::body::Body;
type Ends = Arc<Mutex<Vec<oneshot::Sender<Result<(), ()>>>>>;

/// A server whose answers stream until the test ends them (in arrival order): each body
/// sends one frame when told to, then ends (or fails, told `Err`). A request with
/// `x-fail` fails at once.
fn streaming() -> (
    impl Service<Request<()>, Response = Response<Body>, Error = BoxError> + Clone,
    Ends,
) {
    let ends: Ends = Arc::default();
    let svc = service_fn({
        let ends = ends.clone();
        move |req: Request<()>| {
            let (tx, rx) = oneshot::channel::<Result<(), ()>>();
            ends.lock().unwrap().push(tx);
            let fail = req.headers().contains_key("x-fail");
            async move {
                if fail {
                    return Err::<Response<Body>, BoxError>("failed".into());
                }
                let chunk = futures::stream::once(async move {
                    match rx.await {
                        Ok(Ok(())) => Ok(Bytes::from_static(b"done")),
                        _ => Err::<_, BoxError>("stream broke".into()),
                    }
                });
                Ok(Response::new(Body::from_stream(chunk)))
            }
        }
    });
    (svc, ends)
}

fn keyed(key: &str) -> Request<()> {
    Request::builder()
        .header("x-api-key", key)
        .body(())
        .unwrap()
}

fn end(ends: &Ends, i: usize, ok: bool) {
    let tx = std::mem::replace(&mut ends.lock().unwrap()[i], oneshot::channel().0);
    let _ = tx.send(if ok { Ok(()) } else { Err(()) });
}

#[tokio::test(start_paused = true)]
async fn a_key_has_at_most_n_requests_until_their_bodies_end() {
    let (api, ends) = streaming();
    let limit = KeyedBucket::new(in_flight(2));
    let svc = RejectLayer::keyed(limit, HeaderKey::x_api_key()).layer(api);
    let first = svc.clone().oneshot(keyed("a")).await.unwrap();
    let second = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let third = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(third.headers().contains_key("retry-after"));
    assert!(third.headers().contains_key("ratelimit-policy"));
    // Another key has slots of its own.
    let other = svc.clone().oneshot(keyed("b")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    // The answer is back, its body still streaming: the slot is still held.
    let status = |r: Response<_>| r.status();
    assert_eq!(status(svc.clone().oneshot(keyed("a")).await.unwrap()), 429);
    // The first body read to its end gives its slot back.
    end(&ends, 0, true);
    assert_eq!(
        first.into_body().collect().await.unwrap().to_bytes(),
        "done"
    );
    let fourth = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(fourth.status(), StatusCode::OK);
    assert_eq!(status(svc.clone().oneshot(keyed("a")).await.unwrap()), 429);
    // A body dropped unread gives its slot back.
    drop(second);
    let fifth = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(fifth.status(), StatusCode::OK);
    // So does a body that fails.
    end(&ends, 3, false); // the fourth's body breaks
    assert!(fourth.into_body().collect().await.is_err());
    let sixth = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(sixth.status(), StatusCode::OK);
    assert_eq!(status(svc.clone().oneshot(keyed("a")).await.unwrap()), 429);
    drop((fifth, sixth));
    assert_eq!(status(svc.clone().oneshot(keyed("a")).await.unwrap()), 200);
}

#[tokio::test(start_paused = true)]
async fn a_failed_or_cancelled_request_gives_its_slot_back() {
    let (api, _ends) = streaming();
    let svc = RejectLayer::keyed(KeyedBucket::new(in_flight(1)), HeaderKey::x_api_key()).layer(api);
    let mut failing = keyed("a");
    failing.headers_mut().insert("x-fail", "1".parse().unwrap());
    assert!(svc.clone().oneshot(failing).await.is_err());
    // The inner service never answers this one: the caller gives up.
    let slow =
        service_fn(|_: Request<()>| std::future::pending::<Result<Response<Body>, BoxError>>());
    let stuck =
        RejectLayer::keyed(KeyedBucket::new(in_flight(1)), HeaderKey::x_api_key()).layer(slow);
    let gave_up = tokio::time::timeout(Duration::from_secs(1), stuck.clone().oneshot(keyed("a")));
    assert!(gave_up.await.is_err());
    let mut again = Box::pin(stuck.clone().oneshot(keyed("a")));
    // Admitted (it reaches the inner service, which never answers), not refused.
    assert!(futures::poll!(again.as_mut()).is_pending());
    let res = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

/// Stacked on a rate quota: one decision, refused by either, charged to neither.
#[tokio::test(start_paused = true)]
async fn in_flight_and_rate_refuse_together_and_charge_nothing() {
    let (api, ends) = streaming();
    let plan = Plan::new(Quota::per_minute(2))
        .and(Quota::new(1, LEASE))
        .in_flight();
    let svc = RejectLayer::keyed(KeyedBucket::new(plan), HeaderKey::x_api_key()).layer(api);
    let status = |r: Response<_>| r.status();
    let first = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(first.status(), 200);
    // Refused in flight: no request of the rate counted.
    assert_eq!(status(svc.clone().oneshot(keyed("a")).await.unwrap()), 429);
    end(&ends, 0, true);
    first.into_body().collect().await.unwrap();
    let second = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(second.status(), 200, "the refused request cost no rate");
    end(&ends, 1, true);
    second.into_body().collect().await.unwrap();
    // Refused by the rate (2 a minute): no slot taken.
    assert_eq!(status(svc.clone().oneshot(keyed("a")).await.unwrap()), 429);
    tokio::time::advance(Duration::from_secs(30)).await;
    let third = svc.clone().oneshot(keyed("a")).await.unwrap();
    assert_eq!(
        third.status(),
        200,
        "the request refused by the rate held no slot"
    );
}

/// Many tasks on one client bucket: exactly N in flight at the peak, never more.
#[tokio::test(start_paused = true)]
async fn many_tasks_never_exceed_n_in_flight() {
    let bucket = Bucket::new(in_flight(3));
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tasks: Vec<_> = (0..40u64)
        .map(|i| {
            let (bucket, now, peak) = (bucket.clone(), now.clone(), peak.clone());
            tokio::spawn(async move {
                let charge = bucket.charge(1).await.unwrap();
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10 + (i * 37) % 90)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                match i % 3 {
                    0 => drop(charge),
                    1 => assert!(charge.settle(1)),
                    _ => assert!(charge.refund()),
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), 3);
}

/// A waiter for a slot is served when one comes back, first come, first served; one that
/// gives up takes nothing; a slot never given back returns after its lease, not before.
#[tokio::test(start_paused = true)]
async fn a_full_limit_waits_for_a_slot_and_a_lost_one_returns_after_its_lease() {
    let bucket = Bucket::new(in_flight(1));
    let start = Instant::now();
    let held = bucket.charge(1).await.unwrap();
    let gave_up = tokio::time::timeout(Duration::from_secs(1), bucket.charge(1)).await;
    assert!(gave_up.is_err());
    let waiter = tokio::spawn({
        let bucket = bucket.clone();
        async move {
            let _c = bucket.charge(1).await.unwrap();
            start.elapsed()
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(held);
    assert_eq!(
        waiter.await.unwrap(),
        Duration::from_secs(3),
        "at once when it came back"
    );
    // Lost (never dropped): the slot returns when its lease ends.
    let lost = bucket.charge(1).await.unwrap();
    let taken = start.elapsed();
    std::mem::forget(lost);
    let next = bucket.charge(1).await.unwrap();
    assert_eq!(start.elapsed() - taken, LEASE);
    drop(next);
}

/// On the client, the charge a layer leaves in the response holds the slot until it is
/// settled or dropped with the response.
#[tokio::test(start_paused = true)]
async fn the_client_layer_holds_the_slot_until_the_charge_goes() {
    let bucket = Bucket::new(
        Plan::new(Quota::per_second(100))
            .and(Quota::new(1, LEASE))
            .in_flight(),
    );
    let api = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let client = RateLimitLayer::new(bucket.clone())
        .charge(|_: &Request<()>| Cost::new())
        .layer(api);
    let first = client.clone().oneshot(Request::new(())).await.unwrap();
    let second = tokio::spawn(client.clone().oneshot(Request::new(())));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!second.is_finished(), "the first still holds the slot");
    let charge = first
        .extensions()
        .get::<tower_throttle::Charge>()
        .unwrap()
        .clone();
    drop(first);
    assert!(
        !second.is_finished(),
        "a clone of the charge still holds it"
    );
    assert!(charge.settle(1));
    second.await.unwrap().unwrap();
}

/// A single limit (or a global ceiling) counts in flight too.
#[tokio::test(start_paused = true)]
async fn a_single_limit_counts_requests_in_flight() {
    let (api, ends) = streaming();
    let svc = RejectLayer::new(Bucket::new(in_flight(1))).layer(api);
    let first = svc.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let refused = svc.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    end(&ends, 0, true);
    assert_eq!(
        first.into_body().collect().await.unwrap().to_bytes(),
        "done"
    );
    let next = svc.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(next.status(), StatusCode::OK);
}

/// A flood of distinct keys, each holding a request that never ends: the table stays within
/// its cap, every request is decided, and nothing panics; the slots come back as the
/// responses go.
#[tokio::test(start_paused = true)]
async fn a_flood_of_keys_holding_requests_stays_within_the_key_cap() {
    let (api, _ends) = streaming();
    let limit = KeyedBucket::builder(in_flight(1))
        .max_keys(64)
        .shards(1)
        .build();
    let svc = RejectLayer::keyed(limit.clone(), HeaderKey::x_api_key()).layer(api);
    let mut held = Vec::new();
    for i in 0..2_000 {
        let res = svc
            .clone()
            .oneshot(keyed(&format!("key-{i}")))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "a fresh key has its slot");
        held.push(res);
        assert!(limit.len() <= 64, "{} keys tracked", limit.len());
    }
    drop(held);
    assert!(limit.len() <= 64);
    let res = svc.clone().oneshot(keyed("key-1999")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}
