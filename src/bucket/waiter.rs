//! [`Waiter`]: a request in the bucket's line, sleeping on one timer until its turn.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::shared::{Permit, Shared};
use super::ExceedsBurst;

/// A request in the line. Dropping it before its turn gives its place up.
#[derive(Debug)]
pub(crate) struct Waiter {
    shared: Arc<Shared>,
    key: Option<usize>,
    /// The instant the caller's timer is armed for.
    armed: Option<u64>,
    /// When it started waiting.
    since: u64,
}

/// A waiter's turn: taken (admitted, or failed), or the instant to look again and the clock
/// when it looked.
type Turn = Result<Result<Permit, ExceedsBurst>, (u64, u64)>;

impl Waiter {
    /// The request in slot `key` of the line, waiting since `now`.
    pub(super) fn new(shared: Arc<Shared>, key: usize, now: u64) -> Self {
        Waiter {
            shared,
            key: Some(key),
            armed: None,
            since: now,
        }
    }

    /// Wait for the turn, sleeping on `sleep` (re-armed as needed).
    pub(crate) fn poll(
        &mut self,
        mut sleep: Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Permit, ExceedsBurst>> {
        let key = self.key.expect("waiter polled after completion");
        loop {
            let (deadline, now) = match self.turn(key, cx) {
                Ok(taken) => return Poll::Ready(taken),
                Err(wait) => wait,
            };
            if deadline <= now {
                // Due, but someone ahead has not gone yet: the hand-over wakes us.
                return Poll::Pending;
            }
            ready!(self.sleep(sleep.as_mut(), deadline, now, cx));
        }
    }

    /// Take the turn if it has come; else leave the waker and say when to look again.
    fn turn(&mut self, key: usize, cx: &mut Context<'_>) -> Turn {
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock();
        let now = shared.clock.now_ns();
        let first = st.queue.head() == Some(key);
        let e = st.queue.get_mut(key);
        let (tokens, failed, since, each) = (e.tokens, e.failed, e.first_since, e.each.clone());
        let priority = e.priority;
        let taken = if failed {
            Some(Err(ExceedsBurst {
                requested: tokens,
                burst: shared.capacity.load(Ordering::Acquire),
            }))
        } else if first {
            // A late timer is credited back to its turn, never before the instant the one
            // ahead was counted at (a hand-over passes the credit on): the engine counts it at
            // the earliest instant from there at which it fits. (Its timer may have been
            // armed later than that, for the guard.)
            let from = now.saturating_sub(shared.slack(&st)).max(since);
            match shared.commit_first(&mut st, tokens, each.as_deref(), priority, from, now) {
                Ok(permit) => Some(Ok(permit)),
                Err(at) => {
                    st.queue.get_mut(key).armed = at;
                    None
                }
            }
        } else {
            None
        };
        let Some(taken) = taken else {
            // Not yet: its timer or the hand-over wakes it.
            let e = st.queue.get_mut(key);
            if !e.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                e.waker = Some(cx.waker().clone());
            }
            return Err((e.armed, now));
        };
        let counted_at = taken.as_ref().ok().map(|p| p.at);
        let (_, next) = shared.leave(&mut st, key, now, counted_at);
        self.key = None;
        drop(st);
        next.into_iter().for_each(Waker::wake);
        if taken.is_ok() {
            shared.observe_admitted(tokens, now - self.since);
        }
        Ok(taken)
    }

    /// Sleep on `sleep` until `deadline` (armed once per deadline): ready once it fired.
    fn sleep(
        &mut self,
        mut sleep: Pin<&mut Sleep>,
        deadline: u64,
        now: u64,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        let clock = &self.shared.clock;
        if self.armed != Some(deadline) {
            self.armed = Some(deadline);
            sleep.as_mut().reset(clock.instant_at(deadline, now));
        }
        ready!(sleep.as_mut().poll(cx));
        if deadline > clock.now_ns() {
            // The timer fired before the clock reached the deadline (a coarser timer):
            // re-arm a tick later rather than spin.
            let later = clock.instant_at(deadline, now) + Duration::from_millis(1);
            sleep.as_mut().reset(later);
        }
        Poll::Ready(())
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        let mut st = self.shared.lock();
        let now = self.shared.clock.now_ns();
        let (_, next) = self.shared.leave(&mut st, key, now, None);
        drop(st);
        next.into_iter().for_each(Waker::wake);
    }
}
