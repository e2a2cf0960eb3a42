//! Byte/string keys to `u64` ids with `ahash` (fast, in-memory only).

use core::hash::{BuildHasher, Hasher};

/// Fixed `ahash` keys (arbitrary well-mixed constants: xorshift*, golden
/// ratio, splitmix64 multipliers), so results never depend on a runtime RNG.
const AHASH_SEEDS: [u64; 4] = [
    0x2545_f491_4f6c_dd1d,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
];

/// A `u64` id for a byte key (a string feature, a URL, …), via `ahash` with
/// fixed seeds.
///
/// Fast, and stable within one build of one program on one machine — but
/// **not portable**: `ahash` output may change between `ahash` versions, CPU
/// features (AES-NI) and platforms. Use it for in-memory maps only. For ids
/// that are persisted or shared between processes, use the portable
/// [`murmur3::x64_128`](crate::murmur3::x64_128) (e.g. its first word).
///
/// ```
/// use balanced_hash::key_of_bytes;
/// assert_eq!(key_of_bytes(b"user:42"), key_of_bytes(b"user:42"));
/// assert_ne!(key_of_bytes(b"user:42"), key_of_bytes(b"user:43"));
/// ```
#[must_use]
pub fn key_of_bytes(bytes: &[u8]) -> u64 {
    let [k0, k1, k2, k3] = AHASH_SEEDS;
    let mut hasher = ahash::RandomState::with_seeds(k0, k1, k2, k3).build_hasher();
    hasher.write(bytes);
    hasher.finish()
}
