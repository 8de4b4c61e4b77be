//! Leases: a process takes a batch of tokens of a [`RedisBucket`](super::RedisBucket) in one
//! round trip and admits locally from them (the semantics, bound and figures are in the
//! [module docs](super#leases)).
//!
//! This file holds the local side: the tokens held and until when, the size of the next
//! lease (doubling while leases are used up within their period, else what the last period
//! used, at most `max`), and the one refill in flight (the others wait on a [`Notify`]
//! and then all take from what it brought, rather than queueing one by one). What a lease
//! holds when it is replaced or ends is handed to the caller to give back to Redis.
//!
//! [`Notify`]: tokio::sync::Notify

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The lease of one [`RedisBucket`](super::RedisBucket) handle (shared by its clones).
#[derive(Debug)]
pub(crate) struct Lease {
    max: u32,
    period: Duration,
    held: Mutex<Held>,
    /// One refill at a time: the others wait for it, then all take from what it brought.
    refilling: AtomicBool,
    refilled: tokio::sync::Notify,
}

/// The one refill in flight; when it ends (or is dropped), the waiters wake.
#[derive(Debug)]
pub(crate) struct Refill<'a>(&'a Lease);

impl Drop for Refill<'_> {
    fn drop(&mut self) {
        self.0.refilling.store(false, Ordering::Release);
        self.0.refilled.notify_waiters();
    }
}

#[derive(Debug)]
struct Held {
    /// Unused tokens of the current lease.
    tokens: u32,
    /// When the current lease ends (none yet: the origin, already over).
    expires: Instant,
    /// Tokens taken from the current lease.
    used: u32,
    /// The size of the next lease.
    size: u32,
    /// Counts leases: an expiry timer acts on its own lease only.
    generation: u64,
}

impl Lease {
    /// Leases of at most `max` tokens (≥ 1), each lasting `period`.
    pub(crate) fn new(max: u32, period: Duration) -> Self {
        Lease {
            max,
            period,
            held: Mutex::new(Held {
                tokens: 0,
                expires: Instant::now(),
                used: 0,
                size: 1,
                generation: 0,
            }),
            refilling: AtomicBool::new(false),
            refilled: tokio::sync::Notify::new(),
        }
    }

    /// Become the one task that asks Redis for a lease, unless another one is asking.
    pub(crate) fn start_refill(&self) -> Option<Refill<'_>> {
        self.refilling
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then_some(Refill(self))
    }

    /// Wait until the refill in flight (if any) ends.
    pub(crate) async fn refill_done(&self) {
        let notified = self.refilled.notified();
        tokio::pin!(notified);
        // Registered before the check: a refill ending in between still wakes this one.
        notified.as_mut().enable();
        if self.refilling.load(Ordering::Acquire) {
            notified.await;
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take `n` tokens from the lease, if it holds them and has not expired.
    pub(crate) fn take(&self, n: u32, now: Instant) -> bool {
        let mut held = self.held();
        if held.tokens < n || now >= held.expires {
            return false;
        }
        held.tokens -= n;
        held.used += n;
        true
    }

    /// Before asking Redis for a lease to admit `n`: the lease's size (at least `n`, sized
    /// from demand) and the tokens to give back (all those still held, now out of the
    /// lease).
    pub(crate) fn next(&self, n: u32, now: Instant) -> (u32, u32) {
        let mut held = self.held();
        held.size = if now < held.expires {
            // Used up within its period: demand outgrows it.
            held.size.saturating_mul(2)
        } else {
            // Expired: what one period used.
            held.used
        }
        .clamp(1, self.max);
        let back = std::mem::take(&mut held.tokens);
        (held.size.max(n), back)
    }

    /// A lease of `granted` (≥ `n`) tokens, requested at `sent`, came; the caller takes `n`
    /// of them. Returns the lease's generation and end, for its expiry.
    pub(crate) fn granted(&self, granted: u32, n: u32, sent: Instant) -> (u64, Instant) {
        let mut held = self.held();
        held.generation += 1;
        held.tokens = granted - n;
        held.used = n;
        held.expires = sent + self.period;
        (held.generation, held.expires)
    }

    /// The lease of `generation` ended: its unused tokens, now out of the lease (none if
    /// another lease replaced it).
    pub(crate) fn expire(&self, generation: u64) -> u32 {
        let mut held = self.held();
        if held.generation != generation {
            return 0;
        }
        std::mem::take(&mut held.tokens)
    }

    /// Drop the lease: its unused tokens, now out of it.
    pub(crate) fn clear(&self) -> u32 {
        std::mem::take(&mut self.held().tokens)
    }

    /// Tokens held now (expired or not).
    pub(crate) fn tokens(&self) -> u32 {
        self.held().tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leases_grow_with_demand_and_shrink_to_it() {
        let period = Duration::from_millis(100);
        let lease = Lease::new(16, period);
        let t0 = Instant::now();
        assert!(!lease.take(1, t0), "no lease yet");
        // Nothing held, the first lease expired at once: the size of the request.
        assert_eq!(lease.next(1, t0), (1, 0));
        lease.granted(1, 1, t0);
        assert!(!lease.take(1, t0));
        // Used up within its period: doubles, up to the maximum.
        let mut sizes = Vec::new();
        for _ in 0..6 {
            let (want, back) = lease.next(1, t0);
            assert_eq!(back, 0);
            sizes.push(want);
            lease.granted(want, 1, t0);
            while lease.take(1, t0) {}
        }
        assert_eq!(sizes, [2, 4, 8, 16, 16, 16]);
        // A request larger than the size gets at least itself.
        assert_eq!(lease.next(20, t0).0, 20);
        // Granted 16, 6 used in the period, then it expires: 10 go back, the next is 6.
        let (generation, end) = lease.granted(16, 1, t0);
        assert_eq!(end, t0 + period);
        for _ in 0..4 {
            assert!(lease.take(1, t0));
        }
        tokio::time::advance(period - Duration::from_nanos(1)).await;
        assert!(lease.take(1, Instant::now()), "still within its period");
        tokio::time::advance(Duration::from_nanos(1)).await;
        assert!(!lease.take(1, Instant::now()), "expired");
        assert_eq!(lease.tokens(), 10);
        assert_eq!(lease.next(1, Instant::now()), (6, 10));
        assert_eq!(lease.tokens(), 0);
        // The expiry of a replaced lease gives nothing back; its own gives the rest.
        let (newer, _) = lease.granted(6, 1, Instant::now());
        assert_eq!(lease.expire(generation), 0);
        assert_eq!(lease.expire(newer), 5);
        assert_eq!(lease.clear(), 0);
    }
}
