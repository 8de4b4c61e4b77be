//! [`Feedback`]: what a client tells a limit's rate control of each request, and the
//! [`Steering`] that applies the control's decisions to the limit it steers.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::Bucket;
use crate::adaptive::{Control, Cut, Decision};
use crate::observe::Ignored;
use crate::Quota;

/// Takes what another process sharing a limit acted on.
pub(crate) type Adopt = Box<dyn FnOnce(Cut) + Send>;

/// A limit a rate control steers: an in-process bucket, or a limit kept in Redis.
pub(crate) trait Steered: Send + Sync + fmt::Debug {
    /// Apply a decision of the control (under the control's lock).
    fn apply(&self, decision: &Decision);
    /// Hold every admission for `cooldown`.
    fn pause(&self, cooldown: Duration);
    /// Read the latest push-back another process sharing the limit acted on, if the limit
    /// is shared, and `adopt` it (in the background).
    fn ask_others(&self, adopt: Adopt) {
        let _ = adopt;
    }
    /// A value read back from the shared limit was ignored: tell the observer.
    fn ignored(&self, what: Ignored) {
        let _ = what;
    }
}

/// The rate control of one limit, shared by its clones: the control under a lock, what the
/// limit reads of it without the lock, and the limit its decisions apply to.
#[derive(Debug)]
pub(crate) struct Steering {
    control: Mutex<Control>,
    /// The rate in force, in tokens per second (`f64` bits).
    rate: AtomicU64,
    /// Whether the control watches the requests sent (see [`Control::watches_sends`]).
    watch: AtomicBool,
    target: Arc<dyn Steered>,
}

impl Steering {
    /// The control of `target`, started: a search starts below the configured rate.
    pub(crate) fn start(control: Control, target: Arc<dyn Steered>) -> Arc<Self> {
        let steering = Arc::new(Steering {
            rate: AtomicU64::new(control.rate().to_bits()),
            watch: AtomicBool::new(control.watches_sends()),
            control: Mutex::new(control),
            target,
        });
        {
            let mut control = steering.lock();
            let decision = control.start(Instant::now());
            steering.apply(&control, decision);
        }
        steering
    }

    /// The control, locked. A decision made under the lock is applied under it, so that
    /// decisions reach the limit in the order they were made.
    fn lock(&self) -> MutexGuard<'_, Control> {
        // No code path panics while holding the lock; recover the data if one ever did.
        self.control.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply `decision` to the limit, and note what the limit reads without the lock.
    fn apply(&self, control: &Control, decision: Option<Decision>) {
        if let Some(d) = decision {
            self.target.apply(&d);
        }
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
        self.apply(&control, None);
    }

    /// A request is sent at `at`: told to the control only while it watches sends.
    fn sent(&self, at: Instant) {
        if !self.watch.load(Ordering::Acquire) {
            return;
        }
        let mut control = self.lock();
        let decision = control.sending(at);
        self.apply(&control, decision);
    }

    /// A request sent at `sent` (if known) went through; `stated`: the rate the server
    /// states, if any.
    fn succeeded(self: &Arc<Self>, sent: Option<Instant>, stated: Option<f64>) {
        let now = Instant::now();
        let mut control = self.lock();
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
    fn pushed_back(self: &Arc<Self>, sent: Instant, cooldown: Duration, stated: Option<f64>) {
        {
            let mut control = self.lock();
            let decision = control.pushed_back(Instant::now(), SystemTime::now(), cooldown, sent);
            self.apply(&control, decision);
        }
        if let Some(rate) = stated {
            self.succeeded(None, Some(rate));
        }
        self.target.pause(cooldown);
    }

    /// Follow what other processes sharing the limit learned.
    fn ask_others(self: &Arc<Self>) {
        let this = Arc::clone(self);
        self.target.ask_others(Box::new(move |cut| {
            let mut control = this.lock();
            match control.adopt(Instant::now(), SystemTime::now(), cut) {
                Ok(decision) => this.apply(&control, decision),
                Err(what) => {
                    drop(control);
                    this.target.ignored(what);
                }
            }
        }));
    }

    /// Tell this control about the requests its limit admits.
    pub(crate) fn feedback(self: &Arc<Self>) -> Feedback<'_> {
        Feedback { steering: self }
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
        self.control.feedback()
    }
}

/// Tells a limit's rate control about a request: [`Bucket::feedback`], or the same on a
/// limit kept in Redis.
#[derive(Debug, Clone, Copy)]
pub struct Feedback<'a> {
    steering: &'a Arc<Steering>,
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
        self.steering.sent(at);
        self.sent_at(at)
    }

    /// A request sent at `at`, whose sending the control was told of already (or never).
    pub(crate) fn sent_at(self, at: Instant) -> Sent {
        Sent {
            steering: Arc::clone(self.steering),
            at,
        }
    }
}

/// A request sent, from [`Feedback::sending`]: report how the server answered with
/// [`through`](Self::through) or [`pushed_back`](Self::pushed_back). A request that failed
/// otherwise (a transport error, another status) is simply dropped.
#[derive(Debug)]
pub struct Sent {
    steering: Arc<Steering>,
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
        self.steering.succeeded(Some(self.at), stated_rate);
    }

    /// [`pushed_back`](Self::pushed_back), for the layers that hold the request's `Sent` by
    /// reference.
    pub(crate) fn report_pushed_back(&self, cooldown: Duration, stated_rate: Option<f64>) {
        self.steering.pushed_back(self.at, cooldown, stated_rate);
    }
}

impl Steered for super::Shared {
    fn apply(&self, d: &Decision) {
        self.set_spaced(d.spaced);
        if let Some(quota) = d.enforce {
            self.set_rate(quota);
            if let Some(o) = &self.observer {
                o.rate(d.rate);
            }
        }
    }

    fn pause(&self, cooldown: Duration) {
        super::Shared::pause(self, cooldown, None);
    }
}
