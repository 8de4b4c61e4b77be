//! A [`RedisBucket`] behind the crate's [`Bucket`]: the waiting layers and the coordinated
//! pause use Redis through the same handle.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::{RedisBucket, RedisKeyed};
use crate::adaptive::Cut;
use crate::bucket::{Outcome, Remote, RemoteDecision, RemoteLearned, RemoteOutcome};
use crate::extract::StableKey;
use crate::keyed::{KeyId, RemoteKeyed, RemoteKeys};
use crate::{Bucket, Denied, KeyedBucket, Quota};
use tokio::time::Instant;

/// Try now; if the refusal's wait is within `max_wait`, wait for the admission until then.
async fn within<T, W>(
    try_now: T,
    max_wait: Duration,
    wait: impl FnOnce() -> W,
) -> Result<(), Denied>
where
    T: std::future::Future<Output = Result<(), Denied>>,
    W: std::future::Future<Output = Result<(), Denied>>,
{
    match try_now.await {
        Err(Denied::Throttled(t)) if !max_wait.is_zero() && t.wait() <= max_wait => {
            let deadline = Instant::now() + max_wait;
            match tokio::time::timeout_at(deadline, wait()).await {
                Ok(result) => result,
                // A pause intervened: the turn did not come within `max_wait`.
                Err(_) => Err(t.into()),
            }
        }
        other => other,
    }
}

/// Run a best-effort write in the background (the local state already holds this process);
/// outside a runtime there is nowhere to run it, and it is skipped.
fn detach<F>(write: F)
where
    F: std::future::Future<Output = Result<(), Denied>> + Send + 'static,
{
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = write.await;
        });
    }
}

/// As [`within`], with what each decision tells an observer.
async fn within_outcome(bucket: RedisBucket, n: u32, max_wait: Duration) -> Outcome {
    let now = bucket.try_acquire_outcome(n).await;
    match &now.result {
        Err(Denied::Throttled(t)) if !max_wait.is_zero() && t.wait() <= max_wait => {
            let deadline = Instant::now() + max_wait;
            match tokio::time::timeout_at(deadline, bucket.acquire_outcome(n)).await {
                Ok(outcome) => outcome,
                // A pause intervened: the turn did not come within `max_wait`.
                Err(_) => now,
            }
        }
        _ => now,
    }
}

impl Remote for RedisBucket {
    fn acquire(&self, n: u32) -> RemoteOutcome {
        let this = self.clone();
        // The failure policy's refusal is an error at once (each call to Redis is bounded by
        // the timeout), never a retry loop.
        Box::pin(async move { this.acquire_outcome(n).await })
    }

    fn try_acquire(&self, n: u32, max_wait: Duration) -> RemoteOutcome {
        let this = self.clone();
        Box::pin(within_outcome(this, n, max_wait))
    }

    fn release(&self, n: u32) {
        let this = self.clone();
        detach(async move { this.release(n).await });
    }

    fn pause(&self, cooldown: Duration) {
        // This process's waiters are held at once, not when the task runs.
        let cooldown = self.hold_here(cooldown);
        let this = self.clone();
        detach(async move { this.pause_in_redis(cooldown).await });
    }

    fn set_rate(&self, quota: Quota) {
        RedisBucket::set_rate(self, quota);
    }

    fn set_quota(&self, quota: Quota) {
        RedisBucket::set_quota(self, quota);
    }

    fn publish(&self, cut: Cut) {
        let this = self.clone();
        detach(async move { Ok(this.publish(cut).await?) });
    }

    fn learned(&self) -> Option<RemoteLearned> {
        let this = self.clone();
        Some(Box::pin(async move { this.learned().await.ok().flatten() }))
    }
}

impl From<RedisBucket> for Bucket {
    /// A [`Bucket`] whose waiting paths ask Redis: [`RateLimitLayer`](crate::RateLimitLayer)
    /// and [`Bucket::acquire`] wait for the shared limit (through the Redis bucket's fair,
    /// quiet queue), and [`Bucket::pause`] — which [`RetryAfterLayer`](crate::RetryAfterLayer)
    /// calls on a 429 — holds every process.
    ///
    /// The rejecting layer of a single bucket (`RejectLayer::new(bucket)`) decides
    /// on Redis too, asynchronously in its response future; when the failure policy refuses,
    /// the request is answered 429 with `Retry-After: 1`.
    ///
    /// Every decision is Redis's: the waiting layer (weighted costs included), the rejecting
    /// layer (with `max_wait`, alone or as the global ceiling of a keyed layer),
    /// [`Bucket::acquire`] and [`Bucket::try_acquire_shared`]. The synchronous
    /// [`Bucket::try_acquire`] cannot ask Redis: it refuses,
    /// [`Denied::Undecided`]; [`Bucket::snapshot`] is this process's view
    /// only ([`Snapshot::local_view`](crate::Snapshot::local_view)).
    ///
    /// An [observer](super::RedisBucketBuilder::observer) set on the Redis bucket is the
    /// `Bucket`'s: it sees every decision of every path above.
    ///
    /// When Redis fails and the failure policy refuses, a waiting caller gets
    /// [`Denied::Backend`] within the timeout (the waiting layer fails that call
    /// with it), and the rejecting layer refuses the request.
    fn from(redis: RedisBucket) -> Self {
        redis.bucket_builder().build()
    }
}

impl RemoteKeyed for RedisKeyed {
    fn try_acquire(&self, key: KeyId, n: u32, max_wait: Duration) -> RemoteDecision {
        let this = self.clone();
        Box::pin(async move {
            within(this.try_acquire(key, n), max_wait, || this.acquire(key, n)).await
        })
    }

    fn release(&self, key: KeyId, n: u32) {
        let this = self.clone();
        detach(async move { this.release(key, n).await });
    }
}

impl<K: StableKey + Hash + Eq + Clone> From<RedisKeyed> for KeyedBucket<K> {
    /// A [`KeyedBucket`] whose every decision is Redis's: the rejecting layer
    /// (`RejectLayer::keyed(..)`, with `max_wait` too) and
    /// [`KeyedBucket::try_acquire_shared`]. Server replicas share one limit per key. Keys are
    /// named by their [`StableKey`] digest, exactly as [`RedisKeyed::try_acquire`] names
    /// them. With a global ceiling, a request the ceiling refuses gives its key's token back.
    ///
    /// The synchronous [`KeyedBucket::try_acquire`] cannot ask Redis: it refuses,
    /// [`Denied::Undecided`]; [`KeyedBucket::snapshot`] is this process's
    /// view only ([`Snapshot::local_view`](crate::Snapshot::local_view)).
    fn from(redis: RedisKeyed) -> Self {
        KeyedBucket::builder(redis.quota())
            .algorithm(redis.algorithm())
            .remote(RemoteKeys::new(Arc::new(redis) as Arc<dyn RemoteKeyed>))
            .build()
    }
}
