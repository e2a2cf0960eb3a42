//! MurmurHash3 x64_128 and its 64-bit finalizer, bit-exact with Austin Appleby's
//! reference (`MurmurHash3_x64_128` in SMHasher's `MurmurHash3.cpp`).
//!
//! The output is portable: the same bytes and seed give the same two words on
//! every platform and version of this crate, so it is the hash to persist
//! (bucket maps in checkpoints, ids shared between processes).

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

/// The 64-bit finalizer of MurmurHash3 (`fmix64`): a bijection on `u64` whose
/// every output bit depends on every input bit (full avalanche).
///
/// ```
/// use balanced_hash::murmur3::fmix64;
/// assert_eq!(fmix64(0), 0); // a bijection that fixes zero
/// assert_ne!(fmix64(1), fmix64(2));
/// ```
#[inline]
#[must_use]
pub const fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[inline]
const fn mix_k1(k1: u64) -> u64 {
    k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2)
}

#[inline]
const fn mix_k2(k2: u64) -> u64 {
    k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1)
}

/// Reads exactly 8 little-endian bytes (a block half).
#[inline]
fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// Reads up to 8 little-endian bytes of a tail (missing high bytes are zero).
#[inline]
fn le_u64_partial(bytes: &[u8]) -> u64 {
    match bytes.get(..8) {
        // A full word (8-byte keys end here): one load.
        Some(word) => le_u64(word),
        None => bytes
            .iter()
            .enumerate()
            .fold(0, |acc, (i, &b)| acc | (u64::from(b) << (8 * i))),
    }
}

/// MurmurHash3 x64_128 of `data` with a 32-bit `seed`.
///
/// Returns the reference implementation's two output words `[h1, h2]` (the
/// reference writes them to memory as `h1` then `h2`, each little-endian on
/// x86). Never fails, never allocates.
///
/// ```
/// use balanced_hash::murmur3::x64_128;
/// let h = x64_128(b"The quick brown fox jumps over the lazy dog", 0);
/// assert_eq!(h, [0xe34b_bc7b_bc07_1b6c, 0x7a43_3ca9_c49a_9347]);
/// assert_eq!(x64_128(b"", 0), [0, 0]);
/// ```
#[must_use]
pub fn x64_128(data: &[u8], seed: u32) -> [u64; 2] {
    let mut h1 = u64::from(seed);
    let mut h2 = u64::from(seed);

    let mut blocks = data.chunks_exact(16);
    for block in &mut blocks {
        let (lo, hi) = block.split_at(8);
        let k1 = le_u64(lo);
        let k2 = le_u64(hi);

        h1 ^= mix_k1(k1);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);

        h2 ^= mix_k2(k2);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }

    // Tail: the reference's fall-through switch is exactly "read the remaining
    // bytes little-endian, zero-padded", mixing k2 only when bytes 8.. exist.
    let tail = blocks.remainder();
    if tail.len() > 8 {
        h2 ^= mix_k2(le_u64_partial(&tail[8..]));
    }
    if !tail.is_empty() {
        h1 ^= mix_k1(le_u64_partial(tail));
    }

    // `usize` -> `u64` is lossless on every supported target (≤ 64-bit).
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    [h1, h2]
}
