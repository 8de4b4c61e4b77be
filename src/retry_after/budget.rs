//! [`RetryBudget`]: retries as a fraction of requests, so a failing upstream cannot trigger a
//! retry storm.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Caps retries of errors and 5xx responses at a fraction of requests.
///
/// Every request deposits `ratio` of a retry; every retry withdraws one. The balance starts
/// at, and never exceeds, `reserve` retries: a long healthy run cannot save up a storm. Shared
/// by every clone of the layer. Push-back retries (429 / 503 with a cooldown) do not draw on
/// the budget: they are already held by the shared bucket's pause.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// Balance in millionths of a retry.
    balance: Arc<AtomicI64>,
    deposit: i64,
    cap: i64,
}

const UNIT: i64 = 1_000_000;

impl RetryBudget {
    /// Allow retries up to `ratio` × requests (clamped to `[0, 1000]`), with `reserve` retries
    /// available up front and at most.
    pub fn new(ratio: f64, reserve: u32) -> Self {
        let ratio = if ratio.is_finite() {
            ratio.clamp(0.0, 1000.0)
        } else {
            0.0
        };
        let cap = i64::from(reserve) * UNIT;
        RetryBudget {
            balance: Arc::new(AtomicI64::new(cap)),
            deposit: (ratio * UNIT as f64) as i64,
            cap: cap.max((ratio * UNIT as f64) as i64),
        }
    }

    pub(crate) fn deposit(&self) {
        let _ = self
            .balance
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some((b + self.deposit).min(self.cap))
            });
    }

    pub(crate) fn withdraw(&self) -> bool {
        self.balance
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b >= UNIT).then_some(b - UNIT)
            })
            .is_ok()
    }
}

impl Default for RetryBudget {
    /// 20 % of requests, 10 retries in reserve.
    fn default() -> Self {
        RetryBudget::new(0.2, 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_then_ratio() {
        let b = RetryBudget::new(0.5, 2);
        assert!(b.withdraw() && b.withdraw());
        assert!(!b.withdraw());
        b.deposit();
        assert!(!b.withdraw(), "half a retry is not a retry");
        b.deposit();
        assert!(b.withdraw());
        for _ in 0..1000 {
            b.deposit();
        }
        assert!(b.withdraw() && b.withdraw());
        assert!(!b.withdraw(), "saved up beyond the reserve");
        let none = RetryBudget::new(f64::NAN, 0);
        none.deposit();
        assert!(!none.withdraw());
    }
}
