//! Bounded waiting: a request over the limit that fits within
//! [`max_wait`](super::RejectLayer::max_wait) holds a reservation and sleeps until it is due.
//!
//! - **Per key**: the key's bucket reserves the instant (it is at most `max_wait` away, or the
//!   request is refused at once). When it comes, the global ceiling, if any, is asked without
//!   waiting; if it refuses, the key's reservation is given back and the request is refused.
//!   A request never holds a per-key reservation while queueing for the global bucket (that
//!   would let the key's requests go out closer together than its quota allows).
//! - **Single bucket**: the request joins the bucket's fair queue; if its turn has not come
//!   `max_wait` after it arrived (a pause intervened), it leaves the queue and is refused.
//!
//! Dropping the response future while it waits (the client went away) gives the reservation
//! back.

use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::fields::{Policies, Spec};
use super::limits::{bucket_status, key_status, policies, refusal, GLOBAL, PER_KEY, SINGLE};
use super::rejected::{Rejected, Status};
use crate::bucket::{Backend, RemoteDecision, Waiter};
use crate::keyed::{Grant, KeyId, KeyedBucket, RemoteKeyed};
use crate::observe::Observer;
use crate::{Bucket, Throttled};

/// A reservation being waited for.
pub(crate) enum Pending<K: Hash + Eq> {
    Key {
        hold: KeyHold<K>,
        due: Instant,
        global: Option<Bucket>,
        /// The request's cost, for the global ceiling.
        n: u32,
        /// The decision of a shared, remote global ceiling, once asked.
        global_decision: Option<RemoteDecision>,
    },
    Bucket {
        bucket: Bucket,
        waiter: Option<Waiter>,
        deadline: Instant,
    },
    /// A decision a shared, remote bucket (Redis) is making: a single bucket, or the
    /// global ceiling of a request without a key.
    Remote {
        bucket: Bucket,
        decision: RemoteDecision,
        name: &'static str,
    },
    /// A decision a shared, remote keyed bucket is making, then the global ceiling's.
    RemoteKey {
        keyed: KeyedBucket<K>,
        remote: Arc<dyn RemoteKeyed>,
        id: KeyId,
        /// The request's cost.
        n: u32,
        decision: Option<RemoteDecision>,
        global: Option<Bucket>,
        global_decision: Option<RemoteDecision>,
    },
}

impl<K: Hash + Eq> Pending<K> {
    pub(crate) fn key(
        bucket: KeyedBucket<K>,
        key: Option<K>,
        grant: Grant,
        due: Instant,
        global: Option<Bucket>,
        n: u32,
    ) -> Self {
        Pending::Key {
            hold: KeyHold {
                bucket,
                key,
                grant,
                armed: true,
            },
            due,
            global,
            n,
            global_decision: None,
        }
    }

    pub(crate) fn remote(bucket: Bucket, decision: RemoteDecision, name: &'static str) -> Self {
        Pending::Remote {
            bucket,
            decision,
            name,
        }
    }

    pub(crate) fn remote_key(
        keyed: KeyedBucket<K>,
        remote: Arc<dyn RemoteKeyed>,
        id: KeyId,
        n: u32,
        max_wait: Duration,
        global: Option<Bucket>,
    ) -> Self {
        let decision = Some(remote.try_acquire(id, n, max_wait));
        Pending::RemoteKey {
            keyed,
            remote,
            id,
            n,
            decision,
            global,
            global_decision: None,
        }
    }

    pub(crate) fn bucket(bucket: Bucket, waiter: Waiter, max_wait: Duration) -> Self {
        Pending::Bucket {
            bucket,
            waiter: Some(waiter),
            deadline: Instant::now() + max_wait,
        }
    }
}

/// A per-key reservation, given back if dropped while still armed.
pub(crate) struct KeyHold<K: Hash + Eq> {
    bucket: KeyedBucket<K>,
    key: Option<K>,
    grant: Grant,
    armed: bool,
}

impl<K: Hash + Eq> KeyHold<K> {
    /// Give the reservation back now.
    fn refund(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.bucket.refund(self.key.as_ref(), &self.grant);
        }
    }
}

impl<K: Hash + Eq> Drop for KeyHold<K> {
    fn drop(&mut self) {
        self.refund();
    }
}

/// How a wait ended.
pub(crate) enum Outcome<S, Req> {
    Go(S, Req, [Option<Status>; 2]),
    Refuse(Req, Rejected),
    /// Refused, but a dry run lets it through.
    DryRun(S, Req, Rejected),
}

/// A waiting request, with the readied inner service it will be sent to.
pub(crate) struct Wait<S, O, Req, K: Hash + Eq> {
    pending: Pending<K>,
    sleep: Pin<Box<Sleep>>,
    deadline: Option<Pin<Box<Sleep>>>,
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

impl<S, O, Req, K: Hash + Eq> Wait<S, O, Req, K> {
    #[allow(clippy::too_many_arguments)]
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
        let (wake, deadline) = match &pending {
            Pending::Key { due, .. } => (*due, None),
            Pending::Remote { .. } | Pending::RemoteKey { .. } => (Instant::now(), None),
            Pending::Bucket { deadline, .. } => (
                Instant::now(),
                Some(Box::pin(tokio::time::sleep_until(*deadline))),
            ),
        };
        Wait {
            pending,
            sleep: Box::pin(tokio::time::sleep_until(wake)),
            deadline,
            service: Some(service),
            req: Some(req),
            tokens,
            on_reject,
            spec,
            dry_run,
            observer,
        }
    }

    /// The limits involved, as `RateLimit-Policy` names them.
    pub(crate) fn policies(&self) -> Policies {
        match &self.pending {
            Pending::Key { hold, global, .. } => {
                policies(Some(&hold.bucket), global.as_ref(), true)
            }
            Pending::Bucket { bucket, .. } => policies::<K>(None, Some(bucket), false),
            Pending::Remote { bucket, name, .. } => {
                policies::<K>(None, Some(bucket), *name == GLOBAL)
            }
            Pending::RemoteKey { keyed, global, .. } => {
                policies(Some(keyed), global.as_ref(), true)
            }
        }
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<S, Req>> {
        let describe = self.spec.admitted;
        let verdict = match &mut self.pending {
            Pending::Key {
                hold,
                global,
                n,
                global_decision,
                ..
            } => {
                std::task::ready!(self.sleep.as_mut().poll(cx));
                let key = describe.then(|| key_status(&hold.bucket, &hold.grant));
                let verdict = loop {
                    let Some(g) = global else {
                        break Ok([key, None]);
                    };
                    let decided = if let Some(d) = global_decision.as_mut() {
                        std::task::ready!(d.as_mut().poll(cx))
                    } else {
                        match g.backend() {
                            Backend::Local(local) => g.try_acquire_local(local, *n),
                            Backend::Remote(remote) => {
                                *global_decision = Some(remote.try_acquire(*n, Duration::ZERO));
                                continue;
                            }
                        }
                    };
                    break match decided {
                        Ok(()) => Ok([key, describe.then(|| bucket_status(g, GLOBAL))]),
                        Err(denied) => {
                            hold.refund();
                            Err(refusal(GLOBAL, &g.quota(), denied))
                        }
                    };
                };
                if verdict.is_ok() {
                    hold.armed = false; // spent
                }
                verdict
            }
            Pending::RemoteKey {
                keyed,
                remote,
                id,
                n,
                decision,
                global,
                global_decision,
            } => loop {
                if let Some(d) = global_decision.as_mut() {
                    let global = global
                        .as_ref()
                        .expect("a global decision has a global bucket");
                    break match std::task::ready!(d.as_mut().poll(cx)) {
                        Ok(()) => Ok([None, None]),
                        Err(denied) => {
                            remote.release(*id, *n); // the key's tokens were not used
                            Err(refusal(GLOBAL, &global.quota(), denied))
                        }
                    };
                }
                let d = decision.as_mut().expect("polled after completion");
                let key_verdict = std::task::ready!(d.as_mut().poll(cx));
                *decision = None;
                if let Err(denied) = key_verdict {
                    break Err(refusal(PER_KEY, &keyed.quota(), denied));
                }
                match global {
                    None => break Ok([None, None]),
                    Some(g) => match g.backend() {
                        Backend::Remote(r) => {
                            *global_decision = Some(r.try_acquire(*n, Duration::ZERO));
                        }
                        Backend::Local(local) => match g.try_acquire_local(local, *n) {
                            Ok(()) => break Ok([None, describe.then(|| bucket_status(g, GLOBAL))]),
                            Err(denied) => {
                                remote.release(*id, *n);
                                break Err(refusal(GLOBAL, &g.quota(), denied));
                            }
                        },
                    },
                }
            },
            Pending::Remote {
                bucket,
                decision,
                name,
            } => match std::task::ready!(decision.as_mut().poll(cx)) {
                Ok(()) => Ok([None, describe.then(|| bucket_status(bucket, name))]),
                Err(denied) => Err(refusal(name, &bucket.quota(), denied)),
            },
            Pending::Bucket {
                bucket,
                waiter,
                deadline: _,
            } => {
                let turn = match waiter.as_mut() {
                    Some(w) => w.poll(self.sleep.as_mut(), cx),
                    None => Poll::Pending,
                };
                if let Poll::Ready(permit) = turn {
                    waiter.take();
                    match permit {
                        Ok(_) => Ok([None, describe.then(|| bucket_status(bucket, SINGLE))]),
                        // The quota shrank below the request while it waited.
                        Err(never) => Err(refusal(SINGLE, &bucket.quota(), never.into())),
                    }
                } else {
                    let deadline = self.deadline.as_mut().map(|d| d.as_mut().poll(cx));
                    if !matches!(deadline, Some(Poll::Ready(()))) {
                        return Poll::Pending;
                    }
                    waiter.take(); // leave the queue, giving the place back
                    let wait = bucket.snapshot().next_token_in;
                    let denied = Throttled::after(wait).into();
                    Err(refusal(SINGLE, &bucket.quota(), denied))
                }
            }
        };
        let req = self.req.take().expect("polled after completion");
        let service = self.service.take().expect("polled after completion");
        Poll::Ready(match verdict {
            Ok(statuses) => Outcome::Go(service, req, statuses),
            Err(rejected) => {
                if let Some(o) = &self.observer {
                    o.refused(
                        self.tokens,
                        rejected.wait().unwrap_or(Duration::ZERO),
                        self.dry_run,
                    );
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
