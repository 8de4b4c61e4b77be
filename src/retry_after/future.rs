//! [`ResponseFuture`] of [`RetryAfter`](super::RetryAfter).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::Method;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::policy::{Action, Attempt, Policy};
use super::{HttpResponse, Replay, RetryInfo};
use crate::BoxError;

pin_project! {
    /// The response future of [`RetryAfter`](super::RetryAfter): attempts, waits, retries.
    pub struct ResponseFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S::Future>,
        svc: S,
        copy: Option<Req>,
        method: Method,
        policy: Arc<Policy>,
        retries: u32,
        started: Instant,
        sent: Instant,
        previous_delay: Duration,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Called { #[pin] future: F },
        Waiting { #[pin] sleep: Sleep },
        Readying,
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    pub(crate) fn new(
        future: S::Future,
        svc: S,
        copy: Option<Req>,
        method: Method,
        policy: Arc<Policy>,
        sent: Instant,
    ) -> Self {
        ResponseFuture {
            state: State::Called { future },
            svc,
            copy,
            method,
            policy,
            retries: 0,
            started: sent,
            sent,
            previous_delay: Duration::ZERO,
        }
    }
}

impl<S, Req> Future for ResponseFuture<S, Req>
where
    S: Service<Req>,
    S::Response: HttpResponse,
    S::Error: Into<BoxError>,
    Req: Replay,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    let result = ready!(future.poll(cx)).map_err(Into::into);
                    let attempt = Attempt {
                        method: this.method,
                        retries: *this.retries,
                        elapsed: this.started.elapsed(),
                        sent: *this.sent,
                        previous_delay: *this.previous_delay,
                        replayable: this.copy.is_some(),
                    };
                    let (action, cooldown) = match &result {
                        Ok(resp) => {
                            let v =
                                this.policy
                                    .on_response(resp.status(), resp.headers(), &attempt);
                            (v.action, v.cooldown)
                        }
                        Err(e) => (this.policy.on_error(&**e, &attempt), None),
                    };
                    match action {
                        Action::Return => {
                            let attempts = *this.retries + 1;
                            return Poll::Ready(result.map(|mut resp| {
                                resp.extensions_mut()
                                    .insert(RetryInfo::new(attempts, cooldown));
                                resp
                            }));
                        }
                        Action::Retry(delay) => {
                            trace_event!(info, ?delay, retry = *this.retries + 1, "retrying");
                            *this.retries += 1;
                            *this.previous_delay = delay;
                            drop(result);
                            this.state.set(State::Waiting {
                                sleep: tokio::time::sleep(delay),
                            });
                        }
                    }
                }
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Readying);
                }
                StateProj::Readying => {
                    // Through the layers below: a rate limit makes every attempt wait its turn.
                    ready!(this.svc.poll_ready(cx)).map_err(Into::into)?;
                    let req = match this.copy.as_ref().and_then(Replay::replay) {
                        Some(req) => req,
                        None => this.copy.take().expect("retry without a request copy"),
                    };
                    *this.sent = Instant::now();
                    this.policy.bucket.sending(*this.sent);
                    let future = this.svc.call(req);
                    this.state.set(State::Called { future });
                }
            }
        }
    }
}

impl<S: Service<Req>, Req> fmt::Debug for ResponseFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("method", &self.method)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}
