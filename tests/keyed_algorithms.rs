//! Every algorithm per key: the keyed store decides as one bucket per key would, with exact
//! waits, through the rejecting layer, with bounded waits, refunds and eviction. Time is
//! paused: every instant is exact.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use tokio::time::{advance, Instant};
use tower::{service_fn, Service, ServiceExt};
use tower_layer::Layer;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::reject::Rejected;
use tower_throttle::{Algorithm, Bucket, Quota, RejectLayer};

const MS: Duration = Duration::from_millis(1);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn all() -> [(&'static str, Algorithm); 5] {
    [
        ("token", Algorithm::TokenBucket),
        ("leaky", Algorithm::leaky_bucket(100)),
        ("fixed", Algorithm::FixedWindow),
        ("sliding", Algorithm::SlidingWindow),
        ("log", Algorithm::SlidingLog),
    ]
}

/// Keyed buckets of `algorithm` whose windows start now (not at the wall clock's period
/// boundary), so that no result depends on when the test runs.
fn keyed<K: std::hash::Hash + Eq + Clone>(quota: Quota, algorithm: Algorithm) -> KeyedBucket<K> {
    KeyedBucket::builder(quota)
        .algorithm(algorithm)
        .window_origin(Instant::now())
        .shards(2)
        .build()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Token bucket, leaky bucket and sliding log per key decide exactly as one `Bucket` of
    /// the same algorithm per key would (same waits), whatever the eviction in between.
    #[test]
    fn keyed_decides_as_one_bucket_per_key(
        algo in 0usize..3,
        ops in proptest::collection::vec((0u64..30, 1u32..=5, 0u64..300_000_000), 1..250),
        count in 1u32..5,
        period_ms in 50u64..2_000,
    ) {
        let algorithm = [Algorithm::TokenBucket, Algorithm::leaky_bucket(10), Algorithm::SlidingLog][algo];
        runtime().block_on(async move {
            let quota = Quota::new(count, Duration::from_millis(period_ms)).burst(count);
            let keys = keyed(quota, algorithm);
            let mut model: HashMap<u64, Bucket> = HashMap::new();
            for (key, n, dt) in ops {
                advance(Duration::from_nanos(dt)).await;
                let bucket = model
                    .entry(key)
                    .or_insert_with(|| Bucket::builder(quota).algorithm(algorithm).build());
                assert_eq!(
                    keys.try_acquire(&key, n),
                    bucket.try_acquire(n),
                    "{algorithm:?}: key {key}, {n} tokens"
                );
            }
        });
    }

    /// Fixed and sliding windows per key against a model of aligned windows: the same
    /// decisions, and every refusal's wait is exact (the request fits after exactly that
    /// long, and not a nanosecond sooner).
    #[test]
    fn keyed_windows_match_an_aligned_window_model(
        sliding in any::<bool>(),
        ops in proptest::collection::vec((0u64..10, 1u32..=4, 0u64..200_000_000), 1..250),
        limit in 1u32..5,
        period_ms in 100u64..1_000,
    ) {
        runtime().block_on(async move {
            let quota = Quota::new(limit, Duration::from_millis(period_ms));
            let algorithm = if sliding { Algorithm::SlidingWindow } else { Algorithm::FixedWindow };
            let keys = keyed(quota, algorithm);
            let mut model = WindowModel::probe(&keys, quota, sliding);
            let start = Instant::now();
            for (key, tokens, dt) in ops {
                advance(Duration::from_nanos(dt)).await;
                let t = start.elapsed().as_nanos() as u64;
                let n = u64::from(tokens);
                match keys.try_acquire(&key, tokens) {
                    Ok(()) => {
                        assert!(model.fits(key, n, t), "admitted {n} for {key} at {t}, over the limit");
                        model.commit(key, n, t);
                    }
                    Err(e) if tokens > limit => assert!(e.exceeds_burst().is_some()),
                    Err(e) => {
                        let wait = e.wait().unwrap().as_nanos() as u64;
                        assert!(wait > 0 && !model.fits(key, n, t), "refused {n} for {key} at {t}");
                        assert!(model.fits(key, n, t + wait), "{n} for {key} at {t}: still no room after {wait}");
                        assert!(!model.fits(key, n, t + wait - 1), "{n} for {key} at {t}: room before {wait}");
                    }
                }
            }
        });
    }
}

/// Aligned windows per key, in nanoseconds since the model started.
struct WindowModel {
    limit: u64,
    width: u64,
    /// Window boundaries fall where `(t + offset) % width == 0`.
    offset: u64,
    sliding: bool,
    counts: HashMap<(u64, u64), u64>,
}

impl WindowModel {
    /// Reads where the store's windows end from a probe key (`u64::MAX`) admitted now.
    fn probe(keys: &KeyedBucket<u64>, quota: Quota, sliding: bool) -> Self {
        let width = quota.period().as_nanos() as u64;
        keys.try_acquire(&u64::MAX, 1).unwrap();
        let mut to_end = keys.snapshot(&u64::MAX).full_in.as_nanos() as u64;
        if sliding {
            to_end -= width; // the sliding state lasts one more window
        }
        assert!(to_end > 0 && to_end <= width);
        WindowModel {
            limit: u64::from(quota.count()),
            width,
            offset: width - to_end,
            sliding,
            counts: HashMap::new(),
        }
    }

    fn window(&self, t: u64) -> u64 {
        // Window 0 holds t = 0; keep indices ≥ 1 so that `w − 1` exists.
        (t + self.offset) / self.width + 1
    }

    fn count(&self, key: u64, w: u64) -> u64 {
        self.counts.get(&(key, w)).copied().unwrap_or(0)
    }

    fn fits(&self, key: u64, n: u64, t: u64) -> bool {
        let w = self.window(t);
        let mut used = self.count(key, w) + n;
        if self.sliding {
            let end = w * self.width - self.offset; // (w − 1 + 1)·width − offset
            let left = u128::from(end - t);
            let prev = u128::from(self.count(key, w - 1));
            used += (prev * left).div_ceil(u128::from(self.width)) as u64;
        }
        used <= self.limit
    }

    fn commit(&mut self, key: u64, n: u64, t: u64) {
        *self.counts.entry((key, self.window(t))).or_default() += n;
    }
}

type Res = Response<String>;

fn ok_service() -> impl Service<
    Request<String>,
    Response = Res,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Res, Infallible>> + Send,
> + Clone
       + Send {
    service_fn(|_: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) })
}

fn with_key(key: &str) -> Request<String> {
    Request::builder()
        .header("x-api-key", key)
        .body(String::new())
        .unwrap()
}

fn api_key(req: &Request<String>) -> Option<String> {
    Some(req.headers().get("x-api-key")?.to_str().ok()?.to_owned())
}

fn field<'a, B>(res: &'a Response<B>, name: &str) -> &'a str {
    res.headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} field"))
        .to_str()
        .unwrap()
}

fn rejected<B>(res: &Response<B>) -> &Rejected {
    res.extensions().get::<Rejected>().expect("a rejection")
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_rejects_per_key_with_the_exact_retry_after() {
    for (name, algorithm) in all() {
        // 3 per 2 s (token bucket: burst 3).
        let quota = Quota::new(3, Duration::from_secs(2)).burst(3);
        let keys = keyed::<String>(quota, algorithm);
        let mut svc = RejectLayer::keyed(keys.clone(), api_key).layer(ok_service());
        let admitted = if name == "leaky" { 1 } else { 3 };
        for i in 0..admitted {
            let res = svc
                .ready()
                .await
                .unwrap()
                .call(with_key("a"))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{name}: request {i}");
        }
        let predicted = keys.snapshot(&"a".to_owned()).next_token_in;
        assert!(predicted > Duration::ZERO, "{name}");
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(with_key("a"))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{name}");
        let why = rejected(&res);
        assert_eq!(why.policy(), Some("per-key"), "{name}");
        assert_eq!(why.wait(), Some(predicted), "{name}");
        let secs = predicted.as_nanos().div_ceil(1_000_000_000);
        assert_eq!(field(&res, "retry-after"), secs.to_string(), "{name}");
        // Other keys are untouched.
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(with_key("b"))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{name}");
        // After exactly the wait the key is admitted, and not a millisecond before.
        advance(predicted - MS).await;
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(with_key("a"))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{name}: early");
        advance(MS).await;
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(with_key("a"))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{name}: on time");
        advance(Duration::from_secs(10)).await;
    }
}

/// A window origin places the windows of every key: boundaries at the origin and every
/// period from it (before or after now), as a bucket given the same origin has them, and the
/// same decisions and waits as that bucket from then on.
#[tokio::test(start_paused = true)]
async fn a_window_origin_places_the_windows_of_every_key() {
    let quota = Quota::new(5, Duration::from_secs(1));
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        // The origin: `later` ms from now, `earlier` ms before now.
        for (later, earlier, boundary_in) in [(0, 0, 1000), (300, 0, 300), (0, 300, 700)] {
            let origin = Instant::now() + later * MS - earlier * MS;
            let boundary_in = boundary_in * MS;
            let keys: KeyedBucket<u64> = KeyedBucket::builder(quota)
                .algorithm(algorithm)
                .window_origin(origin)
                .build();
            let bucket = Bucket::builder(quota)
                .algorithm(algorithm)
                .window_origin(origin)
                .build();
            keys.try_acquire(&1, 5).unwrap();
            bucket.try_acquire(5).unwrap();
            let wait = keys.try_acquire(&1, 1).unwrap_err().wait().unwrap();
            if algorithm == Algorithm::FixedWindow {
                assert_eq!(wait, boundary_in, "{algorithm:?}");
            }
            assert_eq!(bucket.try_acquire(1).unwrap_err().wait(), Some(wait));
            for step in [wait, 50 * MS, 200 * MS, 750 * MS, 1000 * MS] {
                advance(step).await;
                for n in [3, 2, 1] {
                    assert_eq!(
                        keys.try_acquire(&1, n),
                        bucket.try_acquire(n),
                        "{algorithm:?}, origin {boundary_in:?} before a boundary, {n} tokens"
                    );
                }
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_fixed_window_per_key_resets_on_the_boundary_and_allows_twice_across_it() {
    let quota = Quota::new(5, Duration::from_secs(1));
    let keys = keyed::<u64>(quota, Algorithm::FixedWindow);
    keys.try_acquire(&1, 1).unwrap();
    let to_boundary = keys.snapshot(&1).full_in;
    // The rest of this window just before the boundary, then a whole window after it.
    advance(to_boundary - MS).await;
    keys.try_acquire(&1, 4).unwrap();
    assert_eq!(keys.try_acquire(&1, 1).unwrap_err().wait().unwrap(), MS);
    advance(MS).await;
    keys.try_acquire(&1, 5).unwrap();
    // 9 tokens within 1 ms: the boundary burst, at most 2× the limit.
    assert!(keys.try_acquire(&1, 1).is_err());
    assert_eq!(keys.snapshot(&1).available, 0);
    assert_eq!(keys.snapshot(&1).full_in, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_honours_a_bounded_wait_per_key_at_the_predicted_instant() {
    for (name, algorithm) in all() {
        let quota = Quota::new(2, Duration::from_secs(1)).burst(2);
        let keys = keyed::<String>(quota, algorithm);
        let svc = RejectLayer::keyed(keys.clone(), api_key)
            .max_wait(Duration::from_secs(2))
            .layer(ok_service());
        let now = if name == "leaky" { 1 } else { 2 };
        for _ in 0..now {
            let res = svc.clone().oneshot(with_key("a")).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{name}");
        }
        let predicted = keys.snapshot(&"a".to_owned()).next_token_in;
        let start = Instant::now();
        let waiting = tokio::spawn(svc.clone().oneshot(with_key("a")));
        tokio::task::yield_now().await;
        // A request behind the reservation goes after it, never before.
        let behind = tokio::spawn(svc.clone().oneshot(with_key("a")));
        let res = waiting.await.unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{name}");
        // On time, as tokio's millisecond timer sees it: never early.
        let waited = start.elapsed();
        assert!(
            waited >= predicted && waited < predicted + MS,
            "{name}: {waited:?}"
        );
        let res = behind.await.unwrap().unwrap();
        assert!(start.elapsed() >= predicted, "{name}");
        if res.status() == StatusCode::TOO_MANY_REQUESTS {
            assert!(
                rejected(&res).wait().unwrap() > Duration::from_secs(2),
                "{name}"
            );
        }
        advance(Duration::from_secs(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_gives_the_key_its_turn_back_for_every_algorithm() {
    for (name, algorithm) in all() {
        let quota = Quota::new(1, Duration::from_secs(1)).burst(1);
        let keys = keyed::<String>(quota, algorithm);
        let svc = RejectLayer::keyed(keys.clone(), api_key)
            .max_wait(Duration::from_secs(2))
            .layer(ok_service());
        svc.clone().oneshot(with_key("a")).await.unwrap();
        let before = keys.snapshot(&"a".to_owned());
        let waiting = tokio::spawn(svc.clone().oneshot(with_key("a")));
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        let after = keys.snapshot(&"a".to_owned());
        assert_eq!(after.next_token_in, before.next_token_in, "{name}");
        assert_eq!(after.available, before.available, "{name}");
        advance(Duration::from_secs(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_global_refusal_refunds_the_key_for_every_algorithm() {
    for (name, algorithm) in all() {
        let quota = Quota::new(4, Duration::from_secs(60)).burst(4);
        let keys = keyed::<String>(quota, algorithm);
        let global = Bucket::new(Quota::per_minute(1));
        let mut svc = RejectLayer::keyed(keys.clone(), api_key)
            .global(global)
            .layer(ok_service());
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(with_key("a"))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{name}");
        for _ in 0..3 {
            let res = svc
                .ready()
                .await
                .unwrap()
                .call(with_key("b"))
                .await
                .unwrap();
            assert_eq!(rejected(&res).policy(), Some("global"), "{name}");
        }
        // "b" was charged and refunded each time: as if unused.
        let unused = keys.snapshot(&"never seen".to_owned());
        assert_eq!(keys.snapshot(&"b".to_owned()), unused, "{name}");
        assert_eq!(keys.len(), 1, "{name}: only \"a\" is tracked");
        advance(Duration::from_secs(120)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_forgets_unused_keys_and_bounds_what_a_flood_gives_back_at_the_cap() {
    for (name, algorithm) in all() {
        let quota = Quota::new(2, Duration::from_secs(1)).burst(2);
        let keys = KeyedBucket::builder(quota)
            .algorithm(algorithm)
            .window_origin(Instant::now())
            .max_keys(64)
            .shards(1)
            .build();
        // Key 0 spends everything for a long while (a window of 1 s, or 2 tokens at 2/s).
        while keys.try_acquire(&0u64, 1).is_ok() {}
        let wait = keys.try_acquire(&0, 1).unwrap_err().wait().unwrap();
        // A flood of new keys at the cap, each with a bucket of its own; key 0 tries again
        // after each.
        let mut extra = 0;
        for k in 1..10_000u64 {
            assert!(keys.try_acquire(&k, 1).is_ok(), "{name}: key {k}");
            if keys.try_acquire(&0, 1).is_ok() {
                extra += 1;
            }
        }
        assert!(keys.len() <= 64, "{name}: {}", keys.len());
        if algorithm == Algorithm::TokenBucket {
            // Key 0 owes more than any flood key: it keeps its state.
            assert_eq!(extra, 0, "{name}");
            assert_eq!(
                keys.try_acquire(&0, 1).unwrap_err().wait().unwrap(),
                wait,
                "{name}"
            );
        } else {
            // Equals: key 0 starts again at most once per 64 new keys, with one quota.
            assert!(
                extra <= 2 * (10_000 / 64 + 1),
                "{name}: {extra} more admitted"
            );
        }
        // Once every key is unused again, new keys take the old ones' places: 64 new keys,
        // each tracked with its admission, leave no room for any old one.
        advance(Duration::from_secs(3)).await;
        let fresh = keys.snapshot(&u64::MAX).available;
        for k in 20_000..20_064u64 {
            keys.try_acquire(&k, 1).unwrap();
        }
        assert!(keys.len() <= 64, "{name}: {}", keys.len());
        for k in 20_000..20_064u64 {
            assert_eq!(keys.snapshot(&k).available, fresh - 1, "{name}: key {k}");
        }
        assert_eq!(
            keys.snapshot(&0),
            keys.snapshot(&u64::MAX),
            "{name}: as if unused"
        );
    }
}

#[test]
fn window_state_is_compact() {
    let keys: KeyedBucket<u64> = KeyedBucket::builder(Quota::per_second(10))
        .algorithm(Algorithm::FixedWindow)
        .shards(1)
        .build();
    let rt = runtime();
    rt.block_on(async {
        for k in 0..100_000u64 {
            keys.try_acquire(&k, 1).unwrap();
        }
    });
    let per_key = keys.allocated_bytes() as f64 / keys.len() as f64;
    // 24-byte slots, a table 1/2 to 3/4 full.
    assert!((32.0..=48.5).contains(&per_key), "{per_key} bytes per key");
    assert_eq!(keys.algorithm(), Algorithm::FixedWindow);
}
