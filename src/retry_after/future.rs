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
use crate::{BoxError, Sent};

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
        sent: Sent,
        previous_delay: Duration,
        // The request's own deadline: no attempt goes out at or after it.
        deadline: Option<Instant>,
        // With a deadline, the result a retry is to replace, returned instead if the
        // deadline passes before the retry can go.
        last: Option<(Result<S::Response, BoxError>, Option<Duration>)>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Called { #[pin] future: F },
        Waiting { #[pin] sleep: Sleep },
        Readying { #[pin] expiry: Option<Sleep> },
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    pub(crate) fn new(
        future: S::Future,
        svc: S,
        copy: Option<Req>,
        method: Method,
        policy: Arc<Policy>,
        sent: Sent,
        deadline: Option<Instant>,
    ) -> Self {
        ResponseFuture {
            state: State::Called { future },
            svc,
            copy,
            method,
            policy,
            retries: 0,
            started: sent.at(),
            sent,
            previous_delay: Duration::ZERO,
            deadline,
            last: None,
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
                        sent: &*this.sent,
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
                    let delay = match action {
                        Action::Retry(delay) if !expires_within(*this.deadline, delay) => delay,
                        Action::Retry(_) => {
                            trace_event!(debug, "the deadline comes first; returning the result");
                            return Poll::Ready(finish(result, *this.retries + 1, cooldown));
                        }
                        Action::Return => {
                            return Poll::Ready(finish(result, *this.retries + 1, cooldown));
                        }
                    };
                    trace_event!(info, ?delay, retry = *this.retries + 1, "retrying");
                    *this.retries += 1;
                    *this.previous_delay = delay;
                    if this.deadline.is_some() {
                        *this.last = Some((result, cooldown));
                    } else {
                        drop(result);
                    }
                    this.state.set(State::Waiting {
                        sleep: tokio::time::sleep(delay),
                    });
                }
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Readying {
                        expiry: this.deadline.map(tokio::time::sleep_until),
                    });
                }
                StateProj::Readying { expiry } => {
                    // Through the layers below: a rate limit makes every attempt wait its turn,
                    // until the deadline at most.
                    let readiness = this.svc.poll_ready(cx).map_err(Into::into)?;
                    if let Some(expiry) = expiry.as_pin_mut() {
                        let _ = expiry.poll(cx); // wakes this task at the deadline
                    }
                    if expires_within(*this.deadline, Duration::ZERO) {
                        if let Some((result, cooldown)) = this.last.take() {
                            trace_event!(debug, "the deadline passed; returning the result");
                            return Poll::Ready(finish(result, *this.retries, cooldown));
                        }
                    }
                    ready!(readiness);
                    *this.last = None;
                    let req = match this.copy.as_ref().and_then(Replay::replay) {
                        Some(req) => req,
                        None => this.copy.take().expect("retry without a request copy"),
                    };
                    *this.sent = this.policy.limit.feedback().sending();
                    let future = this.svc.call(req);
                    this.state.set(State::Called { future });
                }
            }
        }
    }
}

/// Whether `deadline` comes within `wait` from now: an attempt after `wait` would go out at
/// or after it.
fn expires_within(deadline: Option<Instant>, wait: Duration) -> bool {
    deadline.is_some_and(|d| d.saturating_duration_since(Instant::now()) <= wait)
}

/// The result for the caller, with the [`RetryInfo`] of the call.
fn finish<R: HttpResponse>(
    result: Result<R, BoxError>,
    attempts: u32,
    cooldown: Option<Duration>,
) -> Result<R, BoxError> {
    result.map(|mut resp| {
        resp.extensions_mut()
            .insert(RetryInfo::new(attempts, cooldown));
        resp
    })
}

impl<S: Service<Req>, Req> fmt::Debug for ResponseFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("method", &self.method)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}
