//! [`Gate`]: a service's reservation of one admission from the shared bucket.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Sleep;

use crate::bucket::{Bucket, Permit, RemoteAcquire, Reservation, Waiter};

/// What one service instance holds between `poll_ready` and `call`.
///
/// Cloning gives a fresh, empty gate on the same bucket (a clone must not share a
/// reservation). Dropping a gate that holds an unused permit gives it back.
#[derive(Debug)]
pub(crate) struct Gate {
    bucket: Bucket,
    state: State,
    /// Kept across waits and `reset()`, rather than allocated per wait.
    sleep: Option<Pin<Box<Sleep>>>,
}

enum State {
    Idle,
    Waiting(Waiter),
    /// Waiting on a shared, remote limit (Redis).
    Remote(RemoteAcquire),
    Ready(Permit),
}

impl Gate {
    pub(crate) fn new(bucket: Bucket) -> Self {
        Gate {
            bucket,
            state: State::Idle,
            sleep: None,
        }
    }

    pub(crate) fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// Ready once a token of the shared bucket is reserved for the next call.
    #[inline]
    pub(crate) fn poll_acquire(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let State::Idle = self.state {
            if let Some(p) = self.bucket.admit_now(1) {
                self.state = State::Ready(p);
                return Poll::Ready(());
            }
        }
        self.poll_slow(cx)
    }

    fn poll_slow(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.state {
                State::Ready(_) => return Poll::Ready(()),
                State::Idle if self.bucket.remote().is_some() => {
                    let remote = self.bucket.remote().map(|r| r.acquire(1));
                    self.state = remote.map_or(State::Idle, State::Remote);
                }
                State::Remote(fut) => {
                    // One token always fits; a remote limit answers only once it admits.
                    let _ = std::task::ready!(fut.as_mut().poll(cx));
                    self.state = State::Ready(Permit::remote());
                }
                State::Idle => {
                    // One token always fits (every burst is at least 1), and the waiting
                    // layer is never refused: it waits.
                    self.state = match self.bucket.reserve(1, false) {
                        Ok(Reservation::Now(p)) => State::Ready(p),
                        Ok(Reservation::Later(w)) => State::Waiting(w),
                        Err(_) => unreachable!("an unbounded one-token reservation"),
                    };
                }
                State::Waiting(waiter) => {
                    let sleep = self.sleep.get_or_insert_with(|| {
                        Box::pin(tokio::time::sleep_until(tokio::time::Instant::now()))
                    });
                    self.state = match std::task::ready!(waiter.poll(sleep.as_mut(), cx)) {
                        Ok(permit) => State::Ready(permit),
                        Err(_) => State::Idle,
                    };
                }
            }
        }
    }

    /// Take the reserved admission for a call.
    ///
    /// # Panics
    /// When no admission is reserved: `poll_ready` was not called, or did not return ready.
    #[inline]
    pub(crate) fn take(&mut self) -> Permit {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Ready(p) => p,
            other => {
                self.state = other;
                panic!("service not ready; poll_ready must be called first");
            }
        }
    }
}

impl Clone for Gate {
    fn clone(&self) -> Self {
        Gate::new(self.bucket.clone())
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if let State::Ready(permit) = std::mem::replace(&mut self.state, State::Idle) {
            self.bucket.give_back(permit);
        }
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Idle => f.write_str("Idle"),
            State::Waiting(w) => f.debug_tuple("Waiting").field(w).finish(),
            State::Remote(_) => f.write_str("Remote"),
            State::Ready(p) => f.debug_tuple("Ready").field(p).finish(),
        }
    }
}
