//! A real 3-primary Redis Cluster on 127.0.0.1, started and stopped by the tests: keyed
//! limits whose keys land on every shard are each exact, a bucket and its leases work on
//! it, and a primary killed mid-run gets the configured failure policy, then decisions
//! return once it is back.
#![cfg(feature = "redis-cluster")]

mod redis_support;

use std::time::Duration;

use redis_support::cluster::Cluster;
use redis_support::unique_prefix;
use tower_throttle::redis::{FailurePolicy, RedisBucket, RedisErrorKind, RedisKeyed};
use tower_throttle::{Algorithm, Denied, Plan, Quota};

/// A rate that never refills within a test: every count is exact.
fn frozen(burst: u32) -> Quota {
    Quota::per_hour(1).burst(burst)
}

/// `count` keys on each of the cluster's three primaries.
fn keys_on_every_shard(
    cluster: &Cluster,
    keyed: &RedisKeyed,
    count: usize,
) -> Vec<(String, usize)> {
    let mut per_node = [0; 3];
    let mut keys = Vec::new();
    for i in 0.. {
        let key = format!("user-{i}");
        let node = cluster.node_of(&keyed.redis_key(key.as_str()));
        if per_node[node] < count {
            per_node[node] += 1;
            keys.push((key, node));
        }
        if per_node.iter().all(|&n| n == count) {
            break;
        }
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_limits_on_every_shard_are_each_exact() {
    let cluster = Cluster::start();
    let prefix = unique_prefix("cluster-keyed");
    // A plan of two quotas: its state and the log's entries on the key's shard, decided in
    // one script.
    let plan = Plan::new(frozen(10))
        .and(Quota::new(5, Duration::from_secs(3600)))
        .algorithm(Algorithm::SlidingLog);
    let keyed = RedisKeyed::builder(plan)
        .cluster(cluster.urls())
        .key_prefix(&prefix)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connects to the cluster");
    let keys = keys_on_every_shard(&cluster, &keyed, 2);
    assert_eq!(keys.len(), 6);
    for (key, node) in &keys {
        for i in 0..5 {
            keyed
                .try_acquire(key.as_str(), 1)
                .await
                .unwrap_or_else(|e| panic!("{key} on node {node}: token {i}: {e}"));
        }
        let e = keyed
            .try_acquire(key.as_str(), 1)
            .await
            .expect_err("the sixth is refused");
        assert!(matches!(e, Denied::Throttled(_)), "{key}: {e}");
    }
    // Every key's state lives on its own shard: the others do not hold it.
    for (key, node) in &keys {
        let redis_key = keyed.redis_key(key.as_str());
        let mut c = redis::Client::open(cluster.urls()[*node].as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for k in [redis_key.clone(), format!("{redis_key}:q2:log")] {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&k)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(exists, "{k} on node {node}");
        }
    }
    let s = keyed.stats();
    assert_eq!((s.failures, s.fallbacks), (0, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_its_leases_and_its_pause_work_on_a_cluster() {
    let cluster = Cluster::start();
    let prefix = unique_prefix("cluster-bucket");
    let build = |lease: bool| {
        let b = RedisBucket::builder(frozen(30))
            .cluster(cluster.urls())
            .key_prefix(&prefix)
            .key("shared")
            .timeout(Duration::from_secs(1));
        if lease {
            b.lease(8).lease_period(Duration::from_secs(60))
        } else {
            b
        }
    };
    let leased = build(true).build().await.unwrap();
    let plain = build(false).build().await.unwrap();
    for _ in 0..20 {
        leased.try_acquire(1).await.unwrap();
    }
    // Leases of 1, 2, 4, 8, 8: 23 charged, 3 held.
    assert_eq!(leased.leased_tokens(), 3);
    let mut left = 0;
    while plain.try_acquire(1).await.is_ok() {
        left += 1;
    }
    assert_eq!(left, 30 - 23);
    plain.pause(Duration::from_secs(5)).await.unwrap();
    let e = plain.try_acquire(1).await.expect_err("paused");
    assert!(e.wait().is_some_and(|w| w > Duration::from_secs(4)), "{e}");
    assert_eq!(
        RedisBucket::builder(frozen(3))
            .cluster(cluster.urls())
            .key("k")
            .connect_lazily()
            .build()
            .await
            .unwrap_err()
            .kind(),
        RedisErrorKind::Config,
        "a cluster connects at build"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_gets_the_failure_policy_then_decisions_return() {
    let mut cluster = Cluster::start();
    let prefix = unique_prefix("cluster-failover");
    let build = |policy| {
        RedisKeyed::builder(Quota::per_second(1000).burst(1000))
            .cluster(cluster.urls())
            .key_prefix(&prefix)
            .failure_policy(policy)
            .timeout(Duration::from_millis(300))
            .probe_interval(Duration::from_millis(100))
            .build()
    };
    let closed = build(FailurePolicy::Closed).await.unwrap();
    let open = build(FailurePolicy::Open).await.unwrap();
    let keys = keys_on_every_shard(&cluster, &closed, 1);
    let (victim_key, victim) = keys[0].clone();
    for (key, _) in &keys {
        closed.try_acquire(key.as_str(), 1).await.unwrap();
    }

    cluster.kill(victim);
    // The key on the dead primary: Closed refuses with the backend's error, Open admits.
    let e = closed
        .try_acquire(victim_key.as_str(), 1)
        .await
        .expect_err("Closed refuses while the primary is down");
    assert!(matches!(e, Denied::Backend(_)), "{e}");
    open.try_acquire(victim_key.as_str(), 1)
        .await
        .expect("Open admits while the primary is down");
    assert!(open.stats().fallbacks > 0);

    cluster.restart(victim);
    // Back: decisions are made in Redis again (the client reconnects, the breaker probes).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let before = closed.stats().fallbacks;
        if closed.try_acquire(victim_key.as_str(), 1).await.is_ok()
            && closed.stats().fallbacks == before
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "decisions did not return: {:?}",
            closed.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (key, _) in &keys {
        closed.try_acquire(key.as_str(), 1).await.unwrap();
    }
}
