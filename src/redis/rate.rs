//! What the processes of a [`RedisBucket`] learned of a server's rate, kept in Redis beside
//! the bucket, and the rate the shared limit decides at.
//!
//! A process that acts on a push-back writes the cut to `<key>:rate` as
//! `"<limit estimated, tokens/s>:<end of the cooldown, Unix ms>"` (expiring after
//! [`LEARNED_TTL`]); the others read it back (at most every 250 ms, while requests succeed)
//! and follow the same curve from the same instant (see [`adaptive`](crate::adaptive)), so
//! every process lands on the same rate. Each process decides in Redis at the rate in
//! force. Clock skew between machines only shifts that curve by the skew.
//!
//! What is read back is bounded by what a push-back produces: a cooldown ends at most
//! `max_pause` ahead (with [`SKEW`] for the clocks of other machines), and a limit cuts the
//! rate in force at most in half (see `adaptive::Control::adopt`). Anything else is ignored
//! and reported to the [observer](crate::observe::Observer::ignored).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::error::RedisError;
use super::RedisBucket;
use crate::adaptive::Cut;
use crate::observe::Ignored;
use crate::Quota;

/// How long what the processes learned stays in Redis without a new push-back.
pub(crate) const LEARNED_TTL: Duration = Duration::from_secs(600);

/// How far the clocks of the processes sharing a limit may disagree: the end of a cooldown
/// read back may lie this much beyond `max_pause` ahead.
pub(crate) const SKEW: Duration = Duration::from_secs(1);

impl RedisBucket {
    /// The Redis key beside the bucket's that holds what its processes learned of the
    /// server's rate (the limit estimated at the last push-back, and when its cooldown ends).
    pub fn learned_key(&self) -> String {
        format!("{}:rate", self.redis_key())
    }

    /// Decide at `quota`'s rate from now on (never above the configured quota), in Redis and
    /// in the local fallback, which keeps its fraction of it.
    pub(crate) fn set_rate(&self, quota: Quota) {
        self.backend().set_rate(quota);
        self.set_fallback_quota(quota);
        self.forget_hint();
    }

    /// Write a cut for every process, its cooldown cut to `max_pause`.
    pub(crate) async fn publish(&self, cut: Cut) -> Result<(), RedisError> {
        let latest = SystemTime::now().checked_add(self.backend().max_pause());
        let resume = latest.map_or(cut.resume, |l| cut.resume.min(l));
        let ms = resume
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let value = format!("{}:{ms}", cut.limit);
        let mut conn = self.backend().connection();
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(self.learned_key())
            .arg(value)
            .arg("PX")
            .arg(LEARNED_TTL.as_millis() as u64);
        self.bounded(cmd.query_async::<()>(&mut conn)).await
    }

    /// The cut the processes published last, if any, or what no process writes: a value
    /// that does not parse, or a cooldown ending more than `max_pause` (and [`SKEW`]) ahead.
    pub(crate) async fn learned(&self) -> Result<Option<Result<Cut, Ignored>>, RedisError> {
        let mut conn = self.backend().connection();
        let mut cmd = ::redis::cmd("GET");
        cmd.arg(self.learned_key());
        let value = self
            .bounded(cmd.query_async::<Option<String>>(&mut conn))
            .await?;
        let latest = SystemTime::now()
            .checked_add(self.backend().max_pause())
            .and_then(|t| t.checked_add(SKEW));
        Ok(value.as_deref().map(|v| {
            parse(v)
                .filter(|cut| latest.is_some_and(|l| cut.resume <= l))
                .ok_or(Ignored::SharedResume)
        }))
    }

    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, ::redis::RedisError>>,
    ) -> Result<T, RedisError> {
        match tokio::time::timeout(self.backend().options.timeout, call).await {
            Ok(result) => result.map_err(RedisError::from_client),
            Err(_) => Err(RedisError::new(
                super::RedisErrorKind::Timeout,
                "redis timed out",
            )),
        }
    }
}

/// `"<rate>:<unix ms>"`, a positive finite rate.
fn parse(value: &str) -> Option<Cut> {
    let (rate, ms) = value.split_once(':')?;
    let limit: f64 = rate.parse().ok()?;
    let ms: u64 = ms.parse().ok()?;
    let resume = UNIX_EPOCH.checked_add(Duration::from_millis(ms))?;
    (limit.is_finite() && limit > 0.0).then_some(Cut { limit, resume })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> std::time::SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn learned_values_parse_or_are_ignored() {
        assert_eq!(
            parse("47.5:1700000000123"),
            Some(Cut {
                limit: 47.5,
                resume: at(1_700_000_000_123)
            })
        );
        for bad in [
            "",
            "47.5",
            "x:1",
            "47.5:x",
            "-1:5",
            "NaN:5",
            "inf:5",
            "0:5",
            "1:99999999999999999999",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
