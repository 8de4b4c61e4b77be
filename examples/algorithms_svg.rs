//! Draws `docs/algorithms.svg`: admissions over time for each algorithm under the same bursty
//! arrivals (3 bursts of 12 requests), at 4 per second (burst 4 for the token bucket).
//!
//! ```text
//! cargo run --example algorithms_svg
//! ```

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower_throttle::{Algorithm, Bucket, Quota};

const SPAN: f64 = 8.0; // seconds drawn
const BURSTS: [(u64, usize); 3] = [(0, 12), (3_000, 12), (3_500, 6)];

/// Admission times (seconds) of the bursty arrivals through one bucket, on a paused clock.
fn admissions(algorithm: Algorithm) -> (Vec<f64>, Vec<f64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async move {
        // Start mid-window, as a real client would.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let bucket = Bucket::builder(Quota::per_second(4).burst(4))
            .algorithm(algorithm)
            .build();
        let start = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut arrivals = Vec::new();
        let mut tasks = Vec::new();
        for (at_ms, n) in BURSTS {
            tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
            for _ in 0..n {
                arrivals.push(at_ms as f64 / 1000.0);
                let (b, log) = (bucket.clone(), log.clone());
                tasks.push(tokio::spawn(async move {
                    b.acquire(1).await.expect("cost 1 fits");
                    log.lock().unwrap().push(start.elapsed().as_secs_f64());
                }));
            }
        }
        for t in tasks {
            t.await.expect("task");
        }
        let adm = log.lock().unwrap().clone();
        (arrivals, adm)
    })
}

fn main() {
    let rows = [
        ("token bucket", Algorithm::TokenBucket),
        ("leaky bucket", Algorithm::leaky_bucket(100)),
        ("fixed window", Algorithm::FixedWindow),
        ("sliding window", Algorithm::SlidingWindow),
        ("sliding log", Algorithm::SlidingLog),
    ];
    let (w, left, row_h, top) = (900.0, 130.0, 56.0, 40.0);
    let x = |t: f64| left + (w - left - 20.0) * (t / SPAN);
    let h = top + row_h * (rows.len() as f64 + 1.0) + 40.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="13">"##
    );
    let _ = writeln!(svg, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        svg,
        r##"<text x="{left}" y="22" font-size="15">Admissions over time, 4 per second (token bucket: burst 4), same bursty arrivals</text>"##
    );
    let (arrivals, _) = admissions(Algorithm::TokenBucket);
    let mut all = vec![("arrivals", arrivals)];
    for (name, algo) in rows {
        all.push((name, admissions(algo).1));
    }
    for (i, (name, times)) in all.iter().enumerate() {
        let y = top + row_h * i as f64 + row_h / 2.0;
        let _ = writeln!(
            svg,
            r##"<text x="10" y="{}" >{name}</text><line x1="{left}" x2="{}" y1="{y}" y2="{y}" stroke="#ccc"/>"##,
            y + 4.0,
            w - 20.0
        );
        let color = if i == 0 { "#888" } else { "#1f6feb" };
        let mut stacked: std::collections::BTreeMap<i64, u32> = Default::default();
        for &t in times.iter().filter(|t| **t <= SPAN) {
            let k = stacked.entry((t * 1000.0) as i64).or_default();
            let dy = f64::from(*k) * 3.0;
            *k += 1;
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="{color}" stroke-width="2"/>"##,
                x(t),
                y - 14.0 - dy.min(10.0),
                y + 14.0
            );
        }
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" fill="#555" font-size="11">{} admitted</text>"##,
            w - 110.0,
            y - 16.0,
            times.len()
        );
    }
    let axis_y = top + row_h * all.len() as f64 + 4.0;
    for s in 0..=SPAN as u32 {
        let xs = x(f64::from(s));
        let _ = writeln!(
            svg,
            r##"<line x1="{xs}" x2="{xs}" y1="{top}" y2="{axis_y}" stroke="#eee"/><text x="{}" y="{}" fill="#555">{s} s</text>"##,
            xs - 8.0,
            axis_y + 16.0
        );
    }
    svg.push_str("</svg>\n");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/algorithms.svg");
    std::fs::write(path, svg).expect("write docs/algorithms.svg");
    println!("wrote {path}");
}
