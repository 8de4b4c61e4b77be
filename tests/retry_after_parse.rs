//! Property tests for `Retry-After` parsing: no input makes it panic, and delta-seconds
//! parse to exactly the number written.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{DATE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use tower_throttle::headers::{
    parse_retry_after, read_retry_after, RetryAfterError, MAX_PARSED_WAIT,
};

fn time(secs: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))
        .unwrap_or(UNIX_EPOCH)
}

/// Every result respects the documented bounds.
fn check(result: Result<Duration, RetryAfterError>) -> Result<(), TestCaseError> {
    if let Ok(wait) = result {
        prop_assert!(wait <= MAX_PARSED_WAIT);
    }
    Ok(())
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), now: u64) {
        let now = time(now);
        check(parse_retry_after(&bytes, now))?;
    }

    #[test]
    fn arbitrary_strings_never_panic(s in ".*", now: u64) {
        check(parse_retry_after(s.as_bytes(), time(now)))?;
    }

    #[test]
    fn date_shaped_strings_never_panic(
        s in "[A-Za-z]{3,9},? [0-9 ]{1,2}[- ][A-Za-z]{3}[- ][0-9]{2,4} [0-9]{2}:[0-9]{2}:[0-9]{2}( GMT| [0-9]{4})?",
        now: u64,
    ) {
        check(parse_retry_after(s.as_bytes(), time(now)))?;
    }

    #[test]
    fn formatted_dates_round_trip(at in 0u64..253_402_300_800, before in 0u64..100_000_000) {
        let date = httpdate::fmt_http_date(time(at));
        let now = time(at.saturating_sub(before));
        let expected = Duration::from_secs(at - at.saturating_sub(before));
        let expected = if expected > MAX_PARSED_WAIT {
            Err(RetryAfterError::TooLong)
        } else {
            Ok(expected)
        };
        prop_assert_eq!(parse_retry_after(date.as_bytes(), now), expected);
    }

    #[test]
    fn all_digit_input_is_its_number(digits in "[0-9]{1,40}", now: u64) {
        let result = parse_retry_after(digits.as_bytes(), time(now));
        match digits.parse::<u128>().ok().filter(|&n| n <= u128::from(MAX_PARSED_WAIT.as_secs())) {
            Some(n) => prop_assert_eq!(result, Ok(Duration::from_secs(n as u64))),
            None => prop_assert_eq!(result, Err(RetryAfterError::TooLong)),
        }
    }

    #[test]
    fn any_ok_for_digits_equals_the_number(digits in "[0-9]{1,25}") {
        if let Ok(wait) = parse_retry_after(digits.as_bytes(), SystemTime::now()) {
            prop_assert_eq!(u128::from(wait.as_secs()), digits.parse::<u128>().unwrap());
            prop_assert_eq!(wait.subsec_nanos(), 0);
        }
    }

    #[test]
    fn header_maps_never_panic(
        values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
        date in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        now: u64,
    ) {
        let mut headers = HeaderMap::new();
        for bytes in &values {
            if let Ok(value) = HeaderValue::from_bytes(bytes) {
                headers.append(RETRY_AFTER, value);
            }
        }
        if let Some(Ok(value)) = date.map(|d| HeaderValue::from_bytes(&d)) {
            headers.insert(DATE, value);
        }
        match read_retry_after(&headers, time(now)) {
            Ok(Some(wait)) => prop_assert!(wait <= MAX_PARSED_WAIT),
            Ok(None) => prop_assert!(headers.get(RETRY_AFTER).is_none()),
            Err(_) => prop_assert!(headers.get(RETRY_AFTER).is_some()),
        }
    }
}
