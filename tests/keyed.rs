//! Keyed limits: lossless eviction, the cap on keys, memory per key, proxy-aware client IPs.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use proptest::prelude::*;
use tokio::time::advance;
use tower::{service_fn, Service, ServiceExt};
use tower_layer::Layer;
use tower_throttle::extract::ClientIp;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Algorithm, Bucket, Quota, RejectLayer};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_million_new_keys_each_get_a_bucket_under_the_cap_and_a_throttled_key_keeps_its_state() {
    let keys = KeyedBucket::builder(Quota::per_minute(10))
        .max_keys(10_000)
        .build();
    // Key 0 spends its burst: it must wait 6 s for the next token.
    for _ in 0..10 {
        keys.try_acquire(&0u64, 1).unwrap();
    }
    assert_eq!(
        keys.try_acquire(&0, 1).unwrap_err().wait().unwrap(),
        Duration::from_secs(6)
    );

    // A flood of a million new keys, all at once: the table never passes the cap, and each
    // new key has a bucket of its own (nobody is refused for someone else's flood).
    for k in 1..=1_000_000u64 {
        assert!(keys.try_acquire(&k, 1).is_ok(), "key {k}");
        if k % 1_000 == 0 {
            assert_eq!(keys.snapshot(&k).available, 9, "key {k}");
        }
        if k % 100_000 == 0 {
            assert!(keys.len() <= 10_000, "{} keys tracked", keys.len());
        }
    }
    assert!(keys.len() <= 10_000);
    assert!(
        keys.allocated_bytes() <= 10_000 * 16 * 2 + 64 * 1024,
        "{}",
        keys.allocated_bytes()
    );
    // Key 0 kept its state through the churn: the flood's keys, owing less, went first.
    assert_eq!(
        keys.try_acquire(&0, 1).unwrap_err().wait().unwrap(),
        Duration::from_secs(6)
    );
    advance(Duration::from_secs(6)).await;
    assert!(keys.try_acquire(&0, 1).is_ok());
    assert!(keys.try_acquire(&0, 1).is_err());
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_new_keys_does_not_pin_a_table_of_daily_windows() {
    // A daily quota of 5, a table of 1,000 keys, 12 new keys a second for over half an hour.
    let keys = KeyedBucket::builder(Quota::new(5, Duration::from_secs(86_400)))
        .algorithm(Algorithm::FixedWindow)
        .max_keys(1_000)
        .shards(1)
        .build();
    const FLOOD: u64 = 24_000;
    for _ in 0..5 {
        keys.try_acquire(&0u64, 1).unwrap();
    }
    let mut extra = 0;
    for k in 1..=FLOOD {
        keys.try_acquire(&k, 1).unwrap();
        // Key 0, throttled for the day, tries again after every new key.
        if keys.try_acquire(&0, 1).is_ok() {
            extra += 1;
        }
        advance(Duration::from_millis(83)).await;
        assert!(keys.len() <= 1_000);
    }
    // A newcomer after the flood has its own full quota, not a share of an overflow.
    let newcomer = u64::MAX;
    assert_eq!(keys.snapshot(&newcomer).available, 5);
    for _ in 0..5 {
        assert!(keys.try_acquire(&newcomer, 1).is_ok());
    }
    assert!(keys.try_acquire(&newcomer, 1).is_err());
    // An evicted key starts again from a full window, at most once per `max_keys` new keys.
    let bound = 5 * (FLOOD / 1_000 + 1);
    assert!(extra <= bound, "key 0 got {extra} more (bound {bound})");
}

#[tokio::test(start_paused = true)]
async fn idle_keys_are_evicted_without_user_code() {
    // One request per key, a key's bucket is full again 10 ms later.
    let keys = KeyedBucket::builder(Quota::per_second(100).burst(5)).build();
    let mut peak_bytes = 0;
    for step in 0..1_000u64 {
        for i in 0..1_000u64 {
            keys.try_acquire(&(step * 1_000 + i), 1).unwrap();
        }
        // About a thousand keys are active at any time; a million pass through.
        assert!(
            keys.len() <= 3_000,
            "step {step}: {} keys tracked",
            keys.len()
        );
        peak_bytes = peak_bytes.max(keys.allocated_bytes());
        advance(Duration::from_millis(10)).await;
    }
    assert!(peak_bytes <= 200 * 1024, "peak {peak_bytes} bytes");
    // Later, new keys replace the stale entries rather than adding to them.
    advance(Duration::from_secs(1)).await;
    let stale = keys.len();
    for k in 0..1_000 {
        keys.try_acquire(&(u64::MAX - k), 1).unwrap();
    }
    assert!(stale >= 1_000);
    assert!(keys.len() <= 1_100, "{} keys tracked", keys.len());
    assert!(keys.allocated_bytes() <= peak_bytes);
}

#[tokio::test(start_paused = true)]
async fn memory_per_key_at_a_million_u64_keys() {
    let keys = KeyedBucket::builder(Quota::per_hour(100))
        .max_keys(4_000_000)
        .build();
    for k in 0..1_000_000u64 {
        keys.try_acquire(&k, 1).unwrap();
    }
    assert_eq!(keys.len(), 1_000_000);
    let per_key = keys.allocated_bytes() as f64 / 1e6;
    assert!(per_key <= 36.0, "{per_key:.1} bytes per key");
}

/// A service that answers 200; the layer in front decides.
fn ok() -> impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    service_fn(|_: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) })
}

fn from(peer: &str, xff: &str) -> Request<String> {
    let mut req = Request::builder()
        .header("x-forwarded-for", xff)
        .body(String::new())
        .unwrap();
    req.extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    req
}

#[tokio::test(start_paused = true)]
async fn a_random_x_forwarded_for_from_one_untrusted_peer_stays_in_one_bucket() {
    let keys = KeyedBucket::new(Quota::per_minute(5));
    let mut svc =
        RejectLayer::keyed(keys.clone(), ClientIp::trusting(["10.0.0.0/8"]).unwrap()).layer(ok());
    let mut admitted = 0;
    let mut x: u32 = 12345;
    for _ in 0..100 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let forged = format!(
            "{}.{}.{}.{}",
            x >> 24,
            (x >> 16) & 255,
            (x >> 8) & 255,
            x & 255
        );
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(from("203.0.113.7:40000", &forged))
            .await
            .unwrap();
        admitted += usize::from(res.status() == 200);
    }
    assert_eq!(admitted, 5);
    assert_eq!(keys.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn behind_a_trusted_proxy_forged_hops_do_not_change_the_key() {
    let keys = KeyedBucket::new(Quota::per_minute(5));
    let mut svc =
        RejectLayer::keyed(keys.clone(), ClientIp::trusting(["10.0.0.0/8"]).unwrap()).layer(ok());
    let mut admitted = 0;
    for i in 0..50 {
        // The client writes anything; our proxy appends the address it saw.
        let xff = format!("198.51.100.{i}, 203.0.113.7");
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(from("10.0.0.2:8080", &xff))
            .await
            .unwrap();
        admitted += usize::from(res.status() == 200);
    }
    assert_eq!(admitted, 5);
    assert_eq!(keys.len(), 1);
}

#[test]
fn the_global_ceiling_and_per_key_limits_hold_together_under_many_clones() {
    runtime().block_on(async {
        let global = Bucket::new(Quota::per_second(20));
        let layer = RejectLayer::keyed(
            KeyedBucket::new(Quota::per_second(4)),
            |req: &Request<String>| {
                req.headers()
                    .get("k")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            },
        )
        .global(global);
        let recorder = support::Recorder::new();
        let svc = layer.layer(service_fn({
            let recorder = recorder.clone();
            move |req: Request<String>| {
                let key: usize = req.headers()["k"].to_str().unwrap().parse().unwrap();
                recorder.record(1, key);
                async { Ok::<_, Infallible>(Response::new(String::new())) }
            }
        }));
        // 10 keys, each sending every 50 ms for 3 s: 20 per second each, 200 in all.
        for _ in 0..60 {
            for key in 0..10 {
                let req = Request::builder()
                    .header("k", key.to_string())
                    .body(String::new())
                    .unwrap();
                let _ = svc.clone().oneshot(req).await;
            }
            advance(Duration::from_millis(50)).await;
        }
        let entries = recorder.entries();
        support::assert_rate_bound(&recorder.admissions(), Quota::per_second(20));
        for key in 0..10 {
            let mine: Vec<_> = entries
                .iter()
                .filter(|e| e.2 == key)
                .map(|e| (e.0, e.1))
                .collect();
            support::assert_rate_bound(&mine, Quota::per_second(4));
        }
        // The global bucket was the bottleneck, and was used to the full.
        assert!(entries.len() >= 20 + 20 * 2, "{} admitted", entries.len());
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A keyed bucket decides exactly as one `Bucket` per key would, whatever the eviction
    /// and sweeping in between: forgetting full buckets loses nothing.
    #[test]
    fn keyed_is_one_bucket_per_key(
        ops in proptest::collection::vec((0u64..40, 1u32..=3, 0u64..400_000_000), 1..300),
        burst in 1u32..4,
        per_second in 1u32..20,
    ) {
        runtime().block_on(async move {
            let quota = Quota::per_second(per_second).burst(burst);
            let keyed = KeyedBucket::builder(quota).shards(2).build();
            let mut model: std::collections::HashMap<u64, Bucket> = Default::default();
            for (key, n, dt) in ops {
                advance(Duration::from_nanos(dt)).await;
                let bucket = model.entry(key).or_insert_with(|| Bucket::new(quota));
                assert_eq!(keyed.try_acquire(&key, n), bucket.try_acquire(n), "key {key}, {n} tokens");
            }
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Per-key and global in one layer is all or nothing: a request passes when both buckets
    /// have a token and then takes one from each; otherwise it takes nothing from either.
    /// Checked against two plain `Bucket`s used that way.
    #[test]
    fn per_key_and_global_are_all_or_nothing(
        ops in proptest::collection::vec((0u8..6, 0u64..300_000_000), 1..200),
        per_key in 1u32..5,
        per_global in 1u32..10,
    ) {
        use tower_throttle::reject::Rejected;

        runtime().block_on(async move {
            let key_quota = Quota::per_second(per_key);
            let global_quota = Quota::per_second(per_global);
            let by_header = |req: &Request<String>| {
                req.headers().get("k").and_then(|v| v.to_str().ok()).map(str::to_owned)
            };
            let svc = RejectLayer::keyed(KeyedBucket::new(key_quota), by_header)
                .global(Bucket::new(global_quota))
                .layer(ok());
            let model_global = Bucket::new(global_quota);
            let mut model_keys: std::collections::HashMap<u8, Bucket> = Default::default();
            for (key, dt) in ops {
                advance(Duration::from_nanos(dt)).await;
                let model_key = model_keys.entry(key).or_insert_with(|| Bucket::new(key_quota));
                let expected = if model_key.snapshot().available == 0 {
                    Some("per-key")
                } else if model_global.snapshot().available == 0 {
                    Some("global")
                } else {
                    model_key.try_acquire(1).unwrap();
                    model_global.try_acquire(1).unwrap();
                    None
                };
                let req = Request::builder().header("k", key.to_string()).body(String::new()).unwrap();
                let res = svc.clone().oneshot(req).await.unwrap();
                assert_eq!(res.extensions().get::<Rejected>().and_then(|r| r.policy()), expected);
            }
        });
    }
}
