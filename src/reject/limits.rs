//! The admission decision of a [`Reject`](super::Reject) service: per-key bucket first, then
//! the bucket (a single-bucket layer) or the global ceiling (a keyed layer).
//!
//! # Per-key and global, all or nothing
//! The key's bucket is checked and charged first. Only if it admits is the global bucket
//! asked; if the global bucket refuses, the key's charge is taken back at once. So a request
//! refused by its key never touches the global bucket, and one refused by the global bucket
//! costs its key nothing. (The take-back is exact unless another request of the same key was
//! admitted in the few nanoseconds between: then the key keeps the charge, which errs on the
//! side of the limit.)

use std::hash::Hash;
use std::time::Duration;

use http::Request;

use super::fields::Policies;
use super::missing::{FailOnce, MissingKey};
use super::policy::{self, limit_refusal, limit_status, GLOBAL, SINGLE};
use super::rejected::Rejected;
use super::wait::Pending;
use crate::extract::KeyExtractor;
use crate::limit::{Decision, KeyDecision, KeyHold, KeyedLimit, Limit};
use crate::slot::Slot;
use crate::Cost;

/// The extractor of a layer of one limit, which has no keys: one limit for every request is
/// [`RejectLayer::new`](super::RejectLayer::new).
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl<B> KeyExtractor<B> for Single {
    type Key = ();

    fn extract(&self, _: &Request<B>) -> Option<()> {
        Some(())
    }
}

/// The keyed part of a layer.
#[derive(Clone)]
pub(crate) struct Keyed<K, E> {
    pub(crate) limit: KeyedLimit<K>,
    pub(crate) extractor: E,
    /// `None`: the extractor's default.
    pub(crate) missing: Option<MissingKey>,
    pub(crate) fail_once: FailOnce,
}

impl<K, E> Keyed<K, E> {
    /// What to do with a request without a key, or the verdict on it.
    fn on_missing<B>(&self) -> Result<MissingKey, Rejected>
    where
        E: KeyExtractor<B>,
    {
        let default = if self.extractor.requires_key() {
            MissingKey::Fail
        } else {
            MissingKey::Shared
        };
        match self.missing.unwrap_or(default) {
            MissingKey::Reject => Err(Rejected::missing_key(false)),
            MissingKey::Fail => {
                self.fail_once.note();
                Err(Rejected::missing_key(true))
            }
            outcome => Ok(outcome),
        }
    }
}

/// Every limit a layer enforces.
#[derive(Clone)]
pub(crate) struct Limits<K, E> {
    keyed: Option<Keyed<K, E>>,
    /// The single limit, or the global ceiling of a keyed layer.
    limit: Option<Limit>,
}

/// What to do with a request.
pub(crate) enum Verdict<K: Hash + Eq> {
    /// Go now; the state of each limit when asked for, the key's plan, and the request's
    /// place in the in-flight quotas.
    Admit([Option<super::rejected::Status>; 2], usize, Slot),
    Reject(Rejected),
    /// Go after a wait (bounded wait only).
    Wait(Box<Pending<K>>),
}

impl<K, E> Limits<K, E> {
    pub(crate) fn single(limit: Limit) -> Self {
        Limits {
            keyed: None,
            limit: Some(limit),
        }
    }

    pub(crate) fn keyed(keyed: Keyed<K, E>, global: Option<Limit>) -> Self {
        Limits {
            keyed: Some(keyed),
            limit: global,
        }
    }

    /// Replace the single limit, or set the global ceiling of a keyed layer.
    pub(crate) fn set_limit(&mut self, limit: Limit) {
        self.limit = Some(limit);
    }

    /// What a keyed layer does with a request without a key.
    pub(crate) fn set_missing(&mut self, missing: MissingKey) {
        if let Some(k) = &mut self.keyed {
            k.missing = Some(missing);
        }
    }

    /// The limits as `RateLimit-Policy` names them, for a key on plan `tier` (the limit's
    /// quota may change).
    pub(crate) fn policies(&self, tier: usize) -> Policies {
        policy::policies(self.keyed_limit(), tier, self.limit(), self.keyed.is_some())
    }

    pub(crate) fn keyed_limit(&self) -> Option<&KeyedLimit<K>> {
        self.keyed.as_ref().map(|k| &k.limit)
    }

    pub(crate) fn limit(&self) -> Option<&Limit> {
        self.limit.as_ref()
    }

    /// How the limit is named and reported.
    fn limit_name(&self) -> &'static str {
        if self.keyed.is_some() {
            GLOBAL
        } else {
            SINGLE
        }
    }
}

impl<K, E> Limits<K, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// Decide for `req`, which costs `cost`. `max_wait` (nanoseconds) bounds a wait for
    /// the key's limit or the single limit; the global ceiling of a keyed layer never queues.
    /// `describe` asks for the state of each limit after admission (for the rate-limit fields).
    pub(crate) fn check<B>(
        &self,
        req: &Request<B>,
        cost: &Cost,
        max_wait: u64,
        describe: bool,
    ) -> Verdict<K>
    where
        E: KeyExtractor<B, Key = K>,
    {
        let mut statuses = [None, None];
        let (mut held, mut slot) = (None, Slot::default());
        if cost.is_free() {
            return Verdict::Admit(statuses, 0, Slot::default());
        }
        if let Some(k) = &self.keyed {
            let decision = match k.extractor.extract(req) {
                Some(key) => Some(k.limit.decide(Some(key), cost, max_wait, describe)),
                None => match k.on_missing::<B>() {
                    Ok(MissingKey::Shared) => Some(k.limit.decide(None, cost, max_wait, describe)),
                    Ok(_) => None,
                    Err(rejected) => return Verdict::Reject(rejected),
                },
            };
            match decision {
                None => {}
                Some(KeyDecision::Refused(denied, which)) => {
                    return Verdict::Reject(policy::key_refusal(&k.limit, which, denied));
                }
                Some(KeyDecision::Later(turn)) => {
                    let global = self.limit.clone();
                    return Verdict::Wait(Box::new(Pending::key(
                        k.limit.clone(),
                        turn,
                        global,
                        cost.clone(),
                    )));
                }
                Some(KeyDecision::Now(hold)) => {
                    if describe {
                        statuses[0] = policy::key_status(&k.limit, hold.level());
                    }
                    held = Some(hold);
                }
            }
        }
        if let Some(limit) = &self.limit {
            let name = self.limit_name();
            // The global ceiling of a keyed layer never queues.
            let max_wait = match &self.keyed {
                Some(_) => Duration::ZERO,
                None => Duration::from_nanos(max_wait),
            };
            match limit.decide(cost, max_wait) {
                Decision::Now(Ok(permit)) => {
                    slot = limit.slot(permit, cost);
                    if describe {
                        statuses[1] = limit_status(limit, name);
                    }
                }
                Decision::Now(Err(denied)) => {
                    let tier = held.as_ref().map_or(0, KeyHold::tier);
                    if let Some(hold) = held.as_mut() {
                        hold.refund();
                    }
                    return Verdict::Reject(limit_refusal(limit, name, cost, denied).in_plan(tier));
                }
                Decision::Later(turn) => {
                    return Verdict::Wait(Box::new(match (&self.keyed, held) {
                        (Some(k), Some(hold)) => {
                            Pending::held(k.limit.clone(), hold, limit.clone(), turn, cost)
                        }
                        _ => Pending::single(limit.clone(), turn, name, cost),
                    }));
                }
            }
        }
        let tier = held.as_ref().map_or(0, KeyHold::tier);
        if let Some(hold) = held.as_mut() {
            slot = hold.spend().and(slot);
        }
        Verdict::Admit(statuses, tier, slot)
    }
}
