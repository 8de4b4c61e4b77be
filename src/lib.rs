#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bucket;
mod quota;
pub mod rate_limit;

pub use crate::bucket::{Acquire, Bucket, ExceedsBurst, Snapshot, Throttled};
pub use crate::quota::{Quota, QuotaError};
pub use crate::rate_limit::{RateLimit, RateLimitLayer};

/// The boxed error of layers whose inner errors are converted, as in tower.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
