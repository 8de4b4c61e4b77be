//! Metered APIs on a real Redis: a cost per resource decided on every quota in one script
//! run (refused by one, charged to none), settlements given back and owed, and two handles
//! settling on one key.
//!
//! The quotas refill over an hour and the windows have no phase (the sliding log): nothing
//! here depends on where the Redis clock's second or window falls. A settlement goes to
//! Redis in a task: the tests wait for `stats().settlements` to count it, not for time.
#![cfg(feature = "redis")]

mod redis_support;

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use redis_support::{redis_url, unique_prefix};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_throttle::redis::RedisBucket;
use tower_throttle::{Algorithm, Charge, Cost, Denied, Plan, Quota, RateLimitLayer, Resource};

const HOUR: Duration = Duration::from_secs(3600);

fn tokens(n: u32) -> Cost {
    Cost::new().and(Resource::TOKENS, n)
}

/// Tokens alone, no request.
fn only_tokens(n: u32) -> Cost {
    Cost::from(0).and(Resource::TOKENS, n)
}

/// `requests` and `tokens` per hour, each with its hour as burst; the tokens counted by
/// `algorithm`.
fn plan(requests: u32, tokens: u32, algorithm: Algorithm) -> Plan {
    Plan::new(Quota::new(requests, HOUR).burst(requests))
        .and(Quota::new(tokens, HOUR).burst(tokens))
        .counting(Resource::TOKENS)
        .algorithm(algorithm)
}

async fn bucket(prefix: &str, plan: Plan) -> RedisBucket {
    RedisBucket::builder(plan)
        .url(redis_url())
        .key_prefix(prefix)
        .key("metered")
        .build()
        .await
        .expect("connects")
}

/// Wait until `bucket` has `n` settlements done with Redis.
async fn landed(bucket: &RedisBucket, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while bucket.stats().settlements < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "settlement {n} never reached Redis"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn refused(result: Result<Charge, Denied>) -> Duration {
    match result {
        Err(Denied::Throttled(t)) => t.wait(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A request refused for its tokens charges no request, and one refused for its request
/// charges no tokens: on the token bucket and on the sliding log.
#[tokio::test]
async fn a_refusal_by_one_resource_charges_none_of_the_others() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingLog] {
        let limit = bucket(&unique_prefix("metered-atomic"), plan(3, 1_000, algorithm)).await;
        drop(limit.try_charge(tokens(800)).await.unwrap());
        // Refused for its tokens (200 left), not for its request (2 left).
        assert!(refused(limit.try_charge(tokens(300)).await) > Duration::ZERO);
        // Neither was charged: 200 tokens and two requests.
        drop(limit.try_charge(tokens(200)).await.unwrap());
        drop(limit.try_charge(Cost::new()).await.unwrap());
        refused(limit.try_charge(Cost::new()).await);
        refused(limit.try_charge(only_tokens(1)).await);

        let limit = bucket(&unique_prefix("metered-atomic"), plan(1, 1_000, algorithm)).await;
        drop(limit.try_charge(tokens(100)).await.unwrap());
        // Refused for its request: its tokens stay, 900.
        refused(limit.try_charge(tokens(100)).await);
        drop(limit.try_charge(only_tokens(900)).await.unwrap());
        refused(limit.try_charge(only_tokens(1)).await);
    }
}

/// An overestimate comes back, an overrun is owed, a refund gives all back, a second
/// settlement changes nothing, and a charge dropped unsettled keeps its estimate; a charge
/// and a settlement are one round trip each.
#[tokio::test]
async fn settlements_give_back_and_owe_in_redis() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingLog] {
        let limit = bucket(
            &unique_prefix("metered-settle"),
            plan(100, 1_000, algorithm),
        )
        .await;
        let trips = limit.stats().round_trips;
        let charge = limit.try_charge(tokens(600)).await.unwrap();
        assert_eq!(
            limit.stats().round_trips,
            trips + 1,
            "one round trip, every quota"
        );
        refused(limit.try_charge(only_tokens(401)).await);
        assert!(charge.settle(tokens(200)));
        assert!(!charge.settle(tokens(0)), "settled once");
        assert!(!charge.clone().refund());
        landed(&limit, 1).await;
        assert_eq!(
            limit.stats().round_trips,
            trips + 3,
            "a settlement is one more"
        );
        // 800 left: 400 came back.
        refused(limit.try_charge(only_tokens(801)).await);
        let all = limit.try_charge(only_tokens(800)).await.unwrap();
        assert!(all.refund());
        landed(&limit, 2).await;
        assert_eq!(
            limit.stats().settlements,
            2,
            "the second settlement sent nothing"
        );

        // Taken 600 of 800, used 1,000: 200 tokens owed beyond empty.
        let charge = limit.try_charge(tokens(600)).await.unwrap();
        assert!(charge.settle(tokens(1_000)));
        landed(&limit, 3).await;
        let wait = refused(limit.try_charge(only_tokens(1)).await);
        // A token every 3.6 s: the debt's 200 and one more take 12 minutes.
        assert!(wait > Duration::from_secs(600), "{algorithm:?}: {wait:?}");

        // Dropped unsettled, the estimate stands.
        let limit = bucket(&unique_prefix("metered-drop"), plan(100, 1_000, algorithm)).await;
        drop(limit.try_charge(tokens(700)).await.unwrap());
        drop(limit.try_charge(tokens(300)).await.unwrap());
        refused(limit.try_charge(only_tokens(1)).await);
        assert_eq!(limit.stats().settlements, 0);
    }
}

/// Two handles on one key, each charging an estimate of 500 tokens and settling real costs
/// from 50 to 700: the tokens used never exceed the quota plus one underestimate per handle
/// (each waits for its settlement to reach Redis before its next charge), and the
/// overestimates that came back were used (without them, three quarters of the quota).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_settling_on_one_key_stay_within_the_quota() {
    const QUOTA: u32 = 20_000;
    let prefix = unique_prefix("metered-race");
    let plan = Plan::new(Quota::new(10_000, HOUR).burst(10_000))
        .and(Quota::new(QUOTA, HOUR))
        .counting(Resource::TOKENS)
        .algorithm(Algorithm::SlidingLog);
    let workers: Vec<_> = (0..2u32)
        .map(|w| {
            let (prefix, plan) = (prefix.clone(), plan.clone());
            tokio::spawn(async move {
                let limit = bucket(&prefix, plan).await;
                let (mut used, mut settled, mut refusals) = (0u64, 0u64, 0);
                let mut i = w;
                while refusals < 3 {
                    match limit.try_charge(tokens(500)).await {
                        Ok(charge) => {
                            refusals = 0;
                            let actual = 50 + (i * 263) % 651;
                            i += 2;
                            used += u64::from(actual);
                            assert!(charge.settle(tokens(actual)));
                            settled += 1;
                            landed(&limit, settled).await;
                        }
                        Err(Denied::Throttled(_)) => {
                            refusals += 1;
                            tokio::task::yield_now().await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                used
            })
        })
        .collect();
    let mut used = 0;
    for w in workers {
        used += w.await.unwrap();
    }
    let most = u64::from(QUOTA) + 2 * 200;
    assert!(used <= most, "{used} tokens used, at most {most}");
    assert!(
        used >= u64::from(QUOTA) - 2_000,
        "{used}: the refunds were used"
    );
}

/// The waiting layer charges on Redis: the estimate before the request, the settlement
/// from its answer.
#[tokio::test]
async fn the_layer_charges_and_settles_on_redis() {
    let limit = bucket(
        &unique_prefix("metered-layer"),
        plan(100, 1_000, Algorithm::SlidingLog),
    )
    .await;
    let api = service_fn(|_: Request<u32>| async {
        Ok::<_, Infallible>(
            Response::builder()
                .header("x-used", "150")
                .body(())
                .unwrap(),
        )
    });
    let client = ServiceBuilder::new()
        .map_response(|response: Response<()>| {
            let used = response.headers()["x-used"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let charge = response.extensions().get::<Charge>().unwrap();
            assert!(charge.settle(tokens(used)));
            response
        })
        .layer(RateLimitLayer::new(limit.clone()).charge(|r: &Request<u32>| tokens(*r.body())))
        .service(api);
    client.oneshot(Request::new(900)).await.unwrap();
    landed(&limit, 1).await;
    // 150 used of 1,000: 850 left.
    refused(limit.try_charge(only_tokens(851)).await);
    drop(limit.try_charge(only_tokens(850)).await.unwrap());
}

/// Leases count requests: a plan that counts other resources is refused with them.
#[tokio::test]
async fn leases_refuse_plans_of_other_resources() {
    let leased = RedisBucket::builder(Plan::new(Quota::per_second(10)).counting(Resource::TOKENS))
        .url(redis_url())
        .key_prefix(unique_prefix("metered-lease"))
        .key("metered")
        .lease(2)
        .build()
        .await;
    assert!(leased
        .unwrap_err()
        .to_string()
        .contains("count requests alone"));
}

/// `n` tokens for `key` through `svc`.
async fn send<S>(svc: &mut S, key: &str, n: u32) -> S::Response
where
    S: tower::Service<Request<u32>, Error = Infallible>,
{
    let req = Request::builder().header("x-api-key", key).body(n).unwrap();
    svc.ready().await.unwrap().call(req).await.unwrap()
}

/// A keyed limit on Redis counts requests and tokens per key, one script run each: a key
/// refused for its tokens is charged no request and the reverse, behind the rejecting layer
/// too, whose fields state the tokens' policy; another key has its own.
#[tokio::test]
async fn a_keyed_limit_on_redis_counts_each_resource_per_key() {
    use tower_throttle::extract::HeaderKey;
    use tower_throttle::redis::RedisKeyed;
    use tower_throttle::RejectLayer;

    for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingLog] {
        let keyed = RedisKeyed::builder(plan(2, 100, algorithm))
            .url(redis_url())
            .key_prefix(unique_prefix("metered-keyed"))
            .build()
            .await
            .unwrap();
        let api = service_fn(|_: Request<u32>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        });
        let mut svc = ServiceBuilder::new()
            .layer(
                RejectLayer::keyed(keyed.clone(), HeaderKey::x_api_key())
                    .cost_per_resource(|r: &Request<u32>| tokens(*r.body())),
            )
            .service(api);
        assert!(
            send(&mut svc, "a", 80).await.status().is_success(),
            "{algorithm:?}"
        );
        // 20 tokens left: refused for its tokens, and charged no request...
        let refused = send(&mut svc, "a", 30).await;
        assert_eq!(refused.status(), 429, "{algorithm:?}");
        let policies: Vec<_> = refused
            .headers()
            .get_all("ratelimit-policy")
            .iter()
            .collect();
        assert_eq!(
            policies[1],
            "\"per-key-3600s-2\";q=100;w=3600;qu=\"tokens\""
        );
        // ... so the second request still goes, and then none, charged no token.
        assert!(
            send(&mut svc, "a", 20).await.status().is_success(),
            "{algorithm:?}"
        );
        assert_eq!(send(&mut svc, "a", 0).await.status(), 429, "{algorithm:?}");
        assert!(
            send(&mut svc, "b", 100).await.status().is_success(),
            "{algorithm:?}"
        );
    }
}

/// A pause of the tokens holds their quota alone, for every handle on the key: requests
/// without tokens go on, a request of tokens is refused until the end of the pause.
#[tokio::test]
async fn a_pause_of_one_resource_holds_its_quotas_alone_in_every_process() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingLog] {
        let prefix = unique_prefix("metered-pause");
        let (one, two) = (
            bucket(&prefix, plan(100, 1_000, algorithm)).await,
            bucket(&prefix, plan(100, 1_000, algorithm)).await,
        );
        one.pause_resource(&Resource::TOKENS, HOUR).await.unwrap();
        let wait = refused(two.try_charge(tokens(1)).await);
        assert!(
            wait > HOUR - Duration::from_secs(60),
            "{algorithm:?}: {wait:?}"
        );
        drop(
            two.try_charge(tokens(0))
                .await
                .expect("a request alone goes"),
        );
        // The requests' quota untouched but for that request: 99 more, then none.
        for _ in 0..99 {
            drop(one.try_charge(tokens(0)).await.unwrap());
        }
        assert!(one.try_charge(tokens(0)).await.is_err(), "{algorithm:?}");
    }
}

/// The rejecting layer on a single `RedisBucket` counting requests and tokens: refused by
/// one resource, charged to none.
#[tokio::test]
async fn the_rejecting_layer_on_redis_charges_each_resource_or_none() {
    use tower_throttle::RejectLayer;

    let limit = bucket(
        &unique_prefix("metered-reject"),
        plan(2, 100, Algorithm::TokenBucket),
    )
    .await;
    let api =
        service_fn(|_: Request<u32>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    let mut svc = ServiceBuilder::new()
        .layer(RejectLayer::new(limit).cost_per_resource(|r: &Request<u32>| tokens(*r.body())))
        .service(api);
    assert!(send(&mut svc, "a", 80).await.status().is_success());
    let refused = send(&mut svc, "a", 30).await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(send(&mut svc, "a", 20).await.status().is_success());
    assert_eq!(send(&mut svc, "a", 0).await.status(), 429);
}
