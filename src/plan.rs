//! [`Plan`]: the quotas one limit enforces together.

use std::fmt;
use std::sync::Arc;

use crate::{Algorithm, Cost, Quota, Resource};

/// The quotas one limit enforces together: a request goes only when each of them has room,
/// and is then charged to all of them; refused by one, it is charged to none, and its wait is
/// the longest among the quotas that refused it.
///
/// A plan of one quota is that quota (`Plan::from(quota)`, the token bucket). [`and`](Plan::and)
/// stacks another, each with its own [`Algorithm`]: a token bucket per second under fixed
/// windows per day is the usual pair. Each quota counts one [`Resource`]
/// ([`counting`](Plan::counting)), requests unless told otherwise: requests and tokens per
/// minute are one plan, and a request's [`Cost`] says how much of each it takes.
///
/// ```
/// use tower_throttle::{Algorithm, Plan, Quota, Resource};
///
/// let free = Plan::new(Quota::per_second(10).burst(20))
///     .and(Quota::per_day(10_000))
///     .algorithm(Algorithm::FixedWindow)
///     .named("daily");
/// assert_eq!(free.quotas().count(), 2);
///
/// let model = Plan::new(Quota::per_minute(500))
///     .and(Quota::per_minute(30_000).burst(30_000))
///     .counting(Resource::TOKENS);
/// # let _ = model;
/// ```
#[derive(Clone, PartialEq)]
pub struct Plan {
    parts: Vec<Part>,
}

/// One quota of a plan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Part {
    pub(crate) quota: Quota,
    pub(crate) algorithm: Algorithm,
    /// The resource it counts.
    pub(crate) resource: Resource,
    /// It counts requests in flight: each admission comes back when its request ends.
    pub(crate) in_flight: bool,
    name: Option<Arc<str>>,
}

impl Plan {
    /// A plan of `quota`, on the token bucket.
    pub fn new(quota: Quota) -> Self {
        Plan {
            parts: vec![Part {
                quota,
                algorithm: Algorithm::TokenBucket,
                resource: Resource::REQUESTS,
                in_flight: false,
                name: None,
            }],
        }
    }

    /// Stack `quota` on the plan, on the token bucket unless [`algorithm`](Plan::algorithm)
    /// follows.
    pub fn and(mut self, quota: Quota) -> Self {
        self.parts.push(Part {
            quota,
            algorithm: Algorithm::TokenBucket,
            resource: Resource::REQUESTS,
            in_flight: false,
            name: None,
        });
        self
    }

    /// The algorithm of the quota added last (an [in-flight](Plan::in_flight) quota's is
    /// the sliding log's, whatever this says).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        let last = self.parts.len() - 1;
        self.set_algorithm(last, algorithm);
        self
    }

    /// The resource the quota added last counts ([`Resource::REQUESTS`] unless told
    /// otherwise): a request is charged to it what its [`Cost`] names of that resource.
    pub fn counting(mut self, resource: Resource) -> Self {
        let last = self.last();
        if !last.in_flight {
            last.resource = resource;
        }
        self
    }

    /// Make the quota added last count requests in flight: at most its count at once, each
    /// admission given back when its request ends, or when its period (the lease) has
    /// passed at the latest, for a request that never tells (a process that died holding it).
    /// It is a sliding log of requests.
    ///
    /// A request ends when the rejecting layer's response body ends or is dropped, or the
    /// request fails ([`RejectLayer`](crate::RejectLayer)); on the client, when its
    /// [`Charge`](crate::Charge) is settled, refunded or dropped
    /// ([`RateLimitLayer::charge`](crate::RateLimitLayer::charge), [`Bucket::charge`](crate::Bucket::charge)).
    /// Stacked on rate quotas, it is decided with them: refused by either, charged to
    /// neither.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_throttle::{Plan, Quota};
    ///
    /// // 10 a second, at most 4 at once; a slot no one gives back returns after 30 s.
    /// let plan = Plan::new(Quota::per_second(10))
    ///     .and(Quota::new(4, Duration::from_secs(30)))
    ///     .in_flight();
    /// # let _ = plan;
    /// ```
    pub fn in_flight(mut self) -> Self {
        let last = self.last();
        last.in_flight = true;
        last.algorithm = Algorithm::SlidingLog;
        last.resource = Resource::REQUESTS;
        self
    }

    /// The name of the quota added last in the `RateLimit-Policy` and `RateLimit` fields.
    /// Unnamed, the quota of a one-quota plan is named after the layer's limit
    /// (`"per-key"`, `"global"`, `"default"`), and each quota of a larger plan after that
    /// and its window in seconds (`"per-key-1s"`, `"per-key-86400s"`).
    pub fn named(mut self, name: impl Into<Arc<str>>) -> Self {
        self.last().name = Some(name.into());
        self
    }

    /// The quotas, in the order they were stacked, with their algorithms.
    pub fn quotas(&self) -> impl ExactSizeIterator<Item = (Quota, Algorithm)> + '_ {
        self.parts.iter().map(|p| (p.quota, p.algorithm))
    }

    /// The first quota: the one a [`Bucket`](crate::Bucket)'s rate and
    /// [`set_quota`](crate::Bucket::set_quota) are about.
    pub fn quota(&self) -> Quota {
        self.parts[0].quota
    }

    pub(crate) fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// What `cost` charges each quota, in order.
    pub(crate) fn amounts<'a>(&'a self, cost: &'a Cost) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.parts.iter().map(|p| u64::from(cost.of(&p.resource)))
    }

    /// Which quotas count `resource`, when some do and others do not: a pause of that
    /// resource alone holds these.
    pub(crate) fn held(&self, resource: &Resource) -> Option<Vec<bool>> {
        let held: Vec<bool> = self.parts.iter().map(|p| p.resource == *resource).collect();
        (held.contains(&true) && held.contains(&false)).then_some(held)
    }

    /// Whether every quota counts requests.
    pub(crate) fn counts_requests_only(&self) -> bool {
        self.parts.iter().all(|p| p.resource == Resource::REQUESTS)
    }

    /// The plan with its first quota replaced.
    pub(crate) fn with_first(&self, quota: Quota) -> Plan {
        let mut plan = self.clone();
        plan.set(0, quota);
        plan
    }

    /// Replace quota `i`.
    pub(crate) fn set(&mut self, i: usize, quota: Quota) {
        self.parts[i].quota = quota;
    }

    /// What `cost` holds while its request is in flight, per quota (its requests, of each
    /// in-flight quota), when the plan has an in-flight quota.
    pub(crate) fn in_flight_amounts(&self, cost: &Cost) -> Option<Vec<u64>> {
        let requests = u64::from(cost.of(&Resource::REQUESTS));
        (self.parts.iter().any(|p| p.in_flight)).then(|| {
            let held = |p: &Part| if p.in_flight { requests } else { 0 };
            self.parts.iter().map(held).collect()
        })
    }

    /// Whether some quota counts `resource`.
    pub(crate) fn counts(&self, resource: &Resource) -> bool {
        self.parts.iter().any(|p| p.resource == *resource)
    }

    /// The plan with the algorithm of its first quota replaced.
    pub(crate) fn with_algorithm(mut self, algorithm: Algorithm) -> Plan {
        self.set_algorithm(0, algorithm);
        self
    }

    fn set_algorithm(&mut self, i: usize, algorithm: Algorithm) {
        if !self.parts[i].in_flight {
            self.parts[i].algorithm = algorithm;
        }
    }

    /// The names of the quotas in the rate-limit fields, for a limit named `scope`.
    pub(crate) fn names(&self, scope: &str) -> Box<[Arc<str>]> {
        let windows: Vec<u64> = self
            .parts
            .iter()
            .map(|p| p.quota.policy_window().1)
            .collect();
        self.parts
            .iter()
            .enumerate()
            .map(|(i, p)| match &p.name {
                Some(name) => Arc::clone(name),
                None if self.parts.len() == 1 => Arc::from(scope),
                None if self
                    .parts
                    .iter()
                    .zip(&windows)
                    .filter(|(o, w)| o.name.is_none() && **w == windows[i])
                    .count()
                    > 1 =>
                {
                    Arc::from(format!("{scope}-{}s-{}", windows[i], i + 1))
                }
                None => Arc::from(format!("{scope}-{}s", windows[i])),
            })
            .collect()
    }

    fn last(&mut self) -> &mut Part {
        // A plan is never empty: `new` makes one part, nothing removes one.
        let last = self.parts.len() - 1;
        &mut self.parts[last]
    }
}

impl From<Quota> for Plan {
    fn from(quota: Quota) -> Self {
        Plan::new(quota)
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.parts).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_scope_and_windows() {
        let one = Plan::new(Quota::per_second(1));
        assert_eq!(&*one.names("per-key")[0], "per-key");
        let two = Plan::new(Quota::per_second(1))
            .and(Quota::per_day(10))
            .algorithm(Algorithm::FixedWindow);
        let names = two.names("global");
        assert_eq!((&*names[0], &*names[1]), ("global-1s", "global-86400s"));
        let same = Plan::new(Quota::per_second(1))
            .and(Quota::per_second(5))
            .named("burst");
        let names = same.names("per-key");
        assert_eq!((&*names[0], &*names[1]), ("per-key-1s", "burst"));
        let twins = Plan::new(Quota::per_second(1)).and(Quota::per_second(5));
        assert_eq!(&*twins.names("k")[1], "k-1s-2");
    }
}
