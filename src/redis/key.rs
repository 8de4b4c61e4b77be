//! Redis key names: `<prefix>:{<name>}` for a bucket, `<prefix>:v1:{<digest>}` for a key of
//! a keyed limit (the [key scheme](crate::extract::StableKey), version 1).
//!
//! The part in braces is the Redis Cluster *hash tag*: the slot is computed from it alone, so
//! one bucket's key always lands on one slot, and keyed limits spread over the cluster. Key
//! material from requests (API keys, user ids, addresses) is never stored: it is named by
//! its [`KeyDigest`] (SHA-1 over the key's canonical bytes, 128 bits kept, hex), so names
//! have a fixed length, carry no secret, are the same in every process and build, and no
//! client can pick a slot or step into another namespace with `{`, `}` or `:`.

use super::error::RedisError;
use crate::extract::{KeyDigest, KEY_SCHEME_VERSION};

/// The longest prefix accepted.
pub(crate) const MAX_PREFIX_LEN: usize = 64;
/// The longest bucket name accepted.
pub(crate) const MAX_NAME_LEN: usize = 128;

/// The default key prefix.
pub(crate) const DEFAULT_PREFIX: &str = "tower-throttle";

/// Printable ASCII without spaces and braces: safe in a key and for the hash tag.
fn is_plain(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
}

pub(crate) fn check_prefix(prefix: &str) -> Result<(), RedisError> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN || !is_plain(prefix) {
        return Err(RedisError::config(
            "redis key prefix must be 1 to 64 printable ASCII characters, without spaces or braces",
        ));
    }
    Ok(())
}

/// The Redis key of a named bucket.
pub(crate) fn bucket_key(prefix: &str, name: &str) -> Result<String, RedisError> {
    check_prefix(prefix)?;
    if name.is_empty() || name.len() > MAX_NAME_LEN || !is_plain(name) {
        return Err(RedisError::config(
            "redis bucket name must be 1 to 128 printable ASCII characters, without spaces or braces",
        ));
    }
    Ok(format!("{prefix}:{{{name}}}"))
}

/// The Redis key of one key of a keyed limit, from its digest.
pub(crate) fn keyed_key(prefix: &str, digest: &KeyDigest) -> String {
    format!("{prefix}:v{KEY_SCHEME_VERSION}:{{{digest}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(bucket_key("app", "github").unwrap(), "app:{github}");
        for bad in ["", "a b", "a{b", "x}", "é", "\n"] {
            assert!(bucket_key("app", bad).is_err(), "{bad:?}");
            assert!(bucket_key(bad, "ok").is_err(), "{bad:?}");
        }
        assert!(bucket_key(&"p".repeat(65), "ok").is_err());
        assert!(bucket_key("p", &"n".repeat(129)).is_err());
        assert!(bucket_key(&"p".repeat(64), &"n".repeat(128)).is_ok());
    }

    #[test]
    fn keyed_names_are_bounded_and_tagged() {
        let digest = |b: &[u8]| KeyDigest::of_bytes(b);
        let k = keyed_key("app", &digest(b"{evil}:key"));
        assert_eq!(k.len(), "app:v1:{".len() + 32 + 1);
        assert!(k.starts_with("app:v1:{") && k.ends_with('}'));
        let huge = vec![b'{'; 1 << 20];
        assert_eq!(keyed_key("app", &digest(&huge)).len(), k.len());
        // SHA-1("abc") starts a9993e36 4706816a.
        assert_eq!(
            keyed_key("p", &digest(b"abc")),
            "p:v1:{a9993e364706816aba3e25717850c26c}"
        );
    }
}
