//! Where a [`Bucket`]'s limit is decided: in this process, or in a shared store (Redis).
//!
//! # One enum every decision goes through
//! A bucket is either [`Backend::Local`] — its state lives in this process and decisions are
//! made on it, synchronously — or [`Backend::Remote`] — its state lives in a store shared
//! by many processes, and every admission is a question to that store (asynchronous). The
//! operations that admit, queue or refuse on the in-process state exist only on
//! [`Local`], which only [`Bucket::backend`] hands out, and only for a local bucket. So a
//! path that admits must match on the backend, and the arm of a remote bucket has no
//! in-process decision to call by mistake: a remote limit is decided remotely on every
//! path, or the path does not compile.
//!
//! Every remote decision goes through [`RemoteRef`], which tells the bucket's
//! [`Observer`] what the store decided (admissions with the time waited, refusals, the
//! tokens left when the store says), as the in-process decisions do: no path of a remote
//! bucket can skip the observer.
//!
//! A remote bucket still keeps an in-process state at the same quota: it holds this
//! process's side of a [`pause`](Bucket::pause) at once, and feeds
//! [`snapshot`](Bucket::snapshot) (which says so: [`Snapshot::local_view`](super::Snapshot::local_view)).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{
    Bucket, Denied, Outcome, Permit, QueueFull, Remote, RemoteAcquire, RemoteDecision,
    RemoteOutcome, Reservation, Shared, Throttled, Undecided,
};
use crate::observe::Observer;

/// Where a bucket's limit is decided. Every admission path matches on it.
#[derive(Debug)]
pub(crate) enum Backend<'a> {
    /// In this process.
    Local(Local<'a>),
    /// In a store shared with other processes.
    Remote(RemoteRef<'a>),
}

/// The decisions of a bucket kept in a shared store: each one asks the store, and tells
/// the bucket's observer what it answered.
#[derive(Clone, Copy)]
pub(crate) struct RemoteRef<'a> {
    remote: &'a Arc<dyn Remote>,
    shared: &'a Arc<Shared>,
}

impl fmt::Debug for RemoteRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RemoteRef").field(self.remote).finish()
    }
}

/// The decisions of a bucket kept in this process: only a [`Backend::Local`] has them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Local<'a> {
    shared: &'a Arc<Shared>,
}

impl Bucket {
    /// Where this bucket's limit is decided.
    #[inline]
    pub(crate) fn backend(&self) -> Backend<'_> {
        match self.shared.remote() {
            Some(remote) => Backend::Remote(RemoteRef {
                remote,
                shared: &self.shared,
            }),
            None => Backend::Local(Local {
                shared: &self.shared,
            }),
        }
    }

    /// Take `n` tokens now as [`try_acquire`](Bucket::try_acquire) does, then give them back
    /// at once, as an admission left unused is given back. Not part of the API: the
    /// differential test of the Redis scripts (`tests/redis_differential.rs`) holds their
    /// release to it, and nothing public gives an admission back.
    #[doc(hidden)]
    pub fn try_acquire_and_give_back(&self, n: u32) -> Result<(), Denied> {
        let Backend::Local(local) = self.backend() else {
            return Err(Denied::Undecided(Undecided));
        };
        self.check(n)?;
        match local.try_admit(n) {
            Ok(permit) => {
                self.give_back(permit);
                Ok(())
            }
            Err(ns) => Err(Throttled::after(Duration::from_nanos(ns)).into()),
        }
    }
}

impl Local<'_> {
    /// Admit now, or queue: callers check the size first. `bounded`: honour a leaky
    /// bucket's queue limit.
    pub(crate) fn reserve(self, n: u32, bounded: bool) -> Result<Reservation, QueueFull> {
        self.shared.reserve(n, bounded)
    }

    /// The hot path of the layers: admit now without the lock, or `None`.
    #[inline]
    pub(crate) fn admit_now(self, n: u32) -> Option<Permit> {
        self.shared.admit_now(n)
    }

    /// Admit now, or the nanoseconds until `n` tokens fit. Never queues.
    #[inline]
    pub(crate) fn try_admit(self, n: u32) -> Result<Permit, u64> {
        self.shared.try_admit(n)
    }
}

impl RemoteRef<'_> {
    /// Wait until `n` tokens are admitted by the shared limit.
    pub(crate) fn acquire(self, n: u32) -> RemoteAcquire {
        self.observed(n, self.remote.acquire(n))
    }

    /// Decide whether `n` tokens fit: now, or within `max_wait` (zero: without waiting).
    pub(crate) fn try_acquire(self, n: u32, max_wait: Duration) -> RemoteDecision {
        self.observed(n, self.remote.try_acquire(n, max_wait))
    }

    /// Give back `n` tokens of an admission that was not used (fire and forget).
    pub(crate) fn release(self, n: u32) {
        self.remote.release(n);
    }

    /// Hold every process for `cooldown` (fire and forget; the caller holds this process
    /// and tells the observer).
    pub(crate) fn pause(self, cooldown: Duration) {
        self.remote.pause(cooldown);
    }

    /// The decision, reported to the bucket's observer when it has one.
    fn observed(self, n: u32, decision: RemoteOutcome) -> RemoteAcquire {
        let Some(observer) = self.shared.observer.clone() else {
            return Box::pin(async move { decision.await.result.map(drop) });
        };
        Box::pin(async move {
            let outcome = decision.await;
            report(observer.as_ref(), n, &outcome);
            outcome.result.map(drop)
        })
    }
}

/// Tell `o` what a remote decision of `n` tokens was, as the in-process decisions do: an
/// admission with the time waited (and, after a wait, the tokens left), a refusal with its
/// wait and the tokens left. A store that failed refuses nothing it decided: not reported.
fn report(o: &dyn Observer, n: u32, outcome: &Outcome) {
    match &outcome.result {
        Ok(waited) => {
            o.admitted(n, *waited);
            if !waited.is_zero() {
                if let Some(available) = outcome.available {
                    o.tokens(available);
                }
            }
        }
        Err(Denied::Throttled(t)) => {
            o.refused(n, t.wait(), false);
            if let Some(available) = outcome.available {
                o.tokens(available);
            }
        }
        Err(_) => {}
    }
}
