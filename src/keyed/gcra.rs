//! The token and leaky bucket for one key, as arithmetic on one number.
//!
//! A key's state is `tat`, the instant (nanoseconds on the store's clock) at which its bucket
//! is full again. With `T` the emission interval and `τ` the tolerance (`B·T` for a token
//! bucket of burst `B`, `T` for a leaky bucket), `n` tokens are admitted at
//! `tat' − τ` where `tat' = next_tat(tat, now, n·T, τ)` (see
//! [`next_tat`](crate::bucket::next_tat)), and `tat` moves to `tat'`. A `tat` at or before
//! `now` is a full bucket: the same as no state at all, which is what lets the store forget
//! such keys without losing anything.

use std::num::NonZeroU64;

use super::rule::{Admit, Rule, Slot, View};
use crate::bucket::schedule;
use crate::{Algorithm, Quota};

/// The largest wait a reservation may be granted: keeps `tat` arithmetic far from overflow.
const MAX_AHEAD: u64 = u64::MAX / 8;

/// The quota as the arithmetic needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GcraRule {
    /// Emission interval `T`, nanoseconds.
    interval: u64,
    /// How far `tat` may lie ahead of the admission instant.
    tolerance: u64,
    /// The most tokens of one request.
    capacity: u64,
}

impl GcraRule {
    pub(crate) fn new(quota: Quota, algorithm: Algorithm) -> Self {
        let interval = quota.interval_ns();
        let burst = u64::from(quota.burst_size());
        let tolerance = match algorithm {
            Algorithm::LeakyBucket { .. } => interval,
            _ => interval * burst,
        };
        GcraRule {
            interval,
            tolerance,
            capacity: burst,
        }
    }

    #[inline]
    fn decide(&self, tat: u64, now: u64, tokens: u64, max_wait: u64) -> Result<Admit, u64> {
        let (new, at) = schedule(tat, now, tokens * self.interval, self.tolerance);
        if at <= now.saturating_add(max_wait.min(MAX_AHEAD)) {
            Ok(Admit {
                at: at.max(now),
                mark: [new, 0],
                before: [tat, 0],
            })
        } else {
            Err(at - now)
        }
    }

    /// Whole tokens available at `now` with `tat`.
    fn remaining(&self, tat: u64, now: u64) -> u64 {
        let ahead = tat.saturating_sub(now);
        (self.tolerance / self.interval).saturating_sub(ahead.div_ceil(self.interval))
    }
}

impl Slot for NonZeroU64 {
    #[inline]
    fn expires(&self) -> u64 {
        self.get()
    }
}

/// A `tat` after an admission is never zero: it lies at least one token after `now ≥ 0`.
fn nonzero(tat: u64) -> NonZeroU64 {
    NonZeroU64::new(tat).unwrap_or(NonZeroU64::MIN)
}

impl Rule for GcraRule {
    type State = NonZeroU64;

    fn capacity(&self) -> u64 {
        self.capacity
    }

    #[inline]
    fn admit(
        &self,
        state: &mut NonZeroU64,
        now: u64,
        tokens: u64,
        max_wait: u64,
    ) -> Result<Admit, u64> {
        let admit = self.decide(state.get(), now, tokens, max_wait)?;
        *state = nonzero(admit.mark[0]);
        Ok(admit)
    }

    #[inline]
    fn admit_new(&self, now: u64, tokens: u64, max_wait: u64) -> Result<(NonZeroU64, Admit), u64> {
        let admit = self.decide(0, now, tokens, max_wait)?;
        Ok((nonzero(admit.mark[0]), admit))
    }

    fn refund(&self, state: &mut NonZeroU64, tokens: u64, admit: &Admit, now: u64) -> bool {
        if state.get() != admit.mark[0] {
            return false;
        }
        let tat = state.get().saturating_sub(tokens * self.interval);
        *state = nonzero(tat);
        tat <= now
    }

    fn status(&self, admit: &Admit, at: u64) -> (u64, u64) {
        let tat = admit.mark[0];
        let ahead = tat.saturating_sub(at);
        let reset = if ahead == 0 {
            0
        } else {
            (ahead - 1) % self.interval + 1
        };
        (self.remaining(tat, at), reset)
    }

    fn view(&self, state: Option<&NonZeroU64>, now: u64) -> View {
        let tat = state.map_or(0, |t| t.get());
        let ahead = tat.saturating_sub(now);
        View {
            available: self.remaining(tat, now),
            next_in: (ahead + self.interval).saturating_sub(self.tolerance),
            full_in: ahead,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn admits_a_burst_then_spaces() {
        let rule = GcraRule::new(Quota::per_second(2).burst(2), Algorithm::TokenBucket);
        let t = rule.interval;
        assert_eq!(t, 500_000_000);
        let (mut s, _) = rule.admit_new(0, 1, 0).unwrap();
        let a = rule.admit(&mut s, 0, 1, 0).unwrap();
        assert_eq!(rule.admit(&mut s, 0, 1, 0), Err(t));
        assert_eq!(rule.status(&a, 0), (0, t));
        assert_eq!(rule.view(Some(&s), t - 1).available, 0);
        assert_eq!(rule.view(Some(&s), t).available, 1);
        // A reservation within the allowed wait moves `tat` and names its instant.
        let r = rule.admit(&mut s, 0, 1, t).unwrap();
        assert_eq!(r.at, t);
        assert_eq!(rule.capacity(), 2);
    }

    #[test]
    fn refund_only_when_nothing_came_after() {
        let rule = GcraRule::new(Quota::per_second(1).burst(2), Algorithm::TokenBucket);
        let (mut s, first) = rule.admit_new(0, 1, 0).unwrap();
        let second = rule.admit(&mut s, 0, 1, 0).unwrap();
        assert!(!rule.refund(&mut s, 1, &first, 0)); // stale: `second` came after it
        assert_eq!(s.get(), second.mark[0]);
        assert!(!rule.refund(&mut s, 1, &second, 0));
        assert_eq!(s.get(), first.mark[0]);
        assert!(rule.refund(&mut s, 1, &first, 0), "full again");
    }

    #[test]
    fn leaky_spaces_every_admission_by_its_cost() {
        let quota = Quota::per_second(4).burst(3);
        let rule = GcraRule::new(quota, Algorithm::leaky_bucket(0));
        let t = Duration::from_millis(250).as_nanos() as u64;
        // Idle: a cost of 3 goes at once and drains over the next 3 intervals.
        let (mut s, a) = rule.admit_new(0, 3, 0).unwrap();
        assert_eq!(a.at, 0);
        assert_eq!(rule.admit(&mut s, 0, 1, 0), Err(3 * t));
        assert_eq!(rule.admit(&mut s, 3 * t, 1, 0).unwrap().at, 3 * t);
        // Then a cost of 2 waits for that one to drain.
        assert_eq!(rule.admit(&mut s, 3 * t, 2, 0), Err(t));
        assert_eq!(rule.view(Some(&s), 3 * t).available, 0);
        assert_eq!(rule.view(Some(&s), 4 * t).available, 1);
    }
}
