//! The hops of `X-Forwarded-For` and `Forwarded` (RFC 7239), client first.
//!
//! Every line of a field is read, in order, as one list. A hop that is not an IP address
//! (`unknown`, an obfuscated name, garbage, a `Forwarded` element without `for=`) is
//! [`Hop::Bad`]: the caller decides what an unreadable hop means.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::header::FORWARDED;
use http::HeaderMap;

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
        match line.to_str() {
            Ok(line) => hops.extend(line.split(',').map(node)),
            Err(_) => hops.push(Hop::Bad),
        }
    }
    Some(hops)
}

/// The `for=` node of every element of every `Forwarded` line; `None` when there is no
/// such field.
pub(crate) fn forwarded(headers: &HeaderMap) -> Option<Vec<Hop>> {
    let mut lines = headers.get_all(FORWARDED).iter().peekable();
    lines.peek()?;
    let mut hops = Vec::new();
    for line in lines {
        let Ok(line) = line.to_str() else {
            hops.push(Hop::Bad);
            continue;
        };
        for element in split_unquoted(line, b',') {
            let node = split_unquoted(element, b';').into_iter().find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| unquote(value.trim()))
            });
            hops.push(node.map_or(Hop::Bad, |v| self::node(&v)));
        }
    }
    Some(hops)
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

/// `s` split at `sep`, except inside quoted strings.
fn split_unquoted(s: &str, sep: u8) -> Vec<&str> {
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
    parts
}

/// A token, or the content of a quoted string.
fn unquote(s: &str) -> Cow<'_, str> {
    match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) if inner.contains('\\') => Cow::Owned(inner.replace('\\', "")),
        Some(inner) => Cow::Borrowed(inner),
        None => Cow::Borrowed(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

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
    fn non_ascii_lines_are_bad_hops() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"1.2.3.4\xff").unwrap(),
        );
        h.insert("forwarded", HeaderValue::from_bytes(b"for=\xfe").unwrap());
        assert_eq!(x_forwarded_for(&h).unwrap(), [Hop::Bad]);
        assert_eq!(forwarded(&h).unwrap(), [Hop::Bad]);
    }
}
