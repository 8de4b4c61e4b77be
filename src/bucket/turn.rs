//! Whose turn it is: when a request's tokens fit, counting them when it goes, and handing
//! the turn to the next in line.

use std::sync::atomic::Ordering;
use std::task::Waker;

use super::queue::Entry;
use super::shared::{Kind, Permit, Shared, State};
use crate::engine::{Engine as _, Price};

impl Shared {
    /// The earliest instant `≥ from` at which the engine takes `tokens` (or `each`, an
    /// amount per quota of a plan), after `ahead` queued tokens (GCRA; the windows only know
    /// the first in line, `ahead = 0`).
    pub(super) fn predict(
        &self,
        st: &mut State,
        tokens: u32,
        each: Option<&[u64]>,
        ahead: u64,
        from: u64,
    ) -> u64 {
        if self.check_price(st, tokens, each).is_err() {
            // Never (the quota shrank below the request since it was checked).
            return u64::MAX;
        }
        let from = from.max(self.paused_until.load(Ordering::Acquire));
        let slack = self.slack(st);
        let window = match &mut st.engine {
            Kind::Gcra(g) => {
                let mut tat = self.cell.tat();
                if ahead > 0 {
                    // Those ahead go on schedule.
                    g.commit(&mut tat, ahead, from);
                }
                return g.earliest(&tat, u64::from(tokens), from);
            }
            Kind::Window(w) => w,
        };
        let from = from.max(st.tail);
        // Keep what a late waiter, credited back by the slack, still has to count.
        window.forget(from.saturating_sub(slack));
        window.earliest(price(tokens, each), from)
    }

    /// Admit `tokens` at `now`, counted at the earliest instant `≥ from` they fit (`from ≤
    /// now`), or `Err(instant they fit)`. Under the lock.
    pub(super) fn commit(
        &self,
        st: &mut State,
        tokens: u32,
        each: Option<&[u64]>,
        from: u64,
        now: u64,
    ) -> Result<Permit, u64> {
        if self.check_price(st, tokens, each).is_err() {
            return Err(u64::MAX);
        }
        let from = from.max(self.paused_until.load(Ordering::Acquire));
        if let Kind::Gcra(_) = st.engine {
            let (at, tat) = self.cell.admit_from(u64::from(tokens), from, now)?;
            let refunds = st.refunded;
            return Ok(Permit::new(tokens, at, tat, refunds));
        }
        let at = self.predict(st, tokens, each, 0, from);
        if at > now {
            return Err(at);
        }
        if self.credits(st) {
            self.log_guard(st, tokens, at, now)?;
        }
        if let Kind::Window(w) = &mut st.engine {
            w.commit(price(tokens, each), at);
        }
        st.tail = st.tail.max(at);
        Ok(Permit::new(tokens, at, 0, 0))
    }

    /// The first in line may have to learn its turn: its timer is armed too late (someone
    /// ahead left, or gave a permit back), or has fired already (it waits for this hand-over),
    /// or its request failed. Its waker, to call once the lock is released.
    pub(super) fn hand_over(&self, st: &mut State, now: u64) -> Option<Waker> {
        let key = st.queue.head()?;
        let e = st.queue.get_mut(key);
        if e.failed || e.armed <= now {
            return e.waker.take();
        }
        let (tokens, armed, each) = (e.tokens, e.armed, e.each.clone());
        let due = self.predict(st, tokens, each.as_deref(), 0, now);
        if due < armed {
            return st.queue.get_mut(key).waker.take();
        }
        None
    }

    /// Leave the line; the waker of the next in line if it must learn its turn. `counted_at`:
    /// the instant the leaver was admitted at, from which the next may be credited.
    pub(super) fn leave(
        &self,
        st: &mut State,
        key: usize,
        now: u64,
        counted_at: Option<u64>,
    ) -> (Entry, Option<Waker>) {
        let was_first = st.queue.head() == Some(key);
        let e = st.queue.remove(key, counted_at.is_some());
        self.waiting.store(st.queue.len(), Ordering::Release);
        if let (true, Kind::Gcra(_)) = (st.queue.is_empty(), &st.engine) {
            // The fast path takes over: it must see what the guard saw.
            let floor = self.guard_takeover(st.guard);
            self.cell.update(|tat| *tat = (*tat).max(floor));
        }
        let next = if was_first {
            if let Some(k) = st.queue.head() {
                st.queue.get_mut(k).first_since = counted_at.unwrap_or(now);
            }
            self.hand_over(st, now)
        } else {
            None
        };
        (e, next)
    }
}

/// The price of `tokens`, or of `each` where a plan's quotas are charged apart.
pub(super) fn price(tokens: u32, each: Option<&[u64]>) -> Price<'_> {
    match each {
        Some(a) => Price::Each(a),
        None => Price::One(u64::from(tokens)),
    }
}
