//! [`RedisKeyed`]: one limit per key (user, API key, address), kept in Redis.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::backend::{bump, Backend, Options, RedisStats};
use super::builder::RedisKeyedBuilder;
use super::error::RedisError;
use super::failure::{
    acquire_fallback, pause_fallback, try_acquire_fallback, FailurePolicy, LocalTable,
};
use super::key::keyed_key;
use super::lane::Lanes;
use super::told;
use crate::extract::StableKey;
use crate::{Algorithm, Denied, ExceedsBurst, Quota, Throttled};

/// One limit per key, kept in Redis and shared by every process: the keyed variant of
/// [`RedisBucket`](super::RedisBucket), with the same semantics for each key.
///
/// Keys are any [`StableKey`] (`&str`, `String`, `&[u8]`, integers, IP addresses, a
/// [`KeyDigest`](crate::extract::KeyDigest), …) and may come from requests: they are named by
/// their digest (the [key scheme](crate::extract::StableKey), version 1) in fixed-length Redis
/// keys `<prefix>:v1:{<32 hex digits>}`, so a key never appears in Redis, cannot be too long,
/// cannot choose a Redis Cluster slot or reach another namespace, and is named alike by every
/// process, build and platform — and by the layers: a
/// [`KeyedBucket`](crate::KeyedBucket) made from this limit names a key exactly as
/// [`try_acquire`](RedisKeyed::try_acquire) does. Idle keys cost nothing: each Redis key expires when its bucket
/// is full again (or its window no longer counts).
///
/// Every [`Algorithm`] works, chosen with [`RedisKeyedBuilder::algorithm`].
///
/// ```no_run
/// use tower_throttle::redis::RedisKeyed;
/// use tower_throttle::Denied;
/// use tower_throttle::Quota;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let per_user = RedisKeyed::builder(Quota::per_second(10).burst(20))
///     .url("redis://127.0.0.1:6379")
///     .key_prefix("api-per-user")
///     .build()
///     .await?;
///
/// match per_user.try_acquire("user-42", 1).await {
///     Ok(()) => { /* serve */ }
///     Err(Denied::Throttled(t)) => {
///         println!("429, Retry-After: {}", t.retry_after_secs());
///     }
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisKeyed {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    lanes: Lanes,
    local: Option<LocalTable>,
    /// Listens for the pauses of the other processes (see [`told`](super::told)); stopped
    /// when the last handle goes.
    listener: told::Listener,
}

impl told::Told for Inner {
    fn listener(&self) -> &told::Listener {
        &self.listener
    }

    /// Another process paused a key, in Redis already: this one's waiters for it asleep on
    /// an instant inside the pause book again.
    fn paused_elsewhere(&self, remaining: Duration, key: Option<&str>) {
        let Some(lane) = key.and_then(|key| self.lanes.find(key)) else {
            return;
        };
        let backend = &self.backend;
        let remaining = remaining.min(backend.max_pause());
        lane.hold(Instant::now(), remaining.saturating_add(backend.refill()));
        lane.pause_seen();
    }
}

impl RedisKeyed {
    /// The way to make a `RedisKeyed`: a builder for the URL, key prefix, failure policy,
    /// timeouts and more; [`build`](RedisKeyedBuilder::build) connects.
    pub fn builder(quota: Quota) -> RedisKeyedBuilder {
        RedisKeyedBuilder::new(quota)
    }

    /// Connect to the keyed limit under `key_prefix` at `url`, with the default settings
    /// (see [`RedisKeyedBuilder`]).
    ///
    /// # Errors
    /// As [`RedisKeyedBuilder::build`].
    #[deprecated(note = "use `RedisKeyed::builder(quota).url(url).key_prefix(prefix).build()`")]
    pub async fn connect(url: &str, key_prefix: &str, quota: Quota) -> Result<Self, RedisError> {
        Self::builder(quota)
            .url(url)
            .key_prefix(key_prefix)
            .build()
            .await
    }

    pub(crate) async fn from_parts(
        options: Options,
        quota: Quota,
        local_capacity: usize,
    ) -> Result<Self, RedisError> {
        let algorithm = options.algorithm;
        let local = options
            .policy
            .local_quota(quota)?
            .map(|q| LocalTable::new(q, algorithm, local_capacity));
        let subscribe = told::Subscribe::of(&options);
        let backend = Backend::connect(options, quota).await?;
        let inner = Arc::new(Inner {
            backend,
            lanes: Lanes::default(),
            local,
            listener: told::Listener::new(),
        });
        let channel = told::keyed_channel(&inner.backend.options.prefix);
        told::start(subscribe, channel, &inner).await;
        Ok(RedisKeyed { inner })
    }

    /// The quota of every key.
    pub fn quota(&self) -> Quota {
        self.inner.backend.quota()
    }

    /// The algorithm of every key (set by [`RedisKeyedBuilder::algorithm`]; default
    /// [`Algorithm::TokenBucket`]).
    pub fn algorithm(&self) -> Algorithm {
        self.inner.backend.algorithm
    }

    /// The Redis key holding the state of `key`. (The sliding log also keeps its entries in a
    /// sorted set at this key followed by `:log`.)
    pub fn redis_key(&self, key: impl StableKey) -> String {
        keyed_key(&self.inner.backend.options.prefix, &key.key_digest())
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        *self.inner.backend.policy()
    }

    /// Counters since this handle was built (shared by its clones).
    pub fn stats(&self) -> RedisStats {
        self.inner.backend.stats()
    }

    fn check(&self, n: u32) -> Result<(), ExceedsBurst> {
        let max = self.inner.backend.max_cost();
        if n > max {
            return Err(ExceedsBurst {
                requested: n,
                burst: max,
            });
        }
        Ok(())
    }

    /// Take `n` tokens of `key`'s limit now, or say how long until they fit. One round trip.
    ///
    /// # Errors
    /// As [`RedisBucket::try_acquire`](super::RedisBucket::try_acquire).
    pub async fn try_acquire(&self, key: impl StableKey, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        self.check(n)?;
        let inner = &*self.inner;
        let id = key.key_digest();
        let rkey = keyed_key(&inner.backend.options.prefix, &id);
        match inner.backend.acquire(&rkey, n).await {
            Ok(t) if t.reply.admitted => Ok(()),
            Ok(t) => Err(Throttled::after(t.reply.wait).into()),
            Err(e) => {
                bump(&inner.backend.counters.fallbacks);
                let local = inner
                    .local
                    .as_ref()
                    .map(|l| l.fallback(&id, inner.backend.outages()));
                try_acquire_fallback(inner.backend.policy(), local.as_ref(), n, e)
            }
        }
    }

    /// Give back `n` tokens of an admission of `key` that was not used (another limit
    /// refused the request right after). Exact while the key's bucket has not refilled past
    /// that admission (token and leaky bucket), while its window lasts (fixed and sliding
    /// window: the current window's count goes down), or while it is in the log (the newest
    /// entry of `n` tokens is removed). Never below empty. Best effort: a Redis failure
    /// leaves the tokens spent.
    ///
    /// # Errors
    /// [`Denied::Backend`] when Redis could not be reached.
    pub async fn release(&self, key: impl StableKey, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        self.check(n)?;
        let inner = &*self.inner;
        let rkey = keyed_key(&inner.backend.options.prefix, &key.key_digest());
        inner
            .backend
            .release(&rkey, n)
            .await
            .map(drop)
            .map_err(Denied::from)
    }

    /// Wait until `n` tokens of `key`'s limit are available, then take them.
    ///
    /// As [`RedisBucket::acquire`](super::RedisBucket::acquire), per key: the waiter books
    /// the earliest instant its tokens fit in Redis, after every earlier booking of that key
    /// (within the booking horizon; else it sleeps until it is within it and asks again),
    /// then sleeps until that instant. Waiters for one key in every process are served in
    /// the order they reach Redis, whatever the algorithm; waiters for different keys do not
    /// wait for each other. Dropping the future while it sleeps gives its booking back, as
    /// [`RedisBucket::acquire`](super::RedisBucket::acquire) does.
    ///
    /// # Errors
    /// As [`RedisBucket::acquire`](super::RedisBucket::acquire).
    pub async fn acquire(&self, key: impl StableKey, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        self.check(n)?;
        let inner = &*self.inner;
        let backend = &inner.backend;
        let id = key.key_digest();
        let rkey = keyed_key(&backend.options.prefix, &id);
        let gcra = backend.is_gcra();
        let cost = u64::from(n) * backend.interval_ns();
        let horizon = backend.reserve_horizon();
        // The key's hint, shared by this process's waiters for it while any waits.
        let entered = inner.lanes.enter(id);
        let hint = entered.lane();
        loop {
            // Re-read after every sleep: another waiter's reply may have moved the instant.
            let at = if gcra {
                hint.likely_fits_at(cost, backend.tolerance_ns())
            } else {
                hint.window_fits_at(n)
            };
            if let Some(early) = at.checked_sub(horizon) {
                if early > Instant::now() {
                    tokio::time::sleep_until(early).await;
                    continue;
                }
            }
            // As for a `RedisBucket`: never book before this process's pause of the key
            // reached Redis, and a pause while asleep on a booked instant voids it.
            // (Past the end of the pause held here, it books: a pause that long on its way
            // has ended anyway.)
            if hint.pause_pending() && hint.pauses_landed().await {
                continue;
            }
            let voids = hint.voids();
            match backend.reserve(&rkey, n).await {
                Ok(t) => {
                    if gcra {
                        hint.observe(&t);
                    } else if !t.reply.admitted {
                        hint.refused(&t, n);
                    }
                    if t.reply.admitted {
                        if !t.reply.wait.is_zero() {
                            // The script ran before the reply came: never early.
                            let booked = Booked {
                                keyed: Some(self.clone()),
                                key: rkey.clone(),
                                n,
                                at_us: t.at_us,
                            };
                            let at = t.received + t.reply.wait;
                            let voided = hint.voided_before(voids, at).await;
                            booked.used();
                            if voided {
                                continue;
                            }
                        }
                        return Ok(());
                    }
                }
                Err(e) => {
                    bump(&backend.counters.fallbacks);
                    let local = inner
                        .local
                        .as_ref()
                        .map(|l| l.fallback(&id, inner.backend.outages()));
                    return acquire_fallback(backend.policy(), local.as_ref(), n, e).await;
                }
            }
        }
    }

    /// Hold every admission of `key`, in every process, for `cooldown`.
    ///
    /// As [`RedisBucket::pause`](super::RedisBucket::pause), for one key. With
    /// [`FailurePolicy::Local`] the key's local bucket is paused too.
    ///
    /// # Errors
    /// [`Denied::Backend`] when Redis fails and the policy is
    /// [`FailurePolicy::Closed`].
    pub async fn pause(&self, key: impl StableKey, cooldown: Duration) -> Result<(), Denied> {
        let inner = &*self.inner;
        let backend = &inner.backend;
        let cooldown = cooldown.min(backend.max_pause());
        let id = key.key_digest();
        if let Some(local) = &inner.local {
            local.bucket(&id).pause(cooldown);
        }
        let rkey = keyed_key(&backend.options.prefix, &id);
        // The key's waiters in this process asleep on a booked instant book again once the
        // pause is in Redis.
        let entered = inner.lanes.enter(id);
        entered
            .lane()
            .hold(Instant::now(), cooldown.saturating_add(backend.refill()));
        entered.lane().pause_made();
        let result = backend.pause(&rkey, cooldown).await;
        entered.lane().pause_done();
        drop(entered);
        match result {
            Ok(t) => {
                // The other processes' waiters for the key booked inside it book again.
                let digest = id.to_string();
                let told = told::message(inner.listener.id(), t.reply.wait, Some(&digest));
                let channel = told::keyed_channel(&backend.options.prefix);
                backend.publish(&channel, &told).await;
                Ok(())
            }
            Err(e) => pause_fallback(backend.policy(), e),
        }
    }
}

impl fmt::Debug for RedisKeyed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisKeyed")
            .field("prefix", &self.inner.backend.options.prefix)
            .field("quota", &self.inner.backend.quota())
            .field("algorithm", &self.inner.backend.algorithm)
            .field("failure_policy", self.inner.backend.policy())
            .finish_non_exhaustive()
    }
}

/// Tokens of a key booked in Redis for a later instant: given back if the waiter goes away
/// first.
struct Booked {
    keyed: Option<RedisKeyed>,
    /// The Redis key of the limit's key.
    key: String,
    n: u32,
    /// The booked instant on the Redis clock, µs, as the reply said (windows; else 0).
    at_us: u64,
}

impl Booked {
    /// The instant came: the tokens are spent.
    fn used(mut self) {
        self.keyed = None;
    }
}

impl Drop for Booked {
    fn drop(&mut self) {
        let Some(keyed) = self.keyed.take() else {
            return;
        };
        let (key, n, at_us) = (std::mem::take(&mut self.key), self.n, self.at_us);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = keyed.inner.backend.release_booked(&key, n, at_us).await;
            });
        }
    }
}
