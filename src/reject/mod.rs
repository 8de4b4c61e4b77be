//! Server side: answer requests over the limit with `429 Too Many Requests` at once, instead
//! of waiting.
//!
//! [`RejectLayer::new`] refuses over one bucket; [`RejectLayer::keyed`] over a bucket per key,
//! with an optional [`global`](RejectLayer::global) ceiling. The service is axum-friendly:
//! always ready when the inner service is, the inner service's error type, and rejections are
//! responses:
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! retry-after: 1
//! ratelimit-policy: "per-key";q=10;w=1, "global";q=1000;w=1
//! ratelimit: "per-key";r=0;t=1
//! content-type: text/plain; charset=utf-8
//!
//! Too Many Requests
//! ```
//!
//! ```
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_throttle::extract::HeaderKey;
//! use tower_throttle::keyed::KeyedBucket;
//! use tower_throttle::{Bucket, Quota, RejectLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), std::convert::Infallible> {
//! let limit = RejectLayer::keyed(KeyedBucket::new(Quota::per_second(2)), HeaderKey::x_api_key())
//!     .global(Bucket::new(Quota::per_second(1000)));
//! let mut svc = ServiceBuilder::new()
//!     .layer(limit)
//!     .service(service_fn(|_: http::Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
//!     }));
//!
//! let call = |key: &str| http::Request::builder().header("x-api-key", key).body(String::new()).unwrap();
//! for _ in 0..2 {
//!     assert_eq!(svc.ready().await?.call(call("alice")).await?.status(), 200);
//! }
//! let refused = svc.ready().await?.call(call("alice")).await?;
//! assert_eq!(refused.status(), 429);
//! assert_eq!(refused.headers()["retry-after"], "1");
//! // Another key has its own bucket.
//! assert_eq!(svc.ready().await?.call(call("bob")).await?.status(), 200);
//! # Ok(())
//! # }
//! ```

mod body;
mod cost;
mod fields;
mod future;
mod layer;
mod limits;
mod missing;
mod policy;
mod rejected;
mod respond;
mod service;
mod wait;

pub use self::body::ResponseBody;
pub use self::cost::{PerResource, Weigh};
pub use self::future::ResponseFuture;
pub use self::layer::RejectLayer;
pub use self::missing::MissingKey;
pub use self::rejected::Rejected;
pub use self::respond::{Fallback, OnReject, Oneshot, RespondWith, TooManyRequests};
pub use self::service::Reject;
