//! A [`RedisBucket`] behind the crate's [`Bucket`]: the waiting layers and the coordinated
//! pause use Redis through the same handle.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::{RedisBucket, RedisKeyed};
use crate::bucket::{Remote, RemoteAcquire, RemoteDecision};
use crate::keyed::{KeyId, RemoteKeyed};
use crate::{Bucket, Denied, KeyedBucket};

/// How long a waiter holds off when the failure policy refuses (Redis down, policy `Closed`)
/// before it asks again.
const RETRY_BACKEND: Duration = Duration::from_millis(100);

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

impl Remote for RedisBucket {
    fn acquire(&self, n: u32) -> RemoteAcquire {
        let this = self.clone();
        Box::pin(async move {
            loop {
                match this.acquire(n).await {
                    Ok(()) => return Ok(()),
                    Err(never @ Denied::ExceedsBurst(_)) => return Err(never),
                    // A waiting client waits for the shared limit to answer again.
                    Err(_) => tokio::time::sleep(RETRY_BACKEND).await,
                }
            }
        })
    }

    fn try_acquire(&self, n: u32) -> RemoteDecision {
        let this = self.clone();
        Box::pin(async move { this.try_acquire(n).await })
    }

    fn pause(&self, cooldown: Duration) {
        let this = self.clone();
        detach(async move { this.pause(cooldown).await });
    }
}

impl From<RedisBucket> for Bucket {
    /// A [`Bucket`] whose waiting paths ask Redis: [`RateLimitLayer`](crate::RateLimitLayer)
    /// and [`Bucket::acquire`] wait for the shared limit (through the Redis bucket's fair,
    /// quiet queue), and [`Bucket::pause`] — which [`RetryAfterLayer`](crate::RetryAfterLayer)
    /// calls on a 429 — holds every process.
    ///
    /// The rejecting layer of a single bucket (`RateLimitLayer::new(bucket).reject()`) decides
    /// on Redis too, asynchronously in its response future; when the failure policy refuses,
    /// the request is answered 429 with `Retry-After: 1`.
    ///
    /// The synchronous paths cannot ask Redis: [`Bucket::try_acquire`] and
    /// [`Bucket::snapshot`] see only this process's local bucket at the same quota and
    /// algorithm (a bound
    /// for this process alone). Use [`RedisBucket::try_acquire`] for a shared decision without
    /// waiting.
    fn from(redis: RedisBucket) -> Self {
        let quota = redis.quota();
        Bucket::builder(quota)
            .algorithm(redis.algorithm())
            .remote(Arc::new(redis) as Arc<dyn Remote>)
            .build()
    }
}

impl RemoteKeyed for RedisKeyed {
    fn try_acquire(&self, key: KeyId, n: u32) -> RemoteDecision {
        let this = self.clone();
        Box::pin(async move { this.try_acquire(key, n).await })
    }

    fn release(&self, key: KeyId, n: u32) {
        let this = self.clone();
        detach(async move { this.release(key, n).await });
    }
}

impl<K: Hash + Eq + Clone> From<RedisKeyed> for KeyedBucket<K> {
    /// A [`KeyedBucket`] whose rejecting layer (`RateLimitLayer::keyed(..).reject()`) decides
    /// on Redis: server replicas share one limit per key. Keys are named by a fixed-key
    /// digest of their `Hash`, the same in every process of the same build. With a global
    /// ceiling, a request the ceiling refuses gives its key's token back.
    ///
    /// The synchronous [`KeyedBucket::try_acquire`] and [`KeyedBucket::snapshot`] cannot ask
    /// Redis: they see this process's local store only. Use [`RedisKeyed::try_acquire`] for a
    /// shared decision outside the layer.
    fn from(redis: RedisKeyed) -> Self {
        KeyedBucket::builder(redis.quota())
            .algorithm(redis.algorithm())
            .remote(Arc::new(redis) as Arc<dyn RemoteKeyed>)
            .build()
    }
}
