//! [`Rejected`]: why a request was turned away, as a value.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::{Denied, Quota};

/// A request turned away by a [`Reject`](super::Reject) service.
///
/// Passed to the rejection response builder, inserted in the extensions of the response (and,
/// for a [fallback](super::RejectLayer::fallback), of the request), so handlers and outer
/// middleware can tell a rejection from an answer of the inner service. Its
/// [`Display`](fmt::Display) is lowercase, as tower's errors are.
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, Service, ServiceExt};
/// use tower_throttle::reject::Rejected;
/// use tower_throttle::{Bucket, Quota, RejectLayer};
/// use tower_layer::Layer;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), std::convert::Infallible> {
/// let layer = RejectLayer::new(Bucket::new(Quota::per_second(2).burst(1)));
/// let mut svc = layer.layer(service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
/// }));
///
/// svc.ready().await?.call(http::Request::new(String::new())).await?;
/// let res = svc.ready().await?.call(http::Request::new(String::new())).await?;
/// assert_eq!(res.status(), 429);
/// let rejected = res.extensions().get::<Rejected>().unwrap();
/// assert_eq!(rejected.policy(), Some("default"));
/// assert_eq!(rejected.wait(), Some(Duration::from_millis(500)));
/// assert_eq!(rejected.retry_after_secs(), Some(1));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Rejected {
    /// The limit's answer; `None` for a request without a key.
    denied: Option<Denied>,
    status: Option<Status>,
    code: StatusCode,
    /// The plan of the request's key (`0`: the default plan, or no key).
    tier: usize,
}

/// How long a client is told to wait when the backend that keeps a limit failed and its
/// failure policy refuses (the backend is asked again then).
pub(crate) const BACKEND_RETRY: Duration = Duration::from_secs(1);

/// The state of one limit, for the rate-limit fields of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Status {
    /// The policy name in `RateLimit-Policy` / `RateLimit`.
    pub(crate) name: Arc<str>,
    pub(crate) quota: Quota,
    /// Whole tokens left.
    pub(crate) remaining: u64,
    /// Time until one more token is available.
    pub(crate) reset: Duration,
}

impl Rejected {
    /// Refused by the limit `name` of `quota`, for the reason `denied`: nothing left, the
    /// next token [`wait`](Self::wait) away (zero when waiting does not help).
    pub(crate) fn new(denied: Denied, name: Arc<str>, quota: Quota) -> Self {
        // Shed to keep capacity for critical requests: the server is busy, not the client over
        // its limit.
        let code = match denied {
            Denied::Shed(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::TOO_MANY_REQUESTS,
        };
        let mut rejected = Rejected {
            denied: Some(denied),
            status: None,
            code,
            tier: 0,
        };
        rejected.status = Some(Status {
            name,
            quota,
            remaining: 0,
            reset: rejected.wait().unwrap_or(Duration::ZERO),
        });
        rejected
    }

    /// No key, and keyless requests are refused: `400`, or `500` when the key is missing
    /// because the server is set up wrong (`fail`).
    pub(crate) fn missing_key(fail: bool) -> Self {
        Rejected {
            denied: None,
            status: None,
            tier: 0,
            code: if fail {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::BAD_REQUEST
            },
        }
    }

    /// The limit that turned the request away, as `RateLimit-Policy` names it: `"per-key"`
    /// (the key's bucket, or the one shared by requests without a key), `"global"` (the
    /// ceiling of a keyed layer) or `"default"` (the bucket of a layer made by
    /// [`RejectLayer::new`](super::RejectLayer::new)); for a [`Plan`](crate::Plan) of several
    /// quotas, the name of the quota that holds the request back longest. `None` when the request had no key and
    /// the layer refuses such requests ([`MissingKey`](super::MissingKey)).
    pub fn policy(&self) -> Option<&str> {
        self.status.as_ref().map(|s| &*s.name)
    }

    /// The limit's answer ([`Denied`]); `None` for a request without a key.
    pub fn denied(&self) -> Option<&Denied> {
        self.denied.as_ref()
    }

    /// How long until the request would have fitted: the wait of [`Denied::Throttled`], one
    /// second for [`Denied::Backend`] (when the backend is asked again); `None` when waiting
    /// does not help (no key, a cost that can never fit).
    pub fn wait(&self) -> Option<Duration> {
        match self.denied.as_ref()? {
            Denied::Backend(_) => Some(BACKEND_RETRY),
            denied => denied.wait(),
        }
    }

    /// The `Retry-After` value: the [`wait`](Self::wait) in whole seconds, rounded **up**, at
    /// least 1, saturating; `None` when waiting does not help.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.wait().map(crate::denied::retry_after_secs)
    }

    /// The quota of the limit that turned the request away.
    pub fn quota(&self) -> Option<Quota> {
        self.status.as_ref().map(|s| s.quota)
    }

    /// The status of the default response: `429 Too Many Requests`; for a request without a
    /// key, `400 Bad Request`
    /// ([`MissingKey::Reject`](super::MissingKey::Reject)) or `500 Internal Server Error`
    /// ([`MissingKey::Fail`](super::MissingKey::Fail)).
    pub fn status_code(&self) -> StatusCode {
        self.code
    }

    pub(crate) fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    /// The plan of the request's key.
    pub(crate) fn tier(&self) -> usize {
        self.tier
    }

    /// Refused for a key on plan `tier`.
    pub(crate) fn in_plan(mut self, tier: usize) -> Self {
        self.tier = tier;
        self
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self.policy() {
            None => "request rejected: no rate-limit key",
            Some(_) => "request rejected: rate limit exceeded",
        })
    }
}

impl std::error::Error for Rejected {}
