//! The scripts' sources, put together from the pieces in `lua/`.
//!
//! Every script begins with `lua/clock.lua` and `lua/common.lua` (the call's arguments, a
//! quota `q`: its parameters, keys and stored value; writes and TTLs). Each algorithm's
//! functions take a quota first, and are made once per run, however many quotas use them:
//! its state (`lua/<algorithm>/state.lua`: parse, clamp, save; the windows after
//! `lua/window/ramp.lua` and before `lua/window/convert.lua`), and its operations (`load`,
//! `fits`, `take`, `keep`, `later`, `give`, `hold`: in `lua/gcra/ops.lua`, or
//! `lua/window/ops.lua` with `lua/window/refund.lua` or `lua/log/refund.lua`). A script of
//! one quota then loads it (`lua/one.lua`) and runs the operation (`lua/acquire.lua`,
//! `lua/pause.lua`, `lua/release.lua`, `lua/lease.lua`; acquire and pause after
//! `lua/classes.lua`, the priority classes' account); a script of a plan loads each of
//! its quotas from the plan's one value (`lua/stack/parts.lua`) and runs the operation on
//! all of them together (`lua/stack/<operation>.lua`).
//!
//! Depends on nothing but `std`: the differential tests put the scripts together with it too.

/// The pieces of one algorithm, as the scripts tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// The token bucket (GCRA).
    Token,
    /// The leaky bucket (GCRA, tolerance one interval).
    Leaky,
    /// The fixed window.
    Fixed,
    /// The sliding window (two-window estimate).
    Sliding,
    /// The sliding log.
    Log,
}

/// What a script does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    /// Take tokens, now or booked.
    Acquire,
    /// Hold every admission for a while.
    Pause,
    /// Give back tokens of an admission not used.
    Release,
}

macro_rules! lua {
    ($($piece:literal),+) => {
        concat!($(include_str!(concat!("lua/", $piece, ".lua"))),+)
    };
}

const CLOCK: &str = lua!("clock");
const COMMON: &str = lua!("common");
const GCRA: &str = lua!("gcra/state", "gcra/ops", "gcra/lease");
const FIXED: &str = lua!(
    "window/ramp",
    "fixed/state",
    "window/convert",
    "window/ops",
    "window/refund"
);
const SLIDING: &str = lua!(
    "window/ramp",
    "sliding/state",
    "window/convert",
    "window/ops",
    "window/refund"
);
const LOG: &str = lua!(
    "window/ramp",
    "log/state",
    "window/convert",
    "window/ops",
    "log/refund"
);

/// What an algorithm's functions are known by outside it.
const OPS: &str = "load = load, fits = fits, take = take, keep = keep, later = later, \
                   give = give, hold = hold";

impl Family {
    /// The tag its stored values begin with (the token and leaky bucket share a layout).
    fn tag(self) -> &'static str {
        match self {
            Family::Leaky => "K",
            _ => "",
        }
    }

    /// Its letter in a plan's marker and in the names of the makers.
    fn letter(self) -> char {
        match self {
            Family::Token => 'T',
            Family::Leaky => 'K',
            Family::Fixed => 'F',
            Family::Sliding => 'S',
            Family::Log => 'L',
        }
    }

    /// The name of its functions' table in a script (the token and leaky bucket share
    /// theirs).
    fn name(self) -> &'static str {
        match self {
            Family::Token | Family::Leaky => "algo_gcra",
            Family::Fixed => "algo_fixed",
            Family::Sliding => "algo_sliding",
            Family::Log => "algo_log",
        }
    }

    /// Its functions, made once per run, as a table of the operations.
    fn algo(self) -> String {
        let (body, extra) = match self {
            Family::Token | Family::Leaky => (GCRA, ", lease = lease"),
            Family::Fixed => (FIXED, ""),
            Family::Sliding => (SLIDING, ""),
            Family::Log => (LOG, ""),
        };
        format!(
            "local {} = (function()\n{body}return {{{OPS}{extra}}}\nend)()\n",
            self.name()
        )
    }
}

impl Verb {
    fn one(self) -> &'static str {
        match self {
            Verb::Acquire => lua!("classes", "acquire"),
            Verb::Pause => lua!("classes", "pause"),
            Verb::Release => lua!("release"),
        }
    }

    fn stack(self) -> &'static str {
        match self {
            Verb::Acquire => lua!("classes", "stack/acquire"),
            Verb::Pause => lua!("classes", "stack/pause"),
            Verb::Release => lua!("stack/release"),
        }
    }
}

/// The script of `verb` on one quota of `family`. `KEYS` and `ARGV` as `lua/common.lua` says.
pub(crate) fn one(family: Family, verb: Verb) -> String {
    [&single(family), verb.one()].concat()
}

/// The token bucket's lease script (`lua/gcra/lease.lua`).
pub(crate) fn lease() -> String {
    [&single(Family::Token), lua!("lease")].concat()
}

/// A script of one quota of `family`, up to its operation (`lua/one.lua`).
fn single(family: Family) -> String {
    let names = format!("local algo, TAG = {}, '{}'\n", family.name(), family.tag());
    [CLOCK, COMMON, &family.algo(), &names, lua!("one")].concat()
}

/// The script of `verb` on a plan of quotas of `families`, in order, decided together.
/// `KEYS` and `ARGV` as `lua/stack/parts.lua` says.
pub(crate) fn stack(families: &[Family], verb: Verb) -> String {
    let mut source = [CLOCK, COMMON].concat();
    let mut made = Vec::new();
    for &family in families {
        if !made.contains(&family.name()) {
            made.push(family.name());
            source.push_str(&family.algo());
        }
    }
    let list = |f: &dyn Fn(Family) -> String| {
        families
            .iter()
            .map(|&x| f(x))
            .collect::<Vec<_>>()
            .join(", ")
    };
    source.push_str(&format!(
        "local ALGOS = {{{}}}\nlocal TAGS = {{{}}}\n",
        list(&|f| f.name().to_owned()),
        list(&|f| format!("'{}'", f.tag())),
    ));
    source.push_str(lua!("stack/parts"));
    source.push_str(verb.stack());
    source
}

/// A plan's marker (`lua/stack/parts.lua`): per quota, its algorithm and the parameters its
/// state is kept in, read off the quota's call arguments (`lua/common.lua`: W, T, tau, E).
pub(crate) fn marker<'a>(quotas: impl IntoIterator<Item = (Family, &'a [u64; 14])>) -> String {
    let sigs: Vec<String> = quotas
        .into_iter()
        .map(|(f, a)| format!("{}:{}:{}:{}:{}", f.letter(), a[5], a[0], a[4], a[10]))
        .collect();
    sigs.join("|")
}
