//! [`Sends`]: the requests sent while the ramp, a search or a verification runs.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Sends remembered while they run, for requests still in flight.
const SENDS: usize = 256;

/// Every request sent while the ramp of a configured rate, a search or a verification runs,
/// and how long after the one before it: a server without a burst admits a request only that
/// far behind the one before, so its answer says whether the server's rate is above
/// `1 / gap`.
#[derive(Debug, Default)]
pub(super) struct Sends {
    /// In order of sending: `(sent, gap to the one before)`, no gap for the first.
    sends: VecDeque<(Instant, Option<Duration>)>,
    /// The latest request sent.
    last: Option<Instant>,
}

impl Sends {
    /// Keep a send and its gap to the one before it.
    pub(super) fn keep(&mut self, sent: Instant) {
        let gap = self.last.map(|last| sent.saturating_duration_since(last));
        self.last = Some(sent.max(self.last.unwrap_or(sent)));
        if self.sends.len() == SENDS {
            self.sends.pop_front();
        }
        // Kept in order of sending, for the search by instant.
        let at = self.sends.partition_point(|(t, _)| *t <= sent);
        self.sends.insert(at, (sent, gap));
    }

    /// No send kept: the next one tests nothing.
    pub(super) fn forget(&mut self) {
        self.sends.clear();
        self.last = None;
    }

    /// The send at `sent`, if kept.
    pub(super) fn find(&self, sent: Instant) -> Option<(Instant, Option<Duration>)> {
        let i = self.sends.binary_search_by_key(&sent, |(t, _)| *t).ok()?;
        Some(self.sends[i])
    }

    /// The sends before `sent`.
    pub(super) fn before(
        &self,
        sent: Instant,
    ) -> impl Iterator<Item = (Instant, Option<Duration>)> + '_ {
        self.sends
            .iter()
            .copied()
            .take_while(move |(t, _)| *t < sent)
    }
}
