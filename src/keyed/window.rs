//! Fixed and sliding windows for one key, in 16 bytes.
//!
//! Windows are aligned to multiples of the quota's period since the UNIX epoch, or to the
//! origin the builder was given, as for a [`Bucket`](crate::Bucket). Because a key's
//! requests are admitted in arrival order, a key only ever commits to its latest window or a
//! later one, so its state is that window and two counts: tokens in the window (`cur`) and
//! in the one before it (`prev`).
//!
//! The state is stored as the instant it stops mattering (the end of the window for a fixed
//! window, the end of the next one for a sliding window, whose estimate still carries the
//! count), from which the window itself follows.

use std::num::NonZeroU64;

use super::rule::{Admit, Rule, Slot, View};
use crate::bucket::{sliding_carried, sliding_fits, Align};
use crate::{Algorithm, Quota};

/// A key's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Windows {
    /// When the state stops mattering.
    expires: NonZeroU64,
    /// Tokens in the latest window.
    cur: u32,
    /// Tokens in the window before it.
    prev: u32,
}

impl Slot for Windows {
    #[inline]
    fn expires(&self) -> u64 {
        self.expires.get()
    }
}

/// Windows of `width` ns, `limit` tokens each, their boundaries where
/// `(t + phase) % width == 0`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowRule {
    limit: u64,
    width: u64,
    phase: u64,
    /// The two-window estimate (else fixed windows).
    sliding: bool,
}

/// A key's windows, decoded: the latest window and its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    w: u64,
    cur: u64,
    prev: u64,
}

impl WindowRule {
    /// Windows whose boundaries fall as `align` says, `now` being the clock's reading.
    pub(crate) fn new(quota: Quota, algorithm: Algorithm, align: Align, now: u64) -> Self {
        let width = quota.period_ns();
        Self::with_phase(quota, algorithm, align.phase(width, now))
    }

    fn with_phase(quota: Quota, algorithm: Algorithm, phase: u64) -> Self {
        WindowRule {
            limit: u64::from(quota.count()),
            width: quota.period_ns(),
            phase,
            sliding: algorithm == Algorithm::SlidingWindow,
        }
    }

    #[inline]
    fn index(&self, t: u64) -> u64 {
        (t + self.phase) / self.width
    }

    #[inline]
    fn start(&self, w: u64) -> u64 {
        (w * self.width).saturating_sub(self.phase)
    }

    /// Windows after the latest one during which its counts still matter.
    fn tail(&self) -> u64 {
        u64::from(self.sliding)
    }

    fn decode(&self, s: &Windows) -> Counts {
        Counts {
            w: self.index(s.expires.get() - 1) - self.tail(),
            cur: u64::from(s.cur),
            prev: u64::from(s.prev),
        }
    }

    fn encode(&self, c: Counts) -> Windows {
        let expires = self.start(c.w + 1 + self.tail());
        Windows {
            expires: NonZeroU64::new(expires).unwrap_or(NonZeroU64::MIN),
            // Counts never exceed the limit, a `u32`.
            cur: u32::try_from(c.cur).unwrap_or(u32::MAX),
            prev: u32::try_from(c.prev).unwrap_or(u32::MAX),
        }
    }

    /// The counts of window `w` (≥ the latest window of `c`) and of the one before it.
    fn at_window(c: Counts, w: u64) -> (u64, u64) {
        match w - c.w {
            0 => (c.cur, c.prev),
            1 => (0, c.cur),
            _ => (0, 0),
        }
    }

    /// The previous window's share still counted by the sliding estimate at `t` in window `w`.
    fn carried(&self, prev: u64, w: u64, t: u64) -> u64 {
        if !self.sliding {
            return 0;
        }
        sliding_carried(prev, self.start(w + 1).saturating_sub(t), self.width)
    }

    /// The earliest instant `≥ not_before` in window `w` at which `tokens` more fit.
    fn fits(&self, w: u64, (cur, prev): (u64, u64), tokens: u64, not_before: u64) -> Option<u64> {
        let prev = if self.sliding { prev } else { 0 };
        let window = (self.start(w), self.start(w + 1));
        sliding_fits(
            (self.limit, self.width),
            window,
            (cur, prev),
            tokens,
            not_before,
        )
    }

    /// Admit after the counts `c` (of `before`, if any): the new counts and the instant, or
    /// the wait.
    fn decide(
        &self,
        c: Counts,
        before: Option<&Windows>,
        now: u64,
        tokens: u64,
        max_wait: u64,
    ) -> Result<Admit, u64> {
        let mut w = c.w.max(self.index(now));
        // Ends within three windows: two windows after the latest, nothing counts.
        let at = loop {
            if let Some(t) = self.fits(w, Self::at_window(c, w), tokens, now) {
                break t;
            }
            w += 1;
        };
        if at > now.saturating_add(max_wait) {
            return Err(at - now);
        }
        let (cur, prev) = Self::at_window(c, w);
        let after = self.encode(Counts {
            w,
            cur: cur + tokens,
            prev,
        });
        Ok(Admit {
            at,
            mark: pack(&after),
            before: before.map_or([0; 2], pack),
        })
    }

    /// Tokens that fit at `t` after the counts `c`, ignoring anything committed after `t`.
    fn available(&self, c: Counts, t: u64) -> u64 {
        let w = self.index(t);
        if w < c.w {
            // Reservations in later windows do not count at `t` (as in a bucket's snapshot).
            let here = if w + 1 == c.w { c.prev } else { 0 };
            return self.limit.saturating_sub(here);
        }
        let (cur, prev) = Self::at_window(c, w);
        self.limit.saturating_sub(cur + self.carried(prev, w, t))
    }

    /// Nanoseconds from `t` until the window of `t` ends, if anything counts in it.
    fn reset(&self, c: Counts, t: u64) -> u64 {
        let w = self.index(t);
        if w < c.w || w > c.w + self.tail() {
            return 0;
        }
        self.start(w + 1) - t
    }
}

fn pack(s: &Windows) -> [u64; 2] {
    // `expires` is never zero: `[0, _]` means no state.
    [s.expires.get(), u64::from(s.cur) << 32 | u64::from(s.prev)]
}

fn unpack(mark: &[u64; 2]) -> Windows {
    Windows {
        expires: NonZeroU64::new(mark[0]).unwrap_or(NonZeroU64::MIN),
        cur: (mark[1] >> 32) as u32,
        prev: mark[1] as u32,
    }
}

impl Rule for WindowRule {
    type State = Windows;

    fn capacity(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn admit(
        &self,
        state: &mut Windows,
        now: u64,
        tokens: u64,
        max_wait: u64,
    ) -> Result<Admit, u64> {
        let admit = self.decide(self.decode(state), Some(state), now, tokens, max_wait)?;
        *state = unpack(&admit.mark);
        Ok(admit)
    }

    #[inline]
    fn admit_new(&self, now: u64, tokens: u64, max_wait: u64) -> Result<(Windows, Admit), u64> {
        let empty = Counts {
            w: self.index(now),
            cur: 0,
            prev: 0,
        };
        let admit = self.decide(empty, None, now, tokens, max_wait)?;
        Ok((unpack(&admit.mark), admit))
    }

    fn refund(&self, state: &mut Windows, _tokens: u64, admit: &Admit, now: u64) -> bool {
        if pack(state) != admit.mark {
            return false;
        }
        // Back to the state before: a reservation may have moved the key to a later window,
        // so taking the tokens off the latest count would lose the counts it moved past.
        if admit.before[0] == 0 {
            return true; // a new key: unused again
        }
        *state = unpack(&admit.before);
        state.expires() <= now
    }

    fn status(&self, admit: &Admit, at: u64) -> (u64, u64) {
        let c = self.decode(&unpack(&admit.mark));
        (self.available(c, at), self.reset(c, at))
    }

    fn view(&self, state: Option<&Windows>, now: u64) -> View {
        let Some(s) = state.filter(|s| s.expires() > now) else {
            return View {
                available: self.limit,
                next_in: 0,
                full_in: 0,
            };
        };
        let c = self.decode(s);
        let available = self.available(c, now);
        let next_in = if available > 0 {
            0
        } else {
            self.decide(c, None, now, 1, u64::MAX / 4)
                .map_or(0, |a| a.at - now)
        };
        View {
            available,
            next_in,
            full_in: s.expires() - now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn rule(algorithm: Algorithm) -> WindowRule {
        // 3 per 100 ms, boundaries at multiples of 100 ms.
        WindowRule::with_phase(Quota::new(3, Duration::from_millis(100)), algorithm, 0)
    }

    #[test]
    fn fixed_fills_windows_in_order() {
        let r = rule(Algorithm::FixedWindow);
        let (mut s, a) = r.admit_new(10 * MS, 2, 0).unwrap();
        assert_eq!(a.at, 10 * MS);
        assert_eq!(s.expires(), 100 * MS);
        assert_eq!(r.admit(&mut s, 20 * MS, 2, 0), Err(80 * MS));
        r.admit(&mut s, 20 * MS, 1, 0).unwrap();
        assert_eq!(r.view(Some(&s), 50 * MS).available, 0);
        assert_eq!(r.view(Some(&s), 50 * MS).next_in, 50 * MS);
        // A reservation in the next window; a later request cannot go before it.
        let res = r.admit(&mut s, 50 * MS, 3, 60 * MS).unwrap();
        assert_eq!(res.at, 100 * MS);
        assert_eq!(
            r.admit(&mut s, 50 * MS, 1, u64::MAX / 4).unwrap().at,
            200 * MS
        );
        // Once its windows have passed, the key is as if unused.
        assert_eq!(r.view(Some(&s), 350 * MS).available, 3);
    }

    #[test]
    fn sliding_carries_the_previous_window() {
        let r = rule(Algorithm::SlidingWindow);
        let (mut s, _) = r.admit_new(90 * MS, 3, 0).unwrap();
        // At 110 ms, 90 % of the previous 3 still counts: ceil(2.7) = 3.
        // One token fits once ceil(3 · left / 100) ≤ 2: left ≤ 66.6 ms, at 133.4 ms.
        let wait = r.admit(&mut s, 110 * MS, 1, 0).unwrap_err();
        assert_eq!(110 * MS + wait, 200 * MS - 66_666_666);
        let a = r.admit(&mut s, 110 * MS + wait, 1, 0).unwrap();
        assert_eq!(r.status(&a, a.at).0, 0);
        assert_eq!(s.expires(), 300 * MS);
        // Two windows later nothing counts.
        assert_eq!(r.view(Some(&s), 300 * MS).available, 3);
    }

    #[test]
    fn refund_only_the_last_admission() {
        let r = rule(Algorithm::FixedWindow);
        let (mut s, first) = r.admit_new(0, 1, 0).unwrap();
        let second = r.admit(&mut s, 0, 1, 0).unwrap();
        assert!(!r.refund(&mut s, 1, &first, 0));
        assert_eq!(r.view(Some(&s), 0).available, 1);
        assert!(!r.refund(&mut s, 1, &second, 0));
        assert_eq!(r.view(Some(&s), 0).available, 2);
        assert!(r.refund(&mut s, 1, &first, 0), "unused again");
    }
}
