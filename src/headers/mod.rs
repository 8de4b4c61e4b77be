//! Header syntax: the rate-limit fields a server reports its quota in, and `Retry-After`.
//!
//! A client can slow down *before* it is refused with `429 Too Many Requests` by watching the
//! quota a server reports on every response: [`read_quota_hint`] reads what is left and when
//! it comes back, from the IETF draft's `RateLimit` field
//! ([draft-ietf-httpapi-ratelimit-headers]) or the older `RateLimit-*` and `X-RateLimit-*`
//! fields; [`read_stated_rate`] and [`read_quota_rate`] read the rate they state;
//! [`read_provider_limits`] reads OpenAI's and Anthropic's fields, per resource. Once
//! refused, [`read_retry_after`] reads how long to wait.
//! [`RetryAfterLayer`](crate::RetryAfterLayer) does all of this; these functions are for
//! clients of your own. None of them panics, whatever the bytes.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use tower_throttle::headers::{read_quota_hint, read_retry_after};
//!
//! let mut headers = http::HeaderMap::new();
//! headers.insert("ratelimit", "\"default\";r=0;t=3".parse().unwrap());
//! headers.insert("retry-after", "3".parse().unwrap());
//!
//! let hint = read_quota_hint(&headers, SystemTime::now()).unwrap();
//! assert_eq!(hint.remaining, 0);
//! assert_eq!(hint.reset, Some(Duration::from_secs(3)));
//! assert_eq!(read_retry_after(&headers, SystemTime::now()), Ok(Some(Duration::from_secs(3))));
//! ```
//!
//! [draft-ietf-httpapi-ratelimit-headers]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/

pub(crate) mod grpc;
mod provider;
mod ratelimit;
mod retry_after;
mod structured;
mod values;

pub(crate) use self::ratelimit::{
    insert_x_ratelimit, policy_value, ratelimit_value, RATELIMIT, RATELIMIT_POLICY,
    X_RATELIMIT_REMAINING,
};
#[cfg(feature = "grpc")]
pub(crate) use self::values::digits;

pub use self::provider::{parse_duration, read_provider_limits, ResourceHint};
pub(crate) use self::provider::{spent_for, stated_requests};
pub use self::ratelimit::{
    read_quota_hint, read_quota_rate, read_stated_rate, QuotaHint, LONGEST_WINDOW,
};
pub use self::retry_after::{
    parse_retry_after, read_retry_after, RetryAfterError, MAX_PARSED_WAIT,
};
