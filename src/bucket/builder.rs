//! [`BucketBuilder`].

use std::sync::Arc;

use super::shared::Shared;
use super::{Algorithm, Bucket};
use crate::adaptive::{Adaptive, Control, Mode};
use crate::clock::{Align, Clock};
use crate::observe::Observer;
use crate::{Plan, Quota, Resource};

/// A discovered quota before its provider states it: about 4·10⁹ per second, not a limit.
fn unstated() -> Quota {
    Quota::per_second(u32::MAX)
}

/// Builds a [`Bucket`]: [`Bucket::builder`].
///
/// ```
/// use tower_throttle::{Algorithm, Bucket, Quota};
///
/// let bucket = Bucket::builder(Quota::per_minute(100))
///     .algorithm(Algorithm::SlidingLog)
///     .build();
/// assert_eq!(bucket.algorithm(), Algorithm::SlidingLog);
/// ```
#[derive(Clone)]
#[must_use]
pub struct BucketBuilder {
    plan: Plan,
    clock: Clock,
    /// Where window boundaries fall: `None` for the UNIX epoch.
    window_origin: Option<tokio::time::Instant>,
    observer: Option<Arc<dyn Observer>>,
    mode: Mode,
    ramp: bool,
    /// The quotas of the plan that discover their limit.
    discovered: Vec<usize>,
    weights: [u32; 3],
    reserve: f64,
}

impl BucketBuilder {
    pub(crate) fn new(plan: Plan) -> Self {
        BucketBuilder {
            plan,
            clock: Clock::tokio(),
            window_origin: None,
            observer: None,
            mode: Mode::Converge,
            ramp: false,
            discovered: Vec::new(),
            weights: [6, 3, 1],
            reserve: 0.0,
        }
    }

    /// Keep the configured rate whatever servers say: a push-back pauses the bucket and
    /// nothing else. By default a push-back also lowers the rate (never above the
    /// configured one; see [`adaptive`](crate::adaptive)).
    pub fn fixed_rate(mut self) -> Self {
        self.mode = Mode::Fixed;
        self
    }

    /// Start the configured rate with a ramp: the first request sent drops the rate to 45 %
    /// of the configured one, and each success brings it back by 4 %, in 21 successes (about
    /// 11 intervals lost, once).
    ///
    /// Against a server without a burst and up to 2.2 times slower than the configured rate,
    /// a step of the ramp is refused and the one before it went through: one push-back
    /// brackets the server's limit, where without the ramp a first guess (half the rate
    /// refused) and a second push-back find it. Without this option the configured rate
    /// holds from the first request until a push-back. A
    /// [`fixed_rate`](Self::fixed_rate) bucket has no ramp; an
    /// [`adaptive`](Self::adaptive) one ramps after [`Bucket::set_quota`] only.
    ///
    /// ```
    /// use tower_throttle::{Bucket, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let bucket = Bucket::builder(Quota::per_second(100)).ramp().build();
    /// assert_eq!(bucket.rate(), 100.0);
    /// let _sent = bucket.feedback().sending();
    /// assert_eq!(bucket.rate(), 45.0);
    /// # }
    /// ```
    pub fn ramp(mut self) -> Self {
        self.ramp = true;
        self
    }

    /// Discover the rate: start at `settings`' start rate, below this builder's quota (the
    /// ceiling, burst included), and search upwards (see [`Bucket::adaptive`]).
    pub fn adaptive(mut self, settings: Adaptive) -> Self {
        self.mode = Mode::Search {
            start: settings.start,
            floor: settings.floor,
        };
        self
    }

    /// Limit `resource` too, at the limit a provider states for it: from the first response
    /// whose fields give it (OpenAI's and Azure's `x-ratelimit-limit-tokens`, Anthropic's
    /// `anthropic-ratelimit-input-tokens-limit`, …, read as per minute) under
    /// [`RetryAfterLayer`](crate::RetryAfterLayer), and from each change after. Until then
    /// the resource is counted and not limited. A resource the plan already counts keeps its
    /// configured quota; the requests' limit is the rate control's (a stated requests limit
    /// is taken as the rate at once).
    ///
    /// ```
    /// use tower_throttle::adaptive::Adaptive;
    /// use tower_throttle::{Bucket, Quota, Resource};
    ///
    /// // Neither limit known: requests searched for (or taken from the fields), tokens read.
    /// let bucket = Bucket::builder(Quota::per_second(10_000).burst(1))
    ///     .adaptive(Adaptive::new())
    ///     .discover(Resource::TOKENS)
    ///     .build();
    /// assert_eq!(bucket.plan().quotas().count(), 2);
    /// ```
    pub fn discover(mut self, resource: Resource) -> Self {
        if !self.plan.counts(&resource) {
            self.discovered.push(self.plan.quotas().len());
            self.plan = self.plan.and(unstated()).counting(resource);
        }
        self
    }

    /// The weights of the [`Priority`](crate::Priority) classes' shares while the bucket is saturated:
    /// critical, normal, background (default 6, 3, 1). Each is kept within 1 ..= 1000.
    ///
    /// ```
    /// use tower_throttle::{Bucket, Quota};
    ///
    /// // Background work gets a tenth of the rate while interactive calls wait.
    /// let bucket = Bucket::builder(Quota::per_second(10)).priority_weights([9, 9, 1]).build();
    /// # let _ = bucket;
    /// ```
    pub fn priority_weights(mut self, weights: [u32; 3]) -> Self {
        self.weights = weights.map(|w| w.clamp(1, 1000));
        self
    }

    /// Keep `share` of the limit for critical requests: a request of any other
    /// [`Priority`](crate::Priority) is admitted only while, after it, at least `share` of
    /// each quota it is charged to stays free (of a token bucket's burst, a window's count).
    /// Past that point the others are shed ([`Denied::Shed`](crate::Denied::Shed), or they
    /// wait for it), and critical requests still pass, up to the whole limit. Default: no
    /// reserve. Its decisions are made under the bucket's lock.
    ///
    /// ```
    /// use tower_throttle::{Bucket, Cost, Denied, Priority, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let bucket = Bucket::builder(Quota::per_minute(10)).reserve_for_critical(0.2).build();
    /// for _ in 0..8 {
    ///     bucket.try_acquire(1).unwrap();
    /// }
    /// assert!(matches!(bucket.try_acquire(1), Err(Denied::Shed(_))));
    /// assert!(bucket.try_charge(Cost::new().priority(Priority::Critical)).is_ok());
    /// # }
    /// ```
    ///
    /// # Panics
    /// When `share` is not in `[0, 1)`.
    pub fn reserve_for_critical(mut self, share: f64) -> Self {
        assert!(
            (0.0..1.0).contains(&share),
            "the share kept for critical requests must be in [0, 1), not {share}"
        );
        self.reserve = share;
        self
    }

    /// Report admissions, delays, refusals and pauses to `observer` (see
    /// [`observe`](crate::observe)).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The algorithm of the plan's first quota (default: [`Algorithm::TokenBucket`]), as
    /// [`Plan::algorithm`] sets it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_throttle::{Algorithm, Bucket, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // Strictly spaced: no burst even when idle, at most 100 waiting.
    /// let leaky = Bucket::builder(Quota::per_second(10))
    ///     .algorithm(Algorithm::leaky_bucket(100))
    ///     .build();
    /// leaky.try_acquire(1).unwrap();
    /// assert_eq!(leaky.try_acquire(1).unwrap_err().wait(), Some(Duration::from_millis(100)));
    /// # }
    /// ```
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.plan = self.plan.with_algorithm(algorithm);
        self
    }

    /// Align the windows of a [`FixedWindow`](Algorithm::FixedWindow) or
    /// [`SlidingWindow`](Algorithm::SlidingWindow) bucket to `origin`: boundaries at
    /// `origin + k·period` instead of multiples of the period since the UNIX epoch.
    ///
    /// Use it to start a window when the bucket starts (`Instant::now()`), to match a server
    /// whose windows start at a known instant, or in tests, so that they do not depend on
    /// where the current second of the wall clock falls. Other algorithms ignore it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_throttle::{Algorithm, Bucket, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let bucket = Bucket::builder(Quota::per_second(2))
    ///     .algorithm(Algorithm::FixedWindow)
    ///     .window_origin(tokio::time::Instant::now())
    ///     .build();
    /// bucket.try_acquire(2).unwrap();
    /// // The window ends exactly one period after the origin.
    /// assert_eq!(bucket.snapshot().full_in, Duration::from_secs(1));
    /// # }
    /// ```
    pub fn window_origin(mut self, origin: tokio::time::Instant) -> Self {
        self.window_origin = Some(origin);
        self
    }

    /// Decide on the CPU's time-stamp counter (through `quanta`) instead of tokio's clock:
    /// about 10 ns a read instead of about 25. Waits still sleep on tokio's timer.
    ///
    /// Opt in only for the hottest paths: a bucket on this clock does not follow tokio's
    /// paused test clock (`start_paused`), so its decisions cannot be driven by it.
    #[cfg(feature = "quanta")]
    pub fn tsc_clock(mut self) -> Self {
        self.clock = Clock::tsc();
        self
    }

    /// The bucket, full.
    pub fn build(self) -> Bucket {
        let align = Align::new(self.window_origin, &self.clock);
        let now = tokio::time::Instant::now();
        let control = Control::new(self.plan.quota(), self.mode, self.ramp, false, now);
        Bucket::from_parts(
            Shared::new(
                self.plan,
                self.clock,
                align,
                self.observer,
                &self.discovered,
                self.weights,
                self.reserve,
            ),
            control,
        )
    }
}

impl std::fmt::Debug for BucketBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketBuilder")
            .field("plan", &self.plan)
            .field("clock", &self.clock)
            .field("window_origin", &self.window_origin)
            .field("observer", &self.observer.is_some())
            .field("mode", &self.mode)
            .field("ramp", &self.ramp)
            .field("discovered", &self.discovered)
            .field("weights", &self.weights)
            .field("reserve", &self.reserve)
            .finish()
    }
}
