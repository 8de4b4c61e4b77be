//! The rate-limit fields: the IETF draft's `RateLimit` and `RateLimit-Policy`
//! ([draft-ietf-httpapi-ratelimit-headers]), its older `RateLimit-Limit` / `-Remaining` /
//! `-Reset`, and `X-RateLimit-*`, read and written.
//!
//! [draft-ietf-httpapi-ratelimit-headers]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/

use std::cmp::Reverse;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

use super::structured::{is_tchar, read_list};
use super::values::{ceil_secs, date, digits, trim_ows};

pub(crate) const RATELIMIT: &str = "ratelimit";
pub(crate) const RATELIMIT_POLICY: &str = "ratelimit-policy";
const RATELIMIT_REMAINING: &str = "ratelimit-remaining";
const RATELIMIT_RESET: &str = "ratelimit-reset";
const RATELIMIT_LIMIT: &str = "ratelimit-limit";
const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
pub(crate) const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";

/// Reset values above this many seconds (about 31.7 years) are Unix timestamps, not delays.
const EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// The largest integer a structured field may carry (RFC 9651 §3.3.1: at most 15 digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// What a response says about the client's remaining quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuotaHint {
    /// Requests the client may still send before it is limited.
    pub remaining: u64,
    /// Time until more quota becomes available, if the server said.
    ///
    /// It comes straight from the server and is not capped: add it to an instant or a time
    /// with `checked_add`.
    pub reset: Option<Duration>,
}

/// Read the quota a server reports in the rate-limit fields of a response.
///
/// Sources, in order of preference (the first one that is present and well formed wins):
///
/// 1. The IETF draft `RateLimit` field, a structured field list such as
///    `"default";r=0;t=30`: `r` is the remaining quota and `t` the seconds until more is
///    available. When it lists several policies, the most restrictive one is used (the
///    smallest `r`, then the largest `t`). Other parameters are ignored, whatever their
///    RFC 9651 type (dates such as `@1700000000` and display strings such as `%"caf%c3%a9"`
///    included). A single malformed member makes the whole field malformed.
/// 2. The older draft's separate `RateLimit-Remaining` and `RateLimit-Reset` fields.
/// 3. `X-RateLimit-Remaining` and `X-RateLimit-Reset`.
///
/// For the last two sources the remaining count is required and the reset is optional (a
/// malformed reset is read as `None`); only the first line of each field is read. A reset
/// larger than 10^9 is a Unix timestamp rather than a delay: it is measured against the
/// response's `Date` field when that is present and valid (the server's clock), else against
/// `now`, and a timestamp in the past is [`Duration::ZERO`].
///
/// Malformed fields are skipped; this never panics, whatever the bytes.
pub fn read_quota_hint(headers: &HeaderMap, now: SystemTime) -> Option<QuotaHint> {
    structured_hint(headers)
        .or_else(|| legacy_hint(headers, RATELIMIT_REMAINING, RATELIMIT_RESET, now))
        .or_else(|| legacy_hint(headers, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, now))
}

/// Read the rate a server states in `RateLimit-Policy` (e.g. `"default";q=100;w=60`), in
/// requests per second: `q / w`, for the most restrictive policy listed.
///
/// `None` when the field is absent or malformed (a member without `q` or `w`, or with a zero
/// `q` or `w`, makes the field malformed). A policy whose window is longer than a day
/// ([`LONGEST_WINDOW`]) is implausible and skipped. This never panics, whatever the bytes.
///
/// ```
/// use tower_throttle::headers::read_stated_rate;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("ratelimit-policy", "\"default\";q=100;w=60".parse().unwrap());
/// assert_eq!(read_stated_rate(&headers), Some(100.0 / 60.0));
/// headers.insert("ratelimit-policy", "\"x\";q=1;w=999999999999999".parse().unwrap());
/// assert_eq!(read_stated_rate(&headers), None);
/// ```
pub fn read_stated_rate(headers: &HeaderMap) -> Option<f64> {
    read_list(headers, RATELIMIT_POLICY, |params| {
        let q = params.get(b"q")??;
        let w = params.get(b"w")??;
        (q > 0 && w > 0).then(|| (w <= LONGEST_WINDOW.as_secs()).then(|| q as f64 / w as f64))
    })?
    .into_iter()
    .flatten()
    .reduce(f64::min)
}

/// The longest window a stated quota is believed for: a day. A server stating a longer one
/// (or a reset further away) is ignored, so that one answer cannot hold a client down for
/// longer.
pub const LONGEST_WINDOW: Duration = Duration::from_secs(86_400);

/// Read the rate a server's separate quota fields give, in requests per second: the pace that
/// spends the remaining quota by the reset, `Remaining / Reset`, from `X-RateLimit-Limit`,
/// `X-RateLimit-Remaining` and `X-RateLimit-Reset` (or the older draft's `RateLimit-Limit`,
/// `RateLimit-Remaining` and `RateLimit-Reset`).
///
/// At the start of a window this is the quota's own rate (`Limit` per window); later in it,
/// the rate that neither leaves quota unused nor runs out before the reset. The three fields
/// must be present and well formed (a `Limit` above 0; a `Reset` read as in
/// [`read_quota_hint`], above 0 and at most [`LONGEST_WINDOW`]); `None` otherwise, and when nothing remains (the client then
/// pauses until the reset). Only the first line of each field is read; this never panics,
/// whatever the bytes.
///
/// ```
/// use std::time::SystemTime;
/// use tower_throttle::headers::read_quota_rate;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-ratelimit-limit", "600".parse().unwrap());
/// headers.insert("x-ratelimit-remaining", "599".parse().unwrap());
/// headers.insert("x-ratelimit-reset", "60".parse().unwrap());
/// let rate = read_quota_rate(&headers, SystemTime::now()).unwrap();
/// assert!((rate - 599.0 / 60.0).abs() < 1e-9);
/// ```
pub fn read_quota_rate(headers: &HeaderMap, now: SystemTime) -> Option<f64> {
    [
        (X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET),
        (RATELIMIT_LIMIT, RATELIMIT_REMAINING, RATELIMIT_RESET),
    ]
    .into_iter()
    .find_map(|(limit, remaining, reset)| {
        let limit = headers.get(limit).and_then(integer_field)?;
        let hint = legacy_hint(headers, remaining, reset, now)?;
        let reset = hint.reset.filter(|r| *r <= LONGEST_WINDOW)?.as_secs_f64();
        let remaining = hint.remaining.min(limit);
        (limit > 0 && remaining > 0 && reset > 0.0).then(|| remaining as f64 / reset)
    })
}

/// `RateLimit-Policy` value for a quota of `limit` of `unit` per window of `window_secs`
/// seconds (draft syntax, e.g. `"default";q=100;w=60`, or `"tpm";q=10000;w=60;qu="tokens"`:
/// a unit other than requests is stated).
///
/// `name` is used only if it is a non-empty HTTP token (letters, digits and
/// ``!#$%&'*+-.^_`|~``); otherwise the policy is named `default`; a `unit` that is not a
/// token is left out. Numbers above the largest structured-field integer (10^15 − 1) are
/// clamped to it.
pub(crate) fn policy_value(name: &str, limit: u64, window_secs: u64, unit: &str) -> HeaderValue {
    let stated = unit != "requests" && !unit.is_empty() && unit.bytes().all(is_tchar);
    header_value(format!(
        "\"{}\";q={};w={}{}{}{}",
        policy_name(name),
        limit.min(SF_INTEGER_MAX),
        window_secs.min(SF_INTEGER_MAX),
        if stated { ";qu=\"" } else { "" },
        if stated { unit } else { "" },
        if stated { "\"" } else { "" },
    ))
}

/// `RateLimit` value, e.g. `"default";r=0;t=3` (t rounded UP to whole seconds).
///
/// `name` and large numbers are treated as in [`policy_value`].
pub(crate) fn ratelimit_value(name: &str, remaining: u64, reset: Duration) -> HeaderValue {
    header_value(format!(
        "\"{}\";r={};t={}",
        policy_name(name),
        remaining.min(SF_INTEGER_MAX),
        ceil_secs(reset).min(SF_INTEGER_MAX),
    ))
}

/// Set `X-RateLimit-Limit`, `-Remaining` and `-Reset` (delta seconds, rounded up).
pub(crate) fn insert_x_ratelimit(
    headers: &mut HeaderMap,
    limit: u64,
    remaining: u64,
    reset: Duration,
) {
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
    headers.insert(X_RATELIMIT_RESET, HeaderValue::from(ceil_secs(reset)));
}

fn policy_name(name: &str) -> &str {
    if !name.is_empty() && name.bytes().all(is_tchar) {
        name
    } else {
        "default"
    }
}

fn header_value(value: String) -> HeaderValue {
    // Built only from a token, quotes, `;`, `=`, letters and digits: always a valid value.
    HeaderValue::try_from(value).expect("rate-limit field values are visible ASCII")
}

/// The `RateLimit` field; its lines are combined into one list.
fn structured_hint(headers: &HeaderMap) -> Option<QuotaHint> {
    let hints = read_list(headers, RATELIMIT, |params| {
        let remaining = params.get(b"r")??;
        let reset = match params.get(b"t") {
            None => None,
            Some(t) => Some(Duration::from_secs(t?)),
        };
        Some(QuotaHint { remaining, reset })
    })?;
    hints
        .into_iter()
        .min_by_key(|hint| (hint.remaining, Reverse(hint.reset)))
}

fn legacy_hint(
    headers: &HeaderMap,
    remaining: &str,
    reset: &str,
    now: SystemTime,
) -> Option<QuotaHint> {
    let remaining = headers.get(remaining).and_then(integer_field)?;
    let reset = headers
        .get(reset)
        .and_then(integer_field)
        .and_then(|secs| reset_after(secs, headers, now));
    Some(QuotaHint { remaining, reset })
}

/// A field that is only a non-negative decimal integer, with optional whitespace around it.
fn integer_field(value: &HeaderValue) -> Option<u64> {
    digits(trim_ows(value.as_bytes()))
}

/// A reset of `secs`: a delay, or above [`EPOCH_THRESHOLD`] a Unix timestamp.
fn reset_after(secs: u64, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if secs <= EPOCH_THRESHOLD {
        return Some(Duration::from_secs(secs));
    }
    let at = UNIX_EPOCH.checked_add(Duration::from_secs(secs))?;
    let reference = date(headers).unwrap_or(now);
    Some(at.duration_since(reference).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for &(name, value) in fields {
            let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            headers.append(name, HeaderValue::from_static(value));
        }
        headers
    }

    fn hint(remaining: u64, reset: Option<u64>) -> Option<QuotaHint> {
        Some(QuotaHint {
            remaining,
            reset: reset.map(Duration::from_secs),
        })
    }

    fn read(fields: &[(&'static str, &'static str)]) -> Option<QuotaHint> {
        read_quota_hint(&map(fields), SystemTime::now())
    }

    #[test]
    fn quota_rate_is_the_pace_to_the_reset() {
        let now = SystemTime::now();
        let rate = |fields: &[(&'static str, &'static str)]| read_quota_rate(&map(fields), now);
        let x = |limit, remaining, reset| {
            rate(&[
                ("x-ratelimit-limit", limit),
                ("x-ratelimit-remaining", remaining),
                ("x-ratelimit-reset", reset),
            ])
        };
        assert_eq!(x("100", "50", "10"), Some(5.0));
        // More remaining than the limit is read as the limit.
        assert_eq!(x("100", "500", "10"), Some(10.0));
        // Nothing remains, nothing to wait for, no limit: no rate.
        for (l, r, t) in [("100", "0", "10"), ("100", "50", "0"), ("0", "50", "10")] {
            assert_eq!(x(l, r, t), None, "{l} {r} {t}");
        }
        for bad in ["", "-1", "1.5", "ten", "100, 100;w=60"] {
            assert_eq!(x(bad, "50", "10"), None, "{bad}");
            assert_eq!(x("100", bad, "10"), None, "{bad}");
            assert_eq!(x("100", "50", bad), None, "{bad}");
        }
        // Each of the three is needed.
        assert_eq!(
            rate(&[("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "1")]),
            None
        );
        assert_eq!(
            rate(&[("x-ratelimit-limit", "5"), ("x-ratelimit-reset", "1")]),
            None
        );
        // The older draft's fields.
        let old = rate(&[
            ("ratelimit-limit", "60"),
            ("ratelimit-remaining", "30"),
            ("ratelimit-reset", "60"),
        ]);
        assert_eq!(old, Some(0.5));
        // A reset as a Unix timestamp, against the response's date.
        let stamped = read_quota_rate(
            &map(&[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "3600"),
                ("x-ratelimit-reset", "1700003600"),
                ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
            ]),
            now,
        );
        assert_eq!(stamped, Some(1.0));
    }

    /// Tue, 14 Nov 2023 22:13:20 GMT.
    const NOV_14_2023: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn no_fields() {
        assert_eq!(read(&[]), None);
        assert_eq!(read(&[("ratelimit-policy", "\"default\";q=10;w=1")]), None);
    }

    #[test]
    fn ratelimit_field() {
        assert_eq!(
            read(&[("ratelimit", "\"default\";r=0;t=30")]),
            hint(0, Some(30))
        );
        assert_eq!(read(&[("RateLimit", "default;r=7")]), hint(7, None));
        assert_eq!(
            read(&[(
                "ratelimit",
                "\"a, b\";pk=:cHsdsRa894==:;r=5;t=2;x=1.5;y;z=?1"
            )]),
            hint(5, Some(2))
        );
        // A repeated parameter: the last one counts.
        assert_eq!(read(&[("ratelimit", "\"p\";r=9;r=4")]), hint(4, None));
    }

    #[test]
    fn ratelimit_field_reads_every_rfc_9651_value() {
        // An unknown parameter of any bare item type is skipped, not fatal.
        assert_eq!(
            read(&[("ratelimit", "\"default\";r=5;t=3;acme-reset-at=@1700000000")]),
            hint(5, Some(3))
        );
        for other in [
            "x=42",
            "x=-42",
            "x=4.125",
            "x=-0.5",
            "x=\"str \\\" \\\\ ing\"",
            "x=tok/en:1",
            "x=*tok",
            "x=:aGVsbG8=:",
            "x=?0",
            "x",
            "x=@1700000000",
            "x=@-62135596800",
            "x=%\"caf%c3%a9\"",
            "x=%\"100%25 \\ ok\"",
            "x=%\"\"",
        ] {
            let value = format!("\"default\";r=5;{other};t=3");
            let mut headers = HeaderMap::new();
            headers.insert(RATELIMIT, HeaderValue::from_str(&value).unwrap());
            assert_eq!(
                read_quota_hint(&headers, SystemTime::now()),
                hint(5, Some(3)),
                "{value}"
            );
        }
        // The list member itself may be any bare item too.
        assert_eq!(read(&[("ratelimit", "%\"caf%c3%a9\";r=1")]), hint(1, None));
        assert_eq!(
            read(&[("ratelimit", "@1700000000;r=2;t=1")]),
            hint(2, Some(1))
        );
    }

    #[test]
    fn invalid_rfc_9651_values_are_malformed() {
        for other in [
            "x=@1.5", // a date is an integer
            "x=@",    // with digits
            "x=@1234567890123456",
            "x=%\"caf%C3%A9\"", // escapes are lowercase hex
            "x=%\"%ff\"",       // and decode to UTF-8
            "x=%\"%c3\"",       // a truncated sequence
            "x=%\"%4\"",        // two digits
            "x=%\"open",
            "x=%caf", // a display string is quoted
            "x=\"bad\\escape\"",
            "x=1.",
            "x=1.2345",
            "x=1234567890123.5",
            "X=1",
        ] {
            let value = format!("\"default\";r=5;{other};t=3");
            let mut headers = HeaderMap::new();
            headers.insert(RATELIMIT, HeaderValue::from_str(&value).unwrap());
            assert_eq!(
                read_quota_hint(&headers, SystemTime::now()),
                None,
                "{value}"
            );
        }
        // A remaining count or reset that is not a non-negative integer is malformed too.
        for value in ["\"d\";r=@5", "\"d\";r=5;t=@3", "\"d\";r=%\"5\""] {
            assert_eq!(read(&[("ratelimit", value)]), None, "{value}");
        }
    }

    #[test]
    fn ratelimit_field_picks_the_most_restrictive_policy() {
        assert_eq!(
            read(&[("ratelimit", "\"burst\";r=50;t=5, \"daily\";r=3;t=3600")]),
            hint(3, Some(3600))
        );
        assert_eq!(
            read(&[
                ("ratelimit", "\"burst\";r=3;t=5"),
                ("ratelimit", "\"daily\";r=3;t=60,\"hourly\";r=3"),
            ]),
            hint(3, Some(60))
        );
    }

    #[test]
    fn older_draft_fields() {
        assert_eq!(
            read(&[("ratelimit-remaining", "12"), ("ratelimit-reset", "40")]),
            hint(12, Some(40))
        );
        assert_eq!(read(&[("ratelimit-remaining", " 12 ")]), hint(12, None));
        assert_eq!(read(&[("ratelimit-reset", "40")]), None);
    }

    #[test]
    fn x_ratelimit_fields() {
        assert_eq!(
            read(&[("x-ratelimit-remaining", "99"), ("x-ratelimit-reset", "60")]),
            hint(99, Some(60))
        );
        assert_eq!(read(&[("X-RateLimit-Remaining", "0")]), hint(0, None));
    }

    #[test]
    fn precedence() {
        let all = [
            ("x-ratelimit-remaining", "1"),
            ("ratelimit-remaining", "2"),
            ("ratelimit", "\"default\";r=3"),
        ];
        assert_eq!(read(&all), hint(3, None));
        assert_eq!(read(&all[..2]), hint(2, None));
        assert_eq!(read(&all[..1]), hint(1, None));
        // A malformed preferred source falls through to the next.
        assert_eq!(
            read(&[
                ("ratelimit", "\"default\";r=-3"),
                ("x-ratelimit-remaining", "1")
            ]),
            hint(1, None)
        );
    }

    #[test]
    fn reset_epoch_or_delta() {
        let epoch = NOV_14_2023.to_string();
        let mut headers = map(&[("x-ratelimit-remaining", "5")]);
        headers.insert("x-ratelimit-reset", epoch.parse().unwrap());
        let read_at = |now| read_quota_hint(&headers, at(now)).unwrap().reset;
        assert_eq!(read_at(NOV_14_2023 - 90), Some(Duration::from_secs(90)));
        assert_eq!(read_at(NOV_14_2023 + 90), Some(Duration::ZERO));

        let delta = map(&[
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "1000000000"),
        ]);
        assert_eq!(
            read_quota_hint(&delta, at(NOV_14_2023)),
            hint(5, Some(1_000_000_000))
        );

        let huge = map(&[
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "18446744073709551615"),
        ]);
        assert_eq!(read_quota_hint(&huge, at(NOV_14_2023)), hint(5, None));

        // Just past the threshold: a timestamp in 2001, long gone.
        let epoch = map(&[
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "1000000001"),
        ]);
        assert_eq!(read_quota_hint(&epoch, at(NOV_14_2023)), hint(5, Some(0)));
    }

    #[test]
    fn reset_epoch_is_measured_against_the_date_field() {
        let mut headers = map(&[
            ("date", "Tue, 14 Nov 2023 22:12:20 GMT"),
            ("ratelimit-remaining", "0"),
        ]);
        headers.insert("ratelimit-reset", NOV_14_2023.to_string().parse().unwrap());
        // The local clock is an hour off either way: the server's minute still holds.
        for now in [at(NOV_14_2023 - 3600), at(NOV_14_2023 + 3600)] {
            assert_eq!(read_quota_hint(&headers, now), hint(0, Some(60)));
        }
        headers.insert("date", HeaderValue::from_static("not a date"));
        assert_eq!(
            read_quota_hint(&headers, at(NOV_14_2023 - 5)),
            hint(0, Some(5))
        );
    }

    #[test]
    fn malformed_fields_are_ignored() {
        for value in [
            "",
            "\"default\"",
            "\"default\";t=3",
            "\"default\";r=-1",
            "\"default\";r=1.5",
            "\"default\";r=\"5\"",
            "\"default\";r=5;t=-1",
            "\"default\";r=1234567890123456",
            "\"default\";r=5,",
            "\"default\";r=5, ",
            "\"default\";r=5 \"other\";r=1",
            "\"default;r=5",
            "\"default\";R=5",
            "(\"a\" \"b\");r=5",
            "r=5, t=3",
            "limit=100, remaining=50, reset=30",
            "\"default\";r=5, \"other\"",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(RATELIMIT, HeaderValue::from_str(value).unwrap());
            assert_eq!(
                read_quota_hint(&headers, SystemTime::now()),
                None,
                "{value:?}"
            );
        }
        for value in ["", "-1", "+1", "1.0", "1 2", "many", "99999999999999999999"] {
            let mut headers = HeaderMap::new();
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from_str(value).unwrap());
            assert_eq!(
                read_quota_hint(&headers, SystemTime::now()),
                None,
                "{value:?}"
            );
        }
        assert_eq!(
            read(&[
                ("x-ratelimit-remaining", "4"),
                ("x-ratelimit-reset", "soon")
            ]),
            hint(4, None)
        );
    }

    #[test]
    fn stated_rate() {
        assert_eq!(read_stated_rate(&map(&[])), None);
        let policy = |v: &'static str| read_stated_rate(&map(&[("ratelimit-policy", v)]));
        assert_eq!(policy("\"default\";q=50;w=1"), Some(50.0));
        // Windows longer than a day are not believed.
        assert_eq!(policy("\"x\";q=1;w=999999999999999"), None);
        assert_eq!(policy("\"week\";q=100;w=604800"), None);
        assert_eq!(policy("\"day\";q=86400;w=86400"), Some(1.0));
        assert_eq!(policy("\"x\";q=1;w=86401, \"b\";q=10;w=1"), Some(10.0));
        assert_eq!(
            policy("\"a\";q=100;w=60, \"b\";q=10;w=1"),
            Some(100.0 / 60.0)
        );
        assert_eq!(policy("\"a\";q=0;w=60"), None);
        assert_eq!(policy("\"a\";q=10"), None);
        assert_eq!(policy("\"a\";q=10;w=1, garbage;;"), None);
    }

    #[test]
    fn emitted_values() {
        assert_eq!(
            policy_value("default", 100, 60, "requests"),
            "\"default\";q=100;w=60"
        );
        assert_eq!(
            policy_value("per-user_1", 5, 1, "requests"),
            "\"per-user_1\";q=5;w=1"
        );
        assert_eq!(
            ratelimit_value("default", 0, Duration::from_millis(2001)),
            "\"default\";r=0;t=3"
        );
        for bad in ["", "a b", "\"x\"", "a\\b", "é", "a\r\nb", "a,b;c=d"] {
            assert_eq!(
                ratelimit_value(bad, 1, Duration::ZERO),
                "\"default\";r=1;t=0"
            );
        }
        assert_eq!(
            policy_value("default", u64::MAX, u64::MAX, "requests"),
            "\"default\";q=999999999999999;w=999999999999999"
        );
        assert_eq!(
            ratelimit_value("default", u64::MAX, Duration::MAX),
            "\"default\";r=999999999999999;t=999999999999999"
        );
    }

    #[test]
    fn round_trip() {
        let mut headers = HeaderMap::new();
        headers.insert("ratelimit-policy", policy_value("api", 100, 60, "requests"));
        headers.insert(
            "ratelimit",
            ratelimit_value("api", 42, Duration::from_millis(1500)),
        );
        assert_eq!(
            read_quota_hint(&headers, SystemTime::now()),
            hint(42, Some(2))
        );
    }

    proptest! {
        #[test]
        fn emit_then_read(name in ".*", remaining: u64, secs: u64, nanos in 0..1_000_000_000u32) {
            let reset = Duration::new(secs, nanos);
            let mut headers = HeaderMap::new();
            headers.insert("ratelimit", ratelimit_value(&name, remaining, reset));
            let read = read_quota_hint(&headers, SystemTime::now());
            let expected = ceil_secs(reset).min(SF_INTEGER_MAX);
            prop_assert_eq!(read, hint(remaining.min(SF_INTEGER_MAX), Some(expected)));
            // The policy value is always valid too.
            let _ = policy_value(&name, remaining, secs, &name);
        }

        #[test]
        fn never_panics(fields in proptest::collection::vec((0..6usize, proptest::collection::vec(any::<u8>(), 0..48)), 0..6), now: u64) {
            const NAMES: [&str; 6] =
                [RATELIMIT, RATELIMIT_REMAINING, RATELIMIT_RESET, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, "date"];
            let mut headers = HeaderMap::new();
            for (name, bytes) in fields {
                if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                    headers.append(NAMES[name], value);
                }
            }
            let now = UNIX_EPOCH.checked_add(Duration::from_secs(now)).unwrap_or(UNIX_EPOCH);
            let _ = read_quota_hint(&headers, now);
        }
    }
}
