//! [`RateLimit`].

use std::task::{Context, Poll};

use tower_service::Service;

use super::future::ResponseFuture;
use super::gate::Gate;
use super::UnitCost;
use crate::bucket::Reservation;
use crate::Bucket;

/// Waits in `poll_ready` until the shared [`Bucket`] admits the next request.
///
/// Made by [`RateLimitLayer`](super::RateLimitLayer). `poll_ready` first drives the inner
/// service to readiness, then reserves a token; `call` spends it. So a token is only taken
/// when the request can leave at once: requests that queue behind a busy inner service (a
/// concurrency limit, a full connection pool) hold no tokens, and cannot leave in a burst when
/// it frees up.
///
/// Cloning gives a service on the same bucket, without the original's reservation. A
/// reservation that is never used (the service is dropped after `poll_ready`) is given back.
///
/// # Panics
/// `call` panics when `poll_ready` has not returned ready since the last `call`, like
/// tower's own middleware.
#[derive(Debug, Clone)]
pub struct RateLimit<S, C = UnitCost> {
    inner: S,
    gate: Gate,
    cost: C,
}

impl<S> RateLimit<S> {
    /// Wraps `inner`, one token of `bucket` per request.
    pub fn new(inner: S, bucket: Bucket) -> Self {
        Self::with_cost(inner, bucket, UnitCost)
    }
}

impl<S, C> RateLimit<S, C> {
    pub(crate) fn with_cost(inner: S, bucket: Bucket, cost: C) -> Self {
        RateLimit {
            inner,
            gate: Gate::new(bucket),
            cost,
        }
    }

    /// The shared bucket.
    pub fn bucket(&self) -> &Bucket {
        self.gate.bucket()
    }

    inner_accessors!("An unused reservation is given back.");
}

impl<S, Req> Service<Req> for RateLimit<S, UnitCost>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        std::task::ready!(self.inner.poll_ready(cx))?;
        self.gate.poll_acquire(cx).map(Ok)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let _spent = self.gate.take();
        self.inner.call(req)
    }
}

impl<S, Req, F> Service<Req> for RateLimit<S, F>
where
    S: Service<Req> + Clone,
    F: Fn(&Req) -> u32,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, Req>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        std::task::ready!(self.inner.poll_ready(cx))?;
        self.gate.poll_acquire(cx).map(Ok)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let permit = self.gate.take();
        let bucket = self.gate.bucket();
        // A cost above the capacity is charged the whole capacity (see `RateLimitLayer::cost`).
        let n = (self.cost)(&req);
        let n = bucket.check(n).map_or_else(|e| e.burst(), |()| n);
        if n == 0 {
            bucket.give_back(permit);
        }
        if n <= 1 {
            return ResponseFuture::called(self.inner.call(req));
        }
        match bucket.reserve(n - 1, false) {
            Ok(Reservation::Later(waiter)) => {
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::waiting(waiter, bucket.clone(), ready, req)
            }
            _ => ResponseFuture::called(self.inner.call(req)),
        }
    }
}
