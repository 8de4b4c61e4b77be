//! Waiting in front of Redis: what the last replies said about when a limit's tokens fit
//! (a [`Hint`], the wake-up schedule of waiters whose instant lies beyond the booking
//! horizon), per [`RedisBucket`](super::RedisBucket), and per key of a
//! [`RedisKeyed`](super::RedisKeyed) while that key has waiters in this process.
//!
//! Waiters book their instant in Redis, which orders the waiters of every process (a
//! bucket's, or one key's): the hint only tells a waiter whose instant lies beyond the
//! booking horizon when to ask again, so its round trips stay bounded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::backend::Timed;
use crate::extract::KeyDigest;

/// When the Redis bucket is full again, as far as this process knows, in ns since `origin`
/// (0 = nothing known): only a wake-up schedule for waiters, never a refusal. Tokens can be
/// given back in Redis (a cancelled waiter, a release of any process) and the rate can
/// change, so what a reply said may be stale: a decision that could go the other way asks
/// Redis. A waiter sleeps until about the instant its tokens should fit and then asks (or,
/// token and leaky bucket, books within the booking horizon, which usually covers it at
/// once), so its round trips stay bounded.
///
/// For the window algorithms, whose state is no single instant, `lo` and `hi` only hold the
/// end of a pause made by this process, and the last refusal is kept instead: the wait it
/// gave, for a request of at least as many tokens.
#[derive(Debug)]
pub(crate) struct Hint {
    origin: Instant,
    /// From the instant the request was sent: a lower bound (the script ran later).
    lo: AtomicU64,
    /// From the instant the reply came: an upper bound (the script ran earlier).
    hi: AtomicU64,
    /// Windows: the last refusal.
    refusal: Mutex<Refusal>,
    /// Pauses this process made, and those that reached Redis (or failed to).
    pauses: (AtomicU64, AtomicU64),
    /// Pauses made here or heard of from other processes: each voids the bookings made
    /// before it.
    voids: AtomicU64,
    /// Wakes the waiters asleep on a booked instant when this process pauses: the pause
    /// restarts Redis' bucket as empty, which voids their bookings.
    paused: Notify,
    /// Wakes the waiters that wait for the pause to reach Redis before booking again.
    landed: Notify,
    /// Wakes the waiters asleep before booking when the quota changes: they check their
    /// request against it again.
    requota: Notify,
}

/// A refusal of `tokens`: they should fit from `hi`, ns since `origin` (from the instant
/// the reply came).
#[derive(Debug, Default, Clone, Copy)]
struct Refusal {
    tokens: u32,
    hi: u64,
}

impl Default for Hint {
    fn default() -> Self {
        Hint::new()
    }
}

impl Hint {
    pub(crate) fn new() -> Self {
        Hint {
            origin: Instant::now(),
            lo: AtomicU64::new(0),
            hi: AtomicU64::new(0),
            refusal: Mutex::new(Refusal::default()),
            pauses: (AtomicU64::new(0), AtomicU64::new(0)),
            voids: AtomicU64::new(0),
            paused: Notify::new(),
            landed: Notify::new(),
            requota: Notify::new(),
        }
    }

    /// This process is pausing the bucket (its pause is on its way to Redis): the waiters
    /// asleep on a booked instant book again once it is there.
    pub(crate) fn pause_made(&self) {
        self.pauses.0.fetch_add(1, Ordering::AcqRel);
        self.pause_seen();
    }

    /// Another process paused the bucket, in Redis already: the waiters asleep on a booked
    /// instant book again.
    pub(crate) fn pause_seen(&self) {
        self.voids.fetch_add(1, Ordering::AcqRel);
        self.paused.notify_waiters();
    }

    /// A pause this process made reached Redis, or failed to.
    pub(crate) fn pause_done(&self) {
        self.pauses.1.fetch_add(1, Ordering::AcqRel);
        self.landed.notify_waiters();
    }

    /// The quota changed: the waiters asleep before booking check their request again.
    pub(crate) fn quota_changed(&self) {
        self.requota.notify_waiters();
    }

    /// Until the next [`quota_changed`](Self::quota_changed).
    pub(crate) fn next_quota_change(&self) -> Notified<'_> {
        self.requota.notified()
    }

    /// Until a pause is made here or heard of, from `voids` (as [`voids`](Self::voids) read
    /// before booking) on, at most until `at`: whether one was (the booking is void).
    pub(crate) async fn voided_before(&self, voids: u64, at: Instant) -> bool {
        let paused = self.paused.notified();
        tokio::pin!(paused);
        // Listened to first: a pause after this read wakes it.
        paused.as_mut().enable();
        self.voids() != voids || tokio::time::timeout_at(at, paused).await.is_ok()
    }

    /// Until every pause this process made reached Redis (or failed to), at most until the
    /// bucket is full again as far as this process knows (the end of the pause held here):
    /// booked before a pause lands, an instant would fall inside it, voided in Redis, and
    /// be used all the same. Returns whether they landed (else the pause is over anyway).
    pub(crate) async fn pauses_landed(&self) -> bool {
        let made = self.pauses.0.load(Ordering::Acquire);
        let until = self.at(self.hi.load(Ordering::Acquire));
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if self.pauses.1.load(Ordering::Acquire) >= made {
                return true;
            }
            if tokio::time::timeout_at(until, landed).await.is_err() {
                return false;
            }
        }
    }

    /// How many pauses were made here or heard of so far: a booking made after reading it is
    /// void when the count has moved by the time its instant comes.
    pub(crate) fn voids(&self) -> u64 {
        self.voids.load(Ordering::Acquire)
    }

    /// Whether a pause this process made has not reached Redis yet.
    pub(crate) fn pause_pending(&self) -> bool {
        self.pauses.1.load(Ordering::Acquire) < self.pauses.0.load(Ordering::Acquire)
    }

    fn refusal(&self) -> MutexGuard<'_, Refusal> {
        self.refusal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Windows: learn from a refusal of `tokens`.
    pub(crate) fn refused(&self, t: &Timed, tokens: u32) {
        let wait = u64::try_from(t.reply.wait.as_nanos()).unwrap_or(u64::MAX);
        *self.refusal() = Refusal {
            tokens,
            hi: self.ns(t.received).saturating_add(wait),
        };
    }

    /// Windows: the instant `tokens` should fit, from what this process knows.
    pub(crate) fn window_fits_at(&self, tokens: u32) -> Instant {
        let r = *self.refusal();
        let mut hi = self.hi.load(Ordering::Acquire);
        if r.tokens <= tokens && r.tokens > 0 {
            hi = hi.max(r.hi);
        }
        self.at(hi)
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, ns: u64) -> Instant {
        let far = self.origin + Duration::from_secs(86_400 * 365 * 30);
        self.origin
            .checked_add(Duration::from_nanos(ns))
            .map_or(far, |t| t.min(far))
    }

    /// Learn from a reply.
    pub(crate) fn observe(&self, t: &Timed) {
        // Full already: no instant to learn.
        if t.reply.full_in.is_zero() {
            return;
        }
        let full = u64::try_from(t.reply.full_in.as_nanos()).unwrap_or(u64::MAX);
        self.lo
            .fetch_max(self.ns(t.sent).saturating_add(full), Ordering::AcqRel);
        self.hi
            .fetch_max(self.ns(t.received).saturating_add(full), Ordering::AcqRel);
    }

    /// Forget what the replies said: the parameters changed (a new quota or rate), and the
    /// state in Redis, re-read in the new ones, may now be full again earlier than any
    /// reply said (the instants learned only ever move later). The next waiter asks Redis.
    pub(crate) fn forget(&self) {
        self.lo.store(0, Ordering::Release);
        self.hi.store(0, Ordering::Release);
        *self.refusal() = Refusal::default();
    }

    /// This process paused the bucket: it is full again no earlier than `now + full_in`.
    pub(crate) fn hold(&self, now: Instant, full_in: Duration) {
        let full = u64::try_from(full_in.as_nanos()).unwrap_or(u64::MAX);
        let at = self.ns(now).saturating_add(full);
        self.lo.fetch_max(at, Ordering::AcqRel);
        self.hi.fetch_max(at, Ordering::AcqRel);
    }

    /// The instant a request of `cost` ns should fit, if nobody else takes tokens first.
    pub(crate) fn likely_fits_at(&self, cost: u64, tolerance: u64) -> Instant {
        self.at(fits_at(self.hi.load(Ordering::Acquire), cost, tolerance))
    }
}

/// When a request of `cost` fits in a bucket full again at `full` (GCRA, as
/// [`schedule`](crate::engine::gcra::schedule)): `full + cost − max(tolerance, cost)`. A leaky
/// bucket's cost above its tolerance goes once the bucket is full again.
fn fits_at(full: u64, cost: u64, tolerance: u64) -> u64 {
    full.saturating_sub(tolerance.saturating_sub(cost))
}

/// The lane of one key of a keyed limit: what the last replies for that key said, while
/// anyone in this process waits for it.
pub(crate) type Lane = Hint;

/// The lanes of a keyed limit: one per key with waiters in this process, removed when the
/// last waiter leaves (so the table is bounded by the number of waiters).
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    map: Mutex<HashMap<KeyDigest, Weak<Lane>>>,
}

/// A place in a key's lane; leaving (dropping) removes the lane when it was the last one.
#[derive(Debug)]
pub(crate) struct Entered<'a> {
    lanes: &'a Lanes,
    id: KeyDigest,
    lane: Arc<Lane>,
}

impl Lanes {
    fn lock(&self) -> MutexGuard<'_, HashMap<KeyDigest, Weak<Lane>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn enter(&self, id: KeyDigest) -> Entered<'_> {
        let mut map = self.lock();
        let lane = match map.get(&id).and_then(Weak::upgrade) {
            Some(lane) => lane,
            None => {
                if map.len() >= 4096 {
                    // Only entries whose last holder panicked are dead; drop them in bulk.
                    map.retain(|_, w| w.strong_count() > 0);
                }
                let lane = Arc::new(Lane::new());
                map.insert(id, Arc::downgrade(&lane));
                lane
            }
        };
        Entered {
            lanes: self,
            id,
            lane,
        }
    }

    /// The lane of the key whose digest reads `digest`, if anyone in this process waits
    /// for it. (Held past its last waiter, the lane stays listed, dead, until the table is
    /// swept.)
    pub(crate) fn find(&self, digest: &str) -> Option<Arc<Lane>> {
        self.lock()
            .iter()
            .find(|(id, _)| id.to_string() == digest)
            .and_then(|(_, lane)| lane.upgrade())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Entered<'_> {
    pub(crate) fn lane(&self) -> &Lane {
        &self.lane
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut map = self.lanes.lock();
        // Every other holder of the lane holds an `Entered` of its own (lanes are only
        // reached through the map, under its lock): a count of 1 means this is the last.
        if Arc::strong_count(&self.lane) == 1 {
            map.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::script::{By, Reply};

    #[tokio::test(start_paused = true)]
    async fn hints_schedule_wake_ups_from_the_upper_bound() {
        let hint = Hint::new();
        let ms = |n: u64| n * 1_000_000;
        let now = Instant::now();
        assert!(
            hint.likely_fits_at(ms(10), ms(30)) <= now,
            "nothing known: ask at once"
        );
        // Sent at +0, answered at +2 ms: full again 50 ms after the script ran.
        let sent = now;
        tokio::time::advance(Duration::from_millis(2)).await;
        hint.observe(&Timed {
            reply: Reply {
                admitted: true,
                wait: Duration::ZERO,
                full_in: Duration::from_millis(50),
                by: By::Limit,
            },
            granted: 1,
            at_us: 0,
            part: 0,
            sent,
            received: Instant::now(),
        });
        // A 10 ms token with a 30 ms tolerance should fit from +32 ms (the upper bound).
        assert_eq!(
            hint.likely_fits_at(ms(10), ms(30)),
            now + Duration::from_millis(32)
        );
        // A pause moves the instant, never back.
        hint.hold(Instant::now(), Duration::from_millis(100));
        assert_eq!(
            hint.likely_fits_at(ms(10), ms(30)),
            now + Duration::from_millis(82)
        );
        hint.hold(Instant::now(), Duration::ZERO);
        assert_eq!(
            hint.likely_fits_at(ms(10), ms(30)),
            now + Duration::from_millis(82)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leaky_cost_above_the_tolerance_waits_for_the_drain_only() {
        let hint = Hint::new();
        let ms = |n: u64| n * 1_000_000;
        // Leaky bucket, T = 10 ms: a cost of 3 tokens (30 ms) exceeds the tolerance (10 ms).
        assert!(hint.likely_fits_at(ms(30), ms(10)) <= Instant::now());
        // Once drained, at +20 ms, it goes: a cost above the tolerance waits no longer.
        let leaky = Hint::new();
        leaky.hold(Instant::now(), Duration::from_millis(20));
        assert_eq!(
            leaky.likely_fits_at(ms(30), ms(10)),
            Instant::now() + Duration::from_millis(20)
        );
        // Windows: a refusal schedules a request of at least its cost, never a smaller one.
        let sent = Instant::now();
        hint.refused(
            &Timed {
                reply: Reply {
                    admitted: false,
                    wait: Duration::from_millis(40),
                    full_in: Duration::from_millis(900),
                    by: By::Limit,
                },
                granted: 0,
                at_us: 0,
                part: 0,
                sent,
                received: sent,
            },
            2,
        );
        assert_eq!(hint.window_fits_at(2), sent + Duration::from_millis(40));
        assert_eq!(hint.window_fits_at(3), sent + Duration::from_millis(40));
        assert!(hint.window_fits_at(1) <= sent);
    }

    #[tokio::test]
    async fn lanes_are_removed_when_the_last_waiter_leaves() {
        let lanes = Lanes::default();
        let a = lanes.enter(KeyDigest::from_bytes([1; 16]));
        let b = lanes.enter(KeyDigest::from_bytes([1; 16]));
        assert_eq!(lanes.len(), 1);
        assert!(std::ptr::eq(a.lane(), b.lane()), "one hint per key");
        let c = lanes.enter(KeyDigest::from_bytes([2; 16]));
        assert_eq!(lanes.len(), 2);
        drop(c);
        assert_eq!(lanes.len(), 1);
        drop(a);
        assert_eq!(lanes.len(), 1, "b still waits");
        drop(b);
        assert_eq!(lanes.len(), 0);
    }
}
