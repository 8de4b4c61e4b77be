//! Plans on a real Redis: several quotas decided as one (a refusal by one charges none), a
//! plan per key and live changes of it (no burst, nothing lost), `set_quota` on every key,
//! a Redis global ceiling of several quotas, and the rejecting layer's fields for them.
//!
//! The quotas are slow (a token every several seconds) and windows have no phase (the
//! sliding log): nothing here depends on where the Redis clock's second or window falls,
//! and a test that runs long only finds a little more refilled, which the bounds allow.
#![cfg(feature = "redis")]

mod redis_support;
mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::{Response, StatusCode};
use redis::AsyncCommands;
use redis_support::{raw, redis_url, unique_prefix};
use support::server::{get, ok, send};
use tower_layer::Layer;
use tower_throttle::extract::HeaderKey;
use tower_throttle::extract::{KeyDigest, StableKey};
use tower_throttle::redis::{RedisBucket, RedisKeyed};
use tower_throttle::reject::Rejected;
use tower_throttle::{Algorithm, Denied, Plan, Quota, RejectLayer};

/// A token every 30 s, two at once.
fn slow(burst: u32) -> Quota {
    Quota::new(burst, Duration::from_secs(30 * u64::from(burst))).burst(burst)
}

/// `first`, and `count` per hour, exact (the sliding log).
fn and_hourly(first: Quota, count: u32) -> Plan {
    Plan::new(first)
        .and(Quota::new(count, Duration::from_secs(3600)))
        .algorithm(Algorithm::SlidingLog)
}

fn wait_of(result: Result<(), Denied>) -> Duration {
    match result {
        Err(Denied::Throttled(t)) => t.wait(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// What a plan of two quotas, the second a sliding log, stores at `key`: its state and the
/// log's entries.
async fn states(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> (String, Vec<String>) {
    let state: String = conn.get(key).await.unwrap();
    let entries: Vec<String> = conn.zrange(format!("{key}:q2:log"), 0, -1).await.unwrap();
    (state, entries)
}

async fn keyed(prefix: &str, plan: impl Into<Plan>) -> RedisKeyed {
    RedisKeyed::builder(plan)
        .url(redis_url())
        .key_prefix(prefix)
        .build()
        .await
        .expect("connects")
}

#[tokio::test]
async fn a_refusal_by_one_quota_charges_none() {
    let mut conn = raw(&redis_url()).await;
    // Two at once then one per 30 s, and three per hour.
    let limit = keyed(&unique_prefix("plan-atomic"), and_hourly(slow(2), 3)).await;

    // The per-second quota refuses: the hourly one is not charged.
    limit.try_acquire("a", 2).await.unwrap();
    let before = states(&mut conn, &limit.redis_key("a")).await;
    let wait = wait_of(limit.try_acquire("a", 1).await);
    assert!(wait > Duration::from_secs(20), "{wait:?}");
    assert_eq!(states(&mut conn, &limit.redis_key("a")).await, before);

    // The hourly quota refuses: the first is not charged.
    let fast = Quota::new(10, Duration::from_secs(1)).burst(10);
    let limit_b = keyed(&unique_prefix("plan-atomic-b"), and_hourly(fast, 3)).await;
    limit_b.try_acquire("b", 3).await.unwrap();
    let before = states(&mut conn, &limit_b.redis_key("b")).await;
    let wait = wait_of(limit_b.try_acquire("b", 1).await);
    assert!(
        wait > Duration::from_secs(3000),
        "{wait:?}: the hourly quota refuses"
    );
    assert_eq!(states(&mut conn, &limit_b.redis_key("b")).await, before);

    // A cost above the smallest quota never fits.
    assert!(matches!(
        limit_b.try_acquire("c", 4).await,
        Err(Denied::ExceedsBurst(_))
    ));
}

/// A keyed limit with a free plan (the default) and a pro one, and the digests on pro.
async fn tiered(
    prefix: &str,
    free: Quota,
    pro: Quota,
) -> (RedisKeyed, Arc<RwLock<HashSet<KeyDigest>>>) {
    let on_pro = Arc::new(RwLock::new(HashSet::new()));
    let read = Arc::clone(&on_pro);
    let limit = RedisKeyed::builder(and_hourly(free, 100))
        .plan("pro", and_hourly(pro, 1000))
        .resolve(move |id| read.read().unwrap().contains(id).then_some("pro"))
        .url(redis_url())
        .key_prefix(prefix)
        .build()
        .await
        .expect("connects");
    (limit, on_pro)
}

#[tokio::test]
async fn each_key_has_its_plan_and_a_change_carries_its_state() {
    // Free: two at once, then one per 30 s. Pro: six at once, then one per 5 s.
    let pro = Quota::new(6, Duration::from_secs(30)).burst(6);
    let (limit, on_pro) = tiered(&unique_prefix("plan-tiers"), slow(2), pro).await;
    on_pro.write().unwrap().insert("p".key_digest());
    assert_eq!(limit.plan_of("p").quota(), pro);
    assert_eq!(limit.plan_of("f").quota(), slow(2));

    // Each key on its own plan.
    limit.try_acquire("p", 6).await.unwrap();
    wait_of(limit.try_acquire("p", 1).await);
    limit.try_acquire("f", 2).await.unwrap();
    wait_of(limit.try_acquire("f", 1).await);
    // A key on the default plan as built keeps no marker in its state; one on another plan
    // says which parameters wrote it.
    let mut conn = raw(&redis_url()).await;
    let f: String = conn.get(limit.redis_key("f")).await.unwrap();
    let p: String = conn.get(limit.redis_key("p")).await.unwrap();
    assert!(!f.contains('#'), "{f}");
    assert!(p.starts_with("T:"), "{p}");

    // Raised to pro with nothing left: no burst; the new rate from now (a token within 5 s,
    // not 30).
    on_pro.write().unwrap().insert("f".key_digest());
    let wait = wait_of(limit.try_acquire("f", 1).await);
    assert!(
        wait <= Duration::from_secs(5),
        "{wait:?}: the raised rate applies"
    );

    // Lowered to free with five of pro's six left: it keeps at most two (free's burst).
    on_pro.write().unwrap().insert("l".key_digest());
    limit.try_acquire("l", 1).await.unwrap();
    on_pro.write().unwrap().remove(&"l".key_digest());
    let mut admitted = 0;
    let wait = loop {
        match limit.try_acquire("l", 1).await {
            Ok(()) => admitted += 1,
            refused => break wait_of(refused),
        }
    };
    assert!(
        (1..=2).contains(&admitted),
        "{admitted} admitted after the change"
    );
    assert!(wait <= Duration::from_secs(30), "{wait:?}: free's rate");
}

#[tokio::test]
async fn set_quota_changes_every_key_of_the_default_plan_with_no_burst() {
    let limit = keyed(&unique_prefix("plan-set-quota"), and_hourly(slow(2), 100)).await;
    limit.try_acquire("a", 2).await.unwrap();
    wait_of(limit.try_acquire("a", 1).await);
    let raised = Quota::new(6, Duration::from_secs(30)).burst(6);
    limit.set_quota(raised);
    assert_eq!(limit.quota(), raised);
    // Nothing left before: nothing at once now, and the new rate's next token.
    let wait = wait_of(limit.try_acquire("a", 1).await);
    assert!(wait <= Duration::from_secs(5), "{wait:?}");
    // A key never seen has the new burst.
    limit.try_acquire("b", 6).await.unwrap();
    // Lowered again: "b" had nothing left, so nothing now either, at the slow rate.
    limit.set_quota(slow(2));
    let wait = wait_of(limit.try_acquire("b", 1).await);
    assert!(wait > Duration::from_secs(20), "{wait:?}");
}

#[tokio::test]
async fn a_redis_bucket_of_several_quotas_waits_for_every_one() {
    let plan = and_hourly(Quota::new(10, Duration::from_secs(1)).burst(10), 4);
    let bucket = RedisBucket::builder(plan.clone())
        .url(redis_url())
        .key_prefix(unique_prefix("plan-bucket"))
        .key("ceiling")
        .build()
        .await
        .expect("connects");
    assert_eq!(bucket.plan(), plan);
    bucket.try_acquire(3).await.unwrap();
    bucket.acquire(1).await.unwrap();
    let wait = wait_of(bucket.try_acquire(1).await);
    assert!(
        wait > Duration::from_secs(3000),
        "{wait:?}: the hourly quota refuses"
    );
    // A lease needs one quota.
    let leased = RedisBucket::builder(plan)
        .url(redis_url())
        .key_prefix(unique_prefix("plan-lease"))
        .key("ceiling")
        .lease(2)
        .build()
        .await;
    assert!(leased.is_err());
}

fn header<B>(res: &Response<B>, name: &str) -> String {
    res.headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test]
async fn the_rejecting_layer_states_the_plan_of_each_key_and_names_the_quota_that_refused() {
    let free = Plan::new(slow(2))
        .named("burst")
        .and(Quota::new(3, Duration::from_secs(3600)))
        .algorithm(Algorithm::SlidingLog)
        .named("hourly");
    let pro = Plan::new(Quota::new(20, Duration::from_secs(3600)).burst(20)).named("pro");
    let pro_key = KeyDigest::of_bytes(b"pro-key");
    let limit = RedisKeyed::builder(free)
        .plan("pro", pro)
        .resolve(move |id| (*id == pro_key).then_some("pro"))
        .url(redis_url())
        .key_prefix(unique_prefix("plan-reject"))
        .build()
        .await
        .expect("connects");
    let mut svc = RejectLayer::keyed(limit, HeaderKey::x_api_key())
        .cost(|req: &http::Request<String>| if req.uri().path() == "/search" { 2 } else { 1 })
        .layer(ok());

    // A search costs 2 of each: the burst refuses the next request, and is named.
    let res = send(&mut svc, get("/search", "free-key")).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = send(&mut svc, get("/", "free-key")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        "\"burst\";q=2;w=60, \"hourly\";q=3;w=3600"
    );
    assert_eq!(
        res.extensions().get::<Rejected>().unwrap().policy(),
        Some("burst")
    );

    // Another free key: the hour's three go first, then the hourly quota refuses.
    for path in ["/", "/"] {
        assert_eq!(
            send(&mut svc, get(path, "other")).await.status(),
            StatusCode::OK
        );
    }
    let res = send(&mut svc, get("/search", "other")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        res.extensions().get::<Rejected>().unwrap().policy(),
        Some("hourly")
    );
    let retry: u64 = header(&res, "retry-after").parse().unwrap();
    assert!(retry > 3000, "{retry}");

    // The pro key has its own plan, and its fields say so.
    for _ in 0..10 {
        assert_eq!(
            send(&mut svc, get("/search", "pro-key")).await.status(),
            StatusCode::OK
        );
    }
    let res = send(&mut svc, get("/", "pro-key")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "ratelimit-policy"), "\"pro\";q=20;w=3600");
    assert_eq!(
        res.extensions().get::<Rejected>().unwrap().policy(),
        Some("pro")
    );
}

#[tokio::test]
async fn the_rejecting_layer_asks_the_resolver_once_per_request_and_decides_on_the_plan_it_states()
{
    // A resolver that changes its mind on every call: pro, then the default plan, then pro…
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let limit = RedisKeyed::builder(Plan::new(slow(1)).named("free"))
        .plan(
            "pro",
            Plan::new(Quota::new(20, Duration::from_secs(3600)).burst(20)).named("pro"),
        )
        .resolve(move |_| (counted.fetch_add(1, Ordering::Relaxed) % 2 == 0).then_some("pro"))
        .url(redis_url())
        .key_prefix(unique_prefix("plan-once"))
        .build()
        .await
        .expect("connects");
    let mut svc = RejectLayer::keyed(limit, HeaderKey::x_api_key()).layer(ok());
    // Every request changes the key's plan, carrying its state (no burst): after the first
    // two, no token is left on either plan.
    let mut statuses = Vec::new();
    for i in 0..6 {
        let res = send(&mut svc, get("/", "key")).await;
        statuses.push(res.status().as_u16());
        if res.status() == StatusCode::TOO_MANY_REQUESTS {
            // Refused on the plan this request's resolution named, and described as it.
            let (name, policy) = if i % 2 == 0 {
                ("pro", "\"pro\";q=20;w=3600")
            } else {
                ("free", "\"free\";q=1;w=30")
            };
            assert_eq!(header(&res, "ratelimit-policy"), policy, "request {i}");
            assert_eq!(
                res.extensions().get::<Rejected>().unwrap().policy(),
                Some(name)
            );
        }
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    assert_eq!(
        calls.load(Ordering::Relaxed),
        6,
        "one resolution per request"
    );
}

#[tokio::test]
async fn a_release_gives_back_to_every_quota_and_a_pause_holds_them_all() {
    let limit = keyed(&unique_prefix("plan-release"), and_hourly(slow(2), 3)).await;
    limit.try_acquire("a", 2).await.unwrap();
    limit.release("a", 2).await.unwrap();
    // Both quotas have their two back: the hour's third and the burst's two.
    limit.try_acquire("a", 2).await.unwrap();
    wait_of(limit.try_acquire("a", 1).await);

    let fast = Quota::new(100, Duration::from_secs(1)).burst(100);
    let limit = keyed(&unique_prefix("plan-pause"), and_hourly(fast, 100)).await;
    limit.pause("b", Duration::from_secs(60)).await.unwrap();
    let wait = wait_of(limit.try_acquire("b", 1).await);
    assert!(wait > Duration::from_secs(50), "{wait:?}: paused");
    limit.try_acquire("c", 1).await.unwrap();
}

#[tokio::test]
async fn a_redis_ceiling_of_several_quotas_names_the_quota_that_refused() {
    let ceiling = |plan: Plan| async move {
        RedisBucket::builder(plan)
            .url(redis_url())
            .key_prefix(unique_prefix("plan-ceiling"))
            .key("global")
            .build()
            .await
            .expect("connects")
    };
    let fast = Quota::new(10, Duration::from_secs(1)).burst(10);
    for (plan, allowed, named) in [
        (and_hourly(slow(2), 100), 2, "global-60s"),
        (and_hourly(fast, 3), 3, "global-3600s"),
    ] {
        let per_key = tower_throttle::KeyedBucket::new(Quota::per_second(100));
        let mut svc = RejectLayer::keyed(per_key, HeaderKey::x_api_key())
            .global(ceiling(plan).await)
            .layer(ok());
        for i in 0..allowed {
            let res = send(&mut svc, get("/", &format!("k{i}"))).await;
            assert_eq!(res.status(), StatusCode::OK);
        }
        let res = send(&mut svc, get("/", "last")).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            res.extensions().get::<Rejected>().unwrap().policy(),
            Some(named)
        );
    }
}

/// The admissions of one token of `key`'s plan of two quotas, in the order they were
/// booked: the instant (µs, Redis clock) each log entry holds. (A raised hourly count adds
/// an entry of what the raise would add to the window in progress: not an admission.)
async fn admissions(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<u64> {
    let entries: Vec<(String, f64)> = conn
        .zrange_withscores(format!("{key}:q2:log"), 0, -1)
        .await
        .unwrap();
    let mut booked: Vec<(u64, u64)> = entries
        .into_iter()
        .filter_map(|(member, at)| {
            let (seq, tokens) = member.split_once(':').unwrap();
            (tokens == "1").then(|| (seq.parse().unwrap(), at as u64))
        })
        .collect();
    booked.sort_unstable();
    booked.into_iter().map(|(_, at)| at).collect()
}

/// Wait (real time: the bookings are made by Redis) until `key` holds `count` admissions.
async fn until_booked(conn: &mut redis::aio::MultiplexedConnection, key: &str, count: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let held = admissions(conn, key).await.len();
        if held == count {
            return;
        }
        assert!(held < count, "{held} admissions, expected {count}");
        assert!(
            std::time::Instant::now() < deadline,
            "{held} of {count} booked"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Four waiters booked one by one on one plan, then `k` moved to the other and a fifth
/// asking: each admission's instant in Redis, in the order they asked, with Redis' clock
/// read just before and just after the change (µs).
async fn waiters_across_a_change(raise: bool) -> (Vec<u64>, u64, u64) {
    // Free: one per 250 ms; pro: one per 50 ms. One at a time.
    let free = Quota::new(4, Duration::from_secs(1)).burst(1);
    let pro = Quota::new(20, Duration::from_secs(1)).burst(1);
    let (limit, on_pro) = tiered(&unique_prefix("plan-waiters"), free, pro).await;
    if !raise {
        on_pro.write().unwrap().insert("k".key_digest());
    }
    let mut conn = raw(&redis_url()).await;
    let key = limit.redis_key("k");

    // Each waiter booked in Redis before the next asks; the time each is let through.
    let start = tokio::time::Instant::now();
    let ask = |limit: RedisKeyed| {
        tokio::spawn(async move { limit.acquire("k", 1).await.map(|()| start.elapsed()) })
    };
    let mut waiters = Vec::new();
    for i in 0..4 {
        waiters.push(ask(limit.clone()));
        until_booked(&mut conn, &key, i + 1).await;
    }
    let before = redis_support::redis_now_us(&mut conn).await;
    if raise {
        on_pro.write().unwrap().insert("k".key_digest());
    } else {
        on_pro.write().unwrap().remove(&"k".key_digest());
    }
    waiters.push(ask(limit.clone()));
    until_booked(&mut conn, &key, 5).await;
    let after = redis_support::redis_now_us(&mut conn).await;

    // Nobody lost; none let through before its turn.
    let at = admissions(&mut conn, &key).await;
    for (i, waiter) in waiters.into_iter().enumerate() {
        let done = waiter.await.unwrap().expect("admitted");
        let turn = Duration::from_micros(at[i] - at[0]);
        assert!(
            done + Duration::from_millis(2) >= turn,
            "waiter {i} let through at {done:?}, its turn {turn:?} after the first's"
        );
    }
    // Booked in the order they asked, on the first plan's spacing, and the fifth after
    // every turn booked before the change.
    let spacing = if raise { 250_000 } else { 50_000 };
    for pair in at[..4].windows(2) {
        assert!(pair[1] >= pair[0] + spacing, "{at:?}");
    }
    assert!(at[4] >= at[3], "{at:?}");
    (at, before, after)
}

#[tokio::test]
async fn a_plan_raised_with_waiters_queued_keeps_their_turns_and_gives_the_new_rate_after() {
    let (at, _, after) = waiters_across_a_change(true).await;
    // At pro's rate: no later than the last turn booked or the change, not 250 ms after.
    assert!(
        at[4] <= at[3].max(after),
        "{at:?}: the fifth at {}, the change read by {after}",
        at[4]
    );
}

#[tokio::test]
async fn a_plan_lowered_with_waiters_queued_keeps_their_turns_and_what_the_key_owes() {
    let (at, before, after) = waiters_across_a_change(false).await;
    // What the key owes at the change is kept at free's rate: each 50 ms of pro's turns
    // still ahead costs 250 ms of free's, and then the empty bucket one token (250 ms).
    let owed = at[3].saturating_sub(after);
    assert!(
        at[4] + 1_000 >= before + 250_000 + 5 * owed,
        "{at:?}: the fifth at {}, the change between {before} and {after}",
        at[4]
    );
}
