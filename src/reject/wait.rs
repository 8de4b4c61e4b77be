//! Bounded waiting: a request over the limit that fits within
//! [`max_wait`](super::RejectLayer::max_wait) holds a reservation and sleeps until it is due.
//!
//! - **Per key**: the key's limit reserves the instant (it is at most `max_wait` away, or the
//!   request is refused at once). When it comes, the global ceiling, if any, is asked without
//!   waiting; if it refuses, the key's reservation is given back and the request is refused.
//!   A request never holds a per-key reservation while queueing for the global limit (that
//!   would let the key's requests go out closer together than its quota allows).
//! - **Single limit**: the request joins the limit's fair queue; if its turn has not come
//!   `max_wait` after it arrived (a pause intervened), it leaves the queue and is refused.
//!
//! Dropping the response future while it waits (the client went away) gives the reservation
//! back.

use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::fields::{Policies, Spec};
use super::policy::{self, limit_refusal, limit_status, policies, GLOBAL};
use super::rejected::{Rejected, Status};
use crate::limit::{Decision, KeyHold, KeyTurn, KeyedLimit, Limit, Turn};
use crate::observe::Observer;
use crate::slot::Slot;
use crate::Cost;

/// A reservation being waited for.
// Kept in the future of a request that waits, made only on that path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Pending<K: Hash + Eq> {
    /// The key's turn, then the global ceiling's decision.
    Key {
        keyed: KeyedLimit<K>,
        /// The key's turn, until it came (`None`: the key is held).
        turn: Option<KeyTurn<K>>,
        hold: Option<KeyHold<K>>,
        global: Option<Limit>,
        /// The global ceiling's decision, once asked and not made at once.
        global_turn: Option<Turn>,
        /// The request's cost, for the global ceiling.
        cost: Cost,
    },
    /// The turn of a single limit, or of the global ceiling of a request without a key.
    Single {
        limit: Limit,
        turn: Turn,
        name: &'static str,
        cost: Cost,
    },
}

impl<K: Hash + Eq> Pending<K> {
    pub(crate) fn key(
        keyed: KeyedLimit<K>,
        turn: KeyTurn<K>,
        global: Option<Limit>,
        cost: Cost,
    ) -> Self {
        Pending::Key {
            keyed,
            turn: Some(turn),
            hold: None,
            global,
            global_turn: None,
            cost,
        }
    }

    /// A key admitted already, waiting for the global ceiling's `turn`.
    pub(crate) fn held(
        keyed: KeyedLimit<K>,
        hold: KeyHold<K>,
        global: Limit,
        turn: Turn,
        cost: &Cost,
    ) -> Self {
        Pending::Key {
            keyed,
            turn: None,
            hold: Some(hold),
            global: Some(global),
            global_turn: Some(turn),
            cost: cost.clone(),
        }
    }

    pub(crate) fn single(limit: Limit, turn: Turn, name: &'static str, cost: &Cost) -> Self {
        Pending::Single {
            limit,
            turn,
            name,
            cost: cost.clone(),
        }
    }
}

/// How a wait ended.
pub(crate) enum Outcome<S, Req> {
    /// Go, with the state of each limit when asked for, the plan of the key, and the
    /// request's place in the in-flight quotas.
    Go(S, Req, [Option<Status>; 2], usize, Slot),
    Refuse(Req, Rejected),
    /// Refused, but a dry run lets it through.
    DryRun(S, Req, Rejected),
}

/// A waiting request, with the readied inner service it will be sent to.
pub(crate) struct Wait<S, O, Req, K: Hash + Eq> {
    pending: Pending<K>,
    sleep: Pin<Box<Sleep>>,
    service: Option<S>,
    req: Option<Req>,
    /// The request's cost.
    tokens: u32,
    pub(crate) on_reject: O,
    pub(crate) spec: Spec,
    /// Let a refused request through (dry run), and whom to tell.
    dry_run: bool,
    observer: Option<Arc<dyn Observer>>,
}

impl<S, O, Req, K: Hash + Eq + Clone + Send + Sync + 'static> Wait<S, O, Req, K> {
    #[allow(clippy::too_many_arguments)] // the layer's settings, taken apart
    pub(crate) fn new(
        pending: Pending<K>,
        service: S,
        req: Req,
        tokens: u32,
        on_reject: O,
        spec: Spec,
        dry_run: bool,
        observer: Option<Arc<dyn Observer>>,
    ) -> Self {
        Wait {
            pending,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            service: Some(service),
            req: Some(req),
            tokens,
            on_reject,
            spec,
            dry_run,
            observer,
        }
    }

    /// The limits involved, as `RateLimit-Policy` names them, for a key on plan `tier`.
    pub(crate) fn policies(&self, tier: usize) -> Policies {
        match &self.pending {
            Pending::Key { keyed, global, .. } => {
                policies(Some(keyed), tier, global.as_ref(), true)
            }
            Pending::Single { limit, name, .. } => {
                policies::<K>(None, 0, Some(limit), *name == GLOBAL)
            }
        }
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<S, Req>> {
        let describe = self.spec.admitted;
        let verdict = match &mut self.pending {
            Pending::Key {
                keyed,
                turn,
                hold,
                global,
                global_turn,
                cost,
            } => loop {
                if hold.is_none() {
                    let t = turn.as_mut().expect("polled after completion");
                    match std::task::ready!(t.poll(cx)) {
                        Ok(h) => *hold = Some(h),
                        Err((denied, which)) => {
                            break Err(policy::key_refusal(keyed, which, denied));
                        }
                    }
                }
                let h = hold.as_mut().expect("the key is held");
                let key = if describe {
                    policy::key_status(keyed, h.level())
                } else {
                    None
                };
                let tier = h.tier();
                let Some(g) = global else {
                    break Ok(([key, None], tier, h.spend()));
                };
                let decided = match global_turn {
                    Some(t) => std::task::ready!(t.poll_held(self.sleep.as_mut(), cx)),
                    None => match g.decide(cost, Duration::ZERO) {
                        Decision::Now(decided) => decided.map(|p| (p, Slot::default())),
                        Decision::Later(t) => {
                            *global_turn = Some(t);
                            continue;
                        }
                    },
                };
                break match decided {
                    Ok((permit, held)) => {
                        let slot = h.spend().and(held).and(g.slot(permit, cost));
                        let global = if describe {
                            limit_status(g, GLOBAL)
                        } else {
                            None
                        };
                        Ok(([key, global], tier, slot))
                    }
                    Err(denied) => {
                        h.refund();
                        Err(limit_refusal(g, GLOBAL, cost, denied).in_plan(tier))
                    }
                };
            },
            Pending::Single {
                limit,
                turn,
                name,
                cost,
            } => match std::task::ready!(turn.poll_held(self.sleep.as_mut(), cx)) {
                Ok((permit, held)) => {
                    let status = if describe {
                        limit_status(limit, name)
                    } else {
                        None
                    };
                    Ok(([None, status], 0, held.and(limit.slot(permit, cost))))
                }
                Err(denied) => Err(limit_refusal(limit, name, cost, denied)),
            },
        };
        let req = self.req.take().expect("polled after completion");
        let service = self.service.take().expect("polled after completion");
        Poll::Ready(match verdict {
            Ok((statuses, tier, slot)) => Outcome::Go(service, req, statuses, tier, slot),
            Err(rejected) => {
                if let Some(o) = &self.observer {
                    let wait = rejected.wait().unwrap_or(Duration::ZERO);
                    o.refused(self.tokens, wait, self.dry_run);
                }
                if self.dry_run {
                    trace_event!(debug, wait = ?rejected.wait(), "dry run: request would be rejected");
                    Outcome::DryRun(service, req, rejected)
                } else {
                    Outcome::Refuse(req, rejected)
                }
            }
        })
    }
}
