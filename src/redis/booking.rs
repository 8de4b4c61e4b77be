//! Waiting on a Redis limit — a [`RedisBucket`](super::RedisBucket), or one key of a
//! [`RedisKeyed`](super::RedisKeyed) — and pausing it.
//!
//! A waiter books its admission instant in Redis, then sleeps until it. Redis hands out
//! instants in the order requests reach it, whichever process sends them, so the waiters of
//! every process are served first come, first served, whatever the algorithm. A waiter
//! whose instant lies beyond the booking horizon sleeps until it is within it (as far as the
//! last replies know: the [`Hint`]) and asks again. Dropped while asleep on a booked
//! instant, it gives the tokens back. A pause empties the limit in Redis, which voids the
//! instants booked before it: their waiters book again.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::backend::{Backend, Timed};
use super::error::{RedisError, RedisErrorKind};
use super::lane::Hint;
use super::script::{By, Reply};
use super::told;
use crate::{Denied, ExceedsBurst, Priority};

/// A waiter admitted.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Redis' decision (booked ahead: for `wait` after the script ran).
    pub(crate) reply: Reply,
    /// Whether the waiter slept (before booking, or until its instant).
    pub(crate) slept: bool,
    /// The admission's instant on the Redis clock, µs, which a release names.
    pub(crate) at_us: u64,
}

/// Why a waiter was not admitted.
#[derive(Debug)]
pub(crate) enum Unbooked {
    /// The request can never fit: larger than the quota allows (it may have changed while
    /// the waiter slept, as for a waiter of an in-process bucket).
    Exceeds(ExceedsBurst),
    /// Redis failed: the failure policy answers.
    Failed(RedisError),
}

/// Wait for `n` tokens of the limit at `key`: book the earliest instant they fit in Redis,
/// after every earlier booking, then sleep until it. `hint` holds what the last replies
/// said of this limit, and the pauses of this process and of the others. `each`: the amount
/// of each quota of a plan, where they differ (`n` is the first's).
pub(crate) async fn book(
    backend: &Arc<Backend>,
    hint: &Hint,
    key: &str,
    n: u32,
    each: Option<Arc<[u64]>>,
    priority: Priority,
) -> Result<Admission, Unbooked> {
    if backend.holds_in_flight() {
        return poll(backend, hint, key, n, each, priority).await;
    }
    let mut slept = false;
    loop {
        // Checked again after every sleep, and at once when the quota changes (listened to
        // before the check, so no change is missed).
        let mut changed = std::pin::pin!(hint.next_quota_change());
        changed.as_mut().enable();
        fits_ever(backend, n, each.as_deref())?;
        // Read again after every sleep: a reply or a pause may have moved the instant.
        if let Some(early) = fits_at(backend, hint, n).checked_sub(backend.reserve_horizon()) {
            if early > Instant::now() {
                slept = true;
                let _ = tokio::time::timeout_at(early, changed).await;
                continue;
            }
        }
        // Booked before a pause of this process reached Redis, an instant would fall
        // inside it. (Past the end of the pause held here, it books: a pause that long on
        // its way has ended anyway.)
        if hint.pause_pending() && hint.pauses_landed().await {
            continue;
        }
        // A pause made (or heard of) while the booking is on its way voids it too.
        let voids = hint.voids();
        let t = reserve_apart(backend, key, n, each.clone(), priority)
            .await
            .map_err(Unbooked::Failed)?;
        let reply = learn(backend, hint, &t, n);
        if !reply.admitted {
            // Held back alone (by its class's share, or by the reserve for critical
            // requests, beyond the horizon): it asks again when its wait says.
            let early = match reply.by {
                By::Limit => None,
                By::Share => Some(reply.wait),
                By::Reserve => reply.wait.checked_sub(backend.reserve_horizon()),
            };
            if let Some(early) = early {
                slept = true;
                let _ = tokio::time::timeout_at(t.received + early, changed).await;
            }
            continue;
        }
        if !reply.wait.is_zero() {
            let booked = Booked {
                backend: Some(backend),
                key,
                n,
                each: each.clone(),
                at_us: t.at_us,
            };
            slept = true;
            // The script ran before the reply came: never early.
            let voided = hint.voided_before(voids, t.received + reply.wait).await;
            booked.used();
            if voided {
                // Booked before a pause reached Redis (or just after it: a slot lost, never
                // one too many): the pause emptied the bucket there, so nothing to give
                // back. Book again once the pause is there.
                continue;
            }
        }
        return Ok(Admission {
            reply,
            slept,
            at_us: t.at_us,
        });
    }
}

/// How often a waiter on a plan with in-flight quotas asks again.
const POLL: Duration = Duration::from_millis(20);

/// [`book`], for a plan with in-flight quotas ([`Plan::in_flight`](crate::Plan::in_flight)):
/// their slots come back when requests end, which no booking foresees, so a waiter asks
/// again every [`POLL`] (sooner when the refusal says the rate quotas let it) until it is
/// admitted. Waiters of one process or several are then served in no set order.
async fn poll(
    backend: &Arc<Backend>,
    hint: &Hint,
    key: &str,
    n: u32,
    each: Option<Arc<[u64]>>,
    priority: Priority,
) -> Result<Admission, Unbooked> {
    let mut slept = false;
    loop {
        fits_ever(backend, n, each.as_deref())?;
        let t = (backend.acquire(key, n, false, each.as_deref(), priority))
            .await
            .map_err(Unbooked::Failed)?;
        let reply = learn(backend, hint, &t, n);
        if reply.admitted {
            return Ok(Admission {
                reply,
                slept,
                at_us: t.at_us,
            });
        }
        slept = true;
        tokio::time::sleep(reply.wait.clamp(Duration::from_millis(1), POLL)).await;
    }
}

/// Whether `n` tokens (or `each`, an amount per quota) can ever fit: checked again after
/// every sleep, for the quota may have changed.
fn fits_ever(backend: &Backend, n: u32, each: Option<&[u64]>) -> Result<(), Unbooked> {
    match each {
        Some(each) => backend.check_each(each),
        None => backend.check(n),
    }
    .map_err(Unbooked::Exceeds)
}

/// The instant `n` tokens should fit, from what the last replies said.
pub(crate) fn fits_at(backend: &Backend, hint: &Hint, n: u32) -> Instant {
    if backend.is_gcra() {
        let cost = u64::from(n).saturating_mul(backend.interval_ns());
        hint.likely_fits_at(cost, backend.tolerance_ns())
    } else {
        hint.window_fits_at(n)
    }
}

/// Learn from a reply to a request of `n` tokens.
pub(crate) fn learn(backend: &Backend, hint: &Hint, t: &Timed, n: u32) -> Reply {
    if backend.is_gcra() {
        hint.observe(t);
    } else if !t.reply.admitted && t.reply.by == By::Limit {
        hint.refused(t, n);
    }
    t.reply
}

/// [`Backend::acquire`], booking, run apart from the waiter: a waiter that goes away while its
/// booking is on its way leaves the reply to that task, which gives the tokens back.
async fn reserve_apart(
    backend: &Arc<Backend>,
    key: &str,
    n: u32,
    each: Option<Arc<[u64]>>,
    priority: Priority,
) -> Result<Timed, RedisError> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return backend
            .acquire(key, n, true, each.as_deref(), priority)
            .await;
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (backend, key) = (Arc::clone(backend), key.to_owned());
    rt.spawn(async move {
        let t = (backend.acquire(&key, n, true, each.as_deref(), priority)).await;
        if let Err(Ok(t)) = tx.send(t) {
            if t.reply.admitted {
                let _ = backend
                    .release_booked(&key, n, t.at_us, each.as_deref())
                    .await;
            }
        }
    });
    rx.await.unwrap_or_else(|_| {
        Err(RedisError::new(
            RedisErrorKind::Unavailable,
            "the runtime stopped during a redis call",
        ))
    })
}

/// Tokens booked in Redis for a later instant: given back if the waiter goes away first.
struct Booked<'a> {
    backend: Option<&'a Arc<Backend>>,
    key: &'a str,
    n: u32,
    each: Option<Arc<[u64]>>,
    /// The booked instant on the Redis clock, µs, as the reply said (windows; else 0).
    at_us: u64,
}

impl Booked<'_> {
    /// The instant came: the tokens are spent.
    fn used(mut self) {
        self.backend = None;
    }
}

impl Drop for Booked<'_> {
    fn drop(&mut self) {
        let Some(backend) = self.backend.take() else {
            return;
        };
        let (backend, key, n, at_us) =
            (Arc::clone(backend), self.key.to_owned(), self.n, self.at_us);
        let each = self.each.take();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = backend
                    .release_booked(&key, n, at_us, each.as_deref())
                    .await;
            });
        }
    }
}

/// Hold the waiters of `hint` for a pause of `cooldown`, cut to `max_pause` (returned):
/// nothing fits before it ends, and the bucket is full again once it has refilled after.
pub(crate) fn hold(backend: &Backend, hint: &Hint, cooldown: Duration) -> Duration {
    let cooldown = cooldown.min(backend.max_pause());
    hint.hold(Instant::now(), cooldown.saturating_add(backend.refill()));
    cooldown
}

/// How a pause is told to the other processes: on `channel`, from the handle `from`, of
/// the key `key` (its digest) for a keyed limit.
#[derive(Debug)]
pub(crate) struct Tell<'a> {
    pub(crate) channel: &'a str,
    pub(crate) from: u64,
    pub(crate) key: Option<&'a str>,
}

/// Pause the limit at `key` in Redis for `cooldown`, this process's side held already
/// ([`hold`], and [`Hint::pause_made`]). Once it is in Redis, the waiters asleep on an
/// instant inside it book again, here and in the other processes (told as `tell` says).
///
/// # Errors
/// When Redis fails, what the failure policy says.
pub(crate) async fn pause(
    backend: &Backend,
    hint: &Hint,
    key: &str,
    cooldown: Duration,
    tell: Tell<'_>,
) -> Result<(), Denied> {
    let result = backend.pause(key, cooldown, None).await;
    hint.pause_done();
    match result {
        Ok(t) => {
            let message = told::message(tell.from, t.reply.wait, tell.key);
            backend.publish(tell.channel, &message).await;
            if backend.is_gcra() {
                hint.observe(&t);
            }
            Ok(())
        }
        Err(e) => backend.policy().pause(e),
    }
}
