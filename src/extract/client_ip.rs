//! [`ClientIp`]: the client's address behind trusted reverse proxies.

use std::net::IpAddr;
use std::sync::Arc;

use http::Request;

use super::extractor::KeyExtractor;
use super::forwarded::{self, Hop};
use super::ip::{peer_addr, Cidr, CidrError, Grouping};

/// Which proxy fields [`ClientIp`] reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyHeaders {
    /// `X-Forwarded-For` only.
    XForwardedFor,
    /// `Forwarded` (RFC 7239) only.
    Forwarded,
    /// Both; when both name a client and they disagree, neither is believed (see
    /// [`ClientIp`]).
    #[default]
    Both,
}

/// Keys requests by the client's IP address, read from `X-Forwarded-For` / `Forwarded` only
/// when the connection comes from a trusted proxy.
///
/// Anyone can write these fields, so they are worth only what the proxies you run append to
/// them. The rule:
///
/// 1. The peer (the connection's address, as [`PeerIp`](super::PeerIp) reads it) is not a
///    trusted proxy: the peer **is** the client. The fields are ignored, so a client cannot
///    choose its own key by sending them.
/// 2. Otherwise each field (every line of it, in order) is walked from the right, skipping
///    trusted proxies: the first address that is not trusted is the client — the right-most
///    untrusted hop, the last one a trusted proxy vouched for. Entries to its left were
///    written by the client and are never read. If every hop is trusted, the left-most one
///    is the client (an internal caller).
/// 3. With [`ProxyHeaders::Both`] (the default), when both fields name a client and the
///    names differ, one of them was forged: the request is keyed by the peer instead (it
///    shares the proxy's bucket with other such requests, and gains nothing).
/// 4. A hop that cannot be read (`unknown`, an obfuscated name, garbage, a malformed
///    `Forwarded` element) where the walk needs it stops the walk: the request is keyed by
///    the peer. A quote a client leaves open in `Forwarded` does not hide the elements a
///    proxy appends after it.
///
/// Without a peer address (see [`PeerIp`](super::PeerIp)) there is no key, and the layer's
/// [`MissingKey`](crate::reject::MissingKey) outcome applies. Keys are grouped like those of
/// [`PeerIp`](super::PeerIp): IPv6 by /64 unless configured otherwise.
///
/// ```
/// use std::net::SocketAddr;
/// use tower_throttle::extract::{ClientIp, KeyExtractor};
///
/// let client_ip = ClientIp::trusting(["10.0.0.0/8"])?;
///
/// let proxied = |peer: &str, xff: &str| {
///     let mut req = http::Request::new(());
///     req.extensions_mut().insert(peer.parse::<SocketAddr>().unwrap());
///     req.headers_mut().insert("x-forwarded-for", xff.parse().unwrap());
///     req
/// };
/// // Through our proxy: the right-most hop that is not ours.
/// let req = proxied("10.0.0.2:5000", "6.6.6.6, 203.0.113.9, 10.0.0.7");
/// assert_eq!(client_ip.extract(&req), Some("203.0.113.9".parse()?));
/// // Straight from the internet: the field is the client's own words, ignored.
/// let req = proxied("203.0.113.9:5000", "1.2.3.4");
/// assert_eq!(client_ip.extract(&req), Some("203.0.113.9".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientIp {
    trusted: Arc<[Cidr]>,
    headers: ProxyHeaders,
    grouping: Grouping,
}

/// What one field says about the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Absent,
    Client(IpAddr),
    Unreadable,
}

impl ClientIp {
    /// Trusts the proxies in `trusted` (may be empty: then every request is keyed by its
    /// peer).
    pub fn new(trusted: impl IntoIterator<Item = Cidr>) -> Self {
        ClientIp {
            trusted: trusted.into_iter().collect(),
            headers: ProxyHeaders::default(),
            grouping: Grouping::default(),
        }
    }

    /// Trusts the proxies in `cidrs`, given as text (`"10.0.0.0/8"`, `"fd00::/8"`,
    /// `"192.0.2.7"`).
    ///
    /// # Errors
    /// [`CidrError`] for the first range that does not parse.
    pub fn trusting<I>(cidrs: I) -> Result<Self, CidrError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let trusted = cidrs
            .into_iter()
            .map(|c| c.as_ref().parse())
            .collect::<Result<Vec<Cidr>, _>>()?;
        Ok(Self::new(trusted))
    }

    /// Which fields to read (default: both).
    #[must_use]
    pub fn headers(mut self, headers: ProxyHeaders) -> Self {
        self.headers = headers;
        self
    }

    /// Key IPv6 clients by their first `bits` bits (default 64; at most 128). For a /48 tier
    /// stacked on the /64 one, see [`PeerIp::ipv6_prefix`](super::PeerIp::ipv6_prefix).
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.grouping = self.grouping.with_v6(bits);
        self
    }

    /// Key IPv4 clients by their first `bits` bits (default 32; at most 32).
    #[must_use]
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.grouping = self.grouping.with_v4(bits);
        self
    }

    /// The client address of `req` by the rule above, before grouping.
    pub fn client_ip<B>(&self, req: &Request<B>) -> Option<IpAddr> {
        let peer = peer_addr(req)?.ip().to_canonical();
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        let headers = req.headers();
        let xff = match self.headers {
            ProxyHeaders::Forwarded => Found::Absent,
            _ => self.walk(forwarded::x_forwarded_for(headers)),
        };
        let fwd = match self.headers {
            ProxyHeaders::XForwardedFor => Found::Absent,
            _ => self.walk(forwarded::forwarded(headers)),
        };
        Some(match (xff, fwd) {
            (Found::Client(a), Found::Client(b)) if a == b => a,
            (Found::Client(a), Found::Absent) | (Found::Absent, Found::Client(a)) => a,
            (Found::Absent, Found::Absent) => peer,
            _ => peer,
        })
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(ip))
    }

    /// The right-most untrusted hop, or the left-most hop when all are trusted.
    fn walk(&self, hops: Option<Vec<Hop>>) -> Found {
        let Some(hops) = hops else {
            return Found::Absent;
        };
        let mut leftmost = None;
        for hop in hops.iter().rev() {
            match *hop {
                Hop::Bad => return Found::Unreadable,
                Hop::Ip(ip) => {
                    let ip = ip.to_canonical();
                    if !self.is_trusted(ip) {
                        return Found::Client(ip);
                    }
                    leftmost = Some(ip);
                }
            }
        }
        leftmost.map_or(Found::Absent, Found::Client)
    }
}

impl<B> KeyExtractor<B> for ClientIp {
    type Key = IpAddr;

    fn extract(&self, req: &Request<B>) -> Option<IpAddr> {
        self.client_ip(req).map(|ip| self.grouping.key(ip))
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

    fn req(peer: &str, fields: &[(&'static str, &'static str)]) -> Request<()> {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        for &(name, value) in fields {
            req.headers_mut()
                .append(name, http::HeaderValue::from_static(value));
        }
        req
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn proxies() -> ClientIp {
        ClientIp::trusting(["10.0.0.0/8", "fd00::/8"]).unwrap()
    }

    #[test]
    fn untrusted_peer_is_the_client() {
        let c = proxies();
        let r = req(
            "198.51.100.1:1",
            &[("x-forwarded-for", "1.1.1.1"), ("forwarded", "for=2.2.2.2")],
        );
        assert_eq!(c.extract(&r), ip("198.51.100.1"));
    }

    #[test]
    fn right_most_untrusted_hop() {
        let c = proxies();
        let r = req(
            "10.0.0.1:1",
            &[("x-forwarded-for", "9.9.9.9, 203.0.113.5, 10.1.1.1")],
        );
        assert_eq!(c.extract(&r), ip("203.0.113.5"));
        let r = req(
            "[fd00::1]:1",
            &[(
                "forwarded",
                "for=9.9.9.9, for=\"[2001:db8::1]:443\", for=10.2.2.2",
            )],
        );
        assert_eq!(c.extract(&r), ip("2001:db8::")); // grouped by /64
        assert_eq!(c.client_ip(&r), ip("2001:db8::1"));
        // Several lines are one list.
        let r = req(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", "9.9.9.9"),
                ("x-forwarded-for", "203.0.113.5, 10.1.1.1"),
            ],
        );
        assert_eq!(c.extract(&r), ip("203.0.113.5"));
    }

    #[test]
    fn a_forwarded_line_left_quoted_by_the_client_keys_on_the_real_address() {
        // The client sent `for=6.6.6.6;x="`; the proxy appended `, for=<peer of the proxy>`.
        let forged = "for=6.6.6.6;x=\", for=203.0.113.5";
        for c in [proxies(), proxies().headers(ProxyHeaders::Forwarded)] {
            let r = req("10.0.0.1:1", &[("forwarded", forged)]);
            assert_eq!(c.extract(&r), ip("203.0.113.5"));
        }
        let r = req(
            "10.0.0.1:1",
            &[("forwarded", "for=6.6.6.6;x=\", for=\"203.0.113.5\"")],
        );
        assert_eq!(proxies().extract(&r), ip("203.0.113.5"));
        // A malformed element where the walk needs it stops the walk.
        let r = req(
            "10.0.0.1:1",
            &[("forwarded", "for=203.0.113.5, for=10.1.1.1;x")],
        );
        assert_eq!(proxies().extract(&r), ip("10.0.0.1"));
    }

    #[test]
    fn all_trusted_or_absent() {
        let c = proxies();
        let r = req("10.0.0.1:1", &[("x-forwarded-for", "10.9.9.9, 10.1.1.1")]);
        assert_eq!(c.extract(&r), ip("10.9.9.9"));
        let r = req("10.0.0.1:1", &[]);
        assert_eq!(c.extract(&r), ip("10.0.0.1"));
    }

    #[test]
    fn both_fields_must_agree() {
        let c = proxies();
        let agree = req(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", "203.0.113.5"),
                ("forwarded", "for=203.0.113.5"),
            ],
        );
        assert_eq!(c.extract(&agree), ip("203.0.113.5"));
        let forged = req(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", "203.0.113.5"),
                ("forwarded", "for=6.6.6.6"),
            ],
        );
        assert_eq!(c.extract(&forged), ip("10.0.0.1"));
        // Told to read one field only, the other is ignored.
        let xff_only = c.clone().headers(ProxyHeaders::XForwardedFor);
        assert_eq!(xff_only.extract(&forged), ip("203.0.113.5"));
        let fwd_only = c.headers(ProxyHeaders::Forwarded);
        assert_eq!(fwd_only.extract(&forged), ip("6.6.6.6"));
    }

    #[test]
    fn unreadable_hops_fall_back_to_the_peer() {
        let c = proxies();
        for xff in ["garbage", "9.9.9.9, unknown", "", "1.2.3.4,"] {
            let r = req("10.0.0.1:1", &[("x-forwarded-for", xff)]);
            assert_eq!(c.extract(&r), ip("10.0.0.1"), "{xff:?}");
        }
        // Garbage left of the client is never read.
        let r = req("10.0.0.1:1", &[("x-forwarded-for", "garbage, 203.0.113.5")]);
        assert_eq!(c.extract(&r), ip("203.0.113.5"));
    }

    #[test]
    fn no_peer_no_key() {
        let c = proxies();
        let mut r = Request::new(());
        r.headers_mut()
            .insert("x-forwarded-for", http::HeaderValue::from_static("1.2.3.4"));
        assert_eq!(c.extract(&r), None);
    }
}
