//! Sign hash `σ(key) ∈ {−1, +1}` for count-sketch style estimators.

use crate::mix::SeededMix;

/// Domain separator: a `SignHash` and a bucketer built from the same seed still
/// use unrelated hash functions.
const SIGN_DOMAIN: u64 = 0x5349_474e_5f48_4153; // "SIGN_HAS"

/// A seeded sign hash `σ(key) ∈ {−1, +1}`.
///
/// `σ` is the top bit of `hash_u64(key, seed ⊕ "SIGN_HAS")`: the seed is
/// domain-separated, so even a `SignHash` and a bucketer built from the same
/// seed are independent. Still, give it its own seed.
///
/// ```
/// use balanced_hash::SignHash;
/// let sigma = SignHash::new(99);
/// let s = sigma.sign(12345);
/// assert!(s == 1.0 || s == -1.0);
/// assert_eq!(s, sigma.sign(12345));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignHash {
    seed: u64,
    mix: SeededMix,
}

impl SignHash {
    /// A sign hash with the given seed.
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self {
            seed,
            mix: SeededMix::new(seed ^ SIGN_DOMAIN),
        }
    }

    /// The seed this sign hash was built with.
    #[must_use]
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// `true` when `σ(key) = −1`.
    #[inline]
    #[must_use]
    pub const fn is_negative(&self, key: u64) -> bool {
        self.mix.hash(key) >> 63 == 1
    }

    /// `σ(key)`: exactly `+1.0` or `-1.0`.
    #[inline]
    #[must_use]
    pub const fn sign(&self, key: u64) -> f32 {
        if self.is_negative(key) { -1.0 } else { 1.0 }
    }
}
