//! Worker processes: the parent test runs its own test binary again, one process per
//! worker, with a spec in an environment variable; each worker prints one `REPORT` line of
//! `name=value` fields.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the UNIX epoch: the clock all processes share.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Sleep until the wall-clock instant `us` (µs since the epoch).
pub async fn until_unix(us: u64) {
    let now = unix_us();
    if us > now {
        tokio::time::sleep(Duration::from_micros(us - now)).await;
    }
}

/// Sleep until the UNIX instant `us` (µs) and return it on tokio's clock: a process that
/// started late gets an instant in its past, so that every process's runs end at the same
/// wall-clock instant.
pub async fn shared_start(us: u64) -> tokio::time::Instant {
    until_unix(us).await;
    let late = Duration::from_micros(unix_us().saturating_sub(us));
    let now = tokio::time::Instant::now();
    now.checked_sub(late).unwrap_or(now)
}

/// Start the test `entry` of this binary in a new process, with `env_var = spec`.
pub fn spawn(entry: &str, env_var: &str, spec: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", entry, "--nocapture", "--test-threads", "1"])
        .env(env_var, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a worker process")
}

/// Wait for a worker and parse its `REPORT` line.
pub fn report(child: Child) -> HashMap<String, u64> {
    report_and_values(child).0
}

/// Wait for a worker; its `REPORT` fields and the numbers of its `VALUES` line.
pub fn report_and_values(child: Child) -> (HashMap<String, u64>, Vec<u64>) {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let values = stdout
        .lines()
        .find_map(|l| l.split_once("VALUES ").map(|(_, r)| r.to_owned()))
        .map(|r| r.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_default();
    assert!(out.status.success(), "worker failed: {stdout}");
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("REPORT ").map(|(_, r)| r.to_owned()))
        .unwrap_or_else(|| panic!("no report from a worker: {stdout}"));
    let fields = line
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let v = v
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("bad report {line}"));
            (k.to_owned(), v)
        })
        .collect();
    (fields, values)
}

/// Print a list of numbers (in a worker), before its report.
pub fn print_values(values: &[u64]) {
    let line: Vec<String> = values.iter().map(u64::to_string).collect();
    println!("VALUES {}", line.join(","));
}

/// Print a report line (in a worker).
pub fn print_report(fields: &[(&str, u64)]) {
    let line: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("REPORT {}", line.join(" "));
}
