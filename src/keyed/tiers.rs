//! The plans of a [`KeyedBucket`](super::KeyedBucket): one store per plan, and a key that
//! changes plan carried from one to the other on its next request.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::core::{granted, Granted, Place, Refused};
use super::tables::{on_core, Tables};
use crate::clock::{Align, Clock};
use crate::engine::{Admit, Engine as _, Phase, Price, Stack, View};
use crate::{Cost, Plan, Quota, Resource};

/// Finds the name of a key's plan.
pub(super) type Resolver<K> = Box<dyn Fn(&K) -> Option<&str> + Send + Sync>;

/// One plan and the states of the keys on it.
pub(super) struct Tier<K> {
    /// `""` for the default plan.
    pub(super) name: Box<str>,
    plan: Mutex<(Plan, Stack)>,
    /// The resource each quota counts, when some count another than requests (`None`: a
    /// cost is its number of requests).
    resources: Option<Box<[Resource]>>,
    /// The most one request may take of each quota (the first's follows `set_quota`).
    caps: Box<[AtomicU64]>,
    /// Which quotas count requests in flight, when some do.
    in_flight: Option<Box<[bool]>>,
    pub(super) tables: Tables<K>,
}

pub(crate) struct Tiers<K> {
    /// The default plan first.
    pub(super) tiers: Box<[Tier<K>]>,
    resolve: Option<Resolver<K>>,
    /// Keys that change plan are carried over under these (by hash): one move per key.
    moving: Box<[Mutex<()>]>,
    hasher: foldhash::quality::RandomState,
    pub(super) clock: Clock,
    pub(super) max_keys: usize,
    align: Align,
}

/// One request's admission granted by the store: enough to undo it, wait for it and
/// describe it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(super) admit: Admit,
    /// The clock when it was granted.
    pub(super) now: u64,
    pub(super) place: Place,
    /// The key's plan.
    pub(super) tier: usize,
    /// The plan's quota whose state it reports.
    pub(super) part: usize,
    /// Tokens left and nanoseconds until the limit resets, right after it, when asked.
    pub(super) status: Option<(u64, u64)>,
}

/// A refusal: the key's plan, and [`Refused`]; `wait` is `u64::MAX` for a cost that never
/// fits the plan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal {
    pub(crate) tier: usize,
    pub(crate) refused: Refused,
}

impl Grant {
    /// The key's plan.
    pub(crate) fn tier(&self) -> usize {
        self.tier
    }
}

impl Refusal {
    /// A cost that never fits quota `part` of plan `tier`.
    pub(super) fn never(tier: usize, part: usize) -> Self {
        Refusal {
            tier,
            refused: Refused {
                wait: u64::MAX,
                part,
            },
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K> Tier<K> {
    pub(super) fn plan(&self) -> Plan {
        lock(&self.plan).0.clone()
    }
}

impl<K: Hash + Eq + Clone> Tier<K> {
    /// What `cost` asks of quota `part`, and the most that quota takes of one request.
    pub(super) fn asked(&self, cost: &Cost, part: usize) -> (u64, u64) {
        match self.resources.as_ref().and_then(|r| r.get(part)) {
            Some(resource) => (u64::from(cost.of(resource)), self.cap(part)),
            None => (
                u64::from(cost.of(&Resource::REQUESTS)),
                self.tables.capacity(),
            ),
        }
    }

    fn cap(&self, part: usize) -> u64 {
        self.caps[part].load(Ordering::Relaxed)
    }
}

impl<K: Hash + Eq + Clone> Tiers<K> {
    /// `plans`: the default first, then the named ones.
    pub(super) fn new(
        plans: Vec<(Box<str>, Plan)>,
        resolve: Option<Resolver<K>>,
        clock: Clock,
        align: Align,
        (shards, shard_max, max_keys): (usize, usize, usize),
    ) -> Self {
        let now = clock.now_ns();
        let tiers = plans
            .into_iter()
            .map(|(name, plan)| {
                let shape = Stack::new(&plan, |width| align.phase(width, now));
                Tier {
                    name,
                    resources: (!plan.counts_requests_only())
                        .then(|| plan.parts().iter().map(|p| p.resource.clone()).collect()),
                    caps: (0..plan.parts().len())
                        .map(|i| AtomicU64::new(shape.capacity_at(i)))
                        .collect(),
                    in_flight: (plan.parts().iter().any(|p| p.in_flight))
                        .then(|| plan.parts().iter().map(|p| p.in_flight).collect()),
                    tables: Tables::new(&shape, shards, shard_max),
                    plan: Mutex::new((plan, shape)),
                }
            })
            .collect::<Box<[_]>>();
        let stripes = if tiers.len() > 1 { 64 } else { 0 };
        Tiers {
            tiers,
            resolve,
            moving: (0..stripes).map(|_| Mutex::new(())).collect(),
            hasher: foldhash::quality::RandomState::default(),
            clock,
            max_keys,
            align,
        }
    }

    /// The plan of `key`: the one its resolver names, else the default.
    pub(super) fn tier_of(&self, key: &K) -> usize {
        let Some(resolve) = self.resolve.as_ref().filter(|_| self.tiers.len() > 1) else {
            return 0;
        };
        resolve(key)
            .and_then(|name| self.tiers[1..].iter().position(|t| *t.name == *name))
            .map_or(0, |i| i + 1)
    }

    /// Admit `cost` for `key` (`None`: the requests without a key, on the default plan),
    /// or reserve it up to `max_wait` ahead. `describe`: with the status.
    #[inline]
    pub(crate) fn acquire(
        &self,
        key: Option<&K>,
        cost: &Cost,
        max_wait: u64,
        describe: bool,
    ) -> Result<Grant, Refusal> {
        let now = self.clock.now_ns();
        let t = key.map_or(0, |k| self.tier_of(k));
        let tier = &self.tiers[t];
        let refusal = |refused| Refusal { tier: t, refused };
        let amounts: Vec<u64>;
        let tokens = match &tier.resources {
            None => {
                let tokens = u64::from(cost.of(&Resource::REQUESTS));
                if tokens > tier.tables.capacity() {
                    return Err(Refusal::never(t, 0));
                }
                Price::One(tokens)
            }
            Some(resources) => {
                amounts = resources.iter().map(|r| u64::from(cost.of(r))).collect();
                if let Some(i) = (0..amounts.len()).find(|&i| amounts[i] > tier.cap(i)) {
                    return Err(Refusal::never(t, i));
                }
                Price::Each(&amounts)
            }
        };
        let granted = on_core!(&tier.tables, core => match key {
            None => core.acquire_keyless(now, tokens, max_wait),
            Some(key) if self.tiers.len() == 1 => {
                core.acquire(key, now, tokens, max_wait, describe)
            }
            Some(key) => match core.decide(key, now, tokens, max_wait, true, granted(describe)) {
                Some(decided) => decided,
                None => {
                    let stripe = self.hasher.hash_one(key) as usize % self.moving.len();
                    let _moving = lock(&self.moving[stripe]);
                    self.carry_to(key, t, now);
                    core.acquire(key, now, tokens, max_wait, describe)
                }
            },
        });
        let Granted {
            admit,
            place,
            status,
        } = granted.map_err(refusal)?;
        let part = match tier.tables {
            Tables::Stack(_) => Stack::tightest(&admit),
            _ => 0,
        };
        Ok(Grant {
            admit,
            now,
            place,
            tier: t,
            part,
            status,
        })
    }

    /// The state `key` has on another plan, if any, carried over to plan `t`.
    fn carry_to(&self, key: &K, t: usize, now: u64) {
        for (q, from) in self.tiers.iter().enumerate() {
            if q == t {
                continue;
            }
            if let Some(states) = from.tables.take(key) {
                // One lock at a time: moves the other way cannot deadlock with this one.
                let from = lock(&from.plan).1.clone();
                let to = lock(&self.tiers[t].plan).1.clone();
                let states = from.carry(states, &to, now);
                self.tiers[t].tables.put(key.clone(), states, now);
                return;
            }
        }
    }

    /// The limit of `key` now, and its plan.
    pub(super) fn view(&self, key: &K) -> (View, usize) {
        let t = self.tier_of(key);
        let now = self.clock.now_ns();
        (
            on_core!(&self.tiers[t].tables, core => core.view(key, now)),
            t,
        )
    }

    /// The default plan's first quota becomes `quota`, for every key on it from now on.
    pub(super) fn set_quota(&self, quota: Quota) {
        let tier = &self.tiers[0];
        let mut plan = lock(&tier.plan);
        let now = self.clock.now_ns();
        let phase = Phase::At(self.align.phase(quota.period_ns(), now));
        on_core!(&tier.tables, core => core.set_quota(quota, phase, now));
        let shape = plan.1.with_quota(&mut plan.1.empty(), quota, phase, now);
        tier.caps[0].store(shape.capacity_at(0), Ordering::Relaxed);
        *plan = (plan.0.with_first(quota), shape);
    }
}

impl<K: Hash + Eq> Tiers<K> {
    /// Undo `grant` (for `key`) if nothing was admitted after it in its bucket.
    pub(crate) fn refund(&self, key: Option<&K>, grant: &Grant) {
        let now = self.clock.now_ns();
        let place = match (grant.place, key) {
            (Place::Table, None) => Place::Keyless,
            (place, _) => place,
        };
        let tables = &self.tiers[grant.tier].tables;
        on_core!(tables, core => core.refund(key, place, &grant.admit, now));
    }

    /// What `grant`, of `requests`, holds of its plan's in-flight quotas, per quota; `None`
    /// when the plan has none.
    pub(crate) fn in_flight(&self, grant: &Grant, requests: u32) -> Option<Box<[u64]>> {
        let flags = self.tiers[grant.tier].in_flight.as_ref()?;
        Some(
            flags
                .iter()
                .map(|f| u64::from(*f) * u64::from(requests))
                .collect(),
        )
    }

    /// Give back `held` ([`in_flight`](Self::in_flight)) of `grant`, for `key`: its request
    /// ended.
    pub(crate) fn release(&self, key: Option<&K>, grant: &Grant, held: &[u64]) {
        let now = self.clock.now_ns();
        let place = match (grant.place, key) {
            (Place::Table, None) => Place::Keyless,
            (place, _) => place,
        };
        let tables = &self.tiers[grant.tier].tables;
        on_core!(tables, core => core.release(key, place, held, grant.admit.at, now));
    }

    pub(super) fn len(&self) -> usize {
        self.tiers
            .iter()
            .map(|t| on_core!(&t.tables, c => c.len()))
            .sum()
    }

    pub(super) fn allocated_bytes(&self) -> usize {
        self.tiers
            .iter()
            .map(|t| on_core!(&t.tables, c => c.allocated_bytes()))
            .sum()
    }
}
