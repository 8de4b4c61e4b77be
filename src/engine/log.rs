//! The exact sliding window (sliding log): at most `limit` tokens in every window of `width`
//! ns, from a log of the admissions within the last `width`.
//!
//! Decisions are amortised O(1): expired entries leave from the front once, admissions join
//! at the back; only a request that does not fit walks the oldest entries to find when it
//! will.

use std::collections::VecDeque;

use super::{Admit, Engine, Packed, Phase};
use crate::Quota;

/// At most `limit` tokens in every window of `width` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Log {
    limit: u64,
    width: u64,
}

/// Admissions (instant, tokens) in time order, with their running total.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    entries: VecDeque<(u64, u64)>,
    total: u64,
}

/// A key's log: 48 bytes plus 16 per admission within the last period, on the heap.
#[derive(Debug)]
pub(crate) struct KeyLog {
    width: u64,
    log: Entries,
}

impl Packed for Box<KeyLog> {
    #[inline]
    fn expires(&self) -> u64 {
        self.log.last().map_or(0, |t| t.saturating_add(self.width))
    }
}

impl Entries {
    /// The instant of the latest admission or booking.
    fn last(&self) -> Option<u64> {
        self.entries.back().map(|e| e.0)
    }

    /// Tokens of entries after `t` (bookings), walking from the back.
    fn after(&self, t: u64) -> u64 {
        self.entries
            .iter()
            .rev()
            .take_while(|e| e.0 > t)
            .map(|e| e.1)
            .sum()
    }
}

impl Log {
    pub(crate) fn new(quota: Quota) -> Self {
        Log {
            limit: u64::from(quota.count()),
            width: quota.period_ns(),
        }
    }

    fn ends(&self, at: u64) -> u64 {
        at.saturating_add(self.width)
    }
}

impl Engine for Log {
    type State = Entries;
    type Packed = Box<KeyLog>;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn empty(&self) -> Entries {
        Entries::default()
    }

    fn earliest(&self, log: &Entries, cost: u64, from: u64) -> u64 {
        let from = log.last().map_or(from, |last| last.max(from));
        // An entry at x counts at t while x > t − width. From `from` on, drop the oldest
        // entries until the rest fit: the last one dropped stops counting at x + width.
        let mut total = log.total + cost;
        let mut t = from;
        for &(x, n) in &log.entries {
            let expired = self.ends(x) <= from;
            if !expired && total <= self.limit {
                break;
            }
            total -= n;
            if !expired {
                t = t.max(self.ends(x));
            }
        }
        t
    }

    fn commit(&self, log: &mut Entries, cost: u64, at: u64) -> Admit {
        log.total += cost;
        if log.entries.back().is_none_or(|e| e.0 <= at) {
            log.entries.push_back((at, cost));
        } else {
            let i = log.entries.partition_point(|e| e.0 <= at);
            log.entries.insert(i, (at, cost));
        }
        Admit {
            at,
            cost,
            after: [0; 3],
            before: [0; 3],
        }
    }

    /// The log does not fit in a record: the tokens left at the admission's instant, and its
    /// period (it counts until `at + width`).
    fn describe(&self, log: &Entries, admit: &mut Admit) {
        let at = admit.at;
        admit.after = [self.available(log, at), self.ends(at) - at, 0];
    }

    fn forget(&self, log: &mut Entries, now: u64) {
        while let Some(&(x, n)) = log.entries.front() {
            if self.ends(x) > now {
                break;
            }
            log.entries.pop_front();
            log.total -= n;
        }
    }

    fn undo(&self, log: &mut Entries, admit: &Admit) {
        self.release(log, admit.cost, admit.at);
    }

    fn release(&self, log: &mut Entries, cost: u64, at: u64) {
        // An admission at `at` of at least `cost`: all of it or, settled lower, part of it.
        if let Some(i) = log.entries.iter().rposition(|e| e.0 == at && e.1 >= cost) {
            log.entries[i].1 -= cost;
            if log.entries[i].1 == 0 {
                log.entries.remove(i);
            }
            log.total -= cost;
        }
    }

    fn status(&self, admit: &Admit) -> (u64, u64) {
        (admit.after[0], admit.after[1])
    }

    fn available(&self, log: &Entries, now: u64) -> u64 {
        let expired: u64 = log
            .entries
            .iter()
            .take_while(|e| self.ends(e.0) <= now)
            .map(|e| e.1)
            .sum();
        let live = log.total - expired - log.after(now);
        self.limit.saturating_sub(live)
    }

    fn expires(&self, log: &Entries) -> u64 {
        log.last().map_or(0, |t| self.ends(t))
    }

    fn restart(&self, _: &mut Entries, end: u64) -> u64 {
        end.saturating_add(self.width)
    }

    fn with_quota(&self, log: &mut Entries, quota: Quota, _: Phase, now: u64) -> Self {
        // Keep the log; never make more available at `now` than under the old limit.
        let new = Log::new(quota);
        let target = self.available(log, now).min(new.limit);
        let available = new.available(log, now);
        if available > target {
            new.commit(log, available - target, now);
        }
        new
    }

    fn pack(&self, log: Entries) -> Box<KeyLog> {
        Box::new(KeyLog {
            width: self.width,
            log,
        })
    }

    fn unpacked<R>(&self, packed: &mut Box<KeyLog>, f: impl FnOnce(&mut Entries) -> R) -> R {
        f(&mut packed.log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Price;
    use std::time::Duration;

    fn log(count: u32, width_ns: u64) -> Log {
        Log::new(Quota::new(count, Duration::from_nanos(width_ns)))
    }

    #[test]
    fn exact_window() {
        let l = log(3, 100);
        let mut s = l.empty();
        l.commit(&mut s, 1, 0);
        l.commit(&mut s, 2, 50);
        assert_eq!(l.earliest(&s, 1, 60), 100);
        assert_eq!(l.earliest(&s, 2, 60), 150);
        assert_eq!(l.earliest(&s, 3, 60), 150);
        l.forget(&mut s, 120);
        assert_eq!(l.view(&s, 120).available, 1);
        assert_eq!(l.view(&s, 120).full_in, 30);
        // A booking does not count before its instant, and later ones go after it.
        l.commit(&mut s, 1, 200);
        assert_eq!(l.view(&s, 120).available, 1);
        assert_eq!(l.earliest(&s, 2, 200), 200);
        assert_eq!(l.earliest(&s, 3, 200), 300);
        l.release(&mut s, 1, 200);
        assert_eq!(l.earliest(&s, 3, 200), 200);
    }

    #[test]
    fn exact_per_key_window() {
        let l = log(3, 100);
        let mut s = l.empty();
        l.admit(&mut s, 0, Price::One(1), 0).unwrap();
        let second = l.admit(&mut s, 50, Price::One(2), 0).unwrap();
        assert_eq!(l.status(&second), (0, 100));
        assert_eq!(l.admit(&mut s, 60, Price::One(1), 0), Err(40));
        assert_eq!(l.admit(&mut s, 60, Price::One(2), 0), Err(90));
        // Booked for 150; a later one of 1 goes after it.
        assert_eq!(l.admit(&mut s, 60, Price::One(2), 100).unwrap().at, 150);
        assert_eq!(l.admit(&mut s, 60, Price::One(1), 100).unwrap().at, 150);
        // Now, only the 2 of 50 count (the view ignores bookings after it).
        assert_eq!(l.view(&s, 120).available, 1);
        let packed = l.pack(s);
        assert_eq!(packed.expires(), 250);
        assert_eq!(std::mem::size_of::<KeyLog>(), 48);
    }

    #[test]
    fn a_new_limit_never_adds_to_what_is_available() {
        let l = log(3, 100);
        let mut s = l.empty();
        l.commit(&mut s, 2, 0);
        let more = l.with_quota(
            &mut s,
            Quota::new(6, Duration::from_nanos(100)),
            Phase::KeepEnd,
            10,
        );
        assert_eq!(more.view(&s, 10).available, 1);
        // ... and what it counted leaves the window as the rest does.
        assert_eq!(more.view(&s, 100).available, 3);
        assert_eq!(more.view(&s, 110).available, 6);
    }
}
