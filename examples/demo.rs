//! The main demo: a batch of requests through the client stack
//! (`RetryAfterLayer` → `RateLimitLayer` → concurrency limit → hyper).
//!
//! With no arguments it starts an in-process axum server that enforces its own quota (429 +
//! `Retry-After` above it) and runs a batch against it, with a progress bar and a summary.
//!
//! ```text
//! cargo run --example demo                       # throttled client vs. the local server
//! cargo run --example demo -- --no-throttle      # the same batch without the client limiter
//! cargo run --release --example demo -- --url http://127.0.0.1:8080/ \
//!     --requests 1000 --concurrency 32 --rate 50 --burst 10 --json
//! cargo run --example demo -- --url http://127.0.0.1:8080/ --adaptive   # no --rate needed
//! cargo run --example demo -- --adaptive --duration 20                  # 20 s instead of N
//! ```
//!
//! `--adaptive` discovers the server's rate (`Bucket::adaptive`; `--rate`, if given, is where
//! it starts). Without it the rate configured is a ceiling: the client still settles below
//! a server that pushes back. The progress bar and the summary show the rate in force and the
//! rate learned (the server's limit as estimated, or as stated).
//!
//! With `--json` the last line of stdout is a JSON object: `requests`, `ok` (2xx), `status_429`
//! (429 responses seen, retried ones included), `failed` (requests that ended without a 2xx),
//! `elapsed_s`, `achieved_rps`, `ok_rps` (2xx per second), `allowed_rps` (the ceiling),
//! `rate_rps` (the rate in force at the end), `learned_rps` (or `null`), `p50_ms`, `p99_ms`,
//! and `series`: `bin_s` (0.1) and, per bin of that length from the start, `ok` (2xx responses
//! received in it) and `status_429` (429 responses received in it).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use indicatif::{ProgressBar, ProgressStyle};
use tower::limit::ConcurrencyLimitLayer;
use tower::util::BoxCloneService;
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_throttle::adaptive::Adaptive;
use tower_throttle::{Bucket, Quota, RateLimitLayer, RejectLayer, RetryAfterLayer};

/// Command-line options.
#[derive(Debug)]
struct Options {
    url: Option<String>,
    requests: u64,
    concurrency: usize,
    rate: Option<u32>,
    burst: u32,
    throttle: bool,
    adaptive: bool,
    duration: Option<Duration>,
    json: bool,
}

const USAGE: &str = "usage: demo [--url URL] [--requests N | --duration SECS] [--concurrency C] \
[--rate R] [--burst B] [--adaptive] [--no-throttle] [--json]";

/// The rate without `--rate` (and without `--adaptive`).
const DEFAULT_RATE: u32 = 45;

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        url: None,
        requests: 200,
        concurrency: 32,
        rate: None,
        burst: 10,
        throttle: true,
        adaptive: false,
        duration: None,
        json: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--url" => o.url = Some(value("--url")?),
            "--requests" => o.requests = number(&value("--requests")?, "--requests")?,
            "--concurrency" => o.concurrency = number(&value("--concurrency")?, "--concurrency")?,
            "--rate" => o.rate = Some(number(&value("--rate")?, "--rate")?),
            "--duration" => {
                let secs: f64 = number(&value("--duration")?, "--duration")?;
                o.duration = Some(
                    Duration::try_from_secs_f64(secs)
                        .map_err(|_| format!("--duration: {secs} is not a valid duration"))?,
                );
            }
            "--adaptive" => o.adaptive = true,
            "--burst" => o.burst = number(&value("--burst")?, "--burst")?,
            "--no-throttle" => o.throttle = false,
            "--json" => o.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    Ok(o)
}

fn number<T: std::str::FromStr>(s: &str, name: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{name}: {s:?} is not a valid number"))
}

/// The local server: 50 requests per second, burst 10, enforced with 429 + `Retry-After`.
async fn local_server() -> SocketAddr {
    let quota = Quota::per_second(50).burst(10);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RejectLayer::new(Bucket::new(quota)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("server") });
    addr
}

/// 2xx and 429 responses per [`Series::BIN`] from the start.
struct Series {
    start: Instant,
    bins: Mutex<Vec<[u64; 2]>>,
}

impl Series {
    const BIN: Duration = Duration::from_millis(100);

    fn new() -> Self {
        Self {
            start: Instant::now(),
            bins: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, status: http::StatusCode) {
        let column = match status {
            s if s.is_success() => 0,
            http::StatusCode::TOO_MANY_REQUESTS => 1,
            _ => return,
        };
        let bin = (self.start.elapsed().as_nanos() / Self::BIN.as_nanos()) as usize;
        let mut bins = self.bins.lock().unwrap();
        if bins.len() <= bin {
            bins.resize(bin + 1, [0, 0]);
        }
        bins[bin][column] += 1;
    }

    /// The 429s received so far.
    fn status_429(&self) -> u64 {
        self.bins.lock().unwrap().iter().map(|b| b[1]).sum()
    }

    /// `{"bin_s":…,"ok":[…],"status_429":[…]}`.
    fn json(&self) -> String {
        let bins = self.bins.lock().unwrap();
        let column = |c: usize| {
            let counts: Vec<String> = bins.iter().map(|b| b[c].to_string()).collect();
            counts.join(",")
        };
        format!(
            "{{\"bin_s\":{},\"ok\":[{}],\"status_429\":[{}]}}",
            Self::BIN.as_secs_f64(),
            column(0),
            column(1)
        )
    }
}

type Svc =
    BoxCloneService<http::Request<Full<Bytes>>, http::Response<hyper::body::Incoming>, BoxError>;

/// The client stack. Every attempt's response is recorded, retried 429s included.
fn client(bucket: &Bucket, throttle: bool, concurrency: usize, series: Arc<Series>) -> Svc {
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let counted = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(concurrency))
        .map_response(move |resp: http::Response<hyper::body::Incoming>| {
            series.record(resp.status());
            resp
        })
        .service(hyper);
    let retry = RetryAfterLayer::new(bucket.clone()).max_retries(8);
    if throttle {
        BoxCloneService::new(
            ServiceBuilder::new()
                .layer(retry)
                .layer(RateLimitLayer::new(bucket.clone()))
                .service(counted),
        )
    } else {
        BoxCloneService::new(ServiceBuilder::new().layer(retry).service(counted))
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[tokio::main]
async fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let url: http::Uri = match &o.url {
        Some(u) => match u.parse::<http::Uri>() {
            Ok(uri) if uri.scheme_str() == Some("http") => uri,
            Ok(_) => {
                eprintln!("--url: only http:// URLs are supported");
                std::process::exit(2);
            }
            Err(e) => {
                eprintln!("--url: {e}");
                std::process::exit(2);
            }
        },
        None => format!("http://{}/", local_server().await)
            .parse()
            .expect("local URL"),
    };
    let rate = o.rate.unwrap_or(DEFAULT_RATE);
    let quota =
        match Quota::try_new(rate, Duration::from_secs(1)).and_then(|q| q.try_burst(o.burst)) {
            Ok(q) => q,
            Err(e) => {
                eprintln!("--rate/--burst: {e}");
                std::process::exit(2);
            }
        };
    let bucket = match (o.adaptive, o.rate) {
        (false, _) => Bucket::new(quota),
        (true, None) => Bucket::adaptive(Adaptive::new()),
        (true, Some(_)) => Bucket::adaptive(Adaptive::new().start(quota)),
    };
    let series = Arc::new(Series::new());
    let svc = client(&bucket, o.throttle, o.concurrency, series.clone());

    let bar = if o.json {
        ProgressBar::hidden()
    } else if o.duration.is_some() {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::new(o.requests)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} {msg}").expect("template"),
    );
    let next = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(o.requests as usize)));
    let start = series.start;
    // With --duration: no request starts after the deadline (those started finish).
    let deadline = o.duration.map(|d| start + d);
    let requests = if deadline.is_some() {
        u64::MAX
    } else {
        o.requests
    };
    let workers: Vec<_> = (0..o.concurrency)
        .map(|_| {
            let (svc, url, next, ok) = (svc.clone(), url.clone(), next.clone(), ok.clone());
            let (latencies, bar, series) = (latencies.clone(), bar.clone(), series.clone());
            let bucket = bucket.clone();
            tokio::spawn(async move {
                while deadline.is_none_or(|d| Instant::now() < d)
                    && next.fetch_add(1, Ordering::Relaxed) < requests
                {
                    let req = http::Request::get(url.clone())
                        .body(Full::new(Bytes::new()))
                        .expect("request");
                    let sent = Instant::now();
                    if let Ok(resp) = svc.clone().oneshot(req).await {
                        let success = resp.status().is_success();
                        // Read the body so the connection goes back to the pool.
                        let _ = resp.into_body().collect().await;
                        if success {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    latencies.lock().unwrap().push(sent.elapsed());
                    bar.set_message(format!(
                        "rate {:.1}/s, learned {}, 429s: {}",
                        bucket.rate(),
                        learned(&bucket),
                        series.status_429()
                    ));
                    bar.inc(1);
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
    bar.finish();
    let elapsed = start.elapsed().as_secs_f64();

    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    let (p50, p99) = (percentile(&lat, 0.50), percentile(&lat, 0.99));
    let ok = ok.load(Ordering::Relaxed);
    let status_429 = series.status_429();
    let sent = lat.len() as u64;
    let failed = sent - ok;
    let achieved = sent as f64 / elapsed;
    let ok_rps = ok as f64 / elapsed;
    let allowed = bucket.quota().per_second_f64();
    println!("target        {url}");
    println!(
        "client        {}",
        match (o.throttle, o.adaptive) {
            (false, _) => "no client limiter (--no-throttle)".to_string(),
            (true, true) => "adaptive: discovering the server's rate".to_string(),
            (true, false) => format!(
                "throttled at {allowed:.1} req/s at most, burst {}",
                quota.burst_size()
            ),
        }
    );
    println!("requests      {sent}");
    println!("succeeded     {ok}");
    println!("failed        {failed}");
    println!("429s seen     {status_429}");
    println!("elapsed       {elapsed:.2} s");
    println!("rate          {achieved:.1} req/s achieved, {ok_rps:.1} req/s succeeded");
    if o.throttle {
        println!(
            "client rate   {:.1} req/s at the end (ceiling {allowed:.1}), learned {}",
            bucket.rate(),
            learned(&bucket)
        );
    }
    println!(
        "latency       p50 {:.1} ms, p99 {:.1} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    if o.json {
        println!(
            "{{\"requests\":{sent},\"ok\":{ok},\"status_429\":{status_429},\"failed\":{failed},\"elapsed_s\":{elapsed:.3},\"achieved_rps\":{achieved:.3},\"ok_rps\":{ok_rps:.3},\"allowed_rps\":{allowed:.3},\"rate_rps\":{:.3},\"learned_rps\":{},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"series\":{}}}",
            bucket.rate(),
            bucket
                .learned_rate()
                .map_or("null".to_string(), |r| format!("{r:.3}")),
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            series.json()
        );
    }
}

/// The rate the bucket learned, for display.
fn learned(bucket: &Bucket) -> String {
    bucket
        .learned_rate()
        .map_or("-".to_string(), |r| format!("{r:.1}/s"))
}
