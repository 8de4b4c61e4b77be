//! [`Charged`]: a [`RateLimit`] that charges an estimate and leaves the [`Charge`] with the
//! response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::RateLimit;
use crate::retry_after::HttpResponse;
use crate::{BoxError, Charge, Cost, Denied, Limit};

/// The cost of a [`RateLimit`] made by [`RateLimitLayer::charge`](super::RateLimitLayer::charge):
/// an estimate per request, settled once the response tells the real cost.
#[derive(Debug, Clone)]
pub struct Charged<F> {
    pub(super) estimate: F,
    pub(super) limit: Limit,
}

impl<S, Req, F, E> Service<Req> for RateLimit<S, Charged<F>>
where
    S: Service<Req> + Clone,
    S::Response: HttpResponse,
    S::Error: Into<BoxError>,
    F: Fn(&Req) -> E,
    E: Into<Cost>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ChargeFuture<S, Req>;

    /// The inner service's readiness: the estimate is waited for in the response future,
    /// once the request is known.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let estimate = (self.cost.estimate)(&req).into();
        let clone = self.inner.clone();
        ChargeFuture {
            step: Step::Charging {
                charging: Box::pin(self.cost.limit.charge(estimate)),
                svc: Some(std::mem::replace(&mut self.inner, clone)),
                req: Some(req),
            },
        }
    }
}

type Charging = Pin<Box<dyn Future<Output = Result<Charge, Denied>> + Send>>;

pin_project! {
    /// Response future of a [`RateLimit`] that charges estimates: waits for the estimate,
    /// calls the inner service, and puts the [`Charge`] in the response's extensions.
    pub struct ChargeFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        step: Step<S, Req>,
    }
}

pin_project! {
    #[project = StepProj]
    enum Step<S, Req>
    where
        S: Service<Req>,
    {
        Charging { charging: Charging, svc: Option<S>, req: Option<Req> },
        Called { #[pin] future: S::Future, charge: Option<Charge> },
    }
}

impl<S, Req> Future for ChargeFuture<S, Req>
where
    S: Service<Req>,
    S::Response: HttpResponse,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match self.as_mut().project().step.project() {
                StepProj::Called { future, charge } => {
                    let mut response = std::task::ready!(future.poll(cx)).map_err(Into::into)?;
                    let charge = charge.take().expect("polled after completion");
                    charge.answered(response.status());
                    response.extensions_mut().insert(charge);
                    return Poll::Ready(Ok(response));
                }
                StepProj::Charging { charging, svc, req } => {
                    let charge = std::task::ready!(charging.as_mut().poll(cx))?;
                    let mut svc = svc.take().expect("polled after completion");
                    let req = req.take().expect("polled after completion");
                    Step::Called {
                        future: svc.call(req),
                        charge: Some(charge),
                    }
                }
            };
            self.as_mut().project().step.set(next);
        }
    }
}

impl<S: Service<Req>, Req> fmt::Debug for ChargeFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChargeFuture").finish_non_exhaustive()
    }
}
