//! The wait queue: the reservations that are not due yet, each with its admission instant.
//!
//! A slab: a waiter keeps its slot index for its whole life, and only its owner removes it,
//! so indices need no generation counter.

use std::task::Waker;

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) tokens: u32,
    /// Admission instant, nanoseconds on the bucket's clock.
    pub(crate) deadline: u64,
    /// Arrival order.
    pub(crate) seq: u64,
    pub(crate) waker: Option<Waker>,
    /// The request can no longer fit (the quota shrank below it).
    pub(crate) failed: bool,
}

#[derive(Debug)]
enum Slot {
    Full(Entry),
    Free(usize),
}

#[derive(Debug, Default)]
pub(crate) struct Queue {
    slots: Vec<Slot>,
    free: Option<usize>,
    len: usize,
}

impl Queue {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn insert(&mut self, entry: Entry) -> usize {
        self.len += 1;
        match self.free {
            Some(i) => {
                let Slot::Free(next) = self.slots[i] else {
                    unreachable!("free list points at a full slot")
                };
                self.free = (next != usize::MAX).then_some(next);
                self.slots[i] = Slot::Full(entry);
                i
            }
            None => {
                self.slots.push(Slot::Full(entry));
                self.slots.len() - 1
            }
        }
    }

    pub(crate) fn get_mut(&mut self, key: usize) -> &mut Entry {
        match &mut self.slots[key] {
            Slot::Full(e) => e,
            Slot::Free(_) => unreachable!("waiter slot {key} is free"),
        }
    }

    pub(crate) fn remove(&mut self, key: usize) -> Entry {
        let next = self.free.unwrap_or(usize::MAX);
        match std::mem::replace(&mut self.slots[key], Slot::Free(next)) {
            Slot::Full(e) => {
                self.free = Some(key);
                self.len -= 1;
                if self.len == 0 {
                    // Drop the capacity a past flood of waiters left behind.
                    self.slots.clear();
                    self.slots.shrink_to(16);
                    self.free = None;
                }
                e
            }
            Slot::Free(_) => unreachable!("waiter slot {key} removed twice"),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Entry)> {
        self.slots.iter().enumerate().filter_map(|(k, s)| match s {
            Slot::Full(e) => Some((k, e)),
            Slot::Free(_) => None,
        })
    }
}
