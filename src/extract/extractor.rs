//! [`KeyExtractor`]: what a request is limited by.

use std::fmt;
use std::hash::Hash;
use std::net::IpAddr;

use http::{HeaderName, Request};

use super::ip::{peer_addr, Grouping};
use super::stable::KeyDigest;

/// Finds the key a request is limited by: an API key, a user, a client address…
///
/// `None` means the request has no usable key (the input is missing or malformed); the
/// layer then applies its [`MissingKey`](crate::reject::MissingKey) outcome. An extractor must not
/// panic, whatever the request holds.
///
/// Any `Fn(&Request<B>) -> Option<K>` is an extractor:
///
/// ```
/// use tower_throttle::extract::KeyExtractor;
///
/// let by_user = |req: &http::Request<()>| {
///     req.headers().get("x-user-id")?.to_str().ok()?.parse::<u64>().ok()
/// };
/// let req = http::Request::builder().header("x-user-id", "42").body(()).unwrap();
/// assert_eq!(by_user.extract(&req), Some(42));
/// assert_eq!(by_user.extract(&http::Request::new(())), None);
/// ```
pub trait KeyExtractor<B> {
    /// The key.
    type Key: Hash + Eq + Clone;

    /// The key of `req`, or `None` when it has none.
    fn extract(&self, req: &Request<B>) -> Option<Self::Key>;

    /// Whether every request has a key when the server is set up right, so a request
    /// without one is a wiring mistake: the rejecting layer then answers it `500` by default
    /// ([`MissingKey::Fail`](crate::reject::MissingKey::Fail)) instead of sharing one bucket
    /// between keyless requests. `false` (the default) for keys clients may omit, such as a
    /// header.
    fn requires_key(&self) -> bool {
        false
    }
}

impl<B, K, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<K>,
    K: Hash + Eq + Clone,
{
    type Key = K;

    fn extract(&self, req: &Request<B>) -> Option<K> {
        self(req)
    }
}

/// Keys requests by the value of one header, such as `X-Api-Key`.
///
/// The value is not stored: the key is its [`KeyDigest`] (128 bits of SHA-1 over the value's
/// bytes), so a key costs 16 bytes whatever its length, and every process, build and
/// platform names a value alike: a limit shared through Redis names the value `k1` exactly
/// as `RedisKeyed::try_acquire("k1")` does. The keyed store hashes digests again with a
/// random seed, so clients cannot pick values that collide in its table.
///
/// A request without the header, with an empty value or with the header repeated has no key
/// (see [`MissingKey`](crate::reject::MissingKey)).
///
/// Anyone can send any value: key by a header only when the value is checked (an API key
/// that your service authenticates), or accept that a client may spend someone else's quota
/// by sending their key.
///
/// ```
/// use tower_throttle::extract::{HeaderKey, KeyExtractor};
///
/// let api_key = HeaderKey::x_api_key();
/// let req = |key: &str| http::Request::builder().header("x-api-key", key).body(()).unwrap();
/// assert_eq!(api_key.extract(&req("k1")), api_key.extract(&req("k1")));
/// assert_ne!(api_key.extract(&req("k1")), api_key.extract(&req("k2")));
/// assert_eq!(api_key.extract(&http::Request::new(())), None);
/// ```
#[derive(Clone)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// Keys by the header `name`.
    pub fn new(name: HeaderName) -> Self {
        HeaderKey { name }
    }

    /// Keys by `X-Api-Key`.
    pub fn x_api_key() -> Self {
        Self::new(HeaderName::from_static("x-api-key"))
    }

    /// Keys by `Authorization` (a bearer token, say). gRPC metadata are HTTP/2 headers, so
    /// this and [`x_api_key`](Self::x_api_key) key gRPC calls by their metadata too.
    pub fn authorization() -> Self {
        Self::new(http::header::AUTHORIZATION)
    }

    /// The header read.
    pub fn name(&self) -> &HeaderName {
        &self.name
    }
}

impl<B> KeyExtractor<B> for HeaderKey {
    type Key = KeyDigest;

    fn extract(&self, req: &Request<B>) -> Option<KeyDigest> {
        let mut values = req.headers().get_all(&self.name).iter();
        let value = values.next()?;
        if values.next().is_some() || value.is_empty() {
            return None;
        }
        Some(KeyDigest::of_bytes(value.as_bytes()))
    }
}

impl fmt::Debug for HeaderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeaderKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Keys requests by the address of the connection they came in on.
///
/// The address is read from the request extensions: a [`SocketAddr`](std::net::SocketAddr)
/// (insert it in your hyper accept loop), or, with the `axum` feature, axum's
/// `ConnectInfo<SocketAddr>` (serve with `into_make_service_with_connect_info`). Without
/// either the request has no key (see [`MissingKey`](crate::reject::MissingKey)).
///
/// IPv6 clients are keyed by their /64 (one customer usually holds a whole /64, and could
/// otherwise take a fresh bucket with every address); IPv4-mapped IPv6 addresses count as
/// IPv4. Behind a reverse proxy every request has the proxy's address: use
/// [`ClientIp`](super::ClientIp) there.
///
/// ```
/// use std::net::SocketAddr;
/// use tower_throttle::extract::{KeyExtractor, PeerIp};
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert("[2001:db8:1:2:3:4:5:6]:443".parse::<SocketAddr>()?);
/// assert_eq!(PeerIp::new().extract(&req), Some("2001:db8:1:2::".parse()?));
/// assert_eq!(PeerIp::new().ipv6_prefix(128).extract(&req), Some("2001:db8:1:2:3:4:5:6".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp {
    grouping: Grouping,
}

impl PeerIp {
    /// Keys by peer address: IPv4 addresses whole, IPv6 by /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Key IPv6 peers by their first `bits` bits (default 64; at most 128).
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.grouping = self.grouping.with_v6(bits);
        self
    }

    /// Key IPv4 peers by their first `bits` bits (default 32; at most 32).
    #[must_use]
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.grouping = self.grouping.with_v4(bits);
        self
    }
}

impl<B> KeyExtractor<B> for PeerIp {
    type Key = IpAddr;

    fn extract(&self, req: &Request<B>) -> Option<IpAddr> {
        peer_addr(req).map(|addr| self.grouping.key(addr.ip()))
    }

    /// `true`: every connection has a peer address, unless the server does not record it.
    fn requires_key(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn header_key_rules() {
        let k = HeaderKey::x_api_key();
        let mut req = Request::new(());
        assert_eq!(k.extract(&req), None);
        req.headers_mut().insert("x-api-key", "".parse().unwrap());
        assert_eq!(k.extract(&req), None);
        req.headers_mut().insert("x-api-key", "a".parse().unwrap());
        let a = k.extract(&req);
        assert!(a.is_some());
        req.headers_mut().append("x-api-key", "b".parse().unwrap());
        assert_eq!(k.extract(&req), None, "repeated header");
        let long = "x".repeat(8192);
        req.headers_mut().insert("x-api-key", long.parse().unwrap());
        assert!(k.extract(&req).is_some());
        req.headers_mut().insert(
            "x-api-key",
            http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert!(k.extract(&req).is_some(), "opaque bytes are fine");
    }

    #[cfg(feature = "axum")]
    #[test]
    fn peer_ip_reads_axum_connect_info() {
        let mut req = Request::new(());
        assert_eq!(PeerIp::new().extract(&req), None);
        let addr: SocketAddr = "192.0.2.1:9".parse().unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(addr));
        assert_eq!(PeerIp::new().extract(&req), Some(addr.ip()));
    }

    #[test]
    fn peer_ip_groups() {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert("[::ffff:192.0.2.1]:9".parse::<SocketAddr>().unwrap());
        assert_eq!(
            PeerIp::new().extract(&req),
            Some("192.0.2.1".parse().unwrap())
        );
        assert_eq!(
            PeerIp::new().ipv4_prefix(24).extract(&req),
            Some("192.0.2.0".parse().unwrap())
        );
    }
}
