//! The portable generator behind random checkpoints and [`SeededNoise`](crate::SeededNoise):
//! [`Rng`] (xoshiro256++ seeded through splitmix64, Box–Muller from uniforms
//! `((x >> 11) + 0.5)·2⁻⁵³`), defined in [`aria_core::rng`].
//!
//! The stream depends only on the seed, never on the platform or on a dependency's version, so
//! a seed written in a log reproduces the same random weights and the same noise everywhere.

/// splitmix64 step: used for seeding and for hashing seeds together.
pub use aria_core::rng::splitmix64;
pub use aria_core::rng::Rng;

/// FNV-1a hash of a string (to derive a per-tensor seed from its name).
pub fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_str_is_fnv1a() {
        assert_eq!(hash_str(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash_str("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
