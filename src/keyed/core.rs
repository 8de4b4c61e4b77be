//! The keyed store for one [`Engine`]: sharded tables of per-key states, plus the shared
//! state of requests without a key. Each shard keeps the engine with its table, so a new
//! quota reaches every key under the lock that decides for it.

use parking_lot::{Mutex, MutexGuard};
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use super::table::{slot_size, Table};
use crate::engine::{Admit, Engine, Phase, Price, View};
use crate::Quota;

/// Where an admission was recorded, to undo it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Table,
    Keyless,
}

/// An engine and the states it decides on.
struct Held<E, T> {
    engine: E,
    states: T,
}

/// A shard on its own cache lines, so that locking one does not slow its neighbours.
#[repr(align(128))]
struct Shard<K, E: Engine>(Mutex<Held<E, Table<K, E::Packed>>>);

pub(crate) struct Core<K, E: Engine> {
    hasher: foldhash::quality::RandomState,
    shards: Box<[Shard<K, E>]>,
    /// Keys a shard may hold.
    shard_max: usize,
    /// Shared by requests that have no key, when so configured.
    keyless: Mutex<Held<E, Option<E::State>>>,
    /// The engine's [`capacity`](Engine::capacity).
    capacity: AtomicU64,
}

/// An admission in the table, described (`describe`) or not.
pub(super) fn granted<E: Engine>(describe: bool) -> impl FnOnce(&E, Admit) -> Granted {
    move |e, admit| Granted {
        status: describe.then(|| e.status(&admit)),
        admit,
        place: Place::Table,
    }
}

/// A refusal: nanoseconds until the cost would fit, and the quota of the plan that holds it
/// back longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) wait: u64,
    pub(crate) part: usize,
}

/// An admission, where it was recorded, and its description ([`Engine::status`]) when asked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    pub(crate) admit: Admit,
    pub(crate) place: Place,
    /// Tokens left and nanoseconds until the limit resets, right after it.
    pub(crate) status: Option<(u64, u64)>,
}

impl<K, E: Engine> Core<K, E> {
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }
}

impl<K: Hash + Eq, E: Engine + Clone> Core<K, E> {
    pub(crate) fn new(engine: E, shards: usize, shard_max: usize) -> Self {
        Core {
            hasher: foldhash::quality::RandomState::default(),
            shards: (0..shards)
                .map(|_| {
                    Shard(Mutex::new(Held {
                        engine: engine.clone(),
                        states: Table::new(),
                    }))
                })
                .collect(),
            shard_max,
            capacity: AtomicU64::new(engine.capacity()),
            keyless: Mutex::new(Held {
                engine,
                states: None,
            }),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> MutexGuard<'_, Held<E, Table<K, E::Packed>>> {
        // Shard by the low bits; the table indexes by the high bits.
        self.shards[hash as usize & (self.shards.len() - 1)]
            .0
            .lock()
    }

    /// Admit `price` for `key`, or reserve them up to `max_wait` ahead; else the refusal.
    /// `describe`: with the [status](Granted::status).
    #[inline]
    pub(crate) fn acquire(
        &self,
        key: &K,
        now: u64,
        price: Price<'_>,
        max_wait: u64,
        describe: bool,
    ) -> Result<Granted, Refused>
    where
        K: Clone,
    {
        self.decide(key, now, price, max_wait, false, granted(describe))
            .unwrap_or(Err(Refused { wait: 0, part: 0 }))
    }

    /// Admit `tokens` for `key` now, keeping nothing of the admission; else the wait.
    #[inline]
    pub(crate) fn try_acquire(&self, key: &K, now: u64, tokens: u64) -> Result<(), u64>
    where
        K: Clone,
    {
        self.decide(key, now, Price::One(tokens), 0, false, |_, _| ())
            .unwrap_or(Err(Refused { wait: 0, part: 0 }))
            .map_err(|r| r.wait)
    }

    /// The decision for `key` (none if `only_known` and it has no state), the admission
    /// described by `made` (as [`granted`] does).
    #[inline(always)]
    pub(super) fn decide<R>(
        &self,
        key: &K,
        now: u64,
        price: Price<'_>,
        max_wait: u64,
        only_known: bool,
        made: impl FnOnce(&E, Admit) -> R,
    ) -> Option<Result<R, Refused>>
    where
        K: Clone,
    {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        let Held { engine: e, states } = &mut *shard;
        let decide = |s: &mut E::State| {
            e.admit(s, now, price, max_wait).map_err(|wait| Refused {
                wait,
                part: e.refused_by(s, price, now),
            })
        };
        let admitted = if let Some(i) = states.find(hash, key) {
            states.update(i, |p| e.unpacked(p, decide))?
        } else if only_known {
            return None;
        } else {
            let mut state = e.empty();
            let admitted = decide(&mut state);
            if admitted.is_ok() {
                let packed = e.pack(state);
                states.insert(&self.hasher, hash, key.clone(), packed, now, self.shard_max);
            }
            admitted
        };
        Some(admitted.map(|admit| made(e, admit)))
    }

    /// Admit from the keyless state.
    pub(crate) fn acquire_keyless(
        &self,
        now: u64,
        price: Price<'_>,
        max_wait: u64,
    ) -> Result<Granted, Refused> {
        let mut held = self.keyless.lock();
        let Held { engine: e, states } = &mut *held;
        let state = states.get_or_insert_with(|| e.empty());
        let admit = e
            .admit(state, now, price, max_wait)
            .map_err(|wait| Refused {
                wait,
                part: e.refused_by(state, price, now),
            })?;
        Ok(Granted {
            status: Some(e.status(&admit)),
            admit,
            place: Place::Keyless,
        })
    }

    /// Undo `admit` if nothing was admitted after it in its bucket.
    pub(crate) fn refund(&self, key: Option<&K>, place: Place, admit: &Admit, now: u64) {
        // Undone, and as if unused again.
        self.give_back(key, place, now, |e, s| e.undo(s, admit));
    }

    /// Give back `amounts` (per quota) of an admission at `at` of `key`, the admissions
    /// since staying as they were: its request ended ([`Engine::release_each`]).
    pub(crate) fn release(
        &self,
        key: Option<&K>,
        place: Place,
        amounts: &[u64],
        at: u64,
        now: u64,
    ) {
        self.give_back(key, place, now, |e, s| e.release_each(s, amounts, at));
    }

    /// Run `f` on the state of `key` (at `place`), if it has one, and forget the state if it
    /// then means no more than none at `now`.
    fn give_back(&self, key: Option<&K>, place: Place, now: u64, f: impl Fn(&E, &mut E::State)) {
        let apply = |e: &E, s: &mut E::State| {
            f(e, s);
            e.expires(s) <= now
        };
        match (place, key) {
            (Place::Table, Some(key)) => {
                let hash = self.hasher.hash_one(key);
                let mut shard = self.shard(hash);
                let Held { engine: e, states } = &mut *shard;
                if let Some(i) = states.find(hash, key) {
                    if states.update(i, |p| e.unpacked(p, |s| apply(e, s))) == Some(true) {
                        states.remove(&self.hasher, i);
                    }
                }
            }
            _ => {
                let mut held = self.keyless.lock();
                let Held { engine: e, states } = &mut *held;
                if states.as_mut().is_some_and(|s| apply(e, s)) {
                    *states = None;
                }
            }
        }
    }

    /// The bucket of `key` at `now`.
    pub(crate) fn view(&self, key: &K, now: u64) -> View {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        let Held { engine: e, states } = &mut *shard;
        let found = states.find(hash, key);
        found
            .and_then(|i| states.update(i, |p| e.unpacked(p, |s| e.view(s, now))))
            .unwrap_or_else(|| e.view(&e.empty(), now))
    }

    /// Remove the state of `key`, if any.
    pub(crate) fn take(&self, key: &K) -> Option<E::State> {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        let Held { engine: e, states } = &mut *shard;
        let i = states.find(hash, key)?;
        let mut packed = states.remove(&self.hasher, i)?;
        Some(e.unpacked(&mut packed, |s| std::mem::replace(s, e.empty())))
    }

    /// Give `key` (absent) `state`.
    pub(crate) fn put(&self, key: K, state: E::State, now: u64) {
        let hash = self.hasher.hash_one(&key);
        let mut shard = self.shard(hash);
        let Held { engine: e, states } = &mut *shard;
        if e.expires(&state) > now && states.find(hash, &key).is_none() {
            let packed = e.pack(state);
            states.insert(&self.hasher, hash, key, packed, now, self.shard_max);
        }
    }

    /// Every key's limit, and the keyless one, follow `quota` from `now` on
    /// ([`Engine::carry_quota`]: no burst, fractional progress kept, turns booked kept).
    pub(crate) fn set_quota(&self, quota: Quota, phase: Phase, now: u64) {
        let convert = |e: &E, s: &mut E::State| {
            let _ = e.carry_quota(s, quota, phase, now);
        };
        for shard in self.shards.iter() {
            let mut held = shard.0.lock();
            let Held { engine: e, states } = &mut *held;
            let new = e.with_quota(&mut e.empty(), quota, phase, now);
            states.update_all(|p| e.unpacked(p, |s| convert(e, s)));
            *e = new;
        }
        let mut held = self.keyless.lock();
        let Held { engine: e, states } = &mut *held;
        let new = e.with_quota(&mut e.empty(), quota, phase, now);
        if let Some(s) = states.as_mut() {
            convert(e, s);
        }
        self.capacity.store(new.capacity(), Ordering::Relaxed);
        *e = new;
    }

    /// The engine the keys follow now.
    pub(crate) fn engine(&self) -> E {
        self.keyless.lock().engine.clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().states.len()).sum()
    }

    /// Heap bytes of the tables' slots.
    pub(crate) fn allocated_bytes(&self) -> usize {
        let slots: usize = self
            .shards
            .iter()
            .map(|s| s.0.lock().states.capacity())
            .sum();
        slots * slot_size::<K, E::Packed>() + std::mem::size_of_val(&*self.shards)
    }
}
