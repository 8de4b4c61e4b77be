//! [`StableKey`] and [`KeyDigest`]: one name for a key in every process, build and platform.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The version of the key scheme, as it appears in Redis key names (`v1`).
pub const KEY_SCHEME_VERSION: u32 = 1;

/// A key with a specified byte encoding: its name in a shared store is the same in every
/// process, build and platform.
///
/// A limit shared through a store (Redis) names each key by a digest, and every process of
/// the limit must compute the same digest for the same key — across releases of Rust, of
/// this crate, and 32- and 64-bit targets. `std`'s `Hash` promises none of that (its
/// algorithm is unspecified, and a `usize` hashes differently by width), so keys are named
/// from a specified encoding instead.
///
/// # Key scheme, version 1
/// 1. **Canonical bytes** ([`StableKey::write_key_bytes`]):
///    - strings: their UTF-8 bytes; byte strings: the bytes themselves;
///    - integers: fixed width, little-endian (`u8`…`u128`, `i8`…`i128`); `usize` and
///      `isize` as 8 bytes (`u64`, `i64`), whatever the target;
///    - `bool`: one byte, 0 or 1; `()`: no bytes;
///    - IP addresses: 16 bytes, the IPv6 address, IPv4 as IPv4-mapped (`::ffff:a.b.c.d`);
///    - a [`KeyDigest`]: it is already the name (see below).
/// 2. **Digest**: the first 16 bytes of SHA-1 over those bytes ([`KeyDigest::of_bytes`]).
/// 3. **Redis key**: `<prefix>:v1:{<32 lowercase hex digits>}`. The `v1` names this scheme:
///    a later scheme gets another version, so two schemes never read each other's state.
///
/// There is no type tag: the string `"42"` and the integer `42` are different bytes, but a
/// byte string and a string of the same bytes are one key — so `RedisKeyed::try_acquire("alice")`
/// and a layer whose extractor returns `String::from("alice")` share one limit.
///
/// ```
/// use tower_throttle::extract::{KeyDigest, StableKey};
///
/// assert_eq!("alice".key_digest(), String::from("alice").key_digest());
/// assert_eq!("alice".key_digest(), b"alice".key_digest());
/// assert_eq!(42u64.key_digest(), KeyDigest::of_bytes(&42u64.to_le_bytes()));
/// // SHA-1("abc") begins a9993e36 4706816a ba3e2571 7850c26c.
/// assert_eq!("abc".key_digest().to_string(), "a9993e364706816aba3e25717850c26c");
/// ```
///
/// Implemented for strings, byte strings, integers, `bool`, `()`, IP addresses,
/// [`KeyDigest`], and references and boxes of those. For a key type of your own, write its
/// fields' bytes one after another (fixed-width fields, or each variable-length field
/// preceded by its length), and never change that encoding while a limit is in use.
pub trait StableKey {
    /// Append this key's canonical bytes to `out`.
    fn write_key_bytes(&self, out: &mut Vec<u8>);

    /// The digest naming this key: [`KeyDigest::of_bytes`] of its canonical bytes.
    fn key_digest(&self) -> KeyDigest {
        let mut bytes = Vec::new();
        self.write_key_bytes(&mut bytes);
        KeyDigest::of_bytes(&bytes)
    }
}

/// A key's name in a shared store: 128 bits of SHA-1 over the key's canonical bytes.
///
/// [`HeaderKey`](super::HeaderKey) keys requests by the digest of a header's value, so the
/// value itself is never kept. A digest is its own [`StableKey`]: the digest of `"alice"`
/// names the same limit as `"alice"`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyDigest([u8; 16]);

impl KeyDigest {
    /// The digest of `bytes`: the first 16 bytes of their SHA-1.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        let full = sha1_smol::Sha1::from(bytes).digest().bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        KeyDigest(out)
    }

    /// A digest given by its 16 bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        KeyDigest(bytes)
    }

    /// The 16 bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

/// 32 lowercase hex digits, as in Redis key names.
impl fmt::Display for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyDigest({self})")
    }
}

impl StableKey for KeyDigest {
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }

    /// Itself: a digest is already a name.
    fn key_digest(&self) -> KeyDigest {
        *self
    }
}

/// Keys written as their bytes.
macro_rules! as_bytes {
    ($($t:ty),*) => {$(
        impl StableKey for $t {
            fn write_key_bytes(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(AsRef::<[u8]>::as_ref(self));
            }
        }
    )*};
}

as_bytes!(str, String, [u8], Vec<u8>);

impl<const N: usize> StableKey for [u8; N] {
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

macro_rules! fixed_width {
    ($($t:ty),*) => {$(
        impl StableKey for $t {
            fn write_key_bytes(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

fixed_width!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

impl StableKey for usize {
    /// As a `u64`, on every target.
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        // `usize` is at most 64 bits on every target Rust supports.
        (*self as u64).write_key_bytes(out);
    }
}

impl StableKey for isize {
    /// As an `i64`, on every target.
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        (*self as i64).write_key_bytes(out);
    }
}

impl StableKey for bool {
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl StableKey for () {
    fn write_key_bytes(&self, _: &mut Vec<u8>) {}
}

impl StableKey for Ipv6Addr {
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.octets());
    }
}

impl StableKey for Ipv4Addr {
    /// As its IPv4-mapped IPv6 address: 16 bytes.
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        self.to_ipv6_mapped().write_key_bytes(out);
    }
}

impl StableKey for IpAddr {
    fn write_key_bytes(&self, out: &mut Vec<u8>) {
        match self {
            IpAddr::V4(v4) => v4.write_key_bytes(out),
            IpAddr::V6(v6) => v6.write_key_bytes(out),
        }
    }
}

/// Pointers: the key they point to.
macro_rules! forward {
    ($($t:ty),*) => {$(
        impl<T: StableKey + ?Sized> StableKey for $t {
            fn write_key_bytes(&self, out: &mut Vec<u8>) {
                (**self).write_key_bytes(out);
            }

            fn key_digest(&self) -> KeyDigest {
                (**self).key_digest()
            }
        }
    )*};
}

forward!(&T, Box<T>, Arc<T>);

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(k: &impl StableKey) -> Vec<u8> {
        let mut v = Vec::new();
        k.write_key_bytes(&mut v);
        v
    }

    #[test]
    fn encodings_are_as_specified() {
        assert_eq!(bytes(&"é"), vec![0xc3, 0xa9]);
        assert_eq!(bytes(&0x0102u16), vec![2, 1]);
        assert_eq!(bytes(&-1i32), vec![0xff; 4]);
        assert_eq!(bytes(&7usize), bytes(&7u64));
        assert_eq!(bytes(&-7isize), bytes(&-7i64));
        assert_eq!(bytes(&true), vec![1]);
        assert!(bytes(&()).is_empty());
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(bytes(&v4).len(), 16);
        assert_eq!(bytes(&v4), bytes(&mapped));
        assert_eq!(
            bytes(&v4),
            [&[0u8; 10][..], &[0xff, 0xff, 192, 0, 2, 1]].concat()
        );
    }

    #[test]
    fn a_digest_names_itself() {
        let d = "alice".key_digest();
        assert_eq!(d.key_digest(), d);
        assert_eq!(StableKey::key_digest(&&d), d);
        assert_ne!(d, "bob".key_digest());
        assert_eq!(KeyDigest::from_bytes(*d.as_bytes()), d);
    }
}
