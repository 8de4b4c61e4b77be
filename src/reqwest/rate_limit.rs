//! [`RateLimitMiddleware`].

use std::fmt;
use std::sync::Arc;

use ::reqwest::{Request, Response};
use http::Extensions;
use reqwest_middleware::{Middleware, Next};

use crate::limit::Limit;

/// What a request costs the limit.
#[derive(Clone)]
enum Price {
    /// One token.
    One,
    /// A number of tokens, known before the request goes.
    Fixed(Arc<dyn Fn(&Request) -> u32 + Send + Sync>),
    /// An estimate, settled on the limit once the response tells the real cost.
    Estimate(Arc<dyn Fn(&Request) -> crate::Cost + Send + Sync>),
}

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
    price: Price,
}

impl RateLimitMiddleware {
    /// A middleware that admits each request for one token of `limit`: a
    /// [`Bucket`](crate::Bucket), or a `redis::RedisBucket`.
    pub fn new(limit: impl Into<Limit>) -> Self {
        RateLimitMiddleware {
            limit: limit.into(),
            price: Price::One,
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
            price: Price::Fixed(Arc::new(cost)),
        }
    }

    /// Charge each request `estimate(&request)` (a [`Cost`](crate::Cost): requests and
    /// tokens, say), to settle once its response tells the real cost, as
    /// [`RateLimitLayer::charge`](crate::RateLimitLayer::charge) does: the response carries
    /// the [`Charge`](crate::Charge) in its extensions. A request that could not connect
    /// was never sent and is refunded; any other error keeps the estimate; a `429` answer
    /// is settled at once to its requests alone.
    ///
    /// ```
    /// use tower_throttle::reqwest::RateLimitMiddleware;
    /// use tower_throttle::{Bucket, Cost, Plan, Quota, Resource};
    ///
    /// // 500 requests and 30,000 tokens per minute.
    /// let plan = Plan::new(Quota::per_minute(500))
    ///     .and(Quota::per_minute(30_000).burst(30_000))
    ///     .counting(Resource::TOKENS);
    /// let limit = RateLimitMiddleware::new(Bucket::new(plan)).charge(|request| {
    ///     // About four bytes of prompt per token, and the answer's `max_tokens`.
    ///     let prompt = request.body().and_then(|b| b.as_bytes()).map_or(0, |b| b.len());
    ///     Cost::new().and(Resource::TOKENS, prompt as u32 / 4 + 1_000)
    /// });
    /// ```
    pub fn charge<F, E>(self, estimate: F) -> Self
    where
        F: Fn(&Request) -> E + Send + Sync + 'static,
        E: Into<crate::Cost>,
    {
        let estimate = Arc::new(move |request: &Request| estimate(request).into());
        RateLimitMiddleware {
            limit: self.limit,
            price: Price::Estimate(estimate),
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
            .field(
                "price",
                &match self.price {
                    Price::One => "one token",
                    Price::Fixed(_) => "Fn(&Request) -> u32",
                    Price::Estimate(_) => "an estimate, settled",
                },
            )
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
        let n = match &self.price {
            Price::One => 1,
            Price::Fixed(cost) => cost(&req),
            Price::Estimate(estimate) => {
                let charge = self.limit.charge(estimate(&req)).await;
                let charge = charge.map_err(reqwest_middleware::Error::middleware)?;
                super::sent::admitted(&self.limit, extensions);
                return match next.run(req, extensions).await {
                    Ok(mut response) => {
                        charge.answered(response.status());
                        response.extensions_mut().insert(charge);
                        Ok(response)
                    }
                    Err(e) => {
                        if e.is_connect() {
                            charge.refund();
                        }
                        Err(e)
                    }
                };
            }
        };
        self.limit
            .acquire(n)
            .await
            .map_err(reqwest_middleware::Error::middleware)?;
        super::sent::admitted(&self.limit, extensions);
        next.run(req, extensions).await
    }
}
