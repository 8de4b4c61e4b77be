//! A keyed limit whose decisions are made elsewhere (Redis), keys named by their
//! [`KeyDigest`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::bucket::RemoteDecision;
use crate::extract::KeyDigest;
#[cfg(feature = "redis")]
use crate::extract::StableKey;

/// A key as every process names it.
pub(crate) type KeyId = KeyDigest;

/// The name of requests that have no key (`MissingKey::Shared`): reserved bytes, not the
/// digest of any key's bytes (short of a SHA-1 preimage).
pub(crate) const KEYLESS: KeyId = KeyDigest::from_bytes(*b"\0tower-throttle\0");

/// Per-key decisions shared with other processes.
pub(crate) trait RemoteKeyed: Send + Sync + fmt::Debug {
    /// Decide whether `n` tokens of `key` fit: now, or within `max_wait` (zero: without
    /// waiting).
    fn try_acquire(&self, key: KeyId, n: u32, max_wait: Duration) -> RemoteDecision;
    /// Give back `n` tokens of an admission of `key` that another limit refused (fire and
    /// forget).
    fn release(&self, key: KeyId, n: u32);
}

/// A shared keyed limit, and how its keys of type `K` are named.
pub(crate) struct RemoteKeys<K> {
    pub(crate) store: Arc<dyn RemoteKeyed>,
    /// `K`'s [`StableKey::key_digest`](crate::extract::StableKey::key_digest): fixed when the
    /// keyed bucket is made from the store.
    pub(crate) name: fn(&K) -> KeyId,
}

impl<K> RemoteKeys<K> {
    /// The store, naming keys by their [`StableKey`] digest.
    #[cfg(feature = "redis")]
    pub(crate) fn new(store: Arc<dyn RemoteKeyed>) -> Self
    where
        K: StableKey,
    {
        RemoteKeys {
            store,
            name: <K as StableKey>::key_digest,
        }
    }
}

impl<K> Clone for RemoteKeys<K> {
    fn clone(&self) -> Self {
        RemoteKeys {
            store: Arc::clone(&self.store),
            name: self.name,
        }
    }
}

impl<K> fmt::Debug for RemoteKeys<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RemoteKeys").field(&self.store).finish()
    }
}
