//! The sliding log on Redis across a pause, against a real Redis server
//! (`TOWER_THROTTLE_REDIS_URL`, default `redis://127.0.0.1:6379`): the admissions from
//! before the pause still count until they leave the window, so no window of length
//! `period` holds more than `count`, weighted costs included, and the end of the pause
//! ramps. Checked on the instants Redis counted (the scores of the key's log, on the Redis
//! clock), so neither the machine's load nor where the clock's second falls changes the
//! result: a slower run admits less, never more.
#![cfg(feature = "redis")]

#[path = "redis_support/limit.rs"]
mod limit;
mod redis_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use limit::Limit;
use redis::aio::MultiplexedConnection;
use redis_support::{raw, redis_now_us, redis_url, unique_prefix};
use tower_throttle::{Algorithm, Quota};

/// The admissions Redis logged, by member (`"<seq>:<tokens>"`): the instant it counted them
/// at (µs, Redis clock). Entries leave the log a window after their instant; read after
/// every admission, each is seen before it leaves.
type Seen = Arc<Mutex<BTreeMap<String, u64>>>;

async fn read_log(conn: &mut MultiplexedConnection, key: &str, seen: &Seen) {
    let entries: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .unwrap();
    seen.lock().unwrap().extend(entries);
}

fn tokens_of(member: &str) -> u64 {
    member.split(':').nth(1).unwrap().parse().unwrap()
}

/// The window filled, a pause of 300 ms, then a request of 6 tokens queued ahead of eight
/// of one: nothing is counted inside the pause, every window of 1 s holds at most 10
/// tokens (the 10 from before the pause keep the window full until they leave it), and
/// within a period after the pause ends the ramp lets no more than the first request plus
/// one token per interval through.
async fn the_log_counts_the_window_before_a_pause(per_key: bool) {
    let mut conn = raw(&redis_url()).await; // a clear message when Redis is not there
    let quota = Quota::new(10, Duration::from_secs(1)).burst(4);
    let prefix = unique_prefix("log-pause");
    let max_pause = Duration::from_secs(60);
    let limit = Limit::new(&prefix, quota, Algorithm::SlidingLog, max_pause, per_key).await;
    let key = format!("{}:log", limit.key());
    let seen: Seen = Arc::default();
    for _ in 0..10 {
        limit
            .try_acquire(1)
            .await
            .expect("an empty window takes 10");
        read_log(&mut conn, &key, &seen).await;
    }
    let before_pause = redis_now_us(&mut conn).await;
    limit.pause(Duration::from_millis(300)).await.unwrap();
    // The pause began at or after `before_pause`: it ends no earlier than this.
    let end = before_pause + 300_000;
    let mut tasks = Vec::new();
    for cost in [6, 1, 1, 1, 1, 1, 1, 1, 1] {
        let (limit, key, seen) = (limit.clone(), key.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            limit.acquire(cost).await.unwrap();
            let mut conn = raw(&redis_url()).await;
            read_log(&mut conn, &key, &seen).await;
        }));
        // In this order (a request reaches Redis before the next is made).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("every waiter goes within 30 s")
            .unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    let mut admitted: Vec<(u64, u64)> = seen.iter().map(|(m, at)| (*at, tokens_of(m))).collect();
    admitted.sort();
    let case = if per_key { "per key" } else { "one key" };
    assert_eq!(
        admitted.iter().map(|a| a.1).sum::<u64>(),
        10 + 6 + 8,
        "{case}: every admission logged: {admitted:?}"
    );
    let first = admitted[0].0;
    for a in &admitted {
        assert!(
            a.0 < end - 300_000 || a.0 >= end,
            "{case}: counted inside the pause: {admitted:?}"
        );
    }
    for (i, a) in admitted.iter().enumerate() {
        let in_window: u64 = admitted[i..]
            .iter()
            .take_while(|b| b.0 < a.0 + 1_000_000)
            .map(|b| b.1)
            .sum();
        assert!(
            in_window <= 10,
            "{case}: {in_window} tokens in the window from {} µs: {admitted:?}",
            a.0 - first
        );
    }
    // The ramp, until a period after the pause ends: a request goes no earlier than its
    // cost in intervals after the one before it (one token per 100 ms).
    let after: Vec<_> = admitted.iter().filter(|a| a.0 >= end).collect();
    for i in 0..after.len() {
        for j in i + 1..after.len() {
            if after[j].0 >= end + 1_000_000 {
                break;
            }
            let tokens: u64 = after[i..j].iter().map(|x| x.1).sum();
            assert!(
                tokens * 100_000 <= after[j].0 - after[i].0,
                "{case}: the ramp from {} µs: {after:?}",
                after[i].0 - first
            );
        }
    }
}

#[tokio::test]
async fn a_sliding_log_in_redis_counts_the_window_before_a_pause() {
    the_log_counts_the_window_before_a_pause(false).await;
}

#[tokio::test]
async fn a_sliding_log_per_key_in_redis_counts_the_window_before_a_pause() {
    the_log_counts_the_window_before_a_pause(true).await;
}
