//! Client-side traffic shaping: [`RateLimitLayer`] waits in `poll_ready` until the shared
//! [`Bucket`](crate::Bucket) admits the request.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceExt};
//! use tower_throttle::{Bucket, Quota, RateLimit};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower_throttle::BoxError> {
//! let bucket = Bucket::new(Quota::per_second(2).burst(1));
//! let mut svc = RateLimit::new(service_fn(|()| async { Ok::<_, std::io::Error>("sent") }), bucket);
//!
//! let start = tokio::time::Instant::now();
//! for _ in 0..3 {
//!     svc.ready().await?.call(()).await?;
//! }
//! // One at once, then one every 500 ms.
//! assert_eq!(start.elapsed(), Duration::from_secs(1));
//! # Ok(())
//! # }
//! ```

mod charged;
mod future;
mod gate;
mod layer;
mod service;

pub use self::charged::{ChargeFuture, Charged};
pub use self::future::{CostFuture, ResponseFuture};
pub use self::layer::RateLimitLayer;
pub use self::service::RateLimit;

/// The default cost of [`RateLimit`]: one token per request.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitCost;
