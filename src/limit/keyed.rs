//! [`KeyedLimit`]: a limit per key, kept in this process or in Redis, and what the
//! rejecting layer holds of a key's admission.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

#[cfg(feature = "redis")]
use crate::extract::{KeyDigest, StableKey};
use crate::keyed::{Grant, KeyedBucket};
#[cfg(feature = "redis")]
use crate::redis::RedisKeyed;
use crate::slot::Slot;
use crate::{Cost, Denied, Plan, Quota, Resource};

/// The name of requests that have no key (`MissingKey::Shared`) in Redis: reserved bytes,
/// not the digest of any key's bytes (short of a SHA-1 preimage).
#[cfg(feature = "redis")]
const KEYLESS: KeyDigest = KeyDigest::from_bytes(*b"\0tower-throttle\0");

/// One limit per key for a rejecting layer: a [`KeyedBucket`] in this process, or a
/// `redis::RedisKeyed` shared by server replicas.
///
/// [`RejectLayer::keyed`](crate::RejectLayer::keyed) takes `impl Into<KeyedLimit<K>>`, so
/// either goes there. Cloning is cheap and shares the limit.
pub struct KeyedLimit<K> {
    store: Store<K>,
}

enum Store<K> {
    Table(KeyedBucket<K>),
    /// Keys named by their [`StableKey`] digest, exactly as [`RedisKeyed::try_acquire`]
    /// names them.
    #[cfg(feature = "redis")]
    Redis {
        redis: RedisKeyed,
        name: fn(&K) -> KeyDigest,
    },
}

impl<K> From<KeyedBucket<K>> for KeyedLimit<K> {
    fn from(bucket: KeyedBucket<K>) -> Self {
        KeyedLimit {
            store: Store::Table(bucket),
        }
    }
}

#[cfg(feature = "redis")]
impl<K: StableKey> From<RedisKeyed> for KeyedLimit<K> {
    /// Every decision of the rejecting layer is Redis's (with `max_wait` too): server
    /// replicas share one limit per key. Keys are named by their [`StableKey`] digest,
    /// exactly as [`RedisKeyed::try_acquire`] names them. With a global ceiling, a request
    /// the ceiling refuses gives its key's token back.
    fn from(redis: RedisKeyed) -> Self {
        KeyedLimit {
            store: Store::Redis {
                redis,
                name: <K as StableKey>::key_digest,
            },
        }
    }
}

impl<K> KeyedLimit<K> {
    /// The first quota of the default plan.
    pub(crate) fn quota(&self) -> Quota {
        match &self.store {
            Store::Table(t) => t.quota(),
            #[cfg(feature = "redis")]
            Store::Redis { redis, .. } => redis.quota(),
        }
    }

    /// The plan `tier` of a decision ([`Which`]).
    pub(crate) fn plan(&self, tier: usize) -> Plan {
        match &self.store {
            Store::Table(t) => t.plan_of(tier),
            #[cfg(feature = "redis")]
            Store::Redis { redis, .. } => redis.plan_at(tier),
        }
    }
}

/// The plan a key's decision was made on, and the quota of it the decision is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Which {
    pub(crate) tier: usize,
    pub(crate) part: usize,
}

/// A key's decision: admitted (held until spent), refused, or a turn to wait for.
pub(crate) enum KeyDecision<K: Hash + Eq> {
    Now(KeyHold<K>),
    Refused(Denied, Which),
    Later(KeyTurn<K>),
}

impl<K: Hash + Eq + Clone> KeyedLimit<K> {
    /// Admit `cost` for `key` (`None`: the requests without a key, together), or reserve
    /// it up to `max_wait` nanoseconds ahead. `describe`: keep what the fields need
    /// ([`KeyHold::level`]).
    pub(crate) fn decide(
        &self,
        key: Option<K>,
        cost: &Cost,
        max_wait: u64,
        describe: bool,
    ) -> KeyDecision<K> {
        match &self.store {
            Store::Table(table) => {
                let grant = match table.shared.acquire(key.as_ref(), cost, max_wait, describe) {
                    Ok(grant) => grant,
                    Err(refusal) => {
                        let which = Which {
                            tier: refusal.tier,
                            part: refusal.refused.part,
                        };
                        return KeyDecision::Refused(table.denied(&refusal, cost), which);
                    }
                };
                let due = table.due(&grant);
                let held = table.shared.in_flight(&grant, cost.of(&Resource::REQUESTS));
                let hold = KeyHold {
                    kind: Hold::Table {
                        table: table.clone(),
                        key,
                        grant,
                        held,
                    },
                    armed: true,
                };
                match due {
                    None => KeyDecision::Now(hold),
                    Some(due) => KeyDecision::Later(KeyTurn {
                        kind: TurnKind::Due {
                            hold: Some(hold),
                            sleep: Box::pin(tokio::time::sleep_until(due)),
                        },
                    }),
                }
            }
            #[cfg(feature = "redis")]
            Store::Redis { redis, name } => {
                let id = key.as_ref().map_or(KEYLESS, name);
                let max_wait = Duration::from_nanos(max_wait);
                let (r, deciding) = (redis.clone(), redis.clone());
                let tier = redis.tier_of(&id);
                KeyDecision::Later(KeyTurn {
                    kind: TurnKind::Shared {
                        redis: r,
                        id,
                        cost: cost.clone(),
                        tier,
                        deciding: Box::pin({
                            let cost = cost.clone();
                            async move { deciding.try_acquire_within(id, tier, &cost, max_wait).await }
                        }),
                    },
                })
            }
        }
    }
}

/// A key's admission, given back when dropped before it is [spent](Self::spend).
pub(crate) struct KeyHold<K: Hash + Eq> {
    kind: Hold<K>,
    armed: bool,
}

enum Hold<K> {
    Table {
        table: KeyedBucket<K>,
        key: Option<K>,
        grant: Grant,
        /// What it holds of the plan's in-flight quotas.
        held: Option<Box<[u64]>>,
    },
    #[cfg(feature = "redis")]
    Redis {
        redis: RedisKeyed,
        id: KeyDigest,
        cost: Cost,
        tier: usize,
        /// The admission's instant on the Redis clock, µs, when Redis decided.
        at_us: Option<u64>,
    },
}

impl<K: Hash + Eq> KeyHold<K> {
    /// The request goes: the admission is used, and its place in the plan's in-flight
    /// quotas held until the [`Slot`] is dropped.
    pub(crate) fn spend(&mut self) -> Slot
    where
        K: Clone + Send + Sync + 'static,
    {
        self.armed = false;
        match &mut self.kind {
            Hold::Table {
                table,
                key,
                grant,
                held,
            } => match held.take() {
                Some(held) => {
                    let (table, key, grant) = (table.clone(), key.clone(), *grant);
                    Slot::new(move || table.shared.release(key.as_ref(), &grant, &held))
                }
                None => Slot::default(),
            },
            #[cfg(feature = "redis")]
            Hold::Redis {
                redis,
                id,
                cost,
                tier,
                at_us,
            } => match at_us {
                Some(at) => redis.in_flight_slot(*id, *tier, cost, *at),
                None => Slot::default(),
            },
        }
    }

    /// Give the admission back now (another limit refused the request).
    pub(crate) fn refund(&mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        match &self.kind {
            Hold::Table {
                table, key, grant, ..
            } => table.shared.refund(key.as_ref(), grant),
            #[cfg(feature = "redis")]
            Hold::Redis {
                redis,
                id,
                cost,
                tier,
                ..
            } => redis.release_detached(*id, *tier, cost.clone()),
        }
    }

    /// The requests left to the key and the time until its next token, when this process
    /// knows them (an in-process limit), and which plan and quota they are about.
    pub(crate) fn level(&self) -> Option<(u64, Duration, Which)> {
        match &self.kind {
            Hold::Table { table, grant, .. } => {
                let (remaining, reset, tier, part) = table.status(grant)?;
                Some((remaining, reset, Which { tier, part }))
            }
            #[cfg(feature = "redis")]
            Hold::Redis { .. } => None,
        }
    }

    /// The key's plan.
    pub(crate) fn tier(&self) -> usize {
        match &self.kind {
            Hold::Table { grant, .. } => grant.tier(),
            #[cfg(feature = "redis")]
            Hold::Redis { tier, .. } => *tier,
        }
    }
}

impl<K: Hash + Eq> Drop for KeyHold<K> {
    fn drop(&mut self) {
        self.refund();
    }
}

/// What Redis decides of a key: admitted (at an instant of the Redis clock, µs, when Redis
/// decided), or refused by a quota of its plan.
#[cfg(feature = "redis")]
type Deciding = Result<Option<u64>, (Denied, usize)>;

/// A key's admission being waited for.
pub(crate) struct KeyTurn<K: Hash + Eq> {
    kind: TurnKind<K>,
}

enum TurnKind<K: Hash + Eq> {
    /// Reserved in this process, due when `sleep` ends.
    Due {
        hold: Option<KeyHold<K>>,
        sleep: Pin<Box<Sleep>>,
    },
    /// Being decided in Redis.
    #[cfg(feature = "redis")]
    Shared {
        redis: RedisKeyed,
        id: KeyDigest,
        cost: Cost,
        tier: usize,
        deciding: Pin<Box<dyn Future<Output = Deciding> + Send>>,
    },
}

impl<K: Hash + Eq> KeyTurn<K> {
    /// The admission, once it comes; a refusal with the plan and quota that refused.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<KeyHold<K>, (Denied, Which)>> {
        match &mut self.kind {
            TurnKind::Due { hold, sleep } => {
                std::task::ready!(sleep.as_mut().poll(cx));
                Poll::Ready(Ok(hold.take().expect("polled after completion")))
            }
            #[cfg(feature = "redis")]
            TurnKind::Shared {
                redis,
                id,
                cost,
                tier,
                deciding,
            } => {
                let tier = *tier;
                let at_us = std::task::ready!(deciding.as_mut().poll(cx))
                    .map_err(|(denied, part)| (denied, Which { tier, part }))?;
                Poll::Ready(Ok(KeyHold {
                    kind: Hold::Redis {
                        redis: redis.clone(),
                        id: *id,
                        cost: cost.clone(),
                        tier,
                        at_us,
                    },
                    armed: true,
                }))
            }
        }
    }
}

impl<K> Clone for KeyedLimit<K> {
    fn clone(&self) -> Self {
        let store = match &self.store {
            Store::Table(t) => Store::Table(t.clone()),
            #[cfg(feature = "redis")]
            Store::Redis { redis, name } => Store::Redis {
                redis: redis.clone(),
                name: *name,
            },
        };
        KeyedLimit { store }
    }
}

impl<K> fmt::Debug for KeyedLimit<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.store {
            Store::Table(t) => fmt::Debug::fmt(t, f),
            #[cfg(feature = "redis")]
            Store::Redis { redis, .. } => fmt::Debug::fmt(redis, f),
        }
    }
}
