//! [`KeyedLayer`]: per-key limits plus an optional global ceiling, built by
//! [`RateLimitLayer::keyed`].

use std::fmt;

use super::layer::RejectLayer;
use super::limits::{Keyed, Limits};
use crate::limit::{KeyedLimit, Limit};
use crate::RateLimitLayer;

/// What happens to a request whose key cannot be extracted (the header is missing, the peer
/// address unknown, the extractor returned `None`).
///
/// Never a free pass by default, never a panic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// All such requests share one bucket of the per-key quota (the default): anonymous
    /// clients are served, together, at the rate of one key.
    #[default]
    Shared,
    /// Refuse them with `400 Bad Request`
    /// ([`RejectedBy::MissingKey`](super::RejectedBy::MissingKey)).
    Reject,
    /// Let them through the per-key limit; the global ceiling, if any, still applies. Only
    /// for traffic you trust (an internal health check).
    Allow,
}

/// Per-key limits, plus an optional global ceiling: made by [`RateLimitLayer::keyed`], made
/// into a layer by [`reject`](Self::reject).
///
/// ```
/// use axum::{routing::get, Router};
/// use tower_throttle::extract::PeerIp;
/// use tower_throttle::keyed::KeyedBucket;
/// use tower_throttle::reject::MissingKey;
/// use tower_throttle::{Bucket, Quota, RateLimitLayer};
///
/// let layer = RateLimitLayer::keyed(KeyedBucket::new(Quota::per_second(10)), PeerIp::new())
///     .global(Bucket::new(Quota::per_second(1000)))
///     .on_missing_key(MissingKey::Reject)
///     .reject();
/// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(layer);
/// // Serve with `app.into_make_service_with_connect_info::<SocketAddr>()` so that `PeerIp`
/// // sees the client address (feature `axum`).
/// ```
#[derive(Clone)]
#[must_use = "call `.reject()` to make the layer"]
pub struct KeyedLayer<K, E> {
    limit: KeyedLimit<K>,
    extractor: E,
    global: Option<Limit>,
    missing: MissingKey,
}

impl RateLimitLayer {
    /// One limit per key: `extractor` finds a request's key (see
    /// [`KeyExtractor`](crate::extract::KeyExtractor)), `limit` holds a limit per key: a
    /// [`KeyedBucket`](crate::KeyedBucket), or a
    /// `redis::RedisKeyed` shared by server replicas.
    pub fn keyed<K, E>(limit: impl Into<KeyedLimit<K>>, extractor: E) -> KeyedLayer<K, E> {
        KeyedLayer {
            limit: limit.into(),
            extractor,
            global: None,
            missing: MissingKey::default(),
        }
    }
}

impl<K, E> KeyedLayer<K, E> {
    /// Add a ceiling on all keys together.
    ///
    /// A request must fit both its key's limit and `global` (a [`Bucket`](crate::Bucket), or
    /// a `redis::RedisBucket`). One refused by its key costs the global
    /// limit nothing, and one refused by the global limit costs its key nothing.
    pub fn global(mut self, global: impl Into<Limit>) -> Self {
        self.global = Some(global.into());
        self
    }

    /// What to do with requests that have no key (default: [`MissingKey::Shared`]).
    pub fn on_missing_key(mut self, outcome: MissingKey) -> Self {
        self.missing = outcome;
        self
    }

    /// Refuse requests over a limit with `429 Too Many Requests`: see [`RejectLayer`].
    pub fn reject(self) -> RejectLayer<K, E> {
        let keyed = Keyed {
            limit: self.limit,
            extractor: self.extractor,
            missing: self.missing,
        };
        RejectLayer::new(Limits::keyed(keyed, self.global))
    }
}

impl<K, E> fmt::Debug for KeyedLayer<K, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLayer")
            .field("limit", &self.limit)
            .field("global", &self.global)
            .field("missing", &self.missing)
            .finish_non_exhaustive()
    }
}
