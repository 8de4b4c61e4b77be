//! Push-back over loopback: a hyper client stack against an axum server that rejects with
//! `RateLimitLayer::reject()` (429 + `Retry-After` + `RateLimit-Policy`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::limit::ConcurrencyLimitLayer;
use tower::{ServiceBuilder, ServiceExt};
use tower_throttle::adaptive::Adaptive;
use tower_throttle::{Bucket, Quota, RateLimitLayer, RejectLayer, RetryAfterLayer};

/// A server admitting 40/s, rejecting the rest; counts its 429s. Its burst of 3 lets the
/// requests of a client at exactly its rate through when sockets or a loaded machine's
/// timers bunch them (by up to 50 ms); the `RateLimit-Policy` it states is 40 per second.
async fn server() -> (SocketAddr, Arc<AtomicUsize>) {
    let quota = Quota::per_second(40).burst(3);
    let refused = Arc::new(AtomicUsize::new(0));
    let counted = refused.clone();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RejectLayer::new(Bucket::new(quota)))
        .layer(axum::middleware::map_response(
            move |resp: axum::response::Response| {
                let counted = counted.clone();
                async move {
                    if resp.status() == 429 {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    resp
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, refused)
}

/// `n` requests from 16 workers through the client stack on `bucket`; all must succeed.
async fn run(bucket: &Bucket, addr: SocketAddr, n: usize) {
    let hyper: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let client = ServiceBuilder::new()
        .layer(
            RetryAfterLayer::new(bucket.clone())
                .max_retries(20)
                .budget(None),
        )
        .layer(RateLimitLayer::new(bucket.clone()))
        .layer(ConcurrencyLimitLayer::new(16))
        .service(hyper);
    let left = Arc::new(AtomicUsize::new(n));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (client, left) = (client.clone(), left.clone());
            tokio::spawn(async move {
                while left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let req = http::Request::get(format!("http://{addr}/"))
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    let resp = client.clone().oneshot(req).await.unwrap();
                    assert_eq!(resp.status(), 200);
                    resp.into_body().collect().await.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
}

#[tokio::test]
async fn an_adaptive_client_learns_the_stated_quota_from_the_first_429() {
    let (addr, refused) = server().await;
    let bucket = Bucket::adaptive(Adaptive::new().start(Quota::per_second(100)));
    run(&bucket, addr, 60).await;
    // The 429 states `RateLimit-Policy: "…";q=40;w=1`: the rate is the server's from then on
    // (a little below it, if one more 429 came at exactly 40/s).
    let learned = bucket.learned_rate().unwrap();
    assert!((30.0..=40.0).contains(&learned), "{learned}");
    assert!(bucket.rate() <= 40.0, "{}", bucket.rate());
    let seen = refused.load(Ordering::SeqCst);
    assert!((1..=4).contains(&seen), "{seen} refused");
}

#[tokio::test]
async fn a_client_configured_above_the_server_settles_below_it() {
    let (addr, refused) = server().await;
    let bucket = Bucket::new(Quota::per_second(80).burst(1));
    run(&bucket, addr, 60).await;
    assert!(bucket.rate() <= 40.0, "{}", bucket.rate());
    assert_eq!(bucket.quota(), Quota::per_second(80).burst(1));
    let seen = refused.load(Ordering::SeqCst);
    // A refusal or two while the rate comes down; a client that collapsed would see one per
    // cooldown.
    assert!((1..=6).contains(&seen), "{seen} refused");
}
