//! [`RetryAfterLayer`] and its builder.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tower_layer::Layer;

use super::backoff::{Backoff, Jitter};
use super::policy::{CooldownJitter, Failure, Policy};
use super::RetryAfter;
use crate::budget::RetryBudget;
use crate::limit::Limit;

/// Retries what a server pushes back (`429`, `503`) after its `Retry-After`, pausing the shared
/// [`Bucket`](crate::Bucket) so that every worker backs off together; retries transport errors and other 5xx
/// with exponential backoff.
///
/// The bucket's configured rate holds from the first request until a push-back; a push-back
/// pauses every worker and lowers the rate to just below the server's limit as estimated,
/// and successes raise it back, never above the configured one (see
/// [`adaptive`](crate::adaptive); [`BucketBuilder::fixed_rate`](crate::BucketBuilder::fixed_rate)
/// keeps it fixed). The layer reports each attempt to the bucket through
/// [`Bucket::feedback`](crate::Bucket::feedback).
///
/// Put it **outside** the [`RateLimitLayer`](crate::RateLimitLayer) of the same bucket, so that
/// every attempt, retries included, waits for a token:
///
/// ```text
/// RetryAfterLayer ──► RateLimitLayer ──► ConcurrencyLimit ──► client
/// ```
///
/// Cloning this layer does not create a new bucket, nor a new retry budget.
///
/// # Defaults
/// | setting | default |
/// |---|---|
/// | [`push_back`](Self::push_back) statuses | 429, 503 |
/// | [`push_back_unprocessed`](Self::push_back_unprocessed) (resent for any method) | none beyond 429, 503 with `Retry-After`, a quota-exhausted 403 |
/// | [`max_retries`](Self::max_retries) | 3 |
/// | [`backoff`](Self::backoff) | 100 ms doubling to 10 s, full jitter |
/// | [`default_cooldown`](Self::default_cooldown) (push-back without `Retry-After`) | 1 s |
/// | [`max_retry_after`](Self::max_retry_after) | 5 min |
/// | [`retry_after_jitter`](Self::retry_after_jitter) | up to 10 % of the cooldown, ≤ 1 s, added |
/// | [`deadline`](Self::deadline) | none |
/// | [`budget`](Self::budget) | 20 % of requests, 10 in reserve |
/// | [`retry_non_idempotent`](Self::retry_non_idempotent) | false |
/// | [`read_quota_headers`](Self::read_quota_headers) | true |
#[derive(Debug, Clone)]
#[must_use]
pub struct RetryAfterLayer {
    policy: Arc<Policy>,
}

impl RetryAfterLayer {
    /// A layer that pauses `limit` when the server pushes back: a [`Bucket`](crate::Bucket),
    /// or a `redis::RedisBucket`, whose pause holds every process.
    pub fn new(limit: impl Into<Limit>) -> Self {
        RetryAfterLayer {
            policy: Arc::new(Policy {
                limit: limit.into(),
                push_back: vec![
                    StatusCode::TOO_MANY_REQUESTS,
                    StatusCode::SERVICE_UNAVAILABLE,
                ],
                unprocessed: Vec::new(),
                max_retries: 3,
                backoff: Backoff::default(),
                default_cooldown: Duration::from_secs(1),
                max_retry_after: Duration::from_secs(300),
                cooldown_jitter: CooldownJitter::Proportional,
                deadline: None,
                budget: Some(RetryBudget::default()),
                retry_non_idempotent: false,
                read_quota_headers: true,
                classify: Arc::new(Failure::classify),
                protocol: None,
            }),
        }
    }

    pub(crate) fn with(mut self, f: impl FnOnce(&mut Policy)) -> Self {
        f(Arc::make_mut(&mut self.policy));
        self
    }

    /// The statuses that mean "slow down": the bucket is paused for their `Retry-After` (or
    /// the [`default_cooldown`](Self::default_cooldown)) and the request is retried after it.
    ///
    /// Only a push-back that means the server did not process the request is resent whatever
    /// the method: a 429, a 503 with a `Retry-After`, and a 403 that reports an exhausted
    /// quota (`X-RateLimit-Remaining: 0` or the like). Any other status listed here — a 403
    /// your server also sends for "forbidden", say — is resent only for idempotent methods,
    /// since the server may have acted on the request; declare statuses that never come after
    /// processing with [`push_back_unprocessed`](Self::push_back_unprocessed).
    ///
    /// ```
    /// use http::StatusCode;
    /// use tower_throttle::{Bucket, Quota, RetryAfterLayer};
    ///
    /// let bucket = Bucket::new(Quota::per_second(10));
    /// // 403 pauses every worker too, but a POST answered 403 is not sent again.
    /// let layer = RetryAfterLayer::new(bucket).push_back([
    ///     StatusCode::TOO_MANY_REQUESTS,
    ///     StatusCode::SERVICE_UNAVAILABLE,
    ///     StatusCode::FORBIDDEN,
    /// ]);
    /// # let _ = layer;
    /// ```
    pub fn push_back(self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        let statuses = statuses.into_iter().collect();
        self.with(|p| p.push_back = statuses)
    }

    /// Add push-back statuses that the server only sends for requests it did not process, so
    /// that resending them is safe for any method, POST included (an explicit opt-in: see
    /// [`push_back`](Self::push_back)).
    ///
    /// ```
    /// use http::StatusCode;
    /// use tower_throttle::{Bucket, Quota, RetryAfterLayer};
    ///
    /// let bucket = Bucket::new(Quota::per_second(10));
    /// // This API answers 403 only when it refuses for rate: resend any request.
    /// let layer = RetryAfterLayer::new(bucket).push_back_unprocessed([StatusCode::FORBIDDEN]);
    /// # let _ = layer;
    /// ```
    pub fn push_back_unprocessed(self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.with(|p| {
            for status in statuses {
                if !p.push_back.contains(&status) {
                    p.push_back.push(status);
                }
                if !p.unprocessed.contains(&status) {
                    p.unprocessed.push(status);
                }
            }
        })
    }

    /// The most retries per request (0 disables retrying; push-backs still pause the bucket).
    pub fn max_retries(self, n: u32) -> Self {
        self.with(|p| p.max_retries = n)
    }

    /// The backoff of transport errors and 5xx responses.
    pub fn backoff(self, base: Duration, max: Duration, jitter: Jitter) -> Self {
        self.with(|p| p.backoff = Backoff::new(base, max, jitter))
    }

    /// The cooldown of a push-back response without a (valid) `Retry-After`.
    pub fn default_cooldown(self, cooldown: Duration) -> Self {
        self.with(|p| p.default_cooldown = cooldown)
    }

    /// The longest server cooldown honoured. When a server asks for longer, its response is
    /// returned to the caller at once (with the requested delay in its [`RetryInfo`](super::RetryInfo))
    /// rather than sleeping for days.
    pub fn max_retry_after(self, max: Duration) -> Self {
        self.with(|p| p.max_retry_after = max)
    }

    /// The most jitter added on top of a server's cooldown (uniform in `[0, max]`). Jitter is
    /// only ever added: a retry never goes out before the server's cooldown ends.
    pub fn retry_after_jitter(self, max: Duration) -> Self {
        self.with(|p| p.cooldown_jitter = CooldownJitter::UpTo(max))
    }

    /// An overall time limit per request, first attempt to last: a retry whose wait would end
    /// past it is not made, and the last result is returned.
    pub fn deadline(self, deadline: Duration) -> Self {
        self.with(|p| p.deadline = Some(deadline))
    }

    /// The budget of error and 5xx retries, shared by every clone; `None` for no budget.
    pub fn budget(self, budget: Option<RetryBudget>) -> Self {
        self.with(|p| p.budget = budget)
    }

    /// Also retry non-idempotent requests (POST, PATCH) that may have reached the server.
    /// Off by default: a push-back the server did not process (see [`push_back`](Self::push_back)),
    /// or a connection that was never made, is retried for any method.
    pub fn retry_non_idempotent(self, yes: bool) -> Self {
        self.with(|p| p.retry_non_idempotent = yes)
    }

    /// Read the server's rate-limit headers (`RateLimit`, `X-RateLimit-*`) on every response
    /// and pause the bucket until the reset when the remaining quota is 0.
    pub fn read_quota_headers(self, yes: bool) -> Self {
        self.with(|p| p.read_quota_headers = yes)
    }

    /// How to tell whether a failed request may have reached the server (see [`Failure`]).
    pub fn classify_error<F>(self, f: F) -> Self
    where
        F: Fn(&(dyn Error + 'static)) -> Failure + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.with(|p| p.classify = f)
    }

    /// The shared limit.
    pub fn limit(&self) -> &Limit {
        &self.policy.limit
    }

    /// The decision logic, shared with the reqwest middleware.
    #[cfg(feature = "reqwest")]
    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy.clone()
    }
}

impl<S> Layer<S> for RetryAfterLayer {
    type Service = RetryAfter<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryAfter::from_policy(inner, self.policy.clone())
    }
}
