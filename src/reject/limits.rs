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
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use tokio::time::Instant;

use super::fields::Policies;
use super::missing::{FailOnce, MissingKey};
use super::rejected::{Rejected, Status};
use super::wait::Pending;
use crate::bucket::{Backend, Local, Reservation};
use crate::extract::KeyExtractor;
use crate::keyed::{Grant, KeyedBucket, KEYLESS};
use crate::{Bucket, Denied, ExceedsBurst, Throttled};

/// Policy names in `RateLimit-Policy` and `RateLimit`.
pub(crate) const SINGLE: &str = "default";
pub(crate) const PER_KEY: &str = "per-key";
pub(crate) const GLOBAL: &str = "global";

/// The extractor of a layer of one bucket, which has no keys: one bucket for every request is
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
    pub(crate) bucket: KeyedBucket<K>,
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
    /// The single bucket, or the global ceiling of a keyed layer.
    bucket: Option<Bucket>,
}

/// What to do with a request.
pub(crate) enum Verdict<K: Hash + Eq> {
    /// Go now; the state of each limit when asked for.
    Admit([Option<Status>; 2]),
    Reject(Rejected),
    /// Go after a wait (bounded wait only).
    Wait(Pending<K>),
}

impl<K, E> Limits<K, E> {
    pub(crate) fn single(bucket: Bucket) -> Self {
        Limits {
            keyed: None,
            bucket: Some(bucket),
        }
    }

    pub(crate) fn keyed(keyed: Keyed<K, E>, global: Option<Bucket>) -> Self {
        Limits {
            keyed: Some(keyed),
            bucket: global,
        }
    }

    /// Replace the single bucket, or set the global ceiling of a keyed layer.
    pub(crate) fn set_bucket(&mut self, bucket: Bucket) {
        self.bucket = Some(bucket);
    }

    /// What a keyed layer does with a request without a key.
    pub(crate) fn set_missing(&mut self, missing: MissingKey) {
        if let Some(k) = &mut self.keyed {
            k.missing = Some(missing);
        }
    }

    /// The limits as `RateLimit-Policy` names them (the bucket's quota may change).
    pub(crate) fn policies(&self) -> Policies {
        policies(self.keyed_bucket(), self.bucket(), self.keyed.is_some())
    }

    pub(crate) fn keyed_bucket(&self) -> Option<&KeyedBucket<K>> {
        self.keyed.as_ref().map(|k| &k.bucket)
    }

    pub(crate) fn bucket(&self) -> Option<&Bucket> {
        self.bucket.as_ref()
    }

    /// How the bucket is named and reported.
    fn bucket_name(&self) -> &'static str {
        if self.keyed.is_some() {
            GLOBAL
        } else {
            SINGLE
        }
    }
}

impl<K, E> Limits<K, E>
where
    K: Hash + Eq + Clone,
{
    /// Decide for `req`, which costs `n` tokens. `max_wait` (nanoseconds) bounds a wait for the key's bucket or the
    /// single bucket; the global ceiling of a keyed layer never queues. `describe` asks for
    /// the state of each limit after admission (for the rate-limit fields).
    pub(crate) fn check<B>(
        &self,
        req: &Request<B>,
        n: u32,
        max_wait: u64,
        describe: bool,
    ) -> Verdict<K>
    where
        E: KeyExtractor<B, Key = K>,
    {
        let mut statuses = [None, None];
        let mut held = None;
        if n == 0 {
            return Verdict::Admit(statuses);
        }
        if let Some(k) = &self.keyed {
            let burst = k.bucket.capacity();
            if u64::from(n) > burst {
                let never = ExceedsBurst {
                    requested: n,
                    burst: u32::try_from(burst).unwrap_or(u32::MAX),
                };
                let quota = k.bucket.quota();
                return Verdict::Reject(refusal(PER_KEY, &quota, never.into()));
            }
            if let Some(remote) = k.bucket.remote() {
                // A shared, remote keyed bucket decides asynchronously, then the global
                // ceiling; a refusal by the global ceiling gives the key's token back.
                let id = match k.extractor.extract(req) {
                    Some(key) => Some((remote.name)(&key)),
                    None => match k.on_missing::<B>() {
                        Ok(MissingKey::Shared) => Some(KEYLESS),
                        Ok(_) => None,
                        Err(rejected) => return Verdict::Reject(rejected),
                    },
                };
                if let Some(id) = id {
                    return Verdict::Wait(Pending::remote_key(
                        k.bucket.clone(),
                        Arc::clone(&remote.store),
                        id,
                        n,
                        Duration::from_nanos(max_wait),
                        self.bucket.clone(),
                    ));
                }
            }
            let key = k.extractor.extract(req);
            let result = match &key {
                Some(key) => Some(k.bucket.acquire(key, n, max_wait)),
                None => match k.on_missing::<B>() {
                    Ok(MissingKey::Shared) => Some(k.bucket.acquire_keyless(n, max_wait)),
                    Ok(_) => None,
                    Err(rejected) => return Verdict::Reject(rejected),
                },
            };
            match result {
                None => {}
                Some(Err(wait)) => {
                    let denied = Throttled::after(Duration::from_nanos(wait)).into();
                    let quota = k.bucket.quota();
                    return Verdict::Reject(refusal(PER_KEY, &quota, denied));
                }
                Some(Ok(grant)) => {
                    if let Some(due) = k.bucket.due(&grant) {
                        return Verdict::Wait(Pending::key(
                            k.bucket.clone(),
                            key,
                            grant,
                            due,
                            self.bucket.clone(),
                            n,
                        ));
                    }
                    if describe {
                        statuses[0] = Some(key_status(&k.bucket, &grant));
                    }
                    held = Some((key, grant));
                }
            }
        }
        if let Some(bucket) = &self.bucket {
            let name = self.bucket_name();
            let local = match bucket.backend() {
                Backend::Local(local) => local,
                // A shared, remote bucket decides asynchronously, in the response future:
                // after the key's admission (which it gives back on a refusal), or alone.
                Backend::Remote(remote) => {
                    return match (&self.keyed, held) {
                        (Some(k), Some((key, grant))) => Verdict::Wait(Pending::key(
                            k.bucket.clone(),
                            key,
                            grant,
                            Instant::now(),
                            self.bucket.clone(),
                            n,
                        )),
                        (keyed, _) => {
                            // The global ceiling of a keyed layer never queues.
                            let max_wait = match keyed {
                                Some(_) => Duration::ZERO,
                                None => Duration::from_nanos(max_wait),
                            };
                            let decision = remote.try_acquire(n, max_wait);
                            Verdict::Wait(Pending::remote(bucket.clone(), decision, name))
                        }
                    };
                }
            };
            match bucket.try_acquire_local(local, n) {
                Ok(()) if describe => statuses[1] = Some(bucket_status(bucket, name)),
                Ok(()) => {}
                Err(denied) => {
                    if let (Some(k), Some((key, grant))) = (&self.keyed, &held) {
                        k.bucket.refund(key.as_ref(), grant);
                    }
                    let max_wait = Duration::from_nanos(max_wait);
                    if let (None, Some(wait)) = (&self.keyed, denied.wait()) {
                        if wait <= max_wait && !max_wait.is_zero() {
                            return reserve(bucket, local, n, denied, max_wait, describe);
                        }
                    }
                    return Verdict::Reject(refusal(name, &bucket.quota(), denied));
                }
            }
        }
        Verdict::Admit(statuses)
    }
}

/// The policies of a per-key bucket and a bucket (global when `keyed`).
pub(crate) fn policies<K>(
    keyed: Option<&KeyedBucket<K>>,
    bucket: Option<&Bucket>,
    is_keyed: bool,
) -> Policies {
    let name = if is_keyed { GLOBAL } else { SINGLE };
    [
        keyed.map(|k| (PER_KEY, k.quota())),
        bucket.map(|b| (name, b.quota())),
    ]
}

/// Queue for a token of a single bucket, for at most `max_wait`.
fn reserve<K: Hash + Eq>(
    bucket: &Bucket,
    local: Local<'_>,
    n: u32,
    denied: Denied,
    max_wait: Duration,
    describe: bool,
) -> Verdict<K> {
    match local.reserve(n, true) {
        Ok(Reservation::Now(_)) => {
            let status = describe.then(|| bucket_status(bucket, SINGLE));
            Verdict::Admit([None, status])
        }
        Ok(Reservation::Later(waiter)) => {
            Verdict::Wait(Pending::bucket(bucket.clone(), waiter, max_wait))
        }
        // A leaky bucket's queue is full: refuse, with the wait the bucket announced.
        Err(_) => Verdict::Reject(refusal(SINGLE, &bucket.quota(), denied)),
    }
}

/// A refusal by the limit `name` of `quota`.
pub(crate) fn refusal(name: &'static str, quota: &crate::Quota, denied: Denied) -> Rejected {
    Rejected::new(denied, name, *quota)
}

/// A per-key limit right after `grant`, seen when it is due.
pub(crate) fn key_status<K>(bucket: &KeyedBucket<K>, grant: &Grant) -> Status {
    let (remaining, reset) = bucket.status(grant);
    Status {
        name: PER_KEY,
        quota: bucket.quota(),
        remaining,
        reset,
    }
}

pub(crate) fn bucket_status(bucket: &Bucket, name: &'static str) -> Status {
    let snap = bucket.snapshot();
    let reset = if snap.available == 0 {
        snap.next_token_in
    } else {
        // Until the next token lands: the part of the refill shorter than one interval.
        let interval = snap.quota.interval().as_nanos().max(1);
        let ahead = snap.full_in.as_nanos();
        let ns = if ahead == 0 {
            0
        } else {
            (ahead - 1) % interval + 1
        };
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    };
    Status {
        name,
        quota: snap.quota,
        remaining: u64::from(snap.available),
        reset,
    }
}
