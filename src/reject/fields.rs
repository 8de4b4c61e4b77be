//! The rate-limit fields a [`Reject`](super::Reject) service adds to responses.
//!
//! - `Retry-After` (rejections only): whole seconds, rounded up, at least 1.
//! - `RateLimit-Policy`: one member per limit, `"name";q=<count>;w=<seconds>`.
//! - `RateLimit`: one member per limit whose state is known, `"name";r=<left>;t=<seconds>`,
//!   where `t` is the time until one more request is allowed (rounded up).
//! - Optionally `X-RateLimit-Limit`, `-Remaining` and `-Reset` (delta seconds) for the most
//!   restrictive limit.
//!
//! - `Cache-Control: no-store` (rejections only), so that no cache keeps a refusal.
//!
//! A field the response already has (set by a custom rejection response, say) is left alone.

use std::sync::Arc;

use http::header::{CACHE_CONTROL, RETRY_AFTER};
use http::{HeaderMap, HeaderValue};

use super::rejected::{Rejected, Status};
use crate::headers::{
    insert_x_ratelimit, policy_value, ratelimit_value, RATELIMIT, RATELIMIT_POLICY,
    X_RATELIMIT_REMAINING,
};
use crate::{Quota, Resource};

/// The policy of `quota` as (`q`, `w`): see [`Quota::policy_window`].
pub(crate) fn window(quota: Quota) -> (u64, u64) {
    quota.policy_window()
}

/// The limits of a layer as `RateLimit-Policy` names them, one per quota, with the
/// resource each counts.
pub(crate) type Policies = Vec<(Arc<str>, Quota, Resource)>;

/// What a service adds to its responses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) x_ratelimit: bool,
    /// Fields on admitted responses too, not only on rejections.
    pub(crate) admitted: bool,
}

impl Spec {
    /// The fields of an admitted response, if it gets any.
    pub(crate) fn admitted(
        &self,
        policies: impl FnOnce() -> Policies,
        statuses: [Option<Status>; 2],
    ) -> Option<Fields> {
        self.admitted.then(|| Fields {
            policies: policies(),
            statuses,
            retry_after: None,
            x_ratelimit: self.x_ratelimit,
            no_store: false,
            rejected: None,
        })
    }

    /// The fields of the answer to a rejected request: a refusal gets `Retry-After` and
    /// `Cache-Control: no-store`, a fallback's answer only the `RateLimit` fields.
    pub(crate) fn rejected(
        &self,
        policies: impl FnOnce() -> Policies,
        rejected: Rejected,
        refusal: bool,
    ) -> Fields {
        let Some(status) = rejected.status().cloned() else {
            return Fields {
                policies: Vec::new(),
                statuses: [None, None],
                retry_after: None,
                x_ratelimit: false,
                no_store: refusal,
                rejected: Some(rejected),
            };
        };
        Fields {
            policies: policies(),
            statuses: [Some(status), None],
            retry_after: if refusal {
                rejected.retry_after_secs()
            } else {
                None
            },
            x_ratelimit: self.x_ratelimit,
            no_store: refusal,
            rejected: Some(rejected),
        }
    }
}

/// The fields to add to one response.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    pub(crate) policies: Policies,
    pub(crate) statuses: [Option<Status>; 2],
    pub(crate) retry_after: Option<u64>,
    pub(crate) x_ratelimit: bool,
    /// `Cache-Control: no-store`: the answer is a refusal.
    pub(crate) no_store: bool,
    pub(crate) rejected: Option<Rejected>,
}

impl Fields {
    pub(crate) fn apply<B>(self, res: &mut http::Response<B>) {
        let headers = res.headers_mut();
        if self.no_store && !headers.contains_key(CACHE_CONTROL) {
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        if let Some(secs) = self.retry_after {
            if !headers.contains_key(RETRY_AFTER) {
                headers.insert(RETRY_AFTER, HeaderValue::from(secs));
            }
        }
        if !headers.contains_key(RATELIMIT_POLICY) {
            for (name, quota, unit) in &self.policies {
                let (q, w) = window(*quota);
                headers.append(RATELIMIT_POLICY, policy_value(name, q, w, unit.name()));
            }
        }
        let statuses = self.statuses.iter().flatten();
        if !headers.contains_key(RATELIMIT) {
            for s in statuses.clone() {
                headers.append(RATELIMIT, ratelimit_value(&s.name, s.remaining, s.reset));
            }
        }
        if self.x_ratelimit {
            if let Some(s) = statuses.min_by_key(|s| s.remaining) {
                x_fields(headers, s);
            }
        }
        if let Some(rejected) = self.rejected {
            res.extensions_mut().insert(rejected);
        }
    }
}

fn x_fields(headers: &mut HeaderMap, s: &Status) {
    if !headers.contains_key(X_RATELIMIT_REMAINING) {
        insert_x_ratelimit(headers, window(s.quota).0, s.remaining, s.reset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn windows() {
        assert_eq!(window(Quota::per_second(10)), (10, 1));
        assert_eq!(window(Quota::per_minute(100).burst(5)), (100, 60));
        assert_eq!(window(Quota::per_hour(2000)), (2000, 3600));
        assert_eq!(
            window(Quota::with_period(Duration::from_millis(250))),
            (4, 1)
        );
        assert_eq!(
            window(Quota::with_period(Duration::from_millis(1500))),
            (1, 2)
        );
        assert_eq!(window(Quota::new(3, Duration::from_millis(2500))), (3, 3));
        assert_eq!(
            policy_value("per-key", 5, 1, "requests"),
            "\"per-key\";q=5;w=1"
        );
    }

    #[test]
    fn apply_keeps_existing_fields() {
        let fields = Fields {
            policies: vec![(
                Arc::from("default"),
                Quota::per_second(1),
                Resource::REQUESTS,
            )],
            statuses: [
                Some(Status {
                    name: Arc::from("default"),
                    quota: Quota::per_second(1),
                    remaining: 0,
                    reset: Duration::from_millis(300),
                }),
                None,
            ],
            retry_after: Some(1),
            x_ratelimit: true,
            no_store: true,
            rejected: None,
        };
        let mut res = http::Response::new(());
        res.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("7"));
        res.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
        fields.apply(&mut res);
        let h = res.headers();
        assert_eq!(h[CACHE_CONTROL], "private, no-store");
        assert_eq!(h[RETRY_AFTER], "7");
        assert_eq!(h["ratelimit-policy"], "\"default\";q=1;w=1");
        assert_eq!(h["ratelimit"], "\"default\";r=0;t=1");
        assert_eq!(h["x-ratelimit-limit"], "1");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset"], "1");
    }
}
