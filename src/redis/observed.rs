//! What a Redis limit's observer is told of each decision, and the decisions the layers ask
//! for: within a bounded wait, and writes made in the background.

use crate::slot::Slot;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{RedisBucket, RedisKeyed};
use crate::extract::KeyDigest;
use crate::observe::Observer;
use crate::{Cost, Denied};

/// A decision, with what an observer of the limit is told: the time the caller waited for
/// an admission, and the tokens left, when the store says.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Admitted after waiting this long (zero: at once), or refused.
    pub(crate) result: Result<Duration, Denied>,
    /// Whole tokens available once the decision takes effect, if the store says.
    pub(crate) available: Option<u32>,
}

impl Outcome {
    /// A decision that says nothing of the tokens left.
    pub(crate) fn bare(result: Result<Duration, Denied>) -> Self {
        Outcome {
            result,
            available: None,
        }
    }

    /// Tell `o` what this decision of `n` tokens was, as the in-process decisions do: an
    /// admission with the time waited (and, after a wait, the tokens left), a refusal with
    /// its wait and the tokens left. A store that failed refuses nothing it decided: not
    /// reported.
    pub(crate) fn report(self, o: Option<&dyn Observer>, n: u32) -> Result<(), Denied> {
        let Some(o) = o else {
            return self.result.map(drop);
        };
        let level = match &self.result {
            Ok(waited) => {
                o.admitted(n, *waited);
                !waited.is_zero()
            }
            Err(Denied::Throttled(t)) => {
                o.refused(n, t.wait(), false);
                true
            }
            Err(_) => false,
        };
        if let (true, Some(available)) = (level, self.available) {
            o.tokens(available);
        }
        self.result.map(drop)
    }
}

/// Run a best-effort write in the background (this process already holds what it must);
/// outside a runtime there is nowhere to run it, and it is skipped.
pub(crate) fn detach<F>(write: F)
where
    F: Future<Output = Result<(), Denied>> + Send + 'static,
{
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = write.await;
        });
    }
}

impl RedisBucket {
    /// Take `n` tokens now, or, when the refusal's wait is within `max_wait`, wait for them
    /// until then (zero: never wait). Reported to the observer.
    pub(crate) async fn try_acquire_within(
        &self,
        n: u32,
        max_wait: Duration,
    ) -> Result<(), Denied> {
        let now = self.try_acquire_outcome(n).await;
        let outcome = match &now.result {
            Err(Denied::Throttled(t)) if !max_wait.is_zero() && t.wait() <= max_wait => {
                let deadline = Instant::now() + max_wait;
                match tokio::time::timeout_at(deadline, self.acquire_outcome(n)).await {
                    Ok(outcome) => outcome,
                    // A pause intervened: the turn did not come within `max_wait`.
                    Err(_) => now,
                }
            }
            _ => now,
        };
        outcome.report(self.observer(), n)
    }

    /// Give back `n` tokens of an admission that was not used, in the background.
    pub(crate) fn release_detached(&self, n: u32) {
        if n > 0 {
            let this = self.clone();
            detach(async move { this.release(n).await });
        }
    }
}

impl RedisKeyed {
    /// Take `cost` of `key` on the plan `tier` now, or, when the refusal's wait is
    /// within `max_wait`, wait for them until then (zero: never wait). A refusal says which
    /// quota of the plan refused.
    pub(crate) async fn try_acquire_within(
        &self,
        key: KeyDigest,
        tier: usize,
        cost: &Cost,
        max_wait: Duration,
    ) -> Result<Option<u64>, (Denied, usize)> {
        match self.try_acquire_at(key, tier, cost).await {
            Err((Denied::Throttled(t), part)) if !max_wait.is_zero() && t.wait() <= max_wait => {
                let deadline = Instant::now() + max_wait;
                match tokio::time::timeout_at(deadline, self.acquire_at(key, tier, cost)).await {
                    Ok(result) => result.map_err(|e| (e, part)),
                    // A pause intervened: the turn did not come within `max_wait`.
                    Err(_) => Err((t.into(), part)),
                }
            }
            other => other,
        }
    }

    /// What an admission of `cost` for `key` on the plan `tier`, at `at_us` on the Redis
    /// clock, holds of the plan's in-flight quotas, given back in the background when the
    /// slot drops.
    pub(crate) fn in_flight_slot(
        &self,
        key: KeyDigest,
        tier: usize,
        cost: &Cost,
        at_us: u64,
    ) -> Slot {
        let Some(held) = self.in_flight(tier, cost) else {
            return Slot::default();
        };
        let this = self.clone();
        Slot::new(move || {
            detach(async move { this.release_in_flight(key, tier, &held, at_us).await })
        })
    }

    /// Give back `cost`, admitted for `key` on the plan `tier` and refused by another limit,
    /// in the background.
    pub(crate) fn release_detached(&self, key: KeyDigest, tier: usize, cost: Cost) {
        let this = self.clone();
        detach(async move { this.release_at(key, tier, &cost).await });
    }
}

impl RedisBucket {
    /// Whether `n` tokens can ever fit.
    pub(crate) fn check(&self, n: u32) -> Result<(), crate::ExceedsBurst> {
        self.backend().check(n)
    }

    /// The quota of the plan that refused last.
    pub(crate) fn refused_by(&self) -> usize {
        self.backend().refused_by()
    }
}
