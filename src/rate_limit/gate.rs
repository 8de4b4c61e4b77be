//! [`Gate`]: a service's reservation of one admission from the shared limit.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Sleep;

use crate::bucket::Permit;
use crate::limit::{Limit, Reserved, Turn};
use crate::Denied;

/// What one service instance holds between `poll_ready` and `call`.
///
/// Cloning gives a fresh, empty gate on the same limit (a clone must not share a
/// reservation). Dropping a gate that holds an unused permit gives it back.
#[derive(Debug)]
pub(crate) struct Gate {
    limit: Limit,
    state: State,
    /// Kept across waits and `reset()`, rather than allocated per wait.
    sleep: Option<Pin<Box<Sleep>>>,
}

enum State {
    Idle,
    Waiting(Turn),
    Ready(Permit),
    /// The next call fails: a leaky bucket's line is full, or the limit's store refused to
    /// decide (its failure policy).
    Refused(Denied),
}

impl Gate {
    pub(crate) fn new(limit: Limit) -> Self {
        Gate {
            limit,
            state: State::Idle,
            sleep: None,
        }
    }

    pub(crate) fn limit(&self) -> &Limit {
        &self.limit
    }

    /// Ready once a token of the shared limit is reserved for the next call.
    #[inline]
    pub(crate) fn poll_acquire(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let State::Idle = self.state {
            if let Some(p) = self.limit.admit_now(1) {
                // `Idle` owns nothing: nothing to drop.
                std::mem::forget(std::mem::replace(&mut self.state, State::Ready(p)));
                return Poll::Ready(());
            }
        }
        self.poll_slow(cx)
    }

    fn poll_slow(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.state {
                State::Ready(_) | State::Refused(_) => return Poll::Ready(()),
                State::Idle => {
                    // One token always fits (every burst is at least 1): the call waits for
                    // it, unless a leaky bucket's line is full.
                    self.state = match self.limit.reserve(1) {
                        Reserved::Now(p) => State::Ready(p),
                        Reserved::Later(turn) => State::Waiting(turn),
                        Reserved::Full(full) => State::Refused(full.into()),
                    };
                }
                State::Waiting(turn) => {
                    let sleep = self.sleep.get_or_insert_with(|| {
                        Box::pin(tokio::time::sleep_until(tokio::time::Instant::now()))
                    });
                    // A limit kept in Redis answers once it admits, or when Redis fails and
                    // the failure policy refuses.
                    self.state = match std::task::ready!(turn.poll(sleep.as_mut(), cx)) {
                        Ok(permit) => State::Ready(permit),
                        Err(e) => State::Refused(e),
                    };
                }
            }
        }
    }

    /// Take the reserved admission for a call, or the refusal.
    ///
    /// A refusal is not an error of `poll_ready` (which, for tower, would mean the service is
    /// broken for good): the service stays ready, this call fails, the next asks again.
    ///
    /// # Panics
    /// When nothing is reserved: `poll_ready` was not called, or did not return ready.
    #[inline]
    pub(crate) fn take(&mut self) -> Result<Permit, Denied> {
        if let State::Ready(p) = self.state {
            // A permit owns nothing: overwriting it is all there is to taking it.
            std::mem::forget(std::mem::replace(&mut self.state, State::Idle));
            return Ok(p);
        }
        self.take_slow()
    }

    fn take_slow(&mut self) -> Result<Permit, Denied> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Ready(p) => Ok(p),
            State::Refused(e) => Err(e),
            other => {
                self.state = other;
                panic!("service not ready; poll_ready must be called first");
            }
        }
    }
}

impl Clone for Gate {
    fn clone(&self) -> Self {
        Gate::new(self.limit.clone())
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if let State::Ready(permit) = std::mem::replace(&mut self.state, State::Idle) {
            self.limit.give_back(permit);
        }
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Idle => f.write_str("Idle"),
            State::Waiting(_) => f.write_str("Waiting"),
            State::Ready(p) => f.debug_tuple("Ready").field(p).finish(),
            State::Refused(e) => f.debug_tuple("Refused").field(e).finish(),
        }
    }
}
