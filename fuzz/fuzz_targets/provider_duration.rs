#![no_main]

#[path = "../../tests/properties/mod.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::provider_duration(data));
