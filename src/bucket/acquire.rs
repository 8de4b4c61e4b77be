//! The [`Acquire`] future of [`Bucket::acquire`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Sleep;

use super::{Bucket, Denied, Permit, Reservation, Waiter};
use crate::Priority;

/// Waits for tokens of a [`Bucket`]: the future of [`Bucket::acquire`].
///
/// Dropping it before it completes gives its place in the queue back.
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a> {
    bucket: &'a Bucket,
    n: u32,
    /// Admit on the bucket's fast path when it can.
    pub(super) fast: bool,
    /// The amount per quota of a plan whose quotas are charged apart.
    pub(super) each: Option<Arc<[u64]>>,
    priority: Priority,
    state: State,
}

enum State {
    Start,
    Waiting {
        waiter: Waiter,
        sleep: Pin<Box<Sleep>>,
    },
    Done,
}

impl<'a> Acquire<'a> {
    pub(super) fn new(bucket: &'a Bucket, n: u32) -> Self {
        Acquire {
            bucket,
            n,
            fast: true,
            each: None,
            priority: Priority::Normal,
            state: State::Start,
        }
    }

    /// Wait in class `priority` ([`Priority::Normal`] unless told otherwise): see
    /// [`Priority`].
    ///
    /// ```
    /// use tower_throttle::{Bucket, Priority, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower_throttle::Denied> {
    /// let bucket = Bucket::new(Quota::per_second(10));
    /// bucket.acquire(1).priority(Priority::Background).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }
}

impl Acquire<'_> {
    /// Poll for the admission itself.
    pub(super) fn poll_permit(&mut self, cx: &mut Context<'_>) -> Poll<Result<Permit, Denied>> {
        loop {
            match &mut self.state {
                State::Start => {
                    if self.n == 0 && self.each.is_none() {
                        self.state = State::Done;
                        return Poll::Ready(Ok(Permit::tokens_only(0)));
                    }
                    let (shared, each) = (&self.bucket.shared, self.each.clone());
                    let reserved = shared
                        .check_cost(self.n, each.as_deref())
                        .map_err(Denied::from)
                        .and_then(|()| {
                            Ok(shared.reserve(self.n, each, self.priority, true, self.fast)?)
                        });
                    match reserved {
                        Err(e) => {
                            self.state = State::Done;
                            return Poll::Ready(Err(e));
                        }
                        Ok(Reservation::Now(permit)) => {
                            self.state = State::Done;
                            return Poll::Ready(Ok(permit));
                        }
                        Ok(Reservation::Later(waiter)) => {
                            self.state = State::Waiting {
                                waiter,
                                sleep: Box::pin(tokio::time::sleep_until(
                                    tokio::time::Instant::now(),
                                )),
                            };
                        }
                    }
                }
                State::Waiting { waiter, sleep } => {
                    let result = std::task::ready!(waiter.poll(sleep.as_mut(), cx));
                    self.state = State::Done;
                    return Poll::Ready(result.map_err(Denied::from));
                }
                State::Done => panic!("`Acquire` polled after completion"),
            }
        }
    }
}

impl Future for Acquire<'_> {
    type Output = Result<(), Denied>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.poll_permit(cx).map_ok(drop)
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("n", &self.n)
            .field("priority", &self.priority)
            .field("waiting", &matches!(self.state, State::Waiting { .. }))
            .finish()
    }
}
