//! [`MetricsObserver`]: report through the `metrics` facade.

use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

use super::{Ignored, Observer};

/// Reports to whatever `metrics` recorder is installed, labelled `limiter = name`:
///
/// | metric | kind |
/// |---|---|
/// | `tower_throttle_admitted_total` | counter |
/// | `tower_throttle_delayed_total` | counter |
/// | `tower_throttle_refused_total` (label `dry_run`) | counter |
/// | `tower_throttle_paused_total` | counter |
/// | `tower_throttle_wait_seconds` | histogram, delayed admissions only |
/// | `tower_throttle_tokens_available` | gauge |
/// | `tower_throttle_rate_per_second` | gauge, the rate enforced (see [`adaptive`](crate::adaptive)) |
/// | `tower_throttle_ignored_total` | counter, values read from Redis and ignored ([`Ignored`]) |
///
/// The handles are registered once, when the observer is made.
#[derive(Debug, Clone)]
pub struct MetricsObserver {
    admitted: Counter,
    delayed: Counter,
    refused: Counter,
    dry_run_refused: Counter,
    paused: Counter,
    wait: Histogram,
    tokens: Gauge,
    rate: Gauge,
    ignored: Counter,
}

impl MetricsObserver {
    /// Register the metrics, labelled `limiter = name`.
    pub fn new(name: &str) -> Self {
        let limiter = [("limiter", name.to_string())];
        let refused = |dry_run: &str| {
            let labels = [
                ("limiter", name.to_string()),
                ("dry_run", dry_run.to_string()),
            ];
            counter!("tower_throttle_refused_total", &labels)
        };
        MetricsObserver {
            admitted: counter!("tower_throttle_admitted_total", &limiter),
            delayed: counter!("tower_throttle_delayed_total", &limiter),
            refused: refused("false"),
            dry_run_refused: refused("true"),
            paused: counter!("tower_throttle_paused_total", &limiter),
            wait: histogram!("tower_throttle_wait_seconds", &limiter),
            tokens: gauge!("tower_throttle_tokens_available", &limiter),
            rate: gauge!("tower_throttle_rate_per_second", &limiter),
            ignored: counter!("tower_throttle_ignored_total", &limiter),
        }
    }
}

impl Observer for MetricsObserver {
    fn admitted(&self, _tokens: u32, waited: Duration) {
        self.admitted.increment(1);
        if !waited.is_zero() {
            self.delayed.increment(1);
            self.wait.record(waited.as_secs_f64());
        }
    }

    fn refused(&self, _tokens: u32, _retry_after: Duration, dry_run: bool) {
        if dry_run {
            self.dry_run_refused.increment(1);
        } else {
            self.refused.increment(1);
        }
    }

    fn paused(&self, _cooldown: Duration) {
        self.paused.increment(1);
    }

    fn tokens(&self, available: u32) {
        self.tokens.set(f64::from(available));
    }

    fn rate(&self, per_second: f64) {
        self.rate.set(per_second);
    }

    fn ignored(&self, _what: Ignored) {
        self.ignored.increment(1);
    }
}
