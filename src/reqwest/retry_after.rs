//! [`RetryAfterMiddleware`].

use std::sync::Arc;
use std::time::Duration;

use ::reqwest::{Request, Response};
use http::Extensions;
use reqwest_middleware::{Error, Middleware, Next};
use tokio::time::Instant;

use super::sent::{Admitted, Sending};
use crate::limit::Limit;
use crate::retry_after::{Action, Attempt, Policy, RetryInfo};
use crate::RetryAfterLayer;

/// Retries what a server pushes back (`429`, `503`) after its `Retry-After`, pausing the
/// shared [`Bucket`](crate::Bucket) so that every worker backs off together: the
/// [`RetryAfterLayer`] of a `reqwest_middleware::ClientWithMiddleware`.
///
/// The bucket's configured rate holds from the first request until a push-back; a push-back
/// pauses every worker and lowers the rate to just below the server's limit as estimated,
/// and successes raise it back, never above the configured one (see
/// [`adaptive`](crate::adaptive)).
///
/// It is built from a [`RetryAfterLayer`] and makes the same decisions with the same
/// settings: the server's cooldown is a floor that jitter only adds to, a cooldown over
/// [`max_retry_after`](RetryAfterLayer::max_retry_after) returns the response at once,
/// transport errors and other 5xx get exponential backoff within the retry cap, deadline and
/// budget, and non-idempotent requests that may have reached the server are not sent twice.
/// Every response it returns carries a [`RetryInfo`] in its extensions.
///
/// Attach it **before** a [`RateLimitMiddleware`](super::RateLimitMiddleware) of the same
/// bucket: the pause then holds every request of every clone, and each retry waits for a
/// token like any other request. The rate limit also tells it when each attempt was
/// admitted, which the bucket's rate control weighs (see [`adaptive`](crate::adaptive)), as
/// through the tower layers.
///
/// - A request is sent again from `reqwest::Request::try_clone`; a request with a streaming
///   body cannot be cloned and is sent once.
/// - Errors of the middleware attached after this one (`reqwest_middleware::Error::Middleware`)
///   are returned at once, never retried; errors of reqwest itself are classified as by the
///   layer (see [`classify_error`](RetryAfterLayer::classify_error), which sees the
///   `reqwest::Error`).
///
/// The middleware shares the bucket and the retry budget of the layer it is built from and
/// of that layer's clones; cloning it creates neither.
///
/// ```
/// use std::time::Duration;
/// use reqwest_middleware::ClientBuilder;
/// use tower_throttle::reqwest::{RateLimitMiddleware, RetryAfterMiddleware};
/// use tower_throttle::{Bucket, Quota, RetryAfterLayer};
///
/// let bucket = Bucket::new(Quota::per_hour(2000).burst(20).headroom(0.8));
/// let retry = RetryAfterMiddleware::new(
///     RetryAfterLayer::new(bucket.clone())
///         .max_retries(5)
///         .max_retry_after(Duration::from_secs(60)),
/// );
/// assert!(retry.limit().bucket().unwrap().same_bucket(&bucket));
///
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(retry)
///     .with(RateLimitMiddleware::new(bucket))
///     .build();
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RetryAfterMiddleware {
    policy: Arc<Policy>,
}

impl RetryAfterMiddleware {
    /// A middleware with the settings and the shared state (bucket, retry budget) of `layer`.
    pub fn new(layer: RetryAfterLayer) -> Self {
        RetryAfterMiddleware {
            policy: layer.policy(),
        }
    }

    /// The shared limit.
    pub fn limit(&self) -> &Limit {
        &self.policy.limit
    }
}

impl From<RetryAfterLayer> for RetryAfterMiddleware {
    fn from(layer: RetryAfterLayer) -> Self {
        RetryAfterMiddleware::new(layer)
    }
}

#[async_trait::async_trait]
impl Middleware for RetryAfterMiddleware {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let policy = &*self.policy;
        if let Some(budget) = &policy.budget {
            budget.deposit();
        }
        let method = req.method().clone();
        let copy = if policy.max_retries > 0 {
            req.try_clone()
        } else {
            None
        };
        let started = Instant::now();
        let mut retries = 0;
        let mut previous_delay = Duration::ZERO;
        let mut req = req;
        loop {
            // A rate limit of the same bucket inside tells when the request went; else it
            // went now.
            extensions.insert(Sending(policy.limit.clone()));
            extensions.remove::<Admitted>();
            let start = Instant::now();
            let result = next.clone().run(req, extensions).await;
            let at = extensions.remove::<Admitted>().map_or(start, |a| a.0);
            let sent = policy.limit.feedback().sent_at(at);
            extensions.remove::<Sending>();
            let attempt = Attempt {
                method: &method,
                retries,
                elapsed: started.elapsed(),
                sent: &sent,
                previous_delay,
                replayable: copy.is_some(),
            };
            let (action, cooldown) = match &result {
                Ok(resp) => {
                    let v = policy.on_response(resp.status(), resp.headers(), &attempt);
                    (v.action, v.cooldown)
                }
                // Not a transport error: another middleware's decision.
                Err(Error::Middleware(_)) => (Action::Return, None),
                Err(Error::Reqwest(e)) => (policy.on_error(e, &attempt), None),
            };
            let again = match action {
                Action::Retry(delay) => copy
                    .as_ref()
                    .and_then(Request::try_clone)
                    .map(|again| (delay, again)),
                Action::Return => None,
            };
            let Some((delay, again)) = again else {
                let info = RetryInfo::new(retries + 1, cooldown);
                return result.map(|mut resp| {
                    resp.extensions_mut().insert(info);
                    resp
                });
            };
            trace_event!(info, ?delay, retry = retries + 1, "retrying");
            drop(result);
            retries += 1;
            previous_delay = delay;
            tokio::time::sleep(delay).await;
            req = again;
        }
    }
}
