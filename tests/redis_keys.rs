//! Key names of a keyed Redis limit: golden names for fixed inputs (any change of the key
//! scheme fails here), and one limit for a key whether it is reached through `RedisKeyed` or
//! through a layer.
#![cfg(feature = "redis")]

mod redis_support;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use http::{Request, Response, StatusCode};
use redis_support::{redis_url, unique_prefix};
use tower::{service_fn, Layer, ServiceExt};
use tower_throttle::extract::{HeaderKey, KeyDigest, KeyExtractor, PeerIp, StableKey};
use tower_throttle::redis::RedisKeyed;
use tower_throttle::{KeyedLimit, Quota, RejectLayer};

async fn keyed(prefix: &str, quota: Quota) -> RedisKeyed {
    RedisKeyed::builder(quota)
        .url(redis_url())
        .timeout(std::time::Duration::from_secs(1)) // not 50 ms: a loaded machine is no outage
        .key_prefix(prefix)
        .build()
        .await
        .expect("Redis must be reachable: set TOWER_THROTTLE_REDIS_URL")
}

#[tokio::test]
async fn golden_key_names() {
    let k = keyed("golden", Quota::per_second(1)).await;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    // SHA-1 of the canonical bytes, first 16 bytes, hex; `v1` is the scheme.
    let cases: [(String, &str); 8] = [
        (k.redis_key("alice"), "522b276a356bdf39013dfabea2cd43e1"),
        (
            k.redis_key(String::from("alice")),
            "522b276a356bdf39013dfabea2cd43e1",
        ),
        (
            k.redis_key(&b"alice"[..]),
            "522b276a356bdf39013dfabea2cd43e1",
        ),
        (k.redis_key(42u64), "d2c50949a6763cb13f4fab896fe67865"),
        (k.redis_key(-1i32), "d9be6524a5f5047db5866813acf32778"),
        (k.redis_key(7usize), "67ef7f7d2fcdd3766db20eaf75bfc677"),
        (
            k.redis_key(ip("192.0.2.1")),
            "4b5106bca5e11b89cf8f4d81a97a6f78",
        ),
        (
            k.redis_key(ip("2001:db8::1")),
            "d744a7bc2d153d099dd70aaf417c161d",
        ),
    ];
    for (name, digest) in cases {
        assert_eq!(name, format!("golden:v1:{{{digest}}}"));
    }
    // IPv4 and its IPv4-mapped IPv6 form are one key.
    assert_eq!(
        k.redis_key(ip("192.0.2.1")),
        k.redis_key(ip("::ffff:192.0.2.1"))
    );
    // The empty key: SHA-1 of nothing.
    assert_eq!(
        k.redis_key(""),
        "golden:v1:{da39a3ee5e6b4b0d3255bfef95601890}"
    );
    // A header value is keyed by the digest of its bytes: the name of the value itself.
    let req = Request::builder()
        .header("x-api-key", "alice")
        .body(())
        .unwrap();
    let digest: KeyDigest = HeaderKey::x_api_key().extract(&req).unwrap();
    assert_eq!(k.redis_key(digest), k.redis_key("alice"));
    assert_eq!(digest, "alice".key_digest());
}

fn ok() -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    service_fn(|_: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) })
}

fn by_user(req: &Request<String>) -> Option<String> {
    Some(req.headers().get("x-user")?.to_str().ok()?.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_through_redis_keyed_and_through_the_layers_is_one_limit() {
    let prefix = unique_prefix("one-name");
    let quota = Quota::per_minute(3).burst(3);
    let direct = keyed(&prefix, quota).await;

    // Two tokens of alice's three spent directly…
    direct.try_acquire("alice", 2).await.unwrap();
    // …leave one for a layer keyed by a `String` extractor…
    let by_string = RejectLayer::keyed(
        KeyedLimit::<String>::from(keyed(&prefix, quota).await),
        by_user,
    )
    .layer(ok());
    let req = || {
        Request::builder()
            .header("x-user", "alice")
            .header("x-api-key", "alice")
            .body(String::new())
            .unwrap()
    };
    let resp = by_string.clone().oneshot(req()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = by_string.oneshot(req()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // …and a layer keyed by the header's digest sees the same, empty limit.
    let by_header = RejectLayer::keyed(
        KeyedLimit::<KeyDigest>::from(keyed(&prefix, quota).await),
        HeaderKey::x_api_key(),
    )
    .layer(ok());
    let resp = by_header.oneshot(req()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // The same through another handle, asked with a `String` key.
    let shared = keyed(&prefix, quota).await;
    let refused = shared.try_acquire("alice".to_owned(), 1).await.unwrap_err();
    assert!(
        refused.wait().unwrap() > std::time::Duration::ZERO,
        "{refused:?}"
    );
    shared.try_acquire("bob".to_owned(), 1).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_address_through_the_layer_is_named_as_through_redis_keyed() {
    let prefix = unique_prefix("peer-name");
    let quota = Quota::per_minute(1).burst(1);
    let direct = keyed(&prefix, quota).await;
    let addr: SocketAddr = "192.0.2.7:4000".parse().unwrap();
    direct.try_acquire(addr.ip(), 1).await.unwrap();
    let layer = RejectLayer::keyed(
        KeyedLimit::<IpAddr>::from(keyed(&prefix, quota).await),
        PeerIp::new(),
    )
    .layer(ok());
    let mut req = Request::new(String::new());
    req.extensions_mut().insert(addr);
    let resp = layer.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
}
