//! One shard of a [`KeyedBucket`](super::KeyedBucket): an open-addressing table from key to
//! its state (a [`Packed`] one), with linear probing and no tombstones.
//!
//! # Memory
//! A slot is an `Option<(K, S)>`. Every state has a niche (a `NonZeroU64` or a `Box`), so the
//! option costs nothing: with the token bucket's state (`tat`, never zero) a `u64` key takes
//! 16 bytes. The table is indexed by multiplying
//! the hash into its length (any length works, not only powers of two) and grows by half
//! when 3/4 full, so a growing table is 1/2 to 3/4 full: 21 to 32 bytes per `u64` key, with
//! no control bytes. It shrinks when less than 1/8 full.
//!
//! # Eviction
//! An entry whose state has expired (for a token bucket: whose `tat` has passed) is a full
//! bucket, the same as no entry, so removing it loses nothing. Removal happens as part of inserting, never on a thread of its own:
//! - every insert sweeps a couple of slots ahead of a cursor that walks the table;
//! - before the table grows, every expired entry is dropped, and it grows only if the live
//!   ones still need the room (so it tracks the keys active now, not every key ever seen);
//! - a table that has emptied shrinks.
//!
//! At its cap a table sweeps a bounded window looking for an expired entry to replace. When
//! it finds none it evicts, of the next [`SWEEP_AT_CAP`] entries from the cursor, the one
//! whose state expires first: the one closest to a full bucket, which loses the least. An
//! eviction cursor then moves past it, so successive evictions walk the whole table: a
//! flood of new keys cannot pin it, and every new key gets a state of its own.

use std::hash::{BuildHasher, Hash};

use crate::engine::Packed;

#[derive(Debug)]
struct Entry<K, S> {
    key: K,
    state: S,
}

/// Slots swept by every insert.
const SWEEP_PER_INSERT: usize = 4;
/// Slots swept, and entries compared for eviction, at most, by an insert into a table at its
/// cap.
pub(crate) const SWEEP_AT_CAP: usize = 64;
/// The smallest allocated table.
const MIN_CAPACITY: usize = 8;

#[derive(Debug)]
pub(crate) struct Table<K, S> {
    slots: Box<[Option<Entry<K, S>>]>,
    len: usize,
    /// Next slot the incremental sweep looks at.
    cursor: usize,
    /// Next slot eviction looks at.
    evict_at: usize,
    /// A lower bound of the earliest expiry in the table: before it nothing can be evicted.
    earliest: u64,
}

/// The bytes of one slot for keys of type `K` and states of type `S`.
pub(crate) const fn slot_size<K, S>() -> usize {
    std::mem::size_of::<Option<Entry<K, S>>>()
}

/// The largest table a shard of `max_len` keys needs: 3/4 full at the cap.
fn max_capacity(max_len: usize) -> usize {
    max_len
        .saturating_mul(4)
        .div_ceil(3)
        .saturating_add(1)
        .max(MIN_CAPACITY)
}

fn empty_slots<K, S>(n: usize) -> Box<[Option<Entry<K, S>>]> {
    (0..n).map(|_| None).collect()
}

impl<K: Hash + Eq, S: Packed> Table<K, S> {
    pub(crate) fn new() -> Self {
        Table {
            slots: empty_slots(0),
            len: 0,
            cursor: 0,
            evict_at: 0,
            earliest: u64::MAX,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        // Multiply-shift: maps the hash onto any table length without a division.
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    #[inline]
    fn prev(&self, i: usize) -> usize {
        i.checked_sub(1).unwrap_or(self.slots.len() - 1)
    }

    /// The slot holding `key`.
    #[inline]
    pub(crate) fn find(&self, hash: u64, key: &K) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(hash);
        // Terminates: the table is never more than 3/4 full.
        loop {
            match &self.slots[i] {
                None => return None,
                Some(e) if e.key == *key => return Some(i),
                Some(_) => i = self.next(i),
            }
        }
    }

    /// Changes the state in slot `i` (from [`find`](Self::find)) with `f`.
    #[inline]
    pub(crate) fn update<R>(&mut self, i: usize, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        let e = self.slots[i].as_mut()?;
        let r = f(&mut e.state);
        self.earliest = self.earliest.min(e.state.expires());
        Some(r)
    }

    /// Adds `key` (absent) with `state` (not yet expired). At the cap of `max_len` entries
    /// (at least one), an expired entry makes room, or else the live one that
    /// [`evict`](Self::evict) chooses.
    pub(crate) fn insert<H: BuildHasher>(
        &mut self,
        hasher: &H,
        hash: u64,
        key: K,
        state: S,
        now: u64,
        max_len: usize,
    ) {
        self.sweep(hasher, now, SWEEP_PER_INSERT);
        if self.len >= max_len {
            if now >= self.earliest {
                self.sweep(hasher, now, SWEEP_AT_CAP);
            }
            if self.len >= max_len {
                self.evict(hasher);
            }
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.make_room(hasher, now, max_len);
        }
        self.place(hash, Entry { key, state });
    }

    /// Removes, of the [`SWEEP_AT_CAP`] entries down from its own cursor, the one whose state
    /// expires first (the first of equals), and moves the cursor past its slot.
    ///
    /// The cursor walks down the table while entries are placed at or above their home: a
    /// key evicted and back at once lands behind the cursor, and waits a whole pass.
    fn evict<H: BuildHasher>(&mut self, hasher: &H) {
        let mut first: Option<(u64, usize)> = None;
        let (mut i, mut seen) = (self.evict_at % self.slots.len(), 0);
        for _ in 0..self.slots.len() {
            if let Some(e) = &self.slots[i] {
                let expires = e.state.expires();
                if first.is_none_or(|(f, _)| expires < f) {
                    first = Some((expires, i));
                }
                seen += 1;
                if seen == SWEEP_AT_CAP {
                    break;
                }
            }
            i = self.prev(i);
        }
        if let Some((_, i)) = first {
            self.remove(hasher, i);
            self.evict_at = self.prev(i);
        }
    }

    fn place(&mut self, hash: u64, entry: Entry<K, S>) {
        let mut i = self.home(hash);
        while self.slots[i].is_some() {
            i = self.next(i);
        }
        self.earliest = self.earliest.min(entry.state.expires());
        self.slots[i] = Some(entry);
        self.len += 1;
    }

    /// Drops every expired entry, then grows (if the live entries still need the room), keeps
    /// or shrinks the table.
    fn make_room<H: BuildHasher>(&mut self, hasher: &H, now: u64, max_len: usize) {
        let cap = self.slots.len();
        let live = self
            .slots
            .iter()
            .flatten()
            .filter(|e| e.state.expires() > now)
            .count();
        let needed = live + 1;
        let new_cap = if needed * 5 > cap * 3 {
            // Still more than 3/5 full: grow by half, so the next full pass is far off.
            (cap + cap / 2).max(MIN_CAPACITY).min(max_capacity(max_len))
        } else if needed * 8 < cap {
            (needed * 2).max(MIN_CAPACITY)
        } else {
            cap
        };
        self.rebuild(hasher, now, new_cap);
    }

    /// Moves the live entries into a table of `cap` slots.
    fn rebuild<H: BuildHasher>(&mut self, hasher: &H, now: u64, cap: usize) {
        let old = std::mem::replace(&mut self.slots, empty_slots(cap));
        self.len = 0;
        self.cursor = 0;
        self.evict_at = 0;
        self.earliest = u64::MAX;
        for entry in old.into_vec().into_iter().flatten() {
            if entry.state.expires() > now {
                let hash = hasher.hash_one(&entry.key);
                self.place(hash, entry);
            }
        }
    }

    /// Looks at up to `budget` slots from the cursor, removing expired entries.
    fn sweep<H: BuildHasher>(&mut self, hasher: &H, now: u64, budget: usize) {
        if self.len == 0 {
            return;
        }
        let mut removed = false;
        for _ in 0..budget {
            let i = self.cursor;
            match &self.slots[i] {
                // A removal shifts the next entries back into `i`: look at `i` again.
                Some(e) if e.state.expires() <= now => {
                    self.remove(hasher, i);
                    removed = true;
                    if self.len == 0 {
                        break;
                    }
                }
                _ => self.cursor = self.next(i),
            }
        }
        if removed && self.slots.len() > MIN_CAPACITY && self.len * 8 < self.slots.len() {
            self.rebuild(hasher, now, (self.len * 2).max(MIN_CAPACITY));
        }
    }

    /// Changes every state with `f`.
    pub(crate) fn update_all(&mut self, mut f: impl FnMut(&mut S)) {
        self.earliest = u64::MAX;
        for e in self.slots.iter_mut().flatten() {
            f(&mut e.state);
            self.earliest = self.earliest.min(e.state.expires());
        }
    }

    /// Removes slot `i`, shifting back the entries of its probe run (no tombstones), and
    /// returns its state.
    pub(crate) fn remove<H: BuildHasher>(&mut self, hasher: &H, i: usize) -> Option<S> {
        let removed = self.slots[i].take()?;
        self.len -= 1;
        let mut hole = i;
        let mut j = self.next(i);
        while let Some(e) = &self.slots[j] {
            let home = self.home(hasher.hash_one(&e.key));
            // The entry may fill the hole unless its home lies in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
            j = self.next(j);
        }
        Some(removed.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, Log, Windows};
    use std::num::NonZeroU64;

    type Tats = Table<u64, NonZeroU64>;

    fn hasher() -> foldhash::quality::FixedState {
        foldhash::quality::FixedState::with_seed(7)
    }

    fn insert(t: &mut Tats, key: u64, tat: u64, now: u64, max: usize) {
        let h = hasher();
        let tat = NonZeroU64::new(tat).unwrap();
        t.insert(&h, h.hash_one(key), key, tat, now, max);
    }

    fn find(t: &mut Tats, key: u64) -> Option<u64> {
        let i = t.find(hasher().hash_one(key), &key)?;
        t.update(i, |s| s.get())
    }

    #[test]
    fn slot_sizes() {
        assert_eq!(slot_size::<u64, NonZeroU64>(), 16);
        assert_eq!(slot_size::<std::net::IpAddr, NonZeroU64>(), 32);
        assert_eq!(slot_size::<u64, <Windows as Engine>::Packed>(), 24);
        assert_eq!(slot_size::<u64, <Log as Engine>::Packed>(), 16);
    }

    #[test]
    fn insert_find_and_grow() {
        let mut t: Tats = Table::new();
        for k in 0..1000 {
            insert(&mut t, k, 10 + k, 0, usize::MAX);
        }
        assert_eq!(t.len(), 1000);
        assert!(t.capacity() * 3 >= t.len() * 4);
        for k in 0..1000 {
            assert_eq!(find(&mut t, k), Some(10 + k));
        }
        assert_eq!(find(&mut t, 5000), None);
    }

    #[test]
    fn expired_entries_are_swept_and_the_table_shrinks() {
        let mut t: Tats = Table::new();
        for k in 0..10_000 {
            insert(&mut t, k, 100, 0, usize::MAX);
        }
        let big = t.capacity();
        // Later, every old entry is full again; new keys sweep them out.
        for k in 10_000..20_000 {
            insert(&mut t, k, 1000 + k, 500, usize::MAX);
        }
        assert!(t.capacity() <= big, "{} > {big}", t.capacity());
        for k in 10_000..20_000 {
            assert_eq!(find(&mut t, k), Some(1000 + k), "key {k}");
        }
        // And at 50_000 every entry has expired: the first inserts sweep and shrink.
        for k in 0..20_000 {
            insert(&mut t, 100_000 + k, 60_000, 50_000, usize::MAX);
        }
        assert!(t.len() <= 20_000 + SWEEP_PER_INSERT);
    }

    #[test]
    fn at_the_cap_the_entry_closest_to_full_makes_room() {
        let mut t: Tats = Table::new();
        insert(&mut t, 1, u64::MAX / 2, 0, 100); // throttled for a long time
        for k in 2..=100 {
            insert(&mut t, k, 10, 0, 100);
        }
        assert_eq!(t.len(), 100);
        // A flood of new keys, none expired yet: each gets its own entry, in place of one
        // of the flood's, and key 1 stays.
        for k in 1000..100_000 {
            insert(&mut t, k, 10, 0, 100);
            assert_eq!(find(&mut t, k), Some(10), "key {k}");
            assert_eq!(t.len(), 100);
        }
        assert_eq!(find(&mut t, 1), Some(u64::MAX / 2));
        // Once the short-lived entries expire, new keys replace them; key 1 stays.
        for k in 200_000..200_099 {
            insert(&mut t, k, 50, 20, 100);
        }
        assert_eq!(find(&mut t, 1), Some(u64::MAX / 2));
        assert!(t.len() <= 100);
    }

    #[test]
    fn among_equals_a_key_outlives_many_new_keys() {
        // Every entry expires at the same instant (one window). A key that comes back after
        // each eviction is evicted again only after `CAP` new keys, not by the next one.
        const CAP: usize = 1000;
        let mut t: Tats = Table::new();
        for k in 0..CAP as u64 {
            insert(&mut t, k, 10, 0, CAP);
        }
        let mut gaps = Vec::new();
        let (mut since, mut fresh) = (0, 1_000_000);
        for _ in 0..200_000 {
            insert(&mut t, fresh, 10, 0, CAP);
            fresh += 1;
            since += 1;
            assert_eq!(t.len(), CAP);
            if find(&mut t, 7).is_none() {
                gaps.push(since);
                since = 0;
                insert(&mut t, 7, 10, 0, CAP);
            }
        }
        // The first eviction comes when the cursor reaches the key; each later one a whole
        // pass after the key came back.
        assert!(gaps.len() >= 100, "{} evictions", gaps.len());
        let shortest = gaps[1..].iter().min().unwrap();
        assert!(*shortest >= CAP, "evicted again after {shortest} new keys");
    }

    #[test]
    fn removal_keeps_every_other_key_reachable() {
        // Many removals in a crowded table, checked against a model.
        let h = hasher();
        let mut t: Tats = Table::new();
        let mut model = std::collections::HashMap::new();
        let mut x: u64 = 1;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % 512;
            let now = step;
            let later = |tat: u64| NonZeroU64::new(tat).unwrap();
            if let Some(i) = t.find(h.hash_one(key), &key) {
                let tat = t.update(i, |s| s.get()).unwrap();
                if tat > now {
                    t.update(i, |s| *s = later(tat + 3));
                    model.insert(key, tat + 3);
                    continue;
                }
                t.update(i, |s| *s = later(now + 40));
            } else {
                t.insert(&h, h.hash_one(key), key, later(now + 40), now, 400);
            }
            model.insert(key, now + 40);
            for (k, tat) in &model {
                if *tat > now {
                    assert_eq!(find(&mut t, *k), Some(*tat), "key {k} at step {step}");
                }
            }
        }
    }
}
