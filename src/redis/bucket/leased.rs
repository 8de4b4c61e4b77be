//! The round trips of a [`RedisBucket`]'s lease (see [`Lease`] for its local side): take
//! from it or wait in line, refill it, and give back what it holds when it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Inner, RedisBucket};
use crate::redis::booking;
use crate::redis::error::RedisError;
use crate::redis::lease::{Lease, Turn, Waited};
use crate::redis::stats::bump;

impl RedisBucket {
    /// With a lease: admit `n` tokens from it, or wait in line for a refill.
    /// `Ok(None)`: admitted; `Ok(Some(wait))`: refused, the tokens fit in about `wait`.
    ///
    /// `books`: the caller books an instant when refused, so a refill that the last replies
    /// say cannot serve it yet is skipped (Redis decides the booking; a stale hint only
    /// costs the lease, never the admission). A `try_acquire` always asks.
    pub(super) async fn take_leased(
        &self,
        lease: &Lease,
        n: u32,
        books: bool,
    ) -> Result<Option<Duration>, RedisError> {
        let inner = &*self.inner;
        let admitted = || {
            bump(&inner.backend.counters.leased_admissions);
            Ok(None)
        };
        if lease.take(n, Instant::now()) {
            return admitted();
        }
        let likely = || {
            booking::fits_at(&inner.backend, &inner.hint, n)
                .saturating_duration_since(Instant::now())
        };
        if books && !likely().is_zero() {
            return Ok(Some(likely()));
        }
        let ticket = match lease.turn(n, Instant::now()) {
            Turn::Taken => return admitted(),
            Turn::Wait(ticket) => ticket,
            Turn::Refill(ticket) => {
                // Run apart from this task: this task gone (a timeout, a dropped request)
                // leaves the others their refill.
                let refill = self.clone().refill();
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => drop(rt.spawn(refill)),
                    Err(_) => refill.await,
                }
                ticket
            }
        };
        match ticket.wait().await {
            Waited::Admitted => admitted(),
            Waited::Refused(wait) => Ok(Some(wait.max(likely()))),
            Waited::Failed(e) => Err(e),
        }
    }

    /// Refill the lease while tasks wait in line: one round trip at a time, each for
    /// every request in line and the lease beyond them.
    async fn refill(self) {
        let inner = &*self.inner;
        let Some(lease) = &inner.lease else {
            return;
        };
        let mut refill = lease.refill();
        while let Some(ask) = refill.ask(inner.backend.max_cost(), Instant::now()) {
            let reply = inner
                .backend
                .lease(&inner.key, ask.want, ask.need, ask.back);
            match reply.await {
                Ok(t) => {
                    inner.hint.observe(&t);
                    if let Some((generation, end)) = refill.granted(t.granted, t.sent, t.reply.wait)
                    {
                        self.give_back_at(end, generation);
                    }
                }
                Err(e) => refill.failed(&e),
            }
            // The tasks just served may ask again at once: let them join the line first.
            tokio::task::yield_now().await;
        }
    }

    /// When the lease `generation` ends at `end`, give back its unused tokens (unless a
    /// newer lease did it, or the handle is gone).
    fn give_back_at(&self, end: Instant, generation: u64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::downgrade(&self.inner);
        rt.spawn(async move {
            tokio::time::sleep_until(end).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let back = inner.lease.as_ref().map_or(0, |l| l.expire(generation));
            if back > 0 {
                let _ = inner.backend.release(&inner.key, back).await;
            }
        });
    }
}

impl Drop for Inner {
    /// The last handle is gone: give back the lease's unused tokens.
    fn drop(&mut self) {
        let back = self.lease.as_ref().map_or(0, Lease::clear);
        if back == 0 {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (backend, key) = (self.backend.clone(), std::mem::take(&mut self.key));
            rt.spawn(async move {
                let _ = backend.release(&key, back).await;
            });
        }
    }
}
