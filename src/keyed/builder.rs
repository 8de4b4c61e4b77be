//! [`KeyedBucketBuilder`]: the plans, the cap on keys, the shards and the clock of a
//! [`KeyedBucket`].

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use tokio::time::Instant;

use super::store::KeyedBucket;
use super::tiers::{Resolver, Tiers};
use crate::clock::{Align, Clock};
use crate::{Algorithm, Plan};

/// Builds a [`KeyedBucket`] with another algorithm, cap or shard count.
///
/// ```
/// use tower_throttle::{Algorithm, KeyedBucket, Quota};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // "100 per minute, resetting on the minute", per user.
/// let per_user: KeyedBucket<u64> = KeyedBucket::builder(Quota::per_minute(100))
///     .algorithm(Algorithm::FixedWindow)
///     .max_keys(100_000)
///     .build();
/// assert!(per_user.try_acquire(&7, 100).is_ok());
/// let throttled = per_user.try_acquire(&7, 1).unwrap_err();
/// assert_eq!(throttled.wait(), Some(per_user.snapshot(&7).full_in)); // the next minute
/// assert_eq!(per_user.max_keys(), 100_000);
/// # }
/// ```
#[must_use]
pub struct KeyedBucketBuilder<K> {
    pub(super) plan: Plan,
    /// Plans other than the default, by name.
    pub(super) plans: Vec<(Box<str>, Plan)>,
    pub(super) resolve: Option<Resolver<K>>,
    pub(super) max_keys: usize,
    pub(super) shards: Option<usize>,
    pub(super) clock: Clock,
    /// Where window boundaries fall: `None` for the UNIX epoch.
    pub(super) window_origin: Option<Instant>,
}

impl<K> KeyedBucketBuilder<K> {
    /// The algorithm of the default plan's first quota (as [`Plan::algorithm`] sets it).
    /// Default [`Algorithm::TokenBucket`]. See [the costs per key](KeyedBucket#algorithms).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.plan = self.plan.with_algorithm(algorithm);
        self
    }

    /// Another plan, `name`, for the keys [`resolve`](Self::resolve) gives that name. Each
    /// plan has its own table of keys, of at most [`max_keys`](Self::max_keys). A second
    /// plan of the same name replaces the first.
    pub fn plan(mut self, name: impl Into<Box<str>>, plan: impl Into<Plan>) -> Self {
        let name = name.into();
        self.plans.retain(|(n, _)| *n != name);
        self.plans.push((name, plan.into()));
        self
    }

    /// How a key finds its plan: the name of one given to [`plan`](Self::plan), or `None`
    /// (or a name no plan has) for the default plan. Called on every request: a key whose
    /// plan changes is on the new plan from its next request on, carried over with no
    /// burst and nothing lost ([see plans](KeyedBucket#plans)).
    pub fn resolve(mut self, resolve: impl Fn(&K) -> Option<&str> + Send + Sync + 'static) -> Self {
        self.resolve = Some(Box::new(resolve));
        self
    }

    /// Align the windows of [`FixedWindow`](Algorithm::FixedWindow) or
    /// [`SlidingWindow`](Algorithm::SlidingWindow) keys to `origin`: boundaries at
    /// `origin + k·period` instead of multiples of the period since the UNIX epoch, for every
    /// key, as [`BucketBuilder::window_origin`](crate::BucketBuilder::window_origin) does for
    /// one bucket. Other algorithms ignore it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_throttle::{Algorithm, KeyedBucket, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let keys: KeyedBucket<u64> = KeyedBucket::builder(Quota::per_second(2))
    ///     .algorithm(Algorithm::FixedWindow)
    ///     .window_origin(tokio::time::Instant::now())
    ///     .build();
    /// keys.try_acquire(&7, 2).unwrap();
    /// // The window ends exactly one period after the origin.
    /// assert_eq!(keys.snapshot(&7).full_in, Duration::from_secs(1));
    /// # }
    /// ```
    pub fn window_origin(mut self, origin: Instant) -> Self {
        self.window_origin = Some(origin);
        self
    }

    /// The most keys tracked at once (at least 1). See [the cap](KeyedBucket#the-cap-on-keys).
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n.max(1);
        self
    }

    /// The number of shards (rounded down to a power of two, at most `max_keys`). The default
    /// is four per CPU.
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n.max(1));
        self
    }

    /// Decide on the CPU's time-stamp counter (through `quanta`) instead of tokio's clock:
    /// a faster clock read, for the hottest paths. Paused-time tests no longer drive the
    /// decisions, and the clock starts when this is called.
    #[cfg(feature = "quanta")]
    pub fn tsc_clock(mut self) -> Self {
        self.clock = Clock::tsc();
        self
    }

    /// The keyed bucket; nothing is allocated until the first key arrives.
    pub fn build(self) -> KeyedBucket<K>
    where
        K: Hash + Eq + Clone,
    {
        let wanted = self
            .shards
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get() * 4));
        let shards = prev_power_of_two(wanted.min(self.max_keys).min(1 << 12));
        let shard_max = self.max_keys / shards;
        let align = Align::new(self.window_origin, &self.clock);
        let mut plans = vec![(Box::from(""), self.plan)];
        plans.extend(self.plans);
        KeyedBucket {
            shared: Arc::new(Tiers::new(
                plans,
                self.resolve,
                self.clock,
                align,
                (shards, shard_max, self.max_keys),
            )),
        }
    }
}

pub(super) fn prev_power_of_two(n: usize) -> usize {
    let n = n.max(1);
    1 << (usize::BITS - 1 - n.leading_zeros())
}

impl<K> fmt::Debug for KeyedBucketBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBucketBuilder")
            .field("plan", &self.plan)
            .field("plans", &self.plans)
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards)
            .field("window_origin", &self.window_origin)
            .finish_non_exhaustive()
    }
}
