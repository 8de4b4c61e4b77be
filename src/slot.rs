//! [`Slot`]: a request's place in the in-flight quotas of its limits
//! ([`Plan::in_flight`](crate::Plan::in_flight)), given back when it is dropped: when the
//! request ends.

use std::fmt;

type Release = Box<dyn FnOnce() + Send + Sync>;

/// What a request holds of the in-flight quotas of its limits, given back on drop.
#[derive(Default)]
pub(crate) struct Slot {
    release: Option<Release>,
}

impl Slot {
    /// A place that `release` gives back.
    pub(crate) fn new(release: impl FnOnce() + Send + Sync + 'static) -> Self {
        Slot {
            release: Some(Box::new(release)),
        }
    }

    /// Both places, given back together.
    pub(crate) fn and(mut self, mut other: Slot) -> Slot {
        match (self.release.take(), other.release.take()) {
            (Some(a), Some(b)) => Slot::new(move || {
                a();
                b();
            }),
            (a, b) => Slot { release: a.or(b) },
        }
    }

    /// Whether it holds anything.
    pub(crate) fn is_held(&self) -> bool {
        self.release.is_some()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("held", &self.is_held())
            .finish()
    }
}
