//! Plans: a free and a pro plan, each a per-second quota stacked on a daily one, chosen per
//! API key, with an expensive route.
//!
//! ```text
//! cargo run --example plans --features axum                  # serve, send a few requests, exit
//! cargo run --example plans --features axum -- --serve 127.0.0.1:3000
//! curl -i -H 'x-api-key: pro-demo-key' http://127.0.0.1:3000/search
//! ```
//!
//! Keys are `x-api-key` values; `pro-demo-key` is on the pro plan and every other key on the
//! free one. A request goes only when every quota of its key's plan has room, and is then
//! charged to all of them. `/search` costs 10, other routes 1. `RateLimit-Policy` lists the
//! plan's quotas, `RateLimit` the tightest; a request without a key is answered 400.

use std::collections::HashMap;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower_throttle::extract::{HeaderKey, KeyDigest};
use tower_throttle::keyed::KeyedBucket;
use tower_throttle::reject::MissingKey;
use tower_throttle::{Algorithm, Plan, Quota, RejectLayer};

fn app() -> Router {
    // Free: 2 a second (bursts of 10) and 100 a day, in fixed windows from UTC midnight.
    // Unnamed, its quotas are "per-key-1s" and "per-key-86400s" in the fields.
    let free = Plan::new(Quota::per_second(2).burst(10))
        .and(Quota::per_day(100))
        .algorithm(Algorithm::FixedWindow);
    let pro = Plan::new(Quota::per_second(20).burst(40))
        .named("pro")
        .and(Quota::per_day(10_000))
        .algorithm(Algorithm::FixedWindow)
        .named("pro-daily");
    // `HeaderKey` keys by a digest of the header's value: map the digests of the API keys.
    let plans: HashMap<KeyDigest, &'static str> =
        HashMap::from([(KeyDigest::of_bytes(b"pro-demo-key"), "pro")]);
    let keyed = KeyedBucket::builder(free)
        .plan("pro", pro)
        .resolve(move |key| plans.get(key).copied())
        .build();
    let limit = RejectLayer::keyed(keyed, HeaderKey::x_api_key())
        .on_missing_key(MissingKey::Reject)
        .cost(|req: &http::Request<_>| if req.uri().path() == "/search" { 10 } else { 1 })
        .admitted_headers(true);
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/search", get(|| async { "results\n" }))
        .layer(limit)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).peekable();
    let serve = args.next_if_eq("--serve").is_some();
    let default = if serve {
        "127.0.0.1:3000"
    } else {
        "127.0.0.1:0"
    };
    let addr = args.next().unwrap_or_else(|| default.into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    let server = tokio::spawn(async move { axum::serve(listener, app()).await });
    if serve {
        return Ok(server.await??);
    }

    // The self-check: a few requests, their status and rate-limit fields.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let requests = [
        ("/", Some("free-demo-key")), // admitted: 9 of the burst of 10 left
        ("/search", Some("free-demo-key")), // 10 more: refused, charged to neither quota
        ("/search", Some("pro-demo-key")), // pro: 30 of 40 left
        ("/", Some("pro-demo-key")),
        ("/", None), // no key: 400
    ];
    for (path, key) in requests {
        let mut req = http::Request::get(format!("http://{addr}{path}"));
        if let Some(key) = key {
            req = req.header("x-api-key", key);
        }
        let res = client.request(req.body(Full::new(Bytes::new()))?).await?;
        println!("GET {path} x-api-key: {}", key.unwrap_or("(none)"));
        println!("  {}", res.status());
        for name in ["ratelimit-policy", "ratelimit", "retry-after"] {
            for value in res.headers().get_all(name) {
                println!("  {name}: {}", value.to_str()?);
            }
        }
    }
    Ok(())
}
