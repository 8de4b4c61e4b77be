//! When a request actually went: the [`RateLimitMiddleware`](super::RateLimitMiddleware)
//! tells the [`RetryAfterMiddleware`](super::RetryAfterMiddleware) around it, through the
//! request's extensions.
//!
//! The retry middleware runs before the rate limit waits, so the instant it sees a request
//! start is not when the request goes. The rate control weighs the gap between requests
//! that went (see [`adaptive`](crate::adaptive)): the rate limit marks that instant when it
//! admits a request of the same bucket, and hands it back.

use tokio::time::Instant;

use crate::limit::Limit;

/// Put in the extensions by the retry middleware for each attempt: the bucket whose rate
/// limit should report when the request goes.
#[derive(Clone)]
pub(super) struct Sending(pub(super) Limit);

/// Put in the extensions by the rate limit when it admitted the attempt (and told the
/// bucket's rate control it was sent).
#[derive(Clone, Copy)]
pub(super) struct Admitted(pub(super) Instant);

/// The rate limit on `bucket` admitted a request now: report it to the retry middleware
/// around it, if that one shares the bucket.
pub(super) fn admitted(limit: &Limit, extensions: &mut http::Extensions) {
    let around = extensions
        .get::<Sending>()
        .is_some_and(|s| s.0.same_limit(limit));
    if around {
        let sent = limit.feedback().sending();
        extensions.insert(Admitted(sent.at()));
    }
}
