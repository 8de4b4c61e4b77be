//! Waiting with priorities against first come, first served, per admission, at 20,000
//! waiters: the same bucket and queue, every waiter in one class (the FIFO line) or spread
//! over the three classes (weighted fair shares), in the same run.
//!
//! A bucket of 1000/s, burst 1, emptied; 20,000 tasks each wait for one `acquire(1)` on a
//! current-thread runtime whose clock is paused (timers fire at once, so only the CPU of
//! queueing, choosing the head, handing over and waking is measured). The thread's CPU time
//! is read from `/proc/thread-self/schedstat` around the run, divided by the admissions.
//!
//! ```text
//! cargo bench --bench priority
//! ```

use tower_throttle::{Bucket, Priority, Quota};

const WAITERS: usize = 20_000;
const ROUNDS: usize = 7;

/// CPU nanoseconds of the calling thread.
fn own_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat")
}

/// CPU ns per admission with `WAITERS` waiters of the classes `classes` gives in turn.
fn run(classes: &[Priority]) -> f64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let bucket = Bucket::new(Quota::per_second(1000).burst(1));
        while bucket.try_acquire(1).is_ok() {}
        let before = own_cpu_ns();
        let tasks: Vec<_> = (0..WAITERS)
            .map(|i| {
                let (bucket, p) = (bucket.clone(), classes[i % classes.len()]);
                tokio::spawn(async move { bucket.acquire(1).priority(p).await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        (own_cpu_ns() - before) as f64 / WAITERS as f64
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let fifo = [Priority::Normal];
    let mixed = [Priority::Critical, Priority::Normal, Priority::Background];
    // `priority one` or `priority three`: one run, for an instruction counter.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let single = match args.first().map(String::as_str) {
        Some("one") => Some(&fifo[..]),
        Some("three") => Some(&mixed[..]),
        _ => None,
    };
    if let Some(classes) = single {
        println!("{:.0} CPU ns per admission", run(classes));
        return;
    }
    let (mut one, mut three, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (a, b) = (run(&fifo), run(&mixed));
        one.push(a);
        three.push(b);
        ratios.push(b / a);
    }
    println!("{WAITERS} waiters, 1000/s burst 1, paused clock, median of {ROUNDS} rounds\n");
    println!("| line | CPU ns per admission |");
    println!("|---|---:|");
    println!(
        "| one class (first come, first served) | {:.0} |",
        median(one)
    );
    println!(
        "| three classes, weights 6 : 3 : 1 | {:.0} |",
        median(three)
    );
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    println!(
        "\nthree classes / one class: median {:.2}×, range {lo:.2}–{hi:.2}×",
        median(ratios)
    );
}
