//! The rate-limit fields of the big API providers, per resource: OpenAI's (and Azure
//! OpenAI's) `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, with Go-style
//! durations (`6m0s`, `59.52s`, `20ms`), and Anthropic's
//! `anthropic-ratelimit-{resource}-{limit,remaining,reset}`, with RFC 3339 instants.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName};

use super::ratelimit::LONGEST_WINDOW;
use super::values::{date, digits, trim_ows};
use crate::Resource;

/// What a provider's fields say about one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceHint {
    /// The resource.
    pub resource: Resource,
    /// Its limit per minute, when stated.
    pub limit: Option<u64>,
    /// What remains of it, when stated.
    pub remaining: Option<u64>,
    /// Time until it is whole again, when stated; at most [`LONGEST_WINDOW`].
    pub reset: Option<Duration>,
}

/// The resources the providers state, in the order they are read.
const RESOURCES: [Resource; 4] = [
    Resource::REQUESTS,
    Resource::TOKENS,
    Resource::INPUT_TOKENS,
    Resource::OUTPUT_TOKENS,
];

/// Each resource's fields: Anthropic's limit, remaining and reset, then OpenAI's.
static FIELDS: LazyLock<[[HeaderName; 6]; 4]> = LazyLock::new(|| {
    RESOURCES.map(|r| {
        let n = r.name();
        [
            format!("anthropic-ratelimit-{n}-limit"),
            format!("anthropic-ratelimit-{n}-remaining"),
            format!("anthropic-ratelimit-{n}-reset"),
            format!("x-ratelimit-limit-{n}"),
            format!("x-ratelimit-remaining-{n}"),
            format!("x-ratelimit-reset-{n}"),
        ]
        .map(|name| HeaderName::try_from(name).expect("a resource's name is a field's"))
    })
});

/// Read the rate-limit fields of OpenAI (and Azure OpenAI) and of Anthropic: one hint per
/// resource that has at least one well-formed field, in the order requests, tokens, input
/// tokens, output tokens (at most four, whatever the response holds).
///
/// - OpenAI: `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
///   `x-ratelimit-reset-requests`, and the same for `tokens`; a reset is a Go-style duration
///   ([`parse_duration`]).
/// - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`;
///   a reset is an RFC 3339 instant, measured against the response's `Date` when that is
///   present and valid, else against `now` (an instant past is [`Duration::ZERO`]).
///
/// Where both dialects are present, Anthropic's wins per field. A malformed value, a negative
/// number or a reset further than [`LONGEST_WINDOW`] is ignored; only the first line of each
/// field is read, and this never panics, whatever the bytes.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_throttle::headers::read_provider_limits;
/// use tower_throttle::Resource;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-ratelimit-limit-tokens", "150000".parse().unwrap());
/// headers.insert("x-ratelimit-remaining-tokens", "0".parse().unwrap());
/// headers.insert("x-ratelimit-reset-tokens", "6m0s".parse().unwrap());
///
/// let hints = read_provider_limits(&headers, SystemTime::now());
/// assert_eq!(hints[0].resource, Resource::TOKENS);
/// assert_eq!(hints[0].remaining, Some(0));
/// assert_eq!(hints[0].reset, Some(Duration::from_secs(360)));
/// ```
pub fn read_provider_limits(headers: &HeaderMap, now: SystemTime) -> Vec<ResourceHint> {
    let reference = date(headers).unwrap_or(now);
    let field = |name: &HeaderName| headers.get(name).map(|v| trim_ows(v.as_bytes()));
    let mut hints = Vec::new();
    for (resource, fields) in RESOURCES.into_iter().zip(FIELDS.iter()) {
        let [a_limit, a_remaining, a_reset, o_limit, o_remaining, o_reset] = fields;
        let number = |anthropic, openai| {
            field(anthropic)
                .and_then(digits)
                .or_else(|| field(openai).and_then(digits))
        };
        let reset = field(a_reset)
            .and_then(|v| until(rfc3339(v)?, reference))
            .or_else(|| field(o_reset).and_then(parse_duration))
            .filter(|r| *r <= LONGEST_WINDOW);
        let hint = ResourceHint {
            resource,
            limit: number(a_limit, o_limit),
            remaining: number(a_remaining, o_remaining),
            reset,
        };
        if hint.limit.is_some() || hint.remaining.is_some() || hint.reset.is_some() {
            hints.push(hint);
        }
    }
    hints
}

/// The resource with nothing left whose reset is the longest, and that reset, when one has
/// nothing left and states a reset still ahead.
pub(crate) fn spent_for(hints: &[ResourceHint]) -> Option<(Duration, &Resource)> {
    hints
        .iter()
        .filter(|h| h.remaining == Some(0))
        .filter_map(|h| Some((h.reset?, &h.resource)))
        .max_by_key(|(reset, _)| *reset)
        .filter(|(reset, _)| !reset.is_zero())
}

/// The rate of requests a provider states, per second: its requests per minute over 60 s.
pub(crate) fn stated_requests(hints: &[ResourceHint]) -> Option<f64> {
    let limit = hints
        .iter()
        .find(|h| h.resource == Resource::REQUESTS)?
        .limit
        .filter(|l| *l > 0)?;
    Some(limit as f64 / 60.0)
}

/// The wait from `reference` to `at` (zero if past).
fn until(at: SystemTime, reference: SystemTime) -> Option<Duration> {
    Some(at.duration_since(reference).unwrap_or(Duration::ZERO))
}

/// The longest value [`parse_duration`] reads, in bytes.
const MAX_DURATION_LEN: usize = 64;

/// Parse a duration as Go's `time.Duration` prints it, the dialect of OpenAI's reset fields:
/// one or more numbers, each with an optional fraction and a unit (`h`, `m`, `s`, `ms`,
/// `us`, `µs`, `ns`), such as `1h2m3.5s`, `6m0s`, `59.52s` or `20ms`; or `0`.
///
/// `None` for anything else: a sign, a missing unit, an empty value, more than 64 bytes, or
/// a duration longer than Go's longest (`2562047h47m16.854775807s`, about 292
/// years). Digits of a fraction beyond the nanosecond are
/// dropped. This never panics, whatever the bytes.
///
/// ```
/// use std::time::Duration;
/// use tower_throttle::headers::parse_duration;
///
/// assert_eq!(parse_duration(b"6m0s"), Some(Duration::from_secs(360)));
/// assert_eq!(parse_duration(b"59.52s"), Some(Duration::from_millis(59_520)));
/// assert_eq!(parse_duration(b"-1s"), None);
/// ```
pub fn parse_duration(value: &[u8]) -> Option<Duration> {
    if value == b"0" {
        return Some(Duration::ZERO);
    }
    if value.is_empty() || value.len() > MAX_DURATION_LEN {
        return None;
    }
    let mut rest = value;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let whole_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (whole, tail) = rest.split_at(whole_len);
        let (fraction, tail) = match tail {
            [b'.', tail @ ..] => {
                let n = tail.iter().take_while(|b| b.is_ascii_digit()).count();
                tail.split_at(n)
            }
            _ => (&[][..], tail),
        };
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let (unit, tail): (u128, _) = match tail {
            [b'n', b's', t @ ..] => (1, t),
            [b'u', b's', t @ ..] | [0xC2, 0xB5, b's', t @ ..] | [0xCE, 0xBC, b's', t @ ..] => {
                (1_000, t)
            }
            [b'm', b's', t @ ..] => (1_000_000, t),
            [b's', t @ ..] => (1_000_000_000, t),
            [b'm', t @ ..] => (60_000_000_000, t),
            [b'h', t @ ..] => (3_600_000_000_000, t),
            _ => return None,
        };
        // Each part is at most 64 digits long: the whole part fits u128 once checked.
        let whole = whole.iter().try_fold(0u128, |n, &d| {
            n.checked_mul(10)?.checked_add(u128::from(d - b'0'))
        })?;
        let mut scale = unit;
        let mut part = whole.checked_mul(unit)?;
        for &d in fraction {
            scale /= 10;
            part = part.checked_add(u128::from(d - b'0') * scale)?;
        }
        total = total.checked_add(part)?;
        rest = tail;
    }
    // Go's durations are at most `i64::MAX` nanoseconds.
    let nanos = i64::try_from(total).ok()?;
    Some(Duration::from_nanos(nanos.unsigned_abs()))
}

/// An RFC 3339 instant (`2024-05-01T12:00:30Z`, `2024-05-01T14:00:30.25+02:00`), to the
/// second; `None` for anything else and for a year before 1970.
fn rfc3339(v: &[u8]) -> Option<SystemTime> {
    let num = |range: std::ops::Range<usize>| digits(v.get(range)?);
    let punct = |i: usize, ok: &[u8]| v.get(i).is_some_and(|b| ok.contains(b));
    if !(punct(4, b"-")
        && punct(7, b"-")
        && punct(10, b"Tt ")
        && punct(13, b":")
        && punct(16, b":"))
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    if v.get(i) == Some(&b'.') {
        i += 1;
        let n = v[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        i += n;
    }
    let offset: i64 = match &v[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits(&[*h1, *h2])?;
            let m = digits(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let off = (h * 3600 + m * 60) as i64;
            if *sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + (hour * 3600 + minute * 60 + second) as i64 - offset;
    UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(secs).ok()?))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> i64 {
    let y = year as i64 - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in fields {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("0", Some(Duration::ZERO)),
            ("0s", Some(Duration::ZERO)),
            ("1s", Some(ms(1000))),
            ("6m0s", Some(ms(360_000))),
            ("59.52s", Some(ms(59_520))),
            ("20ms", Some(ms(20))),
            ("1h2m3.5s", Some(ms(3_723_500))),
            ("1.5us", Some(Duration::from_nanos(1500))),
            ("1.5µs", Some(Duration::from_nanos(1500))),
            ("7ns", Some(Duration::from_nanos(7))),
            (".5s", Some(ms(500))),
            ("1.s", Some(ms(1000))),
            ("0.0000000019s", Some(Duration::from_nanos(1))),
            (
                "2562047h47m16.854775807s",
                Some(Duration::from_nanos(i64::MAX as u64)),
            ),
            ("2562047h47m16.854775808s", None),
            ("", None),
            ("s", None),
            (".s", None),
            ("1", None),
            ("-1s", None),
            ("+1s", None),
            ("1 s", None),
            ("1d", None),
            ("1sx", None),
            ("99999999999999999999999999999999999999999h", None),
        ] {
            assert_eq!(parse_duration(text.as_bytes()), want, "{text:?}");
        }
        assert_eq!(parse_duration(&[b'1'; 65]), None);
        assert_eq!(parse_duration(&[0xC2, b's']), None);
    }

    #[test]
    fn rfc3339_instants() {
        let at = |s: &str| rfc3339(s.as_bytes()).map(|t| t.duration_since(UNIX_EPOCH).unwrap());
        let secs = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(at("1970-01-01T00:00:00Z"), secs(0));
        assert_eq!(at("2024-05-01T12:00:30Z"), secs(1_714_564_830));
        assert_eq!(at("2024-05-01T14:00:30.25+02:00"), secs(1_714_564_830));
        assert_eq!(at("2024-05-01T10:00:30-02:00"), secs(1_714_564_830));
        assert_eq!(at("2024-02-29T00:00:00Z"), secs(1_709_164_800));
        assert_eq!(at("2000-03-01t00:00:00z"), secs(951_868_800));
        for bad in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:30",
            "2024-05-01T12:00:30.Z",
            "2024-05-01T12:00:30+2:00",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:00:00+00:01",
            "2024-05-01",
            "",
            "2024-05-01T12:00:30Z ",
        ] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn openai_fields() {
        // OpenAI's published example.
        let h = headers(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let hints = read_provider_limits(&h, SystemTime::now());
        assert_eq!(
            hints,
            [
                ResourceHint {
                    resource: Resource::REQUESTS,
                    limit: Some(60),
                    remaining: Some(59),
                    reset: Some(Duration::from_secs(1)),
                },
                ResourceHint {
                    resource: Resource::TOKENS,
                    limit: Some(150_000),
                    remaining: Some(149_984),
                    reset: Some(Duration::from_secs(360)),
                },
            ]
        );
        assert_eq!(stated_requests(&hints), Some(1.0));
        assert_eq!(spent_for(&hints), None);
    }

    #[test]
    fn anthropic_fields_against_date() {
        let h = headers(&[
            ("date", "Wed, 01 May 2024 12:00:00 GMT"),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-requests-reset", "2024-05-01T12:00:01Z"),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2024-05-01T12:00:30Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "8000"),
            ("anthropic-ratelimit-output-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2024-05-01T11:59:00Z",
            ),
        ]);
        // The local clock is an hour off; the server's `Date` is the reference.
        let local = UNIX_EPOCH + Duration::from_secs(1_714_564_800 + 3600);
        let hints = read_provider_limits(&h, local);
        let resources: Vec<_> = hints.iter().map(|h| h.resource.clone()).collect();
        assert_eq!(
            resources,
            [
                Resource::REQUESTS,
                Resource::INPUT_TOKENS,
                Resource::OUTPUT_TOKENS
            ]
        );
        assert_eq!(hints[0].reset, Some(Duration::from_secs(1)));
        assert_eq!(hints[1].reset, Some(Duration::from_secs(30)));
        assert_eq!(hints[2].reset, Some(Duration::ZERO), "an instant past");
        let spent = Some((Duration::from_secs(30), &Resource::INPUT_TOKENS));
        assert_eq!(spent_for(&hints), spent);
        assert_eq!(stated_requests(&hints), Some(50.0 / 60.0));
    }

    #[test]
    fn bad_values_are_ignored() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "-5"),
            ("x-ratelimit-remaining-requests", "1e3"),
            ("x-ratelimit-reset-requests", "soon"),
            ("x-ratelimit-limit-tokens", "99999999999999999999999"),
            ("x-ratelimit-reset-tokens", "25h"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2124-05-01T12:00:00Z",
            ),
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
        ]);
        let hints = read_provider_limits(&h, SystemTime::now());
        assert_eq!(
            hints,
            [ResourceHint {
                resource: Resource::INPUT_TOKENS,
                limit: None,
                remaining: Some(0),
                reset: None,
            }]
        );
        assert_eq!(spent_for(&hints), None, "nothing left, but no reset stated");
        assert_eq!(stated_requests(&hints), None);
    }

    #[test]
    fn anthropic_wins_per_field_and_other_fields_are_not_read() {
        let mut h = headers(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "10"),
            ("anthropic-ratelimit-requests-remaining", "3"),
        ]);
        for i in 0..1000 {
            h.append(
                http::HeaderName::from_bytes(format!("x-ratelimit-limit-r{i}").as_bytes()).unwrap(),
                HeaderValue::from_static("1"),
            );
        }
        let hints = read_provider_limits(&h, SystemTime::now());
        assert_eq!(hints.len(), 1);
        assert_eq!(hints[0].limit, Some(60));
        assert_eq!(hints[0].remaining, Some(3));
    }
}
