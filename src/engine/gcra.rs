//! The token and leaky bucket as GCRA: the state is one instant, `tat`, at which the bucket
//! is full again.
//!
//! With `T` the emission interval and `τ` the tolerance (`B·T` for a token bucket of burst
//! `B`, `T` for a leaky bucket), `n` tokens at `now` move `tat` to `max(tat, now) + n·T` and
//! go `max(τ, n·T)` before that ([`schedule`]). Admitting at that instant or later keeps every
//! window of length `t` within `B + t/T` tokens. A `tat` at or before `now` is a full bucket:
//! the same as no state at all.
//!
//! The [`Bucket`](crate::Bucket) keeps `tat` in an atomic and admits on its fast path with
//! [`schedule`] alone.

use std::num::NonZeroU64;

use super::{Admit, Engine, Packed, Phase};
use crate::{Algorithm, Quota};

/// Admitting `cost` (`n·T`) at `now` with tolerance `τ`: `(tat after, admission instant)`.
///
/// `tat` moves to `max(tat, now) + n·T`, and the request goes `max(τ, n·T)` before that. For a
/// token bucket (`τ = B·T ≥ n·T`) this is plain GCRA. For the leaky bucket (`τ = T`) it is
/// `max(tat, now)`: a request goes once the previous one has drained, and its `n` tokens then
/// drain over the next `n` intervals, so an idle leaky bucket takes a request of any allowed
/// cost at once and the next admission comes `n·T` later.
#[inline]
pub(crate) fn schedule(tat: u64, now: u64, cost: u64, tolerance: u64) -> (u64, u64) {
    let new = tat.max(now).saturating_add(cost);
    (new, new.saturating_sub(tolerance.max(cost)))
}

/// A token bucket (tolerance `B·T`) or a leaky bucket (tolerance `T`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    /// Emission interval `T`, nanoseconds.
    pub(crate) interval: u64,
    /// How far `tat` may lie ahead of the admission instant.
    pub(crate) tolerance: u64,
    capacity: u64,
    leaky: bool,
}

impl Gcra {
    pub(crate) fn new(quota: Quota, algorithm: Algorithm) -> Self {
        let interval = quota.interval_ns();
        let burst = u64::from(quota.burst_size());
        let leaky = matches!(algorithm, Algorithm::LeakyBucket { .. });
        Gcra {
            interval,
            // `burst × interval` fits: `Quota` checks it.
            tolerance: if leaky { interval } else { interval * burst },
            capacity: burst,
            leaky,
        }
    }

    fn cost(&self, tokens: u64) -> u64 {
        tokens.saturating_mul(self.interval)
    }
}

impl Packed for NonZeroU64 {
    #[inline]
    fn expires(&self) -> u64 {
        self.get()
    }
}

impl Engine for Gcra {
    type State = u64;
    /// A `tat` kept is never zero: it lies at least one token after some `now ≥ 0`.
    type Packed = NonZeroU64;

    const MAX_AHEAD: u64 = u64::MAX / 8;

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn empty(&self) -> u64 {
        0
    }

    #[inline]
    fn earliest(&self, tat: &u64, cost: u64, from: u64) -> u64 {
        schedule(*tat, from, self.cost(cost), self.tolerance)
            .1
            .max(from)
    }

    #[inline]
    fn commit(&self, tat: &mut u64, cost: u64, at: u64) -> Admit {
        let before = *tat;
        *tat = schedule(before, at, self.cost(cost), self.tolerance).0;
        Admit {
            at,
            cost,
            after: [*tat, 0, 0],
            before: [before, 0, 0],
        }
    }

    fn undo(&self, tat: &mut u64, admit: &Admit) {
        if *tat == admit.after[0] {
            self.release(tat, admit.cost, admit.at);
        }
    }

    fn release(&self, tat: &mut u64, cost: u64, _at: u64) {
        *tat = tat.saturating_sub(self.cost(cost));
    }

    fn status(&self, admit: &Admit) -> (u64, u64) {
        let (tat, at) = (admit.after[0], admit.at);
        let ahead = tat.saturating_sub(at);
        let reset = if ahead == 0 {
            0
        } else {
            (ahead - 1) % self.interval + 1
        };
        (self.available(&tat, at), reset)
    }

    fn available(&self, tat: &u64, now: u64) -> u64 {
        let ahead = tat.saturating_sub(now);
        (self.tolerance / self.interval).saturating_sub(ahead.div_ceil(self.interval))
    }

    fn expires(&self, tat: &u64) -> u64 {
        *tat
    }

    /// `tat` at least that of a bucket empty at `end`, its first token due then.
    fn restart(&self, tat: &mut u64, end: u64) -> u64 {
        let (interval, tolerance) = (self.interval, self.tolerance);
        *tat = (*tat).max(end.saturating_add(tolerance - interval.min(tolerance)));
        end
    }

    /// Keeps the tokens available at `now` exactly, fraction included (a debt too), capped at
    /// the new burst. The bucket holds `(τ − ahead) / T` tokens, `ahead` being how far `tat`
    /// lies beyond `now`; the same number under the new parameters puts `tat` at
    /// `now + τ' − (τ − ahead) · T' / T`, rounded so that it never holds more.
    fn with_quota(&self, tat: &mut u64, quota: Quota, _: Phase, now: u64) -> Self {
        let algorithm = if self.leaky {
            Algorithm::leaky_bucket(0)
        } else {
            Algorithm::TokenBucket
        };
        let new = Gcra::new(quota, algorithm);
        let ahead = tat.saturating_sub(now);
        // Tokens held, in nanoseconds of the new interval (negative: a debt).
        let held = (i128::from(self.tolerance) - i128::from(ahead)) * i128::from(new.interval);
        let held = held
            .div_euclid(i128::from(self.interval))
            .min(i128::from(new.tolerance));
        let ahead = u64::try_from(i128::from(new.tolerance) - held).unwrap_or(u64::MAX);
        *tat = now.saturating_add(ahead);
        new
    }

    fn carry_quota(&self, tat: &mut u64, quota: Quota, phase: Phase, now: u64) -> Self {
        // The latest instant a booking took is at most `tat − τ`.
        let last_booked = tat.saturating_sub(self.tolerance);
        let new = self.with_quota(tat, quota, phase, now);
        if last_booked > now {
            let floor = last_booked.saturating_add(new.tolerance - new.interval.min(new.tolerance));
            *tat = (*tat).max(floor);
        }
        new
    }

    fn pack(&self, tat: u64) -> NonZeroU64 {
        NonZeroU64::new(tat).unwrap_or(NonZeroU64::MIN)
    }

    #[inline]
    fn unpacked<R>(&self, packed: &mut NonZeroU64, f: impl FnOnce(&mut u64) -> R) -> R {
        let mut tat = packed.get();
        let r = f(&mut tat);
        *packed = self.pack(tat);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Price;
    use std::time::Duration;

    #[test]
    fn admits_a_burst_then_spaces() {
        let gcra = Gcra::new(Quota::per_second(2).burst(2), Algorithm::TokenBucket);
        let t = gcra.interval;
        assert_eq!(t, 500_000_000);
        let mut s = gcra.empty();
        let _ = gcra.admit(&mut s, 0, Price::One(1), 0).unwrap();
        let a = gcra.admit(&mut s, 0, Price::One(1), 0).unwrap();
        assert_eq!(gcra.admit(&mut s, 0, Price::One(1), 0), Err(t));
        assert_eq!(gcra.status(&a), (0, t));
        assert_eq!(gcra.view(&s, t - 1).available, 0);
        assert_eq!(gcra.view(&s, t).available, 1);
        // A booking within the allowed wait moves `tat` and names its instant.
        let r = gcra.admit(&mut s, 0, Price::One(1), t).unwrap();
        assert_eq!(r.at, t);
        assert_eq!(gcra.capacity(), 2);
    }

    #[test]
    fn undo_only_when_nothing_came_after() {
        let gcra = Gcra::new(Quota::per_second(1).burst(2), Algorithm::TokenBucket);
        let mut s = gcra.empty();
        let first = gcra.admit(&mut s, 0, Price::One(1), 0).unwrap();
        let second = gcra.admit(&mut s, 0, Price::One(1), 0).unwrap();
        gcra.undo(&mut s, &first); // stale: `second` came after it
        assert_eq!(s, second.after[0]);
        gcra.undo(&mut s, &second);
        assert_eq!(s, first.after[0]);
        gcra.undo(&mut s, &first);
        assert_eq!(gcra.expires(&s), 0, "full again");
    }

    #[test]
    fn leaky_spaces_every_admission_by_its_cost() {
        let quota = Quota::per_second(4).burst(3);
        let gcra = Gcra::new(quota, Algorithm::leaky_bucket(0));
        let t = Duration::from_millis(250).as_nanos() as u64;
        // Idle: a cost of 3 goes at once and drains over the next 3 intervals.
        let mut s = gcra.empty();
        assert_eq!(gcra.admit(&mut s, 0, Price::One(3), 0).unwrap().at, 0);
        assert_eq!(gcra.admit(&mut s, 0, Price::One(1), 0), Err(3 * t));
        assert_eq!(
            gcra.admit(&mut s, 3 * t, Price::One(1), 0).unwrap().at,
            3 * t
        );
        // Then a cost of 2 waits for that one to drain.
        assert_eq!(gcra.admit(&mut s, 3 * t, Price::One(2), 0), Err(t));
        assert_eq!(gcra.view(&s, 3 * t).available, 0);
        assert_eq!(gcra.view(&s, 4 * t).available, 1);
    }

    #[test]
    fn a_new_quota_keeps_the_tokens_held() {
        // 2 of 4 held at 1/s; at 2/s with a burst of 4 the same 2 are held.
        let gcra = Gcra::new(Quota::per_second(1).burst(4), Algorithm::TokenBucket);
        let mut s = 2_000_000_000;
        let new = gcra.with_quota(&mut s, Quota::per_second(2).burst(4), Phase::KeepEnd, 0);
        assert_eq!(new.view(&s, 0).available, 2);
        // A pause restarts it empty, its first token due at the end.
        assert_eq!(new.restart(&mut s, 5_000_000_000), 5_000_000_000);
        assert_eq!(new.earliest(&s, 1, 0), 5_000_000_000);
        assert_eq!(new.earliest(&s, 2, 0), 5_500_000_000);
    }
}
