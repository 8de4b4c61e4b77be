//! [`RedisStats`]: what a Redis limit's handle counts, for metrics and alerts.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a [`RedisBucket`](super::RedisBucket) or [`RedisKeyed`](super::RedisKeyed),
/// from `stats()`: for metrics and alerts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Scripts sent to Redis (each decision and pause is one).
    pub round_trips: u64,
    /// Round trips that failed: error, timeout or an unexpected reply.
    pub failures: u64,
    /// Decisions made by the [`FailurePolicy`](super::FailurePolicy) instead of Redis: after
    /// a failure, and while Redis is left alone after one.
    pub fallbacks: u64,
    /// Leases taken from Redis (with [`lease`](super::RedisBucketBuilder::lease)); each is one
    /// of the round trips.
    pub leases: u64,
    /// Tokens admitted with leases: from a lease's tokens, or from a refill that asked for
    /// them with the others waiting (no round trip of their own).
    pub leased_admissions: u64,
    /// Settlements of [charges](crate::Charge) done with: sent to Redis and answered (or
    /// failed); each is one round trip, or two when some quotas give back and others owe.
    pub settlements: u64,
}

/// The live counters behind [`RedisStats`], shared by a handle's clones.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) round_trips: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) leases: AtomicU64,
    pub(crate) leased_admissions: AtomicU64,
    pub(crate) settlements: AtomicU64,
}

impl Counters {
    /// The counts now.
    pub(crate) fn stats(&self) -> RedisStats {
        RedisStats {
            round_trips: self.round_trips.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
            leases: self.leases.load(Ordering::Relaxed),
            leased_admissions: self.leased_admissions.load(Ordering::Relaxed),
            settlements: self.settlements.load(Ordering::Relaxed),
        }
    }
}

/// Count one.
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}
