//! [`Turn`]: an admission being waited for, in this process's queue or in Redis.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

use crate::bucket::{Permit, Waiter};
use crate::slot::Slot;
use crate::{Bucket, Denied, Throttled};

/// A future of an admission a shared store (Redis) is deciding.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
type Deciding = Pin<Box<dyn Future<Output = Result<(Permit, Slot), Denied>> + Send>>;

/// An admission being waited for. Dropping it gives the place back.
pub(crate) struct Turn {
    kind: Kind,
}

enum Kind {
    /// A place in this process's queue; with a deadline, refused when its turn has not come
    /// by then.
    Queued {
        waiter: Option<Waiter>,
        deadline: Option<(Pin<Box<Sleep>>, Bucket)>,
    },
    /// An admission a shared store is deciding on.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Shared { deciding: Deciding },
}

impl Turn {
    pub(crate) fn queued(waiter: Waiter) -> Self {
        Turn {
            kind: Kind::Queued {
                waiter: Some(waiter),
                deadline: None,
            },
        }
    }

    /// A place in `bucket`'s queue, given up `max_wait` from now.
    pub(crate) fn bounded(bucket: Bucket, waiter: Waiter, max_wait: Duration) -> Self {
        let deadline = tokio::time::Instant::now() + max_wait;
        Turn {
            kind: Kind::Queued {
                waiter: Some(waiter),
                deadline: Some((Box::pin(tokio::time::sleep_until(deadline)), bucket)),
            },
        }
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn shared<F>(deciding: F) -> Self
    where
        F: Future<Output = Result<(Permit, Slot), Denied>> + Send + 'static,
    {
        Turn {
            kind: Kind::Shared {
                deciding: Box::pin(deciding),
            },
        }
    }

    /// The admission, once it comes; `sleep` times a queued turn.
    pub(crate) fn poll(
        &mut self,
        sleep: Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Permit, Denied>> {
        self.poll_held(sleep, cx).map_ok(|(permit, _)| permit)
    }

    /// [`poll`](Self::poll), with what a shared store's admission holds of its in-flight
    /// quotas (an in-process one's: [`Limit::slot`](super::Limit::slot)).
    pub(crate) fn poll_held(
        &mut self,
        sleep: Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(Permit, Slot), Denied>> {
        match &mut self.kind {
            Kind::Queued { waiter, deadline } => {
                let Some(w) = waiter.as_mut() else {
                    return Poll::Pending;
                };
                if let Poll::Ready(turn) = w.poll(sleep, cx) {
                    waiter.take();
                    let held = turn.map(|permit| (permit, Slot::default()));
                    return Poll::Ready(held.map_err(Denied::from));
                }
                let Some((timer, bucket)) = deadline.as_mut() else {
                    return Poll::Pending;
                };
                std::task::ready!(timer.as_mut().poll(cx));
                waiter.take(); // leave the queue, giving the place back
                let wait = bucket.snapshot().next_token_in;
                Poll::Ready(Err(Throttled::after(wait).into()))
            }
            Kind::Shared { deciding } => deciding.as_mut().poll(cx),
        }
    }
}
