//! The keyed store for one [`Rule`]: sharded tables of per-key states, plus the two shared
//! states for keys beyond the cap (overflow) and requests without a key.

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::rule::{Admit, Rule, View};
use super::table::{slot_size, Table};

/// Where an admission was recorded, to undo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Table,
    Overflow,
    Keyless,
}

/// A shard on its own cache lines, so that locking one does not slow its neighbours.
#[repr(align(128))]
struct Shard<K, S>(Mutex<Table<K, S>>);

pub(crate) struct Core<K, R: Rule> {
    pub(crate) rule: R,
    hasher: foldhash::quality::RandomState,
    shards: Box<[Shard<K, R::State>]>,
    /// Keys a shard may hold.
    shard_max: usize,
    /// Shared by new keys that find their shard at the cap.
    overflow: Mutex<Option<R::State>>,
    /// Shared by requests that have no key, when so configured.
    keyless: Mutex<Option<R::State>>,
}

/// Recover the data if a holder ever panicked: no code path panics while holding a lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K, R: Rule> Core<K, R> {
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }
}

impl<K: Hash + Eq, R: Rule> Core<K, R> {
    pub(crate) fn new(rule: R, shards: usize, shard_max: usize) -> Self {
        Core {
            rule,
            hasher: foldhash::quality::RandomState::default(),
            shards: (0..shards)
                .map(|_| Shard(Mutex::new(Table::new())))
                .collect(),
            shard_max,
            overflow: Mutex::new(None),
            keyless: Mutex::new(None),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> MutexGuard<'_, Table<K, R::State>> {
        // Shard by the low bits; the table indexes by the high bits.
        lock(&self.shards[hash as usize & (self.shards.len() - 1)].0)
    }

    /// Admit `tokens` for `key`, or reserve them up to `max_wait` ahead; else the wait.
    #[inline]
    pub(crate) fn acquire(
        &self,
        key: &K,
        now: u64,
        tokens: u64,
        max_wait: u64,
    ) -> Result<(Admit, Place), u64>
    where
        K: Clone,
    {
        let hash = self.hasher.hash_one(key);
        let mut table = self.shard(hash);
        if let Some(i) = table.find(hash, key) {
            let admit = table
                .update(i, |s| self.rule.admit(s, now, tokens, max_wait))
                .unwrap_or(Err(0))?;
            return Ok((admit, Place::Table));
        }
        let (state, admit) = self.rule.admit_new(now, tokens, max_wait)?;
        if table.insert(&self.hasher, hash, key.clone(), state, now, self.shard_max) {
            return Ok((admit, Place::Table));
        }
        drop(table);
        trace_event!(debug, "key table full: new key shares the overflow bucket");
        let admit = self.acquire_shared(Place::Overflow, now, tokens, max_wait)?;
        Ok((admit, Place::Overflow))
    }

    fn shared(&self, place: Place) -> &Mutex<Option<R::State>> {
        if place == Place::Overflow {
            &self.overflow
        } else {
            &self.keyless
        }
    }

    /// Admit from the overflow or the keyless state.
    pub(crate) fn acquire_shared(
        &self,
        place: Place,
        now: u64,
        tokens: u64,
        max_wait: u64,
    ) -> Result<Admit, u64> {
        let mut state = lock(self.shared(place));
        match state.as_mut() {
            Some(s) => self.rule.admit(s, now, tokens, max_wait),
            None => {
                let (s, admit) = self.rule.admit_new(now, tokens, max_wait)?;
                *state = Some(s);
                Ok(admit)
            }
        }
    }

    /// Undo `admit` of `tokens` if nothing was admitted after it in its bucket.
    pub(crate) fn refund(
        &self,
        key: Option<&K>,
        place: Place,
        tokens: u64,
        admit: &Admit,
        now: u64,
    ) {
        match (place, key) {
            (Place::Table, Some(key)) => {
                let hash = self.hasher.hash_one(key);
                let mut table = self.shard(hash);
                if let Some(i) = table.find(hash, key) {
                    if table.update(i, |s| self.rule.refund(s, tokens, admit, now)) == Some(true) {
                        table.remove(&self.hasher, i);
                    }
                }
            }
            (place, _) => {
                let mut state = lock(self.shared(place));
                if let Some(s) = state.as_mut() {
                    if self.rule.refund(s, tokens, admit, now) {
                        *state = None;
                    }
                }
            }
        }
    }

    /// The bucket of `key` at `now`.
    pub(crate) fn view(&self, key: &K, now: u64) -> View {
        let hash = self.hasher.hash_one(key);
        let table = self.shard(hash);
        let state = table.find(hash, key).and_then(|i| table.get(i));
        self.rule.view(state, now)
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(&s.0).len()).sum()
    }

    /// Heap bytes of the tables' slots.
    pub(crate) fn allocated_bytes(&self) -> usize {
        let slots: usize = self.shards.iter().map(|s| lock(&s.0).capacity()).sum();
        slots * slot_size::<K, R::State>() + std::mem::size_of_val(&*self.shards)
    }
}
