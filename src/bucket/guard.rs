//! The guard against late timers, and the spacing a rate control asks for.
//!
//! A waiter woken late is counted back to its turn (up to [`slack`](Shared::slack)), so the
//! schedule does not slip; the guard, a bucket one token larger fed with the instants waiters
//! actually go at, keeps those credits from letting more than one token beyond the bound into
//! any interval (see `docs/semantics.md`).

use std::sync::atomic::Ordering;

use super::shared::{Kind, Permit, Shared, State};
use crate::engine::gcra::schedule;
use crate::{Algorithm, Priority, Quota};

/// How late tokio's timer may fire and still not slow the schedule down: its 1 ms
/// granularity, plus as much again for the task to be polled.
const TIMER_SLACK: u64 = 2_000_000;

/// The guard's tolerance: one token more than the bucket's, or as many as it takes for the
/// bucket and its guard together to cover [`TIMER_SLACK`] of timer jitter beyond one
/// interval: `burst + 1` tokens, or `1 + ⌈TIMER_SLACK / interval⌉` if that is more.
///
/// Without that floor a bucket whose burst lasts less than the jitter (a leaky bucket above
/// 500 per second) would have to refuse every pair of waiters a late timer brings closer
/// together than their interval, and each refusal costs a timer tick more: measured at
/// 1000/s, 7 % of its rate lost.
fn guard_tolerance(interval: u64, tolerance: u64) -> u64 {
    let floor = TIMER_SLACK
        .div_ceil(interval.max(1))
        .saturating_add(1)
        .saturating_mul(interval);
    tolerance.saturating_add(interval).max(floor)
}

/// Once a server's limit is known, two admissions are never closer than this fraction of an
/// interval below one interval (see [`Shared::set_spaced`]).
const SPACED_MARGIN: f64 = 0.02;

/// Once a server's limit is known, the waiter that goes second after a pause keeps this much
/// more distance from the first (ns). The first request after a second of silence leaves
/// late: measured against nginx, 1.5 ms from the client's call to the wire where the others
/// took 0.1 ms, and 2–3 ms short of the interval at the server, which refused the second
/// request after one pause in four. Once per pause.
pub(super) const AFTER_PAUSE: u64 = 3_000_000;

impl Shared {
    /// How far back a late waiter may be counted as admitted. The GCRA engines and the
    /// sliding log, whose guard bounds what a credit can let through, allow twice a late
    /// timer: the timer's own lateness, and as much again when the guard made it wait for a
    /// later timer.
    pub(super) fn slack(&self, st: &State) -> u64 {
        let interval = match &st.engine {
            Kind::Gcra(_) => st.quota.interval_ns(),
            Kind::Window(_) => self.log_interval(&st.quota),
        };
        if interval == 0 {
            return 0;
        }
        interval.max(TIMER_SLACK).saturating_mul(2)
    }

    /// Whether a window counts a late waiter back to its turn: the sliding log, whose
    /// interval is not nothing. The aligned windows' boundaries do not move.
    pub(super) fn credits(&self, st: &State) -> bool {
        self.log_interval(&st.quota) > 0
    }

    /// The sliding log's interval, by which it counts a late waiter back (0 for the other
    /// windows).
    fn log_interval(&self, quota: &Quota) -> u64 {
        if self.algorithm == Algorithm::SlidingLog {
            quota.period_ns() / u64::from(quota.count())
        } else {
            0
        }
    }

    /// The GCRA engines' guard, as the cost of a token and a tolerance: one token more than
    /// the bucket ([`guard_tolerance`]). Once a server's limit is known, the bucket itself
    /// at a rate 2 % higher instead, so that a waiter catching up on a late one never goes
    /// closer than 98 % of an interval after it (see [`set_spaced`](Self::set_spaced)).
    pub(super) fn guard_params(&self) -> (u64, u64) {
        let (interval, tolerance) = self.cell.params();
        if self.spaced.load(Ordering::Acquire) {
            let faster = |v: u64| v - (v as f64 * SPACED_MARGIN) as u64;
            (faster(interval), faster(tolerance))
        } else {
            (interval, guard_tolerance(interval, tolerance))
        }
    }

    /// Where the bucket's `tat` must be raised to when the line empties, from the guard's
    /// `tat`: the fast path then admits no earlier than the guard would have.
    pub(super) fn guard_takeover(&self, guard: u64) -> u64 {
        if self.spaced.load(Ordering::Acquire) {
            guard.saturating_add(self.guard_lag())
        } else {
            // Less the guard's extra token.
            guard.saturating_sub(self.cell.params().0)
        }
    }

    /// Once spaced: how far the guard's `tat` lies behind the engine's when both admit one
    /// token at the same instant (the guard's bucket is 2 % smaller beyond its first token).
    /// Exact to the nanosecond: a deadline a nanosecond late is a timer tick late.
    pub(super) fn guard_lag(&self) -> u64 {
        let (interval, tolerance) = self.cell.params();
        let (unit, guard_tolerance) = self.guard_params();
        let beyond = tolerance.saturating_sub(interval);
        beyond.saturating_sub(guard_tolerance.saturating_sub(unit))
    }

    /// The guard that admits exactly when the engine at `tat` does (the inverse of
    /// [`guard_takeover`](Self::guard_takeover) once spaced): a guard put at `tat` itself
    /// would hold a full bucket back by 2 % of its burst.
    pub(super) fn guard_behind(&self, tat: u64) -> u64 {
        if self.spaced.load(Ordering::Acquire) {
            tat.saturating_sub(self.guard_lag())
        } else {
            tat
        }
    }

    /// [`commit`](Self::commit) for the first in line, which may be counted up to `slack`
    /// back. The GCRA engines also check the [`guard`](State::guard) at `now`: when it has
    /// no room, the answer is the later of the instant it has and the instant the engine has.
    /// A request of another class than critical also leaves the reserve
    /// ([`reserved_fit`](Self::reserved_fit)).
    pub(super) fn commit_first(
        &self,
        st: &mut State,
        tokens: u32,
        each: Option<&[u64]>,
        priority: Priority,
        from: u64,
        now: u64,
    ) -> Result<Permit, u64> {
        if let Some(at) = self.reserved_fit(st, tokens, each, priority, from) {
            if at > now {
                return Err(at);
            }
        }
        if let Kind::Window(_) = st.engine {
            return self.commit(st, tokens, each, from, now);
        }
        let (unit, tolerance) = self.guard_params();
        let cost = u64::from(tokens).saturating_mul(unit);
        let (guard, at) = schedule(st.guard, now, cost, tolerance);
        if at > now {
            return Err(at.max(self.predict(st, tokens, None, 0, from)));
        }
        let permit = self.commit(st, tokens, None, from, now)?;
        st.guard = guard;
        st.last_went = now;
        if st.resumed {
            let end = self.paused_until.load(Ordering::Acquire);
            // The first to go after the pause (not a waiter long after it).
            if now >= end {
                st.resumed = false;
                if self.spaced.load(Ordering::Acquire) && now - end <= self.slack(st) {
                    st.guard = st.guard.saturating_add(AFTER_PAUSE);
                }
            }
        }
        Ok(permit)
    }

    /// The sliding log, the one window that credits late waiters, feeds its guard with every
    /// admission (`tokens` counted at `at`, going at `now`), and heeds it for a window's width
    /// after a credit: until then those it counts at `now` may follow the credited ones
    /// closely. `Err(instant)` when it heeds the guard and the guard has no room. Without a
    /// credit the log alone keeps the bound, and decides exactly as a remote log does.
    pub(super) fn log_guard(
        &self,
        st: &mut State,
        tokens: u32,
        at: u64,
        now: u64,
    ) -> Result<(), u64> {
        let interval = st.quota.interval_ns();
        let tolerance = guard_tolerance(
            interval,
            interval.saturating_mul(u64::from(st.quota.count())),
        );
        let cost = u64::from(tokens).saturating_mul(interval);
        let (guard, due) = schedule(st.guard, now, cost, tolerance);
        if due > now && now < st.credited_until {
            return Err(due);
        }
        if at < now {
            st.credited_until = now.saturating_add(st.quota.period_ns());
        }
        // Never more than full: an admission it did not heed leaves no debt behind.
        st.guard = guard.min(now.saturating_add(tolerance));
        Ok(())
    }
}
