//! Key extraction: the [`KeyExtractor`]s that find what a request is limited by, for the
//! per-key limits of [`RejectLayer::keyed`](crate::RejectLayer::keyed), and the
//! [`StableKey`] encoding that names a key in a shared store.
//!
//! | Extractor | Key | Use |
//! |---|---|---|
//! | [`PeerIp`] | connection address (IPv6 by /64) | servers facing clients directly |
//! | [`ClientIp`] | client address behind trusted proxies | behind a load balancer / CDN |
//! | [`HeaderKey`] | a header's value ([`KeyDigest`]) | API keys, tenant ids |
//! | any `Fn(&Request<B>) -> Option<K>` | yours | users, routes… |
//!
//! ```
//! use tower_throttle::extract::{HeaderKey, KeyExtractor, StableKey};
//!
//! let req = http::Request::builder().header("x-api-key", "alice").body(()).unwrap();
//! let key = HeaderKey::x_api_key().extract(&req);
//! assert_eq!(key, Some("alice".key_digest())); // the same name in every process
//! ```

mod client_ip;
mod extractor;
mod forwarded;
mod ip;
mod stable;

pub use self::client_ip::{ClientIp, ProxyHeaders};
pub use self::extractor::{HeaderKey, KeyExtractor, PeerIp, Repeated};
pub use self::ip::{Cidr, CidrError};
pub use self::stable::{KeyDigest, StableKey, KEY_SCHEME_VERSION};
