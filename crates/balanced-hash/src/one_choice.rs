//! One-choice bucketing: `reduce(hash_u64(key, seed), B)`.

use crate::{Bucketer, BucketerIdentity, HashError, mix::SeededMix, reduce};

/// One hash, no memory: `bucket(key) = reduce(hash_u64(key, seed), B)`.
///
/// Stateless, so `assign` is `bucket` and `memory_bytes` is 0. With N keys in
/// B buckets (α = N/B) the fullest bucket holds about `α + sqrt(2α·ln B)` keys.
///
/// ```
/// use balanced_hash::{Bucketer, OneChoice};
/// let h = OneChoice::new(1000, 7)?;
/// assert!(h.bucket(123) < 1000);
/// assert_eq!(h.bucket(123), balanced_hash::reduce(balanced_hash::hash_u64(123, 7), 1000));
/// # Ok::<(), balanced_hash::HashError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OneChoice {
    buckets: u32,
    seed: u64,
    mix: SeededMix,
}

impl OneChoice {
    /// A one-choice bucketer over `buckets` buckets.
    ///
    /// # Errors
    /// [`HashError::ZeroBuckets`] when `buckets` is 0.
    pub const fn new(buckets: u32, seed: u64) -> Result<Self, HashError> {
        if buckets == 0 {
            return Err(HashError::ZeroBuckets);
        }
        Ok(Self {
            buckets,
            seed,
            mix: SeededMix::new(seed),
        })
    }

    /// The seed this bucketer was built with.
    #[must_use]
    pub const fn seed(&self) -> u64 {
        self.seed
    }
}

impl Bucketer for OneChoice {
    #[inline]
    fn buckets(&self) -> u32 {
        self.buckets
    }

    #[inline]
    fn bucket(&self, key: u64) -> u32 {
        reduce(self.mix.hash(key), self.buckets)
    }

    fn identity(&self) -> BucketerIdentity {
        BucketerIdentity {
            kind: BucketerIdentity::KIND_ONE_CHOICE,
            choices: 1,
            seed: self.seed,
        }
    }
}
