//! [`KeyedBucket`]: one token bucket per key, in a sharded table that forgets full buckets.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::gcra::{Cell, Rate};
use super::remote::RemoteKeyed;
use super::table::{slot_size, Table};
use crate::bucket::Clock;
use crate::{Algorithm, Quota, Snapshot, Throttled};

/// The default cap on tracked keys.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// One token bucket per key (API key, user, client IP, route…), all with the same quota.
///
/// A key's bucket is created when the key is first seen and forgotten as soon as it is full
/// again, which loses nothing: a full bucket is what a new key gets. So the table holds only
/// the keys that used some of their quota within the last `burst / rate`, and it is cleaned as
/// part of normal traffic (each insert sweeps a few slots; the table drops expired entries
/// before it grows and shrinks when it empties). There is no thread to run and no
/// `retain_recent` to call.
///
/// Cloning a `KeyedBucket` is cheap and never creates new buckets: clones share every key.
///
/// # The cap on keys
/// At most [`max_keys`](KeyedBucketBuilder::max_keys) keys are tracked (default
/// 1,000,000, split evenly across the shards). A new key that finds its shard at the cap
/// first tries to replace an expired entry; when there is none it is limited by one shared
/// **overflow bucket** (same quota) instead of getting a bucket of its own. So a flood of new
/// keys can neither exhaust memory nor push out the state of keys that are being throttled:
/// only keys that are not tracked share the overflow bucket, until the flood subsides.
///
/// # Memory
/// A slot holds the key and one `u64`; with `u64` keys it is 16 bytes, and a growing table is
/// 1/2 to 3/4 full: 21 to 32 bytes per tracked key (see
/// [`allocated_bytes`](KeyedBucket::allocated_bytes)). [`HeaderKey`](super::HeaderKey) keys
/// are `u64`; IP keys take 32-byte slots.
///
/// # Hashing
/// Keys are hashed with a randomly seeded `foldhash`. Keys that an attacker can choose freely
/// (a header, a path) should go through a keyed digest first, as
/// [`HeaderKey`](super::HeaderKey) does.
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
/// assert_eq!(throttled.wait(), Duration::from_millis(500));
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
    rate: Rate,
    clock: Clock,
    hasher: foldhash::quality::RandomState,
    shards: Box<[Shard<K>]>,
    /// Keys a shard may hold.
    shard_max: usize,
    max_keys: usize,
    /// Shared by new keys that find their shard at the cap.
    overflow: Cell,
    /// Shared by requests that have no key, when so configured.
    keyless: Cell,
    /// Decisions made by a limit shared with other processes (Redis).
    remote: Option<Arc<dyn RemoteKeyed>>,
}

/// A shard on its own cache lines, so that locking one does not slow its neighbours.
#[repr(align(128))]
struct Shard<K>(Mutex<Table<K>>);

/// Builds a [`KeyedBucket`] with a non-default cap or shard count.
///
/// ```
/// use tower_throttle::{KeyedBucket, Quota};
///
/// let buckets: KeyedBucket<u64> = KeyedBucket::builder(Quota::per_minute(60))
///     .max_keys(100_000)
///     .build();
/// assert_eq!(buckets.max_keys(), 100_000);
/// ```
#[must_use]
pub struct KeyedBucketBuilder<K> {
    quota: Quota,
    max_keys: usize,
    shards: Option<usize>,
    clock: Clock,
    algorithm: Algorithm,
    remote: Option<Arc<dyn RemoteKeyed>>,
    _key: PhantomData<fn() -> K>,
}

impl<K> KeyedBucketBuilder<K> {
    /// Defer the rejecting layer's decisions to a limit shared with other processes.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn remote(mut self, remote: Arc<dyn RemoteKeyed>) -> Self {
        self.remote = Some(remote);
        self
    }

    /// The algorithm every key's bucket follows. Default [`Algorithm::TokenBucket`].
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
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
        KeyedBucket {
            shared: Arc::new(Shared {
                quota: self.quota,
                rate: Rate::new(self.quota),
                clock: self.clock,
                hasher: foldhash::quality::RandomState::default(),
                shards: (0..shards)
                    .map(|_| Shard(Mutex::new(Table::new())))
                    .collect(),
                shard_max: self.max_keys / shards,
                max_keys: self.max_keys,
                overflow: Cell::default(),
                keyless: Cell::default(),
                remote: self.remote,
            }),
        }
    }
}

fn prev_power_of_two(n: usize) -> usize {
    let n = n.max(1);
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// Where an admission was recorded, to undo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Table,
    Overflow,
    Keyless,
}

/// An admission granted by the store: enough to undo it, wait for it and describe it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    /// `tat` right after the admission.
    tat: u64,
    /// The clock when it was granted.
    now: u64,
    cost: u64,
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
            remote: None,
            _key: PhantomData,
        }
    }

    /// Take `n` tokens from the bucket of `key` now, or say how long until they fit.
    ///
    /// A refused request takes nothing.
    ///
    /// # Errors
    /// [`Throttled`] with the wait; when `n` exceeds the burst it can never fit:
    /// [`Throttled::exceeds_burst`] is true.
    #[inline]
    pub fn try_acquire(&self, key: &K, n: u32) -> Result<(), Throttled> {
        let Some(cost) = self.shared.rate.cost(n) else {
            return Err(Throttled::after(Duration::MAX));
        };
        if cost == 0 {
            return Ok(());
        }
        match self.acquire(key, cost, 0) {
            Ok(_) => Ok(()),
            Err(wait) => Err(Throttled::after(Duration::from_nanos(wait))),
        }
    }

    /// A read-only view of the bucket of `key` now.
    pub fn snapshot(&self, key: &K) -> Snapshot {
        let s = &*self.shared;
        let hash = s.hasher.hash_one(key);
        let now = s.clock.now_ns();
        let tat = {
            let table = s.lock(hash);
            match table.find(hash, key) {
                Some(i) => table.tat(i),
                None => 0,
            }
        };
        let ahead = tat.saturating_sub(now);
        Snapshot {
            quota: s.quota,
            available: u32::try_from(s.rate.remaining(tat, now)).unwrap_or(u32::MAX),
            next_token_in: Duration::from_nanos(
                (ahead + s.rate.interval).saturating_sub(s.rate.tolerance),
            ),
            full_in: Duration::from_nanos(ahead),
            paused_until: None,
            waiting: 0,
        }
    }

    /// The number of keys tracked now. It includes keys whose bucket is full again but has
    /// not been swept yet.
    pub fn len(&self) -> usize {
        self.shared.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held by the tables (slots; not any heap data the keys themselves own).
    pub fn allocated_bytes(&self) -> usize {
        let slots: usize = self.shared.shards.iter().map(|s| lock(s).capacity()).sum();
        slots * slot_size::<K>() + std::mem::size_of_val(&*self.shared.shards)
    }

    /// Admit `cost` for `key`, or reserve it up to `max_wait` ahead; else the wait, in
    /// nanoseconds.
    #[inline]
    pub(crate) fn acquire(&self, key: &K, cost: u64, max_wait: u64) -> Result<Grant, u64> {
        let s = &*self.shared;
        let hash = s.hasher.hash_one(key);
        let now = s.clock.now_ns();
        let mut table = s.lock(hash);
        if let Some(i) = table.find(hash, key) {
            let tat = s.rate.admit(table.tat(i), now, cost, max_wait)?;
            table.set_tat(i, tat);
            return Ok(Grant::new(tat, now, cost, Place::Table));
        }
        let tat = s.rate.admit(0, now, cost, max_wait)?;
        match table.insert(&s.hasher, hash, key.clone(), tat, now, s.shard_max) {
            Ok(()) => Ok(Grant::new(tat, now, cost, Place::Table)),
            Err(_) => {
                drop(table);
                trace_event!(
                    debug,
                    max_keys = s.max_keys,
                    "key table full: new key shares the overflow bucket"
                );
                let tat = s.overflow.admit(&s.rate, now, cost, max_wait)?;
                Ok(Grant::new(tat, now, cost, Place::Overflow))
            }
        }
    }
}

impl<K> KeyedBucket<K> {
    /// The shared limit this keyed bucket defers to (Redis), if any.
    pub(crate) fn remote(&self) -> Option<&Arc<dyn RemoteKeyed>> {
        self.shared.remote.as_ref()
    }

    /// The quota of every key's bucket.
    pub fn quota(&self) -> Quota {
        self.shared.quota
    }

    /// The most keys tracked at once.
    pub fn max_keys(&self) -> usize {
        self.shared.max_keys
    }

    /// Whether `self` and `other` are handles to the same buckets.
    pub fn same_bucket(&self, other: &KeyedBucket<K>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Admit `cost` from the one bucket shared by requests that have no key.
    pub(crate) fn acquire_keyless(&self, cost: u64, max_wait: u64) -> Result<Grant, u64> {
        let s = &*self.shared;
        let now = s.clock.now_ns();
        let tat = s.keyless.admit(&s.rate, now, cost, max_wait)?;
        Ok(Grant::new(tat, now, cost, Place::Keyless))
    }

    /// The bucket nanoseconds of one token.
    pub(crate) fn unit_cost(&self) -> u64 {
        self.shared.rate.interval
    }

    /// Tokens left after `grant`, at the instant it was granted.
    pub(crate) fn remaining(&self, grant: &Grant) -> u64 {
        self.shared.rate.remaining(grant.tat, grant.now)
    }

    /// Time from the grant until one more token is available.
    pub(crate) fn next_token(&self, grant: &Grant) -> Duration {
        self.shared.rate.next_token(grant.tat, grant.now)
    }

    /// `grant` as seen when it is due (a reservation: at its instant; else unchanged).
    pub(crate) fn at_due(&self, grant: &Grant) -> Grant {
        let at = self.shared.rate.admit_at(grant.tat);
        Grant {
            now: grant.now.max(at),
            ..*grant
        }
    }

    /// The instant a reservation may go (now, for an immediate admission).
    pub(crate) fn due(&self, grant: &Grant) -> Option<Instant> {
        let at = self.shared.rate.admit_at(grant.tat);
        (at > grant.now).then(|| self.shared.clock.instant_at(at, grant.now))
    }
}

impl<K: Hash + Eq> KeyedBucket<K> {
    /// Undo `grant` (for `key`) if nothing was admitted after it in its bucket.
    pub(crate) fn refund(&self, key: Option<&K>, grant: &Grant) {
        let s = &*self.shared;
        match (grant.place, key) {
            (Place::Overflow, _) => s.overflow.refund(grant.cost, grant.tat),
            (Place::Keyless, _) | (Place::Table, None) => s.keyless.refund(grant.cost, grant.tat),
            (Place::Table, Some(key)) => {
                let hash = s.hasher.hash_one(key);
                let now = s.clock.now_ns();
                s.lock(hash)
                    .refund(&s.hasher, hash, key, grant.cost, grant.tat, now);
            }
        }
    }
}

impl Grant {
    fn new(tat: u64, now: u64, cost: u64, place: Place) -> Self {
        Grant {
            tat,
            now,
            cost,
            place,
        }
    }
}

impl<K> Shared<K> {
    #[inline]
    fn lock(&self, hash: u64) -> MutexGuard<'_, Table<K>> {
        // Shard by the low bits; the table indexes by the high bits.
        lock(&self.shards[hash as usize & (self.shards.len() - 1)])
    }
}

fn lock<K>(shard: &Shard<K>) -> MutexGuard<'_, Table<K>> {
    // No code path panics while holding the lock; recover the data if one ever did.
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
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
            .field("max_keys", &self.shared.max_keys)
            .field("shards", &self.shared.shards.len())
            .finish_non_exhaustive()
    }
}

impl<K> fmt::Debug for KeyedBucketBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBucketBuilder")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards)
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
        assert_eq!(b.shared.shards.len(), 2);
        assert_eq!(b.shared.shard_max, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_key_beyond_the_cap_uses_the_overflow_bucket() {
        let b = KeyedBucket::builder(Quota::per_second(1).burst(2))
            .max_keys(1)
            .shards(1)
            .build();
        assert!(b.try_acquire(&1u64, 1).is_ok());
        assert!(b.try_acquire(&2, 1).is_ok()); // overflow: 1 of 2
        assert!(b.try_acquire(&3, 1).is_ok()); // overflow: 2 of 2
        assert!(b.try_acquire(&4, 1).is_err());
        assert!(b.try_acquire(&1, 1).is_ok()); // key 1 keeps its own bucket
        assert_eq!(b.len(), 1);
    }
}
