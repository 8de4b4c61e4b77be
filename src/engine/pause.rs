//! The rule after a pause, for every engine (item 3 of `docs/semantics.md`).
//!
//! A pause ending at `end` holds every admission until `end` (the stores keep that instant).
//! Then admission restarts as from an empty limit: one token at `end`, the next one interval
//! later, no burst.
//! - The token and leaky bucket restart their own state: `tat` at least that of a bucket
//!   empty at `end` ([`Engine::restart`]).
//! - The windows keep their admissions: what was admitted before the pause still counts until
//!   it leaves the window, so each window's own bound (the sliding log's `count` in any
//!   `period`) holds across the pause. A [`Ramp`] laid over the window from `end` bounds every
//!   admission too, until the window's own bound takes over: the first boundary a whole
//!   period after `end` for a fixed window (the rest of a window never goes at once), one
//!   period after `end` for the sliding window and the log.

use std::fmt;

use super::gcra::schedule;
use super::{Engine, Phase, Price, View};
use crate::Quota;

/// Pause `state` until `end`: the ramp to lay over it from then, if its engine needs one.
/// `interval`: the quota's emission interval.
fn pause<E: Engine>(engine: &E, state: &mut E::State, end: u64, interval: u64) -> Option<Ramp> {
    let until = engine.restart(state, end);
    (until > end).then(|| Ramp::new(end, interval, until))
}

/// A leaky bucket of one token, empty at the end of a pause, laid over a window until
/// `until`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ramp {
    /// When the ramp is full again (GCRA `tat`, tolerance one interval).
    tat: u64,
    interval: u64,
    until: u64,
}

impl Ramp {
    fn new(end: u64, interval: u64, until: u64) -> Self {
        Ramp {
            tat: end,
            interval,
            until,
        }
    }

    /// Whether the ramp still bounds admissions at `t`.
    fn active(&self, t: u64) -> bool {
        t < self.until
    }

    /// The earliest instant `≥ from` the ramp lets `tokens` through: never after it hands
    /// over (from then on the window's own bound alone decides).
    fn earliest(&self, tokens: u64, from: u64) -> u64 {
        let cost = tokens.saturating_mul(self.interval);
        let at = schedule(self.tat, from, cost, self.interval).1;
        at.min(self.until).max(from)
    }

    fn commit(&mut self, tokens: u64, at: u64) {
        self.tat = schedule(self.tat, at, tokens.saturating_mul(self.interval), 0).0;
    }

    fn set_interval(&mut self, interval: u64) {
        self.interval = interval;
    }
}

/// A limit kept under a store's lock, with the ramp of its last pause: what the
/// [`Bucket`](crate::Bucket) holds for the windows, whichever the engine.
pub(crate) trait Model: Send + fmt::Debug {
    /// The earliest instant `≥ from` at which `cost` fits under the engine and the ramp.
    fn earliest(&self, cost: Price<'_>, from: u64) -> u64;
    /// Count `cost` at `at` (an instant [`earliest`](Model::earliest) allows) in both.
    fn commit(&mut self, cost: Price<'_>, at: u64);
    /// [`Engine::release`].
    fn release(&mut self, cost: Price<'_>, at: u64);
    /// [`Engine::capacity_at`].
    fn capacity_at(&self, i: usize) -> u64;
    /// [`Engine::forget`].
    fn forget(&mut self, now: u64);
    /// [`Engine::view`], the ramp aside.
    fn view(&self, now: u64) -> View;
    /// Whether the ramp still bounds admissions at `t`.
    fn ramping(&self, t: u64) -> bool;
    /// Restart after a pause ending at `end` ([`pause`]).
    fn pause(&mut self, end: u64, interval: u64);
    /// [`Engine::hold`]: pause only some quotas, without a ramp.
    fn hold(&mut self, held: &[bool], end: u64);
    /// [`Engine::with_quota`]; the ramp goes on at the new rate.
    fn set_quota(&mut self, quota: Quota, phase: Phase, now: u64);
    /// [`Engine::with_quota_at`]: quota `i` of a stack, the ramp (of the first) untouched.
    fn set_quota_at(&mut self, i: usize, quota: Quota, now: u64);
    /// [`Engine::refused_by`].
    fn refused_by(&self, cost: Price<'_>, now: u64) -> usize;
    /// [`Engine::reset_in`].
    fn reset_in(&self, now: u64) -> Option<u64>;
}

/// An engine's state and the ramp after its last pause.
#[derive(Debug)]
pub(crate) struct Paused<E: Engine> {
    engine: E,
    state: E::State,
    ramp: Option<Ramp>,
}

impl<E: Engine> Paused<E> {
    /// A limit that has admitted nothing.
    pub(crate) fn boxed(engine: E) -> Box<dyn Model> {
        let state = engine.empty();
        Box::new(Paused {
            engine,
            state,
            ramp: None,
        })
    }
}

impl<E: Engine> Model for Paused<E> {
    fn earliest(&self, cost: Price<'_>, from: u64) -> u64 {
        let (engine, state) = (&self.engine, &self.state);
        let fits = |from| match cost {
            Price::One(n) => engine.earliest(state, n, from),
            Price::Each(a) => engine.earliest_each(state, a, from),
        };
        let at = fits(from);
        match &self.ramp {
            // Both bounds only ever loosen with time: the engine's earliest from the ramp's
            // earliest fits both.
            Some(r) if r.active(at) => fits(r.earliest(cost.first(), at)),
            _ => at,
        }
    }

    fn commit(&mut self, cost: Price<'_>, at: u64) {
        match cost {
            Price::One(n) => self.engine.commit(&mut self.state, n, at),
            Price::Each(a) => self.engine.commit_each(&mut self.state, a, at),
        };
        match self.ramp.as_mut() {
            Some(r) if r.active(at) => r.commit(cost.first(), at),
            _ => self.ramp = None,
        }
    }

    fn release(&mut self, cost: Price<'_>, at: u64) {
        match cost {
            Price::One(n) => self.engine.release(&mut self.state, n, at),
            Price::Each(a) => self.engine.release_each(&mut self.state, a, at),
        }
    }

    fn capacity_at(&self, i: usize) -> u64 {
        self.engine.capacity_at(i)
    }

    fn forget(&mut self, now: u64) {
        self.engine.forget(&mut self.state, now);
    }

    fn view(&self, now: u64) -> View {
        self.engine.view(&self.state, now)
    }

    fn ramping(&self, t: u64) -> bool {
        self.ramp.is_some_and(|r| r.active(t))
    }

    fn pause(&mut self, end: u64, interval: u64) {
        self.ramp = pause(&self.engine, &mut self.state, end, interval);
    }

    fn hold(&mut self, held: &[bool], end: u64) {
        self.engine.hold(&mut self.state, held, end);
    }

    fn refused_by(&self, cost: Price<'_>, now: u64) -> usize {
        self.engine.refused_by(&self.state, cost, now)
    }

    fn reset_in(&self, now: u64) -> Option<u64> {
        self.engine.reset_in(&self.state, now)
    }

    fn set_quota(&mut self, quota: Quota, phase: Phase, now: u64) {
        self.engine = self.engine.with_quota(&mut self.state, quota, phase, now);
        if let Some(r) = self.ramp.as_mut() {
            r.set_interval(quota.interval_ns());
        }
    }

    fn set_quota_at(&mut self, i: usize, quota: Quota, now: u64) {
        self.engine = self.engine.with_quota_at(&mut self.state, i, quota, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Gcra, Log};
    use crate::{Algorithm, Quota};
    use std::time::Duration;

    #[test]
    fn one_token_then_one_per_interval() {
        let mut r = Ramp::new(1000, 100, 5000);
        assert_eq!(r.earliest(1, 0), 1000);
        r.commit(1, 1000);
        assert_eq!(r.earliest(1, 1000), 1100);
        assert_eq!(r.earliest(1, 1500), 1500);
        r.commit(3, 1500);
        assert_eq!(r.earliest(1, 1500), 1800);
        assert!(r.active(4999) && !r.active(5000));
        // Booked past the hand-over: the window's bound alone decides from then on.
        r.commit(40, 4900);
        assert_eq!(r.earliest(1, 4950), 5000);
    }

    #[test]
    fn a_bucket_restarts_empty_and_a_log_keeps_its_admissions_under_a_ramp() {
        let quota = Quota::new(4, Duration::from_nanos(400));
        let gcra = Gcra::new(quota, Algorithm::TokenBucket);
        let mut tat = gcra.empty();
        assert!(pause(&gcra, &mut tat, 1000, 100).is_none());
        assert_eq!(gcra.earliest(&tat, 1, 0), 1000);
        assert_eq!(gcra.view(&tat, 1000).available, 1);

        let log = Log::new(quota);
        let mut s = log.empty();
        log.commit(&mut s, 4, 900);
        let ramp = pause(&log, &mut s, 1000, 100).expect("a ramp");
        // The admissions of 900 still count until 1300: the log alone says 1300.
        assert_eq!(log.earliest(&s, 1, 1000), 1300);
        assert_eq!(ramp.earliest(1, 1000), 1000);
        assert!(!ramp.active(1400));
    }
}
