//! reqwest support: [`reqwest_middleware`] middleware on the shared [`Bucket`](crate::Bucket),
//! and `reqwest::Client` under the tower layers.
//!
//! # reqwest-middleware
//! [`RetryAfterMiddleware`] and [`RateLimitMiddleware`] do for a
//! [`ClientWithMiddleware`](reqwest_middleware::ClientWithMiddleware) what
//! [`RetryAfterLayer`](crate::RetryAfterLayer) and [`RateLimitLayer`](crate::RateLimitLayer) do
//! for a tower stack. The retry middleware is built from a `RetryAfterLayer`, so both take the
//! same settings and make the same decisions. Attach the retry middleware **first**:
//! middleware runs in the order it is attached, so the rate limit then runs inside the retry
//! loop and every attempt, retries included, waits for a token.
//!
//! ```
//! use reqwest_middleware::ClientBuilder;
//! use tower_throttle::reqwest::{RateLimitMiddleware, RetryAfterMiddleware};
//! use tower_throttle::{Bucket, Quota, RetryAfterLayer};
//! # async fn serve() -> std::net::SocketAddr {
//! #     let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
//! #     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! #     let addr = listener.local_addr().unwrap();
//! #     tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
//! #     addr
//! # }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), tower_throttle::BoxError> {
//! # let addr = serve().await;
//! let bucket = Bucket::new(Quota::per_second(10));
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryAfterMiddleware::new(
//!         RetryAfterLayer::new(bucket.clone()).max_retries(5),
//!     ))
//!     .with(RateLimitMiddleware::new(bucket.clone()))
//!     .build();
//!
//! // Clone `client` into every worker: they all share `bucket`.
//! let resp = client.get(format!("http://{addr}/")).send().await?;
//! assert!(resp.status().is_success());
//! assert_eq!(bucket.snapshot().available, 9);
//! # Ok(())
//! # }
//! ```
//!
//! # `reqwest::Client` as a tower service
//! `reqwest::Client` implements tower's `Service<reqwest::Request>`. This module implements
//! [`Replay`](crate::retry_after::Replay) for `reqwest::Request` (with
//! `reqwest::Request::try_clone`: a request with a streaming body is sent once, never
//! retried) and [`HttpResponse`](crate::retry_after::HttpResponse) for `reqwest::Response`, so
//! the client runs under the tower layers as it is:
//!
//! ```
//! use tower::{ServiceBuilder, ServiceExt};
//! use tower_throttle::{Bucket, Quota, RateLimitLayer, RetryAfterLayer};
//! # async fn serve() -> std::net::SocketAddr {
//! #     let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
//! #     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! #     let addr = listener.local_addr().unwrap();
//! #     tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
//! #     addr
//! # }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), tower_throttle::BoxError> {
//! # let addr = serve().await;
//! let bucket = Bucket::new(Quota::per_second(10));
//! let http = reqwest::Client::new();
//! let client = ServiceBuilder::new()
//!     .layer(RetryAfterLayer::new(bucket.clone()).max_retries(5))
//!     .layer(RateLimitLayer::new(bucket.clone()))
//!     .service(http.clone());
//!
//! let req = http.get(format!("http://{addr}/")).build()?;
//! let resp = client.oneshot(req).await?;
//! assert!(resp.status().is_success());
//! assert_eq!(bucket.snapshot().available, 9);
//! # Ok(())
//! # }
//! ```
//!
//! Hand the same [`Bucket`](crate::Bucket) to the middleware and to the layers and they
//! coordinate: they draw from one rate, and a push-back seen by either pauses both.

mod rate_limit;
mod replay;
mod retry_after;
mod sent;

pub use self::rate_limit::RateLimitMiddleware;
pub use self::retry_after::RetryAfterMiddleware;
