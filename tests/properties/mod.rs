//! Properties of the parsers of untrusted input, over arbitrary bytes. Each function panics
//! when an invariant fails: no panic inside the crate, no overflow, and parse → emit → parse
//! gives back what the first parse read.
//!
//! They are run twice: as proptest properties by `tests/fuzz_properties.rs` (on the stable
//! toolchain, in every `cargo test`), and as cargo-fuzz targets by `fuzz/` (libFuzzer, on
//! nightly), which include this file.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderName, DATE, FORWARDED, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Request};
use tower_throttle::extract::{ClientIp, KeyExtractor, ProxyHeaders};
use tower_throttle::headers::{
    parse_duration, parse_retry_after, read_provider_limits, read_quota_hint, read_retry_after,
    read_stated_rate, RetryAfterError, LONGEST_WINDOW, MAX_PARSED_WAIT,
};
use tower_throttle::Resource;

/// The largest integer a structured field carries (RFC 9651 §3.3.1).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// The last instant an HTTP-date names, `Fri, 31 Dec 9999 23:59:59 GMT`, in seconds of the
/// Unix epoch.
const LAST_HTTP_DATE_SECS: u64 = 253_402_300_799;

/// Reads fuzz input: numbers from the front, then lines.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// A whole-second instant between 1970 and 2106.
    fn now(&mut self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(u64::from(self.u32()))
    }

    /// The rest, split at `\n`.
    fn lines(self) -> impl Iterator<Item = &'a [u8]> {
        self.0.split(|&b| b == b'\n')
    }
}

/// `headers::parse_retry_after` on any bytes: never more than [`MAX_PARSED_WAIT`]; a wait read
/// reads the same once written as delta-seconds and as an HTTP-date.
pub fn retry_after_parse(data: &[u8]) {
    let mut input = Input(data);
    let now = input.now();
    let value = input.0;
    let parsed = parse_retry_after(value, now);
    let Ok(wait) = parsed else { return };
    assert!(wait <= MAX_PARSED_WAIT, "{wait:?} from {value:?}");
    assert_eq!(wait.subsec_nanos(), 0, "whole seconds from {value:?}");
    let delta = wait.as_secs().to_string();
    assert_eq!(parse_retry_after(delta.as_bytes(), now), Ok(wait));
    let date = httpdate::fmt_http_date(now + wait);
    assert_eq!(parse_retry_after(date.as_bytes(), now), Ok(wait));
}

/// `headers::read_retry_after` on any `Retry-After` and `Date` lines: the answer is the
/// largest valid wait (a too-long one wins); written back as a `Date` and an HTTP-date
/// `Retry-After`, it reads the same.
pub fn retry_after_from_headers(data: &[u8]) {
    let mut input = Input(data);
    let now = input.now();
    let mut headers = HeaderMap::new();
    for line in input.lines() {
        let Some((&kind, value)) = line.split_first() else {
            continue;
        };
        let name = if kind % 4 == 0 { DATE } else { RETRY_AFTER };
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
    let answer = read_retry_after(&headers, now);
    // Each field alone, measured against the reference the function uses.
    let reference = headers
        .get(DATE)
        .and_then(|d| httpdate::parse_http_date(d.to_str().ok()?.trim_matches([' ', '\t'])).ok())
        .unwrap_or(now);
    let each: Vec<_> = headers
        .get_all(RETRY_AFTER)
        .iter()
        .map(|v| parse_retry_after(v.as_bytes(), reference))
        .collect();
    match answer {
        Ok(None) => assert!(each.is_empty()),
        Ok(Some(wait)) => {
            assert!(wait <= MAX_PARSED_WAIT);
            assert_eq!(each.iter().flatten().max(), Some(&wait));
            assert!(!each.contains(&Err(RetryAfterError::TooLong)));
            // Written back as an HTTP-date, when one can name the instant (four-digit years).
            if reference + wait <= UNIX_EPOCH + Duration::from_secs(LAST_HTTP_DATE_SECS) {
                let mut again = HeaderMap::new();
                again.insert(DATE, header(&httpdate::fmt_http_date(reference)));
                again.insert(
                    RETRY_AFTER,
                    header(&httpdate::fmt_http_date(reference + wait)),
                );
                // Any local clock: the Date field is the reference.
                assert_eq!(read_retry_after(&again, UNIX_EPOCH), Ok(Some(wait)));
            }
        }
        Err(RetryAfterError::TooLong) => {
            assert!(each.contains(&Err(RetryAfterError::TooLong)));
        }
        Err(e) => assert!(each.iter().all(|r| r.is_err()) && each.first() == Some(&Err(e))),
    }
}

/// `headers::read_quota_hint` on any rate-limit field lines: a hint read is written back as
/// a `RateLimit` field and reads the same.
pub fn ratelimit_field(data: &[u8]) {
    const NAMES: [&str; 7] = [
        "ratelimit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "date",
        "ratelimit-policy",
    ];
    let mut input = Input(data);
    let now = input.now();
    let mut headers = HeaderMap::new();
    for line in input.lines() {
        let Some((&kind, value)) = line.split_first() else {
            continue;
        };
        if usize::from(kind) >= NAMES.len() {
            continue;
        }
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(HeaderName::from_static(NAMES[usize::from(kind)]), value);
        }
    }
    // A stated rate is at least one per window of at most a day.
    if let Some(rate) = read_stated_rate(&headers) {
        assert!(
            rate.is_finite() && rate * LONGEST_WINDOW.as_secs_f64() >= 1.0,
            "{rate}"
        );
    }
    let Some(hint) = read_quota_hint(&headers, now) else {
        return;
    };
    let reset = hint.reset.unwrap_or(Duration::ZERO);
    assert_eq!(reset.subsec_nanos(), 0, "whole seconds");
    let (remaining, reset) = (
        hint.remaining.min(SF_INTEGER_MAX),
        reset.as_secs().min(SF_INTEGER_MAX),
    );
    let mut again = HeaderMap::new();
    again.insert(
        "ratelimit",
        header(&format!("\"p\";r={remaining};t={reset}")),
    );
    let back = read_quota_hint(&again, now).expect("a written field reads back");
    assert_eq!(back.remaining, remaining);
    assert_eq!(back.reset, Some(Duration::from_secs(reset)));
}

/// `headers::parse_duration` on any bytes: at most `i64::MAX` nanoseconds; a duration read
/// reads the same written back in nanoseconds, in seconds with a fraction, and in hours,
/// minutes and seconds as Go writes it.
pub fn provider_duration(data: &[u8]) {
    let Some(d) = parse_duration(data) else {
        return;
    };
    assert!(d.as_nanos() <= i64::MAX as u128, "{d:?} from {data:?}");
    let nanos = d.as_nanos();
    let (h, m) = (nanos / 3_600_000_000_000, nanos / 60_000_000_000 % 60);
    let (s, frac) = (nanos / 1_000_000_000 % 60, nanos % 1_000_000_000);
    for written in [
        format!("{nanos}ns"),
        format!("{}.{:09}s", d.as_secs(), d.subsec_nanos()),
        format!("{h}h{m}m{s}.{frac:09}s"),
    ] {
        assert_eq!(parse_duration(written.as_bytes()), Some(d), "{written}");
    }
}

/// The fields `provider_limits` reads lines of: the byte after `\n` picks one, from `a`.
pub const PROVIDER_FIELDS: [&str; 13] = [
    "date",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
];

/// `headers::read_provider_limits` on any provider field lines: at most one hint per
/// resource, in order, none empty, no reset past [`LONGEST_WINDOW`]; written back as
/// OpenAI-style fields, the hints read the same.
pub fn provider_limits(data: &[u8]) {
    let mut input = Input(data);
    let now = input.now();
    let mut headers = HeaderMap::new();
    for line in input.lines() {
        let Some((&kind, value)) = line.split_first() else {
            continue;
        };
        let Some(name) = PROVIDER_FIELDS.get(usize::from(kind.wrapping_sub(b'a'))) else {
            continue;
        };
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    let hints = read_provider_limits(&headers, now);
    assert!(hints.len() <= 4);
    let order = |r: &Resource| {
        [
            Resource::REQUESTS,
            Resource::TOKENS,
            Resource::INPUT_TOKENS,
            Resource::OUTPUT_TOKENS,
        ]
        .iter()
        .position(|x| x == r)
    };
    assert!(hints
        .windows(2)
        .all(|w| order(&w[0].resource) < order(&w[1].resource)));
    let mut again = HeaderMap::new();
    for hint in &hints {
        assert!(hint.limit.is_some() || hint.remaining.is_some() || hint.reset.is_some());
        assert!(hint.reset.is_none_or(|r| r <= LONGEST_WINDOW), "{hint:?}");
        let name = hint.resource.name();
        let mut put = |part: &str, value: String| {
            let field = HeaderName::from_bytes(format!("x-ratelimit-{part}-{name}").as_bytes());
            again.insert(field.unwrap(), header(&value));
        };
        if let Some(limit) = hint.limit {
            put("limit", limit.to_string());
        }
        if let Some(remaining) = hint.remaining {
            put("remaining", remaining.to_string());
        }
        if let Some(reset) = hint.reset {
            put("reset", format!("{}ns", reset.as_nanos()));
        }
    }
    assert_eq!(read_provider_limits(&again, now), hints);
}

/// The peers a request may come from: trusted proxies and outsiders, both families.
const PEERS: [&str; 6] = [
    "10.1.2.3:1",
    "203.0.113.5:2",
    "[fd00::1]:3",
    "[2001:db8::1]:4",
    "[::ffff:10.0.0.1]:5",
    "192.0.2.7:6",
];

/// `ClientIp` on any `X-Forwarded-For` / `Forwarded` lines: always a key; the peer itself
/// when the peer is not trusted; a client read from the fields is read again from a field
/// that names only it, in either syntax; and whatever a client writes in a line, the hop a
/// trusted proxy appends to that line is the client.
pub fn client_ip(data: &[u8]) {
    let mut input = Input(data);
    let peer: SocketAddr = PEERS[usize::from(input.byte()) % PEERS.len()]
        .parse()
        .unwrap();
    let which = match input.byte() % 3 {
        0 => ProxyHeaders::XForwardedFor,
        1 => ProxyHeaders::Forwarded,
        _ => ProxyHeaders::Both,
    };
    let (v4, v6) = (input.byte(), input.byte());
    let mut req = Request::new(());
    req.extensions_mut().insert(peer);
    for line in input.lines() {
        let Some((&kind, value)) = line.split_first() else {
            continue;
        };
        let name = if kind % 2 == 0 {
            HeaderName::from_static("x-forwarded-for")
        } else {
            FORWARDED
        };
        if let Ok(value) = HeaderValue::from_bytes(value) {
            req.headers_mut().append(name.clone(), value);
        }
        appended_hop_is_the_client(name, value);
    }
    let trusted = ["10.0.0.0/8", "fd00::/8", "192.0.2.7"];
    let extractor = ClientIp::trusting(trusted).unwrap().headers(which);
    let client = extractor.client_ip(&req).expect("a peer gives a key");
    let peer_ip = peer.ip().to_canonical();
    let peer_trusted = matches!(peer_ip, IpAddr::V4(ip) if ip.octets()[0] == 10 || ip.octets() == [192, 0, 2, 7])
        || matches!(peer_ip, IpAddr::V6(ip) if ip.segments()[0] >> 8 == 0xfd);
    if !peer_trusted {
        assert_eq!(client, peer_ip);
    }
    // Grouped keys never panic, whatever the prefix lengths.
    let grouped = extractor.clone().ipv4_prefix(v4).ipv6_prefix(v6);
    assert!(grouped.extract(&req).is_some());
    if client == peer_ip {
        return;
    }
    // Written back as a field that names only the client, from the same proxy.
    let node = match client {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("\"[{ip}]\""),
    };
    for (name, value, headers) in [
        (
            "x-forwarded-for",
            client.to_string(),
            ProxyHeaders::XForwardedFor,
        ),
        ("forwarded", format!("for={node}"), ProxyHeaders::Forwarded),
    ] {
        let mut again = Request::new(());
        again.extensions_mut().insert(peer);
        again
            .headers_mut()
            .insert(HeaderName::from_static(name), header(&value));
        let extractor = ClientIp::trusting(trusted).unwrap().headers(headers);
        assert_eq!(extractor.client_ip(&again), Some(client), "{name}: {value}");
    }
}

/// A trusted proxy appends the address it saw to the client's `line`, on the same line (as
/// nginx's `"$http_forwarded, for=$remote_addr"`): that address is the client.
fn appended_hop_is_the_client(name: HeaderName, line: &[u8]) {
    let appended: &[(&[u8], IpAddr)] = if name == FORWARDED {
        &[
            (b", for=198.51.100.9", IpAddr::from([198, 51, 100, 9])),
            (
                b", for=\"[2001:db8::9]:443\"",
                IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 9]),
            ),
        ]
    } else {
        &[(b", 198.51.100.9", IpAddr::from([198, 51, 100, 9]))]
    };
    let headers = if name == FORWARDED {
        ProxyHeaders::Forwarded
    } else {
        ProxyHeaders::XForwardedFor
    };
    let extractor = ClientIp::trusting(["10.0.0.0/8"]).unwrap().headers(headers);
    for (tail, client) in appended {
        let Ok(value) = HeaderValue::from_bytes(&[line, tail].concat()) else {
            return;
        };
        let mut req = Request::new(());
        req.extensions_mut()
            .insert("10.0.0.1:1".parse::<SocketAddr>().unwrap());
        req.headers_mut().insert(name.clone(), value);
        assert_eq!(extractor.client_ip(&req), Some(*client), "{name}: {line:?}");
    }
}

fn header(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap()
}
