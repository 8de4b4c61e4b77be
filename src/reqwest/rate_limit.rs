//! [`RateLimitMiddleware`].

use std::fmt;
use std::sync::Arc;

use ::reqwest::{Request, Response};
use http::Extensions;
use reqwest_middleware::{Middleware, Next};

use crate::limit::Limit;

type Cost = Arc<dyn Fn(&Request) -> u32 + Send + Sync>;

/// Waits for a token of a shared [`Bucket`](crate::Bucket) before each request: the
/// [`RateLimitLayer`](crate::RateLimitLayer) of a `reqwest_middleware::ClientWithMiddleware`.
///
/// Every request that passes through waits its turn, first come, first served, and waits out
/// any [`pause`](crate::Bucket::pause) in force. Attach it **after** a retry middleware (such as
/// [`RetryAfterMiddleware`](super::RetryAfterMiddleware)) so that it runs inside the retry
/// loop and every attempt takes a token. A request dropped while it waits gives its place
/// back.
///
/// Cloning this middleware does not create a new bucket.
///
/// ```
/// use reqwest_middleware::ClientBuilder;
/// use tower_throttle::reqwest::RateLimitMiddleware;
/// use tower_throttle::{Bucket, Quota};
///
/// let bucket = Bucket::new(Quota::per_minute(600).burst(10));
/// let limit = RateLimitMiddleware::new(bucket.clone());
/// assert!(limit.limit().bucket().unwrap().same_bucket(&bucket));
///
/// let client = ClientBuilder::new(reqwest::Client::new()).with(limit).build();
/// ```
///
/// # Errors
/// A request that the bucket can never admit — its [`cost`](Self::cost) exceeds the burst, or
/// a leaky bucket's queue is full — fails at once with a
/// `reqwest_middleware::Error::Middleware` wrapping a [`Denied`](crate::Denied);
/// it is not sent.
#[derive(Clone)]
#[must_use]
pub struct RateLimitMiddleware {
    limit: Limit,
    cost: Option<Cost>,
}

impl RateLimitMiddleware {
    /// A middleware that admits each request for one token of `limit`: a
    /// [`Bucket`](crate::Bucket), or a `redis::RedisBucket`.
    pub fn new(limit: impl Into<Limit>) -> Self {
        RateLimitMiddleware {
            limit: limit.into(),
            cost: None,
        }
    }

    /// Charge each request `cost(&request)` tokens instead of one, for APIs that meter by
    /// size or weight. A cost of zero lets the request through without waiting.
    ///
    /// ```
    /// use tower_throttle::reqwest::RateLimitMiddleware;
    /// use tower_throttle::{Bucket, Quota};
    ///
    /// // A batch endpoint that costs one token per id in the query.
    /// let limit = RateLimitMiddleware::new(Bucket::new(Quota::per_second(100))).cost(|req| {
    ///     let ids = req.url().query_pairs().filter(|(k, _)| k == "id").count();
    ///     u32::try_from(ids).unwrap_or(u32::MAX).max(1)
    /// });
    /// ```
    pub fn cost<F>(self, cost: F) -> Self
    where
        F: Fn(&Request) -> u32 + Send + Sync + 'static,
    {
        RateLimitMiddleware {
            limit: self.limit,
            cost: Some(Arc::new(cost)),
        }
    }

    /// The shared limit.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }
}

impl fmt::Debug for RateLimitMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitMiddleware")
            .field("limit", &self.limit)
            .field("cost", &self.cost.as_ref().map(|_| "Fn(&Request) -> u32"))
            .finish()
    }
}

#[async_trait::async_trait]
impl Middleware for RateLimitMiddleware {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let n = self.cost.as_ref().map_or(1, |cost| cost(&req));
        self.limit
            .acquire(n)
            .await
            .map_err(reqwest_middleware::Error::middleware)?;
        super::sent::admitted(&self.limit, extensions);
        next.run(req, extensions).await
    }
}
