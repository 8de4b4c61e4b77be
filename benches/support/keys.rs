//! The keys of the keyed benchmarks, in one fixed pseudo-random order for every bench that
//! uses them (`keyed.rs`, `instructions.rs`).

/// `n` keys in a fixed pseudo-random order (a full-period LCG over a power of two, masked).
pub(crate) fn keys(n: u64) -> Vec<u64> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            x >> 1
        })
        .collect()
}
