//! Plans: several quotas decided together, a plan per key, live changes, and the response
//! fields of every quota. Time is paused: every instant is exact.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tokio::time::advance;
use tower::{Service, ServiceExt};
use tower_layer::Layer;
use tower_throttle::extract::{HeaderKey, KeyDigest};
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::reject::Rejected;
use tower_throttle::{Algorithm, Denied, Plan, Quota, RejectLayer};

mod support;
use support::server::{get, ok, send};

const SEC: Duration = Duration::from_secs(1);

/// 2 per second (burst 2) and 5 per minute in fixed windows starting now.
fn two_a_second_five_a_minute() -> Plan {
    Plan::new(Quota::per_second(2))
        .and(Quota::per_minute(5))
        .algorithm(Algorithm::FixedWindow)
}

fn keyed(plan: Plan) -> KeyedBucket<&'static str> {
    KeyedBucket::builder(plan)
        .window_origin(tokio::time::Instant::now())
        .build()
}

fn wait(denied: Denied) -> Duration {
    denied.wait().expect("a wait")
}

#[tokio::test(start_paused = true)]
async fn a_request_refused_by_one_quota_is_charged_to_none() {
    let k = keyed(two_a_second_five_a_minute());
    k.try_acquire(&"a", 2).unwrap();
    // The per-second quota refuses: the minute's window keeps 3 left.
    assert_eq!(wait(k.try_acquire(&"a", 1).unwrap_err()), SEC / 2);
    advance(SEC).await;
    k.try_acquire(&"a", 2).unwrap();
    advance(SEC).await;
    k.try_acquire(&"a", 1).unwrap(); // the minute's fifth
    advance(SEC).await;
    // Now the minute refuses (57 s left) while the per-second quota is full: a refusal
    // by the minute takes nothing from it.
    assert_eq!(wait(k.try_acquire(&"a", 1).unwrap_err()), 57 * SEC);
    assert_eq!(wait(k.try_acquire(&"a", 2).unwrap_err()), 57 * SEC);
    advance(57 * SEC).await;
    k.try_acquire(&"a", 2).unwrap();
    // Keys stay apart.
    k.try_acquire(&"b", 2).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cost_beyond_the_smallest_quota_never_fits() {
    let plan = Plan::new(Quota::per_second(10)).and(Quota::per_minute(3));
    let k = keyed(plan);
    let err = k.try_acquire(&"a", 4).unwrap_err();
    assert!(
        matches!(err, Denied::ExceedsBurst(e) if e.burst() == 3),
        "{err:?}"
    );
    k.try_acquire(&"a", 3).unwrap();
}

/// The API keys and their plans, changed while the server runs.
type Plans = Arc<RwLock<HashMap<&'static str, &'static str>>>;

fn with_plans(plans: &Plans) -> KeyedBucket<&'static str> {
    let plans = Arc::clone(plans);
    KeyedBucket::builder(Quota::per_second(1).burst(2))
        .plan("pro", Quota::per_second(10).burst(20))
        .resolve(move |key| plans.read().unwrap().get(key).copied())
        .build()
}

#[tokio::test(start_paused = true)]
async fn each_key_gets_its_plan() {
    let plans: Plans = Arc::default();
    plans.write().unwrap().insert("paid", "pro");
    let k = with_plans(&plans);
    k.try_acquire(&"paid", 20).unwrap();
    k.try_acquire(&"free", 2).unwrap();
    assert!(k.try_acquire(&"free", 1).is_err());
    assert_eq!(k.snapshot(&"paid").quota, Quota::per_second(10).burst(20));
    assert_eq!(k.snapshot(&"free").quota, Quota::per_second(1).burst(2));
    // A name no plan has: the default plan.
    plans.write().unwrap().insert("typo", "gold");
    k.try_acquire(&"typo", 2).unwrap();
    assert!(k.try_acquire(&"typo", 1).is_err());
}

#[tokio::test(start_paused = true)]
async fn a_raised_plan_gives_its_rate_from_the_next_request_with_no_burst() {
    let plans: Plans = Arc::default();
    let k = with_plans(&plans);
    // Free: the bucket of 2 empty.
    k.try_acquire(&"a", 2).unwrap();
    plans.write().unwrap().insert("a", "pro");
    // Pro now, and nothing comes back at once: the bucket is as empty as it was.
    assert_eq!(wait(k.try_acquire(&"a", 1).unwrap_err()), SEC / 10);
    // Then the new rate: 10 a second.
    advance(SEC).await;
    k.try_acquire(&"a", 10).unwrap();
    assert!(k.try_acquire(&"a", 1).is_err());
    assert_eq!(k.len(), 1, "the key is on one plan only");
}

#[tokio::test(start_paused = true)]
async fn a_lowered_plan_never_admits_more_than_it_allows_from_the_change() {
    let plans: Plans = Arc::default();
    plans.write().unwrap().insert("a", "pro");
    let k = with_plans(&plans);
    k.try_acquire(&"a", 5).unwrap(); // 15 of 20 left
    plans.write().unwrap().insert("a", "free");
    // Free holds at most 2: what is left is not carried beyond that.
    k.try_acquire(&"a", 2).unwrap();
    assert!(k.try_acquire(&"a", 1).is_err());
    // From the change on, at most 2 + 1 per second.
    let mut admitted = 2;
    for _ in 0..100 {
        advance(SEC / 10).await;
        while k.try_acquire(&"a", 1).is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 2 + 10);
}

#[tokio::test(start_paused = true)]
async fn a_lowered_plan_keeps_what_the_key_owes() {
    let plans: Plans = Arc::default();
    plans.write().unwrap().insert("a", "pro");
    let k = with_plans(&plans);
    k.try_acquire(&"a", 20).unwrap(); // empty at 10/s
    plans.write().unwrap().insert("a", "free");
    // Empty at 1/s: the next token a whole second away.
    assert_eq!(wait(k.try_acquire(&"a", 1).unwrap_err()), SEC);
}

#[tokio::test(start_paused = true)]
async fn set_quota_changes_every_key_of_the_default_plan_with_no_burst() {
    let k = keyed(Plan::new(Quota::per_second(2).burst(4)));
    k.try_acquire(&"a", 2).unwrap(); // 2 of 4 held
    k.try_acquire(&"b", 4).unwrap(); // empty
    k.set_quota(Quota::per_second(4).burst(4));
    assert_eq!(k.quota(), Quota::per_second(4).burst(4));
    assert_eq!(k.snapshot(&"a").available, 2, "what was held, no more");
    assert_eq!(wait(k.try_acquire(&"b", 1).unwrap_err()), SEC / 4);
    advance(SEC).await;
    k.try_acquire(&"b", 4).unwrap();
    // Lowered: the tokens held are kept, up to the new burst.
    k.set_quota(Quota::per_second(1).burst(1));
    assert_eq!(k.snapshot(&"a").available, 1);
    assert_eq!(wait(k.try_acquire(&"b", 1).unwrap_err()), SEC);
}

fn header<B>(res: &Response<B>, name: &str) -> String {
    let values: Vec<_> = res
        .headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    values.join(", ")
}

#[tokio::test(start_paused = true)]
async fn the_fields_state_every_quota_and_the_tightest() {
    // As the IETF draft's example: a burst policy and a daily one.
    let plan = Plan::new(Quota::per_minute(100).burst(10))
        .named("burst")
        .and(Quota::per_day(1000))
        .algorithm(Algorithm::FixedWindow)
        .named("daily");
    let k: KeyedBucket<KeyDigest> = KeyedBucket::builder(plan)
        .window_origin(tokio::time::Instant::now())
        .build();
    let mut svc = RejectLayer::keyed(k, HeaderKey::x_api_key())
        .admitted_headers(true)
        .cost(|req: &Request<String>| if req.uri().path() == "/search" { 5 } else { 1 })
        .layer(ok());

    let res = send(&mut svc, get("/", "a")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400"
    );
    // 9 of the burst left, 999 of the day: the burst is the tightest.
    assert_eq!(header(&res, "ratelimit"), "\"burst\";r=9;t=1");

    // A search costs 5 of each.
    let res = send(&mut svc, get("/search", "a")).await;
    assert_eq!(header(&res, "ratelimit"), "\"burst\";r=4;t=1");
    let res = send(&mut svc, get("/search", "a")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let rejected = res.extensions().get::<Rejected>().unwrap();
    assert_eq!(rejected.policy(), Some("burst"));
    assert_eq!(header(&res, "retry-after"), "1");
    assert_eq!(
        header(&res, "ratelimit-policy"),
        "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400"
    );
}

#[tokio::test(start_paused = true)]
async fn the_longest_wait_answers_and_names_its_quota() {
    let plan = Plan::new(Quota::per_second(10))
        .and(Quota::per_minute(3))
        .algorithm(Algorithm::FixedWindow)
        .named("minute");
    let k: KeyedBucket<KeyDigest> = KeyedBucket::builder(plan)
        .window_origin(tokio::time::Instant::now())
        .build();
    let mut svc = RejectLayer::keyed(k, HeaderKey::x_api_key()).layer(ok());
    for _ in 0..3 {
        assert_eq!(send(&mut svc, get("/", "a")).await.status(), StatusCode::OK);
    }
    advance(10 * SEC).await;
    let res = send(&mut svc, get("/", "a")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "50");
    let rejected = res.extensions().get::<Rejected>().unwrap();
    assert_eq!(rejected.policy(), Some("minute"));
    assert_eq!(rejected.quota(), Some(Quota::per_minute(3)));
}

#[tokio::test(start_paused = true)]
async fn waiters_keep_their_order_and_their_turns_across_a_plan_change() {
    let plans: Plans = Arc::default();
    let k = with_plans(&plans);
    let mut svc = RejectLayer::keyed(k.clone(), |req: &Request<String>| {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(|key| if key == "a" { "a" } else { "other" })
    })
    .max_wait(Duration::from_secs(5))
    .layer(ok());
    // Free: 2 at once, then one a second; 4 more wait their turns, booked as they arrive.
    let start = tokio::time::Instant::now();
    let mut calls = Vec::new();
    for _ in 0..6 {
        calls.push(svc.ready().await.unwrap().call(get("/", "a")));
    }
    // The key goes pro: the turns booked stand, a later request comes after them.
    plans.write().unwrap().insert("a", "pro");
    calls.push(svc.ready().await.unwrap().call(get("/", "a")));
    let done =
        futures::future::join_all(calls.into_iter().enumerate().map(|(i, call)| async move {
            let res = call.await.unwrap();
            (i, res.status(), start.elapsed())
        }))
        .await;
    let (_, late_status, late_at) = done[6];
    let done = &done[..6];
    for (i, status, at) in done {
        assert_eq!(*status, StatusCode::OK, "waiter {i}");
        let due = Duration::from_secs(u64::try_from(*i).unwrap().saturating_sub(1));
        assert_eq!(*at, due, "waiter {i} at its booked turn");
    }
    assert_eq!(late_status, StatusCode::OK);
    // Not before the last turn booked (4 s).
    assert_eq!(late_at, Duration::from_secs(4));
}

/// 100 per second and 3 per minute in fixed windows starting now.
fn three_a_minute() -> Plan {
    Plan::new(Quota::per_second(100))
        .and(Quota::per_minute(3))
        .algorithm(Algorithm::FixedWindow)
}

#[tokio::test(start_paused = true)]
async fn a_bucket_of_several_quotas_waits_for_every_one() {
    let bucket = tower_throttle::Bucket::builder(three_a_minute())
        .window_origin(tokio::time::Instant::now())
        .build();
    assert_eq!(bucket.plan(), three_a_minute());
    let start = tokio::time::Instant::now();
    for _ in 0..3 {
        bucket.try_acquire(1).unwrap();
    }
    assert_eq!(wait(bucket.try_acquire(1).unwrap_err()), 60 * SEC);
    // A waiter goes when the minute's window turns, not before.
    bucket.acquire(1).await.unwrap();
    assert_eq!(start.elapsed(), 60 * SEC);
    // A cost above the smallest quota never fits.
    assert!(matches!(
        bucket.try_acquire(4),
        Err(Denied::ExceedsBurst(e)) if e.burst() == 3
    ));
}

#[tokio::test(start_paused = true)]
async fn a_global_ceiling_of_several_quotas_refuses_for_all_keys_and_charges_no_key() {
    let per_key: KeyedBucket<KeyDigest> = KeyedBucket::new(Quota::per_second(10));
    let global = tower_throttle::Bucket::builder(three_a_minute())
        .window_origin(tokio::time::Instant::now())
        .build();
    let mut svc = RejectLayer::keyed(per_key.clone(), HeaderKey::x_api_key())
        .global(global)
        .admitted_headers(true)
        .layer(ok());
    for (key, left) in [("a", 2), ("b", 1), ("c", 0)] {
        let res = send(&mut svc, get("/", key)).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            header(&res, "ratelimit-policy"),
            "\"per-key\";q=10;w=1, \"global-1s\";q=100;w=1, \"global-60s\";q=3;w=60"
        );
        // The tightest quota of the ceiling: the minute's, with fewer left.
        let fields = header(&res, "ratelimit");
        assert!(
            fields.ends_with(&format!("\"global-60s\";r={left};t=60")),
            "{fields}"
        );
    }
    let res = send(&mut svc, get("/", "d")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "60");
    let rejected = res.extensions().get::<Rejected>().unwrap();
    assert_eq!(rejected.policy(), Some("global-60s"));
    // Refused by the ceiling: the key keeps all 10 of its tokens.
    assert_eq!(per_key.snapshot(&KeyDigest::of_bytes(b"d")).available, 10);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_waited_gets_the_fields_of_its_plan() {
    let pro: KeyDigest = KeyDigest::of_bytes(b"pro-key");
    let k: KeyedBucket<KeyDigest> = KeyedBucket::builder(Quota::per_second(1))
        .plan("pro", Plan::new(Quota::per_second(2)).named("pro"))
        .resolve(move |key: &KeyDigest| (*key == pro).then_some("pro"))
        .build();
    let mut svc = RejectLayer::keyed(k, HeaderKey::x_api_key())
        .max_wait(Duration::from_secs(1))
        .admitted_headers(true)
        .layer(ok());
    let res = send(&mut svc, get("/", "pro-key")).await;
    assert_eq!(header(&res, "ratelimit-policy"), "\"pro\";q=2;w=1");
    send(&mut svc, get("/", "pro-key")).await;
    // The third waits half a second for its turn, and is told of its own plan.
    let start = tokio::time::Instant::now();
    let res = send(&mut svc, get("/", "pro-key")).await;
    assert_eq!(start.elapsed(), SEC / 2);
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(header(&res, "ratelimit-policy"), "\"pro\";q=2;w=1");
    assert_eq!(header(&res, "ratelimit"), "\"pro\";r=0;t=1");
}
