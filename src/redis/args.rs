//! The keys and arguments of one script call: `ARGV[1]`–`ARGV[14]` (see `lua/common.lua`)
//! for what the call does under the parameters in force, and a plan's marker.

use std::sync::Arc;

use super::config::Options;
use super::error::RedisError;
use super::params::{Convert, Params, Rates, Shape};
use super::script::family;
use super::source;
use crate::{Plan, Priority};

/// What a script call does, for the arguments it needs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// Take `n` tokens: now, or booked (`book`), for a request ranked `rank`.
    Acquire { n: u32, book: bool, rank: Rank },
    /// Give back `n` tokens of an admission (booked for `at_us`, or 0).
    Release { n: u32, at_us: u64 },
    /// Pause for this many µs (`rank`: whether the classes' accounting goes with it).
    Pause { us: u64, rank: Rank },
    /// Take a lease of up to `want` tokens, at least `need`, giving back `back`.
    Lease { want: u32, need: u32, back: u32 },
    /// Count `n` tokens now, whether they fit or not: a settlement's overrun.
    Owe { n: u32 },
}

impl Op {
    /// The tokens an acquire, a release or a debt counts.
    pub(crate) fn amount(self) -> Option<u32> {
        match self {
            Op::Acquire { n, .. } | Op::Release { n, .. } | Op::Owe { n } => Some(n),
            _ => None,
        }
    }

    /// The same operation on `n` tokens (a plan's quota's own amount).
    fn with_n(self, amount: u64) -> Op {
        let n = u32::try_from(amount).unwrap_or(u32::MAX);
        match self {
            Op::Acquire { book, rank, .. } => Op::Acquire { n, book, rank },
            Op::Release { at_us, .. } => Op::Release { n, at_us },
            Op::Owe { .. } => Op::Owe { n },
            Op::Pause { rank, .. } => Op::Pause { us: amount, rank },
            other => other,
        }
    }
}

/// How a request ranks (`lua/classes.lua`): the share of each quota it leaves free for
/// critical requests (0: none), and its class and the classes' weights, as `ARGV[10]`
/// carries them (0: the classes' accounting is off).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rank {
    pub(crate) keep: f64,
    pub(crate) class: u64,
}

impl Rank {
    /// No reserve, no classes.
    pub(crate) const NONE: Rank = Rank {
        keep: 0.0,
        class: 0,
    };

    /// A request of `priority` on a limit keeping `reserve` for critical requests, whose
    /// waiters rank by `weights` across processes (`None`: in arrival order).
    pub(crate) fn of(priority: Priority, reserve: f64, weights: Option<[u32; 3]>) -> Rank {
        let c = priority as u64 + 1;
        let class = weights.map_or(0, |[a, b, w]| {
            c + 4 * (u64::from(a) + 1024 * (u64::from(b) + 1024 * u64::from(w)))
        });
        let keep = if priority == Priority::Critical {
            0.0
        } else {
            reserve
        };
        Rank { keep, class }
    }
}

/// The script arguments `ARGV[1]`–`ARGV[14]` of one call of `op` under `p` (see
/// `lua/common.lua`), and how many of them it sends: fewer when the script does not read
/// the rest. A request larger than the parameters allow (the quota changed since it was
/// checked) is cut to the most they take: a release gives back less, never more; a lease
/// takes less.
pub(crate) fn script_args(p: &Params, shape: &Shape, op: Op) -> ([u64; 14], usize) {
    let gcra = shape.algorithm.is_gcra();
    let most = if gcra { p.burst } else { p.limit };
    let (arg, book, need, back) = match op {
        Op::Acquire { n, book, rank } => {
            let keep = if rank.keep > 0.0 && n > 0 {
                (rank.keep * f64::from(most)).ceil() as u64
            } else {
                0
            };
            (u64::from(n), u64::from(book), keep, rank.class)
        }
        Op::Release { n, at_us } => (u64::from(n.min(most)), at_us, 0, 0),
        Op::Owe { n } => (u64::from(n.min(most)), 2, 0, 0),
        Op::Pause { us, rank } => (us, 0, 0, rank.class),
        Op::Lease { want, need, back } => {
            let want = want.min(p.burst).max(need);
            let back = back.min(p.burst);
            (u64::from(want), 0, u64::from(need), u64::from(back))
        }
    };
    let [from_t, from_tau, from_e] = p.convert.map_or([0; 3], Convert::args);
    let all = [
        p.interval_us,
        u64::from(p.burst),
        arg,
        shape.max_pause_us,
        p.tolerance_us,
        shape.window_us,
        u64::from(p.limit),
        book,
        need,
        back,
        u64::from(p.effective_limit),
        from_t,
        from_tau,
        from_e,
    ];
    // The lease script reads two arguments more than the token and leaky bucket's others;
    // the windows three (the lease's two, unused, then `E`); a re-read after a change three
    // more.
    let len = if p.convert.is_some() {
        14
    } else if matches!(op, Op::Lease { .. }) || need > 0 || back > 0 {
        10
    } else if gcra {
        8
    } else {
        11
    };
    (all, len)
}

/// The keys and arguments of one call of `op` at `key` under `p` (the first quota's
/// parameters in force; `rest`: a plan's other quotas): the state's two keys and
/// `ARGV[1]`–`ARGV[14]`; for the plan scripts (`stacked`), the state, each quota's sorted
/// set and each quota's arguments in turn, all under the hash tag of `key`, and this call's
/// marker (`lua/stack/parts.lua`). `each`: the amount of each quota, where they differ
/// (a plan counting several resources); else `op`'s for all.
pub(crate) fn call_args(
    key: &str,
    p: &Params,
    shape: &Shape,
    rest: &[(Shape, Params)],
    stacked: bool,
    op: Op,
    each: Option<&[u64]>,
) -> (Vec<String>, Vec<u64>, Option<String>) {
    let op_of = |i: usize| each.and_then(|e| e.get(i)).map_or(op, |&n| op.with_n(n));
    let (all, len) = script_args(p, shape, op_of(0));
    let mut keys = vec![key.to_owned(), format!("{key}:log")];
    // The classes' accounting, last (`lua/classes.lua`).
    let ranked = [format!("{key}:classes"), format!("{key}:booked")];
    let ranked = (all[9] > 0 && !matches!(op, Op::Lease { .. })).then_some(ranked);
    if !stacked {
        keys.extend(ranked.into_iter().flatten());
        return (keys, all[..len].to_vec(), None);
    }
    let mut args = all.to_vec();
    // The marker says which parameters a state was written with: a re-read is exact, and
    // made once (`lua/stack/parts.lua`), never carried by the call.
    args[11..14].fill(0);
    let mut quotas = vec![(family(shape.algorithm), all)];
    for (i, (shape, params)) in rest.iter().enumerate() {
        keys.push(format!("{key}:q{}:log", i + 2));
        let (a, _) = script_args(params, shape, op_of(i + 1));
        args.extend_from_slice(&a);
        quotas.push((family(shape.algorithm), a));
    }
    let marker = source::marker(quotas.iter().map(|(f, a)| (*f, a)));
    keys.extend(ranked.into_iter().flatten());
    (keys, args, Some(marker))
}

/// The marker of `plan` as built (`lua/stack/parts.lua`).
pub(crate) fn base_marker(plan: &Plan, options: &Options) -> Result<Arc<str>, RedisError> {
    let max_pause_us = u64::try_from(options.max_pause.as_micros()).unwrap_or(u64::MAX);
    let quotas = plan
        .parts()
        .iter()
        .map(|part| {
            let rates = Rates::new(Shape::new(part.algorithm, part.quota, max_pause_us)?);
            let op = Op::Acquire {
                n: 1,
                book: false,
                rank: Rank::NONE,
            };
            let (a, _) = script_args(&rates.params(), &rates.shape, op);
            Ok((family(part.algorithm), a))
        })
        .collect::<Result<Vec<_>, RedisError>>()?;
    Ok(source::marker(quotas.iter().map(|(f, a)| (*f, a))).into())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::*;
    use crate::adaptive::effective;
    use crate::{Algorithm, Quota};

    /// What `lua/common.lua` checks of its arguments, and what one rate is: `tau` the
    /// tolerance of `T` (`B × T`, or `T` for the leaky bucket), a request within `B` (token
    /// and leaky bucket) or `L` (windows).
    fn consistent(algorithm: Algorithm, args: &[u64; 14]) -> bool {
        let [t, b, x, _, tau, w, l, _, _, _, e, ft, ftau, fe] = *args;
        let one_rate = match algorithm {
            Algorithm::TokenBucket => tau == b * t && x <= b,
            Algorithm::LeakyBucket { .. } => tau == t && x <= b,
            _ => x <= l,
        };
        t >= 1
            && b >= 1
            && tau >= t
            && w >= 1
            && l >= 1
            && (1..=l).contains(&e)
            && (ft == 0 || ftau >= ft)
            && (ft > 0 || ftau == 0)
            && (fe == 0 || fe <= u64::from(u32::MAX))
            && one_rate
    }

    fn rates(algorithm: Algorithm, quota: Quota) -> Rates {
        Rates::new(Shape::new(algorithm, quota, 10_000_000).unwrap())
    }

    const ALGORITHMS: [Algorithm; 5] = [
        Algorithm::TokenBucket,
        Algorithm::leaky_bucket(16),
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];

    /// The arguments of one call are of one rate, whatever changes at the same time: a rate
    /// control moving the rate up and down (a burst of 1: the tolerance is the interval,
    /// and an old interval beside a new tolerance is refused by the scripts) while calls
    /// read their arguments on other threads.
    #[test]
    fn one_call_never_mixes_two_rates() {
        // What a call reading the interval before a change and the tolerance after it sent
        // (a leaky bucket, the rate going back up): refused by the scripts, `tau < T`.
        let leaky = Algorithm::leaky_bucket(16);
        let quota = Quota::per_second(100).burst(1);
        let changing = rates(leaky, quota);
        changing.set_rate(effective(quota, 10.0).unwrap());
        let slow = changing.params();
        changing.set_rate(quota);
        let fast = changing.params();
        let op = Op::Acquire {
            n: 1,
            book: true,
            rank: Rank::NONE,
        };
        let mut torn = script_args(&slow, &changing.shape, op).0;
        torn[4] = script_args(&fast, &changing.shape, op).0[4];
        assert!(!consistent(leaky, &torn), "{torn:?}");
        assert!(torn[4] < torn[0], "the scripts refuse it");

        for algorithm in ALGORITHMS {
            let quota = Quota::per_second(100).burst(1);
            let rates = std::sync::Arc::new(rates(algorithm, quota));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let changer = {
                let (rates, stop) = (rates.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        let rate = [100.0, 7.0, 55.0, 1.5][i as usize % 4];
                        rates.set_rate(effective(quota, rate).unwrap());
                        if i % 64 == 0 {
                            rates.set_quota(Quota::per_second(50 + i % 100).burst(1 + i % 3));
                        }
                        i = i.wrapping_add(1);
                    }
                })
            };
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let rates = rates.clone();
                    std::thread::spawn(move || {
                        for _ in 0..20_000 {
                            let p = rates.params();
                            let (args, _) = script_args(
                                &p,
                                &rates.shape,
                                Op::Acquire {
                                    n: 1,
                                    book: true,
                                    rank: Rank::NONE,
                                },
                            );
                            assert!(consistent(algorithm, &args), "{algorithm:?}: {args:?}");
                            rates.answered(&p);
                        }
                    })
                })
                .collect();
            for r in readers {
                r.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            changer.join().unwrap();
        }
    }

    /// Every quota and rate gives arguments the scripts take.
    #[test]
    fn every_change_gives_arguments_the_scripts_take() {
        let quotas = [
            Quota::per_second(1),
            Quota::per_second(100).burst(10),
            Quota::per_minute(600),
            Quota::per_hour(5).burst(3),
            Quota::new(7, Duration::from_millis(3)),
            Quota::per_second(1_000_000).burst(1000),
        ];
        for algorithm in ALGORITHMS {
            for built in quotas {
                let rates = rates(algorithm, built);
                for quota in quotas {
                    rates.set_quota(quota);
                    for rate in [quota.per_second_f64(), quota.per_second_f64() / 3.0, 1e-3] {
                        rates.set_rate(effective(quota, rate).unwrap());
                        let p = rates.params();
                        for op in [
                            Op::Acquire {
                                n: p.max_cost,
                                book: false,
                                rank: Rank::NONE,
                            },
                            Op::Release {
                                n: u32::MAX,
                                at_us: 0,
                            },
                        ] {
                            let (args, len) = script_args(&p, &rates.shape, op);
                            let at = format!("{algorithm:?} {built:?} → {quota:?} at {rate}");
                            assert!(consistent(algorithm, &args), "{at}: {args:?}");
                            assert_eq!(len, 14, "{at}: the change is carried");
                        }
                    }
                }
            }
        }
    }

    /// A change is carried by every call until one made after it is answered; a call
    /// answered that was made before a later change does not end the later one.
    #[test]
    fn a_change_is_carried_until_a_call_made_after_it_is_answered() {
        let rates = rates(Algorithm::TokenBucket, Quota::per_second(10).burst(10));
        let args = |p: &Params| {
            script_args(
                p,
                &rates.shape,
                Op::Acquire {
                    n: 1,
                    book: false,
                    rank: Rank::NONE,
                },
            )
        };
        let before = rates.params();
        assert_eq!(args(&before).1, 8, "nothing to carry");
        rates.set_quota(Quota::per_second(5).burst(4));
        let first = rates.params();
        let (all, len) = args(&first);
        assert_eq!((len, &all[11..]), (14, &[100_000, 1_000_000, 10][..]));
        rates.set_quota(Quota::per_second(20).burst(8));
        rates.answered(&first);
        let second = rates.params();
        // Either state may be in Redis: the shorter interval, the fewer tokens.
        assert_eq!(&args(&second).0[11..], &[100_000, 400_000, 10][..]);
        rates.answered(&second);
        assert_eq!(args(&rates.params()).1, 8, "answered");
        assert_eq!(rates.params().quota, Quota::per_second(20).burst(8));
    }
}
