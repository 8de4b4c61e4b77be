//! [`RetryAfter`].

use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tower_service::Service;

use super::future::ResponseFuture;
use super::policy::Policy;
use super::{HttpResponse, Replay};
use crate::BoxError;

/// Retries push-backs and failures of the inner service: made by
/// [`RetryAfterLayer`](super::RetryAfterLayer).
///
/// Errors are the inner service's, boxed. After the last attempt the caller receives the last
/// real response (the final 429, say), never a synthetic error.
#[derive(Debug, Clone)]
pub struct RetryAfter<S> {
    inner: S,
    policy: Arc<Policy>,
}

impl<S> RetryAfter<S> {
    pub(crate) fn from_policy(inner: S, policy: Arc<Policy>) -> Self {
        RetryAfter { inner, policy }
    }

    inner_accessors!();
}

impl<S, Req> Service<Req> for RetryAfter<S>
where
    S: Service<Req> + Clone,
    S::Response: HttpResponse,
    S::Error: Into<BoxError>,
    Req: Replay,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.call_until(req, None)
    }
}

impl<S> RetryAfter<S> {
    /// [`call`](Service::call), for a request with a deadline of its own (a gRPC call's
    /// `grpc-timeout`): no attempt goes out at or after it.
    pub(crate) fn call_until<Req>(
        &mut self,
        req: Req,
        deadline: Option<Instant>,
    ) -> ResponseFuture<S, Req>
    where
        S: Service<Req> + Clone,
        Req: Replay,
    {
        if let Some(budget) = &self.policy.budget {
            budget.deposit();
        }
        let method = req.method().clone();
        let copy = if self.policy.max_retries > 0 {
            req.replay()
        } else {
            None
        };
        // The readied service goes with the request; this one becomes a fresh clone.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let sent = self.policy.limit.feedback().sending();
        let future = ready.call(req);
        ResponseFuture::new(
            future,
            ready,
            copy,
            method,
            self.policy.clone(),
            sent,
            deadline,
        )
    }
}
