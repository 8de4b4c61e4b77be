//! [`Charge`]: a cost taken on an estimate, settled once the real cost is known.

use std::fmt;
use std::sync::Arc;

use super::{Bucket, Permit};
use crate::Cost;

/// A cost a [`Bucket`] admitted on an estimate, to settle once the request's real cost is
/// known: the tokens of a language model's answer, read from its `usage`.
///
/// From [`Bucket::try_charge`] or [`Bucket::charge`]. Settling consumes the charge, quota by
/// quota where the cost names several [`Resource`](crate::Resource)s:
/// - [`settle`](Charge::settle) with less than the estimate gives the difference back at
///   once: the first waiters in line may go earlier, in their order. Only what the bucket has
///   not refilled since the admission comes back, so the bucket never holds more than it
///   would had the admission taken the real cost.
/// - [`settle`](Charge::settle) with more charges the overrun now, beyond the limit if need
///   be: the debt delays the next admissions. One settlement owes at most one burst (a
///   window's count: its limit), and a debt is at most one burst beyond an empty token or
///   leaky bucket; a window's debt counts in the window it was settled in.
/// - [`refund`](Charge::refund) gives everything back: the request was never sent.
/// - Dropped unsettled, the estimate stands: a request sent whose cost never came back.
///
/// ```
/// use tower_throttle::{Bucket, Quota};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // 10,000 tokens per minute.
/// let tokens = Bucket::new(Quota::per_minute(10_000).burst(10_000));
/// let charge = tokens.charge(4_000).await.unwrap(); // the prompt and `max_tokens`
/// assert_eq!(tokens.snapshot().available, 6_000);
/// charge.settle(1_500); // the answer's `usage.total_tokens`
/// assert_eq!(tokens.snapshot().available, 8_500);
/// # }
/// ```
#[must_use = "dropped unsettled, a charge keeps its estimate"]
pub struct Charge {
    bucket: Bucket,
    permit: Permit,
    estimate: Cost,
    /// The estimate per quota, where the plan has several.
    each: Option<Arc<[u64]>>,
}

impl Charge {
    pub(super) fn new(
        bucket: Bucket,
        permit: Permit,
        estimate: Cost,
        each: Option<Arc<[u64]>>,
    ) -> Self {
        Charge {
            bucket,
            permit,
            estimate,
            each,
        }
    }

    /// What was taken on the estimate.
    pub fn estimate(&self) -> &Cost {
        &self.estimate
    }

    /// The request cost `actual`: give back what it took beyond that, or charge what it
    /// took short, quota by quota.
    pub fn settle(self, actual: impl Into<Cost>) {
        let shared = &self.bucket.shared;
        let (first, actual_each) = shared.price_of(&actual.into());
        let Some(estimate) = &self.each else {
            let estimate = self.permit.tokens;
            match first.checked_sub(estimate) {
                Some(owed) => shared.owe(owed, None),
                None => shared.give_back(Permit {
                    tokens: estimate - first,
                    ..self.permit
                }),
            }
            return;
        };
        let actual = actual_each.unwrap_or_default();
        let diff = |f: fn(u64, u64) -> u64| -> Vec<u64> {
            estimate
                .iter()
                .zip(actual.iter())
                .map(|(e, a)| f(*e, *a))
                .collect()
        };
        let back = diff(|e, a| e.saturating_sub(a));
        let owed = diff(|e, a| a.saturating_sub(e));
        let tokens = |a: &[u64]| u32::try_from(a[0]).unwrap_or(u32::MAX);
        let permit = Permit {
            tokens: tokens(&back),
            ..self.permit
        };
        shared.give_back_each(permit, Some(&back));
        shared.owe(tokens(&owed), Some(&owed));
    }

    /// The request was never sent: give everything back.
    pub fn refund(self) {
        self.settle(0);
    }
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Charge")
            .field("estimate", &self.estimate)
            .finish_non_exhaustive()
    }
}
