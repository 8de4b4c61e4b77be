//! Rates that follow a server's push-back: converging under a configured quota, or
//! discovering an unknown one.
//!
//! Every [`Bucket`](crate::Bucket) carries a rate control. [`RetryAfterLayer`] reports each
//! push-back (`429`, `503`) and each success to it; the control sets the *effective* rate of
//! the bucket — for every clone, through the bucket's own `set_quota` path — and the bucket
//! enforces that rate:
//!
//! - **Configured quota** ([`Bucket::new`]): the configured rate is a hard ceiling. Its first
//!   request through [`RetryAfterLayer`] starts a short ramp back up to it from 45 %, which
//!   brackets the limit of a slower server with one push-back (see "The ramp" below); a
//!   bucket used without `RetryAfterLayer` stays at the configured rate. A push-back lowers
//!   the rate to just below the server's limit as estimated,
//!   success raises it back slowly, never above the ceiling. A client configured above a
//!   server's real rate settles just below it instead of pausing, restarting at the
//!   configured rate and being refused again.
//! - **Unknown quota** ([`Bucket::adaptive`]): no rate needed, or only a hint to start from.
//!   The rate searches upwards until the first push-back, then behaves as above.
//! - Either way, when the server states its quota the rate jumps to it at once (capped by
//!   the ceiling), on a success or on the push-back itself: `RateLimit-Policy` (`q` per `w`
//!   seconds), or else `X-RateLimit-Limit`, `-Remaining` and `-Reset` (the pace that spends
//!   what remains by the reset, [`read_quota_rate`](crate::headers::read_quota_rate)). A
//!   quota that runs out (`RateLimit` or `X-RateLimit-Remaining: 0` with a reset) pauses the
//!   bucket until the reset, as before.
//! - [`BucketBuilder::fixed_rate`](crate::BucketBuilder::fixed_rate) keeps the configured
//!   rate whatever the server says (pauses only).
//!
//! ```
//! use std::time::Duration;
//! use tower_throttle::adaptive::Adaptive;
//! use tower_throttle::{Bucket, Quota};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // A quota the server enforces but nobody documented: start at 5/s, search upwards.
//! let bucket = Bucket::adaptive(Adaptive::new().start(Quota::per_second(5)));
//! assert_eq!(bucket.rate(), 5.0);
//!
//! // A configured quota: the ceiling. A first push-back at 100/s says the server's limit is
//! // below 100/s; the first guess is half of it, and the rate starts at 96 % of that.
//! let configured = Bucket::new(Quota::per_second(100));
//! configured.push_back(Duration::from_secs(1));
//! assert_eq!(configured.learned_rate(), Some(50.0));
//! assert_eq!(configured.rate(), 48.0);
//! assert_eq!(configured.quota(), Quota::per_second(100)); // the ceiling stays
//! # }
//! ```
//!
//! # The control law
//!
//! Rates are in tokens per second. `U` is the rate that was in force when the request
//! pushed back last was sent; `L` the server's limit as estimated. Every push-back costs a
//! whole cooldown (`Retry-After`, typically 1 s) with nothing sent, which the law must never
//! shorten, so it is built to spend as few as it can: one push-back to estimate `L`, a
//! steady state just below it, and probes so slow that they rarely cost another.
//!
//! | event | estimate `L` | rate |
//! |---|---|---|
//! | first request of a configured rate sent through [`RetryAfterLayer`] (or its first success reported) | | `0.45 × ceiling`, then `× 1.04` per success back to the ceiling: the ramp |
//! | push-back during the ramp | the highest rate that went through, `P` (a request tests `1/gap` to the one sent before it, at most the ramp's rate then; a request sent before the one refused and not refused counts as through: a limiter refuses at once, where a success may take the application's time), below the rate refused, `U` | `0.96·L` |
//! | first push-back of a configured rate (at the ceiling, or at the ramp's first step) | a guess: `U/2` (`M/2` if fewer successes, but some, came in the last second than `U`) | `0.96·L`, then verified upwards: `+0.2` per success after the cooldown, until a push-back, read as a search's |
//! | first push-back of a configured rate at least 2 s after its ramp went through at the ceiling | the ceiling (it went through for seconds: a request delayed on its way) | `0.96·L` |
//! | push-back of a search or a verification before anything went through at a rate it tested (the first request tests none, nor does the first after a pause) | a guess, as above | as above |
//! | first push-back of a search | between the highest rate a request tested and went through, `P` (its gap to the one sent before, at most the rate then; counted as in the ramp), and `U`: `P` when `P ≥ 0.96·U`, else `√(P·U)` | `0.96·L` |
//! | a later push-back | `U` | `0.96·L` |
//! | a later push-back at least 2 s after the end of a cooldown, at most 0.2 % above the hold (the probe has hardly moved it), from a server without a burst, at most once in 10 s | unchanged: a request delayed on its way | `0.96·L` again, the probe starts over |
//! | a push-back within 0.5 s of the end of a cooldown | unchanged | `U/2`, back to `0.96·L` with a time constant of 0.5 s |
//! | a push-back within 3 s of the end of a cooldown (or of the first success), when the one before was too, in a window `0.1 s` longer or shorter | `(n₂ + d₂ − n₁ − d₁)/(t₂ − t₁)`, within `[U/2, U]`, when the windows show a burst of 2 or more behind it (a search or a verification takes it when it is below 90 % of its own estimate) | `0.96·L` |
//! | more push-backs before the cooldown ends, or of requests sent before the last push-back was acted on (however late they come: a `Retry-After: 0`, answers slower than the cooldown) | none: they answer requests sent at the old rate | |
//! | push-back of the first request after a pause, sent alone | unchanged: after a whole cooldown of silence no rate explains it (the quota ran out for a while, or another client took it) | unchanged; the pause holds |
//! | success, `t` s after the cooldown ended | | `h·L + (1 − h)·L·(t/30)³` (or the way back to `h·L`, whichever is higher), `h = 0.96`, or `0.98` once two windows showed a burst |
//! | success while searching (no `L` yet) | | `rate + min(rate, 1/0.35)`: doubling while low, then `e`-fold every 0.35 s |
//! | a newly stated quota | the stated rate | the stated rate, no probing above it until a push-back |
//!
//! `M` is the rate of successes over the last second, counted when a whole second has
//! passed since the start or the end of the last cooldown; `n` and `t` are the successes
//! and the seconds between the end of a cooldown and a push-back, `d` what the client sent
//! below the estimate while it was below it in that window (from the rates it was at, kept
//! per window in steps of 2 %). Always
//! `floor ≤ rate ≤ ceiling`; the configured quota's burst is kept (an adaptive bucket has a
//! burst of 1: a server's burst is unknown). Once `L` is known, and during the ramp, the
//! bucket also never lets two requests go closer than 98 % of an interval (token and leaky
//! bucket): a server without a burst measures from the request it admitted last, and a late
//! request followed by one on time would be refused. Once two windows showed a burst behind
//! the server's rate, it does not: the burst absorbs that jitter, and spacing from the
//! instants requests go would cost the rate every late tick of the timer (tokio's are about
//! 1 ms late on average). Spaced, the second request after a pause also keeps 3 ms more
//! from the first: the first request after a silence leaves late (1.5 ms from the call to
//! the wire, measured, where others take 0.1 ms), and nginx refused the second after about
//! one pause in four.
//!
//! **Why these estimates.** The first push-back of a client that has just started says only
//! that the server's limit is below `U`: the server may allow 90 % of it, or a quarter.
//! Half is a guess that lands just below a server with up to twice less, and the rate is
//! then verified upwards in small steps (`+0.2` per success: 25 % a second at 50/s, 0.4 %
//! a step), so the next push-back comes one step above the highest rate that went through,
//! which is the limit. Holding the guess instead would save that second push-back for a
//! client configured at exactly 2×, and cost every other one: against the stand-in at 40/s
//! (40 s of requests), a client configured at 1.1× took 1.72× the ideal time holding half,
//! 1.13× verifying; at 1.25×, 1.56× against 1.11×; at 2×, 1.08× against 1.10×.
//!
//! **The ramp** gets that bracket without the second push-back. The first request a
//! configured bucket sends through [`RetryAfterLayer`] drops its rate to 45 % of the
//! configured one, and each success brings it back by 4 %, in 21 successes: about 11
//! intervals lost once (0.11 s at 100/s) when the server allows the configured rate. A
//! server without a burst and up to 2.2 times slower refuses a step of the ramp, and admitted
//! the step before it: one push-back brackets its limit to within a step, where a guess
//! needed a second one to verify it (a cooldown is 5 % of a 20 s run). Each request tests
//! the gap to the one sent before it (at most the ramp's rate then), not the rate in force
//! when its answer comes, so the bracket holds with answers slower than the interval (many
//! requests in flight). The estimate is the highest rate that went through, not the middle
//! of the bracket: nginx measures on whole milliseconds and let a client through at its very
//! limit (20 ms apart at 50 r/s), so a middle held at `0.96·L` was at the limit itself and
//! cost a second push-back at 1.1× to 1.5×. A server with a burst lets the ramp through; its
//! first push-back comes at the ceiling and is guessed and verified as before. The price is
//! paid by a client configured right: at 5/s, 2.2 s once. Against the paused-clock stand-in,
//! a client configured at twice a hidden 5, 20 or 50 per second takes 1.10–1.12× the ideal
//! time with one 429 (1.15–1.16× with two before the ramp), also with answers 2–100 ms slow
//! (1.12–1.17×, one cooldown); against nginx without a burst, 89 % of the server's rate in a
//! run with that one push-back, 83 % in runs where a request delayed on its way was refused
//! once more (`benches/RESULTS.md`).
//!
//! A search, which grows a few per cent per request
//! at 50/s, brackets the limit between the highest rate that went through and the rate
//! refused, each read from the gap at which its request went, as in the ramp: a start hint
//! above the server's rate, refused on the second request, is then guessed at half and
//! verified, where the rate before the last increase (the hint, which no request tested)
//! was taken for a rate that went through, and held above the server (against a stand-in
//! at a hidden 5/s with a hint of 10/s: three push-backs instead of four). After that the
//! rate is probed so slowly (4 % in 30 s, cubic) that a push-back comes at the limit itself:
//! the rate refused is the estimate. A server with a burst (nginx `burst=10`) lets a search
//! through at more than twice its rate, and refills the burst
//! during each cooldown, so that a rate above its own is refused only once the burst is
//! drained, soon after the pause: the two windows of two such push-backs each hold the same
//! burst plus the server's rate times their length, and their difference is the rate. A
//! client below the server's rate for part of a window (back from a deep cut, or verifying a
//! guess from just below) sent less than the server would have let through; the server's
//! bucket stayed full meanwhile, so the window holds the burst plus the rate times its
//! length *less* that deficit, which is counted back in. Without that correction a window
//! that started from a deep cut read a server at 50/s as 45/s. Every window up to 3 s long
//! counts, the first one too (from the first success: a configured rate is above the
//! server's from the start), so a client configured at 2× a server with a burst of 10 needs
//! two push-backs instead of seven: at 1.1× to 4× a hidden 40/s with a burst of 10,
//! 1.07–1.12× the ideal time with 2–4 429s, where it took 1.10–1.27× with 4–14. The windows
//! are believed only when they show a burst of at least 2 behind the rate: without one the
//! rate refused is the sharper estimate, and a window of a few successes would swing by a
//! success more or less, nor when they put it below half the rate refused. A search is not a
//! window: from 1/s it sends a few requests at a time, far below any server's rate, so its
//! deficit is not what its rates say (against nginx without a burst, a search taken as a
//! window read 50 r/s as 24.5); with no rate, a burst still costs three push-backs.
//! Measured against nginx `limit_req` (16 workers, 20 s per run, `benches/pushback/run.sh`;
//! the README has the table of the latest run), a client configured at 2× went from 73 % to
//! about 90 % of the server's rate at 50 r/s without a burst (70 % to 91 % with a burst of
//! 10, 85 % to 93 % at 5 r/s) when it held the guess; with no rate given, from 72 % to 82 %,
//! 65 % to 78 % and 81 % to 86 % (botocore's adaptive limiter in the same run: 58 %, 77 %
//! and 68 %).
//! With a burst, the search's push-back and two windows cost three cooldowns: 78 %, where
//! 90 % would leave room for one; holding at `0.98·L` without spacing once the windows saw
//! the burst took it to 80–81 %, and the configured 2× row behind it from 85–86 % to
//! 88–90 % (the spacing lost about 1 ms, a late timer tick, on every gap).
//! `M` bounds the first estimate only: a client that sends at its rate measures that rate
//! again, and during a search or a recovery `M` lags the rate. Spacing admissions from when
//! they go took the configured 50 r/s no-burst row from 72–76 % to 84–90 % on a machine
//! with a load average of about 1. AIMD (additive increase) climbs back linearly and is
//! refused again at the same rate every cycle; CUBIC (the AWS SDKs' adaptive mode,
//! `β = 0.7`) returns to the refused rate itself after `∛(0.3·U/0.4)` s (3.3 s at 50/s)
//! and is refused there again, every cycle.
//!
//! **A request delayed on its way.** A server without a burst measures each gap when the
//! request reaches it. A request held up after it left the bucket (a busy core, the
//! server's own event loop) and one on time behind it arrive closer than they were sent,
//! and the second is refused, at a rate that has been going through for seconds. nginx
//! did that about once every 10–20 s on this 2-core machine, with the client's gaps at
//! 98 % of an interval or more. Taken as news, each such refusal lowered the estimate by
//! 4 %, for good: three in a run left the client 12 % below the server. The cooldown is
//! still honoured in full, and the estimate stays. Refused again within 2 s of the end of
//! that pause, or twice within 10 s, the server did lower its rate, and the rate follows as
//! before (one push-back more than without this). In the same way, a client configured at
//! exactly its server's rate, whose ramp went through at the ceiling, is refused now and
//! then by such a request: at least 2 s after the ramp ended, the ceiling has gone through
//! for seconds, and it holds just below it instead of guessing half and verifying upwards
//! for seconds (against nginx at 50 r/s without a burst: 85 %, 85 % and 79 % of its rate in
//! three runs, where 74–79 % before).
//!
//! **Refusals that say nothing of the rate.** Two kinds of push-back pause the bucket and
//! leave the rate alone. A push-back of a request sent before the last one was acted on
//! answers the old rate: with a cooldown longer than the answers take it comes before the
//! cooldown ends, but with `Retry-After: 0`, or answers slower than the cooldown, it comes
//! after, and each request in flight lowered the rate once more (against a stand-in at 20/s
//! answering in 200 ms with `Retry-After: 0`, a client configured at 100/s fell to 1.3/s;
//! it now settles at 19.5/s). And the first request after a pause, sent alone after a whole
//! cooldown of silence, tests no rate: refused, the server's quota ran out for a while (or
//! another client took it). A server refusing everything for 30 s with `Retry-After: 1`
//! left the rate at 0.3/s for at least 30 s after it came back; now the client polls once
//! per cooldown meanwhile and is back at 47/s at once. A server whose interval is longer
//! than its own `Retry-After` still lowers the rate: the first request after a long enough
//! pause goes through, and the second one is refused.
//!
//! **Steady state.** Against a server whose real rate is `R`, the rate holds in
//! `[0.96·R, R]` (`[0.98·R, R]` behind a burst) with no push-back for about 30 s, then the
//! probe crosses `R` and one
//! push-back takes it back; a server that raises its rate is followed by the probe (cubic
//! growth: twice the estimate after about 90 s), one that lowers it by the next push-back.
//! Against a stand-in server with a hidden limit (paused clock, 16 workers,
//! `tests/pushback.rs`), a client configured at twice a hidden 5, 20 or 50 per second is
//! refused once (a step of the ramp) and finishes 15 s of requests in 1.10–1.12× the ideal
//! time, behind a burst of 10 twice (the guess, then its verification) in 1.13×; at 1.1× to
//! 4× a hidden 40/s, 1.08–1.10× (1.06–1.11× behind a burst of 10); an adaptive one settles
//! at 94–100 % of a
//! hidden 5, 50 or 200 per second with one to three push-backs in 45 s, and sees through a
//! burst of 10 at 50/s with three.
//!
//! **Shared.** The control lives beside the bucket: every clone, layer and worker reports to
//! and reads the same rate. A bucket made from a
//! [`RedisBucket`](crate::redis::RedisBucket) (feature `redis`) also shares what it learns
//! with every process: each push-back it acts on is written to Redis beside the bucket
//! (`<key>:rate`: the limit estimated and the end of the cooldown), every process reads it
//! back at most every 250 ms while requests succeed and follows the same curve, and the
//! shared limit in Redis decides at the rate in force, with every algorithm: the token and
//! leaky bucket at its interval, the windows at the tokens per window it allows (their width
//! stays; a request of more tokens than that, within the configured count, goes when the
//! window holds nothing else).
//!
//! [`RetryAfterLayer`]: crate::RetryAfterLayer
//! [`Bucket::new`]: crate::Bucket::new
//! [`Bucket::adaptive`]: crate::Bucket::adaptive

mod control;
mod law;

#[cfg(all(test, feature = "redis"))]
pub(crate) use self::control::effective;
pub(crate) use self::control::{Control, Mode, DEFAULT_FLOOR};

use std::time::SystemTime;

use crate::Quota;

/// A push-back acted on, as processes sharing a limit tell each other: the limit estimated
/// (tokens per second) and when the cooldown ends (wall clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cut {
    pub(crate) limit: f64,
    pub(crate) resume: SystemTime,
}

impl Cut {
    /// The cut as processes read it back: the end of the cooldown in whole ms of the Unix
    /// epoch (see `redis::rate`).
    pub(crate) fn shared(self) -> Cut {
        let ms = self
            .resume
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let ms = u64::try_from(ms).unwrap_or(u64::MAX);
        Cut {
            limit: self.limit,
            resume: SystemTime::UNIX_EPOCH
                .checked_add(std::time::Duration::from_millis(ms))
                .unwrap_or(self.resume),
        }
    }
}

/// The settings of a bucket that discovers its rate: [`Bucket::adaptive`](crate::Bucket::adaptive).
///
/// | setting | default |
/// |---|---|
/// | [`start`](Self::start) | 1 per second |
/// | [`floor`](Self::floor) | 1 per hour |
/// | [`ceiling`](Self::ceiling) | 10 000 per second |
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct Adaptive {
    pub(crate) start: f64,
    pub(crate) floor: f64,
    pub(crate) ceiling: Quota,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            start: 1.0,
            floor: DEFAULT_FLOOR,
            ceiling: Quota::per_second(10_000).burst(1),
        }
    }
}

impl Adaptive {
    /// The defaults (see the table above).
    pub fn new() -> Self {
        Self::default()
    }

    /// Start at this rate (a hint: the documented quota, say) instead of 1 per second.
    pub fn start(mut self, hint: Quota) -> Self {
        self.start = hint.per_second_f64();
        self
    }

    /// Never go below this rate, however often the server pushes back.
    pub fn floor(mut self, floor: Quota) -> Self {
        self.floor = floor.per_second_f64();
        self
    }

    /// Never go above this rate, whatever the server says; its burst is the bucket's.
    pub fn ceiling(mut self, ceiling: Quota) -> Self {
        self.ceiling = ceiling;
        self
    }
}
