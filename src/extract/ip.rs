//! IP addresses as keys: [`Cidr`] ranges, the peer address of a request, and grouping
//! (an IPv6 client usually owns a whole /64, so it is keyed by its /64).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use http::Request;

/// An IP address range such as `10.0.0.0/8` or `2001:db8::/32`.
///
/// Parsed from `addr/prefix`, or from a bare address (one host). IPv4-mapped IPv6 addresses
/// (`::ffff:10.1.2.3`) are matched as the IPv4 address they carry.
///
/// ```
/// use tower_throttle::extract::Cidr;
///
/// let proxies: Cidr = "10.0.0.0/8".parse()?;
/// assert!(proxies.contains("10.20.30.40".parse()?));
/// assert!(proxies.contains("::ffff:10.0.0.1".parse()?));
/// assert!(!proxies.contains("192.0.2.1".parse()?));
/// assert!("10.0.0.0/33".parse::<Cidr>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A [`Cidr`] that could not be parsed or built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError {
    input: String,
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid CIDR {:?}: expected an IP address with an optional /prefix",
            self.input
        )
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// The range of `prefix` leading bits of `addr` (host bits are cleared).
    ///
    /// # Errors
    /// When `prefix` is longer than the address (32 for IPv4, 128 for IPv6).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
                _ => (addr, prefix),
            },
            IpAddr::V4(_) => (addr, prefix),
        };
        if prefix > max_prefix(addr) {
            return Err(CidrError {
                input: format!("{addr}/{prefix}"),
            });
        }
        Ok(Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The first address of the range.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CidrError {
            input: s.chars().take(64).collect(),
        };
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((addr, prefix)) => {
                let addr: IpAddr = addr.parse().map_err(|_| err())?;
                if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                (addr, prefix.parse::<u8>().map_err(|_| err())?)
            }
            None => {
                let addr: IpAddr = s.trim().parse().map_err(|_| err())?;
                (addr, max_prefix(addr))
            }
        };
        Cidr::new(addr, prefix).map_err(|_| err())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

/// `addr` with all but its `prefix` leading bits cleared.
fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & kept))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & kept))
        }
    }
}

/// How client addresses are grouped into keys: by default each IPv4 address is its own key
/// and IPv6 addresses are keyed by their /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grouping {
    pub(crate) v4: u8,
    pub(crate) v6: u8,
}

impl Default for Grouping {
    fn default() -> Self {
        Grouping { v4: 32, v6: 64 }
    }
}

impl Grouping {
    /// IPv6 addresses keyed by their first `bits` bits (at most 128).
    pub(crate) fn with_v6(self, bits: u8) -> Self {
        Grouping {
            v6: bits.min(128),
            ..self
        }
    }

    /// IPv4 addresses keyed by their first `bits` bits (at most 32).
    pub(crate) fn with_v4(self, bits: u8) -> Self {
        Grouping {
            v4: bits.min(32),
            ..self
        }
    }

    /// The key of `ip`: IPv4-mapped addresses count as IPv4, then the prefix is kept.
    pub(crate) fn key(&self, ip: IpAddr) -> IpAddr {
        let ip = ip.to_canonical();
        let prefix = if ip.is_ipv4() { self.v4 } else { self.v6 };
        mask(ip, prefix)
    }
}

/// The address of the connection a request came in on: a [`SocketAddr`] in the request
/// extensions (put there by a hyper accept loop), or axum's `ConnectInfo<SocketAddr>`.
pub(crate) fn peer_addr<B>(req: &Request<B>) -> Option<SocketAddr> {
    if let Some(addr) = req.extensions().get::<SocketAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(info) = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_contain() {
        let c: Cidr = "192.168.0.0/16".parse().unwrap();
        assert!(c.contains(ip("192.168.255.1")));
        assert!(!c.contains(ip("192.169.0.1")));
        assert!(!c.contains(ip("::1")));
        let host: Cidr = "2001:db8::1".parse().unwrap();
        assert_eq!(host.prefix(), 128);
        assert!(host.contains(ip("2001:db8::1")));
        assert!(!host.contains(ip("2001:db8::2")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12:3456::1")));
        assert_eq!(
            "10.1.2.3/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        assert!(mapped.contains(ip("10.9.9.9")));
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "x/1",
            "10.0.0.0/8/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn grouping() {
        let g = Grouping::default();
        assert_eq!(g.key(ip("203.0.113.9")), ip("203.0.113.9"));
        assert_eq!(g.key(ip("::ffff:203.0.113.9")), ip("203.0.113.9"));
        assert_eq!(
            g.key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        let g = Grouping { v4: 24, v6: 128 };
        assert_eq!(g.key(ip("203.0.113.9")), ip("203.0.113.0"));
        assert_eq!(g.key(ip("2001:db8::7")), ip("2001:db8::7"));
    }
}
