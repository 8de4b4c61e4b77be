//! Window algorithms: fixed, sliding (two-window estimate) and sliding log.
//!
//! Each model keeps the admissions it has committed (past and reserved for the future) and
//! answers one question: the earliest instant, not before a given one, at which `n` more
//! tokens fit. Every operation runs under the bucket's lock.

mod aligned;
mod fixed;
mod log;
mod ramp;
mod sliding;

pub(crate) use self::fixed::Fixed;
pub(crate) use self::log::Log;
pub(crate) use self::ramp::Ramp;
pub(crate) use self::sliding::{carried, fits, Sliding};

use super::Clock;

/// A window model. Times are nanoseconds on the bucket's clock.
pub(crate) trait Window: Send + std::fmt::Debug {
    /// The earliest instant `≥ not_before` at which `tokens` fit (`tokens ≤ limit`).
    fn earliest(&self, tokens: u64, not_before: u64) -> u64;
    /// Record `tokens` admitted (or reserved) at `at`.
    fn commit(&mut self, tokens: u64, at: u64);
    /// Undo a commitment that was never used.
    fn release(&mut self, tokens: u64, at: u64);
    /// Forget what can no longer matter at `now` or later.
    fn prune(&mut self, now: u64);
    /// Tokens that fit at `now`, ignoring reservations after `now`.
    fn available(&self, now: u64) -> u64;
    /// Time from `now` until nothing committed at or before `now` counts any more.
    fn clear_in(&self, now: u64) -> u64;
    /// When the ramp after a pause ending at `end` hands over to the model's own bound.
    ///
    /// A pause keeps the model: what was admitted before it still counts until it leaves
    /// the window, so the model's own bound holds across the pause. The bucket lays a
    /// [`Ramp`] over the model from `end` to this instant (both bound every admission), so
    /// that nothing counted before the pause comes back as a burst after it.
    fn ramp_until(&self, end: u64) -> u64;
    /// How long before the present a waiter woken late may be counted as admitted (the
    /// lateness of a timer), so late wake-ups do not add up to a lower rate: one token's
    /// worth, or none for windows whose boundaries do not move (the bucket raises a nonzero
    /// slack to the timer's granularity).
    fn slack(&self) -> u64 {
        0
    }
    /// A rate control's new rate, as a new limit and period: as
    /// [`set_limit`](Window::set_limit), but what counts at `now` stops counting no later
    /// than it would have under the old windows. A rate control changes the period many
    /// times a second; re-aligned each time, the tokens counted at `now` would count again
    /// in a window ending later, and never fade.
    fn follow_rate(&mut self, limit: u64, width: u64, now: u64) {
        self.set_limit(limit, width, now);
    }
    /// Change the limit and the period; never raise what is available at `now`.
    fn set_limit(&mut self, limit: u64, width: u64, now: u64);
}

/// Where a bucket's window boundaries fall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    /// At multiples of the period since the UNIX epoch (a minute window resets on the minute).
    Epoch,
    /// At this instant of the bucket's clock (nanoseconds, before its origin if negative) and
    /// every period from it.
    At(i128),
}

impl Align {
    /// Boundaries at `origin` and every period from it, or at multiples of the period since
    /// the UNIX epoch (`None`), on `clock`.
    pub(crate) fn new(origin: Option<tokio::time::Instant>, clock: &Clock) -> Self {
        origin.map_or(Align::Epoch, |origin| {
            let now = tokio::time::Instant::now();
            let ahead = |a: tokio::time::Instant, b| i128::try_from(a.duration_since(b).as_nanos());
            let offset = if origin >= now {
                ahead(origin, now).unwrap_or(i128::MAX / 4)
            } else {
                -ahead(now, origin).unwrap_or(i128::MAX / 4)
            };
            Align::At(i128::from(clock.now_ns()) + offset)
        })
    }

    /// The offset `phase` of the boundaries: they fall where `(t + phase) % width == 0`.
    pub(crate) fn phase(self, width: u64, clock_now: u64) -> u64 {
        match self {
            Align::Epoch => epoch_phase(width, clock_now),
            Align::At(origin) => {
                let width = i128::from(width);
                u64::try_from((-origin).rem_euclid(width)).unwrap_or(0)
            }
        }
    }
}

/// Windows aligned to multiples of `width` since the UNIX epoch: the offset, in the bucket's
/// clock, of the window boundaries.
pub(crate) fn epoch_phase(width: u64, clock_now: u64) -> u64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    // Boundaries fall where (t + phase) % width == 0.
    (wall % width + width - clock_now % width) % width
}
