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
//! A remote bucket still keeps an in-process state at the same quota: it holds this
//! process's side of a [`pause`](Bucket::pause) at once, and feeds
//! [`snapshot`](Bucket::snapshot) (which says so: [`Snapshot::local_view`](super::Snapshot::local_view)).

use std::sync::Arc;

use super::{Bucket, Permit, QueueFull, Remote, Reservation, Shared};

/// Where a bucket's limit is decided. Every admission path matches on it.
#[derive(Debug)]
pub(crate) enum Backend<'a> {
    /// In this process.
    Local(Local<'a>),
    /// In a store shared with other processes.
    Remote(&'a Arc<dyn Remote>),
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
            Some(remote) => Backend::Remote(remote),
            None => Backend::Local(Local {
                shared: &self.shared,
            }),
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
