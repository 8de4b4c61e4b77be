//! Requests in flight on a real Redis (`Plan::in_flight`): replicas behind the rejecting
//! layer and client handles sharing one key never hold more than N at once; a slot comes
//! back when its request ends, and one whose holder vanished after the lease, never before.
//!
//! Releases go to Redis in a task of their own: the tests wait for the effect, with a
//! deadline, not for a time. The lease bound is checked against instants taken before the
//! admissions, so it holds however late the tasks run.
#![cfg(feature = "redis")]

mod redis_support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use redis_support::{redis_url, unique_prefix};
use tokio::time::Instant;
use tower::{service_fn, ServiceExt};
use tower_layer::Layer;
use tower_throttle::extract::HeaderKey;
use tower_throttle::redis::{RedisBucket, RedisKeyed};
use tower_throttle::{Denied, Plan, Quota, RejectLayer};

/// At most `n` in flight, a slot lasting `lease` at most.
fn in_flight(n: u32, lease: Duration) -> Plan {
    Plan::new(Quota::new(n, lease)).in_flight()
}

fn keyed(key: &str) -> Request<String> {
    Request::builder()
        .header("x-api-key", key)
        .body(String::new())
        .unwrap()
}

#[tokio::test]
async fn replicas_share_the_slots_of_a_key_until_the_bodies_end() {
    let prefix = unique_prefix("in-flight-keyed");
    let replica = || async {
        let limit = RedisKeyed::builder(in_flight(2, Duration::from_secs(3600)))
            .url(redis_url())
            .key_prefix(&prefix)
            .build()
            .await
            .unwrap();
        RejectLayer::keyed(limit, HeaderKey::x_api_key()).layer(service_fn(
            |_: Request<String>| async { Ok::<_, Infallible>(Response::new(String::from("ok"))) },
        ))
    };
    let (a, b) = (replica().await, replica().await);
    let first = a.clone().oneshot(keyed("k")).await.unwrap();
    let second = b.clone().oneshot(keyed("k")).await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let refused = b.clone().oneshot(keyed("k")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        a.clone().oneshot(keyed("other")).await.unwrap().status(),
        200
    );
    // The first response, body and all, is done: its slot comes back for every replica.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(20);
    let admitted = loop {
        let res = b.clone().oneshot(keyed("k")).await.unwrap();
        if res.status() == StatusCode::OK {
            break res;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // Two held again (the second, and the one just admitted): full.
    assert_eq!(a.clone().oneshot(keyed("k")).await.unwrap().status(), 429);
    drop((second, admitted));
}

#[tokio::test]
async fn client_handles_on_one_key_never_hold_more_than_n() {
    let prefix = unique_prefix("in-flight-clients");
    let handle = || async {
        RedisBucket::builder(in_flight(3, Duration::from_secs(3600)))
            .url(redis_url())
            .key_prefix(&prefix)
            .key("api")
            .build()
            .await
            .unwrap()
    };
    let handles = [handle().await, handle().await];
    let (now, peak, done) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let tasks: Vec<_> = (0..24u64)
        .map(|i| {
            let bucket = handles[(i % 2) as usize].clone();
            let (now, peak, done) = (now.clone(), peak.clone(), done.clone());
            tokio::spawn(async move {
                let charge = bucket.charge(1).await.unwrap();
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5 + (i * 7) % 20)).await;
                // Counted out before it is given back: the count here never runs behind.
                now.fetch_sub(1, Ordering::SeqCst);
                match i % 2 {
                    0 => drop(charge),
                    _ => assert!(charge.settle(1)),
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    let within = tokio::time::timeout(Duration::from_secs(60), all).await;
    assert!(within.is_ok(), "waiters never got the slots given back");
    assert_eq!(done.load(Ordering::SeqCst), 24);
    let peak = peak.load(Ordering::SeqCst);
    assert!((1..=3).contains(&peak), "{peak} in flight at once");
}

/// A process that vanishes holding slots (its charges never dropped) gives them back after
/// the lease: another handle is refused until then, and admitted from then on.
#[tokio::test]
async fn a_vanished_holders_slots_come_back_after_the_lease_never_before() {
    let prefix = unique_prefix("in-flight-lease");
    let lease = Duration::from_secs(1);
    let handle = || async {
        RedisBucket::builder(in_flight(2, lease))
            .url(redis_url())
            .key_prefix(&prefix)
            .key("api")
            .build()
            .await
            .unwrap()
    };
    let (gone, other) = (handle().await, handle().await);
    let before = Instant::now();
    for _ in 0..2 {
        std::mem::forget(gone.try_charge(1).await.unwrap());
    }
    drop(gone);
    let refused = other.try_charge(1).await.unwrap_err();
    assert!(matches!(refused, Denied::Throttled(_)), "{refused:?}");
    let admitted = loop {
        let asked = Instant::now();
        match other.try_charge(1).await {
            Ok(charge) => break (asked, Instant::now(), charge),
            Err(Denied::Throttled(_)) => {
                assert!(asked - before < Duration::from_secs(20), "never came back");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    // Admitted only once the lease of the first admission (made after `before`) ended.
    assert!(
        admitted.1 - before >= lease,
        "{:?} after",
        admitted.1 - before
    );
    drop(admitted);
}

/// A `RedisBucket` as the rejecting layer's single limit holds each request's slot until
/// its response goes, for every replica.
#[tokio::test]
async fn a_redis_single_limit_holds_slots_until_the_responses_go() {
    let prefix = unique_prefix("in-flight-single");
    let replica = || async {
        let limit = RedisBucket::builder(in_flight(1, Duration::from_secs(3600)))
            .url(redis_url())
            .key_prefix(&prefix)
            .key("api")
            .build()
            .await
            .unwrap();
        RejectLayer::new(limit).layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }))
    };
    let (a, b) = (replica().await, replica().await);
    let held = a
        .clone()
        .oneshot(Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let refused = b
        .clone()
        .oneshot(Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let res = b
            .clone()
            .oneshot(Request::new(String::new()))
            .await
            .unwrap();
        if res.status() == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
