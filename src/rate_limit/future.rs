//! [`ResponseFuture`] of a [`RateLimit`](super::RateLimit) with a per-request cost.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use crate::bucket::{Reservation, Waiter};
use crate::Bucket;

pin_project! {
    /// Response future of a [`RateLimit`](super::RateLimit) with a per-request cost: waits for
    /// the rest of the request's cost, then calls the inner service.
    pub struct ResponseFuture<S, Req>
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
            waiter: Waiter,
            bucket: Bucket,
            sleep: Pin<Box<Sleep>>,
            svc: Option<S>,
            req: Option<Req>,
        },
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    pub(crate) fn called(future: S::Future) -> Self {
        ResponseFuture {
            kind: Kind::Called { future },
        }
    }

    pub(crate) fn waiting(waiter: Waiter, bucket: Bucket, svc: S, req: Req) -> Self {
        ResponseFuture {
            kind: Kind::Waiting {
                waiter,
                bucket,
                sleep: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
                svc: Some(svc),
                req: Some(req),
            },
        }
    }
}

impl<S, Req> Future for ResponseFuture<S, Req>
where
    S: Service<Req>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match self.as_mut().project().kind.project() {
                KindProj::Called { future } => return future.poll(cx),
                KindProj::Waiting {
                    waiter,
                    bucket,
                    sleep,
                    svc,
                    req,
                } => {
                    if let Err(shrunk) = std::task::ready!(waiter.poll(sleep.as_mut(), cx)) {
                        // `set_quota` shrank the capacity below the rest of the cost while it
                        // waited: wait for what fits now, the first token being spent already.
                        let rest = shrunk.requested().min(shrunk.burst().saturating_sub(1));
                        if rest > 0 {
                            if let Ok(Reservation::Later(w)) = bucket.reserve(rest, false) {
                                *waiter = w;
                                continue;
                            }
                        }
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

impl<S: Service<Req>, Req> fmt::Debug for ResponseFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// The response future of a [`RateLimit`](super::RateLimit) with a cost, renamed
/// [`ResponseFuture`] as in every other middleware module.
#[deprecated(note = "renamed `rate_limit::ResponseFuture`")]
pub type CostFuture<S, Req> = ResponseFuture<S, Req>;
