//! The Lua scripts: every decision is one atomic script run inside Redis.
//!
//! # Files
//! [`source`](super::source) puts each script together from `lua/`: each algorithm's state
//! and operations written once (`lua/<algorithm>/`; the token and leaky bucket share
//! `lua/gcra/`, told apart by a tag, the windows share `lua/window/`), then the operation on
//! one quota (`lua/acquire.lua`, …) or on a plan of several (`lua/stack/`).
//!
//! # State, per algorithm (integers, µs of the Redis clock)
//! | algorithm | `KEYS[1]` (string) | `KEYS[2]` (`<key>:log`) |
//! |---|---|---|
//! | token bucket | `"<tat>"` or `"<tat>:<pause>"` | — |
//! | leaky bucket | `"K<tat>"` or `"K<tat>:<pause>"` | — |
//! | fixed window | `"F<w>:<count>"` (+ `":<pause>"`, + ramp) | — |
//! | sliding window | `"S<w>:<prev>:<cur>"` (+ `":<pause>"`, + ramp, + `"Q<q>"`) | — |
//! | sliding log | `"L<seq>:<total>"` (+ `":<pause>"`, + ramp) | sorted set: score = instant, member = `"<seq>:<tokens>"` |
//!
//! A plan (`lua/stack/`) keeps every quota's state in `KEYS[1]`, `"<state 1>|<state 2>|…"`,
//! each sliding log's entries at `<key>:log`, `<key>:q2:log`, …, and, unless they are the
//! base plan's (a keyed limit's default plan as built), the parameters the states were
//! written with before a `#`: `"<sig>|<sig>|…#"`, one `"<algorithm>:<W>:<T>:<tau>:<E>"` per
//! quota. Every keyed limit runs the plan scripts, one quota or several.
//!
//! `tat` is the instant the bucket is full again (GCRA); `total` the tokens of the log's
//! entries (recounted when it disagrees with them); `w` a window index (`⌊now / W⌋`,
//! windows aligned to the UNIX epoch); `pause` the end of a pause in force, kept only while
//! one is; the ramp `"R<tat>:<until>"` (a window's, after a pause) kept until it hands over
//! at `until`, `tat` the instant it lets the next request through. The tags keep every
//! algorithm's state apart: a value of another algorithm (after a change of algorithm) is a
//! fresh state and is overwritten, the log's entries deleted with it.
//!
//! # Rules the scripts follow
//! - Time comes from `redis.call('TIME')`, never from the callers' clocks.
//! - Integer microseconds only: Lua numbers are doubles, exact below 2^53 (about year 2255
//!   for the clock); the caller checks that `now + max_pause + 2·burst·T + 2·W` and
//!   `count · W` stay below that. Integers are passed to commands with `string.format('%d', …)`.
//! - Every write carries a TTL (`SET … PX <ms>`, and `PEXPIRE` on the log): the time until
//!   the state no longer matters (the bucket is full again, the window that counts is over,
//!   the newest log entry left the window, the pause ended), rounded up to whole
//!   milliseconds, so it is > 0 and an idle key vanishes when it would mean "fresh" anyway.
//! - A stored state further ahead than any legitimate one (clock stepped back after a
//!   failover, a stray write, garbage) is clamped to what the algorithm reaches: a booking
//!   lies at most the booking horizon ahead of `now`, and only a pause reaches further,
//!   itself clamped to `now + max_pause`. GCRA: `tat` to `max(now + H + max(tau, B·T),
//!   pause + tau − T)` (`H = max(1 s, tau)`); windows: no count in a window after the one of
//!   `max(now + HW, pause)` (`HW = max(1 s, W)`; a change of quota charges the end of a
//!   pause), no count above `L`, no booked instant (the sliding window's `"Q<q>"` suffix)
//!   past it; log: entries after `max(now + HW, pause)` collapse into one entry there; a
//!   ramp hands over within `2·W` of `max(now, pause)` and lets its next request through by
//!   `max(pause, now + HW + L·T)`. The clamp is *written*, on the deny path too; a key that
//!   lost its TTL (or holds a too-long one) gets the right TTL back. So nothing locks a key
//!   out for longer than `max(max_pause, H) + burst·T` (buckets) or
//!   `max(max_pause, HW) + 2·W` (windows).
//! - The windows admit at most `E` (`ARGV[11]`, `1 ≤ E ≤ L`) tokens per window: `L`, or
//!   fewer while a rate control holds the rate down. A request of `n > E` tokens sees a
//!   limit of `max(E, n)` (it goes when the window holds nothing else); the clamps keep
//!   `L`, so a state written at any `E` stays legitimate at every other.
//! - A value that does not parse is treated as a fresh state and overwritten; a key of
//!   another type makes `GET` fail with `WRONGTYPE`, which the client maps to
//!   [`RedisErrorKind::WrongType`](super::RedisErrorKind::WrongType) (it may be someone
//!   else's: it is left alone). `KEYS[2]` belongs to the state in `KEYS[1]`: a value of
//!   another type there is deleted, as garbage in the state is.

use std::time::Duration;

use ::redis::Value;

use super::error::{RedisError, RedisErrorKind};
use super::source::{self, Family, Verb};
use crate::{Algorithm, Denied, Throttled};

/// The pieces of Lua of `algorithm`.
pub(crate) fn family(algorithm: Algorithm) -> Family {
    match algorithm {
        Algorithm::LeakyBucket { .. } => Family::Leaky,
        Algorithm::FixedWindow => Family::Fixed,
        Algorithm::SlidingWindow => Family::Sliding,
        Algorithm::SlidingLog => Family::Log,
        _ => Family::Token,
    }
}

/// The scripts of one limit, hashed once: of one quota, or of a plan's quotas decided
/// together (`lua/stack/`).
///
/// - acquire: take `ARGV[3]` tokens if they fit (now, or with `ARGV[8]` = 1 booked within
///   the booking horizon). Returns `{admitted 0|1, wait µs, full_in µs, the admission's
///   instant µs}` (the instant a release of a booking names; 0 when refused), and for a
///   plan the quota that refused, fifth, and what refused it, sixth ([`By`]).
/// - pause: pause for `ARGV[3]` µs (at most P). Returns `{1, pause_in µs, full_in µs}`.
/// - release: give back `ARGV[3]` tokens. Returns `{1, 0, full_in µs}`.
///
/// `full_in` is the time from the script's `now` until the state no longer matters: for the
/// token and leaky bucket, until the bucket is full again.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: ::redis::Script,
    pub(crate) pause: ::redis::Script,
    pub(crate) release: ::redis::Script,
    /// The token bucket's lease script, when leases are on: give back an expired lease's
    /// unused tokens, then take up to `ARGV[3]` tokens that fit now (at least `ARGV[9]`).
    /// Returns `{granted, wait µs, full_in µs}`.
    pub(crate) lease: Option<::redis::Script>,
    /// The sources of acquire, pause, release and lease, for `EVAL` when `EVALSHA` cannot
    /// be relied on (the script cache is being flushed).
    sources: [String; 4],
}

impl Scripts {
    /// The scripts of one quota under `algorithm`, with the lease script if `lease` (token
    /// bucket only).
    pub(crate) fn one(algorithm: Algorithm, lease: bool) -> Self {
        let family = family(algorithm);
        let lease = lease && family == Family::Token;
        Scripts::of(|verb| source::one(family, verb), lease.then(source::lease))
    }

    /// The scripts of a plan whose quotas run `algorithms`, in order: every call decides on
    /// all of them, and keeps the plan's marker (`lua/stack/parts.lua`).
    pub(crate) fn plan(algorithms: &[Algorithm]) -> Self {
        let families: Vec<Family> = algorithms.iter().map(|&a| family(a)).collect();
        Scripts::of(|verb| source::stack(&families, verb), None)
    }

    fn of(source: impl Fn(Verb) -> String, lease: Option<String>) -> Self {
        let sources = [
            source(Verb::Acquire),
            source(Verb::Pause),
            source(Verb::Release),
            lease.clone().unwrap_or_default(),
        ];
        Scripts {
            acquire: ::redis::Script::new(&sources[0]),
            pause: ::redis::Script::new(&sources[1]),
            release: ::redis::Script::new(&sources[2]),
            lease: lease.map(|l| ::redis::Script::new(&l)),
            sources,
        }
    }

    /// The source of one of these scripts.
    pub(crate) fn source_of(&self, script: &::redis::Script) -> &str {
        let hash = script.get_hash();
        let i = if hash == self.acquire.get_hash() {
            0
        } else if hash == self.pause.get_hash() {
            1
        } else if hash == self.release.get_hash() {
            2
        } else {
            3
        };
        &self.sources[i]
    }
}

/// A script's answer, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) admitted: bool,
    /// Until the request fits (acquire), or until the pause ends (pause).
    pub(crate) wait: Duration,
    /// Until the bucket is full again, from the script's `now`.
    pub(crate) full_in: Duration,
    /// What refused it.
    pub(crate) by: By,
}

/// What refused a request (`lua/acquire.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum By {
    /// The limit.
    #[default]
    Limit,
    /// Only the share kept for critical requests: shed.
    Reserve,
    /// Its class's share of the booking horizon (`lua/classes.lua`).
    Share,
}

impl Reply {
    /// The decision: admitted, or refused until the tokens fit (shed, when only the reserve
    /// for critical requests refused them).
    pub(crate) fn decision(&self) -> Result<(), Denied> {
        match (self.admitted, self.by) {
            (true, _) => Ok(()),
            (false, By::Reserve) => Err(Denied::Shed(Throttled::after(self.wait))),
            (false, _) => Err(Throttled::after(self.wait).into()),
        }
    }
}

/// Check a reply whose first integer is a number of tokens granted, `0..=max` (`max` = 1:
/// admitted or not); with the count, the admission's instant on the Redis clock (µs) when
/// the reply has a fourth integer (an acquire's: what a release of a booking names; 0
/// otherwise), and the quota that refused (`0..parts`) when it has a fifth (a plan's
/// acquire; 0 otherwise), and what refused it when it has a sixth. Anything else is garbage.
pub(crate) fn parse_grant(
    value: &Value,
    limit_us: u64,
    max: u32,
    parts: usize,
) -> Result<(Reply, u32, u64, usize), RedisError> {
    let garbage = || RedisError::new(RedisErrorKind::Garbage, "redis sent an unexpected reply");
    let Value::Array(items) = value else {
        return Err(garbage());
    };
    let mut ints = [0u64; 6];
    if !(3..=6).contains(&items.len()) {
        return Err(garbage());
    }
    for (slot, item) in ints.iter_mut().zip(items) {
        match item {
            Value::Int(i) => *slot = u64::try_from(*i).map_err(|_| garbage())?,
            _ => return Err(garbage()),
        }
    }
    let [admitted, wait, full_in, at, part, by] = ints;
    let part = usize::try_from(part.saturating_sub(1)).unwrap_or(usize::MAX);
    // A refusal always has a wait (a zero would make a waiter ask again at once); an
    // instant stays exact in Lua's doubles.
    if admitted > u64::from(max)
        || (admitted == 0 && wait == 0)
        || wait > limit_us
        || full_in > limit_us
        || at >= 1 << 53
        || part >= parts.max(1)
        || by > 2
    {
        return Err(garbage());
    }
    let reply = Reply {
        admitted: admitted > 0,
        wait: Duration::from_micros(wait),
        full_in: Duration::from_micros(full_in),
        by: [By::Limit, By::Reserve, By::Share][by as usize],
    };
    // At most `max`, a u32.
    Ok((reply, admitted as u32, at, part))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply of one admission: three non-negative integers, the first 0 or 1, times no
    /// larger than `limit_us`.
    fn parse_reply(value: &Value, limit_us: u64) -> Result<Reply, RedisError> {
        parse_grant(value, limit_us, 1, 1).map(|(reply, ..)| reply)
    }

    #[test]
    fn replies_are_checked() {
        let ok = Value::Array(vec![Value::Int(0), Value::Int(1500), Value::Int(9000)]);
        assert_eq!(
            parse_reply(&ok, 10_000).unwrap(),
            Reply {
                admitted: false,
                wait: Duration::from_micros(1500),
                full_in: Duration::from_micros(9000),
                by: By::Limit,
            }
        );
        let bad = [
            Value::Nil,
            Value::Okay,
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1), Value::Int(0)]),
            Value::Array(vec![Value::Int(2), Value::Int(0), Value::Int(0)]),
            Value::Array(vec![Value::Int(1), Value::Int(-1), Value::Int(0)]),
            Value::Array(vec![Value::Int(0), Value::Int(0), Value::Int(0)]),
            Value::Array(vec![Value::Int(1), Value::Int(0), Value::Int(10_001)]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::BulkString(b"5".to_vec()),
            ]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Int(0),
                Value::Int(1 << 53),
            ]),
            Value::Array(vec![Value::Int(1); 7]),
            // Refused by nothing the scripts name.
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5),
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
                Value::Int(3),
            ]),
            // A refusal by a second quota, from a limit of one.
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5),
                Value::Int(0),
                Value::Int(0),
                Value::Int(2),
            ]),
        ];
        let booked = Value::Array(vec![
            Value::Int(1),
            Value::Int(700),
            Value::Int(9000),
            Value::Int(1_700_000_000_000_700),
        ]);
        assert_eq!(
            parse_grant(&booked, 10_000, 1, 1).unwrap().2,
            1_700_000_000_000_700
        );
        let shed = Value::Array([0, 700, 9000, 0, 0, 1].map(Value::Int).to_vec());
        let (reply, ..) = parse_grant(&shed, 10_000, 1, 1).unwrap();
        assert!(matches!(reply.decision(), Err(Denied::Shed(_))));
        for v in bad {
            let e = parse_reply(&v, 10_000).unwrap_err();
            assert_eq!(e.kind(), RedisErrorKind::Garbage, "{v:?}");
        }
    }
}
