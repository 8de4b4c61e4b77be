//! [`Charge`]: a cost taken on an estimate, settled once the real cost is known.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{Bucket, Permit};
use crate::Cost;

/// A cost a limit admitted on an estimate, to settle once the request's real cost is
/// known: the tokens of a language model's answer, read from its `usage`.
///
/// From [`Bucket::try_charge`], [`Bucket::charge`], `RedisBucket::try_charge` and
/// `RedisBucket::charge` (settled in Redis: see there), or the response extensions of a layer
/// that charges estimates ([`RateLimitLayer::charge`](crate::RateLimitLayer::charge)). Clones are
/// one handle: the first settlement or refund counts, later ones do nothing. A charge settles
/// quota by quota where the cost names several [`Resource`](crate::Resource)s:
/// - [`settle`](Charge::settle) with less than the estimate gives the difference back at
///   once: the first waiters in line may go earlier, in their order. Only what the bucket has
///   not refilled since the admission comes back, so the bucket never holds more than it
///   would had the admission taken the real cost.
/// - [`settle`](Charge::settle) with more charges the overrun now, beyond the limit if need
///   be: the debt delays the next admissions. One settlement owes at most one burst (a
///   window's count: its limit), and a debt is at most one burst beyond an empty token or
///   leaky bucket; a window's debt counts in the window it was settled in.
/// - [`refund`](Charge::refund) gives everything back: the request was never sent.
/// - A layer that charges settles a `429` answer itself: its requests stay counted, and the
///   rest (its tokens) comes back.
/// - Dropped unsettled (every clone), the estimate stands: a request sent whose cost never
///   came back.
/// - Settled, refunded or dropped, the request has ended: what it held of the plan's
///   [in-flight](crate::Plan::in_flight) quotas comes back.
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
/// assert!(charge.settle(1_500)); // the answer's `usage.total_tokens`
/// assert_eq!(tokens.snapshot().available, 8_500);
/// assert!(!charge.clone().refund()); // settled once: nothing more changes
/// assert_eq!(tokens.snapshot().available, 8_500);
/// # }
/// ```
#[derive(Clone)]
#[must_use = "dropped unsettled, a charge keeps its estimate"]
pub struct Charge(Arc<Taken>);

struct Taken {
    target: Target,
    estimate: Cost,
    settled: AtomicBool,
}

/// Where the estimate was taken.
enum Target {
    /// A bucket of this process; `each`: the estimate per quota, where the plan has several.
    Bucket {
        bucket: Bucket,
        permit: Permit,
        each: Option<Arc<[u64]>>,
    },
    /// A limit kept elsewhere, which settles its own charges.
    #[cfg(feature = "redis")]
    Elsewhere(Box<dyn Settle>),
    /// Nowhere: a failure policy admitted the request without a decision.
    #[cfg(feature = "redis")]
    Nowhere,
}

/// A limit kept elsewhere (in Redis) settling one of its charges.
#[cfg(feature = "redis")]
pub(crate) trait Settle: Send + Sync {
    /// The request cost `actual`: give back or owe the difference with its estimate (and
    /// its in-flight quotas).
    fn settle(&self, actual: &Cost);
    /// The request ended unsettled: give back its in-flight quotas.
    fn end(&self);
}

/// What settling at `actual` gives back and owes, quota by quota, of an admission of
/// `estimate` (amounts per quota).
pub(crate) fn differences(estimate: &[u64], actual: &[u64]) -> (Vec<u64>, Vec<u64>) {
    estimate
        .iter()
        .zip(actual)
        .map(|(e, a)| (e.saturating_sub(*a), a.saturating_sub(*e)))
        .unzip()
}

impl Charge {
    pub(super) fn new(
        bucket: Bucket,
        permit: Permit,
        estimate: Cost,
        each: Option<Arc<[u64]>>,
    ) -> Self {
        Charge::on(
            Target::Bucket {
                bucket,
                permit,
                each,
            },
            estimate,
        )
    }

    /// A charge taken on a limit kept elsewhere, settled by `target`; none (`None`): a
    /// request admitted without a decision, with nothing to settle.
    #[cfg(feature = "redis")]
    pub(crate) fn elsewhere(target: Option<Box<dyn Settle>>, estimate: Cost) -> Self {
        Charge::on(target.map_or(Target::Nowhere, Target::Elsewhere), estimate)
    }

    fn on(target: Target, estimate: Cost) -> Self {
        Charge(Arc::new(Taken {
            target,
            estimate,
            settled: AtomicBool::new(false),
        }))
    }

    /// What was taken on the estimate.
    pub fn estimate(&self) -> &Cost {
        &self.0.estimate
    }

    /// Whether this charge (or a clone) was settled or refunded.
    pub fn is_settled(&self) -> bool {
        self.0.settled.load(Ordering::Acquire)
    }

    /// The request cost `actual`: give back what it took beyond that, or charge what it
    /// took short, quota by quota. True when this call settled the charge; false, changing
    /// nothing, when it was settled before.
    pub fn settle(&self, actual: impl Into<Cost>) -> bool {
        let this = &*self.0;
        if this.settled.swap(true, Ordering::AcqRel) {
            return false;
        }
        let (bucket, permit, each) = match &this.target {
            Target::Bucket {
                bucket,
                permit,
                each,
            } => (bucket, permit, each),
            #[cfg(feature = "redis")]
            Target::Elsewhere(target) => {
                target.settle(&actual.into());
                return true;
            }
            #[cfg(feature = "redis")]
            Target::Nowhere => return true,
        };
        let shared = &bucket.shared;
        let (first, actual_each) = shared.ended_price(&actual.into());
        let Some(estimate) = each else {
            let estimate = permit.tokens;
            match first.checked_sub(estimate) {
                Some(owed) => shared.owe(owed, None),
                None => shared.give_back(Permit {
                    tokens: estimate - first,
                    ..*permit
                }),
            }
            return true;
        };
        let (back, owed) = differences(estimate, &actual_each.unwrap_or_default());
        let tokens = |a: &[u64]| u32::try_from(a[0]).unwrap_or(u32::MAX);
        let permit = Permit {
            tokens: tokens(&back),
            ..*permit
        };
        shared.give_back_each(permit, Some(&back));
        shared.owe(tokens(&owed), Some(&owed));
        true
    }

    /// The request was never sent: give everything back. As [`settle`](Charge::settle)
    /// otherwise.
    pub fn refund(&self) -> bool {
        self.settle(0)
    }

    /// The admission, kept as taken, for a holder that gives its in-flight quotas back
    /// itself ([`Bucket::slot`](super::Bucket)): nothing happens when this charge drops.
    pub(crate) fn kept(self) -> Option<Permit> {
        self.0.settled.store(true, Ordering::Release);
        match &self.0.target {
            Target::Bucket { permit, .. } => Some(*permit),
            #[cfg(feature = "redis")]
            _ => None,
        }
    }

    /// Settle a request the server answered with `status`: a `429` used nothing but the
    /// request itself (its requests stay counted, as the providers count them; its tokens
    /// come back). Any other status leaves the charge to its holder.
    pub(crate) fn answered(&self, status: http::StatusCode) {
        if status == http::StatusCode::TOO_MANY_REQUESTS {
            self.settle(self.estimate().of(&crate::Resource::REQUESTS));
        }
    }
}

impl Drop for Taken {
    /// Dropped unsettled, the estimate stands, but the request ended: its in-flight quotas
    /// come back.
    fn drop(&mut self) {
        if *self.settled.get_mut() {
            return;
        }
        match &self.target {
            Target::Bucket { bucket, permit, .. } => {
                bucket.shared.end_in_flight(*permit, &self.estimate);
            }
            #[cfg(feature = "redis")]
            Target::Elsewhere(target) => target.end(),
            #[cfg(feature = "redis")]
            Target::Nowhere => {}
        }
    }
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Charge")
            .field("estimate", &self.0.estimate)
            .field("settled", &self.is_settled())
            .finish_non_exhaustive()
    }
}
