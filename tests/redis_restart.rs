//! Redis stopped mid-run and started again: each failure policy answers within the timeout,
//! nothing panics, and decisions go back to Redis once it answers.
//!
//! Uses a private `redis-server` on a free port (the shared server is never stopped).
#![cfg(feature = "redis")]

mod redis_support;

use std::time::Duration;

use redis_support::{free_port, raw, PrivateRedis};
use tokio::time::Instant;
use tower_throttle::extract::StableKey;
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisErrorKind, RedisKeyed};
use tower_throttle::{Denied, Quota};

const TIMEOUT: Duration = Duration::from_millis(50);
/// Scheduling slack on a loaded machine: generous, but short of the connection's reconnect
/// delay (500 ms), which a call must never wait out.
const SLACK: Duration = Duration::from_millis(300);

async fn bucket(url: &str, key: &str, policy: FailurePolicy) -> RedisBucket {
    RedisBucket::builder(Quota::per_second(10).burst(4))
        .url(url)
        .key(key)
        .failure_policy(policy)
        .timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
        .build()
        .await
        .expect("connect to the private redis-server")
}

/// Run `f`, check it answered within the timeout (plus slack), return its answer.
async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    let t0 = Instant::now();
    let out = f.await;
    let took = t0.elapsed();
    assert!(
        took <= TIMEOUT + SLACK,
        "{what} took {took:?} while Redis was down"
    );
    out
}

fn backend_kind(r: Result<(), Denied>) -> RedisErrorKind {
    match r {
        Err(Denied::Backend(e)) => e.redis().expect("a redis error").kind(),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_then_restarted() {
    let port = free_port();
    let mut server = PrivateRedis::start(port);
    let url = server.url();
    let open = bucket(&url, "open", FailurePolicy::Open).await;
    let closed = bucket(&url, "closed", FailurePolicy::Closed).await;
    let local = bucket(&url, "local", FailurePolicy::Local { fraction: 0.5 }).await;
    let keyed = RedisKeyed::builder(Quota::per_second(10).burst(4))
        .url(&url)
        .key_prefix("restart-keyed")
        .failure_policy(FailurePolicy::Local { fraction: 0.5 })
        .timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();

    // Healthy: every decision is Redis's.
    open.try_acquire(1).await.unwrap();
    closed.try_acquire(1).await.unwrap();
    local.try_acquire(1).await.unwrap();
    keyed.try_acquire("k", 1).await.unwrap();
    for s in [open.stats(), closed.stats(), local.stats(), keyed.stats()] {
        assert_eq!((s.round_trips, s.failures, s.fallbacks), (1, 0, 0), "{s:?}");
    }

    server.stop();

    // Down: each policy answers within the timeout, again and again (first calls see the
    // dropped connection or time out; later ones skip Redis until the next probe).
    let outage = Instant::now();
    let mut rounds = 0;
    while outage.elapsed() < Duration::from_millis(600) {
        timed("open try_acquire", open.try_acquire(1))
            .await
            .unwrap();
        timed("open acquire", open.acquire(1)).await.unwrap();
        timed("open pause", open.pause(Duration::ZERO))
            .await
            .unwrap();
        let kind = backend_kind(timed("closed try_acquire", closed.try_acquire(1)).await);
        assert!(
            matches!(kind, RedisErrorKind::Unavailable | RedisErrorKind::Timeout),
            "{kind:?}"
        );
        backend_kind(timed("closed acquire", closed.acquire(1)).await);
        backend_kind(timed("closed pause", closed.pause(Duration::from_millis(1))).await);
        let _ = timed("local try_acquire", local.try_acquire(1)).await;
        let _ = timed("keyed try_acquire", keyed.try_acquire("k", 1)).await;
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(rounds >= 3, "{rounds}");
    let outage_ms = outage.elapsed().as_millis();

    // Local: an in-memory bucket at half the quota (burst 2, 5/s) decides.
    let local_quota = Quota::per_second(10).burst(4).headroom(0.5);
    tokio::time::sleep(local_quota.interval() * 2).await; // let it refill
    let taken = Instant::now();
    let mut admitted = 0;
    for _ in 0..5 {
        if timed("local try_acquire", local.try_acquire(1))
            .await
            .is_ok()
        {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted,
        local_quota.burst_size(),
        "the local fallback's burst"
    );
    // acquire waits on the local bucket: the next local token, an interval (200 ms) after
    // the burst was taken (after `taken`).
    let t0 = Instant::now();
    local.acquire(1).await.unwrap();
    let (since_burst, took) = (taken.elapsed(), t0.elapsed());
    assert!(
        since_burst >= local_quota.interval() && took <= local_quota.interval() + SLACK,
        "{since_burst:?} after the burst, waited {took:?}"
    );
    let s = local.stats();
    assert!(s.fallbacks >= 6 && s.failures >= 1, "{s:?}");
    // The breaker: once 3 calls in a row failed, calls skip Redis until the next probe (one
    // per probe interval), however many are made meanwhile.
    let probes = u32::try_from(outage_ms / 100).unwrap() + 1;
    let most = u64::from(1 + 3 + probes);
    let s = closed.stats();
    assert!(
        s.round_trips <= most,
        "calls skip Redis while it is down, but for one probe per interval: {s:?}, at most {most} round trips"
    );

    // Back up, on the same port, empty (no persistence).
    let server = PrivateRedis::start(port);
    let mut conn = raw(&server.url()).await;
    let back = Instant::now();
    loop {
        if closed.try_acquire(1).await.is_ok() {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "no recovery: {:?}",
            closed.stats()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    println!("recovered {:?} after the restart", back.elapsed());
    // Decisions are Redis's again, for every handle, and land in the new server.
    let deadline = Instant::now() + Duration::from_secs(5);
    for (name, b) in [("open", &open), ("local", &local)] {
        loop {
            let before = b.stats();
            let _ = b.try_acquire(1).await;
            let after = b.stats();
            if after.fallbacks == before.fallbacks && after.round_trips > before.round_trips {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not recover: {after:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let exists: bool = redis::cmd("EXISTS")
            .arg(b.redis_key())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(exists, "{name}: state written to the restarted server");
    }
    loop {
        let before = keyed.stats();
        let _ = keyed.try_acquire("k2", 1).await;
        let after = keyed.stats();
        if after.fallbacks == before.fallbacks && after.round_trips > before.round_trips {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "keyed did not recover: {after:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let exists: bool = redis::cmd("EXISTS")
        .arg(keyed.redis_key("k2"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(exists, "keyed: state written to the restarted server");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_times_out_then_recovers() {
    let server = PrivateRedis::start(free_port());
    let url = server.url();
    let closed = bucket(&url, "closed", FailurePolicy::Closed).await;
    let open = bucket(&url, "open", FailurePolicy::Open).await;
    closed.try_acquire(1).await.unwrap();
    open.try_acquire(1).await.unwrap();

    // Frozen: the connection stays open, nothing answers. Slow is a failure too.
    server.signal("STOP");
    let kind = backend_kind(timed("closed, frozen", closed.try_acquire(1)).await);
    assert_eq!(kind, RedisErrorKind::Timeout);
    timed("open, frozen", open.try_acquire(1)).await.unwrap();
    for _ in 0..5 {
        backend_kind(timed("closed, frozen", closed.acquire(1)).await);
        timed("open, frozen", open.acquire(1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }

    server.signal("CONT");
    let back = Instant::now();
    while closed.try_acquire(1).await.is_err() {
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "no recovery: {:?}",
            closed.stats()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let s = closed.stats();
    assert!(s.failures >= 1 && s.fallbacks >= 6, "{s:?}");
}

/// A waiter that goes away while its booking is on its way to Redis takes nothing: the reply
/// goes to a task that gives the token back. The call is held in Redis by `CLIENT PAUSE`
/// (on a private server) while the waiter is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_during_its_round_trip_takes_nothing() {
    let port = free_port();
    let server = PrivateRedis::start(port);
    let url = server.url();
    let limit = RedisBucket::builder(Quota::per_hour(1).burst(1)) // nothing refills
        .url(&url)
        .key("dropped")
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let mut admin = raw(&url).await;
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(500)
        .arg("ALL")
        .query_async(&mut admin)
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let limit = limit.clone();
        async move { limit.acquire(1).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await; // its call is held in Redis
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    // Redis runs the call when the pause ends and admits it; the token comes back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(e) = limit.try_acquire(1).await {
        assert!(
            Instant::now() < deadline,
            "the token never came back: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn wait_of(r: Result<(), Denied>) -> Duration {
    match r {
        Err(Denied::Throttled(t)) => t.wait(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_each_key_falls_back_on_its_own_plan() {
    let mut server = PrivateRedis::start(free_port());
    // Free keys: 10 a minute; the pro key: 1,000 a second. Locally, half of each.
    let keyed = RedisKeyed::builder(Quota::per_minute(10).burst(2))
        .plan("pro", Quota::per_second(1000).burst(100))
        .resolve(|id| (*id == "pro".key_digest()).then_some("pro"))
        .url(server.url())
        .key_prefix("restart-plans")
        .failure_policy(FailurePolicy::Local { fraction: 0.5 })
        .timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    server.stop();
    // A fallback bucket starts empty, its first token due at once; the next is an interval
    // of its own plan's local share away: 12 s for a free key, 2 ms for the pro key.
    for key in ["free", "pro"] {
        let first = timed("keyed try_acquire", keyed.try_acquire(key, 1)).await;
        assert!(first.is_ok(), "{key}: {first:?}");
    }
    let free = wait_of(timed("keyed try_acquire", keyed.try_acquire("free", 1)).await);
    assert!(free > Duration::from_secs(10), "{free:?}");
    let pro = timed("keyed try_acquire", keyed.try_acquire("pro", 1)).await;
    if let Err(Denied::Throttled(t)) = &pro {
        assert!(t.wait() <= Duration::from_millis(2), "{pro:?}");
    } else {
        assert!(pro.is_ok(), "{pro:?}");
    }
    assert!(keyed.stats().fallbacks >= 4, "{:?}", keyed.stats());
}
