//! The wait queue: requests waiting for their turn, first come, first served.
//!
//! A slab threaded by a doubly linked list in arrival order: joining, leaving from any place
//! (a dropped waiter) and finding the head are all O(1), with no search and no sort. A waiter
//! keeps its slot index for its whole life, and only its owner removes it, so indices need
//! no generation counter.

use std::sync::Arc;
use std::task::Waker;

/// No slot: the end of the list.
const NIL: usize = usize::MAX;

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) tokens: u32,
    /// The amount per quota of a plan whose quotas are charged apart.
    pub(crate) each: Option<Arc<[u64]>>,
    /// The instant the waiter's timer is armed for (nanoseconds on the bucket's clock); at or
    /// before the present when it waits for the one ahead of it to go.
    pub(crate) armed: u64,
    pub(crate) waker: Option<Waker>,
    /// When it became first in line.
    pub(crate) first_since: u64,
    /// The request can no longer fit (the quota shrank below it).
    pub(crate) failed: bool,
    prev: usize,
    next: usize,
}

impl Entry {
    pub(crate) fn new(tokens: u32, armed: u64) -> Self {
        Entry {
            tokens,
            each: None,
            armed,
            waker: None,
            first_since: 0,
            failed: false,
            prev: NIL,
            next: NIL,
        }
    }
}

#[derive(Debug)]
enum Slot {
    Full(Entry),
    Free(usize),
}

#[derive(Debug)]
pub(crate) struct Queue {
    slots: Vec<Slot>,
    free: usize,
    len: usize,
    head: usize,
    tail: usize,
    /// The tokens of every queued request.
    tokens: u64,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            slots: Vec::new(),
            free: NIL,
            len: 0,
            head: NIL,
            tail: NIL,
            tokens: 0,
        }
    }
}

impl Queue {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tokens asked for by everyone queued.
    pub(crate) fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The first in line.
    pub(crate) fn head(&self) -> Option<usize> {
        (self.head != NIL).then_some(self.head)
    }

    /// Join at the back.
    pub(crate) fn push(&mut self, mut entry: Entry) -> usize {
        self.len += 1;
        self.tokens += u64::from(entry.tokens);
        entry.prev = self.tail;
        entry.next = NIL;
        let key = if self.free == NIL {
            self.slots.push(Slot::Full(entry));
            self.slots.len() - 1
        } else {
            let i = self.free;
            let Slot::Free(next) = self.slots[i] else {
                unreachable!("free list points at a full slot")
            };
            self.free = next;
            self.slots[i] = Slot::Full(entry);
            i
        };
        match self.tail {
            NIL => self.head = key,
            t => self.get_mut(t).next = key,
        }
        self.tail = key;
        key
    }

    pub(crate) fn get_mut(&mut self, key: usize) -> &mut Entry {
        match &mut self.slots[key] {
            Slot::Full(e) => e,
            Slot::Free(_) => unreachable!("waiter slot {key} is free"),
        }
    }

    /// Leave the line from wherever it stands.
    pub(crate) fn remove(&mut self, key: usize) -> Entry {
        let e = match std::mem::replace(&mut self.slots[key], Slot::Free(self.free)) {
            Slot::Full(e) => e,
            Slot::Free(_) => unreachable!("waiter slot {key} removed twice"),
        };
        self.free = key;
        self.len -= 1;
        self.tokens -= u64::from(e.tokens);
        match e.prev {
            NIL => self.head = e.next,
            p => self.get_mut(p).next = e.next,
        }
        match e.next {
            NIL => self.tail = e.prev,
            n => self.get_mut(n).prev = e.prev,
        }
        if self.len == 0 {
            // Drop the capacity a past flood of waiters left behind.
            self.slots.clear();
            self.slots.shrink_to(16);
            self.free = NIL;
        }
        e
    }

    /// Every entry, in no particular order.
    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.slots.iter_mut().filter_map(|s| match s {
            Slot::Full(e) => Some(e),
            Slot::Free(_) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_arrival_order_through_removals() {
        let mut q = Queue::default();
        let keys: Vec<usize> = (0..5).map(|i| q.push(Entry::new(i + 1, 0))).collect();
        assert_eq!(q.tokens(), 15);
        q.remove(keys[2]);
        assert_eq!(q.head(), Some(keys[0]));
        q.remove(keys[0]);
        assert_eq!(q.head(), Some(keys[1]));
        q.remove(keys[1]);
        assert_eq!(q.head(), Some(keys[3]));
        let k = q.push(Entry::new(7, 0));
        q.remove(keys[4]);
        q.remove(keys[3]);
        assert_eq!(q.head(), Some(k));
        assert_eq!(q.tokens(), 7);
        q.remove(k);
        assert!(q.is_empty() && q.head().is_none());
    }
}
