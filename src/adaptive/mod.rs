//! Rates that follow a server's push-back: converging under a configured quota, or
//! discovering an unknown one.
//!
//! Every [`Bucket`](crate::Bucket) carries a rate control. [`RetryAfterLayer`] reports each
//! push-back (`429`, `503`) and each success to it; the control sets the *effective* rate of
//! the bucket — for every clone, through the bucket's own `set_quota` path — and the bucket
//! enforces that rate:
//!
//! - **Configured quota** ([`Bucket::new`]): the configured rate is a hard ceiling, and the
//!   start. Repeated push-back lowers the rate, success raises it back, never above the
//!   ceiling. A client configured above a server's real rate settles just below it instead of
//!   pausing, restarting at the configured rate and being refused again.
//! - **Unknown quota** ([`Bucket::adaptive`]): no rate needed, or only a hint to start from.
//!   The rate searches upwards until the first push-back, then behaves as above.
//! - Either way, when the server states its quota in `RateLimit-Policy` (`q` per `w`
//!   seconds, on a success or on the push-back itself), the rate jumps to it at once (capped
//!   by the ceiling). A quota that runs out (`RateLimit` or `X-RateLimit-Remaining: 0` with a
//!   reset) pauses the bucket until the reset, as before.
//! - [`BucketBuilder::fixed_rate`](crate::BucketBuilder::fixed_rate) keeps the configured
//!   rate whatever the server says (pauses only).
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
//! // A configured quota: the ceiling. A push-back halves the rate at once.
//! let configured = Bucket::new(Quota::per_second(100));
//! configured.push_back(Duration::from_secs(1));
//! assert_eq!(configured.rate(), 50.0);
//! assert_eq!(configured.quota(), Quota::per_second(100)); // the ceiling stays
//! # }
//! ```
//!
//! # The control law
//!
//! Rates are in tokens per second; `U` is the rate that was in force when the request
//! pushed back last was sent.
//!
//! | event | effect |
//! |---|---|
//! | push-back (the first of a cooldown) | `U ← rate`, `rate ← U/2`, the bucket pauses for the cooldown |
//! | more push-backs before the cooldown ends | none: they answer requests sent at the old rate |
//! | success, `t` s after the cooldown ended | `rate ← 0.95·U − (0.95·U − U/2)·e^(−t/0.5) + 0.05·U·(t/30)³` |
//! | success while searching (no `U` yet) | `rate ← rate + min(rate, 1/0.35)`: doubling while low, then `e`-fold every 0.35 s |
//! | a newly stated quota (`RateLimit-Policy`) | `U ← rate ← stated`, no probing above it until a push-back |
//!
//! Always `floor ≤ rate ≤ ceiling`; the configured quota's burst is kept (an adaptive bucket
//! has a burst of 1: a server's burst is unknown).
//!
//! **Steady state.** Within 1.5 s after a cooldown the rate is back within 5 % of 95 % of the
//! rate refused, then probes upwards, slowly at first (cubic), reaching the refused rate again
//! 30 s later. Against a server whose real rate is `R`, the rate refused lies just above
//! `R`, so the rate settles in the band `[0.95·R, R]`, with at most one push-back (one
//! cooldown) per 30 s of probing; a server that raises its rate is followed by the probe
//! (cubic growth: twice the refused rate after about 80 s), one that lowers it by the next
//! push-back.
//!
//! **Why this law.** Each push-back costs a whole cooldown (`Retry-After`, typically 1 s)
//! during which nothing is sent, so the law spends few of them: one deep cut per cooldown
//! (a server's rate is a wall: halving gets below it at once from up to twice above it),
//! a fast return to just below the wall, and a slow, cubic probe. AIMD (additive increase)
//! climbs back linearly and refuses again at the same rate every cycle; CUBIC (the AWS SDKs'
//! adaptive mode, `β = 0.7`) returns to the refused rate itself after
//! `∛(0.3·U/0.4)` s (3.3 s at 50/s) and is refused again there, every cycle. Against a
//! stand-in server with a hidden no-burst limit (paused clock, 16 workers), this law settles
//! at 92–94 % of a hidden 5, 50 or 200 per second with three or four push-backs in 45 s,
//! the first of them while searching. The README's "Unknown or shared quotas" section has
//! the measurements against nginx side by side with botocore's adaptive limiter.
//!
//! **Shared.** The control lives beside the bucket: every clone, layer and worker reports to
//! and reads the same rate. A bucket made from a
//! [`RedisBucket`](crate::redis::RedisBucket) (feature `redis`) also shares what it learns
//! with every process: each push-back it acts on is written to Redis beside the bucket
//! (`<key>:rate`: the rate refused and the end of the cooldown), every process reads it
//! back at most every 250 ms while requests succeed and follows the same curve, and the
//! shared limit in Redis decides at the rate in force (token and leaky bucket).
//!
//! [`RetryAfterLayer`]: crate::RetryAfterLayer
//! [`Bucket::new`]: crate::Bucket::new
//! [`Bucket::adaptive`]: crate::Bucket::adaptive

mod control;
mod law;

pub(crate) use self::control::{Control, Mode, DEFAULT_FLOOR};
pub(crate) use self::law::HOLD;

use std::time::SystemTime;

use crate::Quota;

/// A push-back acted on, as processes sharing a limit tell each other: the limit estimated
/// (tokens per second) and when the cooldown ends (wall clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cut {
    pub(crate) limit: f64,
    pub(crate) resume: SystemTime,
}

/// The settings of a bucket that discovers its rate: [`Bucket::adaptive`](crate::Bucket::adaptive).
///
/// | setting | default |
/// |---|---|
/// | [`start`](Self::start) | 1 per second |
/// | [`floor`](Self::floor) | 1 per hour |
/// | [`ceiling`](Self::ceiling) | 10 000 per second |
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct Adaptive {
    pub(crate) start: f64,
    pub(crate) floor: f64,
    pub(crate) ceiling: Quota,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            start: 1.0,
            floor: DEFAULT_FLOOR,
            ceiling: Quota::per_second(10_000).burst(1),
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

    /// Never go above this rate, whatever the server says; its burst is the bucket's.
    pub fn ceiling(mut self, ceiling: Quota) -> Self {
        self.ceiling = ceiling;
        self
    }
}
