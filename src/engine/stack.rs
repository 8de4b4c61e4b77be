//! A [`Plan`] of several quotas as one [`Engine`]: a cost fits where it fits every quota, and
//! is charged to all of them or to none.
//!
//! Each quota's fit is upward-closed in time (once a cost fits, it fits later too), so the
//! earliest instant the stack takes a cost is the latest of its quotas' earliest instants.

use super::{Admit, Engine, Gcra, Log, Packed, Phase, Price, Windows};
use crate::plan::{Part, Plan};
use crate::{Algorithm, Quota, Resource};

/// One quota's engine.
#[derive(Debug, Clone)]
pub(crate) enum One {
    Gcra(Gcra),
    Windows(Windows),
    Log(Log),
}

/// One quota's state.
#[derive(Debug)]
pub(crate) enum OneState {
    Gcra(u64),
    Windows(<Windows as Engine>::State),
    Log(<Log as Engine>::State),
}

/// Runs `$body` with the engine and state of one quota bound, whichever its algorithm.
macro_rules! on_one {
    ($one:expr, $state:expr, $e:ident, $s:ident => $body:expr) => {
        match ($one, $state) {
            (One::Gcra($e), OneState::Gcra($s)) => $body,
            (One::Windows($e), OneState::Windows($s)) => $body,
            (One::Log($e), OneState::Log($s)) => $body,
            _ => unreachable!("a stack's states are made by its engines"),
        }
    };
}

impl One {
    /// The engine of `quota` under `algorithm`; `phase`: where its windows fall.
    pub(crate) fn new(quota: Quota, algorithm: Algorithm, phase: u64) -> One {
        match algorithm {
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                One::Windows(Windows::new(quota, algorithm, phase))
            }
            Algorithm::SlidingLog => One::Log(Log::new(quota)),
            _ => One::Gcra(Gcra::new(quota, algorithm)),
        }
    }

    pub(crate) fn empty(&self) -> OneState {
        match self {
            One::Gcra(e) => OneState::Gcra(e.empty()),
            One::Windows(e) => OneState::Windows(e.empty()),
            One::Log(e) => OneState::Log(e.empty()),
        }
    }

    fn capacity(&self) -> u64 {
        match self {
            One::Gcra(e) => e.capacity(),
            One::Windows(e) => e.capacity(),
            One::Log(e) => e.capacity(),
        }
    }

    /// `state`, made by `self`, carried over to `to`, the engine of `quota`: never more
    /// available at `now` than before, fractional progress kept, turns booked kept
    /// ([`Engine::carry_quota`]). A state of another kind of engine starts empty.
    pub(crate) fn carry(&self, mut state: OneState, to: &One, quota: Quota, now: u64) -> OneState {
        match (self, &mut state, to) {
            (One::Gcra(e), OneState::Gcra(s), One::Gcra(_)) => {
                let _ = e.carry_quota(s, quota, Phase::KeepEnd, now);
            }
            (One::Windows(e), OneState::Windows(s), One::Windows(_)) => {
                let _ = e.carry_quota(s, quota, Phase::KeepEnd, now);
            }
            (One::Log(e), OneState::Log(s), One::Log(_)) => {
                let _ = e.carry_quota(s, quota, Phase::KeepEnd, now);
            }
            _ => return to.empty(),
        }
        state
    }
}

/// The quotas of a plan, decided together.
#[derive(Debug, Clone)]
pub(crate) struct Stack {
    ones: Box<[One]>,
    quotas: Box<[Quota]>,
    /// Which quotas count requests: those a cost of one number is charged to.
    requests: Box<[bool]>,
    /// Every quota counts requests.
    all_requests: bool,
    capacity: u64,
}

/// What a stack has admitted: each quota's state, and each quota's record of the last
/// admission (to undo it and describe it).
#[derive(Debug)]
pub(crate) struct Layers {
    states: Box<[OneState]>,
    last: Box<[Admit]>,
    /// Each quota takes nothing before this instant: the end of a pause of its resource
    /// (`None` until one).
    held: Option<Box<[u64]>>,
    /// Admissions and undos so far: an admission can be undone while this is its number.
    seq: u64,
    /// When the state stops mattering (kept for [`Packed::expires`]).
    expires: u64,
}

impl Packed for Box<Layers> {
    fn expires(&self) -> u64 {
        self.expires
    }
}

impl Stack {
    /// The engine of `plan`; `phase(period)`: where the windows of that period fall.
    pub(crate) fn new(plan: &Plan, phase: impl Fn(u64) -> u64) -> Stack {
        let ones: Box<[One]> = plan
            .parts()
            .iter()
            .map(|p: &Part| One::new(p.quota, p.algorithm, phase(p.quota.period_ns())))
            .collect();
        let requests: Box<[bool]> = plan
            .parts()
            .iter()
            .map(|p| p.resource == Resource::REQUESTS)
            .collect();
        let capacity = ones
            .iter()
            .zip(requests.iter())
            .filter(|(_, r)| **r)
            .map(|(one, _)| one.capacity())
            .min()
            .unwrap_or(u64::MAX);
        Stack {
            quotas: plan.parts().iter().map(|p| p.quota).collect(),
            ones,
            all_requests: requests.iter().all(|r| *r),
            requests,
            capacity,
        }
    }

    /// The quota whose status an admission reports (the tightest right after it).
    pub(crate) fn tightest(admit: &Admit) -> usize {
        usize::try_from(admit.before[0]).unwrap_or(0)
    }

    /// The quota that holds `cost` back longest at `now`; when every quota has room, the
    /// tightest: the fewest tokens left, among those the longest until as if unused.
    fn refusing(&self, state: &Layers, cost: Price<'_>, now: u64) -> usize {
        let views = self
            .ones
            .iter()
            .zip(state.states.iter())
            .enumerate()
            .map(|(i, (one, s))| {
                let cost = match cost {
                    Price::One(n) => self.scalar(n, i),
                    Price::Each(a) => a.get(i).copied().unwrap_or(0),
                }
                .max(1);
                on_one!(one, s, e, s => (e.earliest(s, cost, now), e.view(s, now)))
            });
        let (mut part, mut worst) = (0, None);
        for (i, (at, view)) in views.enumerate() {
            // Later is worse; at the same instant, fewer left, then longer until unused.
            let rank = (at, std::cmp::Reverse(view.available), view.full_in);
            if worst.is_none_or(|w| rank > w) {
                (part, worst) = (i, Some(rank));
            }
        }
        part
    }

    /// What a cost of one number charges quota `i`: all of it if the quota counts requests.
    #[inline]
    fn scalar(&self, cost: u64, i: usize) -> u64 {
        if self.requests.get(i).copied().unwrap_or(false) {
            cost
        } else {
            0
        }
    }

    fn earliest_by(&self, state: &Layers, amount: impl Fn(usize) -> u64, from: u64) -> u64 {
        let mut at = from;
        // Upward-closed fits: one pass finds the instant, a second confirms it.
        for _ in 0..4 {
            let next = self
                .ones
                .iter()
                .zip(state.states.iter())
                .enumerate()
                .map(|(i, (one, s))| match amount(i) {
                    0 => at,
                    n => {
                        let from = state.held.as_ref().map_or(at, |h| at.max(h[i]));
                        on_one!(one, s, e, s => e.earliest(s, n, from))
                    }
                })
                .fold(at, u64::max);
            if next == at {
                return at;
            }
            at = next;
        }
        at
    }

    fn commit_by(&self, state: &mut Layers, amount: impl Fn(usize) -> u64, at: u64) -> Admit {
        let mut tightest = (0, (u64::MAX, 0));
        let mut cost = 0;
        for (i, (one, s)) in self.ones.iter().zip(state.states.iter_mut()).enumerate() {
            let n = amount(i);
            if n == 0 {
                state.last[i] = Admit::default();
                continue;
            }
            cost = cost.max(n);
            let status = on_one!(one, s, e, s => {
                let mut admit = e.commit(s, n, at);
                e.describe(s, &mut admit);
                state.last[i] = admit;
                e.status(&admit)
            });
            // Fewest left; among those, the longest to reset.
            if (status.0, std::cmp::Reverse(status.1))
                < (tightest.1 .0, std::cmp::Reverse(tightest.1 .1))
            {
                tightest = (i, status);
            }
        }
        state.seq += 1;
        state.expires = self.expires(state);
        let (part, (remaining, reset)) = tightest;
        Admit {
            at,
            cost,
            after: [state.seq, remaining, reset],
            before: [part as u64, 0, 0],
        }
    }

    fn release_by(&self, state: &mut Layers, amount: impl Fn(usize) -> u64, at: u64) {
        for (i, (one, s)) in self.ones.iter().zip(state.states.iter_mut()).enumerate() {
            let n = amount(i);
            if n > 0 {
                on_one!(one, s, e, s => e.release(s, n, at));
            }
        }
        state.expires = self.expires(state);
    }

    /// The states of `layers`, to carry over to another plan.
    pub(crate) fn into_states(layers: Layers) -> Vec<OneState> {
        layers.states.into_vec()
    }

    /// Layers from states made by this stack's engines (or fresh ones where missing).
    pub(crate) fn layers(&self, states: Vec<OneState>) -> Layers {
        let mut states = states.into_iter();
        let states: Box<[OneState]> = self
            .ones
            .iter()
            .map(|one| states.next().unwrap_or_else(|| one.empty()))
            .collect();
        let mut layers = Layers {
            last: vec![Admit::default(); states.len()].into(),
            held: None,
            states,
            seq: 0,
            expires: 0,
        };
        layers.expires = self.expires(&layers);
        layers
    }

    /// States made by this stack's engines carried over to `to`'s, quota by quota in order
    /// ([`One::carry`]); a quota `to` adds starts empty.
    pub(crate) fn carry(&self, states: Vec<OneState>, to: &Stack, now: u64) -> Vec<OneState> {
        let mut states = states.into_iter();
        to.ones
            .iter()
            .zip(to.quotas.iter())
            .enumerate()
            .map(
                |(i, (one, quota))| match (self.ones.get(i), states.next()) {
                    (Some(from), Some(state)) => from.carry(state, one, *quota, now),
                    _ => one.empty(),
                },
            )
            .collect()
    }

    pub(crate) fn ones(&self) -> &[One] {
        &self.ones
    }

    #[cfg(test)]
    pub(crate) fn quotas(&self) -> &[Quota] {
        &self.quotas
    }
}

impl Engine for Stack {
    type State = Layers;
    type Packed = Box<Layers>;

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn empty(&self) -> Layers {
        self.layers(Vec::new())
    }

    fn earliest(&self, state: &Layers, cost: u64, from: u64) -> u64 {
        if self.all_requests {
            return self.earliest_by(state, |_| cost, from);
        }
        self.earliest_by(state, |i| self.scalar(cost, i), from)
    }

    fn commit(&self, state: &mut Layers, cost: u64, at: u64) -> Admit {
        if self.all_requests {
            return self.commit_by(state, |_| cost, at);
        }
        self.commit_by(state, |i| self.scalar(cost, i), at)
    }

    fn capacity_at(&self, i: usize) -> u64 {
        self.ones.get(i).map_or(0, One::capacity)
    }

    fn earliest_each(&self, state: &Layers, amounts: &[u64], from: u64) -> u64 {
        self.earliest_by(state, |i| amounts.get(i).copied().unwrap_or(0), from)
    }

    fn commit_each(&self, state: &mut Layers, amounts: &[u64], at: u64) -> Admit {
        self.commit_by(state, |i| amounts.get(i).copied().unwrap_or(0), at)
    }

    fn release_each(&self, state: &mut Layers, amounts: &[u64], at: u64) {
        self.release_by(state, |i| amounts.get(i).copied().unwrap_or(0), at);
    }

    fn forget(&self, state: &mut Layers, now: u64) {
        for (one, s) in self.ones.iter().zip(state.states.iter_mut()) {
            on_one!(one, s, e, s => e.forget(s, now));
        }
    }

    fn undo(&self, state: &mut Layers, admit: &Admit) {
        if state.seq != admit.after[0] {
            return;
        }
        for (i, (one, s)) in self.ones.iter().zip(state.states.iter_mut()).enumerate() {
            // A quota the admission did not charge has nothing to undo.
            if state.last[i].cost > 0 {
                on_one!(one, s, e, s => e.undo(s, &state.last[i]));
            }
        }
        state.seq += 1;
        state.expires = self.expires(state);
    }

    fn release(&self, state: &mut Layers, cost: u64, at: u64) {
        self.release_by(state, |i| self.scalar(cost, i), at);
    }

    fn status(&self, admit: &Admit) -> (u64, u64) {
        (admit.after[1], admit.after[2])
    }

    fn refused_by(&self, state: &Layers, cost: Price<'_>, now: u64) -> usize {
        self.refusing(state, cost, now)
    }

    fn reset_in(&self, state: &Layers, now: u64) -> Option<u64> {
        let part = self.refusing(state, Price::One(1), now);
        let (one, s) = (self.ones.get(part)?, state.states.get(part)?);
        let full_in = on_one!(one, s, e, s => e.view(s, now).full_in);
        Some(match one {
            // Until the next token lands: the part of the refill shorter than one interval.
            One::Gcra(g) if full_in > 0 => (full_in - 1) % g.interval.max(1) + 1,
            _ => full_in,
        })
    }

    fn available(&self, state: &Layers, now: u64) -> u64 {
        self.ones
            .iter()
            .zip(state.states.iter())
            .enumerate()
            .map(
                |(i, (one, s))| match state.held.as_ref().is_some_and(|h| now < h[i]) {
                    true => 0,
                    false => on_one!(one, s, e, s => e.available(s, now)),
                },
            )
            .min()
            .unwrap_or(0)
    }

    fn expires(&self, state: &Layers) -> u64 {
        self.ones
            .iter()
            .zip(state.states.iter())
            .map(|(one, s)| on_one!(one, s, e, s => e.expires(s)))
            .chain(state.held.iter().flat_map(|h| h.iter().copied()))
            .max()
            .unwrap_or(0)
    }

    fn restart(&self, state: &mut Layers, end: u64) -> u64 {
        let until = self
            .ones
            .iter()
            .zip(state.states.iter_mut())
            .map(|(one, s)| on_one!(one, s, e, s => e.restart(s, end)))
            .fold(end, u64::max);
        state.expires = self.expires(state);
        until
    }

    fn hold(&self, state: &mut Layers, held: &[bool], end: u64) {
        let quotas = self.ones.iter().zip(state.states.iter_mut());
        for (i, (one, s)) in quotas.enumerate() {
            if held.get(i).copied().unwrap_or(false) {
                on_one!(one, s, e, s => e.restart(s, end));
                let h = state
                    .held
                    .get_or_insert_with(|| vec![0; self.ones.len()].into());
                h[i] = h[i].max(end);
            }
        }
        state.expires = self.expires(state);
    }

    /// A new first quota (a bucket's rate); the other quotas stay.
    fn with_quota(&self, state: &mut Layers, quota: Quota, phase: Phase, now: u64) -> Self {
        self.replace(state, 0, quota, phase, now, false)
    }

    fn with_quota_at(&self, state: &mut Layers, i: usize, quota: Quota, now: u64) -> Self {
        self.replace(state, i, quota, Phase::KeepEnd, now, false)
    }

    fn carry_quota(&self, state: &mut Layers, quota: Quota, phase: Phase, now: u64) -> Self {
        self.replace(state, 0, quota, phase, now, true)
    }

    fn pack(&self, state: Layers) -> Box<Layers> {
        Box::new(state)
    }

    fn unpacked<R>(&self, packed: &mut Box<Layers>, f: impl FnOnce(&mut Layers) -> R) -> R {
        let r = f(packed);
        packed.expires = self.expires(packed);
        r
    }
}

impl Stack {
    /// [`Engine::with_quota`] or, keeping turns booked, [`Engine::carry_quota`], for quota
    /// `i`.
    fn replace(
        &self,
        state: &mut Layers,
        i: usize,
        quota: Quota,
        phase: Phase,
        now: u64,
        keep_turns: bool,
    ) -> Self {
        let mut new = self.clone();
        let (Some(one), Some(s)) = (self.ones.get(i), state.states.get_mut(i)) else {
            return new;
        };
        new.ones[i] = on_one!(one, s, e, s => one_of(if keep_turns {
            e.carry_quota(s, quota, phase, now)
        } else {
            e.with_quota(s, quota, phase, now)
        }));
        new.quotas[i] = quota;
        new.capacity = new
            .ones
            .iter()
            .zip(new.requests.iter())
            .filter(|(_, r)| **r)
            .map(|(one, _)| one.capacity())
            .min()
            .unwrap_or(u64::MAX);
        state.expires = new.expires(state);
        new
    }
}

/// An engine as one quota of a stack.
trait IntoOne {
    fn into_one(self) -> One;
}

impl IntoOne for Gcra {
    fn into_one(self) -> One {
        One::Gcra(self)
    }
}

impl IntoOne for Windows {
    fn into_one(self) -> One {
        One::Windows(self)
    }
}

impl IntoOne for Log {
    fn into_one(self) -> One {
        One::Log(self)
    }
}

fn one_of(e: impl IntoOne) -> One {
    e.into_one()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    fn per_second_and_per_10s() -> Stack {
        // 2 per second (burst 2) and 3 per 10 s in fixed windows from 0.
        let plan = Plan::new(Quota::per_second(2))
            .and(Quota::new(3, Duration::from_secs(10)))
            .algorithm(Algorithm::FixedWindow);
        Stack::new(&plan, |_| 0)
    }

    #[test]
    fn a_cost_goes_where_every_quota_has_room() {
        let stack = per_second_and_per_10s();
        let mut s = stack.empty();
        assert!(stack.admit(&mut s, 0, Price::One(2), 0).is_ok());
        // The per-second quota refuses: half a second.
        assert_eq!(stack.admit(&mut s, 0, Price::One(1), 0), Err(SEC / 2));
        assert!(stack.admit(&mut s, SEC, Price::One(1), 0).is_ok());
        // Now the 10 s window is full: the wait is the longest, to its end.
        assert_eq!(stack.admit(&mut s, 2 * SEC, Price::One(1), 0), Err(8 * SEC));
        assert_eq!(stack.refused_by(&s, Price::One(1), 2 * SEC), 1);
        assert_eq!(stack.available(&s, 2 * SEC), 0);
        assert!(stack.admit(&mut s, 10 * SEC, Price::One(1), 0).is_ok());
    }

    #[test]
    fn a_refusal_charges_no_quota_and_an_undo_gives_back_to_all() {
        let stack = per_second_and_per_10s();
        let mut s = stack.empty();
        let first = stack.admit(&mut s, 0, Price::One(1), 0).unwrap();
        let second = stack.admit(&mut s, 0, Price::One(1), 0).unwrap();
        // Refused by the per-second quota: the window keeps its 2.
        assert!(stack.admit(&mut s, 0, Price::One(1), 0).is_err());
        assert_eq!(stack.ones()[1..].len(), 1);
        stack.undo(&mut s, &first); // stale: `second` came after it
        stack.undo(&mut s, &second);
        assert_eq!(stack.available(&s, 0), 1);
        // Both quotas got the token back: 2 more fit at 1 s, the window's third among them.
        assert!(stack.admit(&mut s, SEC, Price::One(2), 0).is_ok());
        assert_eq!(stack.admit(&mut s, 2 * SEC, Price::One(1), 0), Err(8 * SEC));
        stack.undo(&mut s, &second); // no longer the last
        assert_eq!(stack.available(&s, 2 * SEC), 0);
    }

    #[test]
    fn the_status_is_the_tightest_quota() {
        let stack = per_second_and_per_10s();
        let mut s = stack.empty();
        let a = stack.admit(&mut s, 0, Price::One(1), 0).unwrap();
        // 1 left per second, 2 in the window.
        assert_eq!((Stack::tightest(&a), stack.status(&a)), (0, (1, SEC / 2)));
        // 1 left of each: the window resets later.
        let b = stack.admit(&mut s, SEC, Price::One(1), 0).unwrap();
        assert_eq!((Stack::tightest(&b), stack.status(&b)), (1, (1, 9 * SEC)));
        let c = stack.admit(&mut s, 5 * SEC, Price::One(1), 0).unwrap();
        assert_eq!((Stack::tightest(&c), stack.status(&c)), (1, (0, 5 * SEC)));
    }

    #[test]
    fn bookings_wait_for_every_quota() {
        let stack = per_second_and_per_10s();
        let mut s = stack.empty();
        stack.admit(&mut s, 0, Price::One(2), 0).unwrap();
        let booked = stack.admit(&mut s, 0, Price::One(1), SEC).unwrap();
        assert_eq!(booked.at, SEC / 2);
        assert_eq!(
            stack.admit(&mut s, 0, Price::One(1), 20 * SEC).unwrap().at,
            10 * SEC
        );
    }

    #[test]
    fn a_new_first_quota_keeps_the_others() {
        let stack = per_second_and_per_10s();
        let mut s = stack.empty();
        stack.admit(&mut s, 0, Price::One(2), 0).unwrap();
        let faster = stack.with_quota(&mut s, Quota::per_second(4), Phase::KeepEnd, 0);
        assert_eq!(faster.quotas()[0], Quota::per_second(4));
        // No burst from the change; the window still holds 2 of 3.
        assert_eq!(faster.available(&s, 0), 0);
        assert_eq!(faster.available(&s, SEC), 1);
    }

    /// With an amount per quota, each quota is charged its own (none where it is 0), all or
    /// none, and the wait is the longest of the quotas charged; a cost of one number is
    /// charged to the quotas that count requests.
    #[test]
    fn amounts_per_quota_are_charged_to_their_quotas() {
        let plan = Plan::new(Quota::per_second(2))
            .and(Quota::per_second(100))
            .counting(Resource::TOKENS);
        let stack = Stack::new(&plan, |_| 0);
        let mut s = stack.empty();
        assert_eq!(stack.earliest_each(&s, &[1, 80], 0), 0);
        stack.commit_each(&mut s, &[1, 80], 0);
        // 20 tokens left: 30 wait for 10 more (100 ms), a request of none does not.
        assert_eq!(stack.earliest_each(&s, &[1, 30], 0), SEC / 10);
        assert_eq!(stack.earliest_each(&s, &[1, 0], 0), 0);
        // One number: requests only.
        stack.commit(&mut s, 1, 0);
        assert_eq!(stack.earliest_each(&s, &[0, 20], 0), 0);
        assert_eq!(stack.earliest_each(&s, &[1, 0], 0), SEC / 2);
        let admit = stack.commit_each(&mut s, &[0, 20], 0);
        stack.undo(&mut s, &admit);
        assert_eq!(stack.earliest_each(&s, &[0, 20], 0), 0, "undone");
        stack.release_each(&mut s, &[1, 50], 0);
        assert_eq!(stack.earliest_each(&s, &[1, 70], 0), 0, "given back");
        assert_eq!(stack.capacity_at(1), 100);
    }

    /// A stack decides as its quotas would together: a cost goes when each has room at
    /// once, is charged to each, and otherwise waits the longest of their waits. Random
    /// sequences of arrivals and costs, every algorithm in every position.
    #[test]
    fn a_stack_is_the_conjunction_of_its_quotas() {
        let algorithms = [
            Algorithm::TokenBucket,
            Algorithm::leaky_bucket(0),
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::SlidingLog,
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        for (i, &first) in algorithms.iter().enumerate() {
            for &second in &algorithms[i..] {
                let plan = Plan::new(Quota::new(4, Duration::from_millis(400)).burst(3))
                    .algorithm(first)
                    .and(Quota::new(6, Duration::from_secs(2)))
                    .algorithm(second);
                let stack = Stack::new(&plan, |_| 0);
                let ones: Vec<One> = stack.ones().to_vec();
                let mut apart: Vec<OneState> = ones.iter().map(One::empty).collect();
                let mut together = stack.empty();
                let mut now = 0;
                for op in 0..400 {
                    now += next(150) * 1_000_000;
                    let cost = 1 + next(3);
                    let waits: Vec<u64> = ones
                        .iter()
                        .zip(apart.iter_mut())
                        .map(|(one, s)| {
                            on_one!(one, s, e, s => {
                                e.forget(s, now);
                                e.earliest(s, cost, now) - now
                            })
                        })
                        .collect();
                    let wait = waits.iter().copied().max().unwrap_or(0);
                    let decided = stack.admit(&mut together, now, Price::One(cost), 0);
                    let what = format!("{first:?} + {second:?}, op {op} at {now}, cost {cost}");
                    if wait == 0 {
                        assert!(decided.is_ok(), "{what}: {decided:?}");
                        for (one, s) in ones.iter().zip(apart.iter_mut()) {
                            on_one!(one, s, e, s => {
                                e.commit(s, cost, now);
                            });
                        }
                    } else {
                        assert_eq!(decided, Err(wait), "{what}");
                        let part = stack.refused_by(&together, Price::One(cost), now);
                        assert_eq!(waits[part], wait, "{what}");
                    }
                    let available = ones
                        .iter()
                        .zip(apart.iter())
                        .map(|(one, s)| on_one!(one, s, e, s => e.available(s, now)))
                        .min();
                    assert_eq!(Some(stack.available(&together, now)), available, "{what}");
                }
            }
        }
    }
}
