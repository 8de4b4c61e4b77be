//! Exponential backoff with jitter, and the additive jitter put on top of a server's cooldown.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How the exponential backoff of transport errors and 5xx responses is randomised.
///
/// With `d = min(max, base · 2^retry)`:
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// Exactly `d`.
    None,
    /// Uniform in `[0, d]` (the default: spreads retries the most).
    #[default]
    Full,
    /// `d/2` plus uniform in `[0, d/2]`.
    Equal,
    /// Uniform in `[base, 3 × previous delay]`, capped at `max`.
    Decorrelated,
}

/// Exponential backoff: `base · 2^retry`, capped at `max`, randomised by a [`Jitter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) base: Duration,
    pub(crate) max: Duration,
    pub(crate) jitter: Jitter,
}

impl Default for Backoff {
    /// 100 ms doubling up to 10 s, full jitter.
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// Backoff from `base`, doubling per retry up to `max`.
    pub(crate) fn new(base: Duration, max: Duration, jitter: Jitter) -> Self {
        Backoff {
            base,
            max: max.max(base),
            jitter,
        }
    }

    /// The delay before retry number `retry` (0 for the first), given the previous delay.
    pub(crate) fn delay(&self, retry: u32, previous: Duration) -> Duration {
        let exp = self
            .base
            .checked_mul(1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(self.max)
            .min(self.max);
        match self.jitter {
            Jitter::None => exp,
            Jitter::Full => uniform(exp),
            Jitter::Equal => exp / 2 + uniform(exp - exp / 2),
            Jitter::Decorrelated => {
                let hi = previous.max(self.base).saturating_mul(3).min(self.max);
                self.base + uniform(hi.saturating_sub(self.base))
            }
        }
    }
}

/// Uniform in `[0, max]`.
pub(crate) fn uniform(max: Duration) -> Duration {
    let span = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if span == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(random() % span.saturating_add(1).max(span))
}

/// xorshift64*, one state per thread, seeded from the standard library's random hasher keys.
fn random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(RandomState::new().build_hasher().finish() | 1);
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_and_capped() {
        let b = Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(1),
            Jitter::None,
        );
        let d: Vec<_> = (0..6).map(|r| b.delay(r, Duration::ZERO)).collect();
        assert_eq!(
            d,
            [100, 200, 400, 800, 1000, 1000].map(Duration::from_millis)
        );
        assert_eq!(b.delay(u32::MAX, Duration::ZERO), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_in_range() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for jitter in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
            let b = Backoff::new(base, max, jitter);
            for retry in 0..8 {
                for _ in 0..200 {
                    let d = b.delay(retry, Duration::from_millis(300));
                    assert!(d <= max, "{jitter:?} {d:?}");
                    let exp = (base * 2u32.pow(retry)).min(max);
                    match jitter {
                        Jitter::Equal => assert!(d >= exp / 2),
                        Jitter::Decorrelated => assert!(d >= base),
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(uniform(Duration::ZERO), Duration::ZERO);
        assert!(uniform(Duration::MAX) <= Duration::MAX);
    }
}
