//! The exact sliding window (sliding log) for one key: the key's admissions within the last
//! period, on the heap.

use super::rule::{Admit, Rule, Slot, View};
use crate::bucket::{Log, Window};
use crate::Quota;

/// A key's log: about 56 bytes plus 16 per admission within the last period.
pub(crate) type KeyLog = Box<Log>;

impl Slot for Box<Log> {
    #[inline]
    fn expires(&self) -> u64 {
        self.clear_at()
    }
}

/// At most `limit` tokens in every window of `width` ns.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogRule {
    limit: u64,
    width: u64,
}

impl LogRule {
    pub(crate) fn new(quota: Quota) -> Self {
        LogRule {
            limit: u64::from(quota.count()),
            width: quota.period_ns(),
        }
    }
}

impl Rule for LogRule {
    type State = KeyLog;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn admit(&self, log: &mut KeyLog, now: u64, tokens: u64, max_wait: u64) -> Result<Admit, u64> {
        log.prune(now);
        // In arrival order: never before the latest admission or reservation.
        let not_before = log.last().map_or(now, |t| t.max(now));
        let at = log.earliest(tokens, not_before);
        if at > now.saturating_add(max_wait) {
            return Err(at - now);
        }
        log.commit(tokens, at);
        // The log cannot be recorded in two words: describe the admission now.
        let reset = log.clear_in(at);
        Ok(Admit {
            at,
            mark: [log.available(at), reset],
            before: [0; 2],
        })
    }

    fn admit_new(&self, now: u64, tokens: u64, max_wait: u64) -> Result<(KeyLog, Admit), u64> {
        let mut log = Box::new(Log::new(self.limit, self.width));
        let admit = self.admit(&mut log, now, tokens, max_wait)?;
        Ok((log, admit))
    }

    fn refund(&self, log: &mut KeyLog, tokens: u64, admit: &Admit, now: u64) -> bool {
        log.release(tokens, admit.at);
        log.clear_at() <= now
    }

    fn status(&self, admit: &Admit, _at: u64) -> (u64, u64) {
        (admit.mark[0], admit.mark[1])
    }

    fn view(&self, log: Option<&KeyLog>, now: u64) -> View {
        let Some(log) = log else {
            return View {
                available: self.limit,
                next_in: 0,
                full_in: 0,
            };
        };
        let available = log.available(now);
        let next_in = if available > 0 {
            0
        } else {
            let not_before = log.last().map_or(now, |t| t.max(now));
            log.earliest(1, not_before) - now
        };
        View {
            available,
            next_in,
            full_in: log.clear_at().saturating_sub(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn exact_per_key_window() {
        let rule = LogRule::new(Quota::new(3, Duration::from_nanos(100)));
        let (mut log, _) = rule.admit_new(0, 1, 0).unwrap();
        let second = rule.admit(&mut log, 50, 2, 0).unwrap();
        assert_eq!(rule.status(&second, 50), (0, 100));
        assert_eq!(rule.admit(&mut log, 60, 1, 0), Err(40));
        assert_eq!(rule.admit(&mut log, 60, 2, 0), Err(90));
        // Reserved for 150; a later one of 1 goes after it.
        assert_eq!(rule.admit(&mut log, 60, 2, 100).unwrap().at, 150);
        assert_eq!(rule.admit(&mut log, 60, 1, 100).unwrap().at, 150);
        // Now, only the 2 of 50 count (the view ignores reservations after it).
        assert_eq!(rule.view(Some(&log), 120).available, 1);
        assert_eq!(log.expires(), 250);
    }
}
