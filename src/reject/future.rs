//! [`ResponseFuture`] of a [`Reject`](super::Reject) service.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::ResponseBody;
use super::fields::Fields;
use super::respond::OnReject;
use super::wait::{Outcome, Wait};
use crate::slot::Slot;

pin_project! {
    /// The response of a [`Reject`](super::Reject) service: the inner service's answer, or the
    /// rejection's, with the rate-limit fields added.
    pub struct ResponseFuture<S, O, Req, K>
    where
        S: Service<Req>,
        O: OnReject<Req, S::Response, S::Error>,
        K: Hash,
        K: Eq,
    {
        #[pin]
        kind: Kind<S, O, Req, K>,
        // Boxed: most responses get none, and the future stays small.
        fields: Option<Box<Fields>>,
        // The request's place in the in-flight quotas, for the response's body.
        slot: Slot,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, O, Req, K>
    where
        S: Service<Req>,
        O: OnReject<Req, S::Response, S::Error>,
        K: Hash,
        K: Eq,
    {
        Called { #[pin] future: S::Future },
        Rejected { #[pin] future: O::Future },
        Waiting { wait: Box<Wait<S, O, Req, K>> },
    }
}

impl<S, O, Req, K> ResponseFuture<S, O, Req, K>
where
    S: Service<Req>,
    O: OnReject<Req, S::Response, S::Error>,
    K: Hash + Eq,
{
    pub(crate) fn called(future: S::Future, fields: Option<Fields>, slot: Slot) -> Self {
        ResponseFuture {
            kind: Kind::Called { future },
            fields: fields.map(Box::new),
            slot,
        }
    }

    pub(crate) fn rejected(future: O::Future, fields: Fields) -> Self {
        ResponseFuture {
            kind: Kind::Rejected { future },
            fields: Some(Box::new(fields)),
            slot: Slot::default(),
        }
    }

    pub(crate) fn waiting(wait: Wait<S, O, Req, K>) -> Self {
        ResponseFuture {
            kind: Kind::Waiting {
                wait: Box::new(wait),
            },
            fields: None,
            slot: Slot::default(),
        }
    }
}

impl<S, O, ReqBody, ResBody, K> Future for ResponseFuture<S, O, Request<ReqBody>, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    O: OnReject<Request<ReqBody>, Response<ResBody>, S::Error>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let this = self.as_mut().project();
            let next = match this.kind.project() {
                KindProj::Called { future } => {
                    let mut res = std::task::ready!(future.poll(cx))?;
                    if let Some(fields) = this.fields.take() {
                        fields.apply(&mut res);
                    }
                    let slot = std::mem::take(this.slot);
                    return Poll::Ready(Ok(res.map(|body| ResponseBody::new(body, slot))));
                }
                KindProj::Rejected { future } => {
                    let mut res = std::task::ready!(future.poll(cx))?;
                    if let Some(fields) = this.fields.take() {
                        fields.apply(&mut res);
                    }
                    return Poll::Ready(Ok(
                        res.map(|body| ResponseBody::new(body, Slot::default()))
                    ));
                }
                KindProj::Waiting { wait } => match std::task::ready!(wait.poll(cx)) {
                    Outcome::Go(mut service, req, statuses, tier, slot) => {
                        *this.slot = slot;
                        *this.fields = wait
                            .spec
                            .admitted(|| wait.policies(tier), statuses)
                            .map(Box::new);
                        Kind::Called {
                            future: service.call(req),
                        }
                    }
                    Outcome::DryRun(mut service, mut req, rejected) => {
                        req.extensions_mut().insert(rejected);
                        Kind::Called {
                            future: service.call(req),
                        }
                    }
                    Outcome::Refuse(mut req, rejected) => {
                        req.extensions_mut().insert(rejected.clone());
                        let future = wait.on_reject.on_reject(req, &rejected);
                        let refusal = wait.on_reject.is_refusal();
                        let tier = rejected.tier();
                        let policies = || wait.policies(tier);
                        *this.fields =
                            Some(Box::new(wait.spec.rejected(policies, rejected, refusal)));
                        Kind::Rejected { future }
                    }
                },
            };
            self.as_mut().project().kind.set(next);
        }
    }
}

impl<S, O, Req, K> fmt::Debug for ResponseFuture<S, O, Req, K>
where
    S: Service<Req>,
    O: OnReject<Req, S::Response, S::Error>,
    K: Hash + Eq,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
