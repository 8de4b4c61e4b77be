//! The breaker of a Redis limit's handle: after [`BREAKER_THRESHOLD`] failed calls in a row,
//! decisions skip Redis for a probe interval (the failure policy answers them at once),
//! then one call probes it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::error::{RedisError, RedisErrorKind};

/// Consecutive failed calls after which decisions skip Redis for a probe interval. One
/// transient error (a dropped packet, one slow reply) fails only its own call.
const BREAKER_THRESHOLD: u32 = 3;

#[derive(Debug)]
pub(crate) struct Breaker {
    probe_interval: Duration,
    /// 0 = Redis healthy; else the instant (ns since `origin`, ≥ 1) until which decisions
    /// skip Redis after a failure.
    down_until: AtomicU64,
    /// Calls failed in a row (reset by any success).
    failed_in_a_row: AtomicU32,
    /// Runs of failures begun so far: a fallback sees a new outage when this moves.
    outages: AtomicU64,
    origin: Instant,
}

impl Breaker {
    pub(crate) fn new(probe_interval: Duration) -> Self {
        Breaker {
            probe_interval,
            down_until: AtomicU64::new(0),
            failed_in_a_row: AtomicU32::new(0),
            outages: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn next_probe(&self, now: u64) -> u64 {
        now.saturating_add(u64::try_from(self.probe_interval.as_nanos()).unwrap_or(u64::MAX))
    }

    /// How many runs of failures have begun: a local fallback starts afresh (empty) when
    /// this has moved since it last decided.
    pub(crate) fn outages(&self) -> u64 {
        self.outages.load(Ordering::Acquire)
    }

    /// Whether this call may go to Redis. After [`BREAKER_THRESHOLD`] failures in a row,
    /// calls skip Redis for `probe_interval`; then one call (the probe) goes, and the others
    /// keep skipping until it answers.
    pub(crate) fn admit(&self) -> Result<(), RedisError> {
        let until = self.down_until.load(Ordering::Acquire);
        if until == 0 {
            return Ok(());
        }
        let now = self.now_ns();
        if now >= until
            && self
                .down_until
                .compare_exchange(
                    until,
                    self.next_probe(now),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Ok(());
        }
        Err(RedisError::new(
            RedisErrorKind::Unavailable,
            "redis unavailable (a recent call failed; retrying shortly)",
        ))
    }

    /// A call was answered. Returns whether decisions were skipping Redis until now.
    pub(crate) fn success(&self) -> bool {
        self.failed_in_a_row.store(0, Ordering::Release);
        self.down_until.swap(0, Ordering::AcqRel) != 0
    }

    /// A call failed (Redis itself, not one key). Returns whether decisions skip Redis from
    /// now on where they did not.
    pub(crate) fn failure(&self) -> bool {
        let in_a_row = self.failed_in_a_row.fetch_add(1, Ordering::AcqRel);
        if in_a_row == 0 {
            self.outages.fetch_add(1, Ordering::AcqRel);
        }
        if in_a_row + 1 < BREAKER_THRESHOLD {
            return false;
        }
        let next = self.next_probe(self.now_ns());
        self.down_until.swap(next, Ordering::AcqRel) == 0
    }
}
