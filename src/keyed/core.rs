//! The keyed store for one [`Engine`]: sharded tables of per-key states, plus the shared
//! state of requests without a key.

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::table::{slot_size, Table};
use crate::engine::{Admit, Engine, View};

/// Where an admission was recorded, to undo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Table,
    Keyless,
}

/// A shard on its own cache lines, so that locking one does not slow its neighbours.
#[repr(align(128))]
struct Shard<K, S>(Mutex<Table<K, S>>);

pub(crate) struct Core<K, E: Engine> {
    pub(crate) engine: E,
    hasher: foldhash::quality::RandomState,
    shards: Box<[Shard<K, E::Packed>]>,
    /// Keys a shard may hold.
    shard_max: usize,
    /// Shared by requests that have no key, when so configured.
    keyless: Mutex<Option<E::State>>,
}

/// Recover the data if a holder ever panicked: no code path panics while holding a lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K, E: Engine> Core<K, E> {
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }
}

impl<K: Hash + Eq, E: Engine> Core<K, E> {
    pub(crate) fn new(engine: E, shards: usize, shard_max: usize) -> Self {
        Core {
            engine,
            hasher: foldhash::quality::RandomState::default(),
            shards: (0..shards)
                .map(|_| Shard(Mutex::new(Table::new())))
                .collect(),
            shard_max,
            keyless: Mutex::new(None),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> MutexGuard<'_, Table<K, E::Packed>> {
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
        let e = &self.engine;
        if let Some(i) = table.find(hash, key) {
            let admit = table
                .update(i, |p| e.unpacked(p, |s| e.admit(s, now, tokens, max_wait)))
                .unwrap_or(Err(0))?;
            return Ok((admit, Place::Table));
        }
        let mut state = e.empty();
        let admit = e.admit(&mut state, now, tokens, max_wait)?;
        let packed = e.pack(state);
        table.insert(&self.hasher, hash, key.clone(), packed, now, self.shard_max);
        Ok((admit, Place::Table))
    }

    /// Admit from the keyless state.
    pub(crate) fn acquire_keyless(
        &self,
        now: u64,
        tokens: u64,
        max_wait: u64,
    ) -> Result<Admit, u64> {
        let mut state = lock(&self.keyless);
        let state = state.get_or_insert_with(|| self.engine.empty());
        self.engine.admit(state, now, tokens, max_wait)
    }

    /// Undo `admit` if nothing was admitted after it in its bucket.
    pub(crate) fn refund(&self, key: Option<&K>, place: Place, admit: &Admit, now: u64) {
        let e = &self.engine;
        // Undone, and as if unused again.
        let undo = |s: &mut E::State| {
            e.undo(s, admit);
            e.expires(s) <= now
        };
        match (place, key) {
            (Place::Table, Some(key)) => {
                let hash = self.hasher.hash_one(key);
                let mut table = self.shard(hash);
                if let Some(i) = table.find(hash, key) {
                    if table.update(i, |p| e.unpacked(p, undo)) == Some(true) {
                        table.remove(&self.hasher, i);
                    }
                }
            }
            _ => {
                let mut state = lock(&self.keyless);
                if state.as_mut().is_some_and(undo) {
                    *state = None;
                }
            }
        }
    }

    /// The bucket of `key` at `now`.
    pub(crate) fn view(&self, key: &K, now: u64) -> View {
        let e = &self.engine;
        let hash = self.hasher.hash_one(key);
        let mut table = self.shard(hash);
        let found = table.find(hash, key);
        found
            .and_then(|i| table.update(i, |p| e.unpacked(p, |s| e.view(s, now))))
            .unwrap_or_else(|| e.view(&e.empty(), now))
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(&s.0).len()).sum()
    }

    /// Heap bytes of the tables' slots.
    pub(crate) fn allocated_bytes(&self) -> usize {
        let slots: usize = self.shards.iter().map(|s| lock(&s.0).capacity()).sum();
        slots * slot_size::<K, E::Packed>() + std::mem::size_of_val(&*self.shards)
    }
}
