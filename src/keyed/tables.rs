//! A plan's keyed store, specialised to its engine: a plan of one quota on that quota's own
//! engine (a key costs what that engine's state costs), a larger plan as a [`Stack`].

use std::hash::Hash;

use super::core::Core;
use crate::engine::stack::{One, OneState};
use crate::engine::{Gcra, Log, Stack, Windows};

/// The store, specialised to the plan's engine.
pub(super) enum Tables<K> {
    Gcra(Core<K, Gcra>),
    Windows(Core<K, Windows>),
    Log(Core<K, Log>),
    Stack(Core<K, Stack>),
}

/// Runs `$body` with `$core` bound to the store, whichever its engine.
macro_rules! on_core {
    ($tables:expr, $core:ident => $body:expr) => {
        match $tables {
            $crate::keyed::tables::Tables::Gcra($core) => $body,
            $crate::keyed::tables::Tables::Windows($core) => $body,
            $crate::keyed::tables::Tables::Log($core) => $body,
            $crate::keyed::tables::Tables::Stack($core) => $body,
        }
    };
}
pub(super) use on_core;

impl<K: Hash + Eq + Clone> Tables<K> {
    /// The store of the plan whose engine is `shape`, in `shards` shards of `shard_max` keys.
    pub(super) fn new(shape: &Stack, shards: usize, shard_max: usize) -> Self {
        match shape.ones() {
            [One::Gcra(e)] => Tables::Gcra(Core::new(*e, shards, shard_max)),
            [One::Windows(e)] => Tables::Windows(Core::new(*e, shards, shard_max)),
            [One::Log(e)] => Tables::Log(Core::new(*e, shards, shard_max)),
            _ => Tables::Stack(Core::new(shape.clone(), shards, shard_max)),
        }
    }

    /// Remove the state of `key`, quota by quota.
    pub(super) fn take(&self, key: &K) -> Option<Vec<OneState>> {
        Some(match self {
            Tables::Gcra(c) => vec![OneState::Gcra(c.take(key)?)],
            Tables::Windows(c) => vec![OneState::Windows(c.take(key)?)],
            Tables::Log(c) => vec![OneState::Log(c.take(key)?)],
            Tables::Stack(c) => Stack::into_states(c.take(key)?),
        })
    }

    /// Give `key` (absent) the states `states`, made by this store's engines.
    pub(super) fn put(&self, key: K, states: Vec<OneState>, now: u64) {
        let first = states.into_iter();
        match (self, first) {
            (Tables::Stack(c), states) => {
                let layers = c.engine().layers(states.collect());
                c.put(key, layers, now);
            }
            (Tables::Gcra(c), mut s) => {
                if let Some(OneState::Gcra(t)) = s.next() {
                    c.put(key, t, now);
                }
            }
            (Tables::Windows(c), mut s) => {
                if let Some(OneState::Windows(w)) = s.next() {
                    c.put(key, w, now);
                }
            }
            (Tables::Log(c), mut s) => {
                if let Some(OneState::Log(l)) = s.next() {
                    c.put(key, l, now);
                }
            }
        }
    }

    pub(super) fn capacity(&self) -> u64 {
        on_core!(self, c => c.capacity())
    }
}
