//! [`ResponseFuture`] and [`CostFuture`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use crate::limit::Turn;
use crate::BoxError;

pin_project! {
    /// Response future of a [`RateLimit`](super::RateLimit) of one token per request: the
    /// inner service's future, or the refusal of a limit that could not decide.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Outcome<F>,
    }
}

pin_project! {
    #[project = OutcomeProj]
    enum Outcome<F> {
        Called { #[pin] future: F },
        Failed { error: Option<BoxError> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn called(future: F) -> Self {
        ResponseFuture {
            kind: Outcome::Called { future },
        }
    }

    pub(crate) fn failed(error: BoxError) -> Self {
        ResponseFuture {
            kind: Outcome::Failed { error: Some(error) },
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            OutcomeProj::Called { future } => future.poll(cx).map_err(Into::into),
            OutcomeProj::Failed { error } => {
                Poll::Ready(Err(error.take().expect("polled after completion")))
            }
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

pin_project! {
    /// Response future of a [`RateLimit`](super::RateLimit) with a per-request cost: waits for
    /// the rest of the request's cost, then calls the inner service.
    pub struct CostFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        kind: Kind<S, Req>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, Req>
    where
        S: Service<Req>,
    {
        Called { #[pin] future: S::Future },
        Waiting {
            rest: Turn,
            sleep: Pin<Box<Sleep>>,
            svc: Option<S>,
            req: Option<Req>,
        },
        Failed { error: Option<BoxError> },
    }
}

impl<S: Service<Req>, Req> CostFuture<S, Req> {
    pub(crate) fn called(future: S::Future) -> Self {
        CostFuture {
            kind: Kind::Called { future },
        }
    }

    pub(crate) fn failed(error: BoxError) -> Self {
        CostFuture {
            kind: Kind::Failed { error: Some(error) },
        }
    }

    pub(crate) fn waiting(rest: Turn, svc: S, req: Req) -> Self {
        CostFuture {
            kind: Kind::Waiting {
                rest,
                sleep: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
                svc: Some(svc),
                req: Some(req),
            },
        }
    }
}

impl<S, Req> Future for CostFuture<S, Req>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match self.as_mut().project().kind.project() {
                KindProj::Called { future } => return future.poll(cx).map_err(Into::into),
                KindProj::Failed { error } => {
                    return Poll::Ready(Err(error.take().expect("polled after completion")))
                }
                KindProj::Waiting {
                    rest,
                    sleep,
                    svc,
                    req,
                } => {
                    let taken = std::task::ready!(rest.poll(sleep.as_mut(), cx));
                    if let Err(e) = taken {
                        return Poll::Ready(Err(e.into()));
                    }
                    let mut svc = svc.take().expect("polled after completion");
                    let req = req.take().expect("polled after completion");
                    svc.call(req)
                }
            };
            self.as_mut()
                .project()
                .kind
                .set(Kind::Called { future: next });
        }
    }
}

impl<S: Service<Req>, Req> fmt::Debug for CostFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CostFuture").finish_non_exhaustive()
    }
}
