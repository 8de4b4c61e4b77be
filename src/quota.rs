//! [`Quota`]: a sustained rate plus a burst capacity.

use std::fmt;
use std::time::Duration;

/// A sustained rate plus a burst capacity.
///
/// A quota of `count` tokens per `period` refills one token every `period / count`
/// (the *emission interval*), and holds at most [`burst`](Quota::burst) tokens. The burst is
/// the most a client that has been idle may send at once; `burst / rate` is the longest idle
/// gap after which a full burst is available again.
///
/// The per-period constructors default the burst to one period's worth (`per_second(8)` holds
/// 8 tokens); [`with_period`](Quota::with_period) defaults it to 1 (strict spacing).
///
/// ```
/// use std::time::Duration;
/// use tower_throttle::Quota;
///
/// let q = Quota::per_second(8).burst(16);
/// assert_eq!(q.interval(), Duration::from_millis(125));
/// assert_eq!(q.burst_size(), 16);
///
/// // Size a client at 80 % of a documented "100 per minute".
/// let q = Quota::per_minute(100).headroom(0.8);
/// assert_eq!(q.burst_size(), 80);
/// assert_eq!(q.interval(), Duration::from_millis(750));
///
/// // Bad input is a clear error, not a later panic.
/// assert!(Quota::try_new(0, Duration::from_secs(1)).is_err());
/// ```
///
/// Fractional emission intervals are rounded **up** to the next nanosecond, so a quota never
/// admits more than it says (at 3 per second the interval is 333,333,334 ns).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u32,
    period_ns: u64,
    burst: u32,
}

/// A quota that cannot be built: returned by the `try_` constructors of [`Quota`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The rate was zero: no token would ever be added.
    ZeroRate,
    /// The period was zero: the rate would be infinite.
    ZeroPeriod,
    /// The burst capacity was zero: no request could ever be admitted.
    ZeroBurst,
    /// The headroom was not in `(0, 1]` (or not a number).
    InvalidHeadroom,
    /// The period, or `burst × interval`, does not fit in 2^64 nanoseconds (about 584 years).
    Overflow,
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            QuotaError::ZeroRate => "quota rate must be at least one token per period",
            QuotaError::ZeroPeriod => "quota period must be longer than zero",
            QuotaError::ZeroBurst => "quota burst must be at least one token",
            QuotaError::InvalidHeadroom => "quota headroom must be in (0, 1]",
            QuotaError::Overflow => "quota period or burst × interval is too large",
        })
    }
}

impl std::error::Error for QuotaError {}

fn unwrap_or_panic(r: Result<Quota, QuotaError>) -> Quota {
    match r {
        Ok(q) => q,
        Err(e) => panic!("invalid quota: {e}"),
    }
}

fn duration_ns(d: Duration) -> Result<u64, QuotaError> {
    u64::try_from(d.as_nanos()).map_err(|_| QuotaError::Overflow)
}

impl Quota {
    /// `count` tokens per `period`, burst `count`.
    ///
    /// # Errors
    /// [`QuotaError::ZeroRate`], [`QuotaError::ZeroPeriod`] or [`QuotaError::Overflow`].
    pub fn try_new(count: u32, period: Duration) -> Result<Self, QuotaError> {
        if count == 0 {
            return Err(QuotaError::ZeroRate);
        }
        let period_ns = duration_ns(period)?;
        if period_ns == 0 {
            return Err(QuotaError::ZeroPeriod);
        }
        Quota {
            count,
            period_ns,
            burst: count,
        }
        .checked()
    }

    /// `count` tokens per `period`, burst `count`.
    ///
    /// # Panics
    /// When [`Quota::try_new`] would return an error.
    pub fn new(count: u32, period: Duration) -> Self {
        unwrap_or_panic(Self::try_new(count, period))
    }

    /// `n` tokens per second, burst `n`.
    ///
    /// # Panics
    /// When `n` is zero; see [`Quota::try_new`].
    pub fn per_second(n: u32) -> Self {
        Self::new(n, Duration::from_secs(1))
    }

    /// `n` tokens per minute, burst `n`.
    ///
    /// # Panics
    /// When `n` is zero; see [`Quota::try_new`].
    pub fn per_minute(n: u32) -> Self {
        Self::new(n, Duration::from_secs(60))
    }

    /// `n` tokens per hour, burst `n`.
    ///
    /// # Panics
    /// When `n` is zero; see [`Quota::try_new`].
    pub fn per_hour(n: u32) -> Self {
        Self::new(n, Duration::from_secs(3600))
    }

    /// The quota as a `RateLimit-Policy` states it, (`q`, `w`): its count per period, the
    /// period in whole seconds. A period that is not whole seconds is widened to the next
    /// second, with the count it holds.
    pub(crate) fn policy_window(&self) -> (u64, u64) {
        let period = self.period();
        let count = u64::from(self.count());
        if period.subsec_nanos() == 0 && period.as_secs() > 0 {
            return (count, period.as_secs());
        }
        let w = period.as_secs() + u64::from(period.subsec_nanos() > 0);
        let w = w.max(1);
        let q = u128::from(count) * u128::from(w) * 1_000_000_000 / period.as_nanos().max(1);
        (u64::try_from(q).unwrap_or(u64::MAX), w)
    }

    /// `n` tokens per day (86,400 s), burst `n`.
    ///
    /// # Panics
    /// When `n` is zero; see [`Quota::try_new`].
    pub fn per_day(n: u32) -> Self {
        Self::new(n, Duration::from_secs(86_400))
    }

    /// One token every `period`, burst 1.
    ///
    /// # Panics
    /// When `period` is zero or longer than about 584 years; see [`Quota::try_new`].
    pub fn with_period(period: Duration) -> Self {
        Self::new(1, period)
    }

    /// Sets the burst capacity: the most tokens the bucket holds.
    ///
    /// # Panics
    /// When `n` is zero or `n × interval` overflows; see [`Quota::try_burst`].
    #[must_use]
    pub fn burst(self, n: u32) -> Self {
        unwrap_or_panic(self.try_burst(n))
    }

    /// Sets the burst capacity.
    ///
    /// # Errors
    /// [`QuotaError::ZeroBurst`] or [`QuotaError::Overflow`].
    pub fn try_burst(self, n: u32) -> Result<Self, QuotaError> {
        if n == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        Quota { burst: n, ..self }.checked()
    }

    /// Scales the quota to a fraction of itself: rate and burst × `fraction` (burst rounded
    /// down, at least 1). Use it to stay below a documented limit, e.g. `0.8` for 80 %.
    ///
    /// # Panics
    /// When `fraction` is not in `(0, 1]`; see [`Quota::try_headroom`].
    #[must_use]
    pub fn headroom(self, fraction: f64) -> Self {
        unwrap_or_panic(self.try_headroom(fraction))
    }

    /// Scales the quota to a fraction of itself.
    ///
    /// # Errors
    /// [`QuotaError::InvalidHeadroom`] when `fraction` is not in `(0, 1]`, or
    /// [`QuotaError::Overflow`] when the stretched period no longer fits.
    pub fn try_headroom(self, fraction: f64) -> Result<Self, QuotaError> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(QuotaError::InvalidHeadroom);
        }
        let period = (self.period_ns as f64 / fraction).ceil();
        if period >= u64::MAX as f64 {
            return Err(QuotaError::Overflow);
        }
        let burst = ((f64::from(self.burst) * fraction) as u32).max(1);
        Quota {
            period_ns: period as u64,
            burst,
            ..self
        }
        .checked()
    }

    fn checked(self) -> Result<Self, QuotaError> {
        let interval = self.interval_ns();
        match interval.checked_mul(u64::from(self.burst)) {
            // Keep ample room for `now + tolerance + cost × interval` in the bucket's arithmetic.
            Some(t) if t < u64::MAX / 4 => Ok(self),
            _ => Err(QuotaError::Overflow),
        }
    }

    /// The emission interval in nanoseconds: one token is added every this long.
    pub(crate) fn interval_ns(&self) -> u64 {
        self.period_ns.div_ceil(u64::from(self.count))
    }

    /// The period in nanoseconds.
    pub(crate) fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// The emission interval: one token is added every this long (rounded up to 1 ns).
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns())
    }

    /// The burst capacity: the most tokens the bucket holds.
    pub fn burst_size(&self) -> u32 {
        self.burst
    }

    /// The tokens added per [`period`](Quota::period), as configured.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period over which [`count`](Quota::count) tokens are added.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The sustained rate in tokens per second.
    pub fn per_second_f64(&self) -> f64 {
        1e9 / self.interval_ns() as f64
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("count", &self.count)
            .field("period", &self.period())
            .field("burst", &self.burst)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_overflow_are_errors() {
        assert_eq!(
            Quota::try_new(0, Duration::from_secs(1)),
            Err(QuotaError::ZeroRate)
        );
        assert_eq!(
            Quota::try_new(1, Duration::ZERO),
            Err(QuotaError::ZeroPeriod)
        );
        assert_eq!(
            Quota::per_second(1).try_burst(0),
            Err(QuotaError::ZeroBurst)
        );
        assert_eq!(Quota::try_new(1, Duration::MAX), Err(QuotaError::Overflow));
        assert_eq!(
            Quota::per_hour(1).try_burst(u32::MAX),
            Err(QuotaError::Overflow)
        );
        for bad in [0.0, -0.5, 1.01, f64::NAN, f64::INFINITY] {
            assert_eq!(
                Quota::per_second(10).try_headroom(bad),
                Err(QuotaError::InvalidHeadroom)
            );
        }
    }

    #[test]
    #[should_panic(expected = "invalid quota: quota rate must be at least one token per period")]
    fn panicking_constructor_says_why() {
        let _ = Quota::per_minute(0);
    }

    #[test]
    fn interval_rounds_up() {
        assert_eq!(Quota::per_second(3).interval_ns(), 333_333_334);
        assert_eq!(
            Quota::per_hour(2000).interval(),
            Duration::from_millis(1800)
        );
        assert_eq!(Quota::with_period(Duration::from_millis(7)).burst_size(), 1);
        assert_eq!(Quota::per_second(1).headroom(1.0), Quota::per_second(1));
        assert_eq!(
            Quota::per_second(1).headroom(0.5).interval(),
            Duration::from_secs(2)
        );
        assert_eq!(Quota::per_second(1).headroom(0.01).burst_size(), 1);
    }
}
