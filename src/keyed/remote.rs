//! A keyed limit whose decisions are made elsewhere (Redis), and a key digest that is the
//! same in every process.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::bucket::RemoteDecision;

/// A key as every process names it: 128 bits of SipHash with fixed keys.
pub(crate) type KeyId = [u8; 16];

/// The id of requests that have no key (`MissingKey::Shared`).
pub(crate) const KEYLESS: KeyId = *b"\0tower-throttle\0";

/// The same digest of `key` in every process of the same build. (`DefaultHasher::new()` uses
/// fixed keys; a different Rust release may hash differently, so processes sharing a limit
/// should run the same build.)
pub(crate) fn key_id<K: Hash>(key: &K) -> KeyId {
    let half = |salt: u8| {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        key.hash(&mut h);
        h.finish().to_le_bytes()
    };
    let mut id = [0; 16];
    id[..8].copy_from_slice(&half(0));
    id[8..].copy_from_slice(&half(1));
    id
}

/// Per-key decisions shared with other processes.
pub(crate) trait RemoteKeyed: Send + Sync + fmt::Debug {
    /// Decide now whether `n` tokens of `key` fit.
    fn try_acquire(&self, key: KeyId, n: u32) -> RemoteDecision;
    /// Give back `n` tokens of an admission of `key` that another limit refused (fire and
    /// forget).
    fn release(&self, key: KeyId, n: u32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_stable_and_distinct() {
        assert_eq!(key_id(&"alice"), key_id(&"alice".to_string()));
        assert_ne!(key_id(&"alice"), key_id(&"bob"));
        assert_ne!(key_id(&1u64), key_id(&2u64));
        // Fixed keys: this value is the same in every process of this build.
        assert_eq!(key_id(&42u64), key_id(&42u64));
    }
}
