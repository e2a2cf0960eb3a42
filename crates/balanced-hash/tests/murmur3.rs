//! MurmurHash3 x64_128 against the reference: SMHasher's verification value,
//! published vectors, and a line-by-line transliteration of the C code.
#![allow(clippy::unwrap_used, reason = "tests: a panic is a failing test")]

use balanced_hash::murmur3::{fmix64, x64_128};
use proptest::prelude::*;

/// `MurmurHash3_x64_128` transliterated from SMHasher's `MurmurHash3.cpp`,
/// including the fall-through tail switch, byte by byte.
fn reference(data: &[u8], seed: u32) -> [u64; 2] {
    let len = data.len();
    let nblocks = len / 16;
    let mut h1 = u64::from(seed);
    let mut h2 = u64::from(seed);
    let c1: u64 = 0x87c37b91114253d5;
    let c2: u64 = 0x4cf5ad432745937f;
    let getblock64 = |i: usize| {
        let mut v = 0u64;
        for b in 0..8 {
            v |= u64::from(data[i * 8 + b]) << (8 * b);
        }
        v
    };
    for i in 0..nblocks {
        let mut k1 = getblock64(i * 2);
        let mut k2 = getblock64(i * 2 + 1);
        k1 = k1.wrapping_mul(c1);
        k1 = k1.rotate_left(31);
        k1 = k1.wrapping_mul(c2);
        h1 ^= k1;
        h1 = h1.rotate_left(27);
        h1 = h1.wrapping_add(h2);
        h1 = h1.wrapping_mul(5).wrapping_add(0x52dce729);
        k2 = k2.wrapping_mul(c2);
        k2 = k2.rotate_left(33);
        k2 = k2.wrapping_mul(c1);
        h2 ^= k2;
        h2 = h2.rotate_left(31);
        h2 = h2.wrapping_add(h1);
        h2 = h2.wrapping_mul(5).wrapping_add(0x38495ab5);
    }
    let tail = &data[nblocks * 16..];
    let mut k1 = 0u64;
    let mut k2 = 0u64;
    let rem = len & 15;
    // switch (len & 15) { case 15: ... case 1: } with fall-through.
    for case in (1..=rem).rev() {
        let byte = u64::from(tail[case - 1]);
        if case > 8 {
            k2 ^= byte << (8 * (case - 9));
            if case == 9 {
                k2 = k2.wrapping_mul(c2);
                k2 = k2.rotate_left(33);
                k2 = k2.wrapping_mul(c1);
                h2 ^= k2;
            }
        } else {
            k1 ^= byte << (8 * (case - 1));
            if case == 1 {
                k1 = k1.wrapping_mul(c1);
                k1 = k1.rotate_left(31);
                k1 = k1.wrapping_mul(c2);
                h1 ^= k1;
            }
        }
    }
    h1 ^= len as u64;
    h2 ^= len as u64;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = reference_fmix64(h1);
    h2 = reference_fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    [h1, h2]
}

fn reference_fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51afd7ed558ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ceb9fe1a85ec53);
    k ^= k >> 33;
    k
}

/// The 16 output bytes as the reference writes them (x86: little-endian h1, h2).
fn out_bytes(h: [u64; 2]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&h[0].to_le_bytes());
    out[8..].copy_from_slice(&h[1].to_le_bytes());
    out
}

/// SMHasher's `VerificationTest`: hash keys {0}, {0,1}, …, {0..254} with seed
/// 256 − len, hash the concatenated outputs with seed 0, read the first 4
/// bytes little-endian.
fn smhasher_verification(hash: impl Fn(&[u8], u32) -> [u64; 2]) -> u32 {
    let key: Vec<u8> = (0..=255u8).collect();
    let mut hashes = Vec::with_capacity(16 * 256);
    for i in 0..256usize {
        hashes.extend_from_slice(&out_bytes(hash(&key[..i], 256 - i as u32)));
    }
    let fin = out_bytes(hash(&hashes, 0));
    u32::from_le_bytes([fin[0], fin[1], fin[2], fin[3]])
}

#[test]
fn smhasher_verification_value() {
    assert_eq!(smhasher_verification(x64_128), 0x6384_BA69);
    // The transliteration passes it too, so it is a trustworthy oracle below.
    assert_eq!(smhasher_verification(reference), 0x6384_BA69);
}

#[test]
fn published_vectors() {
    // The published pangram vector, and the empty input (every step of the
    // reference maps 0 to 0).
    let fox = b"The quick brown fox jumps over the lazy dog";
    assert_eq!(x64_128(fox, 0), [0xe34bbc7bbc071b6c, 0x7a433ca9c49a9347]);
    assert_eq!(x64_128(b"", 0), [0, 0]);
    // Computed with the `mmh3` 5.3.1 Python package (which wraps the canonical
    // C code): `mmh3.hash128(data, seed, x64arch=True, signed=False)` split
    // into (low, high) 64-bit words.
    assert_eq!(
        x64_128(b"hello", 0),
        [0xcbd8a7b341bd9b02, 0x5b1e906a48ae1d19]
    );
    assert_eq!(x64_128(b"", 1), [0x4610abe56eff5cb5, 0x51622daa78f83583]);
    assert_eq!(
        x64_128(b"hello, world", 123),
        [0x2fed885fccfe9dc1, 0xdb99c2aa78f193e5]
    );
    assert_eq!(x64_128(fox, 42), [0x740dcf93fe0bd5d7, 0xc4546cf4ec705c8f]);
    let ramp: Vec<u8> = (0..31).collect();
    assert_eq!(
        x64_128(&ramp, 0xdeadbeef),
        [0x66d8216004035f10, 0xb5dd98904e84c30d]
    );
}

/// Inverse of an odd multiplier modulo 2^64 (Newton: x ← x(2 − a·x)).
fn mul_inverse(a: u64) -> u64 {
    let mut x = a; // correct to 3 bits for odd a
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x
}

/// `fmix64⁻¹`: `x ^= x >> 33` is its own inverse (33 ≥ 64/2).
fn fmix64_inverse(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(mul_inverse(0xc4ceb9fe1a85ec53));
    k ^= k >> 33;
    k = k.wrapping_mul(mul_inverse(0xff51afd7ed558ccd));
    k ^= k >> 33;
    k
}

proptest! {
    #[test]
    fn matches_reference(data in proptest::collection::vec(any::<u8>(), 0..200), seed in any::<u32>()) {
        prop_assert_eq!(x64_128(&data, seed), reference(&data, seed));
    }

    #[test]
    fn fmix64_matches_reference_and_is_a_bijection(k in any::<u64>()) {
        prop_assert_eq!(fmix64(k), reference_fmix64(k));
        prop_assert_eq!(fmix64_inverse(fmix64(k)), k);
    }

    #[test]
    fn one_bit_flip_changes_the_hash(data in proptest::collection::vec(any::<u8>(), 1..64), bit in 0usize..512, seed in any::<u32>()) {
        let bit = bit % (data.len() * 8);
        let mut flipped = data.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        prop_assert_ne!(x64_128(&data, seed), x64_128(&flipped, seed));
    }
}
