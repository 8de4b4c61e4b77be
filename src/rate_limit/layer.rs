//! [`RateLimitLayer`].

use tower_layer::Layer;

use super::{RateLimit, UnitCost};
use crate::Bucket;

/// Shapes traffic through a shared [`Bucket`]: each request waits in `poll_ready` until the
/// bucket admits it.
///
/// Cloning this layer does not create a new bucket: every service it wraps, and every clone
/// of those, draws from the same tokens.
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
    bucket: Bucket,
    cost: C,
}

impl RateLimitLayer {
    /// A layer that admits each request for one token of `bucket`.
    pub fn new(bucket: Bucket) -> Self {
        RateLimitLayer {
            bucket,
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
    /// the bucket's bound holds for every request. A cost of zero returns the reserved token;
    /// a cost above the burst fails with [`ExceedsBurst`](crate::ExceedsBurst) without
    /// calling the inner service. The inner service must be `Clone` (the readied service
    /// moves into the future while it waits).
    pub fn cost<F>(self, cost: F) -> RateLimitLayer<F> {
        RateLimitLayer {
            bucket: self.bucket,
            cost,
        }
    }

    /// The shared bucket.
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }
}

impl<S, C: Clone> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimit<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::with_cost(inner, self.bucket.clone(), self.cost.clone())
    }
}
