//! [`RetryBudget`]: a shared token balance that stops retries while a server keeps failing, so
//! a failing upstream cannot trigger a retry storm.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Millionths of a token.
const UNIT: u64 = 1_000_000;

/// A balance of retry tokens shared by every clone: events add tokens or take one, and a
/// retry may go out while the balance is above a floor. It stays within `[0, max]`.
///
/// Two settings:
///
/// - [`RetryBudget::new`]`(ratio, reserve)`, for [`RetryAfterLayer::budget`]: retries of
///   errors and 5xx responses as a fraction of requests. Every request deposits `ratio` of a
///   token; a retry takes one whole token and goes out only if there is one. The balance
///   starts at, and never exceeds, `reserve` tokens: a long healthy run cannot save up a
///   storm. Push-back retries (429 / 503 with a cooldown) do not draw on it: they are already
///   held by the shared bucket's pause.
/// - [`RetryBudget::a6`]`(max_tokens, token_ratio)`, for
///   [`GrpcRetryLayer::retry_throttle`](crate::grpc::GrpcRetryLayer::retry_throttle):
///   gRFC A6's retry throttling. The balance starts at `max_tokens`; every failed attempt
///   takes one token (never below zero), every successful one gives back `token_ratio`;
///   while the balance is at or below `max_tokens / 2`, failures are returned without
///   retrying.
///
/// ```
/// use tower_throttle::retry_after::RetryBudget;
///
/// let throttle = RetryBudget::a6(10, 0.1);
/// assert_eq!(throttle.tokens(), 10.0);
/// assert_eq!(RetryBudget::new(0.2, 3).tokens(), 3.0);
/// ```
///
/// [`RetryAfterLayer::budget`]: crate::RetryAfterLayer::budget
#[derive(Clone)]
pub struct RetryBudget {
    /// Millionths of a token.
    balance: Arc<AtomicU64>,
    max: u64,
    /// Given back by a deposit.
    ratio: u64,
    /// A retry may go out while the balance is above this.
    floor: u64,
}

impl RetryBudget {
    /// Allow retries up to `ratio` × requests (clamped to `[0, 1000]`; not a number is 0),
    /// with `reserve` retries available up front and at most.
    pub fn new(ratio: f64, reserve: u32) -> Self {
        let ratio = if ratio.is_finite() {
            (ratio.clamp(0.0, 1000.0) * UNIT as f64) as u64
        } else {
            0
        };
        let reserve = u64::from(reserve) * UNIT;
        RetryBudget {
            balance: Arc::new(AtomicU64::new(reserve)),
            max: reserve.max(ratio),
            ratio,
            floor: UNIT - 1, // at least one whole token
        }
    }

    /// gRFC A6's `maxTokens` and `tokenRatio` (rounded to three decimal places, as A6 reads
    /// it). Typical: `10`, `0.1` — retries stop when failures exceed about 10 % of successes.
    ///
    /// Values A6 does not allow have the meaning they tend to: `max_tokens` of zero allows no
    /// retry; a `token_ratio` that is not finite or rounds to zero gives nothing back, so
    /// retries stop for good once half the tokens are spent.
    pub fn a6(max_tokens: u32, token_ratio: f64) -> Self {
        let max = u64::from(max_tokens) * UNIT;
        let thousandths = if token_ratio.is_finite() {
            (token_ratio.max(0.0) * 1000.0).round()
        } else {
            0.0
        };
        RetryBudget {
            balance: Arc::new(AtomicU64::new(max)),
            max,
            // At most max_tokens: a larger ratio refills to the top in one success anyway.
            ratio: (thousandths * (UNIT / 1000) as f64).min(max as f64) as u64,
            floor: max / 2,
        }
    }

    /// The tokens now (shared by every clone).
    pub fn tokens(&self) -> f64 {
        self.balance.load(Ordering::Acquire) as f64 / UNIT as f64
    }

    /// Whether a retry may go out now: the balance is above the floor.
    #[cfg(feature = "grpc")]
    pub(crate) fn allows_retry(&self) -> bool {
        self.balance.load(Ordering::Acquire) > self.floor
    }

    /// A request (or a successful attempt): `ratio` more, never above the maximum.
    pub(crate) fn deposit(&self) {
        self.update(|b| Some((b + self.ratio).min(self.max)));
    }

    /// A failed attempt: one token less, never below zero.
    #[cfg(feature = "grpc")]
    pub(crate) fn take(&self) {
        self.update(|b| Some(b.saturating_sub(UNIT)));
    }

    /// A retry: one token taken if the balance allows it, and whether it did.
    pub(crate) fn withdraw(&self) -> bool {
        self.update(|b| (b > self.floor).then(|| b.saturating_sub(UNIT)))
    }

    fn update(&self, f: impl FnMut(u64) -> Option<u64>) -> bool {
        self.balance
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, f)
            .is_ok()
    }
}

impl Default for RetryBudget {
    /// 20 % of requests, 10 retries in reserve.
    fn default() -> Self {
        RetryBudget::new(0.2, 10)
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("tokens", &self.tokens())
            .field("max", &(self.max as f64 / UNIT as f64))
            .field("ratio", &(self.ratio as f64 / UNIT as f64))
            .field("floor", &(self.floor as f64 / UNIT as f64))
            .finish()
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
        let generous = RetryBudget::new(2.0, 0);
        assert!(!generous.withdraw());
        generous.deposit();
        assert!(generous.withdraw() && generous.withdraw() && !generous.withdraw());
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn a6_token_arithmetic() {
        let t = RetryBudget::a6(10, 0.1);
        let shared = t.clone();
        for expected in [9.0, 8.0, 7.0, 6.0] {
            shared.take();
            assert_eq!(t.tokens(), expected);
            assert!(t.allows_retry());
        }
        t.take();
        assert_eq!(t.tokens(), 5.0);
        assert!(!t.allows_retry(), "at max/2 retries stop");
        for _ in 0..10 {
            t.take();
        }
        assert_eq!(t.tokens(), 0.0, "never below zero");
        for _ in 0..50 {
            t.deposit();
        }
        assert_eq!(t.tokens(), 5.0);
        assert!(!t.allows_retry());
        t.deposit();
        assert!((t.tokens() - 5.1).abs() < 1e-9);
        assert!(t.allows_retry(), "above max/2 retries resume");
        for _ in 0..1000 {
            t.deposit();
        }
        assert_eq!(t.tokens(), 10.0, "never above max");
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn a6_settings() {
        let none = RetryBudget::a6(0, 1.0);
        assert!(!none.allows_retry(), "no tokens, no retry");
        for odd in [0.0, -1.0, 0.0004, f64::NAN, f64::INFINITY] {
            let t = RetryBudget::a6(2, odd);
            t.take();
            t.take();
            t.deposit();
            assert_eq!(t.tokens(), 0.0, "{odd}: nothing given back");
        }
        let t = RetryBudget::a6(u32::MAX, 1e300);
        t.take();
        t.deposit();
        assert_eq!(t.tokens(), f64::from(u32::MAX));
        let odd = RetryBudget::a6(1, 0.0015);
        odd.take();
        odd.deposit();
        assert_eq!(odd.tokens(), 0.002);
    }
}
