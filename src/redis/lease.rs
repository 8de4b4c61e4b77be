//! Leases: a process takes a batch of tokens of a [`RedisBucket`](super::RedisBucket) in one
//! round trip and admits locally from them (the semantics, bound and figures are in the
//! [Redis docs](https://github.com/tower-throttle/tower-throttle/blob/main/docs/redis.md#leases)).
//!
//! This file holds the local side of one handle: the tokens held and until when, the size
//! of the next lease (doubling while leases are used up within their period, else what the
//! last period used, at most `max`), and the tasks waiting for tokens. A task that finds
//! too few tokens waits in line; the first to find no refill in flight starts one. A refill
//! asks Redis for the request of every task in line and for the lease beyond them; its
//! reply serves them in order, then the tasks that came meanwhile from the lease's tokens,
//! and the lease keeps the rest. While tasks are left in line, it asks again. What a lease
//! holds when it is replaced or ends is handed to the caller to give back to Redis.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::{RedisError, RedisErrorKind};

/// The lease of one [`RedisBucket`](super::RedisBucket) handle (shared by its clones).
#[derive(Debug)]
pub(crate) struct Lease {
    max: u32,
    period: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Unused tokens of the current lease.
    tokens: u32,
    /// When the current lease ends (none yet: the origin, already over).
    expires: Instant,
    /// Tokens taken from the current lease.
    used: u32,
    /// The size of the next lease.
    size: u32,
    /// Counts leases: an expiry timer acts on its own lease only.
    generation: u64,
    /// Tokens charged in Redis that no lease holds (given to a task gone before it took
    /// them): given back with the lease's.
    stray: u32,
    /// A refill is in flight.
    refilling: bool,
    /// The tasks waiting for tokens, in order.
    waiting: VecDeque<Waiter>,
    /// How many of the first waiters the refill in flight asked for.
    asked_for: usize,
}

#[derive(Debug)]
struct Waiter {
    n: u32,
    wake: oneshot::Sender<Waited>,
}

/// What a task that needs tokens does.
#[derive(Debug)]
pub(crate) enum Turn<'a> {
    /// Taken from the lease.
    Taken,
    /// Waits for the refill in flight.
    Wait(Ticket<'a>),
    /// Waits for a refill that it starts: none was in flight.
    Refill(Ticket<'a>),
}

/// How a wait for a refill ended.
#[derive(Debug)]
pub(crate) enum Waited {
    Admitted,
    /// Redis had too few tokens; its reply said they fit in about this long.
    Refused(Duration),
    Failed(RedisError),
}

/// A task's place in line. Dropped after tokens were given to it, it leaves them to be
/// given back with the lease's.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    lease: &'a Lease,
    n: u32,
    wake: oneshot::Receiver<Waited>,
}

/// The refill in flight: one round trip at a time while tasks wait in line.
#[derive(Debug)]
pub(crate) struct Refill<'a> {
    lease: &'a Lease,
    /// The line was empty: the refill ended.
    done: bool,
}

/// What a refill asks Redis for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The tokens wanted: the requests in line and the lease's tokens beyond them.
    pub(crate) want: u32,
    /// The fewest worth granting: the smallest of those requests.
    pub(crate) need: u32,
    /// Unused tokens to give back.
    pub(crate) back: u32,
}

impl Lease {
    /// Leases of at most `max` tokens (≥ 1), each lasting `period`.
    pub(crate) fn new(max: u32, period: Duration) -> Self {
        Lease {
            max,
            period,
            state: Mutex::new(State {
                tokens: 0,
                expires: Instant::now(),
                used: 0,
                size: 1,
                generation: 0,
                stray: 0,
                refilling: false,
                waiting: VecDeque::new(),
                asked_for: 0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take `n` tokens from the lease, if it holds them and has not expired.
    pub(crate) fn take(&self, n: u32, now: Instant) -> bool {
        self.state().take(n, now)
    }

    /// Take `n` tokens from the lease, or wait in line for a refill.
    pub(crate) fn turn(&self, n: u32, now: Instant) -> Turn<'_> {
        let mut state = self.state();
        if state.take(n, now) {
            return Turn::Taken;
        }
        let (wake, waits) = oneshot::channel();
        state.waiting.push_back(Waiter { n, wake });
        let ticket = Ticket {
            lease: self,
            n,
            wake: waits,
        };
        if std::mem::replace(&mut state.refilling, true) {
            Turn::Wait(ticket)
        } else {
            Turn::Refill(ticket)
        }
    }

    /// The lease of `generation` ended: its unused tokens, now out of the lease (none if
    /// another lease replaced it), and the stray ones.
    pub(crate) fn expire(&self, generation: u64) -> u32 {
        let mut state = self.state();
        let stray = std::mem::take(&mut state.stray);
        if state.generation != generation {
            return stray;
        }
        std::mem::take(&mut state.tokens).saturating_add(stray)
    }

    /// Drop the lease: its unused tokens and the stray ones, now out of it.
    pub(crate) fn clear(&self) -> u32 {
        let mut state = self.state();
        std::mem::take(&mut state.tokens).saturating_add(std::mem::take(&mut state.stray))
    }

    /// Tokens held now (expired or not).
    pub(crate) fn tokens(&self) -> u32 {
        self.state().tokens
    }

    /// The refill to run when [`turn`](Self::turn) says so: while tasks wait in line.
    pub(crate) fn refill(&self) -> Refill<'_> {
        Refill {
            lease: self,
            done: false,
        }
    }
}

impl State {
    fn fail_asked_for(&mut self, e: &RedisError) {
        let asked_for = std::mem::take(&mut self.asked_for).min(self.waiting.len());
        for w in self.waiting.drain(..asked_for) {
            let _ = w.wake.send(Waited::Failed(e.clone()));
        }
    }

    fn take(&mut self, n: u32, now: Instant) -> bool {
        if self.tokens < n || now >= self.expires {
            return false;
        }
        self.tokens -= n;
        self.used += n;
        true
    }
}

impl Refill<'_> {
    /// What the refill asks Redis for next (none: nobody waits, the refill ends): the
    /// requests in line, in order, while the total stays within `most`, and the lease's
    /// size beyond the first (sized from demand); the tokens to give back (all those still
    /// held, now out of the lease, and the stray ones).
    pub(crate) fn ask(&mut self, most: u32, now: Instant) -> Option<Ask> {
        let lease = self.lease;
        let mut state = lease.state();
        while state.waiting.front().is_some_and(|w| w.wake.is_closed()) {
            state.waiting.pop_front();
        }
        let Some(first) = state.waiting.front().map(|w| w.n) else {
            state.refilling = false;
            self.done = true;
            return None;
        };
        state.size = if now < state.expires {
            // Used up within its period: demand outgrows it.
            state.size.saturating_mul(2)
        } else {
            // Expired: what one period used.
            state.used
        }
        .clamp(1, lease.max);
        let (mut requests, mut need, mut asked_for) = (0u32, first, 0);
        for w in &state.waiting {
            let total = requests.saturating_add(w.n);
            if asked_for > 0 && total > most {
                break;
            }
            if !w.wake.is_closed() {
                requests = total;
                need = need.min(w.n);
            }
            asked_for += 1;
        }
        state.asked_for = asked_for;
        let held = std::mem::take(&mut state.tokens).saturating_add(state.stray);
        let back = held.min(most);
        state.stray = held - back;
        let beyond = state.size.saturating_sub(first);
        Some(Ask {
            want: requests.saturating_add(beyond).min(most.max(first)),
            need,
            back,
        })
    }

    /// Redis granted `granted` tokens (0, or at least the `need` asked) to a refill sent at
    /// `sent` (its reply: they fit in `wait` when refused): the tasks it asked for, in
    /// order (refused when too few came). What is left is the lease, up to `max` while it
    /// lasts (the rest, asked for tasks gone since, is stray): it serves the tasks that came
    /// since, and keeps the rest. Returns the lease's generation and end when it holds
    /// tokens.
    pub(crate) fn granted(
        &self,
        granted: u32,
        sent: Instant,
        wait: Duration,
    ) -> Option<(u64, Instant)> {
        let lease = self.lease;
        let mut state = lease.state();
        let mut left = granted;
        let asked_for = std::mem::take(&mut state.asked_for).min(state.waiting.len());
        for w in state.waiting.drain(..asked_for) {
            if left < w.n {
                let _ = w.wake.send(Waited::Refused(wait));
            } else if w.wake.send(Waited::Admitted).is_ok() {
                left -= w.n;
            }
        }
        let end = sent + lease.period;
        let held = if Instant::now() < end {
            left.min(lease.max)
        } else {
            0
        };
        state.stray = state.stray.saturating_add(left - held);
        let mut served = granted - left;
        let mut left = held;
        for _ in 0..state.waiting.len() {
            let Some(w) = state.waiting.pop_front() else {
                break;
            };
            if left >= w.n {
                if w.wake.send(Waited::Admitted).is_ok() {
                    left -= w.n;
                    served += w.n;
                }
            } else if !w.wake.is_closed() {
                state.waiting.push_back(w);
            }
        }
        state.tokens += left;
        state.used = served;
        state.expires = end;
        state.generation += 1;
        (left > 0).then_some((state.generation, end))
    }

    /// The refill failed: so do the requests it asked for.
    pub(crate) fn failed(&self, e: &RedisError) {
        self.lease.state().fail_asked_for(e);
    }
}

impl Drop for Refill<'_> {
    /// Dropped before the line was empty (its task dropped with its runtime): the requests
    /// in line fail, rather than wait for good, and the next task starts a refill again.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.lease.state();
        state.asked_for = state.waiting.len();
        let e = RedisError::new(RedisErrorKind::Unavailable, "the refill stopped");
        state.fail_asked_for(&e);
        state.refilling = false;
    }
}

impl Ticket<'_> {
    /// Wait for a refill to serve this task.
    pub(crate) async fn wait(mut self) -> Waited {
        // Never an error: every task taken out of line is sent how its wait ended, and the
        // lease outlives this ticket.
        (&mut self.wake)
            .await
            .unwrap_or(Waited::Refused(Duration::ZERO))
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.wake.close();
        if let Ok(Waited::Admitted) = self.wake.try_recv() {
            let mut state = self.lease.state();
            state.stray = state.stray.saturating_add(self.n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Poll;
    use tokio_test::task::spawn;

    const MOST: u32 = 100;

    /// A task in line for `n` tokens (the first to find no refill in flight or not).
    fn in_line(lease: &Lease, n: u32) -> Ticket<'_> {
        match lease.turn(n, Instant::now()) {
            Turn::Wait(ticket) | Turn::Refill(ticket) => ticket,
            Turn::Taken => panic!("taken"),
        }
    }

    fn ask(want: u32, need: u32, back: u32) -> Option<Ask> {
        Some(Ask { want, need, back })
    }

    #[tokio::test(start_paused = true)]
    async fn leases_grow_with_demand_and_shrink_to_it() {
        let period = Duration::from_millis(100);
        let lease = Lease::new(16, period);
        let t0 = Instant::now();
        // A refill for one task in line for `n`, Redis granting at most `granted`: what it
        // asked, whether the task was served, and the lease's end.
        let mut refill = lease.refill();
        let round = |refill: &mut Refill<'_>, n: u32, most: u32, granted: u32| {
            let mut task = spawn(in_line(&lease, n).wait());
            let ask = refill.ask(most, Instant::now());
            let granted = granted.min(ask.map_or(0, |a| a.want));
            let lease_end = refill.granted(granted, t0, Duration::ZERO);
            let served = matches!(task.poll(), Poll::Ready(Waited::Admitted));
            (ask, served, lease_end)
        };
        assert!(!lease.take(1, t0), "no lease yet");
        // Nothing held, the first lease expired at once: the size of the request.
        assert_eq!(round(&mut refill, 1, MOST, 1), (ask(1, 1, 0), true, None));
        assert_eq!(
            refill.ask(MOST, t0),
            None,
            "nobody in line: the refill ends"
        );
        assert!(!lease.take(1, t0));
        // Used up within its period: doubles, up to the maximum.
        let mut sizes = Vec::new();
        for _ in 0..6 {
            let want = round(&mut refill, 1, MOST, 16).0.unwrap().want;
            sizes.push(want);
            while lease.take(1, t0) {}
        }
        assert_eq!(sizes, [2, 4, 8, 16, 16, 16]);
        // A request larger than the size gets at least itself, and at most the burst.
        assert_eq!(round(&mut refill, 20, MOST, 0).0.unwrap().want, 20);
        assert_eq!(round(&mut refill, 10, 12, 0).0.unwrap().want, 12);
        // Granted 16 to a task's 1, 6 used in the period, then it expires: 10 go back,
        // the next is 6.
        let (_, served, lease_end) = round(&mut refill, 1, MOST, 16);
        let (generation, end) = lease_end.unwrap();
        assert!(served);
        assert_eq!(end, t0 + period);
        for _ in 0..4 {
            assert!(lease.take(1, t0));
        }
        tokio::time::advance(period - Duration::from_nanos(1)).await;
        assert!(lease.take(1, Instant::now()), "still within its period");
        tokio::time::advance(Duration::from_nanos(1)).await;
        assert!(!lease.take(1, Instant::now()), "expired");
        assert_eq!(lease.tokens(), 10);
        let mut task = spawn(in_line(&lease, 1).wait());
        assert_eq!(refill.ask(MOST, Instant::now()), ask(6, 1, 10));
        assert_eq!(lease.tokens(), 0);
        // The expiry of a replaced lease gives nothing back; its own gives the rest.
        let (newer, _) = refill.granted(6, Instant::now(), Duration::ZERO).unwrap();
        assert!(matches!(task.poll(), Poll::Ready(Waited::Admitted)));
        assert_eq!(lease.expire(generation), 0);
        assert_eq!(lease.expire(newer), 5);
        assert_eq!(lease.clear(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refill_serves_those_in_line_then_those_that_came_and_asks_again() {
        let lease = Lease::new(4, Duration::from_millis(100));
        let t0 = Instant::now();
        let mut refill = lease.refill();
        let mut a = spawn(in_line(&lease, 1).wait());
        let mut b = spawn(in_line(&lease, 2).wait());
        let mut c = spawn(in_line(&lease, 1).wait());
        // The requests in line, and the lease's size (1 so far) beyond the first.
        assert_eq!(refill.ask(MOST, t0), ask(4, 1, 0));
        // Came while the refill is in flight.
        let mut d = spawn(in_line(&lease, 3).wait());
        let mut e = spawn(in_line(&lease, 1).wait());
        assert!(a.poll().is_pending() && d.poll().is_pending() && e.poll().is_pending());
        // One more than asked for: serves `e` (`d` is too big for it).
        assert_eq!(refill.granted(5, t0, Duration::ZERO), None);
        for task in [&mut a, &mut b, &mut c, &mut e] {
            assert!(matches!(task.poll(), Poll::Ready(Waited::Admitted)));
        }
        assert!(d.poll().is_pending());
        // Used up within its period: the lease doubles to 2, beyond `d`'s 3 none.
        assert_eq!(refill.ask(MOST, t0), ask(3, 3, 0));
        assert!(
            matches!(lease.turn(1, t0), Turn::Wait(_)),
            "one refill at a time"
        );
        // Redis had 3: `d`'s.
        refill.granted(3, t0, Duration::ZERO);
        assert!(matches!(d.poll(), Poll::Ready(Waited::Admitted)));
        assert_eq!(
            refill.ask(MOST, t0),
            None,
            "nobody in line: the refill ends"
        );
        assert!(matches!(lease.turn(1, t0), Turn::Refill(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn those_asked_for_share_a_refusal_or_a_failure() {
        let lease = Lease::new(8, Duration::from_millis(100));
        let t0 = Instant::now();
        let mut refill = lease.refill();
        let mut a = spawn(in_line(&lease, 2).wait());
        let mut b = spawn(in_line(&lease, 1).wait());
        let mut c = spawn(in_line(&lease, 3).wait());
        assert_eq!(refill.ask(MOST, t0), ask(6, 1, 0));
        let mut d = spawn(in_line(&lease, 1).wait());
        let wait = Duration::from_millis(7);
        // Redis had 3: `a`'s 2, then `b`'s 1; `c` is refused; `d` came later: asked for next.
        refill.granted(3, t0, wait);
        assert!(matches!(a.poll(), Poll::Ready(Waited::Admitted)));
        assert!(matches!(b.poll(), Poll::Ready(Waited::Admitted)));
        assert!(matches!(c.poll(), Poll::Ready(Waited::Refused(w)) if w == wait));
        assert!(d.poll().is_pending());
        assert!(refill.ask(MOST, t0).is_some());
        let timeout = RedisError::new(crate::redis::RedisErrorKind::Timeout, "timed out");
        refill.failed(&timeout);
        assert!(matches!(d.poll(), Poll::Ready(Waited::Failed(_))));
        assert_eq!(refill.ask(MOST, t0), None);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_of_a_task_gone_go_back_with_the_lease() {
        let lease = Lease::new(8, Duration::from_millis(100));
        let t0 = Instant::now();
        let mut refill = lease.refill();
        let (a, b) = (in_line(&lease, 1), in_line(&lease, 2));
        assert_eq!(refill.ask(MOST, t0), ask(3, 1, 0));
        // `b` is served, then goes before it looks: its tokens are stray.
        refill.granted(3, t0, Duration::ZERO);
        drop(b);
        assert_eq!(lease.tokens(), 0);
        // Gone before the refill came: the tokens asked for it are the lease's. (The
        // lease doubled to 2, none beyond `gone`'s 3; the stray 2 go back.)
        let gone = in_line(&lease, 3);
        let c = in_line(&lease, 1);
        assert_eq!(refill.ask(MOST, t0), ask(3 + 1, 1, 2));
        drop(gone);
        refill.granted(4, t0, Duration::ZERO);
        assert_eq!(lease.tokens(), 3);
        // `a` and `c` were served and went without looking: stray, given back with the
        // lease's.
        drop((a, c));
        assert_eq!(lease.clear(), 3 + 2);
        // Gone before a refill asked: not asked for.
        let gone = in_line(&lease, 5);
        drop(gone);
        assert_eq!(refill.ask(MOST, t0), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refill_dropped_fails_the_line_and_the_next_task_starts_one() {
        let lease = Lease::new(8, Duration::from_millis(100));
        let mut a = spawn(in_line(&lease, 1).wait());
        let mut b = spawn(in_line(&lease, 1).wait());
        let mut refill = lease.refill();
        assert!(refill.ask(MOST, Instant::now()).is_some());
        drop(refill);
        for task in [&mut a, &mut b] {
            assert!(matches!(task.poll(), Poll::Ready(Waited::Failed(_))));
        }
        assert!(matches!(lease.turn(1, Instant::now()), Turn::Refill(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_lease_never_holds_more_than_its_maximum() {
        let lease = Lease::new(2, Duration::from_millis(100));
        let t0 = Instant::now();
        let mut refill = lease.refill();
        let mut a = spawn(in_line(&lease, 1).wait());
        let gone = in_line(&lease, 5);
        assert_eq!(refill.ask(MOST, t0), ask(6, 1, 0));
        drop(gone);
        let mut came: Vec<_> = (0..3).map(|_| spawn(in_line(&lease, 1).wait())).collect();
        // `a`'s 1, then the 5 asked for `gone`: a lease of 2 (for two of those that came),
        // and 3 stray.
        refill.granted(6, t0, Duration::ZERO);
        assert!(matches!(a.poll(), Poll::Ready(Waited::Admitted)));
        assert!(matches!(came[0].poll(), Poll::Ready(Waited::Admitted)));
        assert!(matches!(came[1].poll(), Poll::Ready(Waited::Admitted)));
        assert!(came[2].poll().is_pending());
        assert_eq!(lease.tokens(), 0);
        assert_eq!(refill.ask(MOST, t0).map(|a| a.back), Some(3));
    }
}
