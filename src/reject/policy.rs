//! How a rejecting layer names its limits (`RateLimit-Policy`), and what it reports of each.

use std::sync::Arc;
use std::time::Duration;

use super::fields::Policies;
use super::rejected::{Rejected, Status};
use crate::limit::{KeyedLimit, Limit, Which};
use crate::{Cost, Denied, Plan, Quota, Resource};

/// Policy names in `RateLimit-Policy` and `RateLimit`.
pub(crate) const SINGLE: &str = "default";
pub(crate) const PER_KEY: &str = "per-key";
pub(crate) const GLOBAL: &str = "global";

/// The policies of a per-key limit on plan `tier` and a limit (global when `is_keyed`): one
/// per quota.
pub(crate) fn policies<K>(
    keyed: Option<&KeyedLimit<K>>,
    tier: usize,
    limit: Option<&Limit>,
    is_keyed: bool,
) -> Policies {
    let name = if is_keyed { GLOBAL } else { SINGLE };
    let mut policies = Vec::new();
    if let Some(k) = keyed {
        policies.extend(named(&k.plan(tier), PER_KEY));
    }
    if let Some(l) = limit {
        policies.extend(named(&l.plan(), name));
    }
    policies
}

/// The quotas of `plan` with their names and resources, for a limit named `scope`.
fn named(plan: &Plan, scope: &str) -> impl Iterator<Item = (Arc<str>, Quota, Resource)> {
    let parts: Vec<_> = plan
        .parts()
        .iter()
        .map(|p| (p.quota, p.resource.clone()))
        .collect();
    let names = plan.names(scope).into_vec().into_iter();
    names
        .zip(parts)
        .map(|(name, (quota, unit))| (name, quota, unit))
}

/// The name and quota of `part` of `plan`, for a limit named `scope`.
fn policy_of(plan: &Plan, scope: &str, part: usize) -> (Arc<str>, Quota) {
    named(plan, scope)
        .nth(part)
        .map_or_else(|| (Arc::from(scope), plan.quota()), |(n, q, _)| (n, q))
}

/// The name and quota of `which` quota of a key's plan.
fn key_policy<K>(keyed: &KeyedLimit<K>, which: Which) -> (Arc<str>, Quota) {
    policy_of(&keyed.plan(which.tier), PER_KEY, which.part)
}

/// A refusal by `which` quota of a key's plan.
pub(crate) fn key_refusal<K>(keyed: &KeyedLimit<K>, which: Which, denied: Denied) -> Rejected {
    let (name, quota) = key_policy(keyed, which);
    Rejected::new(denied, name, quota).in_plan(which.tier)
}

/// The state of a key's limit, from its level (requests left, time until the next, which
/// quota of which plan).
pub(crate) fn key_status<K>(
    keyed: &KeyedLimit<K>,
    level: Option<(u64, Duration, Which)>,
) -> Option<Status> {
    let (remaining, reset, which) = level?;
    let (name, quota) = key_policy(keyed, which);
    Some(Status {
        name,
        quota,
        remaining,
        reset,
    })
}

/// The name and quota of `part` of `limit`'s plan, for a limit named `scope`.
fn limit_policy(limit: &Limit, scope: &str, part: usize) -> (Arc<str>, Quota) {
    policy_of(&limit.plan(), scope, part)
}

/// A refusal of `cost` by `limit`, named `scope`: by the quota of its plan that holds it
/// back longest.
pub(crate) fn limit_refusal(limit: &Limit, scope: &str, cost: &Cost, denied: Denied) -> Rejected {
    let (name, quota) = limit_policy(limit, scope, limit.holding_back(cost));
    Rejected::new(denied, name, quota)
}

/// The state of `limit`, named `scope`, now: reported for the quota of its plan that holds
/// the next request back longest.
pub(crate) fn limit_status(limit: &Limit, scope: &str) -> Option<Status> {
    let (remaining, reset) = limit.level()?;
    let (name, quota) = limit_policy(limit, scope, limit.holding_back(&Cost::from(1)));
    Some(Status {
        name,
        quota,
        remaining,
        reset,
    })
}
