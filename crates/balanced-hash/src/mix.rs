//! Seeded 64-bit key mixing and Lemire range reduction.

use crate::murmur3::fmix64;

/// Golden-ratio increment (2^64 / φ), used to derive independent sub-seeds.
pub(crate) const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
/// Constant separating the additive part of a seed from its multiplier.
const SEED_XOR: u64 = 0x6a09_e667_f3bc_c909;

/// Maps a hash to `0..n` with Lemire's multiply-shift: `(hash · n) >> 64`.
///
/// Unlike `hash % n` it needs no division, and it is fair for every `n`: each
/// output receives either `⌊2^64/n⌋` or `⌈2^64/n⌉` of the 2^64 inputs. It uses
/// the *high* bits of `hash`, so the hash must be well mixed (ours are). It
/// must never be applied to raw ids: `reduce(id, n)` sends every small id to 0.
///
/// Returns 0 when `n` is 0 (there is no valid bucket then; bucketers reject
/// `n = 0` at construction).
///
/// ```
/// use balanced_hash::reduce;
/// assert_eq!(reduce(0, 10), 0);
/// assert_eq!(reduce(u64::MAX, 10), 9);
/// assert_eq!(reduce(1 << 63, 10), 5);
/// ```
#[inline]
#[must_use]
pub const fn reduce(hash: u64, n: u32) -> u32 {
    // The product is < 2^64 · n, so the shifted value is < n ≤ u32::MAX: the cast is lossless.
    ((hash as u128 * n as u128) >> 64) as u32
}

/// A seed expanded into the two words `hash_u64` uses (multiplier, xor mask),
/// computed once per bucketer instead of once per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeededMix {
    mul: u64,
    xor: u64,
}

impl SeededMix {
    #[inline]
    pub(crate) const fn new(seed: u64) -> Self {
        Self {
            mul: fmix64(seed ^ GOLDEN) | 1,
            xor: fmix64(seed.wrapping_add(SEED_XOR)),
        }
    }

    #[inline]
    pub(crate) const fn hash(&self, key: u64) -> u64 {
        fmix64(key.wrapping_mul(self.mul) ^ self.xor)
    }
}

/// Seeded hash of a `u64` key: `fmix64((key · m) ⊕ a)` with
/// `m = fmix64(seed ⊕ 0x9e3779b97f4a7c15) | 1` and
/// `a = fmix64(seed + 0x6a09e667f3bcc909)` (wrapping arithmetic).
///
/// For a fixed seed it is a bijection on `u64` (odd multiply, xor and
/// `fmix64` are all invertible), so distinct keys never collide before range
/// reduction. Different seeds differ in both the multiplier and the mask, so a
/// structured key set (sequential ids) does not map one seed's hashes onto a
/// shifted copy of another's — what d-choice needs from its candidate hashes.
/// Portable: pure integer arithmetic, same result everywhere.
///
/// ```
/// use balanced_hash::hash_u64;
/// assert_eq!(hash_u64(42, 7), hash_u64(42, 7));
/// assert_ne!(hash_u64(42, 7), hash_u64(42, 8));
/// assert_ne!(hash_u64(42, 7), hash_u64(43, 7));
/// ```
#[inline]
#[must_use]
pub const fn hash_u64(key: u64, seed: u64) -> u64 {
    SeededMix::new(seed).hash(key)
}
