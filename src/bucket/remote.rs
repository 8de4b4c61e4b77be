//! A bucket whose decisions are made elsewhere (Redis): the hook the waiting layers use.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::Denied;
use crate::adaptive::Cut;
use crate::observe::Ignored;
use crate::Quota;

/// A future of what the processes sharing a remote limit learned of a server's rate: a cut,
/// or a value no process writes.
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
pub(crate) type RemoteLearned = Pin<Box<dyn Future<Output = Option<Result<Cut, Ignored>>> + Send>>;

/// A future of a remote admission (reported to the bucket's observer).
pub(crate) type RemoteAcquire = Pin<Box<dyn Future<Output = Result<(), Denied>> + Send>>;

/// A future of a remote decision made without waiting.
pub(crate) type RemoteDecision = Pin<Box<dyn Future<Output = Result<(), Denied>> + Send>>;

/// A remote decision with what an observer of the bucket is told: the time the caller
/// waited for an admission, and the tokens left, when the store says.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Admitted after waiting this long (zero: at once), or refused.
    pub(crate) result: Result<Duration, Denied>,
    /// Whole tokens available once the decision takes effect, if the store says.
    pub(crate) available: Option<u32>,
}

impl Outcome {
    /// A decision that says nothing of the tokens left.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only Redis builds them
    pub(crate) fn bare(result: Result<Duration, Denied>) -> Self {
        Outcome {
            result,
            available: None,
        }
    }
}

/// A future of a remote decision, as the store reports it.
pub(crate) type RemoteOutcome = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// Decisions shared with other processes.
pub(crate) trait Remote: Send + Sync + fmt::Debug {
    /// Wait until `n` tokens are admitted by the shared limit.
    fn acquire(&self, n: u32) -> RemoteOutcome;
    /// Decide whether `n` tokens fit: now, or within `max_wait` (zero: without waiting). A
    /// refusal carries the wait the store announced.
    fn try_acquire(&self, n: u32, max_wait: Duration) -> RemoteOutcome;
    /// Give back `n` tokens of an admission that was not used (fire and forget).
    fn release(&self, n: u32);
    /// Hold every process for `cooldown` (fire and forget: the local bucket holds this
    /// process at once).
    fn pause(&self, cooldown: Duration);
    /// Decide at `quota`'s rate from now on: the rate control's effective quota.
    fn set_rate(&self, quota: Quota) {
        let _ = quota;
    }
    /// Decide at the configured quota `quota` from now on: [`Bucket::set_quota`]. The rate
    /// control restarts at it, the new ceiling.
    ///
    /// [`Bucket::set_quota`]: super::Bucket::set_quota
    fn set_quota(&self, quota: Quota);
    /// Tell every process of a push-back this one acted on (fire and forget).
    fn publish(&self, cut: Cut) {
        let _ = cut;
    }
    /// The latest push-back any process published, if the limit keeps one.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only a Redis limit shares what it learned
    fn learned(&self) -> Option<RemoteLearned> {
        None
    }
}
