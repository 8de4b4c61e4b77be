//! What a response says to the retry policy ([`Reading`]): read by HTTP's rules, or by a
//! protocol carried over HTTP that has words of its own ([`Classify`]: gRPC's).

use std::fmt;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};

use super::policy::Policy;
use crate::headers::{
    read_provider_limits, read_quota_hint, read_quota_rate, read_retry_after, read_stated_rate,
    spent_for, stated_requests, ResourceHint, RetryAfterError,
};
use crate::Resource;

/// What a response says.
#[derive(Debug)]
pub(crate) struct Reading {
    pub(crate) kind: Kind,
    /// The rate the server states, for the bucket's rate control.
    pub(crate) stated: Option<f64>,
    /// The server's quota is spent for this long: everyone holds until it comes back.
    pub(crate) spent_for: Option<Duration>,
    /// The provider's resource that ran out, when it says which.
    pub(crate) spent: Option<Resource>,
    /// The provider's fields, per resource (at most four).
    pub(crate) provider: Vec<ResourceHint>,
}

#[derive(Debug)]
pub(crate) enum Kind {
    /// The request went through.
    Success,
    /// An answer for the caller as it is.
    Final,
    /// "Slow down": everyone holds for the cooldown, then the request is sent again.
    PushBack {
        cooldown: Duration,
        /// The server did not act on the request: sending it again is safe for any method.
        unprocessed: bool,
        /// Whether it may be sent again at all (everyone holds either way).
        retry: bool,
    },
    /// The server failed: the request is sent again after the backoff, not before `floor`.
    Failed {
        floor: Option<Duration>,
        /// Sending it again is safe for any method.
        any_method: bool,
    },
}

/// How a protocol carried over HTTP says "slow down" (gRPC: a trailers-only
/// `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms`). Set on a policy by the protocol's
/// layer; HTTP's rules read what it leaves.
pub(crate) trait Classify: fmt::Debug + Send + Sync {
    /// What the response says; `None` leaves it to HTTP's rules.
    fn classify(&self, status: StatusCode, headers: &HeaderMap) -> Option<Reading>;
}

impl Policy {
    /// What a response says, by the protocol's rules, else by HTTP's: a push-back status
    /// (`429`, `503`, a `403` that reports a spent quota) with its `Retry-After`; the
    /// rate-limit fields (a quota spent, a stated rate); a success; a server error.
    pub(crate) fn read(&self, status: StatusCode, headers: &HeaderMap) -> Reading {
        if let Some(reading) = self
            .protocol
            .as_ref()
            .and_then(|p| p.classify(status, headers))
        {
            return reading;
        }
        let now = SystemTime::now();
        let (hint, stated, provider) = if self.read_quota_headers {
            let provider = read_provider_limits(headers, now);
            let stated = read_stated_rate(headers)
                .or_else(|| read_quota_rate(headers, now))
                .or_else(|| stated_requests(&provider));
            (read_quota_hint(headers, now), stated, provider)
        } else {
            (None, None, Vec::new())
        };
        // A provider's resource that ran out says for how long; else the generic fields.
        let (provider_spent, spent) = match spent_for(&provider) {
            Some((reset, resource)) => (Some(reset), Some(resource.clone())),
            None => (None, None),
        };
        let exhausted = hint.filter(|h| h.remaining == 0);
        let rate_limited_403 = status == StatusCode::FORBIDDEN
            && (exhausted.is_some() || provider.iter().any(|h| h.remaining == Some(0)));
        let retry_after = read_retry_after(headers, now);
        let spent_for = provider_spent.or(exhausted.and_then(|h| h.reset));
        let kind = if self.push_back.contains(&status) || rate_limited_403 {
            let asked = matches!(retry_after, Ok(Some(_)));
            Kind::PushBack {
                cooldown: match (provider_spent, retry_after) {
                    (Some(d), _) => d,
                    (None, retry_after) => match retry_after {
                        Ok(Some(d)) => d,
                        Ok(None) => spent_for.unwrap_or(self.default_cooldown),
                        Err(RetryAfterError::Invalid) => self.default_cooldown,
                        Err(_) => Duration::MAX, // too far to honour
                    },
                },
                unprocessed: self.not_processed(status, asked, rate_limited_403),
                retry: true,
            }
        } else if status.is_success() {
            Kind::Success
        } else if status.is_server_error() {
            Kind::Failed {
                floor: retry_after.ok().flatten(),
                any_method: false,
            }
        } else {
            Kind::Final
        };
        Reading {
            kind,
            stated,
            spent_for,
            spent,
            provider,
        }
    }

    /// Whether a push-back response says the server did not process the request, so that
    /// sending it again is safe whatever the method: a 429; a 503 that names its
    /// `Retry-After` (`asked`); a 403 that reports an exhausted quota (`rate_limited_403`);
    /// and the statuses the user declared so with
    /// [`push_back_unprocessed`](super::RetryAfterLayer::push_back_unprocessed). Any other
    /// push-back status (a 403 added with [`push_back`](super::RetryAfterLayer::push_back),
    /// say) may come after the server acted on the request: it is resent only when the method
    /// is idempotent.
    fn not_processed(&self, status: StatusCode, asked: bool, rate_limited_403: bool) -> bool {
        status == StatusCode::TOO_MANY_REQUESTS
            || (status == StatusCode::SERVICE_UNAVAILABLE && asked)
            || rate_limited_403
            || self.unprocessed.contains(&status)
    }
}
