//! [`Denied`]: why a limit did not admit a request, one model for the whole crate.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The `Retry-After` value for a wait: whole seconds, rounded **up**, at least 1 (a 0 would
/// invite an immediate retry), saturating at `u64::MAX` (never overflows).
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs();
    let up = u64::from(wait.subsec_nanos() > 0);
    secs.saturating_add(up).max(1)
}

/// "Not now": the request does not fit now, and would after [`wait`](Throttled::wait).
///
/// The wait is always finite. Its [`Display`](fmt::Display) is lowercase, as tower's errors
/// are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    wait: Duration,
}

impl Throttled {
    pub(crate) fn after(wait: Duration) -> Self {
        Throttled { wait }
    }

    /// How long until the request fits.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The wait in whole seconds, rounded **up** and at least 1: the value for a
    /// `Retry-After` header (a 0 would invite an immediate retry). Saturates, never
    /// overflows.
    pub fn retry_after_secs(&self) -> u64 {
        retry_after_secs(self.wait)
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request throttled: retry in {:?}", self.wait)
    }
}

impl StdError for Throttled {}

/// "Never": a request for more tokens than the limit can ever hold (the burst, or a window's
/// count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExceedsBurst {
    pub(crate) requested: u32,
    pub(crate) burst: u32,
}

impl ExceedsBurst {
    /// `Err` when `requested` is more than `burst` (each saturated to `u32`).
    pub(crate) fn check(requested: u64, burst: u64) -> Result<(), Self> {
        let narrow = |n| u32::try_from(n).unwrap_or(u32::MAX);
        match requested > burst {
            true => Err(ExceedsBurst {
                requested: narrow(requested),
                burst: narrow(burst),
            }),
            false => Ok(()),
        }
    }

    /// The tokens asked for.
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// The most tokens one request may take: the burst (a window's count for the window
    /// algorithms).
    pub fn burst(&self) -> u32 {
        self.burst
    }
}

impl fmt::Display for ExceedsBurst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot acquire {} tokens from a bucket of burst {}",
            self.requested, self.burst
        )
    }
}

impl StdError for ExceedsBurst {}

/// A leaky bucket's queue of waiters is full (see
/// [`Algorithm::LeakyBucket`](crate::Algorithm::LeakyBucket)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull {
    pub(crate) max_queue: usize,
}

impl QueueFull {
    /// The queue's capacity.
    pub fn max_queue(&self) -> usize {
        self.max_queue
    }
}

impl fmt::Display for QueueFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request throttled: {} requests already waiting",
            self.max_queue
        )
    }
}

impl StdError for QueueFull {}

/// The backend that keeps the limit failed, and its failure policy refuses.
///
/// The backend's own error is the [`source`](StdError::source) (for the Redis backend, a
/// `RedisError`, also reachable through `BackendError::redis` with the `redis` feature).
/// Cloning is cheap; two values are equal when they carry the same failure (the same shared
/// error).
#[derive(Clone)]
pub struct BackendError {
    source: Arc<dyn StdError + Send + Sync + 'static>,
}

impl BackendError {
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn new(source: impl StdError + Send + Sync + 'static) -> Self {
        BackendError {
            source: Arc::new(source),
        }
    }

    /// The backend's error.
    pub fn get_ref(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.source
    }
}

impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.source, &other.source)
    }
}

impl Eq for BackendError {}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BackendError").field(&self.source).finish()
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("rate limit backend failed")
    }
}

impl StdError for BackendError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self.get_ref())
    }
}

/// Why a limit did not admit a request: the error of every `try_acquire` and `acquire`.
///
/// A limit answers "not now" or "never", and the two call for different handling:
///
/// | Answer | Type | Waiting helps | Typical response |
/// |---|---|---|---|
/// | not now | [`Throttled`], with a finite [`wait`](Throttled::wait) | yes | wait, or `429` + `Retry-After` |
/// | never: the cost is above what the limit can ever hold | [`ExceedsBurst`] | no | a bug or a bad request: fail |
/// | a leaky bucket's queue is full | [`QueueFull`] | later | shed load |
/// | the backend that keeps the limit (Redis) failed | [`BackendError`] | perhaps | see the failure policy |
///
/// [`Denied`] is the one error of every `try_acquire` and `acquire` in the crate
/// ([`Bucket`](crate::Bucket), [`KeyedBucket`](crate::KeyedBucket), and the Redis backend's
/// buckets), so one `match` covers them all. No answer is encoded in a sentinel value: a
/// [`Throttled`] wait is always finite, and "never" is its own type.
///
/// ```
/// use std::time::Duration;
/// use tower_throttle::{Bucket, Denied, Quota};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let bucket = Bucket::new(Quota::per_second(2).burst(2));
/// bucket.try_acquire(2).unwrap();
/// match bucket.try_acquire(1) {
///     Err(Denied::Throttled(t)) => assert_eq!(t.wait(), Duration::from_millis(500)),
///     other => panic!("{other:?}"),
/// }
/// match bucket.try_acquire(3) {
///     Err(Denied::ExceedsBurst(e)) => assert_eq!((e.requested(), e.burst()), (3, 2)),
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
///
/// governor draws the same line (`NotUntil` versus `InsufficientCapacity`); the extra cases
/// here come from the leaky bucket's bounded queue and from remote backends.
///
/// Match on the variants, or ask [`wait`](Denied::wait): `Some` exactly when waiting that
/// long makes the request fit. Its [`Display`](fmt::Display) is the inner error's, lowercase.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Denied {
    /// Not now; [`Throttled::wait`] says how long until the request fits.
    Throttled(Throttled),
    /// Not now for this request's [`Priority`](crate::Priority): the limit keeps the rest
    /// for critical requests ([`BucketBuilder::reserve_for_critical`]);
    /// [`Throttled::wait`] says how long until it fits with the reserve kept.
    ///
    /// [`BucketBuilder::reserve_for_critical`]: crate::BucketBuilder::reserve_for_critical
    Shed(Throttled),
    /// Never: more tokens than the limit can ever hold.
    ExceedsBurst(ExceedsBurst),
    /// A leaky bucket's queue of waiters is full.
    QueueFull(QueueFull),
    /// The backend that keeps the limit failed, and its failure policy refuses.
    Backend(BackendError),
}

impl Denied {
    /// The `Denied` in `err` or in its chain of [`source`](StdError::source)s: the one call
    /// that gets it out of a layer's [`BoxError`](crate::BoxError) (pass `&*err`), however
    /// deeply outer middleware wrapped it.
    ///
    /// ```
    /// use tower::{service_fn, Service, ServiceExt};
    /// use tower_layer::Layer;
    /// use tower_throttle::{Bucket, Denied, Quota, RateLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let layer = RateLimitLayer::new(Bucket::new(Quota::per_second(10).burst(5))).cost(|n: &u32| *n);
    /// let mut svc = layer.layer(service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n) }));
    /// let err = svc.ready().await.unwrap().call(6).await.unwrap_err();
    /// let never = Denied::find(&*err).and_then(Denied::exceeds_burst).unwrap();
    /// assert_eq!((never.requested(), never.burst()), (6, 5));
    /// # }
    /// ```
    pub fn find<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a Denied> {
        let mut next = Some(err);
        while let Some(e) = next {
            if let Some(denied) = e.downcast_ref::<Denied>() {
                return Some(denied);
            }
            next = e.source();
        }
        None
    }

    /// How long until the request fits: `Some` for [`Denied::Throttled`] and
    /// [`Denied::Shed`], `None` when waiting is not known to help.
    pub fn wait(&self) -> Option<Duration> {
        self.throttled().map(Throttled::wait)
    }

    /// The `Retry-After` value in whole seconds (rounded up, at least 1) for
    /// [`Denied::Throttled`] and [`Denied::Shed`], `None` otherwise.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.throttled().map(Throttled::retry_after_secs)
    }

    /// The "not now" answer, if this is one ([`Denied::Throttled`] or [`Denied::Shed`]).
    pub fn throttled(&self) -> Option<&Throttled> {
        match self {
            Denied::Throttled(t) | Denied::Shed(t) => Some(t),
            _ => None,
        }
    }

    /// The "never" answer, if this is one.
    pub fn exceeds_burst(&self) -> Option<&ExceedsBurst> {
        match self {
            Denied::ExceedsBurst(e) => Some(e),
            _ => None,
        }
    }

    /// The backend failure, if this is one.
    pub fn backend(&self) -> Option<&BackendError> {
        match self {
            Denied::Backend(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::Throttled(e) => fmt::Display::fmt(e, f),
            Denied::Shed(e) => write!(
                f,
                "request shed, capacity kept for critical requests: retry in {:?}",
                e.wait()
            ),
            Denied::ExceedsBurst(e) => fmt::Display::fmt(e, f),
            Denied::QueueFull(e) => fmt::Display::fmt(e, f),
            Denied::Backend(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl StdError for Denied {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Denied::Backend(e) => e.source(),
            _ => None,
        }
    }
}

/// `Denied` from each of its reasons.
macro_rules! denied_from {
    ($($reason:ident => $variant:ident),*) => {$(
        impl From<$reason> for Denied {
            fn from(e: $reason) -> Self {
                Denied::$variant(e)
            }
        }
    )*};
}

denied_from!(
    Throttled => Throttled,
    ExceedsBurst => ExceedsBurst,
    QueueFull => QueueFull,
    BackendError => Backend
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_saturate() {
        assert_eq!(Throttled::after(Duration::MAX).retry_after_secs(), u64::MAX);
        assert_eq!(Throttled::after(Duration::ZERO).retry_after_secs(), 1);
        assert_eq!(
            Throttled::after(Duration::from_millis(1001)).retry_after_secs(),
            2
        );
    }

    #[test]
    fn only_not_now_has_a_wait() {
        let never = Denied::from(ExceedsBurst {
            requested: 3,
            burst: 2,
        });
        assert_eq!(never.wait(), None);
        assert_eq!(never.retry_after_secs(), None);
        let full = Denied::from(QueueFull { max_queue: 4 });
        assert_eq!(full.wait(), None);
        let later = Denied::from(Throttled::after(Duration::from_millis(1500)));
        assert_eq!(later.wait(), Some(Duration::from_millis(1500)));
        assert_eq!(later.retry_after_secs(), Some(2));
    }

    #[test]
    fn backend_errors_keep_their_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let denied = Denied::from(BackendError::new(io));
        assert_eq!(denied.to_string(), "rate limit backend failed");
        assert_eq!(denied.source().unwrap().to_string(), "refused");
        assert_eq!(denied.clone(), denied);
        assert_eq!(denied.wait(), None);
    }
}
