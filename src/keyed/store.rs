//! [`KeyedBucket`]: one bucket per key, of any algorithm, in a sharded table that forgets unused
//! keys.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::core::{Core, Place};
use crate::clock::{Align, Clock};
use crate::engine::{Admit, Engine, Gcra, Log, Windows};
use crate::{Algorithm, Denied, ExceedsBurst, Quota, Snapshot, Throttled};

/// The default cap on tracked keys.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// One bucket per key (API key, user, client IP, route…), all with the same quota and
/// [`Algorithm`] (the token bucket unless [`KeyedBucketBuilder::algorithm`] says otherwise).
///
/// A key's bucket is created when the key is first seen and forgotten as soon as it is as if
/// unused again (a token bucket that is full, windows that have passed), which loses nothing:
/// that is what a new key gets. So the table holds only the keys that used some of their
/// quota recently, and it is cleaned as part of normal traffic (each insert sweeps a few
/// slots; the table drops expired entries before it grows and shrinks when it empties). There
/// is no thread to run and no `retain_recent` to call.
///
/// Cloning a `KeyedBucket` is cheap and never creates new buckets: clones share every key.
///
/// # Algorithms
/// Every [`Algorithm`] works per key, with the semantics it has on a [`Bucket`](crate::Bucket):
/// the same decisions and the same exact waits. A key's requests are decided in arrival
/// order, so a bounded wait ([`max_wait`](crate::reject::RejectLayer::max_wait)) never lets a
/// later request go before an earlier reservation. What a key costs:
///
/// | algorithm | state per key | slot with a `u64` key |
/// |---|---|---|
/// | token bucket, leaky bucket | the instant the bucket is full again (8 bytes) | 16 bytes |
/// | fixed window, sliding window | the latest window and two counts (16 bytes) | 24 bytes |
/// | sliding log | a pointer to the key's log: 48 bytes plus 16 per admission within the period | 16 bytes + the log |
///
/// # The cap on keys
/// At most [`max_keys`](KeyedBucketBuilder::max_keys) keys are tracked (default
/// 1,000,000, split evenly across the shards), so memory is bounded whatever the traffic. A
/// new key that finds its shard at the cap replaces an expired entry (a full bucket, which
/// loses nothing) or, when there is none, evicts the entry closest to a full bucket among
/// the next 64 of its shard. Every key gets a bucket of its own: a flood of new keys cannot
/// crowd out the keys that come after it. What it costs:
///
/// - **Memory**: at most `max_keys` slots (see below), whatever the rate of new keys.
/// - **Admissions**: an evicted key starts again from a full bucket. Each new key is one
///   full bucket, so `N` new keys per second are admitted up to `N × burst` per second, cap
///   or no cap: per-key limits cannot bound clients that rotate keys; a
///   [`global`](crate::RejectLayer::global) ceiling, or a coarser key in front
///   (an IPv6 /48, see [`PeerIp::ipv6_prefix`](crate::extract::PeerIp::ipv6_prefix)), does.
/// - **Throttled keys**: with the token or leaky bucket, a key that owes more than a flood
///   key is evicted only when every entry compared owes as much, so a flood must spend as
///   many requests per key as the evicted key would get back. Entries of the same window
///   (and logs) compare equal: evictions then walk each shard in turn, and a key evicted
///   keeps its next state for at least `max_keys` new keys. With `F` new keys per second, a
///   tracked key starts again at most once every `max_keys / F` seconds (a day at about 12
///   per second with the default cap), gaining at most one quota each time. Raise
///   `max_keys` above the new keys your windows see, or use the token bucket, to keep that
///   small.
///
/// # Hashing
/// Keys are hashed with a randomly seeded `foldhash`. Keys that an attacker can choose freely
/// (a header, a path) should go through a keyed digest first, as
/// [`HeaderKey`](crate::extract::HeaderKey) does.
///
/// ```
/// use std::time::Duration;
/// use tower_throttle::{KeyedBucket, Quota};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let buckets = KeyedBucket::new(Quota::per_second(2));
/// assert!(buckets.try_acquire(&"alice", 2).is_ok());
/// let throttled = buckets.try_acquire(&"alice", 1).unwrap_err();
/// assert_eq!(throttled.wait(), Some(Duration::from_millis(500)));
/// assert!(buckets.try_acquire(&"bob", 1).is_ok()); // keys are isolated
/// assert_eq!(buckets.len(), 2);
///
/// tokio::time::advance(Duration::from_secs(1)).await;
/// assert_eq!(buckets.snapshot(&"alice").available, 2); // full again
/// # }
/// ```
pub struct KeyedBucket<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    quota: Quota,
    algorithm: Algorithm,
    clock: Clock,
    max_keys: usize,
    tables: Tables<K>,
}

/// The store, specialised to the algorithm's engine.
enum Tables<K> {
    Gcra(Core<K, Gcra>),
    Windows(Core<K, Windows>),
    Log(Core<K, Log>),
}

/// Runs `$body` with `$core` bound to the store, whichever its engine.
macro_rules! on_core {
    ($tables:expr, $core:ident => $body:expr) => {
        match $tables {
            Tables::Gcra($core) => $body,
            Tables::Windows($core) => $body,
            Tables::Log($core) => $body,
        }
    };
}

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
    quota: Quota,
    max_keys: usize,
    shards: Option<usize>,
    clock: Clock,
    algorithm: Algorithm,
    /// Where window boundaries fall: `None` for the UNIX epoch.
    window_origin: Option<Instant>,
    _key: PhantomData<fn() -> K>,
}

impl<K> KeyedBucketBuilder<K> {
    /// The algorithm every key's bucket follows. Default [`Algorithm::TokenBucket`]. See
    /// [the costs per key](KeyedBucket#algorithms).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
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
        K: Hash + Eq,
    {
        let wanted = self
            .shards
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get() * 4));
        let shards = prev_power_of_two(wanted.min(self.max_keys).min(1 << 12));
        let shard_max = self.max_keys / shards;
        let (quota, algorithm) = (self.quota, self.algorithm);
        let tables = match algorithm {
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                let align = Align::new(self.window_origin, &self.clock);
                let phase = align.phase(quota.period_ns(), self.clock.now_ns());
                let windows = Windows::new(quota, algorithm, phase);
                Tables::Windows(Core::new(windows, shards, shard_max))
            }
            Algorithm::SlidingLog => Tables::Log(Core::new(Log::new(quota), shards, shard_max)),
            _ => Tables::Gcra(Core::new(Gcra::new(quota, algorithm), shards, shard_max)),
        };
        KeyedBucket {
            shared: Arc::new(Shared {
                quota,
                algorithm,
                clock: self.clock,
                max_keys: self.max_keys,
                tables,
            }),
        }
    }
}

fn prev_power_of_two(n: usize) -> usize {
    let n = n.max(1);
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// One request's admission granted by the store: enough to undo it, wait for it and
/// describe it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    admit: Admit,
    /// The clock when it was granted.
    now: u64,
    place: Place,
}

impl<K> KeyedBucket<K>
where
    K: Hash + Eq + Clone,
{
    /// One bucket per key, each of `quota`; at most 1,000,000 keys tracked.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// Configure the cap on keys or the number of shards.
    pub fn builder(quota: Quota) -> KeyedBucketBuilder<K> {
        KeyedBucketBuilder {
            quota,
            max_keys: DEFAULT_MAX_KEYS,
            shards: None,
            clock: Clock::tokio(),
            algorithm: Algorithm::TokenBucket,
            window_origin: None,
            _key: PhantomData,
        }
    }

    /// Take `n` tokens from the bucket of `key` now, or say how long until they fit.
    ///
    /// A refused request takes nothing.
    ///
    /// # Errors
    /// [`Denied::Throttled`] with the wait, or [`Denied::ExceedsBurst`] when `n` exceeds what
    /// one request may take (the burst, or a window's count): it can never fit.
    #[inline]
    pub fn try_acquire(&self, key: &K, n: u32) -> Result<(), Denied> {
        let s = &*self.shared;
        let tokens = u64::from(n);
        // The store's decision, inlined per engine: nothing of the grant is kept.
        on_core!(&s.tables, core => {
            if tokens == 0 {
                return Ok(());
            }
            if tokens > core.engine.capacity() {
                return Err(Denied::ExceedsBurst(ExceedsBurst {
                    requested: n,
                    burst: u32::try_from(core.engine.capacity()).unwrap_or(u32::MAX),
                }));
            }
            match core.acquire(key, s.clock.now_ns(), tokens, 0) {
                Ok(_) => Ok(()),
                Err(wait) => Err(Throttled::after(Duration::from_nanos(wait)).into()),
            }
        })
    }

    /// A read-only view of the bucket of `key` now.
    pub fn snapshot(&self, key: &K) -> Snapshot {
        let s = &*self.shared;
        let now = s.clock.now_ns();
        let view = on_core!(&s.tables, core => core.view(key, now));
        Snapshot {
            quota: s.quota,
            effective: s.quota,
            available: u32::try_from(view.available).unwrap_or(u32::MAX),
            next_token_in: Duration::from_nanos(view.next_in),
            full_in: Duration::from_nanos(view.full_in),
            paused_until: None,
            waiting: 0,
        }
    }

    /// Admit `n` tokens for `key` (at most the [`capacity`](Self::capacity)), or reserve them
    /// up to `max_wait` ahead; else the wait, in nanoseconds.
    #[inline]
    pub(crate) fn acquire(&self, key: &K, n: u32, max_wait: u64) -> Result<Grant, u64> {
        let s = &*self.shared;
        let now = s.clock.now_ns();
        on_core!(&s.tables, core => {
            let (admit, place) = core.acquire(key, now, u64::from(n), max_wait)?;
            Ok(Grant { admit, now, place })
        })
    }
}

impl<K: Hash + Eq> KeyedBucket<K> {
    /// The number of keys tracked now. It includes keys whose bucket is full again but has
    /// not been swept yet.
    pub fn len(&self) -> usize {
        on_core!(&self.shared.tables, core => core.len())
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held by the tables (slots; not any heap data the keys themselves own, nor
    /// the logs of [`Algorithm::SlidingLog`], 16 bytes per admission within the period).
    pub fn allocated_bytes(&self) -> usize {
        on_core!(&self.shared.tables, core => core.allocated_bytes())
    }

    /// Admit `n` tokens from the one bucket shared by requests that have no key.
    pub(crate) fn acquire_keyless(&self, n: u32, max_wait: u64) -> Result<Grant, u64> {
        let s = &*self.shared;
        let now = s.clock.now_ns();
        on_core!(&s.tables, core => {
            let admit = core.acquire_keyless(now, u64::from(n), max_wait)?;
            Ok(Grant { admit, now, place: Place::Keyless })
        })
    }

    /// Undo `grant` (for `key`) if nothing was admitted after it in its bucket.
    pub(crate) fn refund(&self, key: Option<&K>, grant: &Grant) {
        let s = &*self.shared;
        let now = s.clock.now_ns();
        let place = match (grant.place, key) {
            (Place::Table, None) => Place::Keyless,
            (place, _) => place,
        };
        on_core!(&s.tables, core => core.refund(key, place, &grant.admit, now));
    }
}

impl<K> KeyedBucket<K> {
    /// The quota of every key's bucket.
    pub fn quota(&self) -> Quota {
        self.shared.quota
    }

    /// The algorithm every key's bucket follows.
    pub fn algorithm(&self) -> Algorithm {
        self.shared.algorithm
    }

    /// The most keys tracked at once.
    pub fn max_keys(&self) -> usize {
        self.shared.max_keys
    }

    /// Whether `self` and `other` are handles to the same buckets.
    pub fn same_bucket(&self, other: &KeyedBucket<K>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Tokens left and the time until the limit resets, right after `grant`, seen when it is
    /// due (a reservation: at its instant).
    pub(crate) fn status(&self, grant: &Grant) -> (u64, Duration) {
        let (remaining, reset) =
            on_core!(&self.shared.tables, core => core.engine.status(&grant.admit));
        (remaining, Duration::from_nanos(reset))
    }

    /// The most tokens one request may take from a key's bucket.
    pub(crate) fn capacity(&self) -> u64 {
        on_core!(&self.shared.tables, core => core.engine.capacity())
    }

    /// The instant a reservation may go (`None` for an immediate admission).
    pub(crate) fn due(&self, grant: &Grant) -> Option<Instant> {
        let at = grant.admit.at;
        (at > grant.now).then(|| self.shared.clock.instant_at(at, grant.now))
    }
}

impl<K> Clone for KeyedBucket<K> {
    fn clone(&self) -> Self {
        KeyedBucket {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> fmt::Debug for KeyedBucket<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBucket")
            .field("quota", &self.shared.quota)
            .field("algorithm", &self.shared.algorithm)
            .field("max_keys", &self.shared.max_keys)
            .field(
                "shards",
                &on_core!(&self.shared.tables, c => c.shard_count()),
            )
            .finish_non_exhaustive()
    }
}

impl<K> fmt::Debug for KeyedBucketBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBucketBuilder")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards)
            .field("window_origin", &self.window_origin)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_counts() {
        assert_eq!(prev_power_of_two(0), 1);
        assert_eq!(prev_power_of_two(1), 1);
        assert_eq!(prev_power_of_two(7), 4);
        assert_eq!(prev_power_of_two(8), 8);
        let b: KeyedBucket<u64> = KeyedBucket::builder(Quota::per_second(1))
            .max_keys(3)
            .shards(64)
            .build();
        assert_eq!(on_core!(&b.shared.tables, c => c.shard_count()), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_key_beyond_the_cap_gets_its_own_bucket() {
        let b = KeyedBucket::builder(Quota::per_second(1).burst(2))
            .max_keys(2)
            .shards(1)
            .build();
        assert!(b.try_acquire(&1u64, 2).is_ok()); // throttled: owes 2 s
        for k in 2..100 {
            assert!(b.try_acquire(&k, 1).is_ok(), "key {k}");
            assert_eq!(b.snapshot(&k).available, 1, "key {k}");
        }
        assert!(b.try_acquire(&1, 1).is_err()); // key 1 kept its state
        assert_eq!(b.len(), 2);
    }
}
