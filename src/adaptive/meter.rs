//! [`Meter`]: the successes of the last second.

use std::time::Duration;

use tokio::time::Instant;

/// Successes counted in bins of `1 / BINS` s over the last second, from an instant on (the
/// start, or the end of the last cooldown: a cooldown's silence says nothing of the rate).
#[derive(Debug)]
pub(super) struct Meter {
    origin: Instant,
    /// Bin `i` of the ring counts the successes of bin number `n ≡ i (mod BINS)`.
    bins: [u32; BINS],
    /// The number of the latest bin counted (since `origin`).
    head: u64,
    /// Measure only over time after this instant.
    pub(super) from: Instant,
}

/// Bins of the success meter: one second in 50 ms steps.
const BINS: usize = 20;
const BIN: Duration = Duration::from_millis(50);

impl Meter {
    pub(super) fn new(now: Instant) -> Self {
        Meter {
            origin: now,
            bins: [0; BINS],
            head: 0,
            from: now,
        }
    }

    fn bin(&self, at: Instant) -> u64 {
        (at.saturating_duration_since(self.origin).as_nanos() / BIN.as_nanos()) as u64
    }

    /// Move the ring up to the bin of `now`, emptying the bins it passes.
    fn advance(&mut self, now: Instant) {
        let bin = self.bin(now);
        if bin > self.head {
            for n in (self.head + 1)..=bin.min(self.head + BINS as u64) {
                self.bins[(n % BINS as u64) as usize] = 0;
            }
            self.head = bin;
        }
    }

    pub(super) fn record(&mut self, now: Instant) {
        self.advance(now);
        let i = (self.head % BINS as u64) as usize;
        self.bins[i] = self.bins[i].saturating_add(1);
    }

    /// Successes per second over the last second, if all of it lies after `from`.
    pub(super) fn rate(&mut self, now: Instant) -> Option<f64> {
        if now.saturating_duration_since(self.from) < BIN * BINS as u32 {
            return None;
        }
        self.advance(now);
        Some(self.bins.iter().map(|n| f64::from(*n)).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_meter_counts_the_last_whole_second_after_its_start() {
        let t0 = Instant::now();
        let mut meter = Meter::new(t0);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        for n in 0..150 {
            meter.record(ms(10 * n)); // 100 a second for 1.5 s
        }
        assert_eq!(meter.rate(ms(999)), None);
        let rate = meter.rate(ms(1_500)).unwrap();
        assert!((95.0..=105.0).contains(&rate), "{rate}");
        // Nothing for 3 s: the ring empties.
        assert_eq!(meter.rate(ms(4_500)), Some(0.0));
        // A cooldown's silence is not measured: a whole second after its end first.
        meter.from = ms(5_000);
        assert_eq!(meter.rate(ms(5_500)), None);
        meter.record(ms(5_600));
        assert_eq!(meter.rate(ms(6_000)), Some(1.0));
    }
}
