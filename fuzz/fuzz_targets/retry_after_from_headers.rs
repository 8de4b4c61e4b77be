#![no_main]

#[path = "../../tests/properties/mod.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::retry_after_from_headers(data));
