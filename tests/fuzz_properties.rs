//! The fuzz targets of `fuzz/` as proptest properties, so the stable toolchain checks them in
//! every `cargo test`: arbitrary bytes, mixed with fragments of the syntax each parser reads
//! so that random input also reaches past the first syntax check.

mod properties;

use proptest::prelude::*;

/// Inputs built from four random bytes (read as the time by every property), then fragments
/// of the syntax, with a random byte now and then.
fn input(fragments: &'static [&'static str], pieces: usize) -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        1 => any::<u8>().prop_map(|b| vec![b]),
        8 => proptest::sample::select(fragments).prop_map(|s| s.as_bytes().to_vec()),
    ];
    (
        proptest::collection::vec(any::<u8>(), 4),
        proptest::collection::vec(piece, 0..=pieces),
    )
        .prop_map(|(now, pieces)| [now, pieces.concat()].concat())
}

/// One `Retry-After` value: short runs of these.
const RETRY_AFTER_VALUE: &[&str] = &[
    "0",
    "1",
    "9",
    "120",
    " ",
    "\t",
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT",
    "Sun Nov  6 08:49:37 1994",
    "Thu, 01 Jan 1970 00:00:10 GMT",
    "99999999999999999999",
    "31536000",
    "31536001",
];

/// `Retry-After` and `Date` lines.
const RETRY_AFTER: &[&str] = &[
    "\n\x01",
    "\n\x00",
    "\n\x01120",
    "\n\x00Sun, 06 Nov 1994 08:49:37 GMT",
    "0",
    "1",
    "9",
    "120",
    " ",
    "\t",
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT",
    "Sun Nov  6 08:49:37 1994",
    "Thu, 01 Jan 1970 00:00:10 GMT",
    "Mon, ",
    "Feb ",
    "2030",
    " 23:59:60 ",
    "GMT",
    "99999999999999999999",
    "31536000",
    "31536001",
];

/// Rate-limit field lines (the byte after `\n` picks the field).
const RATELIMIT: &[&str] = &[
    "\n\x00\"default\";r=5;t=3",
    "\n\x00",
    "\n\x01",
    "\n\x02",
    "\n\x03",
    "\n\x04",
    "\n\x05",
    "\n\x09",
    "\n\x0312",
    "\n\x041700000000",
    "\"default\"",
    ";r=",
    ";t=",
    "0",
    "5",
    "1700000000",
    "999999999999999",
    ";x=@",
    "%\"caf%c3%a9\"",
    ":aGk=:",
    "?1",
    ", ",
    "1.5",
    "-",
    "tok",
    "Tue, 14 Nov 2023 22:13:20 GMT",
];

/// Go-style durations.
const DURATION: &[&str] = &[
    "0",
    "1",
    "59",
    ".",
    "52",
    "h",
    "m",
    "s",
    "ms",
    "us",
    "µs",
    "ns",
    "9223372036854775807",
    "9223372036854775808",
    "-",
    "+",
    " ",
];

/// Provider field lines (the letter after `\n` picks the field, `a` is `Date`).
const PROVIDER: &[&str] = &[
    "\naTue, 14 Nov 2023 22:13:20 GMT",
    "\nb",
    "\nc",
    "\nd",
    "\ne",
    "\nf",
    "\ng",
    "\nh",
    "\ni",
    "\nj",
    "\nk",
    "\nl",
    "\nm",
    "0",
    "60",
    "150000",
    "6m0s",
    "59.52s",
    "20ms",
    "2023-11-14T22:13:25Z",
    "2023-11-14T23:13:25.5+01:00",
    "2123-11-14T22:13:25Z",
    "18446744073709551616",
    "-1",
];

/// `X-Forwarded-For` (`\n\x00`) and `Forwarded` (`\n\x01`) lines.
const FORWARDED: &[&str] = &[
    "\n\x00",
    "\n\x01",
    "\n\x00203.0.113.9, 10.0.0.7",
    "\n\x01for=\"[2001:db8::7]:80\"",
    "for=",
    "\"[",
    "]\"",
    ";proto=https",
    ", ",
    "203.0.113.9",
    "10.0.0.7",
    "fd00::2",
    "2001:db8::7",
    "::ffff:10.1.1.1",
    ":4711",
    "unknown",
    "_hidden",
    "\\\"",
    "192.0.2.7",
    "\"",
    ";x=\"",
    "\n\x01for=6.6.6.6;x=\"",
    "for=6.6.6.6;for=7.7.7.7",
    ";junk",
    "=",
    "\\",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn retry_after_parse(data in input(RETRY_AFTER_VALUE, 3)) {
        properties::retry_after_parse(&data);
    }

    #[test]
    fn retry_after_from_headers(data in input(RETRY_AFTER, 12)) {
        properties::retry_after_from_headers(&data);
    }

    #[test]
    fn ratelimit_field(data in input(RATELIMIT, 12)) {
        properties::ratelimit_field(&data);
    }

    #[test]
    fn provider_duration(data in input(DURATION, 10)) {
        properties::provider_duration(&data[4..]);
    }

    #[test]
    fn provider_limits(data in input(PROVIDER, 12)) {
        properties::provider_limits(&data);
    }

    #[test]
    fn client_ip(data in input(FORWARDED, 12)) {
        properties::client_ip(&data);
    }
}

/// Inputs the properties must handle, some of them found by fuzzing.
#[test]
fn known_inputs() {
    properties::retry_after_parse(b"\0\0\0\0Sun, 06 Nov 1994 08:49:37 GMT");
    properties::retry_after_parse(b"\xff\xff\xff\xff0005");
    properties::retry_after_from_headers(
        b"\0\0\0\0\n\x00Sun, 06 Nov 1994 08:49:37 GMT\n\x01Sun, 06 Nov 1994 08:50:37 GMT\n\x0130",
    );
    // An invalid field before a too-long one: the too-long one still wins.
    properties::retry_after_from_headers(
        b"\0\0\0\0\n\x01soon\n\x01Sun, 06 Nov 1994 08:50:37 GMT\n\x0130",
    );
    // A `Date` in the last second of 9999 and a delta: the wait ends after the last instant
    // an HTTP-date can name, so it is not written back as one.
    properties::retry_after_from_headers(b"\0\0\0\0\n\x0139662\n<Fri, 31 Dec 9999 23:59:59 GMT");
    properties::ratelimit_field(b"\0\0\0\0\n\x00\"default\";r=5;t=3;acme-reset-at=@1700000000");
    properties::ratelimit_field(b"\0\0\0\0\n\x03999999999999999999\n\x0418446744073709551615");
    properties::provider_duration(b"1h2m3.5s");
    properties::provider_duration(b"9223372036854775807ns");
    properties::provider_limits(b"\0\0\0\0\nb60\nc0\nd6m0s\ne150000\nf0\ng59.52s");
    properties::provider_limits(
        b"\0\0\0\0\naTue, 14 Nov 2023 22:13:20 GMT\nh50\ni0\nj2023-11-14T22:13:25Z",
    );
    properties::client_ip(
        b"\x00\x02\x20\x40\n\x00 6.6.6.6, 203.0.113.9, 10.0.0.7\n\x01for=\"[2001:db8::7]:80\"",
    );
}
