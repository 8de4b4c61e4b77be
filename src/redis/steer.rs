//! The rate control of a [`RedisBucket`]: it follows this process's push-backs as an
//! in-process bucket's does, decides in Redis at the rate in force, and shares what it
//! learned with the other processes (see [`rate`](super::rate)).

use std::sync::Weak;
use std::time::Duration;

use super::bucket::Inner;
use super::observed::detach;
use super::RedisBucket;
use crate::adaptive::Decision;
use crate::bucket::{Adopt, Feedback, Steered};
use crate::observe::Ignored;
use crate::Resource;

/// What the control of a [`RedisBucket`] steers: the limit, while a handle to it is left.
#[derive(Debug)]
pub(super) struct Steer(pub(super) Weak<Inner>);

impl Steer {
    fn bucket(&self) -> Option<RedisBucket> {
        self.0.upgrade().map(RedisBucket::from_inner)
    }
}

impl Steered for Steer {
    fn apply(&self, d: &Decision) {
        let Some(bucket) = self.bucket() else {
            return;
        };
        if let Some(quota) = d.enforce {
            bucket.set_rate(quota);
            if let Some(o) = bucket.observer() {
                o.rate(d.rate);
            }
        }
        if let Some(cut) = d.publish {
            detach(async move { Ok(bucket.publish(cut).await?) });
        }
    }

    fn pause(&self, cooldown: Duration) {
        if let Some(bucket) = self.bucket() {
            bucket.pause_detached(cooldown);
        }
    }

    fn ask_others(&self, adopt: Adopt) {
        let (Some(bucket), Ok(rt)) = (self.bucket(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        rt.spawn(async move {
            match bucket.learned().await {
                Ok(Some(Ok(cut))) => adopt(cut),
                Ok(Some(Err(what))) => {
                    if let Some(o) = bucket.observer() {
                        o.ignored(what);
                    }
                }
                _ => {}
            }
        });
    }

    fn ignored(&self, what: Ignored) {
        if let Some(bucket) = self.bucket() {
            if let Some(o) = bucket.observer() {
                o.ignored(what);
            }
        }
    }
}

impl RedisBucket {
    /// Tell this limit's rate control about the requests it admits, as
    /// [`Bucket::feedback`](crate::Bucket::feedback) does: a push-back lowers the rate of every process sharing the
    /// limit (see [`adaptive`](crate::adaptive)) and pauses them all.
    pub fn feedback(&self) -> Feedback<'_> {
        self.control().feedback()
    }

    /// The rate this process decides at now, in tokens per second: the configured one, or a
    /// lower one while the rate follows a server's push-back.
    pub fn rate(&self) -> f64 {
        self.control().rate()
    }

    /// What this limit has learned of the server's limit, in tokens per second (see
    /// [`Bucket::learned_rate`](crate::Bucket::learned_rate)).
    pub fn learned_rate(&self) -> Option<f64> {
        self.control().limit()
    }

    /// Hold every process for `cooldown`: this one at once, the others through Redis in the
    /// background.
    pub(crate) fn pause_detached(&self, cooldown: Duration) {
        let cooldown = self.hold_here(cooldown);
        let this = self.clone();
        detach(async move { this.pause_in_redis(cooldown).await });
    }

    /// [`pause_resource`](Self::pause_resource), in the background.
    pub(crate) fn pause_resource_detached(&self, resource: &Resource, cooldown: Duration) {
        let (this, resource) = (self.clone(), resource.clone());
        detach(async move { this.pause_resource(&resource, cooldown).await });
    }
}
