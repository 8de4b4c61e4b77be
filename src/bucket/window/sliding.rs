//! Sliding window, estimated from two aligned fixed windows.
//!
//! The arithmetic of the estimate ([`carried`], [`fits`]) is written once here and used by
//! both the bucket's [`Sliding`] model and the keyed store's per-key windows.

use super::aligned::Aligned;
use super::Align;
use super::Window;

/// `prev · left / width`, rounded up: the share of the previous window's `prev` tokens the
/// estimate still counts with `left` ns of the current window to go.
#[inline]
pub(crate) fn carried(prev: u64, left: u64, width: u64) -> u64 {
    // At most `prev` (left ≤ width), so the narrowing is exact.
    (u128::from(prev) * u128::from(left)).div_ceil(u128::from(width)) as u64
}

/// The earliest instant `≥ not_before` in the window `[start, end)` (of `width` ns, `limit`
/// tokens) at which `tokens` more fit, with `cur` tokens counted in it and `prev` in the
/// window before; `None` when they do not fit in this window. `prev = 0` is a fixed window.
#[inline]
pub(crate) fn fits(
    (limit, width): (u64, u64),
    (start, end): (u64, u64),
    (cur, prev): (u64, u64),
    tokens: u64,
    not_before: u64,
) -> Option<u64> {
    if cur + tokens > limit {
        return None;
    }
    let t = not_before.max(start);
    let room = limit - cur - tokens;
    if carried(prev, end.saturating_sub(t), width) <= room {
        return Some(t);
    }
    // The carried share falls linearly: ceil(prev · (end − t) / width) ≤ room
    // ⇔ t ≥ end − ⌊room · width / prev⌋ (prev > 0 here: else nothing is carried).
    let reach = (u128::from(room) * u128::from(width) / u128::from(prev)) as u64;
    let t = end.saturating_sub(reach).max(t);
    (t < end).then_some(t)
}

/// The estimate at `t` in window `w` is `count(w − 1) · (1 − f) + count(w)`, with `f` the
/// elapsed fraction of `w`.
#[derive(Debug)]
pub(crate) struct Sliding(Aligned);

impl Sliding {
    pub(crate) fn new(limit: u64, width: u64, now: u64, align: Align) -> Self {
        Sliding(Aligned::new(limit, width, now, 1, align))
    }

    /// `count(w−1) · (window time left at t) / width`, rounded up.
    fn carried(&self, w: u64, t: u64) -> u64 {
        let a = &self.0;
        let prev = w.checked_sub(1).map_or(0, |p| a.count(p));
        carried(prev, a.start(w + 1).saturating_sub(t), a.width)
    }

    /// The tokens counted in window `w` and carried from the one before.
    fn counts(&self, w: u64) -> (u64, u64) {
        let a = &self.0;
        (a.count(w), w.checked_sub(1).map_or(0, |p| a.count(p)))
    }
}

impl Window for Sliding {
    fn earliest(&self, tokens: u64, not_before: u64) -> u64 {
        let a = &self.0;
        let mut w = a.index(not_before);
        loop {
            let window = (a.start(w), a.start(w + 1));
            if let Some(t) = fits(
                (a.limit, a.width),
                window,
                self.counts(w),
                tokens,
                not_before,
            ) {
                return t;
            }
            w += 1;
        }
    }

    fn commit(&mut self, tokens: u64, at: u64) {
        self.0.commit(tokens, at);
    }

    fn release(&mut self, tokens: u64, at: u64) {
        self.0.release(tokens, at);
    }

    fn prune(&mut self, now: u64) {
        self.0.prune(now, 1);
    }

    fn available(&self, now: u64) -> u64 {
        let a = &self.0;
        let w = a.index(now);
        a.limit.saturating_sub(a.count(w) + self.carried(w, now))
    }

    fn clear_in(&self, now: u64) -> u64 {
        let a = &self.0;
        let w = a.index(now);
        if a.count(w) > 0 {
            a.start(w + 2) - now
        } else if a.count(w.saturating_sub(1)) > 0 {
            a.start(w + 1) - now
        } else {
            0
        }
    }

    fn ramp_until(&self, end: u64) -> u64 {
        end.saturating_add(self.0.width)
    }

    fn set_limit(&mut self, limit: u64, width: u64, now: u64) {
        let next = self.0.reset(limit, width, now, 1);
        self.carry_into(next, now);
    }

    fn follow_rate(&mut self, limit: u64, width: u64, now: u64) {
        let next = self.0.reset_keeping_end(limit, width, now, 1);
        self.carry_into(next, now);
    }
}

impl Sliding {
    /// Move to the emptied windows `next` with what counts at `now` (at most their limit).
    fn carry_into(&mut self, mut next: Aligned, now: u64) {
        let limit = next.limit;
        let w = self.0.index(now);
        let current = self.0.count(w);
        let used = limit - self.available(now).min(limit);
        // What counts now, split as it was: the current window's own tokens stay in the
        // current window, and the share carried from the one before is carried again,
        // fading out over what is left of the new current window. Folded into the current
        // window, the carried share would count in full until its end and then be carried
        // once more: a rate control changes the limit many times a second, and each change
        // would carry the same tokens again, never letting them fade (a sliding window
        // pushed back once and then raised step by step admitted 0 to 6 a second at a rate
        // of 60).
        let own = current.min(used);
        next.commit(own, now);
        let carried = used - own;
        if carried > 0 {
            let w = next.index(now);
            let left = next.start(w.saturating_add(1)).saturating_sub(now);
            // `carried(prev, left, width) ≥ carried` at `now`, then falling to 0 by the end
            // of the window.
            let prev = if left == 0 {
                0
            } else {
                (u128::from(carried) * u128::from(next.width)).div_ceil(u128::from(left))
            };
            match (w.checked_sub(1), u64::try_from(prev)) {
                (Some(p), Ok(prev)) if left > 0 => {
                    if let Some(c) = next.slot(p) {
                        *c = prev;
                    }
                }
                // No window before (the clock's first) or no time left: count it now.
                _ => next.commit(carried, now),
            }
        }
        self.0 = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_window_fades_linearly() {
        let mut s = Sliding::new(10, 1000, 0, Align::At(0));
        s.commit(10, 0);
        assert_eq!(s.earliest(1, 0), 1000 + 100);
        assert_eq!(s.earliest(5, 0), 1500);
        assert_eq!(s.earliest(10, 0), 2000);
        s.commit(1, 1100);
        assert_eq!(s.available(1100), 0);
        assert_eq!(s.available(1500), 4);
    }
}
