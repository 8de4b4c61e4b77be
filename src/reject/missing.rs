//! [`MissingKey`]: what a keyed [`RejectLayer`](super::RejectLayer) does with a request that
//! has no key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What happens to a request whose key cannot be extracted (the header is missing, the peer
/// address unknown, the extractor returned `None`).
///
/// Never a free pass by default, never a panic. The default depends on the extractor
/// ([`KeyExtractor::requires_key`](crate::extract::KeyExtractor::requires_key)):
/// [`Fail`](MissingKey::Fail) for one whose key every request has unless the server is wired
/// wrong (the peer address of [`PeerIp`](crate::extract::PeerIp)),
/// [`Shared`](MissingKey::Shared) for one whose key clients may omit (a header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// All such requests share one bucket of the per-key quota: anonymous clients are
    /// served, together, at the rate of one key.
    Shared,
    /// Refuse them with `400 Bad Request`.
    Reject,
    /// Answer `500 Internal Server Error`, and log the first such request (a `tracing` error
    /// with the `tracing` feature): the key is missing because the server is set up wrong (an
    /// axum app served without `into_make_service_with_connect_info`, say).
    Fail,
    /// Let them through the per-key limit; the global ceiling, if any, still applies. Only
    /// for traffic you trust (an internal health check).
    Allow,
}

/// Logs the first request refused for [`MissingKey::Fail`], once per layer.
#[derive(Debug, Clone, Default)]
pub(crate) struct FailOnce(Arc<AtomicBool>);

impl FailOnce {
    pub(crate) fn note(&self) {
        if !self.0.swap(true, Ordering::Relaxed) {
            trace_event!(
                error,
                "rate-limit key missing: every request is answered 500 until the server \
                 provides it (for PeerIp: serve with connect info)"
            );
        }
    }
}
