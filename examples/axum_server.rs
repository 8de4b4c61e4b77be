//! An axum server that limits each API key, caps all keys together, and tells clients where
//! they stand with the rate-limit header fields.
//!
//! ```text
//! cargo run --example axum_server -- [--addr 127.0.0.1:3000] [--per-key 10] [--global 1000]
//! curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/
//! ```
//!
//! Every response carries `RateLimit-Policy`, `RateLimit` and `X-RateLimit-*`; a request over
//! a limit gets `429 Too Many Requests` with `Retry-After`. Requests without a key share one
//! anonymous bucket of the per-key quota. `benches/load/run.sh` puts it under `wrk`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tower_throttle::extract::HeaderKey;
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::{Bucket, Quota, RejectLayer};

/// The app: `GET /` behind a per-API-key limit and a global ceiling.
pub(crate) fn app(per_key: Quota, global: Quota) -> Router {
    let limit = RejectLayer::keyed(KeyedBucket::new(per_key), HeaderKey::x_api_key())
        .global(Bucket::new(global))
        .admitted_headers(true)
        .x_ratelimit_headers(true);
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit)
}

struct Args {
    addr: SocketAddr,
    per_key: u32,
    global: u32,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
        per_key: 10,
        global: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--addr" => args.addr = value.parse().map_err(|e| bad(&e))?,
            "--per-key" => args.per_key = value.parse().map_err(|e| bad(&e))?,
            "--global" => args.global = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args().map_err(|e| {
        format!("{e}\nusage: axum_server [--addr 127.0.0.1:3000] [--per-key 10] [--global 1000]")
    })?;
    let per_key = Quota::try_new(args.per_key, Duration::from_secs(1))?;
    let global = Quota::try_new(args.global, Duration::from_secs(1))?;
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    println!(
        "listening on http://{} ({} per second per x-api-key, {} per second in all)",
        listener.local_addr()?,
        args.per_key,
        args.global
    );
    axum::serve(listener, app(per_key, global)).await?;
    Ok(())
}
