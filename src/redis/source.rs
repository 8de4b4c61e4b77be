//! The scripts' sources, put together from the pieces in `lua/`.
//!
//! Each algorithm is one body: `lua/common.lua` (arguments, the stored value, TTLs), its
//! state (`lua/<algorithm>/state.lua`: parse, clamp, save; the windows after
//! `lua/window/ramp.lua` and before `lua/window/convert.lua`), and its operations, the
//! functions every operation names (`fits`, `take`, `keep`, `later`, `give`, `hold`: in
//! `lua/gcra/ops.lua`, or `lua/window/ops.lua` with `lua/window/refund.lua` or
//! `lua/log/refund.lua`). A script of one quota is `lua/clock.lua`, the body, then the
//! operation (`lua/acquire.lua`, `lua/pause.lua`, `lua/release.lua`). A script of a plan
//! wraps each algorithm's body in a function of its own keys and arguments, makes one per
//! quota (`lua/stack/parts.lua`), then runs the operation on all of them together
//! (`lua/stack/<operation>.lua`).
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
const GCRA: &str = lua!("common", "gcra/state", "gcra/ops");
const FIXED: &str = lua!(
    "common",
    "window/ramp",
    "fixed/state",
    "window/convert",
    "window/ops",
    "window/refund"
);
const SLIDING: &str = lua!(
    "common",
    "window/ramp",
    "sliding/state",
    "window/convert",
    "window/ops",
    "window/refund"
);
const LOG: &str = lua!(
    "common",
    "window/ramp",
    "log/state",
    "window/convert",
    "window/ops",
    "log/refund"
);

/// What a quota's maker returns: its operations (`lua/stack/parts.lua`).
const PART: &str = "return {fits = fits, take = take, keep = keep, later = later, \
                    give = give, hold = hold, cap = CAP, ahead = AHEAD}\nend\n";

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

    fn body(self) -> &'static str {
        match self {
            Family::Token | Family::Leaky => GCRA,
            Family::Fixed => FIXED,
            Family::Sliding => SLIDING,
            Family::Log => LOG,
        }
    }
}

impl Verb {
    fn one(self) -> &'static str {
        match self {
            Verb::Acquire => lua!("acquire"),
            Verb::Pause => lua!("pause"),
            Verb::Release => lua!("release"),
        }
    }

    fn stack(self) -> &'static str {
        match self {
            Verb::Acquire => lua!("stack/acquire"),
            Verb::Pause => lua!("stack/pause"),
            Verb::Release => lua!("stack/release"),
        }
    }
}

/// The script of `verb` on one quota of `family`. `KEYS` and `ARGV` as `lua/common.lua` says.
pub(crate) fn one(family: Family, verb: Verb) -> String {
    [&prelude(family), CLOCK, family.body(), verb.one()].concat()
}

/// The token bucket's lease script (`lua/gcra/lease.lua`).
pub(crate) fn lease() -> String {
    [&prelude(Family::Token), CLOCK, GCRA, lua!("gcra/lease")].concat()
}

fn prelude(family: Family) -> String {
    format!(
        "local TAG = '{}'\nlocal STORE, O, RE = nil, 0, nil\n",
        family.tag()
    )
}

/// The script of `verb` on a plan of quotas of `families`, in order, decided together.
/// `KEYS` and `ARGV` as `lua/stack/parts.lua` says.
pub(crate) fn stack(families: &[Family], verb: Verb) -> String {
    let mut source = String::from(CLOCK);
    let mut made: Vec<Family> = Vec::new();
    for &family in families {
        if made.contains(&family) {
            continue;
        }
        made.push(family);
        source.push_str(&format!(
            "local function part_{}(TAG, KEYS, O, STORE, RE)\n",
            family.letter()
        ));
        source.push_str(family.body());
        source.push_str(PART);
    }
    let list = |f: &dyn Fn(Family) -> String| {
        families
            .iter()
            .map(|&x| f(x))
            .collect::<Vec<_>>()
            .join(", ")
    };
    source.push_str(&format!(
        "local MAKE = {{{}}}\nlocal TAGS = {{{}}}\n",
        list(&|f| format!("part_{}", f.letter())),
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
