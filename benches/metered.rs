//! A metered API for two minutes: 8, 16 and 32 workers against a provider of 200 requests
//! and 100,000 tokens per rolling minute (`tests/provider`), prompts of 100 to 4,000 tokens
//! asking for 100 to 1,000 more, answers of varied length. Two clients per row, in the same
//! run, each behind `RetryAfterMiddleware` (three retries): one charged requests and
//! tokens and settled from the answer's `usage`; one limited to the same requests per minute
//! alone, as clients without a token budget are. Prints, per client, the share of the token
//! budget used in the second minute (the first spends a fresh minute's budget at once) and
//! the share of requests answered `429`.
//!
//! ```text
//! cargo bench --bench metered --features reqwest
//! ```

#[path = "../tests/provider/mod.rs"]
mod provider;

use std::sync::Arc;
use std::time::Duration;

use provider::Provider;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tokio::time::Instant;
use tower_throttle::reqwest::{RateLimitMiddleware, RetryAfterMiddleware};
use tower_throttle::{Algorithm, Bucket, Charge, Cost, Plan, Quota, Resource, RetryAfterLayer};

const RPM: u32 = 200;
const TPM: u32 = 100_000;
const RUN: Duration = Duration::from_secs(120);

fn tokens(n: u32) -> Cost {
    Cost::new().and(Resource::TOKENS, n)
}

fn client(limit: &Bucket, charged: bool) -> ClientWithMiddleware {
    let rate_limit = RateLimitMiddleware::new(limit.clone());
    let rate_limit = match charged {
        true => rate_limit.charge(provider::estimate),
        false => rate_limit,
    };
    ClientBuilder::new(reqwest::Client::new())
        .with(RetryAfterMiddleware::new(
            RetryAfterLayer::new(limit.clone()).max_retries(3),
        ))
        .with(rate_limit)
        .build()
}

/// Tokens answered in the second minute over the budget, and the share of requests refused.
async fn run(workers: u64, charged: bool) -> (f64, f64) {
    let server = Provider::new(RPM.into(), TPM.into());
    let addr = server.serve().await;
    let minute = Duration::from_secs(61);
    let limit = match charged {
        true => Bucket::new(
            Plan::new(Quota::new(RPM, minute))
                .algorithm(Algorithm::SlidingLog)
                .and(Quota::new(TPM, minute))
                .counting(Resource::TOKENS)
                .algorithm(Algorithm::SlidingLog),
        ),
        false => Bucket::new(Quota::per_minute(RPM).burst(RPM / 10)),
    };
    let client = client(&limit, charged);
    let url = Arc::new(format!("http://{addr}/v1/chat/completions"));
    let start = Instant::now();
    let end = start + RUN;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let mut i = w;
                loop {
                    i += workers;
                    let prompt = 100 + i * 2_654_435_761 % 3_901;
                    let body = provider::request_body(prompt, 100 + i * 40_503 % 901);
                    let send = client.post(url.as_str()).body(body).send();
                    let Ok(sent) = tokio::time::timeout_at(end, send).await else {
                        break;
                    };
                    let Ok(response) = sent else { continue };
                    let charge = response.extensions().get::<Charge>().cloned();
                    let body = response.bytes().await.unwrap_or_default();
                    if let (Some(charge), Some(used)) = (charge, provider::total_tokens(&body)) {
                        charge.settle(tokens(used));
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let seen = server.seen();
    let second = start + Duration::from_secs(60)..end;
    let used: u64 = seen
        .answered
        .iter()
        .filter(|(t, _)| second.contains(t))
        .map(|(_, n)| n)
        .sum();
    let all = seen.answered.len() + seen.refused.len();
    let refused = seen.refused.len() as f64 / all.max(1) as f64;
    (used as f64 / f64::from(TPM), refused)
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists benchmarks; there is nothing to list.
    }
    println!(
        "{RPM} requests and {TPM} tokens per rolling minute, {} s per run, all runs at once",
        RUN.as_secs()
    );
    let rows: Vec<_> = [8, 16, 32]
        .into_iter()
        .flat_map(|w| [(w, true), (w, false)])
        .map(|(w, charged)| (w, charged, tokio::spawn(run(w, charged))))
        .collect();
    println!("| workers | client | token budget used, 2nd minute | requests answered 429 |");
    println!("|---:|---|---:|---:|");
    for (w, charged, row) in rows {
        let (used, refused) = row.await.unwrap();
        let client = match charged {
            true => "requests + tokens, settled",
            false => "requests only",
        };
        println!(
            "| {w} | {client} | {:.1} % | {:.1} % |",
            used * 100.0,
            refused * 100.0
        );
    }
}
