//! An axum server that limits each client IP address, answering 429 over the limit.
//!
//! ```text
//! cargo run --example axum_per_ip --features axum
//! for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/; done
//! ```
//!
//! Each address may send 2 requests per second, with bursts of 3: the fourth request above
//! prints `429`. [`PeerIp`] reads the connection's address from axum's `ConnectInfo`, which
//! the app only gets when served with `into_make_service_with_connect_info`. Served without
//! it, every request answers `500`: a per-IP limit never silently becomes one shared bucket.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tower_throttle::extract::PeerIp;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Quota, RejectLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    // 429 + Retry-After + RateLimit fields; a request without a peer address (served
    // without ConnectInfo: a wiring mistake) answers 500.
    let limit = RejectLayer::keyed(
        KeyedBucket::new(Quota::per_second(2).burst(3)),
        PeerIp::new(),
    );
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
