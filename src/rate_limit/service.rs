//! [`RateLimit`].

use std::task::{Context, Poll};

use tower_service::Service;

use super::future::{CostFuture, ResponseFuture};
use super::gate::Gate;
use super::UnitCost;
use crate::limit::{Limit, Reserved};
use crate::{BoxError, Denied};

/// Waits in `poll_ready` until the shared limit admits the next request.
///
/// Made by [`RateLimitLayer`](super::RateLimitLayer). `poll_ready` first drives the inner
/// service to readiness, then reserves a token; `call` spends it. So a token is only taken
/// when the request can leave at once: requests that queue behind a busy inner service (a
/// concurrency limit, a full connection pool) hold no tokens, and cannot leave in a burst when
/// it frees up.
///
/// Cloning gives a service on the same limit, without the original's reservation. A
/// reservation that is never used (the service is dropped after `poll_ready`) is given back.
///
/// # Panics
/// `call` panics when `poll_ready` has not returned ready since the last `call`, like
/// tower's own middleware.
#[derive(Debug, Clone)]
pub struct RateLimit<S, C = UnitCost> {
    pub(super) inner: S,
    pub(super) gate: Gate,
    pub(super) cost: C,
}

impl<S> RateLimit<S> {
    /// Wraps `inner`, one token of `limit` per request.
    pub fn new(inner: S, limit: impl Into<Limit>) -> Self {
        Self::with_cost(inner, limit.into(), UnitCost)
    }
}

impl<S, C> RateLimit<S, C> {
    pub(crate) fn with_cost(inner: S, limit: Limit, cost: C) -> Self {
        RateLimit {
            inner,
            gate: Gate::new(limit),
            cost,
        }
    }

    /// The shared limit.
    pub fn limit(&self) -> &Limit {
        self.gate.limit()
    }

    /// A reference to the inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// A mutable reference to the inner service.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service. An unused reservation is given back.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Req> Service<Req> for RateLimit<S, UnitCost>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        std::task::ready!(self.inner.poll_ready(cx)).map_err(Into::into)?;
        self.gate.poll_acquire(cx).map(Ok)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        match self.gate.take() {
            Ok(_spent) => ResponseFuture::called(self.inner.call(req)),
            Err(refused) => ResponseFuture::failed(refused.into()),
        }
    }
}

impl<S, Req, F> Service<Req> for RateLimit<S, F>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    F: Fn(&Req) -> u32,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = CostFuture<S, Req>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        std::task::ready!(self.inner.poll_ready(cx)).map_err(Into::into)?;
        self.gate.poll_acquire(cx).map(Ok)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let permit = match self.gate.take() {
            Ok(permit) => permit,
            Err(refused) => return CostFuture::failed(refused.into()),
        };
        let limit = self.gate.limit();
        let n = (self.cost)(&req);
        if let Err(e) = limit.check(n) {
            limit.give_back(permit);
            return CostFuture::failed(Denied::from(e).into());
        }
        if n == 0 {
            limit.give_back(permit);
        }
        if n <= 1 {
            return CostFuture::called(self.inner.call(req));
        }
        // The first token came with `poll_ready`; the rest of the cost is taken before the
        // request goes.
        let rest = match limit.reserve(n - 1) {
            Reserved::Later(turn) => turn,
            Reserved::Now(_) => return CostFuture::called(self.inner.call(req)),
            Reserved::Full(full) => {
                limit.give_back(permit);
                return CostFuture::failed(Denied::from(full).into());
            }
        };
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        CostFuture::waiting(rest, ready, req)
    }
}
