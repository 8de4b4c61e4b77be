//! An axum server that limits each client IP address, answering 429 over the limit.
//!
//! ```text
//! cargo run --example axum_per_ip --features axum
//! for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/; done
//! ```
//!
//! Each address may send 2 requests per second, with bursts of 3: the fourth request above
//! prints `429`. [`PeerIp`] reads the connection's address from axum's `ConnectInfo`, which
//! the app only gets when served with `into_make_service_with_connect_info`. A request
//! without an address is refused with `400` (`MissingKey::Reject`) rather than sharing one
//! bucket with every other such request.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tower_throttle::extract::PeerIp;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::reject::MissingKey;
use tower_throttle::{Quota, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let limit = RateLimitLayer::keyed(
        KeyedBucket::new(Quota::per_second(2).burst(3)),
        PeerIp::new(),
    )
    .on_missing_key(MissingKey::Reject) // no peer address: a wiring mistake, answer 400
    .reject(); // 429 + Retry-After + RateLimit fields
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "listening on http://{}: 2 requests/s per IP, bursts of 3",
        listener.local_addr()?
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
