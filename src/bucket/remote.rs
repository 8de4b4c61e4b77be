//! A bucket whose decisions are made elsewhere (Redis): the hook the waiting layers use.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::Denied;

/// A future of a remote admission.
pub(crate) type RemoteAcquire = Pin<Box<dyn Future<Output = Result<(), Denied>> + Send>>;

/// A future of a remote decision made without waiting.
pub(crate) type RemoteDecision = Pin<Box<dyn Future<Output = Result<(), Denied>> + Send>>;

/// Decisions shared with other processes.
pub(crate) trait Remote: Send + Sync + fmt::Debug {
    /// Wait until `n` tokens are admitted by the shared limit.
    fn acquire(&self, n: u32) -> RemoteAcquire;
    /// Decide now whether `n` tokens fit, without waiting.
    fn try_acquire(&self, n: u32) -> RemoteDecision;
    /// Hold every process for `cooldown` (fire and forget: the local bucket holds this
    /// process at once).
    fn pause(&self, cooldown: Duration);
}
