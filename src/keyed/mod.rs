//! Per-key limits: [`KeyedBucket`], a bucket per key, of any [`Algorithm`](crate::Algorithm)
//! or [`Plan`](crate::Plan) of several quotas (one per key if you like), forgotten when
//! unused again. A layer
//! ([`RejectLayer::keyed`](crate::RejectLayer::keyed)) finds each request's key with a
//! [`KeyExtractor`](crate::extract::KeyExtractor).
//!
//! ```
//! use std::net::SocketAddr;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_throttle::extract::PeerIp;
//! use tower_throttle::keyed::KeyedBucket;
//! use tower_throttle::{Bucket, Quota, RejectLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), std::convert::Infallible> {
//! let per_ip = KeyedBucket::new(Quota::per_second(1));
//! let mut svc = ServiceBuilder::new()
//!     .layer(RejectLayer::keyed(per_ip.clone(), PeerIp::new()))
//!     .service(service_fn(|_: http::Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//!     }));
//!
//! let from = |peer: &str| {
//!     let mut req = http::Request::new(String::new());
//!     req.extensions_mut().insert(peer.parse::<SocketAddr>().unwrap());
//!     req
//! };
//! assert_eq!(svc.ready().await?.call(from("192.0.2.1:1000")).await?.status(), 200);
//! assert_eq!(svc.ready().await?.call(from("192.0.2.1:1001")).await?.status(), 429);
//! assert_eq!(svc.ready().await?.call(from("192.0.2.2:1000")).await?.status(), 200);
//! assert_eq!(per_ip.len(), 2);
//!
//! // A second later both buckets are full again, and are swept away by later inserts.
//! tokio::time::advance(std::time::Duration::from_secs(1)).await;
//! assert_eq!(svc.ready().await?.call(from("192.0.2.1:1002")).await?.status(), 200);
//! # Ok(())
//! # }
//! ```

mod builder;
mod core;
mod store;
mod table;
mod tables;
mod tiers;

pub(crate) use self::tiers::Grant;

pub use self::builder::KeyedBucketBuilder;
pub use self::store::{KeyedBucket, DEFAULT_MAX_KEYS};
