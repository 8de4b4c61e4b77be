//! The wait queue: requests waiting for their turn, by [`Priority`] class with weighted
//! fair shares, first come, first served within a class.
//!
//! A slab threaded by one doubly linked list per class in arrival order: joining, leaving
//! from any place (a dropped waiter) and finding the head are all O(1), with no search and no
//! sort. A waiter keeps its slot index for its whole life, and only its owner removes it, so
//! indices need no generation counter.
//!
//! The head is chosen by start-time fair queueing: a request joining starts, in virtual time,
//! where the one before it in its class finishes (`tokens / weight` after its start), or at
//! the present virtual time if its class was idle; the earliest start goes first (the higher
//! class at a tie), and the virtual time moves to it. Under saturation each class is admitted
//! its weight's share, within one request; an idle class's share goes to the others and is
//! not saved up; a lone waiter of any class goes within a bounded number of others'. A
//! waiter that leaves unadmitted moves no one's start.

use std::sync::Arc;
use std::task::Waker;

use crate::Priority;

/// No slot: the end of the list.
const NIL: usize = usize::MAX;

/// Virtual time per token of a class of weight 1.
const SCALE: u64 = 1 << 20;

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
    /// The class it waits in.
    pub(crate) priority: Priority,
    /// Its start in virtual time.
    start: u64,
    prev: usize,
    next: usize,
}

impl Entry {
    pub(crate) fn new(tokens: u32, armed: u64, priority: Priority) -> Self {
        Entry {
            tokens,
            each: None,
            armed,
            waker: None,
            first_since: 0,
            failed: false,
            priority,
            start: 0,
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

/// One class's line.
#[derive(Debug, Clone, Copy)]
struct Line {
    head: usize,
    tail: usize,
    /// The tokens of its queued requests.
    tokens: u64,
    /// Virtual time per token.
    step: u64,
    /// Where its last request finishes, in virtual time.
    finish: u64,
}

#[derive(Debug)]
pub(crate) struct Queue {
    slots: Vec<Slot>,
    free: usize,
    len: usize,
    lines: [Line; Priority::COUNT],
    /// The virtual time: the start of the request admitted last.
    now: u64,
}

impl Queue {
    /// An empty queue whose classes have `weights` (each at least 1).
    pub(crate) fn new(weights: [u32; Priority::COUNT]) -> Self {
        Queue {
            slots: Vec::new(),
            free: NIL,
            len: 0,
            lines: weights.map(|w| Line {
                head: NIL,
                tail: NIL,
                tokens: 0,
                step: SCALE / u64::from(w.max(1)),
                finish: 0,
            }),
            now: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tokens asked for by everyone queued.
    pub(crate) fn tokens(&self) -> u64 {
        self.lines.iter().map(|l| l.tokens).sum()
    }

    /// Where class `c`'s head starts in virtual time, if it has one.
    fn head_start(&self, c: usize) -> Option<(u64, usize)> {
        let head = self.lines[c].head;
        (head != NIL).then(|| match &self.slots[head] {
            Slot::Full(e) => (e.start, head),
            Slot::Free(_) => unreachable!("a line's head is a free slot"),
        })
    }

    /// The first in line: the head that starts first (the higher class at a tie).
    pub(crate) fn head(&self) -> Option<usize> {
        (0..Priority::COUNT)
            .filter_map(|c| self.head_start(c))
            .min_by_key(|(start, _)| *start)
            .map(|(_, key)| key)
    }

    /// The tokens that go before a request of class `priority` joining now, in service
    /// order: those of its class, and of each other class with waiters, those that start
    /// before it, that class staying busy (its requests to come included, which overtake
    /// it). An overestimate when a busy class empties: a turn predicted late is handed over
    /// on time, where one predicted early would wake its waiter twice.
    pub(crate) fn ahead(&self, priority: Priority) -> u64 {
        let c = priority.index();
        let starts = self.lines[c].finish.max(self.now);
        let others = (0..Priority::COUNT).filter(|&d| d != c).map(|d| {
            let Some((first, _)) = self.head_start(d) else {
                return 0;
            };
            // A higher class goes first at a tie.
            let span = (starts + u64::from(d < c)).saturating_sub(first);
            span.div_ceil(self.lines[d].step.max(1))
        });
        self.lines[c].tokens + others.sum::<u64>()
    }

    /// Join at the back of its class.
    pub(crate) fn push(&mut self, mut entry: Entry) -> usize {
        self.len += 1;
        let c = entry.priority.index();
        let line = &mut self.lines[c];
        line.tokens += u64::from(entry.tokens);
        entry.start = line.finish.max(self.now);
        let took = u64::from(entry.tokens.max(1)).saturating_mul(line.step);
        line.finish = entry.start.saturating_add(took);
        entry.prev = line.tail;
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
        match self.lines[c].tail {
            NIL => self.lines[c].head = key,
            t => self.get_mut(t).next = key,
        }
        self.lines[c].tail = key;
        key
    }

    pub(crate) fn get_mut(&mut self, key: usize) -> &mut Entry {
        match &mut self.slots[key] {
            Slot::Full(e) => e,
            Slot::Free(_) => unreachable!("waiter slot {key} is free"),
        }
    }

    /// Leave the line from wherever it stands; `admitted`: it leaves as the head, admitted,
    /// and the virtual time moves to its start.
    pub(crate) fn remove(&mut self, key: usize, admitted: bool) -> Entry {
        let e = match std::mem::replace(&mut self.slots[key], Slot::Free(self.free)) {
            Slot::Full(e) => e,
            Slot::Free(_) => unreachable!("waiter slot {key} removed twice"),
        };
        self.free = key;
        self.len -= 1;
        if admitted {
            self.now = self.now.max(e.start);
        }
        let line = &mut self.lines[e.priority.index()];
        line.tokens -= u64::from(e.tokens);
        if e.prev == NIL {
            line.head = e.next;
        }
        if e.next == NIL {
            line.tail = e.prev;
            if !admitted {
                // The last of its class: the next to join takes its start.
                line.finish = e.start;
            }
        }
        if e.prev != NIL {
            self.get_mut(e.prev).next = e.next;
        }
        if e.next != NIL {
            self.get_mut(e.next).prev = e.prev;
        }
        if self.len == 0 {
            // Drop the capacity a past flood of waiters left behind, and the virtual time.
            self.slots.clear();
            self.slots.shrink_to(16);
            self.free = NIL;
            self.now = 0;
            self.lines.iter_mut().for_each(|l| l.finish = 0);
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

    const N: Priority = Priority::Normal;

    #[test]
    fn keeps_arrival_order_through_removals() {
        let mut q = Queue::new([6, 3, 1]);
        let keys: Vec<usize> = (0..5).map(|i| q.push(Entry::new(i + 1, 0, N))).collect();
        assert_eq!(q.tokens(), 15);
        q.remove(keys[2], false);
        assert_eq!(q.head(), Some(keys[0]));
        q.remove(keys[0], true);
        assert_eq!(q.head(), Some(keys[1]));
        q.remove(keys[1], true);
        assert_eq!(q.head(), Some(keys[3]));
        let k = q.push(Entry::new(7, 0, N));
        q.remove(keys[4], false);
        q.remove(keys[3], true);
        assert_eq!(q.head(), Some(k));
        assert_eq!(q.tokens(), 7);
        q.remove(k, true);
        assert!(q.is_empty() && q.head().is_none());
    }

    const CLASSES: [Priority; 3] = [Priority::Critical, Priority::Normal, Priority::Background];

    /// Admit `n` heads of a queue that keeps `busy` classes saturated: admissions per class.
    fn shares(weights: [u32; 3], busy: [bool; 3], n: usize) -> [usize; 3] {
        let mut q = Queue::new(weights);
        let mut class_of = std::collections::HashMap::new();
        for (c, p) in CLASSES.iter().enumerate().filter(|(c, _)| busy[*c]) {
            for _ in 0..3 {
                class_of.insert(q.push(Entry::new(1, 0, *p)), c);
            }
        }
        let mut got = [0; 3];
        for _ in 0..n {
            let head = q.head().unwrap();
            let c = class_of[&head];
            q.remove(head, true);
            got[c] += 1;
            class_of.insert(q.push(Entry::new(1, 0, CLASSES[c])), c);
        }
        got
    }

    #[test]
    fn saturated_classes_get_their_weights_shares() {
        for n in [10, 100, 1000, 997] {
            let got = shares([6, 3, 1], [true; 3], n);
            for (c, w) in [6, 3, 1].into_iter().enumerate() {
                let due = n as f64 * f64::from(w) / 10.0;
                assert!((got[c] as f64 - due).abs() <= 1.0, "{n}: {got:?}");
            }
        }
        // An idle class's share goes to the others, in their weights' proportion.
        let got = shares([6, 3, 1], [true, false, true], 700);
        assert_eq!(got, [600, 0, 100]);
        assert_eq!(shares([6, 3, 1], [false, true, false], 50), [0, 50, 0]);
    }

    #[test]
    fn a_lone_background_waiter_goes_within_its_share() {
        let mut q = Queue::new([6, 3, 1]);
        for _ in 0..20 {
            q.push(Entry::new(1, 0, Priority::Critical));
        }
        let lone = q.push(Entry::new(1, 0, Priority::Background));
        let mut before = 0;
        while q.head() != Some(lone) {
            let head = q.head().unwrap();
            q.remove(head, true);
            q.push(Entry::new(1, 0, Priority::Critical));
            before += 1;
        }
        assert!(before <= 6, "{before} critical admissions went first");
    }

    #[test]
    fn a_class_idle_for_long_saves_nothing_up() {
        let mut q = Queue::new([1, 1, 1]);
        // Normal alone for 100 admissions, then a critical flood arrives.
        q.push(Entry::new(1, 0, N));
        for _ in 0..100 {
            q.push(Entry::new(1, 0, N));
            q.remove(q.head().unwrap(), true);
        }
        let floods: Vec<usize> = (0..20)
            .map(|_| q.push(Entry::new(1, 0, Priority::Critical)))
            .collect();
        let mut critical = 0;
        for _ in 0..20 {
            let head = q.head().unwrap();
            q.remove(head, true);
            if floods.contains(&head) {
                critical += 1;
            } else {
                q.push(Entry::new(1, 0, N));
            }
        }
        // Equal weights share from the start: the idle class has no credit for its idle time.
        assert!((10..=11).contains(&critical), "{critical} of 20");
    }

    #[test]
    fn leaving_unadmitted_moves_no_one() {
        let mut q = Queue::new([6, 3, 1]);
        let a = q.push(Entry::new(1, 0, N));
        let b = q.push(Entry::new(1, 0, Priority::Background));
        let c = q.push(Entry::new(1, 0, N));
        q.remove(a, true);
        // The normal class's next starts after `a`; background's at the present: it goes.
        assert_eq!(q.head(), Some(b));
        q.remove(c, false);
        assert_eq!(q.head(), Some(b));
        let d = q.push(Entry::new(1, 0, N));
        q.remove(b, false);
        assert_eq!(q.head(), Some(d));
        // What each class waits behind, in service order.
        assert_eq!(q.ahead(N), 1);
        assert_eq!(q.ahead(Priority::Critical), 0);
    }
}
