//! [`Rejected`]: why a request was turned away, as a value.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

use crate::{Denied, Quota};

/// Which limit turned a request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectedBy {
    /// The bucket of the request's key (or the bucket shared by requests without a key).
    Key,
    /// The global ceiling of a keyed layer.
    Global,
    /// The bucket of a single-bucket layer.
    Bucket,
    /// The request had no key and the layer rejects such requests
    /// ([`MissingKey::Reject`](super::MissingKey::Reject)).
    MissingKey,
}

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
/// use tower_throttle::{reject::{Rejected, RejectedBy}, Bucket, Quota, RateLimitLayer};
/// use tower_layer::Layer;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), std::convert::Infallible> {
/// let layer = RateLimitLayer::new(Bucket::new(Quota::per_second(2).burst(1))).reject();
/// let mut svc = layer.layer(service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
/// }));
///
/// svc.ready().await?.call(http::Request::new(String::new())).await?;
/// let res = svc.ready().await?.call(http::Request::new(String::new())).await?;
/// assert_eq!(res.status(), 429);
/// let rejected = res.extensions().get::<Rejected>().unwrap();
/// assert_eq!(rejected.by(), RejectedBy::Bucket);
/// assert_eq!(rejected.wait(), Some(Duration::from_millis(500)));
/// assert_eq!(rejected.retry_after_secs(), Some(1));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Rejected {
    by: RejectedBy,
    /// The limit's answer; `None` for [`RejectedBy::MissingKey`].
    denied: Option<Denied>,
    status: Option<Status>,
}

/// How long a client is told to wait when the backend that keeps a limit failed and its
/// failure policy refuses (the backend is asked again then).
pub(crate) const BACKEND_RETRY: Duration = Duration::from_secs(1);

/// The state of one limit, for the rate-limit fields of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status {
    /// The policy name in `RateLimit-Policy` / `RateLimit`.
    pub(crate) name: &'static str,
    pub(crate) quota: Quota,
    /// Whole tokens left.
    pub(crate) remaining: u64,
    /// Time until one more token is available.
    pub(crate) reset: Duration,
}

impl Rejected {
    /// Refused by the limit `name` of `quota`, for the reason `denied`: nothing left, the
    /// next token [`wait`](Self::wait) away (zero when waiting does not help).
    pub(crate) fn new(by: RejectedBy, denied: Denied, name: &'static str, quota: Quota) -> Self {
        let mut rejected = Rejected {
            by,
            denied: Some(denied),
            status: None,
        };
        rejected.status = Some(Status {
            name,
            quota,
            remaining: 0,
            reset: rejected.wait().unwrap_or(Duration::ZERO),
        });
        rejected
    }

    /// No key, and keyless requests are rejected.
    pub(crate) fn missing_key() -> Self {
        Rejected {
            by: RejectedBy::MissingKey,
            denied: None,
            status: None,
        }
    }

    /// Which limit turned the request away.
    pub fn by(&self) -> RejectedBy {
        self.by
    }

    /// The limit's answer ([`Denied`]); `None` for [`RejectedBy::MissingKey`].
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
        self.status.map(|s| s.quota)
    }

    /// The status of the default response: `429 Too Many Requests`, or `400 Bad Request` for
    /// [`RejectedBy::MissingKey`].
    pub fn status_code(&self) -> StatusCode {
        match self.by {
            RejectedBy::MissingKey => StatusCode::BAD_REQUEST,
            _ => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    pub(crate) fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self.by {
            RejectedBy::MissingKey => "request rejected: no rate-limit key",
            _ => "request rejected: rate limit exceeded",
        })
    }
}

impl std::error::Error for Rejected {}
