//! [`RateLimitLayer`].

use tower_layer::Layer;

use super::{Charged, RateLimit, UnitCost};
use crate::limit::Limit;

/// Shapes traffic through a shared limit: each request waits in `poll_ready` until the
/// limit admits it. The limit is a [`Bucket`](crate::Bucket) in this process, or a
/// `redis::RedisBucket` shared with other processes.
///
/// Cloning this layer does not create a new bucket: every service it wraps, and every clone
/// of those, draws from the same tokens.
///
/// Waiting is unbounded, except with a leaky bucket
/// ([`Algorithm::leaky_bucket(max_queue)`](crate::Algorithm::leaky_bucket)): when
/// `max_queue` requests already wait, a call fails at once with
/// [`Denied::QueueFull`](crate::Denied::QueueFull) (its service stays ready).
///
/// ```
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_throttle::{Bucket, Quota, RateLimitLayer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower_throttle::BoxError> {
/// let bucket = Bucket::new(Quota::per_second(10));
/// let svc = ServiceBuilder::new()
///     .layer(RateLimitLayer::new(bucket.clone()))
///     .service(service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n * 2) }));
///
/// let answer = svc.clone().oneshot(21).await?;
/// assert_eq!(answer, 42);
/// assert_eq!(bucket.snapshot().available, 9); // the clone used the shared bucket
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RateLimitLayer<C = UnitCost> {
    limit: Limit,
    cost: C,
}

impl RateLimitLayer {
    /// A layer that admits each request for one token of `limit`.
    pub fn new(limit: impl Into<Limit>) -> Self {
        RateLimitLayer {
            limit: limit.into(),
            cost: UnitCost,
        }
    }
}

impl<C> RateLimitLayer<C> {
    /// Charge each request `cost(&request)` tokens instead of one, for APIs that meter by
    /// size or weight.
    ///
    /// One token is reserved in `poll_ready` (so callers still wait their turn there); the
    /// rest of the cost is waited for in the response future before the request is sent, so
    /// the bucket's bound holds for every request. A cost of zero returns the reserved token.
    ///
    /// A cost above what one request may take (the burst, or a window's count) can never
    /// fit: the call fails with [`Denied::ExceedsBurst`](crate::Denied::ExceedsBurst) and the
    /// inner service is not called.
    ///
    /// The service's error is [`BoxError`](crate::BoxError), as for tower's own `Buffer` or
    /// `Timeout`: keeping the inner service's error type is not possible, because a limit kept
    /// in Redis can refuse while the request waits (its failure policy, a cost that can never
    /// fit), and that refusal must reach the caller as an error rather than a silent bypass.
    ///
    /// The inner service must be `Clone`: the readied service moves into the response future
    /// while the rest of the cost is waited for, as in tower's own middleware.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{service_fn, Service, ServiceExt};
    /// use tower_layer::Layer;
    /// use tower_throttle::{Bucket, Quota, RateLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_throttle::BoxError> {
    /// let bucket = Bucket::new(Quota::per_second(10).burst(10));
    /// let layer = RateLimitLayer::new(bucket.clone()).cost(|batch: &Vec<u32>| batch.len() as u32);
    /// let mut svc = layer.layer(service_fn(|batch: Vec<u32>| async move {
    ///     Ok::<_, Infallible>(batch.len())
    /// }));
    ///
    /// let start = tokio::time::Instant::now();
    /// assert_eq!(svc.ready().await?.call(vec![1; 10]).await?, 10); // the whole burst
    /// assert_eq!(svc.ready().await?.call(vec![1; 5]).await?, 5); // 5 more tokens: 500 ms
    /// assert_eq!(start.elapsed(), Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    pub fn cost<F>(self, cost: F) -> RateLimitLayer<F> {
        RateLimitLayer {
            limit: self.limit,
            cost,
        }
    }

    /// Charge each request `estimate(&request)` (a [`Cost`](crate::Cost): requests and
    /// tokens, say), to settle once its response tells the real cost: for metered APIs,
    /// where a language model's answer reports the tokens it used.
    ///
    /// The request waits in its response future until the whole estimate is admitted, first
    /// come, first served; `poll_ready` is the inner service's alone. The response carries
    /// the [`Charge`](crate::Charge) in its extensions: settle it from the headers in a layer
    /// above (`map_response`), or take it out and settle it once the body, read to its end,
    /// gives the usage. The rules of [`Charge`](crate::Charge) hold: an overrun is owed, an
    /// overestimate goes back to the waiters at once, a charge dropped unsettled keeps its
    /// estimate. A request refused, or whose future is dropped before it is sent, is charged
    /// nothing; an error of the inner service keeps the estimate (the request may have gone);
    /// a `429` answer is settled at once to its requests alone (its tokens come back).
    ///
    /// The response must be an [`HttpResponse`](crate::retry_after::HttpResponse), to carry
    /// the charge, and the inner service `Clone`. On a limit kept in Redis, the estimate and
    /// the settlement are one round trip each (`RedisBucket::charge`).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use http::{Request, Response};
    /// use tower::{service_fn, ServiceBuilder, ServiceExt};
    /// use tower_throttle::{Bucket, Charge, Cost, Plan, Quota, RateLimitLayer, Resource};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_throttle::BoxError> {
    /// // 60 requests and 10,000 tokens per minute.
    /// let plan = Plan::new(Quota::per_minute(60))
    ///     .and(Quota::per_minute(10_000).burst(10_000))
    ///     .counting(Resource::TOKENS);
    /// let bucket = Bucket::new(plan);
    /// let api = service_fn(|_: Request<String>| async {
    ///     Ok::<_, Infallible>(Response::builder().header("x-usage", "1500").body(()).unwrap())
    /// });
    /// let client = ServiceBuilder::new()
    ///     .map_response(|response: Response<()>| {
    ///         let used = response.headers()["x-usage"].to_str().unwrap().parse().unwrap();
    ///         let charge = response.extensions().get::<Charge>().unwrap();
    ///         charge.settle(Cost::new().and(Resource::TOKENS, used));
    ///         response
    ///     })
    ///     .layer(RateLimitLayer::new(bucket.clone()).charge(|request: &Request<String>| {
    ///         // The prompt's size and the answer's `max_tokens`.
    ///         let estimate = request.body().len() as u32 / 4 + 2_000;
    ///         Cost::new().and(Resource::TOKENS, estimate)
    ///     }))
    ///     .service(api);
    ///
    /// client.oneshot(Request::new("x".repeat(4_000))).await?;
    /// // 3,000 tokens taken on the estimate, 1,500 given back by the settlement: 8,500 left.
    /// assert!(bucket.try_charge(Cost::new().and(Resource::TOKENS, 8_501)).is_err());
    /// assert!(bucket.try_charge(Cost::new().and(Resource::TOKENS, 8_500)).is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn charge<F>(self, estimate: F) -> RateLimitLayer<Charged<F>> {
        RateLimitLayer {
            cost: Charged {
                estimate,
                limit: self.limit.clone(),
            },
            limit: self.limit,
        }
    }

    /// The shared limit.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }
}

impl<S, C: Clone> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimit<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::with_cost(inner, self.limit.clone(), self.cost.clone())
    }
}
