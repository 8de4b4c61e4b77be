//! [`Feedback`]: what a client tells a bucket's rate control of each request, and where the
//! control's decisions are applied to the bucket.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::Bucket;
use crate::adaptive::{Control, Decision};
use crate::Quota;

/// The rate control of one bucket, shared by its clones: the control under a lock, and what
/// the bucket reads of it without the lock.
#[derive(Debug)]
pub(crate) struct Steering {
    control: Mutex<Control>,
    /// The rate in force, in tokens per second (`f64` bits).
    rate: AtomicU64,
    /// Whether the control watches the requests sent (see [`Control::watches_sends`]).
    watch: AtomicBool,
}

impl Steering {
    pub(crate) fn new(control: Control) -> Self {
        Steering {
            rate: AtomicU64::new(control.rate().to_bits()),
            watch: AtomicBool::new(control.watches_sends()),
            control: Mutex::new(control),
        }
    }

    /// The control, locked. A decision made under the lock is applied under it, so that
    /// decisions reach the bucket in the order they were made.
    fn lock(&self) -> MutexGuard<'_, Control> {
        // No code path panics while holding the lock; recover the data if one ever did.
        self.control.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Note what the bucket reads without the lock, after an event.
    fn note(&self, control: &Control) {
        self.rate.store(control.rate().to_bits(), Ordering::Release);
        self.watch.store(control.watches_sends(), Ordering::Release);
    }

    pub(crate) fn configured(&self) -> Quota {
        self.lock().configured()
    }

    pub(crate) fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Acquire))
    }

    pub(crate) fn limit(&self) -> Option<f64> {
        self.lock().limit()
    }

    /// A new configured quota: the control restarts at it.
    pub(crate) fn reset(&self, quota: Quota) {
        let mut control = self.lock();
        control.reset(quota, Instant::now());
        self.note(&control);
    }
}

impl Bucket {
    /// Tell this bucket's rate control about the requests it admits: when each is sent, and
    /// how the server answered (see [`adaptive`](crate::adaptive)).
    ///
    /// [`RetryAfterLayer`](crate::RetryAfterLayer) and the reqwest and gRPC clients report
    /// through it; use it from a client of your own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_throttle::{Bucket, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let bucket = Bucket::new(Quota::per_second(100));
    /// bucket.acquire(1).await.unwrap();
    /// let sent = bucket.feedback().sending();
    /// // ... the request goes; the server answers 429 with `Retry-After: 1` ...
    /// sent.pushed_back(Duration::from_secs(1), None);
    /// assert!(bucket.rate() < 100.0);
    /// assert!(bucket.snapshot().paused_until.is_some());
    /// # }
    /// ```
    pub fn feedback(&self) -> Feedback<'_> {
        Feedback { bucket: self }
    }

    /// Apply `decision` to the bucket (under the control's lock).
    fn apply(&self, control: &Control, decision: Option<Decision>) {
        if let Some(d) = decision {
            self.shared.set_spaced(d.spaced);
            if let Some(quota) = d.enforce {
                self.shared.set_rate(quota);
                if let Some(o) = &self.shared.observer {
                    o.rate(d.rate);
                }
            }
            if let (Some(cut), Some(remote)) = (d.publish, self.shared.remote()) {
                remote.publish(cut);
            }
        }
        self.control.note(control);
    }

    /// The rate control's first decision: a search starts below the configured rate.
    pub(crate) fn start_control(&self) {
        let mut control = self.control.lock();
        let decision = control.start(Instant::now());
        self.apply(&control, decision);
    }

    /// A request is sent at `at`: told to the control only while it watches sends.
    fn sent(&self, at: Instant) {
        if !self.control.watch.load(Ordering::Acquire) {
            return;
        }
        let mut control = self.control.lock();
        let decision = control.sending(at);
        self.apply(&control, decision);
    }

    /// A request sent at `sent` (if known) went through; `stated`: the rate the server
    /// states, if any.
    fn succeeded(&self, sent: Option<Instant>, stated: Option<f64>) {
        let now = Instant::now();
        let mut control = self.control.lock();
        let decision = control.succeeded(now, sent, stated);
        self.apply(&control, decision);
        let ask = control.ask_others(now);
        drop(control);
        if ask {
            self.ask_others();
        }
    }

    /// A request sent at `sent` was pushed back for `cooldown`: lower the rate (and tell the
    /// other processes), take the stated rate if any, then pause.
    fn pushed_back(&self, sent: Instant, cooldown: Duration, stated: Option<f64>) {
        {
            let mut control = self.control.lock();
            let decision = control.pushed_back(Instant::now(), SystemTime::now(), cooldown, sent);
            self.apply(&control, decision);
        }
        if let Some(rate) = stated {
            self.succeeded(None, Some(rate));
        }
        self.pause(cooldown);
    }

    /// Follow what other processes sharing the limit learned, in the background (outside a
    /// runtime, never).
    #[cfg(feature = "redis")]
    fn ask_others(&self) {
        let Some(remote) = self.shared.remote() else {
            return;
        };
        let (Some(learned), Ok(rt)) = (remote.learned(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let this = self.clone();
        rt.spawn(async move {
            let decision = learned.await.map(|learned| {
                let mut control = this.control.lock();
                let decision =
                    learned.and_then(|cut| control.adopt(Instant::now(), SystemTime::now(), cut));
                if let Ok(decision) = decision {
                    this.apply(&control, decision);
                }
                decision
            });
            if let (Some(Err(what)), Some(o)) = (decision, &this.shared.observer) {
                o.ignored(what);
            }
        });
    }

    /// Only a limit kept in Redis is shared with other processes.
    #[cfg(not(feature = "redis"))]
    fn ask_others(&self) {}
}

/// Tells a bucket's rate control about a request: [`Bucket::feedback`].
#[derive(Debug, Clone, Copy)]
pub struct Feedback<'a> {
    bucket: &'a Bucket,
}

impl Feedback<'_> {
    /// A request the bucket admitted is being sent now. Report the server's answer through
    /// the [`Sent`] this returns.
    ///
    /// Call it when the request goes (after the bucket admitted it), not when it starts
    /// waiting: a rate control with the [ramp](crate::BucketBuilder::ramp) weighs the gap
    /// between requests sent.
    pub fn sending(self) -> Sent {
        let at = Instant::now();
        self.bucket.sent(at);
        self.sent_at(at)
    }

    /// A request sent at `at`, whose sending the control was told of already (or never).
    pub(crate) fn sent_at(self, at: Instant) -> Sent {
        Sent {
            bucket: self.bucket.clone(),
            at,
        }
    }
}

/// A request sent, from [`Feedback::sending`]: report how the server answered with
/// [`through`](Self::through) or [`pushed_back`](Self::pushed_back). A request that failed
/// otherwise (a transport error, another status) is simply dropped.
#[derive(Debug)]
pub struct Sent {
    bucket: Bucket,
    at: Instant,
}

impl Sent {
    /// When the request was sent (tokio's clock).
    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// The request went through. `stated_rate`: the rate the server states in its
    /// rate-limit fields, in tokens per second, if any; the rate jumps to it (never above
    /// the configured one).
    pub fn through(self, stated_rate: Option<f64>) {
        self.report_through(stated_rate);
    }

    /// The server pushed back (`429`, `503`) asking for `cooldown`: the rate is lowered (see
    /// [`adaptive`](crate::adaptive)), then the bucket is [paused](Bucket::pause) for the
    /// cooldown. `stated_rate`: the rate the server states in its rate-limit fields, if any.
    ///
    /// A request sent before the last push-back was acted on went at the rate of then: its
    /// push-back pauses the bucket and lowers the rate no further (with a `Retry-After: 0`,
    /// or answers slower than the cooldown, the refusals of the requests in flight at a
    /// push-back would otherwise lower it once each).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_throttle::{Bucket, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let bucket = Bucket::new(Quota::per_second(100));
    /// let (first, second) = (bucket.feedback().sending(), bucket.feedback().sending());
    /// tokio::time::advance(Duration::from_millis(50)).await;
    /// first.pushed_back(Duration::ZERO, None);
    /// let lowered = bucket.rate();
    /// assert!(lowered < 100.0);
    /// // Sent before that push-back: no news.
    /// second.pushed_back(Duration::ZERO, None);
    /// assert_eq!(bucket.rate(), lowered);
    /// # }
    /// ```
    pub fn pushed_back(self, cooldown: Duration, stated_rate: Option<f64>) {
        self.report_pushed_back(cooldown, stated_rate);
    }

    /// [`through`](Self::through), for the layers that hold the request's `Sent` by
    /// reference.
    pub(crate) fn report_through(&self, stated_rate: Option<f64>) {
        self.bucket.succeeded(Some(self.at), stated_rate);
    }

    /// [`pushed_back`](Self::pushed_back), for the layers that hold the request's `Sent` by
    /// reference.
    pub(crate) fn report_pushed_back(&self, cooldown: Duration, stated_rate: Option<f64>) {
        self.bucket.pushed_back(self.at, cooldown, stated_rate);
    }
}
