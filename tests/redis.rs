//! The Redis backend against a real Redis server (`TOWER_THROTTLE_REDIS_URL`, default
//! `redis://127.0.0.1:6379`). These tests fail, loudly, when Redis is unreachable.
#![cfg(feature = "redis")]

mod redis_support;

use std::time::Duration;

use redis_support::{
    assert_ttl_ok, inspect, micros, on_redis_clock, raw, redis_now_us, redis_url, unique_prefix,
    wait_range,
};
use tokio::time::Instant;
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisErrorKind, RedisKeyed};
use tower_throttle::{Denied, Quota};

/// The timeout of the handles of these tests (the default is 50 ms): a loaded machine must
/// not turn a decision into the failure policy's refusal.
const TIMEOUT: Duration = Duration::from_secs(1);

async fn bucket(tag: &str, quota: Quota, policy: FailurePolicy) -> RedisBucket {
    raw(&redis_url()).await; // a clear message when Redis is not there
    RedisBucket::builder(quota)
        .url(redis_url())
        .key_prefix(unique_prefix(tag))
        .key("bucket")
        .failure_policy(policy)
        .timeout(TIMEOUT)
        .build()
        .await
        .expect("connect to the test Redis")
}

fn wait_of(r: Result<(), Denied>) -> Duration {
    match r {
        Err(Denied::Throttled(t)) => t.wait(),
        other => panic!("expected a throttled answer, got {other:?}"),
    }
}

#[tokio::test]
async fn admits_the_burst_then_throttles_with_the_wait() {
    let mut conn = raw(&redis_url()).await;
    let b = bucket(
        "burst",
        Quota::per_second(10).burst(3),
        FailurePolicy::Closed,
    )
    .await;
    let (lo, first, hi) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
    first.unwrap();
    for _ in 0..2 {
        b.try_acquire(1).await.unwrap();
    }
    // The next token is due one interval (100 ms) after the first admission.
    let (r_lo, refused, r_hi) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
    let wait = wait_of(refused);
    let due = wait_range((lo, hi), 100_000, (r_lo, r_hi));
    assert!(due.contains(&micros(wait)), "{wait:?}, expected {due:?} µs");
    // Every decision asks Redis: a reply that said the bucket is empty may be stale.
    assert_eq!(b.stats().round_trips, 4);
    tokio::time::sleep(wait).await;
    b.try_acquire(1).await.unwrap();
    assert_eq!(b.stats().failures, 0);
    assert_eq!(b.stats().fallbacks, 0);
}

#[tokio::test]
async fn more_than_the_burst_fails_at_once_without_a_round_trip() {
    let b = bucket(
        "exceeds",
        Quota::per_second(10).burst(3),
        FailurePolicy::Closed,
    )
    .await;
    for r in [b.try_acquire(4).await, b.acquire(4).await] {
        match r {
            Err(Denied::ExceedsBurst(e)) => {
                assert_eq!((e.requested(), e.burst()), (4, 3));
            }
            other => panic!("{other:?}"),
        }
    }
    b.try_acquire(0).await.unwrap();
    b.acquire(0).await.unwrap();
    assert_eq!(b.stats().round_trips, 0);
}

/// Empty `b`, change its key's TTL with the command `tamper` (its arguments after the key),
/// then have `asker` refused by Redis. A try in which a token came back before the refusal
/// (a stalled machine) is dropped, and the test tries again.
async fn refused_after(
    conn: &mut redis::aio::MultiplexedConnection,
    b: &RedisBucket,
    asker: &RedisBucket,
    tamper: &[&str],
) {
    for _ in 0..5 {
        while b.try_acquire(1).await.is_ok() {}
        let _: () = redis::cmd(tamper[0])
            .arg(b.redis_key())
            .arg(&tamper[1..])
            .query_async(conn)
            .await
            .unwrap();
        match asker.try_acquire(1).await {
            Ok(()) => continue,
            refused => {
                let _ = wait_of(refused);
                return;
            }
        }
    }
    panic!("{tamper:?}: never refused");
}

#[tokio::test]
async fn every_write_leaves_a_ttl_within_the_time_to_refill() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let b = bucket("ttl", Quota::per_second(20).burst(5), FailurePolicy::Closed).await;
    let key = b.redis_key().to_owned();

    b.try_acquire(1).await.unwrap();
    assert_ttl_ok(&mut conn, &key, "after one admission").await;
    b.try_acquire(4).await.unwrap();
    assert_ttl_ok(&mut conn, &key, "after emptying the bucket").await;

    // A key that lost its TTL gets it back on the deny path (no admission needed), and a
    // TTL far longer than the state is cut back too: refusals of new handles (no local
    // knowledge, so they ask Redis).
    let fresh = || async {
        let h = RedisBucket::builder(b.quota())
            .url(&url)
            .key_prefix(key.split(':').next().unwrap())
            .key("bucket")
            .timeout(TIMEOUT)
            .build()
            .await
            .unwrap();
        assert_eq!(h.redis_key(), key);
        h
    };
    refused_after(&mut conn, &b, &fresh().await, &["PERSIST"]).await;
    assert_ttl_ok(&mut conn, &key, "after a refusal of a key without TTL").await;
    refused_after(&mut conn, &b, &fresh().await, &["PEXPIRE", "3600000"]).await;
    assert_ttl_ok(
        &mut conn,
        &key,
        "after a refusal of a key with a too-long TTL",
    )
    .await;

    // A pause: the TTL covers the pause and the refill after it (the bucket is full again
    // 200 ms after the pause ends, at least 600 ms after `paused`), and no more. PTTL, read
    // before `read`, counts whole ms (1 ms of rounding).
    let paused = redis_now_us(&mut conn).await;
    b.pause(Duration::from_millis(400)).await.unwrap();
    assert_ttl_ok(&mut conn, &key, "after a pause").await;
    let (pttl, _) = inspect(&mut conn, &key).await;
    let read = redis_now_us(&mut conn).await;
    let least = i64::try_from((paused + 600_000).saturating_sub(read) / 1_000).unwrap() - 1;
    assert!(
        pttl >= least && pttl <= 400 + 200 + 1,
        "{pttl}, at least {least}"
    );

    // The TTL is exactly what makes an idle key vanish when the bucket is full again.
    tokio::time::sleep(Duration::from_millis(650)).await;
    let (pttl, _) = inspect(&mut conn, &key).await;
    assert_eq!(pttl, -2, "the key is gone once the bucket is full again");
}

#[tokio::test]
async fn a_far_future_state_never_locks_a_key_out() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let quota = Quota::per_second(10).burst(2); // refills fully in 200 ms
    let b = RedisBucket::builder(quota)
        .url(&url)
        .timeout(TIMEOUT)
        .key_prefix(unique_prefix("future"))
        .key("bucket")
        .failure_policy(FailurePolicy::Closed)
        .max_pause(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let key = b.redis_key().to_owned();

    // A clock stepped back by an hour (or a stray write): TAT one hour ahead, no TTL.
    let now = redis_now_us(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(now + 3_600_000_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    // Clamped to the longest legitimate state: full again within the burst's refill plus
    // the booking horizon (1 s) — one token within the horizon plus one interval.
    let wait = wait_of(b.try_acquire(1).await);
    assert!(
        wait <= Duration::from_millis(1_100),
        "clamped to the horizon and one interval: {wait:?}"
    );
    // The clamp is persisted, with a TTL.
    assert_ttl_ok(&mut conn, &key, "after clamping").await;
    let (pttl, left) = inspect(&mut conn, &key).await;
    assert!(pttl <= 1_201 && left <= 1_200_000, "{pttl} ms, {left} µs");
    tokio::time::sleep(wait).await;
    b.try_acquire(1).await.expect("admitted after one interval");

    // A pause stored far in the future is cut to max_pause (300 ms).
    let now = redis_now_us(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(format!("{}:{}", now, now + 86_400_000_000))
        .query_async(&mut conn)
        .await
        .unwrap();
    // New handles: no local knowledge, so they ask Redis.
    let fresh = || async {
        RedisBucket::builder(quota)
            .url(&url)
            .timeout(TIMEOUT)
            .key_prefix(key.split(':').next().unwrap())
            .key("bucket")
            .max_pause(Duration::from_millis(300))
            .build()
            .await
            .unwrap()
    };
    let h = fresh().await;
    let wait = wait_of(h.try_acquire(1).await);
    assert!(
        wait > Duration::from_millis(200) && wait <= Duration::from_millis(300),
        "{wait:?}"
    );
    assert_ttl_ok(&mut conn, &key, "after clamping a pause").await;
    tokio::time::sleep(wait).await;
    h.try_acquire(1)
        .await
        .expect("admitted when the clamped pause ends");
    // Digits beyond any double: clamped too.
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("9".repeat(400))
        .query_async(&mut conn)
        .await
        .unwrap();
    let wait = wait_of(fresh().await.try_acquire(1).await);
    assert!(wait <= Duration::from_millis(1_100), "{wait:?}");
    assert_ttl_ok(&mut conn, &key, "after clamping 400 digits").await;
}

#[tokio::test]
async fn a_garbage_value_counts_as_a_full_bucket_and_is_overwritten() {
    let mut conn = raw(&redis_url()).await;
    let b = bucket(
        "garbage",
        Quota::per_second(10).burst(2),
        FailurePolicy::Closed,
    )
    .await;
    let key = b.redis_key().to_owned();
    for junk in ["hello", "", "-5", "1.5", "12:x", "1e9"] {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(junk)
            .query_async(&mut conn)
            .await
            .unwrap();
        b.try_acquire(1)
            .await
            .unwrap_or_else(|e| panic!("{junk:?}: {e:?}"));
        let v: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(v.bytes().all(|c| c.is_ascii_digit()), "{junk:?} → {v:?}");
        assert_ttl_ok(&mut conn, &key, junk).await;
    }
}

#[tokio::test]
async fn a_key_of_another_type_is_a_typed_error_never_a_panic() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let closed = bucket("wrongtype", Quota::per_second(10), FailurePolicy::Closed).await;
    let key = closed.redis_key().to_owned();
    let _: () = redis::cmd("RPUSH")
        .arg(&key)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();

    for r in [closed.try_acquire(1).await, closed.acquire(1).await] {
        match r {
            Err(Denied::Backend(e)) => {
                assert_eq!(e.redis().unwrap().kind(), RedisErrorKind::WrongType);
                assert!(
                    std::error::Error::source(&e).is_some(),
                    "redis error as source"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // One bad key is not an outage: the next call goes to Redis again.
    let before = closed.stats().round_trips;
    let _ = closed.try_acquire(1).await;
    assert_eq!(closed.stats().round_trips, before + 1);
    match closed.pause(Duration::from_millis(10)).await {
        Err(Denied::Backend(e)) => assert_eq!(e.redis().unwrap().kind(), RedisErrorKind::WrongType),
        other => panic!("{other:?}"),
    }

    // Other policies apply as for any failure.
    let open = RedisBucket::builder(Quota::per_second(10))
        .url(&url)
        .timeout(TIMEOUT)
        .key_prefix(key.split(':').next().unwrap())
        .key("bucket")
        .failure_policy(FailurePolicy::Open)
        .build()
        .await
        .unwrap();
    open.try_acquire(1).await.unwrap();
    open.acquire(1).await.unwrap();
    assert_eq!(open.stats().fallbacks, 2);
    let t: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(t, "list", "someone else's value is left alone");
}

#[tokio::test]
async fn script_flush_between_calls_is_invisible() {
    let mut conn = raw(&redis_url()).await;
    // A few tokens of burst, and a token every 10 µs, less than a round trip: the decisions
    // never wait for the next token, also right after `pause(0)` (an empty bucket). At
    // 1000/s the first `try_acquire` after it was refused when the calls took under 1 ms.
    let b = bucket(
        "flush",
        Quota::per_second(100_000).burst(5),
        FailurePolicy::Closed,
    )
    .await;
    for _ in 0..3 {
        b.try_acquire(1).await.unwrap();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        b.acquire(1).await.unwrap();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        b.pause(Duration::ZERO).await.unwrap();
    }
    let s = b.stats();
    assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
    assert_eq!(s.round_trips, 9, "each call ran the script in Redis: {s:?}");
}

/// Another client flushing the script cache while decisions run (a deploy, an operator):
/// the load-then-call that follows a `NOSCRIPT` may itself meet a flush, and is retried.
#[tokio::test]
async fn a_script_flush_storm_is_invisible() {
    let mut conn = raw(&redis_url()).await;
    let b = bucket(
        "flush-storm",
        Quota::per_second(100_000).burst(1_000),
        FailurePolicy::Closed,
    )
    .await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut flushes = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                flushes += 1;
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            flushes
        }
    });
    for _ in 0..1_000 {
        match b.try_acquire(1).await {
            Ok(()) | Err(Denied::Throttled(_)) => {}
            Err(e) => panic!("a flush reached the caller: {e:?}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flushes = flusher.await.unwrap();
    assert!(flushes >= 2, "the storm ran: {flushes} flushes");
    let s = b.stats();
    assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
}

#[tokio::test]
async fn a_pause_in_one_process_holds_the_others() {
    let url = redis_url();
    let quota = Quota::per_second(20).burst(5);
    let prefix = unique_prefix("pause");
    let mk = || {
        RedisBucket::builder(quota)
            .url(&url)
            .timeout(TIMEOUT)
            .key_prefix(&prefix)
            .key("shared")
            .failure_policy(FailurePolicy::Closed)
            .build()
    };
    let mut conn = raw(&url).await;
    // Two handles, two connections: as two processes.
    let (a, b) = (mk().await.unwrap(), mk().await.unwrap());
    b.try_acquire(1).await.unwrap();

    // The pause ends 300 ms after an instant within `paused` (Redis clock).
    let t0 = Instant::now();
    let (p_lo, r, p_hi) = on_redis_clock(&mut conn, a.pause(Duration::from_millis(300))).await;
    r.unwrap();
    let paused = (p_lo, p_hi);
    let (lo, refused, hi) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
    let wait = wait_of(refused);
    let range = wait_range(paused, 300_000, (lo, hi));
    assert!(
        range.contains(&micros(wait)),
        "{wait:?}, expected {range:?} µs"
    );
    // A shorter pause does not shorten it.
    b.pause(Duration::from_millis(10)).await.unwrap();
    let (lo, refused, hi) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
    let wait2 = wait_of(refused);
    let range = wait_range(paused, 300_000, (lo, hi));
    assert!(
        range.contains(&micros(wait2)),
        "{wait2:?}, expected {range:?} µs"
    );

    b.acquire(1).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
    // No burst when the pause ends: B took the token due then, and the next is one
    // interval (50 ms) later.
    let (lo, refused, hi) = on_redis_clock(&mut conn, a.try_acquire(1)).await;
    let next = wait_of(refused);
    let range = wait_range(paused, 350_000, (lo, hi));
    assert!(
        range.contains(&micros(next)),
        "{next:?}, expected {range:?} µs"
    );
}

#[tokio::test]
async fn waiters_are_served_in_order_with_one_round_trip_each() {
    let b = bucket(
        "fifo",
        Quota::per_second(10).burst(1),
        FailurePolicy::Closed,
    )
    .await;
    let mut conn = raw(&redis_url()).await;
    let key = b.redis_key().to_owned();
    let start = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    let mut state = 0;
    for i in 0..10 {
        let (waiter, tx) = (b.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            waiter.acquire(1).await.unwrap();
            tx.send(i).unwrap();
        }));
        // Each arrives once the one before it booked its instant (the state moved on).
        state = until_stored(&mut conn, &key, "a booking", |tat| tat > state).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(
        order,
        (0..10).collect::<Vec<_>>(),
        "first come, first served"
    );
    // (Bounded above generously: the point is that the ten went one per interval.)
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(5),
        "9 intervals of 100 ms: {elapsed:?}"
    );
    let trips = b.stats().round_trips;
    assert!(
        trips <= 12,
        "one round trip per admission in the common case: {trips}"
    );
}

#[tokio::test]
async fn try_acquire_asks_redis_every_time_and_its_wait_is_an_upper_bound() {
    let b = bucket(
        "local",
        // 500 ms a token: room for slow round trips on a loaded machine.
        Quota::per_second(2).burst(1),
        FailurePolicy::Closed,
    )
    .await;
    b.try_acquire(1).await.unwrap();
    // The admission's reply said the bucket is empty; both refusals still come from Redis.
    let w1 = wait_of(b.try_acquire(1).await);
    let w2 = wait_of(b.try_acquire(1).await);
    assert!(
        w2 <= w1 && w1 <= Duration::from_millis(500),
        "{w2:?} vs {w1:?}"
    );
    assert_eq!(b.stats().round_trips, 3, "each refusal asked Redis");
    // The wait is an upper bound: a retry after it is admitted.
    tokio::time::sleep(w2).await;
    b.try_acquire(1).await.unwrap();
    assert_eq!(b.stats().round_trips, 4);
}

#[tokio::test]
async fn keyed_limits_are_independent_hashed_and_bounded() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let prefix = unique_prefix("keyed");
    let quota = Quota::per_second(10).burst(2);
    let mk = || {
        RedisKeyed::builder(quota)
            .url(&url)
            .timeout(TIMEOUT)
            .key_prefix(&prefix)
            .failure_policy(FailurePolicy::Closed)
            .build()
    };
    let (k1, k2) = (mk().await.unwrap(), mk().await.unwrap());

    k1.try_acquire("alice", 2).await.unwrap();
    let _ = wait_of(k2.try_acquire("alice", 1).await); // shared across handles
    k2.try_acquire("bob", 2).await.unwrap(); // independent keys

    let huge = vec![b'{'; 1 << 20];
    for key in [&b"alice"[..], b"{evil}:x", b"", &huge] {
        let rkey = k1.redis_key(key);
        assert!(rkey.starts_with(&format!("{prefix}:v1:{{")) && rkey.ends_with('}'));
        assert_eq!(rkey.len(), prefix.len() + 38, "bounded length: {rkey}");
        assert_eq!(rkey.matches('{').count(), 1, "one hash tag");
        k1.try_acquire(key, 1).await.unwrap_or_else(|e| {
            assert!(e.throttled().is_some(), "{e:?}");
        });
        assert_ttl_ok(&mut conn, &rkey, "keyed write").await;
    }
    let stored: Option<String> = redis::cmd("GET")
        .arg(format!("{prefix}:alice"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(stored.is_none(), "key material never appears in Redis");

    // Keyed waiting and pausing (Redis clock): the next token of "erin" is due 100 ms after
    // the burst was taken, and the waiter goes no earlier.
    let (lo, taken, _) = on_redis_clock(&mut conn, k2.try_acquire("erin", 2)).await;
    taken.unwrap();
    k1.acquire("erin", 1).await.unwrap();
    let done = redis_now_us(&mut conn).await;
    assert!(
        done >= lo + 100_000,
        "went {} µs after the burst",
        done - lo
    );
    let (p_lo, paused, p_hi) =
        on_redis_clock(&mut conn, k2.pause("carol", Duration::from_millis(200))).await;
    paused.unwrap();
    let (lo, refused, hi) = on_redis_clock(&mut conn, k1.try_acquire("carol", 1)).await;
    let wait = wait_of(refused);
    let range = wait_range((p_lo, p_hi), 200_000, (lo, hi));
    assert!(
        range.contains(&micros(wait)),
        "{wait:?}, expected {range:?} µs"
    );
    k1.try_acquire("dave", 1).await.unwrap();
    let s = k1.stats();
    assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
}

#[tokio::test]
async fn bad_settings_are_clear_errors() {
    let url = redis_url();
    raw(&url).await;
    let q = Quota::per_second(1);
    let config = |r: Result<RedisBucket, tower_throttle::redis::RedisError>| {
        assert_eq!(r.unwrap_err().kind(), RedisErrorKind::Config);
    };
    config(RedisBucket::builder(q).key("k").build().await); // no url
    config(RedisBucket::builder(q).url(&url).build().await); // no key
    config(RedisBucket::builder(q).url(&url).key("a b").build().await);
    config(
        RedisBucket::builder(q)
            .url(&url)
            .key("k")
            .key_prefix("x{y}")
            .build()
            .await,
    );
    config(
        RedisBucket::builder(q)
            .url("http://nope")
            .key("k")
            .build()
            .await,
    );
    config(
        RedisBucket::builder(q)
            .url(&url)
            .key("k")
            .failure_policy(FailurePolicy::Local { fraction: 0.0 })
            .build()
            .await,
    );
    config(
        RedisBucket::builder(q)
            .url(&url)
            .key("k")
            .timeout(Duration::ZERO)
            .build()
            .await,
    );
    config(
        RedisBucket::builder(Quota::per_hour(1).burst(1_000_000))
            .url(&url)
            .key("k")
            .build()
            .await,
    );
    let e = RedisKeyed::builder(q)
        .key_prefix("p")
        .build()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), RedisErrorKind::Config);
    assert_eq!(e.to_string(), "redis url not set");
    // Two keyed limits on one prefix would share their keys: the prefix names the limit.
    let e = RedisKeyed::builder(q)
        .url(redis_url())
        .build()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), RedisErrorKind::Config);
    assert!(e.to_string().contains("key_prefix"), "{e}");
}

#[tokio::test]
async fn an_unreachable_redis_fails_the_build_or_follows_the_policy_when_lazy() {
    let port = redis_support::free_port(); // nothing listens there
    let url = format!("redis://127.0.0.1:{port}");
    let t0 = Instant::now();
    let e = RedisBucket::builder(Quota::per_second(1))
        .url(&url)
        .key("k")
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_ne!(e.kind(), RedisErrorKind::Config, "{e:?}");

    let lazy = RedisBucket::builder(Quota::per_second(1).burst(1))
        .url(&url)
        .key("k")
        .connect_lazily()
        .timeout(Duration::from_millis(50))
        .failure_policy(FailurePolicy::Local { fraction: 1.0 })
        .build()
        .await
        .unwrap();
    let t0 = Instant::now();
    lazy.try_acquire(1).await.unwrap();
    let _ = wait_of(lazy.try_acquire(1).await);
    assert!(
        t0.elapsed() < Duration::from_millis(200),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(lazy.stats().fallbacks, 2);
}

/// The handles and their futures can go anywhere: spawned tasks, boxed service futures.
#[test]
fn handles_and_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    fn check(b: RedisBucket, k: RedisKeyed) {
        send(&b.try_acquire(1));
        send(&b.acquire(1));
        send(&b.pause(Duration::ZERO));
        send(&k.try_acquire("key", 1));
        send(&k.acquire(String::from("key"), 1));
        send(&k.pause(b"key", Duration::ZERO));
        send_sync(&b);
        send_sync(&k);
    }
    let _ = check;
    fn error_is_std<E: std::error::Error + Send + Sync + 'static>() {}
    error_is_std::<Denied>();
    error_is_std::<tower_throttle::redis::RedisError>();
}

/// The instant (µs, Redis clock) a token bucket's state in `key` says it is full again (0:
/// no state, full).
async fn stored_tat(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    let v: Option<String> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    let v = v.unwrap_or_else(|| "0".into());
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{key} holds {v:?}"))
}

/// Poll (every 10 ms, for at most 5 s) until the state in `key` says an instant that
/// satisfies `wanted`; that instant.
async fn until_stored(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    what: &str,
    wanted: impl Fn(u64) -> bool,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let tat = stored_tat(conn, key).await;
        if wanted(tat) {
            return tat;
        }
        assert!(Instant::now() < deadline, "{what}: {key} holds {tat}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_dropped_waiter_gives_its_tokens_back() {
    let mut conn = raw(&redis_url()).await;
    // One token a second: the states looked at below last a second, however slow the
    // machine.
    const INTERVAL: u64 = 1_000_000;
    let b = bucket(
        "cancel",
        Quota::per_second(1).burst(1),
        FailurePolicy::Closed,
    )
    .await;
    let key = b.redis_key().to_owned();
    let (lo, taken, _) = on_redis_clock(&mut conn, b.try_acquire(1)).await;
    taken.unwrap();
    let full = stored_tat(&mut conn, &key).await;
    // Books the instant a second ahead (the state moves on by one interval), then is
    // dropped while it sleeps.
    let first = tokio::spawn({
        let b = b.clone();
        async move { b.acquire(1).await }
    });
    until_stored(&mut conn, &key, "the waiter's booking", |t| {
        t == full + INTERVAL
    })
    .await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // The refund reaches Redis in the background: the state is back where it was.
    until_stored(&mut conn, &key, "the refund", |t| t == full).await;
    // Then the next waiter gets the dropped one's tokens: admitted no earlier than an
    // interval after the first admission (decided after `lo`), and (by the state it leaves,
    // an interval past its admission) before the instant after the dropped one's.
    b.acquire(1).await.unwrap();
    let took = redis_now_us(&mut conn).await - lo;
    assert!(took >= INTERVAL, "the next waiter went early: {took} µs");
    let left = stored_tat(&mut conn, &key).await;
    assert!(left > full, "the state of the next admission is gone");
    let admitted = left - INTERVAL;
    assert!(
        admitted < full + INTERVAL,
        "the next waiter did not get the dropped one's tokens: {} µs after them",
        admitted - full
    );
}

/// How long a pause may take to reach the waiters of this process: a Redis write, and from
/// another process a pub/sub message. Generous: the point is that it reaches them.
const REACH: Duration = Duration::from_millis(100);

/// The pause of [`assert_waiters_wait_out_a_pause`].
const COOLDOWN: Duration = Duration::from_millis(600);

/// Six waiters (each a `waiter()`) on a limit of one token per `interval` (200 ms): right
/// after the second one went, `pause` pauses the limit for `COOLDOWN`. Those booked inside
/// the pause must not go then: the pause empties Redis' bucket, which voids their bookings,
/// and they book again after it, one per interval. The pause is asked for just after an
/// admission, so the next booking is an interval away whatever the windows' phase; a waiter
/// that goes within `REACH` of the ask (before the pause could reach it) is not checked.
async fn assert_waiters_wait_out_a_pause<W, P>(
    what: &str,
    interval: Duration,
    waiter: impl Fn() -> W,
    pause: P,
) where
    W: std::future::Future<Output = ()> + Send + 'static,
    P: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    let (went, mut gone) = tokio::sync::mpsc::unbounded_channel();
    let waiters: Vec<_> = (0..6)
        .map(|_| {
            let (acquire, went) = (waiter(), went.clone());
            tokio::spawn(async move {
                acquire.await;
                let at = start.elapsed();
                let _ = went.send(at);
                at
            })
        })
        .collect();
    for _ in 0..2 {
        gone.recv().await.unwrap();
    }
    let asked = start.elapsed();
    pause.await;
    let mut at = Vec::new();
    for w in waiters {
        at.push(w.await.unwrap());
    }
    at.sort();
    // The pause ends `COOLDOWN` after it was asked for, or later (10 ms for rounding and the
    // two clocks).
    let end = asked + COOLDOWN - Duration::from_millis(10);
    assert!(
        !at.iter().any(|t| (asked + REACH..end).contains(t)),
        "{what}: admitted at {at:?}, the pause asked for at {asked:?}"
    );
    // Those left go after it in turn, the k-th no sooner than k intervals after its end.
    let after: Vec<_> = at.iter().filter(|t| **t >= end).collect();
    assert!(after.len() >= 3, "{what}: admitted at {at:?}");
    for (k, t) in after.iter().enumerate() {
        assert!(
            **t >= end + interval * k as u32,
            "{what}: admitted at {at:?}, the pause asked for at {asked:?}"
        );
    }
}

/// `which` pauses through the `Bucket` (as `RetryAfterLayer` does), through the
/// `RedisBucket`, from another process (which tells this one over pub/sub), or a key of a
/// `RedisKeyed`, here or in another process.
async fn booked_waiters_wait_out_a_pause(which: &str) {
    let quota = Quota::per_second(5).burst(1);
    let prefix = unique_prefix("booked-pause");
    // This process's handles, and another process's on the same limits.
    let bucket_handle = || async {
        RedisBucket::builder(quota)
            .url(redis_url())
            .timeout(TIMEOUT)
            .key_prefix(&prefix)
            .key("k")
            .build()
            .await
            .unwrap()
    };
    let keyed_handle = || async {
        RedisKeyed::builder(quota)
            .url(redis_url())
            .timeout(TIMEOUT)
            .key_prefix(&prefix)
            .build()
            .await
            .unwrap()
    };
    let (redis, keyed) = (bucket_handle().await, keyed_handle().await);
    let (other, other_keyed) = (bucket_handle().await, keyed_handle().await);
    let bucket = redis.clone();
    let cooldown = COOLDOWN;
    let waiter = || {
        let keyed_waiter = which.starts_with("keyed");
        let (bucket, keyed) = (bucket.clone(), keyed.clone());
        async move {
            if keyed_waiter {
                keyed.acquire("alice", 1).await.unwrap();
            } else {
                bucket.acquire(1).await.unwrap();
            }
        }
    };
    let pause = async {
        match which {
            "bucket" => bucket.pause(cooldown).await.unwrap(),
            "redis" => redis.pause(cooldown).await.unwrap(),
            "elsewhere" => other.pause(cooldown).await.unwrap(),
            "keyed elsewhere" => other_keyed.pause("alice", cooldown).await.unwrap(),
            _ => keyed.pause("alice", cooldown).await.unwrap(),
        }
    };
    assert_waiters_wait_out_a_pause(which, quota.interval(), waiter, pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booked_waiters_wait_out_a_pause_of_the_bucket_made_here() {
    booked_waiters_wait_out_a_pause("bucket").await;
    booked_waiters_wait_out_a_pause("redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booked_waiters_of_a_key_wait_out_its_pause_made_here() {
    booked_waiters_wait_out_a_pause("keyed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booked_waiters_wait_out_a_pause_made_in_another_process() {
    booked_waiters_wait_out_a_pause("elsewhere").await;
    booked_waiters_wait_out_a_pause("keyed elsewhere").await;
}

/// As [`booked_waiters_wait_out_a_pause`], for every algorithm, with one token per 200 ms
/// (so that the windows book their turns too), paused here and from another process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booked_waiters_of_every_algorithm_wait_out_a_pause() {
    use tower_throttle::Algorithm;
    let quota = Quota::new(1, Duration::from_millis(200));
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::leaky_bucket(64),
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let case = |elsewhere: bool| async move {
            let prefix = unique_prefix("booked-pause-algorithm");
            let handle = || async {
                RedisBucket::builder(quota)
                    .url(redis_url())
                    .timeout(TIMEOUT)
                    .key_prefix(&prefix)
                    .key("k")
                    .algorithm(algorithm)
                    .build()
                    .await
                    .unwrap()
            };
            let (here, other) = (handle().await, handle().await);
            let waiter = || {
                let bucket = here.clone();
                async move { bucket.acquire(1).await.unwrap() }
            };
            let pause = async {
                if elsewhere {
                    other.pause(COOLDOWN).await.unwrap();
                } else {
                    here.pause(COOLDOWN).await.unwrap();
                }
            };
            let what = format!("{algorithm:?}, elsewhere {elsewhere}");
            assert_waiters_wait_out_a_pause(&what, quota.interval(), waiter, pause).await;
        };
        tokio::join!(case(false), case(true));
    }
}
