//! The algorithms, each written once as a pure [`Engine`]: a state, an instant and a cost in;
//! a decision and the new state out. No clock, no lock, no atomics: the stores (the
//! [`Bucket`](crate::Bucket)'s cell and queue, the keyed table) keep the states and read the
//! clock, and every algorithm means the same in each of them.
//!
//! | engine | algorithms | state | per key |
//! |---|---|---|---|
//! | [`Gcra`] | token bucket, leaky bucket | `tat`: when the bucket is full again | 8 bytes |
//! | [`Windows`] | fixed window, sliding window | the latest window and two counts | 16 bytes |
//! | [`Log`] | sliding log | the admissions within the last period | boxed |
//! | [`Stack`] | a [`Plan`](crate::Plan) of several quotas | each quota's | boxed |
//!
//! Instants are nanoseconds on the store's clock. An engine admits in arrival order: nothing
//! is counted before what it admitted or booked last. [`pause`] holds the rule every engine
//! follows after a pause.

pub(crate) mod gcra;
mod log;
pub(crate) mod pause;
pub(crate) mod stack;
mod window;

use std::fmt;

pub(crate) use self::gcra::Gcra;
pub(crate) use self::log::Log;
pub(crate) use self::pause::{Model, Paused};
pub(crate) use self::stack::Stack;
pub(crate) use self::window::{Phase, Windows};
use crate::Quota;

/// A state as the keyed table keeps it, one per key: small, with a niche (an `Option` of it
/// costs nothing), and knowing when it stops mattering.
pub(crate) trait Packed: fmt::Debug + Send {
    /// The instant from which this state means no more than no state at all: the table may
    /// then forget it.
    fn expires(&self) -> u64;
}

/// An admission made by an engine: its instant, its cost, and the engine's records of the
/// state right after and right before it, to describe it ([`Engine::status`]) and undo it
/// ([`Engine::undo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Admit {
    /// The instant it counts at.
    pub(crate) at: u64,
    pub(crate) cost: u64,
    pub(crate) after: [u64; 3],
    pub(crate) before: [u64; 3],
}

/// What one request costs an engine: one number, charged to every quota that counts
/// requests, or an amount per quota of a plan, in order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Price<'a> {
    One(u64),
    Each(&'a [u64]),
}

impl Price<'_> {
    /// What the first quota is charged.
    pub(crate) fn first(&self) -> u64 {
        match self {
            Price::One(n) => *n,
            Price::Each(a) => a.first().copied().unwrap_or(0),
        }
    }
}

/// A limit seen at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    /// Tokens that fit now.
    pub(crate) available: u64,
    /// Nanoseconds until one token fits (0 when one does).
    pub(crate) next_in: u64,
    /// Nanoseconds until the limit is as if unused.
    pub(crate) full_in: u64,
}

/// One algorithm's decisions.
///
/// Deciding is two steps, so that several limits can decide together: the
/// [`earliest`](Engine::earliest) instant at which a cost fits (a pure question), then
/// [`commit`](Engine::commit) it at an instant at or after that. [`admit`](Engine::admit)
/// composes them for one limit.
pub(crate) trait Engine: fmt::Debug + Send + Sync + Sized + 'static {
    /// What the limit has admitted, as the engine decides on it.
    type State: fmt::Debug + Send;
    /// The state as the keyed table keeps it.
    type Packed: Packed;

    /// The most tokens one request may take.
    fn capacity(&self) -> u64;

    /// The state of a limit that has admitted nothing.
    fn empty(&self) -> Self::State;

    /// The earliest instant `≥ from` at which `cost` (1 ..= [`capacity`](Engine::capacity))
    /// fits after everything `state` holds, and not before what it admitted last.
    fn earliest(&self, state: &Self::State, cost: u64, from: u64) -> u64;

    /// Count `cost` at `at`, an instant [`earliest`](Engine::earliest) allows.
    fn commit(&self, state: &mut Self::State, cost: u64, at: u64) -> Admit;

    /// [`earliest`](Engine::earliest) with a cost per quota, in the plan's order (a
    /// [`Stack`]'s: a quota whose amount is 0 does not hold it back); one quota's engine
    /// reads the first.
    fn earliest_each(&self, state: &Self::State, amounts: &[u64], from: u64) -> u64 {
        self.earliest(state, amounts[0], from)
    }

    /// [`commit`](Engine::commit) with a cost per quota, as
    /// [`earliest_each`](Engine::earliest_each).
    fn commit_each(&self, state: &mut Self::State, amounts: &[u64], at: u64) -> Admit {
        self.commit(state, amounts[0], at)
    }

    /// [`release`](Engine::release) with a cost per quota, as
    /// [`earliest_each`](Engine::earliest_each).
    fn release_each(&self, state: &mut Self::State, amounts: &[u64], at: u64) {
        self.release(state, amounts[0], at);
    }

    /// The most one request may take of quota `i` (a [`Stack`]'s; else the one quota's).
    fn capacity_at(&self, _i: usize) -> u64 {
        self.capacity()
    }

    /// The longest a booking may lie ahead: keeps the state's arithmetic far from overflow.
    const MAX_AHEAD: u64 = u64::MAX;

    /// Admit `cost` at `now`, or book it for an instant at most `max_wait` later; else the
    /// wait until it would fit, with `state` unchanged. The admission is described
    /// ([`status`](Engine::status)).
    #[inline]
    fn admit(
        &self,
        state: &mut Self::State,
        now: u64,
        cost: Price<'_>,
        max_wait: u64,
    ) -> Result<Admit, u64> {
        self.forget(state, now);
        let at = match cost {
            Price::One(n) => self.earliest(state, n, now),
            Price::Each(a) => self.earliest_each(state, a, now),
        };
        if at > now.saturating_add(max_wait.min(Self::MAX_AHEAD)) {
            return Err(at - now);
        }
        let mut admit = match cost {
            Price::One(n) => self.commit(state, n, at),
            Price::Each(a) => self.commit_each(state, a, at),
        };
        self.describe(state, &mut admit);
        Ok(admit)
    }

    /// Which of the engine's quotas holds `cost` back longest at `now` (a [`Stack`]'s; `0`
    /// for an engine of one quota).
    #[inline]
    fn refused_by(&self, _state: &Self::State, _cost: Price<'_>, _now: u64) -> usize {
        0
    }

    /// For an engine of several quotas ([`Stack`]): nanoseconds from `now` until the tightest
    /// quota has one more token (a window's: until it ends); `None` for one quota, whose
    /// store says it from its own view.
    #[inline]
    fn reset_in(&self, _state: &Self::State, _now: u64) -> Option<u64> {
        None
    }

    /// Record in `admit`, right after it, what [`status`](Engine::status) needs beyond the
    /// engine's record of the state (an engine whose state does not fit in a record).
    #[inline]
    fn describe(&self, _state: &Self::State, _admit: &mut Admit) {}

    /// Drop what can no longer count at `now` or later: memory only, no decision changes.
    #[inline]
    fn forget(&self, _state: &mut Self::State, _now: u64) {}

    /// Undo `admit` if the state took nothing since (else its tokens stay spent): a key's
    /// charge that another limit refused, a booking given up.
    fn undo(&self, state: &mut Self::State, admit: &Admit);

    /// Give back `cost` counted at `at`, the admissions since staying as they were decided: a
    /// permit dropped unused. Only called where that is exact (for [`Gcra`], before the bucket
    /// refilled past it).
    fn release(&self, state: &mut Self::State, cost: u64, at: u64);

    /// Tokens left, and nanoseconds until the limit resets, right after `admit` (made by
    /// [`admit`](Engine::admit)), at its instant: the response fields.
    fn status(&self, admit: &Admit) -> (u64, u64);

    /// Tokens that fit at `now` after `state`, bookings after `now` aside.
    fn available(&self, state: &Self::State, now: u64) -> u64;

    /// The limit with `state` at `now`.
    fn view(&self, state: &Self::State, now: u64) -> View {
        let available = self.available(state, now);
        let next_in = if available > 0 {
            0
        } else {
            self.earliest(state, 1, now) - now
        };
        View {
            available,
            next_in,
            full_in: self.expires(state).saturating_sub(now),
        }
    }

    /// The instant from which `state` means no more than [`empty`](Engine::empty).
    fn expires(&self, state: &Self::State) -> u64;

    /// A pause ends at `end`: admission restarts as from an empty limit (see [`pause`]).
    /// Returns the instant until which a [`Ramp`](pause::Ramp) must hold the limit from
    /// `end`; an engine that restarts its own state (the token and leaky bucket) returns
    /// `end`: no ramp.
    fn restart(&self, state: &mut Self::State, end: u64) -> u64;

    /// Pause only the quotas `held` marks until `end` (a [`Stack`]'s: each restarts as
    /// [`restart`](Engine::restart) says and takes nothing before `end`, the others go on);
    /// an engine of one quota restarts.
    fn hold(&self, state: &mut Self::State, held: &[bool], end: u64) {
        let _ = held;
        self.restart(state, end);
    }

    /// The engine for `quota` from `now` on, with `state` carried over: never more available
    /// at `now` than before (no burst), fractional progress kept. `phase`: where the windows
    /// of a new period fall.
    fn with_quota(&self, state: &mut Self::State, quota: Quota, phase: Phase, now: u64) -> Self;

    /// [`with_quota`](Engine::with_quota) for quota `i` of a [`Stack`] (the window of a new
    /// period where the old one ended); an engine of one quota has only quota 0.
    fn with_quota_at(&self, state: &mut Self::State, i: usize, quota: Quota, now: u64) -> Self {
        let _ = i;
        self.with_quota(state, quota, Phase::KeepEnd, now)
    }

    /// [`with_quota`](Engine::with_quota), for a state that may hold bookings: the next
    /// admission comes no earlier than the last one booked, so turns booked before the change
    /// keep their order.
    fn carry_quota(&self, state: &mut Self::State, quota: Quota, phase: Phase, now: u64) -> Self {
        self.with_quota(state, quota, phase, now)
    }

    /// `state` as the keyed table keeps it.
    fn pack(&self, state: Self::State) -> Self::Packed;

    /// Run `f` on the state `packed` holds (written back after).
    fn unpacked<R>(&self, packed: &mut Self::Packed, f: impl FnOnce(&mut Self::State) -> R) -> R;
}
