//! The [`Acquire`] future of [`Bucket::acquire`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Sleep;

use super::{Bucket, Denied, Reservation, Waiter};

/// Waits for tokens of a [`Bucket`]: the future of [`Bucket::acquire`].
///
/// Dropping it before it completes gives its place in the queue back.
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a> {
    bucket: &'a Bucket,
    n: u32,
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
            state: State::Start,
        }
    }
}

impl Future for Acquire<'_> {
    type Output = Result<(), Denied>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Start => {
                    if this.n == 0 {
                        this.state = State::Done;
                        return Poll::Ready(Ok(()));
                    }
                    let reserved = this
                        .bucket
                        .check(this.n)
                        .map_err(Denied::from)
                        .and_then(|()| Ok(this.bucket.reserve(this.n, true)?));
                    match reserved {
                        Err(e) => {
                            this.state = State::Done;
                            return Poll::Ready(Err(e));
                        }
                        Ok(Reservation::Now(_)) => {
                            this.state = State::Done;
                            return Poll::Ready(Ok(()));
                        }
                        Ok(Reservation::Later(waiter)) => {
                            this.state = State::Waiting {
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
                    this.state = State::Done;
                    return Poll::Ready(result.map(drop).map_err(Denied::from));
                }
                State::Done => panic!("`Acquire` polled after completion"),
            }
        }
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("n", &self.n)
            .field("waiting", &matches!(self.state, State::Waiting { .. }))
            .finish()
    }
}
