//! [`Snapshot`]: a read-only view of a [`Bucket`], and what the shared state says of itself.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::shared::{Kind, Shared};
use super::Bucket;
use crate::engine::{Engine as _, Price, View};
use crate::{Cost, Quota};

/// A read-only view of a [`Bucket`], from [`Bucket::snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The bucket's configured quota (its ceiling).
    pub quota: Quota,
    /// The quota enforced now: [`quota`](Self::quota), or the same shape at a lower rate while
    /// the rate follows a server's push-back. Its rate is
    /// [`effective.per_second_f64()`](Quota::per_second_f64).
    pub effective: Quota,
    /// Whole tokens available now.
    pub available: u32,
    /// Time until one more token is available (zero when one is available now).
    pub next_token_in: Duration,
    /// Time until the bucket is full again.
    pub full_in: Duration,
    /// The end of a [`pause`](Bucket::pause) in force, if any.
    pub paused_until: Option<Instant>,
    /// Requests waiting in [`acquire`](Bucket::acquire) (or in a waiting layer).
    pub waiting: usize,
}

impl Bucket {
    /// A read-only view of the bucket now, for headers and metrics.
    pub fn snapshot(&self) -> Snapshot {
        let (level, paused_in, waiting, effective) = self.shared.level();
        let now = Instant::now();
        Snapshot {
            quota: self.quota(),
            effective,
            available: u32::try_from(level.available).unwrap_or(u32::MAX),
            next_token_in: Duration::from_nanos(level.next_in),
            full_in: Duration::from_nanos(level.full_in),
            paused_until: (paused_in > 0).then(|| now + Duration::from_nanos(paused_in)),
            waiting,
        }
    }
}

impl Shared {
    /// Which quota of the plan holds `cost` back longest now (`0` for a plan of one).
    pub(crate) fn holding_back(&self, cost: &Cost) -> usize {
        let (tokens, each) = self.price_of(cost);
        let price = each
            .as_deref()
            .map_or(Price::One(u64::from(tokens)), Price::Each);
        match &self.lock().engine {
            Kind::Window(w) => w.refused_by(price, self.clock.now_ns()),
            Kind::Gcra(_) => 0,
        }
    }

    /// For a plan of several quotas: nanoseconds until its tightest quota has one more
    /// token ([`Engine::reset_in`](crate::engine::Engine::reset_in)).
    pub(crate) fn reset_in(&self) -> Option<u64> {
        if self.plan.parts().len() == 1 {
            return None;
        }
        let st = self.lock();
        match &st.engine {
            Kind::Window(w) => w.reset_in(self.clock.now_ns()),
            Kind::Gcra(_) => None,
        }
    }

    /// The engine's view now, the time left of a pause, the requests in line and the quota
    /// enforced.
    pub(super) fn level(&self) -> (View, u64, usize, Quota) {
        let mut st = self.lock();
        let now = self.clock.now_ns();
        let paused = self.paused_until.load(Ordering::Acquire);
        let queued = st.queue.len();
        let quota = st.quota;
        let not_before = now.max(st.tail).max(paused);
        let slack = self.slack(&st);
        let ahead = st.queue.tokens();
        let mut level = match &mut st.engine {
            Kind::Gcra(g) => {
                let mut tat = self.cell.tat();
                if ahead > 0 {
                    // Once those in line have gone.
                    g.commit(&mut tat, ahead, now);
                }
                g.view(&tat, now)
            }
            Kind::Window(w) => {
                w.forget(now.saturating_sub(slack));
                let view = w.view(now);
                View {
                    available: if not_before > now { 0 } else { view.available },
                    next_in: 0,
                    full_in: view.full_in.max(not_before - now),
                }
            }
        };
        if let Kind::Window(_) = st.engine {
            level.next_in = self.predict(&mut st, 1, None, 0, now) - now;
            if let (Kind::Window(w), true) = (&st.engine, level.next_in > 0) {
                if w.ramping(now) {
                    level.available = 0;
                }
            }
        }
        if queued > 0 {
            level.available = 0;
        }
        (level, paused.saturating_sub(now), queued, quota)
    }
}
