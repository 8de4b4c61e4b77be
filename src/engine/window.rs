//! Fixed and sliding windows, in two counts.
//!
//! Windows of `width` ns hold `limit` tokens each, their boundaries where
//! `(t + phase) % width == 0`. The sliding window admits when
//! `prev · (time left in the window) / width + cur + cost ≤ limit`: the previous window's
//! count is assumed spread evenly over it.
//!
//! Because requests are counted in arrival order, a limit only ever commits to its latest
//! window or a later one, so the state is that window and two counts: tokens in it (`cur`)
//! and in the one before it (`prev`). Per key it packs into 16 bytes: the instant the state
//! stops mattering (from which the window follows) and the two counts.

use std::num::NonZeroU64;

use super::{Admit, Engine, Packed};
use crate::{Algorithm, Quota};

/// Where the windows of a new period fall ([`Engine::with_quota`]). A period that does not
/// change keeps its windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Boundaries where `(t + phase) % width == 0`.
    At(u64),
    /// The window in progress ends where it ended (or at the first boundary before that, if
    /// the new period is shorter than what was left of it). A rate control changes the period
    /// many times a second: re-aligned each time, the tokens counted at `now` would count
    /// again in a window ending later, and never fade.
    KeepEnd,
}

/// The windows' shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Windows {
    limit: u64,
    width: u64,
    phase: u64,
    /// The two-window estimate (else fixed windows).
    sliding: bool,
}

/// The latest window a limit committed to and its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    w: u64,
    /// Tokens in window `w`.
    cur: u64,
    /// Tokens in window `w − 1` (for a sliding window that followed a new rate, the count
    /// that carries what still counted then).
    prev: u64,
}

impl Counts {
    fn words(self) -> [u64; 3] {
        [self.w, self.cur, self.prev]
    }

    fn from_words([w, cur, prev]: [u64; 3]) -> Self {
        Counts { w, cur, prev }
    }
}

/// A key's windows: 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyWindows {
    /// When the state stops mattering: the end of the window (fixed) or of the next one
    /// (sliding, whose estimate still carries the count).
    expires: NonZeroU64,
    cur: u32,
    prev: u32,
}

impl Packed for KeyWindows {
    #[inline]
    fn expires(&self) -> u64 {
        self.expires.get()
    }
}

/// `prev · left / width`, rounded up: the share of the previous window's `prev` tokens the
/// estimate still counts with `left` ns of the current window to go.
#[inline]
fn carried(prev: u64, left: u64, width: u64) -> u64 {
    // At most `prev` (left ≤ width), so the narrowing is exact.
    (u128::from(prev) * u128::from(left)).div_ceil(u128::from(width)) as u64
}

impl Windows {
    /// Windows of `quota`'s period whose boundaries fall where `(t + phase) % period == 0`.
    pub(crate) fn new(quota: Quota, algorithm: Algorithm, phase: u64) -> Self {
        Windows {
            limit: u64::from(quota.count()),
            width: quota.period_ns(),
            phase,
            sliding: algorithm == Algorithm::SlidingWindow,
        }
    }

    #[inline]
    fn index(&self, t: u64) -> u64 {
        ((u128::from(t) + u128::from(self.phase)) / u128::from(self.width)) as u64
    }

    #[inline]
    fn start(&self, w: u64) -> u64 {
        w.saturating_mul(self.width).saturating_sub(self.phase)
    }

    /// Windows after the latest one during which its counts still matter.
    fn tail(&self) -> u64 {
        u64::from(self.sliding)
    }

    /// The counts of window `w` (≥ the latest window of `c`) and of the one before it.
    fn at_window(c: Counts, w: u64) -> (u64, u64) {
        match w - c.w {
            0 => (c.cur, c.prev),
            1 => (0, c.cur),
            _ => (0, 0),
        }
    }

    /// The earliest instant `≥ not_before` in window `w` at which `tokens` more fit after
    /// `cur` in it and `prev` in the one before; `None` when they do not fit in it.
    fn fits(&self, w: u64, (cur, prev): (u64, u64), tokens: u64, not_before: u64) -> Option<u64> {
        let prev = if self.sliding { prev } else { 0 };
        let (start, end) = (self.start(w), self.start(w.saturating_add(1)));
        if cur.saturating_add(tokens) > self.limit {
            return None;
        }
        let t = not_before.max(start);
        let room = self.limit - cur - tokens;
        if prev == 0 || carried(prev, end.saturating_sub(t), self.width) <= room {
            return Some(t);
        }
        // The carried share falls linearly: ceil(prev · (end − t) / width) ≤ room
        // ⇔ t ≥ end − ⌊room · width / prev⌋ (prev > 0 here: else nothing is carried).
        let reach = (u128::from(room) * u128::from(self.width) / u128::from(prev)) as u64;
        let t = end.saturating_sub(reach).max(t);
        (t < end).then_some(t)
    }

    /// Nanoseconds from `t` until the window of `t` ends, if anything counts in it.
    fn reset(&self, c: Counts, t: u64) -> u64 {
        let w = self.index(t);
        if w < c.w || w > c.w.saturating_add(self.tail()) {
            return 0;
        }
        self.start(w.saturating_add(1)).saturating_sub(t)
    }
}

impl Engine for Windows {
    type State = Counts;
    type Packed = KeyWindows;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn empty(&self) -> Counts {
        Counts {
            w: 0,
            cur: 0,
            prev: 0,
        }
    }

    #[inline]
    fn earliest(&self, c: &Counts, cost: u64, from: u64) -> u64 {
        let mut w = c.w.max(self.index(from));
        // Ends within three windows: two windows after the latest, nothing counts.
        loop {
            if let Some(t) = self.fits(w, Self::at_window(*c, w), cost, from) {
                return t;
            }
            w += 1;
        }
    }

    #[inline]
    fn commit(&self, c: &mut Counts, cost: u64, at: u64) -> Admit {
        let before = *c;
        let w = self.index(at);
        if w >= c.w {
            let (cur, prev) = Self::at_window(*c, w);
            *c = Counts {
                w,
                cur: cur.saturating_add(cost),
                prev,
            };
        } else if w.saturating_add(1) == c.w {
            c.prev = c.prev.saturating_add(cost);
        }
        Admit {
            at,
            cost,
            after: c.words(),
            before: before.words(),
        }
    }

    fn undo(&self, c: &mut Counts, admit: &Admit) {
        // Back to the state before: a booking may have moved the limit to a later window, so
        // taking the tokens off the latest count would lose the counts it moved past.
        if c.words() == admit.after {
            *c = Counts::from_words(admit.before);
        }
    }

    fn release(&self, c: &mut Counts, cost: u64, at: u64) {
        let w = self.index(at);
        if w == c.w {
            c.cur = c.cur.saturating_sub(cost);
        } else if w.saturating_add(1) == c.w {
            c.prev = c.prev.saturating_sub(cost);
        }
    }

    fn status(&self, admit: &Admit) -> (u64, u64) {
        let c = Counts::from_words(admit.after);
        (self.available(&c, admit.at), self.reset(c, admit.at))
    }

    fn available(&self, c: &Counts, t: u64) -> u64 {
        let w = self.index(t);
        if w < c.w {
            // Bookings in later windows do not count at `t`.
            let here = if w.saturating_add(1) == c.w {
                c.prev
            } else {
                0
            };
            return self.limit.saturating_sub(here);
        }
        let (cur, prev) = Self::at_window(*c, w);
        let carried = if self.sliding {
            carried(
                prev,
                self.start(w.saturating_add(1)).saturating_sub(t),
                self.width,
            )
        } else {
            0
        };
        self.limit.saturating_sub(cur.saturating_add(carried))
    }

    fn expires(&self, c: &Counts) -> u64 {
        let last = if c.cur > 0 {
            Some(c.w)
        } else if c.prev > 0 && self.sliding {
            c.w.checked_sub(1)
        } else {
            None
        };
        last.map_or(0, |w| self.start(w.saturating_add(1 + self.tail())))
    }

    fn restart(&self, _: &mut Counts, end: u64) -> u64 {
        if self.sliding {
            end.saturating_add(self.width)
        } else {
            // The first boundary a whole period after the pause: the rest of a window is
            // never let through at once.
            let last = self.index(end.saturating_add(self.width - 1));
            self.start(last.saturating_add(1))
        }
    }

    fn with_quota(&self, c: &mut Counts, quota: Quota, phase: Phase, now: u64) -> Self {
        let width = quota.period_ns();
        let phase = match phase {
            _ if width == self.width => self.phase,
            Phase::At(phase) => phase,
            Phase::KeepEnd => {
                let end = self.start(self.index(now).saturating_add(1));
                (width - end % width) % width
            }
        };
        let new = Windows {
            limit: u64::from(quota.count()),
            width,
            phase,
            sliding: self.sliding,
        };
        let used = new.limit - self.available(c, now).min(new.limit);
        let w = new.index(now);
        let old = self.index(now);
        // What counts now, split as it was: the current window's own tokens stay in the
        // current window, and the share carried from the one before is carried again,
        // fading out over what is left of the new current window. Folded into the current
        // window, the carried share would count in full until its end and then be carried
        // once more: a rate control changes the limit many times a second, and each change
        // would carry the same tokens again, never letting them fade.
        let own = match old.checked_sub(c.w) {
            Some(_) if self.sliding => Self::at_window(*c, old).0.min(used),
            _ => used,
        };
        *c = Counts {
            w,
            cur: own,
            prev: 0,
        };
        let carried = used - own;
        if carried > 0 {
            let left = new.start(w.saturating_add(1)).saturating_sub(now);
            // `carried(prev, left, width) ≥ carried` at `now`, then falling to 0 by the end
            // of the window.
            let prev = (u128::from(carried) * u128::from(width)).div_ceil(u128::from(left.max(1)));
            match (w.checked_sub(1), u64::try_from(prev)) {
                (Some(_), Ok(prev)) if left > 0 => c.prev = prev,
                // No window before (the clock's first) or no time left: count it now.
                _ => c.cur += carried,
            }
        }
        new
    }

    fn pack(&self, c: Counts) -> KeyWindows {
        let expires = self.start(c.w.saturating_add(1 + self.tail()));
        KeyWindows {
            expires: NonZeroU64::new(expires).unwrap_or(NonZeroU64::MIN),
            // A key's counts never exceed the limit, a `u32`.
            cur: u32::try_from(c.cur).unwrap_or(u32::MAX),
            prev: u32::try_from(c.prev).unwrap_or(u32::MAX),
        }
    }

    #[inline]
    fn unpacked<R>(&self, packed: &mut KeyWindows, f: impl FnOnce(&mut Counts) -> R) -> R {
        let w = self.index(packed.expires.get() - 1);
        let mut c = Counts {
            w: w.saturating_sub(self.tail()),
            cur: u64::from(packed.cur),
            prev: u64::from(packed.prev),
        };
        let r = f(&mut c);
        *packed = self.pack(c);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Price;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn windows(algorithm: Algorithm) -> Windows {
        // 3 per 100 ms, boundaries at multiples of 100 ms.
        Windows::new(Quota::new(3, Duration::from_millis(100)), algorithm, 0)
    }

    #[test]
    fn fixed_fills_windows_in_order() {
        let f = windows(Algorithm::FixedWindow);
        let mut s = f.empty();
        let a = f.admit(&mut s, 10 * MS, Price::One(2), 0).unwrap();
        assert_eq!(a.at, 10 * MS);
        assert_eq!(f.expires(&s), 100 * MS);
        assert_eq!(f.admit(&mut s, 20 * MS, Price::One(2), 0), Err(80 * MS));
        f.admit(&mut s, 20 * MS, Price::One(1), 0).unwrap();
        assert_eq!(f.view(&s, 50 * MS).available, 0);
        assert_eq!(f.view(&s, 50 * MS).next_in, 50 * MS);
        // A booking in the next window; a later request cannot go before it.
        let booked = f.admit(&mut s, 50 * MS, Price::One(3), 60 * MS).unwrap();
        assert_eq!(booked.at, 100 * MS);
        assert_eq!(
            f.admit(&mut s, 50 * MS, Price::One(1), u64::MAX / 4)
                .unwrap()
                .at,
            200 * MS
        );
        // Once its windows have passed, the limit is as if unused.
        assert_eq!(f.view(&s, 350 * MS).available, 3);
    }

    #[test]
    fn a_release_gives_the_tokens_back_to_their_window() {
        let f = windows(Algorithm::FixedWindow);
        let mut s = f.empty();
        for _ in 0..3 {
            let t = f.earliest(&s, 1, 10 * MS);
            assert_eq!(t, 10 * MS);
            f.commit(&mut s, 1, t);
        }
        assert_eq!(f.earliest(&s, 1, 10 * MS), 100 * MS);
        f.release(&mut s, 1, 10 * MS);
        assert_eq!(f.earliest(&s, 1, 10 * MS), 10 * MS);
        f.commit(&mut s, 3, 100 * MS);
        assert_eq!(f.earliest(&s, 1, 100 * MS), 200 * MS);
        // Into the window before the latest: still counted where it was.
        f.release(&mut s, 2, 10 * MS);
        f.release(&mut s, 1, 150 * MS);
        assert_eq!(f.view(&s, 150 * MS).available, 1);
        assert_eq!(f.view(&s, 150 * MS).full_in, 50 * MS);
    }

    #[test]
    fn sliding_carries_the_previous_window() {
        let r = windows(Algorithm::SlidingWindow);
        let mut s = r.empty();
        r.admit(&mut s, 90 * MS, Price::One(3), 0).unwrap();
        // At 110 ms, 90 % of the previous 3 still counts: ceil(2.7) = 3.
        // One token fits once ceil(3 · left / 100) ≤ 2: left ≤ 66.6 ms, at 133.4 ms.
        let wait = r.admit(&mut s, 110 * MS, Price::One(1), 0).unwrap_err();
        assert_eq!(110 * MS + wait, 200 * MS - 66_666_666);
        let a = r.admit(&mut s, 110 * MS + wait, Price::One(1), 0).unwrap();
        assert_eq!(r.status(&a).0, 0);
        assert_eq!(r.expires(&s), 300 * MS);
        // Two windows later nothing counts.
        assert_eq!(r.view(&s, 300 * MS).available, 3);
    }

    #[test]
    fn the_previous_window_fades_linearly() {
        let s = Windows::new(
            Quota::new(10, Duration::from_nanos(1000)),
            Algorithm::SlidingWindow,
            0,
        );
        let mut c = s.empty();
        s.commit(&mut c, 10, 0);
        assert_eq!(s.earliest(&c, 1, 0), 1000 + 100);
        assert_eq!(s.earliest(&c, 5, 0), 1500);
        assert_eq!(s.earliest(&c, 10, 0), 2000);
        s.commit(&mut c, 1, 1100);
        assert_eq!(s.view(&c, 1100).available, 0);
        assert_eq!(s.view(&c, 1500).available, 4);
    }

    #[test]
    fn undo_only_the_last_admission() {
        let r = windows(Algorithm::FixedWindow);
        let mut s = r.empty();
        let first = r.admit(&mut s, 0, Price::One(1), 0).unwrap();
        let second = r.admit(&mut s, 0, Price::One(1), 0).unwrap();
        r.undo(&mut s, &first);
        assert_eq!(r.view(&s, 0).available, 1);
        r.undo(&mut s, &second);
        assert_eq!(r.view(&s, 0).available, 2);
        r.undo(&mut s, &first);
        assert_eq!(r.expires(&s), 0, "unused again");
    }

    #[test]
    fn a_key_packs_into_16_bytes_and_back() {
        assert_eq!(std::mem::size_of::<KeyWindows>(), 16);
        for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
            let r = windows(algorithm);
            let mut s = r.empty();
            r.admit(&mut s, 150 * MS, Price::One(2), 0).unwrap();
            r.admit(&mut s, 250 * MS, Price::One(1), 0).unwrap();
            let mut packed = r.pack(s);
            assert_eq!(packed.expires(), r.expires(&s));
            assert_eq!(r.unpacked(&mut packed, |c| *c), s);
        }
    }

    #[test]
    fn a_new_rate_keeps_the_end_of_the_window() {
        // 3 per 100 ms, 2 used at 50 ms; then 6 per 300 ms: the window still ends at 100 ms.
        for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
            let r = windows(algorithm);
            let mut s = r.empty();
            r.admit(&mut s, 50 * MS, Price::One(2), 0).unwrap();
            let quota = Quota::new(6, Duration::from_millis(300));
            let mut kept = s;
            let new = r.with_quota(&mut kept, quota, Phase::KeepEnd, 50 * MS);
            assert_eq!(new.view(&kept, 50 * MS).available, 1);
            assert_eq!(new.reset(kept, 50 * MS), 50 * MS);
            // Laid out from a phase instead, the window ends where that phase says.
            let new = r.with_quota(&mut s, quota, Phase::At(0), 50 * MS);
            assert_eq!(new.view(&s, 50 * MS).available, 1);
            assert_eq!(new.reset(s, 50 * MS), 250 * MS);
        }
    }
}
