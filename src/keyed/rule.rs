//! [`Rule`]: one algorithm's decision for one key, on a compact per-key state.
//!
//! The keyed store is generic over the rule, so the table, the eviction and the layers are
//! written once and every algorithm keeps the smallest state it can:
//!
//! | rule | algorithms | state per key |
//! |---|---|---|
//! | [`GcraRule`](super::gcra::GcraRule) | token bucket, leaky bucket | 8 bytes (`tat`) |
//! | [`WindowRule`](super::window::WindowRule) | fixed window, sliding window | 16 bytes (window, two counts) |
//! | [`LogRule`](super::log::LogRule) | sliding log | a log of the admissions within one period |
//!
//! A rule admits requests of one key in arrival order (a request never goes before one that
//! was admitted or reserved earlier), which is what lets a window rule keep only its latest
//! windows.

use std::fmt;

/// A key's state, as the table needs to know it.
pub(crate) trait Slot {
    /// The instant (store clock, ns) from which this state means the same as no state at all:
    /// the store may then forget the key.
    fn expires(&self) -> u64;
}

/// An admission made by a rule: when it goes, and what the state became, so that it can be
/// described and undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admit {
    /// The admission instant (not before the decision).
    pub(crate) at: u64,
    /// The rule's record of the state right after the admission (two words).
    pub(crate) mark: [u64; 2],
    /// The rule's record of the state before it, to undo it.
    pub(crate) before: [u64; 2],
}

/// A key's bucket seen at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    /// Tokens that fit now.
    pub(crate) available: u64,
    /// Nanoseconds until one token fits (0 when one does).
    pub(crate) next_in: u64,
    /// Nanoseconds until the key is as if unused.
    pub(crate) full_in: u64,
}

/// One algorithm applied per key.
pub(crate) trait Rule: fmt::Debug + Send + Sync {
    /// A key's state.
    type State: Slot + Send + fmt::Debug;

    /// The most tokens one request may take.
    fn capacity(&self) -> u64;

    /// Admit `tokens` (1 ..= capacity) for a key with `state`, after everything it holds:
    /// at `now`, or reserved for an instant at most `max_wait` later. Otherwise the wait
    /// until they would fit, in nanoseconds, with `state` unchanged.
    fn admit(
        &self,
        state: &mut Self::State,
        now: u64,
        tokens: u64,
        max_wait: u64,
    ) -> Result<Admit, u64>;

    /// As [`admit`](Self::admit), for a key without state.
    fn admit_new(&self, now: u64, tokens: u64, max_wait: u64) -> Result<(Self::State, Admit), u64>;

    /// Undo `admit` of `tokens` if nothing was admitted for the key since (otherwise the
    /// tokens stay spent: never more than the quota). True when the state is now unused.
    fn refund(&self, state: &mut Self::State, tokens: u64, admit: &Admit, now: u64) -> bool;

    /// Tokens left and nanoseconds until the limit resets, right after `admit`, seen at `at`
    /// (the admission instant or later).
    fn status(&self, admit: &Admit, at: u64) -> (u64, u64);

    /// The bucket of a key with `state` (`None`: unused) at `now`.
    fn view(&self, state: Option<&Self::State>, now: u64) -> View;
}
