//! A client of an OpenAI-compatible chat endpoint that keeps both of its limits: requests
//! and tokens per minute. Each request is charged an estimate (its prompt and `max_tokens`)
//! before it goes and settled from the `usage` of its answer.
//!
//! With no `OPENAI_BASE_URL`, it runs against a local endpoint that meters the way the
//! providers do (200 requests and 100,000 tokens per rolling minute, `429` beyond) and
//! reports what that server saw. With `REDIS_URL` (and the `redis` feature), the limit is
//! kept in Redis: every process that runs it shares the provider's budget.
//!
//! ```text
//! cargo run --example metered_client --features reqwest
//! OPENAI_BASE_URL=https://api.openai.com OPENAI_API_KEY=... RPM=500 TPM=30000 \
//!     cargo run --example metered_client --features reqwest
//! OPENAI_BASE_URL=... REDIS_URL=redis://127.0.0.1:6379 \
//!     cargo run --example metered_client --features reqwest,redis
//! ```

#[path = "../tests/provider/mod.rs"]
mod provider;

use std::time::{Duration, Instant};

use reqwest_middleware::ClientBuilder;
use tower_throttle::reqwest::RateLimitMiddleware;
use tower_throttle::{Algorithm, Bucket, Charge, Cost, Limit, Plan, Quota, Resource};

const WORKERS: u64 = 16;
const RUN: Duration = Duration::from_secs(75);

fn env(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The tokens a request asks for: its prompt (about four bytes a token) and `max_tokens`.
fn estimate(request: &reqwest::Request) -> Cost {
    let body = request
        .body()
        .and_then(|b| b.as_bytes())
        .unwrap_or_default();
    let (prompt, max_tokens) = provider::read_request(body).unwrap_or((0, 0));
    Cost::new().and(
        Resource::TOKENS,
        u32::try_from(prompt + max_tokens).unwrap_or(u32::MAX),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (rpm, tpm) = (env("RPM", 200), env("TPM", 100_000));
    let local = match std::env::var("OPENAI_BASE_URL") {
        Ok(_) => None,
        Err(_) => Some(provider::Provider::new(rpm.into(), tpm.into())),
    };
    let base = match &local {
        Some(server) => format!("http://{}", server.serve().await),
        None => std::env::var("OPENAI_BASE_URL")?,
    };
    let key = std::env::var("OPENAI_API_KEY").unwrap_or_default();

    // The provider's rolling minute, exactly, made a second longer: a request reaches the
    // provider a moment after it leaves, so it leaves the provider's minute that much later.
    let minute = Duration::from_secs(61);
    let plan = Plan::new(Quota::new(rpm, minute))
        .algorithm(Algorithm::SlidingLog)
        .and(Quota::new(tpm, minute))
        .counting(Resource::TOKENS)
        .algorithm(Algorithm::SlidingLog);
    let limit: Limit = match std::env::var("REDIS_URL") {
        #[cfg(feature = "redis")]
        Ok(url) => tower_throttle::redis::RedisBucket::builder(plan)
            .url(url)
            .key_prefix("metered-client")
            .key("chat-completions")
            .build()
            .await?
            .into(),
        _ => Bucket::new(plan).into(),
    };
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RateLimitMiddleware::new(limit).charge(estimate))
        .build();

    let start = Instant::now();
    let end = tokio::time::Instant::now() + RUN;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (client, url, key) = (
                client.clone(),
                format!("{base}/v1/chat/completions"),
                key.clone(),
            );
            tokio::spawn(async move {
                let (mut ok, mut refused, mut tokens) = (0u64, 0u64, 0u64);
                let mut i = w;
                loop {
                    i += WORKERS;
                    let prompt = 100 + i * 2_654_435_761 % 3_901;
                    let body = provider::request_body(prompt, 100 + i * 40_503 % 901);
                    let send = client.post(&url).bearer_auth(&key).body(body).send();
                    // A request still waiting for its turn at the end is dropped: it was
                    // charged nothing.
                    let response = match tokio::time::timeout_at(end, send).await {
                        Err(_) => break,
                        Ok(Ok(response)) => response,
                        Ok(Err(e)) => {
                            eprintln!("{e}");
                            continue;
                        }
                    };
                    if !response.status().is_success() {
                        refused += 1;
                        continue;
                    }
                    // Take the charge before the body consumes the response.
                    let charge = response.extensions().get::<Charge>().cloned();
                    let used = provider::total_tokens(&response.bytes().await.unwrap_or_default());
                    if let (Some(charge), Some(used)) = (charge, used) {
                        charge.settle(Cost::new().and(Resource::TOKENS, used));
                        tokens += u64::from(used);
                    }
                    ok += 1;
                }
                (ok, refused, tokens)
            })
        })
        .collect();
    let (mut ok, mut refused, mut tokens) = (0, 0, 0);
    for w in workers {
        let (o, r, t) = w.await?;
        (ok, refused, tokens) = (ok + o, refused + r, tokens + t);
    }
    println!(
        "{WORKERS} workers for {:.0} s against {rpm} requests and {tpm} tokens per minute",
        start.elapsed().as_secs_f64()
    );
    println!("answered    {ok}, refused {refused}");
    println!("tokens      {tokens}: the first minute's budget at once, then as it frees");
    if let Some(server) = local {
        println!("the server  refused {}", server.seen().refused.len());
    }
    Ok(())
}
