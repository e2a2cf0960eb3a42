//! Feature hashing: a `(field, token)` pair becomes a 64-bit feature key.
//!
//! Keys are MurmurHash3 x64_128 of the token bytes (low 64 bits), seeded with
//! the field index, so the same token in two fields gives two features and the
//! keys are portable across machines and runs. With 64-bit keys collisions are
//! negligible below billions of features; the table row of a key is assigned
//! later from the training vocabulary (see `data::load`).
//!
//! The top 8 bits of a key hold its field index (saturated at 255), so the
//! field of every feature can be recovered from its key alone: DeepFM pools
//! a field's features into one embedding ([`field_of`]). 56 hash bits keep
//! collisions negligible below ~10^8 features per field.

use core::hash::{BuildHasher, Hasher};

/// Seed mixed with the field index so feature keys differ from other uses of the hash.
const FEATURE_SEED: u32 = 0x4241_5349; // "BASI"

/// The feature key of `token` in field `field`.
pub fn feature_key(field: u32, token: &[u8]) -> u64 {
    let h =
        balanced_hash::murmur3::x64_128(token, FEATURE_SEED ^ field.wrapping_mul(0x9E37_79B9))[0];
    (h & FIELD_MASK) | (u64::from(field.min(255)) << 56)
}

/// The hash bits of a key (everything below the field byte).
const FIELD_MASK: u64 = u64::MAX >> 8;

/// The field index stored in a feature key (255 for fields >= 255).
pub fn field_of(key: u64) -> u8 {
    (key >> 56) as u8
}

/// The feature key of an integer token (synthetic ids, libsvm indices).
pub fn feature_key_u64(field: u32, token: u64) -> u64 {
    feature_key(field, &token.to_le_bytes())
}

/// A hasher for maps keyed by feature keys, which are already uniformly mixed:
/// it passes the key through instead of running SipHash again.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u64(&mut self, k: u64) {
        self.0 = k;
    }
}

/// `BuildHasher` for [`KeyHasher`].
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHash;

impl BuildHasher for KeyHash {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// A map from feature keys.
pub type KeyMap<V> = std::collections::HashMap<u64, V, KeyHash>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_separate_equal_tokens() {
        assert_ne!(feature_key(0, b"a"), feature_key(1, b"a"));
        assert_eq!(feature_key(3, b"abc"), feature_key(3, b"abc"));
        assert_ne!(feature_key(3, b"abc"), feature_key(3, b"abd"));
        assert_eq!(field_of(feature_key(7, b"abc")), 7);
        assert_eq!(field_of(feature_key(300, b"abc")), 255);
    }
}
