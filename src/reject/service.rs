//! [`Reject`]: the service of a [`RejectLayer`](super::RejectLayer).

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::cost::Weigh;
use super::fields::Spec;
use super::future::ResponseFuture;
use super::limits::{Limits, Single, Verdict};
use super::respond::{OnReject, TooManyRequests};
use super::wait::Wait;
use crate::extract::KeyExtractor;
use crate::observe::Observer;
use crate::rate_limit::UnitCost;
use crate::slot::Slot;
use crate::Resource;

/// Answers requests over the limit at once (`429 Too Many Requests`), and passes the others
/// to the inner service.
///
/// Made by [`RejectLayer`](super::RejectLayer). `poll_ready` is the inner service's own (this
/// service is always ready when the inner one is, as axum requires), the error type is the
/// inner service's, and the decision is made in `call`, where the request — and so its key —
/// is known.
///
/// Cloning is cheap and shares every bucket. The inner service is cloned only when a request
/// waits ([`max_wait`](super::RejectLayer::max_wait)): the clone takes the place of the
/// readied service, which goes with the request, as in tower's own middleware.
///
/// # Why `S: Clone`, even when nothing waits
/// Whether a request can wait is known only at run time: besides `max_wait`, a limit kept
/// in Redis decides asynchronously, in the response future, behind the same
/// [`Limit`](crate::Limit) and [`KeyedLimit`](crate::KeyedLimit) types; the readied service
/// must then travel with the request. A `Service` impl without the bound would have to refuse, or decide for this
/// process only, on those paths, which the crate does not do silently. Every axum, hyper and
/// `tower::service_fn` service is `Clone`; wrap another in `tower::buffer::Buffer`.
pub struct Reject<S, K = (), E = Single, O = TooManyRequests, C = UnitCost> {
    inner: S,
    config: Arc<Config<K, E, O, C>>,
}

/// What every clone of a service shares.
pub(crate) struct Config<K, E, O, C> {
    pub(crate) limits: Limits<K, E>,
    pub(crate) on_reject: O,
    pub(crate) cost: C,
    /// Nanoseconds; zero: never wait.
    pub(crate) max_wait: u64,
    pub(crate) spec: Spec,
    /// Let refused requests through, recording them.
    pub(crate) dry_run: bool,
    pub(crate) observer: Option<Arc<dyn Observer>>,
}

impl<S, K, E, O, C> Reject<S, K, E, O, C> {
    pub(crate) fn new(inner: S, config: Arc<Config<K, E, O, C>>) -> Self {
        Reject { inner, config }
    }

    inner_accessors!();

    /// The longest a request waits before it is refused (zero: it never waits).
    pub fn max_wait(&self) -> Duration {
        Duration::from_nanos(self.config.max_wait)
    }
}

impl<S, K, E, O, C, ReqBody, ResBody> Service<Request<ReqBody>> for Reject<S, K, E, O, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    E: KeyExtractor<ReqBody, Key = K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    O: OnReject<Request<ReqBody>, Response<ResBody>, S::Error> + Clone,
    C: Weigh<Request<ReqBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, O, Request<ReqBody>, K>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let config = &*self.config;
        let cost = config.cost.weigh(&req);
        let n = cost.of(&Resource::REQUESTS);
        let verdict = config
            .limits
            .check(&req, &cost, config.max_wait, config.spec.admitted);
        match verdict {
            Verdict::Admit(statuses, tier, slot) => {
                let fields = config
                    .spec
                    .admitted(|| config.limits.policies(tier), statuses);
                ResponseFuture::called(self.inner.call(req), fields, slot)
            }
            Verdict::Reject(rejected) => {
                if let Some(o) = &config.observer {
                    o.refused(n, rejected.wait().unwrap_or(Duration::ZERO), config.dry_run);
                }
                req.extensions_mut().insert(rejected.clone());
                if config.dry_run {
                    trace_event!(debug, limit = ?rejected.policy(), wait = ?rejected.wait(), "dry run: request would be rejected");
                    return ResponseFuture::called(self.inner.call(req), None, Slot::default());
                }
                trace_event!(debug, limit = ?rejected.policy(), wait = ?rejected.wait(), "request rejected");
                let future = config.on_reject.on_reject(req, &rejected);
                let refusal = config.on_reject.is_refusal();
                let tier = rejected.tier();
                let fields =
                    config
                        .spec
                        .rejected(|| config.limits.policies(tier), rejected, refusal);
                ResponseFuture::rejected(future, fields)
            }
            Verdict::Wait(pending) => {
                let pending = *pending;
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                let on_reject = config.on_reject.clone();
                let wait = Wait::new(
                    pending,
                    ready,
                    req,
                    n,
                    on_reject,
                    config.spec,
                    config.dry_run,
                    config.observer.clone(),
                );
                ResponseFuture::waiting(wait)
            }
        }
    }
}

impl<S: Clone, K, E, O, C> Clone for Reject<S, K, E, O, C> {
    fn clone(&self) -> Self {
        Reject {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, K, E, O, C> fmt::Debug for Reject<S, K, E, O, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limits = &self.config.limits;
        f.debug_struct("Reject")
            .field("inner", &self.inner)
            .field("keyed", &limits.keyed_limit().map(|k| k.quota()))
            .field("limit", &limits.limit().map(|l| l.quota()))
            .field("max_wait", &self.max_wait())
            .finish_non_exhaustive()
    }
}
