//! Rates that follow a server's push-back: converging under a configured quota, or
//! discovering an unknown one.
//!
//! Every [`Bucket`](crate::Bucket) carries a rate control, fed by [`RetryAfterLayer`] (or by
//! a client of your own through [`Bucket::feedback`]) with each request sent, each success
//! and each push-back:
//!
//! - [`Bucket::new`]: the configured rate holds until a server pushes back; a push-back
//!   pauses every worker and lowers the rate to just below the server's limit, never above
//!   the configured one.
//! - [`Bucket::adaptive`]: no rate needed; it searches upwards until the first push-back.
//! - A quota the server states (`RateLimit-Policy`, `X-RateLimit-*`) is taken at once.
//! - [`BucketBuilder::ramp`] starts at 45 % of the configured rate;
//!   [`BucketBuilder::fixed_rate`] only pauses.
//!
//! ```
//! use std::time::Duration;
//! use tower_throttle::adaptive::Adaptive;
//! use tower_throttle::{Bucket, Quota};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // A quota the server enforces but nobody documented: start at 5/s, search upwards.
//! let bucket = Bucket::adaptive(Adaptive::new().start(Quota::per_second(5)));
//! assert_eq!(bucket.rate(), 5.0);
//!
//! // A configured quota: the ceiling. A first push-back at 100/s says the server's limit is
//! // below 100/s; the first guess is half of it, and the rate starts at 96 % of that.
//! let configured = Bucket::new(Quota::per_second(100));
//! let sent = configured.feedback().sending();
//! assert_eq!(configured.rate(), 100.0); // no change before a push-back
//! sent.pushed_back(Duration::from_secs(1), None);
//! assert_eq!(configured.learned_rate(), Some(50.0));
//! assert_eq!(configured.rate(), 48.0);
//! assert_eq!(configured.quota(), Quota::per_second(100)); // the ceiling stays
//! # }
//! ```
//!
//! The control law, its estimates and its measured behaviour:
//! [`docs/adaptive.md`](https://github.com/tower-throttle/tower-throttle/blob/main/docs/adaptive.md).
//!
//! [`RetryAfterLayer`]: crate::RetryAfterLayer
//! [`Bucket::new`]: crate::Bucket::new
//! [`Bucket::adaptive`]: crate::Bucket::adaptive
//! [`Bucket::feedback`]: crate::Bucket::feedback
//! [`BucketBuilder::ramp`]: crate::BucketBuilder::ramp
//! [`BucketBuilder::fixed_rate`]: crate::BucketBuilder::fixed_rate

mod control;
mod law;
mod meter;
mod sends;
mod window;

#[cfg(all(test, feature = "redis"))]
pub(crate) use self::control::effective;
pub(crate) use self::control::{Control, Decision, Mode, DEFAULT_FLOOR};

use std::time::SystemTime;

use crate::Quota;

/// A push-back acted on, as processes sharing a limit tell each other: the limit estimated
/// (tokens per second) and when the cooldown ends (wall clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cut {
    pub(crate) limit: f64,
    pub(crate) resume: SystemTime,
}

impl Cut {
    /// The cut as processes read it back: the end of the cooldown in whole ms of the Unix
    /// epoch (see `redis::rate`).
    pub(crate) fn shared(self) -> Cut {
        let ms = self
            .resume
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let ms = u64::try_from(ms).unwrap_or(u64::MAX);
        Cut {
            limit: self.limit,
            resume: SystemTime::UNIX_EPOCH
                .checked_add(std::time::Duration::from_millis(ms))
                .unwrap_or(self.resume),
        }
    }
}

/// The settings of a bucket that discovers its rate: [`Bucket::adaptive`](crate::Bucket::adaptive).
///
/// | setting | default |
/// |---|---|
/// | [`start`](Self::start) | 1 per second |
/// | [`floor`](Self::floor) | 1 per hour |
///
/// The ceiling, the rate never exceeded whatever the server says, is 10 000 per second with a
/// burst of 1 for [`Bucket::adaptive`](crate::Bucket::adaptive); for another, give it to the
/// builder: `Bucket::builder(ceiling).adaptive(settings)`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct Adaptive {
    pub(crate) start: f64,
    pub(crate) floor: f64,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            start: 1.0,
            floor: DEFAULT_FLOOR,
        }
    }
}

impl Adaptive {
    /// The defaults (see the table above).
    pub fn new() -> Self {
        Self::default()
    }

    /// Start at this rate (a hint: the documented quota, say) instead of 1 per second.
    pub fn start(mut self, hint: Quota) -> Self {
        self.start = hint.per_second_f64();
        self
    }

    /// Never go below this rate, however often the server pushes back.
    pub fn floor(mut self, floor: Quota) -> Self {
        self.floor = floor.per_second_f64();
        self
    }
}
