//! [`Counters`]: an [`Observer`] that counts with atomics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::{Ignored, Observer};

/// Counts what it observes; [`get`](Counters::get) reads the totals.
#[derive(Debug, Default)]
pub struct Counters {
    admitted: AtomicU64,
    delayed: AtomicU64,
    refused: AtomicU64,
    dry_run_refused: AtomicU64,
    paused: AtomicU64,
    waited_ns: AtomicU64,
    tokens: AtomicU64,
    ignored: AtomicU64,
    /// The last rate reported, `f64` bits (0: none yet).
    rate: AtomicU64,
}

/// Totals read from [`Counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Counts {
    /// Admissions (requests, not tokens).
    pub admitted: u64,
    /// Admissions that had to wait.
    pub delayed: u64,
    /// Refusals, dry-run ones included.
    pub refused: u64,
    /// Refusals a dry run let through.
    pub dry_run_refused: u64,
    /// Pauses.
    pub paused: u64,
    /// Time spent waiting, all admissions together.
    pub waited: Duration,
    /// Tokens available at the last report.
    pub tokens: u64,
    /// Values read from Redis and ignored ([`Ignored`]).
    pub ignored: u64,
}

impl Counters {
    /// The bucket's rate at the last report, tokens per second; `None` before the rate
    /// first changed.
    pub fn rate(&self) -> Option<f64> {
        let bits = self.rate.load(Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    /// The totals so far.
    pub fn get(&self) -> Counts {
        Counts {
            admitted: self.admitted.load(Relaxed),
            delayed: self.delayed.load(Relaxed),
            refused: self.refused.load(Relaxed),
            dry_run_refused: self.dry_run_refused.load(Relaxed),
            paused: self.paused.load(Relaxed),
            waited: Duration::from_nanos(self.waited_ns.load(Relaxed)),
            tokens: self.tokens.load(Relaxed),
            ignored: self.ignored.load(Relaxed),
        }
    }
}

impl Observer for Counters {
    fn ignored(&self, _what: Ignored) {
        self.ignored.fetch_add(1, Relaxed);
    }

    fn admitted(&self, _tokens: u32, waited: Duration) {
        self.admitted.fetch_add(1, Relaxed);
        if !waited.is_zero() {
            self.delayed.fetch_add(1, Relaxed);
            let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
            self.waited_ns.fetch_add(ns, Relaxed);
        }
    }

    fn refused(&self, _tokens: u32, _retry_after: Duration, dry_run: bool) {
        self.refused.fetch_add(1, Relaxed);
        if dry_run {
            self.dry_run_refused.fetch_add(1, Relaxed);
        }
    }

    fn paused(&self, _cooldown: Duration) {
        self.paused.fetch_add(1, Relaxed);
    }

    fn tokens(&self, available: u32) {
        self.tokens.store(u64::from(available), Relaxed);
    }

    fn rate(&self, per_second: f64) {
        self.rate.store(per_second.to_bits(), Relaxed);
    }
}
