//! The retry decisions: what a response or an error means, and how long to wait.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};

use super::backoff::{uniform, Backoff};
use super::classify::{Classify, Kind};
use super::replay::is_idempotent;
use crate::budget::RetryBudget;
use crate::limit::Limit;
use crate::Sent;

/// Whether a failed request may have reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// It never left: the connection could not be made. Always safe to retry.
    NotSent,
    /// It may have reached the server: retried only when the method is idempotent (or when
    /// non-idempotent retries are allowed).
    MaybeSent,
}

/// Classifies transport errors; the default looks for a refused or unreachable connection in
/// the error's source chain.
pub(crate) type ClassifyError = Arc<dyn Fn(&(dyn Error + 'static)) -> Failure + Send + Sync>;

impl Failure {
    /// The default classification: [`Failure::NotSent`] when the error's source chain holds an
    /// I/O error of a connection that could not be made (refused, address or network
    /// unreachable), else [`Failure::MaybeSent`]. Use it as the fallback of a custom
    /// [`classify_error`](super::RetryAfterLayer::classify_error).
    pub fn classify(err: &(dyn Error + 'static)) -> Failure {
        default_classify(err)
    }
}

fn default_classify(err: &(dyn Error + 'static)) -> Failure {
    use std::io::ErrorKind::*;
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable
            ) {
                return Failure::NotSent;
            }
        }
        next = e.source();
    }
    Failure::MaybeSent
}

/// The jitter put on top of a server-given cooldown: never subtracted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CooldownJitter {
    /// Up to 10 % of the cooldown, at most 1 s.
    Proportional,
    /// Up to this much.
    UpTo(Duration),
}

impl CooldownJitter {
    fn sample(self, cooldown: Duration) -> Duration {
        match self {
            CooldownJitter::Proportional => uniform((cooldown / 10).min(Duration::from_secs(1))),
            CooldownJitter::UpTo(max) => uniform(max),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Policy {
    pub(crate) limit: Limit,
    pub(crate) push_back: Vec<StatusCode>,
    /// Push-back statuses declared safe to resend for any method.
    pub(crate) unprocessed: Vec<StatusCode>,
    pub(crate) max_retries: u32,
    pub(crate) backoff: Backoff,
    pub(crate) default_cooldown: Duration,
    pub(crate) max_retry_after: Duration,
    pub(crate) cooldown_jitter: CooldownJitter,
    pub(crate) deadline: Option<Duration>,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) retry_non_idempotent: bool,
    pub(crate) read_quota_headers: bool,
    pub(crate) classify: ClassifyError,
    /// The protocol over HTTP whose words for "slow down" come first (gRPC's).
    pub(crate) protocol: Option<Arc<dyn Classify>>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("push_back", &self.push_back)
            .field("unprocessed", &self.unprocessed)
            .field("max_retries", &self.max_retries)
            .field("backoff", &self.backoff)
            .field("default_cooldown", &self.default_cooldown)
            .field("max_retry_after", &self.max_retry_after)
            .field("deadline", &self.deadline)
            .field("budget", &self.budget)
            .field("retry_non_idempotent", &self.retry_non_idempotent)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Hand the result to the caller.
    Return,
    /// Send again after this delay.
    Retry(Duration),
}

/// Where a retry stands: what the policy needs from the future.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt<'a> {
    pub(crate) method: &'a Method,
    /// Retries done so far.
    pub(crate) retries: u32,
    /// Time since the first attempt.
    pub(crate) elapsed: Duration,
    /// This attempt, as sent: its answer goes to the bucket's rate control.
    pub(crate) sent: &'a Sent,
    pub(crate) previous_delay: Duration,
    /// Whether a copy of the request exists to send again.
    pub(crate) replayable: bool,
}

/// A response's verdict, with the cooldown the server asked for (if it asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) action: Action,
    pub(crate) cooldown: Option<Duration>,
}

impl Policy {
    /// Whether a request may be sent again: a copy exists, retries are left, and it did not
    /// reach the server or may be sent twice: `any_method` (the server did not act on it), an
    /// idempotent method, or the user allows it anyway.
    fn may_retry(&self, any_method: bool, a: &Attempt<'_>) -> bool {
        a.replayable
            && a.retries < self.max_retries
            && (any_method || is_idempotent(a.method) || self.retry_non_idempotent)
    }

    fn within_deadline(&self, a: &Attempt<'_>, delay: Duration) -> bool {
        self.deadline
            .is_none_or(|d| a.elapsed.saturating_add(delay) <= d)
    }

    fn retry_after(&self, a: &Attempt<'_>, delay: Duration) -> Action {
        if self.within_deadline(a, delay) {
            Action::Retry(delay)
        } else {
            Action::Return
        }
    }

    fn backoff(&self, a: &Attempt<'_>, floor: Option<Duration>) -> Action {
        if !self.budget.as_ref().is_none_or(RetryBudget::withdraw) {
            trace_event!(warn, "retry budget exhausted; returning the failure");
            return Action::Return;
        }
        let mut delay = self.backoff.delay(a.retries, a.previous_delay);
        if let Some(floor) = floor {
            delay = delay.max(floor.saturating_add(self.cooldown_jitter.sample(floor)));
        }
        self.retry_after(a, delay)
    }

    /// Decide on a response, pausing the shared bucket when the server pushes back.
    pub(crate) fn on_response(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        a: &Attempt<'_>,
    ) -> Verdict {
        let reading = self.read(status, headers);
        for hint in &reading.provider {
            if let Some(limit) = hint.limit {
                self.limit.learn(&hint.resource, limit, hint.remaining);
            }
        }
        // A resource the server names, counted by some of the limit's quotas only: those
        // hold alone, and the rate control, which steers requests, is not told.
        let mut alone = false;
        if let Some(reset) = reading.spent_for {
            // Slow down before the 429: hold everyone until the quota resets.
            if !reset.is_zero() && reset <= self.max_retry_after {
                trace_event!(info, ?reset, "server quota exhausted; pausing the bucket");
                alone = reading
                    .spent
                    .as_ref()
                    .is_some_and(|r| self.limit.pause_resource(r, reset));
                if !alone {
                    self.limit.pause(reset);
                }
            }
        }
        let (action, cooldown) = match reading.kind {
            Kind::PushBack {
                cooldown,
                unprocessed,
                retry,
            } => {
                let action = if cooldown > self.max_retry_after {
                    trace_event!(
                        warn,
                        %status,
                        ?cooldown,
                        max = ?self.max_retry_after,
                        "server cooldown over the cap; returning the response"
                    );
                    Action::Return
                } else {
                    trace_event!(
                        warn,
                        %status,
                        ?cooldown,
                        "server pushed back; pausing the bucket"
                    );
                    if !alone {
                        a.sent.report_pushed_back(cooldown, reading.stated);
                    }
                    if retry && self.may_retry(unprocessed, a) {
                        let jitter = self.cooldown_jitter.sample(cooldown);
                        self.retry_after(a, cooldown.saturating_add(jitter))
                    } else {
                        Action::Return
                    }
                };
                (action, Some(cooldown))
            }
            Kind::Success => {
                a.sent.report_through(reading.stated);
                (Action::Return, None)
            }
            Kind::Failed { floor, any_method } => {
                let floor = floor.filter(|d| *d <= self.max_retry_after);
                let action = if self.may_retry(any_method, a) {
                    self.backoff(a, floor)
                } else {
                    Action::Return
                };
                trace_event!(debug, %status, ?action, "server error");
                (action, None)
            }
            Kind::Final => (Action::Return, None),
        };
        Verdict { action, cooldown }
    }

    /// Decide on a transport error.
    pub(crate) fn on_error(&self, err: &(dyn Error + 'static), a: &Attempt<'_>) -> Action {
        let failure = (self.classify)(err);
        let action = if self.may_retry(failure == Failure::NotSent, a) {
            self.backoff(a, None)
        } else {
            Action::Return
        };
        trace_event!(debug, error = %err, ?failure, ?action, "request failed");
        action
    }
}
