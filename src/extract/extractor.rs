//! [`KeyExtractor`]: what a request is limited by.

use std::fmt;
use std::hash::Hash;
use std::net::IpAddr;

use http::header::{AUTHORIZATION, PROXY_AUTHORIZATION};
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
/// - A request without the header, or whose value is empty, has no key (see
///   [`MissingKey`](crate::reject::MissingKey)).
/// - A header sent more than once is keyed by its **first** value, the one applications
///   usually authenticate, so sending a key twice does not step out of its bucket. With
///   [`on_repeated(Repeated::NoKey)`](Self::on_repeated) such a request has no key instead:
///   pair it with [`MissingKey::Reject`](crate::reject::MissingKey::Reject) to refuse it.
/// - `Authorization` and `Proxy-Authorization` are keyed by credentials, not spelling: the
///   scheme is compared without case and the whitespace around it is dropped, so
///   `Bearer x`, `bearer x` and `BEARER  x` are one key (the token itself keeps its case).
///
/// Anyone can send any value: a header is worth what your service checks of it. A client
/// that sends someone else's key spends their quota, and one that sends fresh values gets
/// fresh buckets. To limit by a **verified** identity, key on what your authentication
/// layer found rather than on the raw header: put the limit inside (after) that layer, have
/// it insert the identity into the request's extensions, and read it there:
///
/// ```
/// use tower_throttle::extract::KeyExtractor;
///
/// /// Set by the authentication layer once the credentials are checked.
/// #[derive(Clone)]
/// struct TenantId(u64);
///
/// let by_tenant = |req: &http::Request<()>| req.extensions().get::<TenantId>().map(|t| t.0);
/// let mut req = http::Request::new(());
/// assert_eq!(by_tenant.extract(&req), None); // unauthenticated: the MissingKey outcome
/// req.extensions_mut().insert(TenantId(7));
/// assert_eq!(by_tenant.extract(&req), Some(7));
/// ```
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
    repeated: Repeated,
}

/// What a [`HeaderKey`] does with a request that sends its header more than once: set with
/// [`HeaderKey::on_repeated`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Repeated {
    /// The first value is the key (the default).
    #[default]
    First,
    /// The request has no key, and the layer's [`MissingKey`](crate::reject::MissingKey)
    /// outcome applies: with `MissingKey::Reject` it is refused with `400 Bad Request`.
    NoKey,
}

impl HeaderKey {
    /// Keys by the header `name`.
    pub fn new(name: HeaderName) -> Self {
        HeaderKey {
            name,
            repeated: Repeated::First,
        }
    }

    /// Keys by `X-Api-Key`.
    pub fn x_api_key() -> Self {
        Self::new(HeaderName::from_static("x-api-key"))
    }

    /// Keys by `Authorization` (a bearer token, say), its scheme normalised. gRPC metadata
    /// are HTTP/2 headers, so this and [`x_api_key`](Self::x_api_key) key gRPC calls by their
    /// metadata too.
    pub fn authorization() -> Self {
        Self::new(AUTHORIZATION)
    }

    /// What a request that repeats the header is keyed by (default [`Repeated::First`]).
    #[must_use]
    pub fn on_repeated(mut self, repeated: Repeated) -> Self {
        self.repeated = repeated;
        self
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
        let value = values.next()?.as_bytes();
        if self.repeated == Repeated::NoKey && values.next().is_some() {
            return None;
        }
        if self.name == AUTHORIZATION || self.name == PROXY_AUTHORIZATION {
            return credentials(value);
        }
        (!value.is_empty()).then(|| KeyDigest::of_bytes(value))
    }
}

/// The digest of credentials `scheme token…` with the scheme in lower case and one space
/// after it (a single word as it is); `None` when there is nothing but whitespace.
fn credentials(value: &[u8]) -> Option<KeyDigest> {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !ows(b))?;
    let end = value.iter().rposition(|b| !ows(b))? + 1;
    let value = &value[start..end];
    let Some(gap) = value.iter().position(ows) else {
        return Some(KeyDigest::of_bytes(value));
    };
    let token = value[gap..]
        .iter()
        .position(|b| !ows(b))
        .map_or(value.len(), |i| gap + i);
    let mut bytes = value[..gap].to_ascii_lowercase();
    bytes.push(b' ');
    bytes.extend_from_slice(&value[token..]);
    Some(KeyDigest::of_bytes(&bytes))
}

impl fmt::Debug for HeaderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeaderKey")
            .field("name", &self.name)
            .field("repeated", &self.repeated)
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
    ///
    /// One site often holds a /48: 65,536 /64s, each a bucket of its own. For a coarser tier,
    /// stack a second limit keyed by the /48 (or any prefix) with a larger quota; a request
    /// passes only if both admit it:
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tower::ServiceBuilder;
    /// use tower_throttle::extract::{KeyExtractor, PeerIp};
    /// use tower_throttle::keyed::KeyedBucket;
    /// use tower_throttle::{Quota, RejectLayer};
    ///
    /// let per_site = PeerIp::new().ipv6_prefix(48);
    /// let layers = ServiceBuilder::new()
    ///     .layer(RejectLayer::keyed(KeyedBucket::<IpAddr>::new(Quota::per_second(1_000)), per_site))
    ///     .layer(RejectLayer::keyed(KeyedBucket::<IpAddr>::new(Quota::per_second(50)), PeerIp::new()));
    ///
    /// let mut req = http::Request::new(());
    /// req.extensions_mut().insert("[2001:db8:1:ffff::7]:443".parse::<std::net::SocketAddr>()?);
    /// assert_eq!(per_site.extract(&req), Some("2001:db8:1::".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
        assert_eq!(k.extract(&req), a, "repeated header: the first value");
        let no_key = k.clone().on_repeated(Repeated::NoKey);
        assert_eq!(no_key.extract(&req), None, "repeated header");
        req.headers_mut().insert("x-api-key", "a".parse().unwrap());
        assert_eq!(no_key.extract(&req), a);
        let long = "x".repeat(8192);
        req.headers_mut().insert("x-api-key", long.parse().unwrap());
        assert!(k.extract(&req).is_some());
        req.headers_mut().insert(
            "x-api-key",
            http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert!(k.extract(&req).is_some(), "opaque bytes are fine");
    }

    #[test]
    fn authorization_is_keyed_by_credentials_not_spelling() {
        let key = |value: &'static str| {
            let req = Request::builder()
                .header("authorization", value)
                .body(())
                .unwrap();
            HeaderKey::authorization().extract(&req)
        };
        let x = key("Bearer x");
        assert!(x.is_some());
        for same in ["bearer x", "BEARER  x", " Bearer\tx ", "bEaReR \t x"] {
            assert_eq!(key(same), x, "{same:?}");
        }
        for other in ["Bearer X", "Bearer x y", "Basic x", "x", "Bearerx"] {
            assert_ne!(key(other), x, "{other:?}");
        }
        assert_eq!(key("Bearer x y"), key("bearer   x y"));
        assert_ne!(
            key("Bearer x  y"),
            key("Bearer x y"),
            "the token is kept as sent"
        );
        assert_eq!(key("tok"), Some(KeyDigest::of_bytes(b"tok")));
        assert_ne!(key("Tok"), key("tok"));
        assert_eq!(key(""), None);
        assert_eq!(key(" \t "), None);
        let proxy = HeaderKey::new(http::header::PROXY_AUTHORIZATION);
        let req = Request::builder()
            .header("proxy-authorization", "BASIC  x")
            .body(())
            .unwrap();
        assert_eq!(proxy.extract(&req), key("basic x"));
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
