//! [`RetryThrottle`]: gRFC A6 retry throttling, so that retries stop while a server fails.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Thousandths of a token: A6 gives `tokenRatio` three decimal places.
const MILLI: u64 = 1000;

/// Retry throttling as gRFC A6 defines it (`retryThrottling`: `maxTokens`, `tokenRatio`),
/// shared by every clone.
///
/// The token count starts at `max_tokens` and stays within `[0, max_tokens]`. Every failed
/// attempt — a status in the retryable set, or a push-back that says not to retry — takes
/// one token; every successful one gives back `token_ratio`. While the count is at or below
/// `max_tokens / 2`, failures are returned to the caller without retrying; retries resume
/// once successes have lifted it above. Push-backs still pause the shared bucket.
///
/// The layer judges a call by its response head: a trailers-only status is counted as it
/// is; a call that got response headers counts as a success, its status coming in trailers
/// after the response has been handed to the caller (a stream failing midway is not counted).
///
/// ```
/// use tower_throttle::grpc::RetryThrottle;
///
/// let throttle = RetryThrottle::new(10, 0.1)?;
/// assert_eq!(throttle.tokens(), 10.0);
/// assert!(RetryThrottle::new(0, 0.1).is_err());
/// assert!(RetryThrottle::new(10, 0.0).is_err());
/// # Ok::<(), tower_throttle::grpc::RetryThrottleError>(())
/// ```
#[derive(Clone)]
pub struct RetryThrottle {
    /// Thousandths of a token.
    tokens: Arc<AtomicU64>,
    max: u64,
    ratio: u64,
}

/// A [`RetryThrottle`] setting A6 does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryThrottleError {
    /// `max_tokens` must be greater than zero.
    MaxTokens,
    /// `token_ratio` must be a finite number of at least 0.001 (three decimal places).
    TokenRatio,
}

impl fmt::Display for RetryThrottleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::MaxTokens => "retry throttle: max_tokens must be greater than zero",
            Self::TokenRatio => "retry throttle: token_ratio must be finite and at least 0.001",
        })
    }
}

impl std::error::Error for RetryThrottleError {}

impl RetryThrottle {
    /// A6's `maxTokens` and `tokenRatio` (rounded to three decimal places). Typical: `10`,
    /// `0.1` — retries stop when failures exceed about 10 % of successes.
    ///
    /// # Errors
    /// `max_tokens` of zero, or a `token_ratio` that is not finite or rounds to zero.
    pub fn new(max_tokens: u32, token_ratio: f64) -> Result<Self, RetryThrottleError> {
        if max_tokens == 0 {
            return Err(RetryThrottleError::MaxTokens);
        }
        let max = u64::from(max_tokens) * MILLI;
        if !token_ratio.is_finite() || token_ratio < 0.0005 {
            return Err(RetryThrottleError::TokenRatio);
        }
        // At most max_tokens: a larger ratio refills to the top in one success anyway.
        let ratio = (token_ratio * MILLI as f64).round().min(max as f64) as u64;
        Ok(RetryThrottle {
            tokens: Arc::new(AtomicU64::new(max)),
            max,
            ratio,
        })
    }

    /// The tokens now (shared by every clone).
    pub fn tokens(&self) -> f64 {
        self.tokens.load(Ordering::Acquire) as f64 / MILLI as f64
    }

    /// Whether a retry may go out now: more than `max_tokens / 2` tokens.
    pub fn allows_retry(&self) -> bool {
        self.tokens.load(Ordering::Acquire) * 2 > self.max
    }

    /// A failed attempt: one token less (never below zero).
    pub(crate) fn failure(&self) {
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_sub(MILLI))
            });
    }

    /// A successful attempt: `token_ratio` more (never above `max_tokens`).
    pub(crate) fn success(&self) {
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some((t + self.ratio).min(self.max))
            });
    }
}

impl fmt::Debug for RetryThrottle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryThrottle")
            .field("tokens", &self.tokens())
            .field("max_tokens", &(self.max / MILLI))
            .field("token_ratio", &(self.ratio as f64 / MILLI as f64))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a6_token_arithmetic() {
        let t = RetryThrottle::new(10, 0.1).unwrap();
        let shared = t.clone();
        for expected in [9.0, 8.0, 7.0, 6.0] {
            shared.failure();
            assert_eq!(t.tokens(), expected);
            assert!(t.allows_retry());
        }
        t.failure();
        assert_eq!(t.tokens(), 5.0);
        assert!(!t.allows_retry(), "at max/2 retries stop");
        for _ in 0..10 {
            t.failure();
        }
        assert_eq!(t.tokens(), 0.0, "never below zero");
        for _ in 0..50 {
            t.success();
        }
        assert_eq!(t.tokens(), 5.0);
        assert!(!t.allows_retry());
        t.success();
        assert!((t.tokens() - 5.1).abs() < 1e-9);
        assert!(t.allows_retry(), "above max/2 retries resume");
        for _ in 0..1000 {
            t.success();
        }
        assert_eq!(t.tokens(), 10.0, "never above max");
    }

    #[test]
    fn settings() {
        assert_eq!(
            RetryThrottle::new(0, 1.0).unwrap_err(),
            RetryThrottleError::MaxTokens
        );
        for bad in [0.0, -1.0, 0.0004, f64::NAN, f64::INFINITY] {
            assert_eq!(
                RetryThrottle::new(1, bad).unwrap_err(),
                RetryThrottleError::TokenRatio,
                "{bad}"
            );
        }
        let t = RetryThrottle::new(u32::MAX, 1e300).unwrap();
        t.failure();
        t.success();
        assert_eq!(t.tokens(), f64::from(u32::MAX));
        let odd = RetryThrottle::new(1, 0.0015).unwrap();
        odd.failure();
        odd.success();
        assert_eq!(odd.tokens(), 0.002);
    }
}
