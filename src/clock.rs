//! The clock of buckets and keyed stores: nanoseconds since the bucket was made, and where
//! window boundaries fall on it.
//!
//! The default reads tokio's clock, so `#[tokio::test(start_paused = true)]` drives decisions
//! and waits on one timeline. With the `quanta` feature a bucket can opt into the CPU's
//! time-stamp counter instead ([`BucketBuilder::tsc_clock`](crate::BucketBuilder::tsc_clock),
//! [`KeyedBucketBuilder::tsc_clock`](crate::keyed::KeyedBucketBuilder::tsc_clock)),
//! which reads in about a third of the time. Waits still sleep on tokio's timer; only the
//! decisions read the TSC.
//!
//! A clock read that goes backwards (a TSC that differs slightly between cores) can only make
//! a decision stricter: `max(tat, now)` keeps the schedule, and a smaller `now` admits less.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone)]
pub(crate) enum Clock {
    Tokio {
        origin: Instant,
    },
    #[cfg(feature = "quanta")]
    Tsc {
        clock: quanta::Clock,
        origin: u64,
    },
}

impl Clock {
    pub(crate) fn tokio() -> Self {
        Clock::Tokio {
            origin: Instant::now(),
        }
    }

    #[cfg(feature = "quanta")]
    pub(crate) fn tsc() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Clock::Tsc { clock, origin }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        match self {
            // u64 nanoseconds last 584 years; saturate rather than wrap after that.
            Clock::Tokio { origin } => {
                u64::try_from(Instant::now().saturating_duration_since(*origin).as_nanos())
                    .unwrap_or(u64::MAX)
            }
            #[cfg(feature = "quanta")]
            Clock::Tsc { clock, origin } => clock.delta_as_nanos(*origin, clock.raw()),
        }
    }

    /// The tokio instant of `ns` on this clock, `now` being [`now_ns`](Self::now_ns).
    #[cfg_attr(not(feature = "quanta"), allow(unused_variables))]
    pub(crate) fn instant_at(&self, ns: u64, now: u64) -> Instant {
        let far = || Instant::now() + Duration::from_secs(86_400 * 365 * 30);
        match self {
            Clock::Tokio { origin } => origin
                .checked_add(Duration::from_nanos(ns))
                .unwrap_or_else(far),
            #[cfg(feature = "quanta")]
            Clock::Tsc { .. } => Instant::now()
                .checked_add(Duration::from_nanos(ns.saturating_sub(now)))
                .unwrap_or_else(far),
        }
    }
}

/// Where a limit's window boundaries fall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    /// At multiples of the period since the UNIX epoch (a minute window resets on the minute).
    Epoch,
    /// At this instant of the limit's clock (nanoseconds, before its origin if negative) and
    /// every period from it.
    At(i128),
}

impl Align {
    /// Boundaries at `origin` and every period from it, or at multiples of the period since
    /// the UNIX epoch (`None`), on `clock`.
    pub(crate) fn new(origin: Option<Instant>, clock: &Clock) -> Self {
        origin.map_or(Align::Epoch, |origin| {
            let now = Instant::now();
            let ahead = |a: Instant, b| i128::try_from(a.duration_since(b).as_nanos());
            let offset = if origin >= now {
                ahead(origin, now).unwrap_or(i128::MAX / 4)
            } else {
                -ahead(now, origin).unwrap_or(i128::MAX / 4)
            };
            Align::At(i128::from(clock.now_ns()) + offset)
        })
    }

    /// The offset `phase` of the boundaries of windows of `width` ns: they fall where
    /// `(t + phase) % width == 0`. `clock_now`: the clock's reading.
    pub(crate) fn phase(self, width: u64, clock_now: u64) -> u64 {
        match self {
            Align::Epoch => {
                let wall = std::time::SystemTime::now()
                    .duration_since(std::time::SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
                (wall % width + width - clock_now % width) % width
            }
            Align::At(origin) => {
                let width = i128::from(width);
                u64::try_from((-origin).rem_euclid(width)).unwrap_or(0)
            }
        }
    }
}
