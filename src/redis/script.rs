//! The Lua scripts: every decision is one atomic script run inside Redis.
//!
//! # State
//! One string key per bucket: `"<tat>"` or `"<tat>:<pause>"`, integers in microseconds of the
//! Redis clock. `tat` is the instant the bucket is full again (GCRA); `pause` is the end of a
//! pause in force, kept only while one is.
//!
//! # Rules the scripts follow
//! - Time comes from `redis.call('TIME')`, never from the callers' clocks.
//! - Integer microseconds only: Lua numbers are doubles, exact below 2^53 (about year 2255
//!   for the clock); the caller checks that `now + max_pause + 2·burst·T` stays below that.
//!   Integers are passed to commands with `string.format('%d', …)`.
//! - Every write is one `SET … PX <ms>`: the TTL is the time until the bucket is full again
//!   (or the pause ends), rounded up to whole milliseconds, so it is > 0 and an idle key
//!   vanishes exactly when it would mean "full bucket" anyway.
//! - A stored state further ahead than any legitimate one (clock stepped back after a
//!   failover, a stray write, garbage) is clamped to `max(now, pause) + burst·T`, with the
//!   pause clamped to `now + max_pause`, and the clamp is *written*, on the deny path too; a
//!   key that lost its TTL (or holds a too-long one) gets the right TTL back. So nothing
//!   locks a key out for longer than `max_pause + burst·T`.
//! - A value that does not parse is treated as a full bucket and overwritten; a key of
//!   another type makes `GET` fail with `WRONGTYPE`, which the client maps to
//!   [`RedisErrorKind::WrongType`](super::RedisErrorKind::WrongType).

use std::time::Duration;

use ::redis::Value;

use super::error::{RedisError, RedisErrorKind};

/// Take `ARGV[3]` tokens if they fit: `lua/prelude.lua` then `lua/acquire.lua`.
/// Returns `{admitted 0|1, wait µs, full_in µs}`, where `full_in` is the time from the
/// script's `now` until the bucket is full again.
pub(crate) const ACQUIRE: &str = concat!(
    include_str!("lua/prelude.lua"),
    include_str!("lua/acquire.lua")
);

/// Pause for `ARGV[3]` µs (at most P): `lua/prelude.lua` then `lua/pause.lua`.
/// Returns `{1, pause_in µs, full_in µs}`.
pub(crate) const PAUSE: &str = concat!(
    include_str!("lua/prelude.lua"),
    include_str!("lua/pause.lua")
);

/// Give back `ARGV[3]` tokens: `lua/prelude.lua` then `lua/release.lua`.
/// Returns `{1, 0, full_in µs}`.
pub(crate) const RELEASE: &str = concat!(
    include_str!("lua/prelude.lua"),
    include_str!("lua/release.lua")
);

/// The scripts, hashed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: ::redis::Script,
    pub(crate) pause: ::redis::Script,
    pub(crate) release: ::redis::Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: ::redis::Script::new(ACQUIRE),
            pause: ::redis::Script::new(PAUSE),
            release: ::redis::Script::new(RELEASE),
        }
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
}

/// Check a reply: three non-negative integers, the first 0 or 1, times no larger than
/// `limit_us` (the longest state the script can hold). Anything else is garbage.
pub(crate) fn parse_reply(value: &Value, limit_us: u64) -> Result<Reply, RedisError> {
    let garbage = || RedisError::new(RedisErrorKind::Garbage, "redis sent an unexpected reply");
    let Value::Array(items) = value else {
        return Err(garbage());
    };
    let mut ints = [0u64; 3];
    if items.len() != ints.len() {
        return Err(garbage());
    }
    for (slot, item) in ints.iter_mut().zip(items) {
        match item {
            Value::Int(i) => *slot = u64::try_from(*i).map_err(|_| garbage())?,
            _ => return Err(garbage()),
        }
    }
    let [admitted, wait, full_in] = ints;
    // A refusal always has a wait (a zero would make a waiter ask again at once).
    if admitted > 1 || (admitted == 0 && wait == 0) || wait > limit_us || full_in > limit_us {
        return Err(garbage());
    }
    Ok(Reply {
        admitted: admitted == 1,
        wait: Duration::from_micros(wait),
        full_in: Duration::from_micros(full_in),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_checked() {
        let ok = Value::Array(vec![Value::Int(0), Value::Int(1500), Value::Int(9000)]);
        assert_eq!(
            parse_reply(&ok, 10_000).unwrap(),
            Reply {
                admitted: false,
                wait: Duration::from_micros(1500),
                full_in: Duration::from_micros(9000),
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
                Value::Int(0),
            ]),
        ];
        for v in bad {
            let e = parse_reply(&v, 10_000).unwrap_err();
            assert_eq!(e.kind(), RedisErrorKind::Garbage, "{v:?}");
        }
    }
}
