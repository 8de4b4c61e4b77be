//! Charges on a [`RedisBucket`]: an estimate taken in one round trip, settled in another.

use std::sync::Arc;

use super::{Inner, RedisBucket};
use crate::bucket::{differences, Settle};
use crate::redis::booking::{self, Unbooked};
use crate::redis::stats::bump;
use crate::{Charge, Cost, Denied};

impl RedisBucket {
    /// Take `estimate` now, to [`settle`](Charge::settle) once the real cost is known: as
    /// [`try_acquire`](Self::try_acquire), for a cost per [`Resource`](crate::Resource) of
    /// the plan (requests and tokens, say), decided on every quota in one script run.
    ///
    /// A settlement goes to Redis in a task of its own (on the runtime of the call that
    /// settles; without one, the estimate stands): an overestimate is given back to the
    /// quotas the admission counted in, an overrun is counted at once, beyond the limit if
    /// need be (the scripts' clamps bound the debt: at most a burst, or a window's count,
    /// beyond an empty limit). So processes settling on one key never admit, in any window,
    /// more than the quota and the underestimates of the requests in flight. When Redis
    /// fails, the [`FailurePolicy`](crate::redis::FailurePolicy) decides on the first
    /// quota's amount, and the charge has nothing to settle.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_charge(&self, estimate: impl Into<Cost>) -> Result<Charge, Denied> {
        let (inner, estimate) = (&*self.inner, estimate.into());
        let (n, each) = self.price(&estimate)?;
        if each.iter().all(|a| *a == 0) {
            return Ok(Charge::elsewhere(None, estimate));
        }
        let backend = &inner.backend;
        let priority = estimate.class();
        match (backend.acquire(&inner.key, n, false, Some(&each), priority)).await {
            Ok(t) => {
                booking::learn(&inner.backend, &inner.hint, &t, n).decision()?;
                Ok(self.charged(estimate, each, t.at_us))
            }
            Err(e) => {
                let local = self.local();
                inner.backend.fallback().try_acquire(local, n, e)?;
                Ok(Charge::elsewhere(None, estimate))
            }
        }
    }

    /// Wait for `estimate`, then take it, to [`settle`](Charge::settle) once the real cost
    /// is known: as [`acquire`](Self::acquire) (waiters of every process first come, first
    /// served), for a cost per resource, with the settlement of
    /// [`try_charge`](Self::try_charge). Dropped while it waits, it takes nothing.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub async fn charge(&self, estimate: impl Into<Cost>) -> Result<Charge, Denied> {
        let (inner, estimate) = (&*self.inner, estimate.into());
        let (n, each) = self.price(&estimate)?;
        if each.iter().all(|a| *a == 0) {
            return Ok(Charge::elsewhere(None, estimate));
        }
        let booked = booking::book(
            &inner.backend,
            &inner.hint,
            &inner.key,
            n,
            Some(each.clone()),
            estimate.class(),
        );
        match booked.await {
            Ok(admission) => Ok(self.charged(estimate, each, admission.at_us)),
            Err(Unbooked::Exceeds(e)) => Err(e.into()),
            Err(Unbooked::Failed(e)) => {
                let local = self.local();
                inner.backend.fallback().acquire(local, n, e).await?;
                Ok(Charge::elsewhere(None, estimate))
            }
        }
    }

    /// The amount of each quota, the first's apart, checked against what each can hold.
    fn price(&self, estimate: &Cost) -> Result<(u32, Arc<[u64]>), Denied> {
        let backend = &self.inner.backend;
        let each = backend.amounts(estimate);
        backend.check_each(&each)?;
        Ok((u32::try_from(each[0]).unwrap_or(u32::MAX), each))
    }

    fn charged(&self, estimate: Cost, each: Arc<[u64]>, at_us: u64) -> Charge {
        let settlement = Settlement {
            inner: Arc::clone(&self.inner),
            each,
            at_us,
        };
        Charge::elsewhere(Some(Box::new(settlement)), estimate)
    }
}

/// An admission of `each` at `key`, at the instant `at_us` of the Redis clock.
struct Settlement {
    inner: Arc<Inner>,
    each: Arc<[u64]>,
    at_us: u64,
}

impl Settle for Settlement {
    fn settle(&self, actual: &Cost) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = &self.inner.backend;
        // Ended: its in-flight quotas come back with the rest.
        let held = backend.in_flight(&self.each);
        let actual: Vec<u64> = (backend.amounts(actual).iter().zip(&held))
            .map(|(a, h)| if *h > 0 { 0 } else { *a })
            .collect();
        let (back, owed) = differences(&self.each, &actual);
        let (inner, at_us) = (Arc::clone(&self.inner), self.at_us);
        rt.spawn(async move {
            let (backend, key) = (&inner.backend, &inner.key);
            if back.iter().any(|n| *n > 0) {
                let n = u32::try_from(back[0]).unwrap_or(u32::MAX);
                let _ = backend.release_booked(key, n, at_us, Some(&back)).await;
            }
            if owed.iter().any(|n| *n > 0) {
                let _ = backend.owe(key, &owed).await;
            }
            bump(&backend.counters.settlements);
        });
    }

    fn end(&self) {
        let held = self.inner.backend.in_flight(&self.each);
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if held.iter().all(|n| *n == 0) {
            return;
        }
        let (inner, at_us) = (Arc::clone(&self.inner), self.at_us);
        rt.spawn(async move {
            let n = u32::try_from(held[0]).unwrap_or(u32::MAX);
            let _ = (inner.backend)
                .release_booked(&inner.key, n, at_us, Some(&held))
                .await;
        });
    }
}
