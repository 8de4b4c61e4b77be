//! The bucket's clock: nanoseconds since the bucket was made, read through tokio's clock so
//! `#[tokio::test(start_paused = true)]` drives decisions and waits on one timeline.

use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the origin. Monotonic: tokio's `Instant` never goes backwards.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years; saturate rather than wrap after that.
        u64::try_from(
            Instant::now()
                .saturating_duration_since(self.origin)
                .as_nanos(),
        )
        .unwrap_or(u64::MAX)
    }

    /// The tokio instant of `ns` on this clock.
    pub(crate) fn instant_at(&self, ns: u64) -> Instant {
        let d = std::time::Duration::from_nanos(ns);
        self.origin
            .checked_add(d)
            .unwrap_or_else(|| self.origin + std::time::Duration::from_secs(86_400 * 365 * 30))
    }
}
