//! How a rejecting layer names its limits (`RateLimit-Policy`), and what it reports of each.

use std::time::Duration;

use super::fields::Policies;
use super::rejected::{Rejected, Status};
use crate::limit::{KeyedLimit, Limit};
use crate::{Denied, Quota};

/// Policy names in `RateLimit-Policy` and `RateLimit`.
pub(crate) const SINGLE: &str = "default";
pub(crate) const PER_KEY: &str = "per-key";
pub(crate) const GLOBAL: &str = "global";

/// The policies of a per-key limit and a limit (global when `is_keyed`).
pub(crate) fn policies<K>(
    keyed: Option<&KeyedLimit<K>>,
    limit: Option<&Limit>,
    is_keyed: bool,
) -> Policies {
    let name = if is_keyed { GLOBAL } else { SINGLE };
    [
        keyed.map(|k| (PER_KEY, k.quota())),
        limit.map(|l| (name, l.quota())),
    ]
}

/// A refusal by the limit `name` of `quota`.
pub(crate) fn refusal(name: &'static str, quota: &Quota, denied: Denied) -> Rejected {
    Rejected::new(denied, name, *quota)
}

/// The state of the limit `name` of `quota`, from its level (requests left, time until
/// the next).
pub(crate) fn status(
    name: &'static str,
    quota: Quota,
    level: Option<(u64, Duration)>,
) -> Option<Status> {
    let (remaining, reset) = level?;
    Some(Status {
        name,
        quota,
        remaining,
        reset,
    })
}

/// The state of `limit`, named `name`, now.
pub(crate) fn limit_status(limit: &Limit, name: &'static str) -> Option<Status> {
    status(name, limit.quota(), limit.level())
}
