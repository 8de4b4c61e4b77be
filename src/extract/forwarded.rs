//! The hops of `X-Forwarded-For` and `Forwarded` (RFC 7239), client first.
//!
//! Every line of a field is read, in order, as one list. A hop that is not an IP address
//! (`unknown`, an obfuscated name, garbage, a malformed `Forwarded` element or one without
//! `for=`) is [`Hop::Bad`]: the caller decides what an unreadable hop means.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::header::FORWARDED;
use http::{HeaderMap, HeaderValue};

const X_FORWARDED_FOR: &str = "x-forwarded-for";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    Ip(IpAddr),
    Bad,
}

/// The hops of every `X-Forwarded-For` line; `None` when there is no such field.
pub(crate) fn x_forwarded_for(headers: &HeaderMap) -> Option<Vec<Hop>> {
    let mut lines = headers.get_all(X_FORWARDED_FOR).iter().peekable();
    lines.peek()?;
    let mut hops = Vec::new();
    for line in lines {
        hops.extend(text(line).split(',').map(node));
    }
    Some(hops)
}

/// The `for=` node of every element of every `Forwarded` line; `None` when there is no
/// such field.
///
/// A malformed element (a pair without `=`, a name that is not a token, a value that is
/// neither a token nor a closed quoted string, two `for=`) is a bad hop. A quote left open
/// does not swallow the rest of its line: a line with one is split at every comma, so the
/// elements a proxy appended after a client's unclosed quote are still read as written.
pub(crate) fn forwarded(headers: &HeaderMap) -> Option<Vec<Hop>> {
    let mut lines = headers.get_all(FORWARDED).iter().peekable();
    lines.peek()?;
    let mut hops = Vec::new();
    for line in lines {
        let line = text(line);
        match split_unquoted(&line, b',') {
            Some(elements) => hops.extend(elements.into_iter().map(element)),
            None => hops.extend(line.split(',').map(element)),
        }
    }
    Some(hops)
}

/// The `for=` node of one element, or [`Hop::Bad`] when the element is malformed or has
/// none.
fn element(s: &str) -> Hop {
    let Some(pairs) = split_unquoted(s, b';') else {
        return Hop::Bad;
    };
    let mut node = None;
    for pair in pairs {
        let pair = pair.trim_matches(OWS);
        if pair.is_empty() {
            continue;
        }
        let Some((name, value)) = pair.split_once('=') else {
            return Hop::Bad;
        };
        let (name, Some(value)) = (name.trim_matches(OWS), value_of(value.trim_matches(OWS)))
        else {
            return Hop::Bad;
        };
        if !is_token(name) {
            return Hop::Bad;
        }
        if name.eq_ignore_ascii_case("for") && node.replace(value).is_some() {
            return Hop::Bad;
        }
    }
    node.map_or(Hop::Bad, |v| self::node(&v))
}

/// Optional whitespace around a pair, its name or its value.
const OWS: [char; 2] = [' ', '\t'];

/// Whether `s` is an RFC 9110 token.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A line as text: bytes that are not UTF-8 become U+FFFD, which no hop contains, so that
/// what a proxy appends after a client's non-ASCII bytes is still read.
fn text(line: &HeaderValue) -> Cow<'_, str> {
    String::from_utf8_lossy(line.as_bytes())
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]:4711`,
/// `[2001:db8::1]` or `2001:db8::1`.
fn node(s: &str) -> Hop {
    let s = s.trim_matches(|c| c == ' ' || c == '\t');
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Hop::Ip(ip);
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Hop::Ip(addr.ip());
    }
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .and_then(|s| s.parse::<IpAddr>().ok())
        .map_or(Hop::Bad, Hop::Ip)
}

/// `s` split at `sep`, except inside quoted strings; `None` when a quoted string is left open.
fn split_unquoted(s: &str, sep: u8) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == sep && !quoted => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    (!quoted).then_some(parts)
}

/// A value: a bare word, or the content of a closed quoted string; `None` for anything else
/// (empty, a stray or unclosed quote, whitespace inside a bare word).
fn value_of(s: &str) -> Option<Cow<'_, str>> {
    let Some(quoted) = s.strip_prefix('"') else {
        let bare = !s.is_empty() && !s.contains(|c: char| c == '"' || OWS.contains(&c));
        return bare.then_some(Cow::Borrowed(s));
    };
    let inner = quoted.strip_suffix('"')?;
    if !inner.contains(['\\', '"']) {
        return Some(Cow::Borrowed(inner));
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Hop {
        Hop::Ip(s.parse().unwrap())
    }

    fn headers(name: &'static str, lines: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(name, HeaderValue::from_static(l));
        }
        h
    }

    #[test]
    fn xff() {
        assert_eq!(x_forwarded_for(&HeaderMap::new()), None);
        let h = headers(
            "x-forwarded-for",
            &[
                "203.0.113.7, 10.0.0.1",
                "[2001:db8::1]:80,192.0.2.1:4711 ,unknown,",
            ],
        );
        assert_eq!(
            x_forwarded_for(&h).unwrap(),
            [
                ip("203.0.113.7"),
                ip("10.0.0.1"),
                ip("2001:db8::1"),
                ip("192.0.2.1"),
                Hop::Bad,
                Hop::Bad
            ]
        );
    }

    #[test]
    fn forwarded_elements() {
        let h = headers(
            "forwarded",
            &[
                "for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\"",
                "proto=https, for=unknown, for=\"_hidden\", for=\"198.51.100.17\";by=\"a,b\"",
            ],
        );
        assert_eq!(
            forwarded(&h).unwrap(),
            [
                ip("192.0.2.60"),
                ip("2001:db8:cafe::17"),
                Hop::Bad,
                Hop::Bad,
                Hop::Bad,
                ip("198.51.100.17"),
            ]
        );
        let h = headers("forwarded", &["for=\"1.2.3.4", "for=\"1\\.2.3.4\""]);
        assert_eq!(forwarded(&h).unwrap(), [Hop::Bad, ip("1.2.3.4")]);
    }

    #[test]
    fn malformed_elements_are_bad_hops() {
        for line in [
            "for=1.2.3.4;junk",
            "for=1.2.3.4;=x",
            "for=1.2.3.4;x=",
            "for=1.2.3.4;for=5.6.7.8",
            "for=1.2.3.4 x",
            "for=1.2.3.4;x=\"a\"b",
            "for=\"1.2.3.4\"x",
            "for=\"1.2.3.4\\\"",
            "for=1.2\"3.4",
            "f(r)=1.2.3.4",
            "for=\"",
            "",
        ] {
            let h = headers("forwarded", &[Box::leak(line.into())]);
            assert_eq!(forwarded(&h).unwrap(), [Hop::Bad], "{line:?}");
        }
        let h = headers("forwarded", &[" for=1.2.3.4 ; ;proto=https "]);
        assert_eq!(forwarded(&h).unwrap(), [ip("1.2.3.4")]);
    }

    #[test]
    fn an_unclosed_quote_does_not_swallow_what_a_proxy_appends() {
        let h = headers("forwarded", &["for=6.6.6.6;x=\", for=203.0.113.5"]);
        assert_eq!(forwarded(&h).unwrap(), [Hop::Bad, ip("203.0.113.5")]);
        let h = headers("forwarded", &["for=6.6.6.6;x=\"\\, for=203.0.113.5"]);
        assert_eq!(forwarded(&h).unwrap(), [Hop::Bad, ip("203.0.113.5")]);
        let h = headers("forwarded", &["for=6.6.6.6;x=\", for=\"203.0.113.5\""]);
        assert_eq!(forwarded(&h).unwrap(), [Hop::Bad, ip("203.0.113.5")]);
    }

    #[test]
    fn non_ascii_hops_are_bad_and_the_rest_of_their_line_is_read() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"1.2.3.4\xff, 203.0.113.5").unwrap(),
        );
        h.insert(
            "forwarded",
            HeaderValue::from_bytes(b"for=\xfe, for=203.0.113.5").unwrap(),
        );
        assert_eq!(x_forwarded_for(&h).unwrap(), [Hop::Bad, ip("203.0.113.5")]);
        assert_eq!(forwarded(&h).unwrap(), [Hop::Bad, ip("203.0.113.5")]);
    }
}
