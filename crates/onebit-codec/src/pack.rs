//! Sign packing: 1 bit per element, `numpy.packbits` layout, 64 signs per word.
//!
//! Bit rule: bit = 1 iff `!(x < 0)` (so `+0.0`, `-0.0` and NaN give 1).
//! Bit order: element 0 is the most significant bit of byte 0 (`Msb0`);
//! padding bits of the last byte are 0.

use bitvec::order::Msb0;
use bitvec::vec::BitVec;

use crate::CodecError;

/// Bytes needed for `n` packed signs: `ceil(n / 8)`.
pub const fn packed_len(n: usize) -> usize {
    n / 8 + (!n.is_multiple_of(8)) as usize
}

/// The sign rule: `true` (bit 1, decoded `+1`) iff `!(v < 0)`, so `±0` and NaN
/// map to 1, exactly like `numpy.packbits(~(x < 0))`.
#[inline(always)]
#[allow(
    clippy::neg_cmp_op_on_partial_ord,
    reason = "the rule is defined as !(v < 0): NaN gives 1, as in numpy"
)]
pub const fn sign_bit(v: f32) -> bool {
    !(v < 0.0)
}

#[inline(always)]
fn bit(v: f32) -> u64 {
    sign_bit(v) as u64
}

/// 64 sign bits, element 0 in the most significant bit: built LSB-first one
/// byte at a time (the pattern compilers vectorise best), then bit-reversed.
#[inline(always)]
pub(crate) fn word_of(x: &[f32; 64]) -> u64 {
    let mut lsb_first = 0u64;
    for (j, g) in x.chunks_exact(8).enumerate() {
        let mut b = 0u64;
        for (k, &v) in g.iter().enumerate() {
            b |= bit(v) << k;
        }
        lsb_first |= b << (8 * j);
    }
    lsb_first.reverse_bits()
}

/// Up to 8 sign bits, element 0 in the most significant bit, padding 0.
#[inline(always)]
fn byte_of(x: &[f32]) -> u8 {
    let mut b = 0u8;
    for (k, &v) in x.iter().enumerate().take(8) {
        b |= u8::from(sign_bit(v)) << (7 - k);
    }
    b
}

/// Pack the signs of `x` into a bit vector whose raw bytes equal
/// `numpy.packbits(~(x < 0))`.
pub fn pack_signs(x: &[f32]) -> BitVec<u8, Msb0> {
    let mut bytes = alloc::vec![0u8; packed_len(x.len())];
    pack_words(x, &mut bytes);
    let mut bv = BitVec::from_vec(bytes);
    bv.truncate(x.len());
    bv
}

/// Pack the signs of `x` into `out` (`numpy.packbits` layout, padding bits 0).
///
/// # Errors
/// [`CodecError::BufferSize`] when `out.len() != ceil(x.len() / 8)`; `out` is
/// then left unchanged.
pub fn pack_signs_into(x: &[f32], out: &mut [u8]) -> Result<(), CodecError> {
    CodecError::check_packed(x.len(), out.len())?;
    pack_words(x, out);
    Ok(())
}

/// Packing kernel; `out.len() == packed_len(x.len())` is the caller's contract.
pub(crate) fn pack_words(x: &[f32], out: &mut [u8]) {
    // AVX2 (run-time detected) packs the whole words when the CPU has it.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let done = crate::simd::pack_avx2(x, out);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let done = 0;
    let (x, out) = (&x[done..], &mut out[done / 8..]);
    let whole = x.len() / 64 * 64;
    for (w, o) in x[..whole].chunks_exact(64).zip(out.chunks_exact_mut(8)) {
        if let Ok(w) = <&[f32; 64]>::try_from(w) {
            o.copy_from_slice(&fast_word(w).to_be_bytes());
        }
    }
    pack_words_portable(&x[whole..], &mut out[whole / 8..]);
}

/// 64 sign bits (element 0 = MSB): the SSE2 kernel on x86_64, else the safe path.
#[inline(always)]
pub(crate) fn fast_word(w: &[f32; 64]) -> u64 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let word = crate::simd::word_sse2(w);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let word = word_of(w);
    word
}

/// The safe word-at-a-time path (all targets; the reference for the SSE2 kernel).
pub(crate) fn pack_words_portable(x: &[f32], out: &mut [u8]) {
    let words = x.chunks_exact(64);
    let tail = words.remainder();
    let (word_out, tail_out) = out.split_at_mut(x.len() / 64 * 8);
    for (w, o) in words.zip(word_out.chunks_exact_mut(8)) {
        if let Ok(w) = <&[f32; 64]>::try_from(w) {
            o.copy_from_slice(&word_of(w).to_be_bytes());
        }
    }
    for (t, o) in tail.chunks(8).zip(tail_out.iter_mut()) {
        *o = byte_of(t);
    }
}

/// Decode packed signs to `out[i] = +scale` (bit 1) or `-scale` (bit 0).
///
/// # Errors
/// [`CodecError::BufferSize`] when `bits.len() != ceil(out.len() / 8)`.
pub fn unpack_signs(bits: &[u8], scale: f32, out: &mut [f32]) -> Result<(), CodecError> {
    CodecError::check_packed(out.len(), bits.len())?;
    // AVX2 (run-time detected) decodes the whole bytes when the CPU has it.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let done = crate::simd::unpack_avx2(bits, scale, out);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let done = 0;
    for_each_sign(&bits[done / 8..], scale, &mut out[done..], |o, s| *o = s);
    Ok(())
}

/// Add decoded signs: `acc[i] += +scale` (bit 1) or `-scale` (bit 0), the
/// server-side sum of a compressed all-reduce.
///
/// # Errors
/// [`CodecError::BufferSize`] when `bits.len() != ceil(acc.len() / 8)`.
pub fn unpack_add(bits: &[u8], scale: f32, acc: &mut [f32]) -> Result<(), CodecError> {
    CodecError::check_packed(acc.len(), bits.len())?;
    for_each_sign(bits, scale, acc, |o, s| *o += s);
    Ok(())
}

/// The rank-order sum of several packed-sign vectors, in one pass over
/// `out`: `out[i] = ((0 + s₀[i]) + s₁[i]) + …` where `s_r[i]` is
/// `+scales[r]` (bit 1 of `bits[r]`) or `−scales[r]` (bit 0). The same bits
/// as zeroing `out` and calling [`unpack_add`] for each `r` in order (the
/// server side of a compressed all-reduce), without `bits.len()` read-write
/// passes over `out`.
///
/// # Errors
/// [`CodecError::LengthMismatch`] when `bits` and `scales` differ in length;
/// [`CodecError::BufferSize`] when some `bits[r].len() != ceil(out.len() / 8)`.
/// `out` is unchanged then.
pub fn unpack_sum(bits: &[&[u8]], scales: &[f32], out: &mut [f32]) -> Result<(), CodecError> {
    CodecError::check_len(bits.len(), scales.len())?;
    for b in bits {
        CodecError::check_packed(out.len(), b.len())?;
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let done = crate::simd::unpack_sum_avx2(bits, scales, out);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let done = 0;
    for (i, o8) in out.chunks_mut(8).enumerate().skip(done / 8) {
        o8.fill(0.0);
        for (b, &scale) in bits.iter().zip(scales) {
            let byte = b[i];
            for (k, o) in o8.iter_mut().enumerate() {
                *o += if (byte << k) & 0x80 != 0 {
                    scale
                } else {
                    -scale
                };
            }
        }
    }
    Ok(())
}

/// Apply `f(out[i], ±scale)` for every element.
///
/// Large outputs go through a 256-entry table of the eight `±scale` values of
/// each byte (8 KiB, built per call), so each byte becomes two vector loads;
/// small ones decode bit by bit, where building the table would dominate.
#[inline(always)]
pub(crate) fn for_each_sign(bits: &[u8], scale: f32, out: &mut [f32], f: impl Fn(&mut f32, f32)) {
    const TABLE_MIN: usize = 16 * 1024;
    let neg = -scale;
    if out.len() >= TABLE_MIN {
        let mut table = [[0.0f32; 8]; 256];
        for (b, row) in table.iter_mut().enumerate() {
            for (k, v) in row.iter_mut().enumerate() {
                *v = if (b << k) & 0x80 != 0 { scale } else { neg };
            }
        }
        let whole = out.len() / 8;
        let (head, tail) = out.split_at_mut(whole * 8);
        for (o8, &b) in head.chunks_exact_mut(8).zip(bits) {
            for (o, &s) in o8.iter_mut().zip(&table[usize::from(b)]) {
                f(o, s);
            }
        }
        if let Some(&b) = bits.get(whole) {
            for (o, &s) in tail.iter_mut().zip(&table[usize::from(b)]) {
                f(o, s);
            }
        }
        return;
    }
    for (o8, &b) in out.chunks_mut(8).zip(bits) {
        for (k, o) in o8.iter_mut().enumerate() {
            let s = if (b << k) & 0x80 != 0 { scale } else { neg };
            f(o, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{pack_words, pack_words_portable, packed_len};
    use alloc::vec;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            4 => -10.0f32..10.0,
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
            1 => any::<f32>(), // NaN, ±∞, subnormals included
        ]
    }

    proptest! {
        /// The dispatching path (SSE2 kernel on x86_64) equals the safe path.
        #[test]
        fn kernel_equals_portable_path(x in prop::collection::vec(value(), 0..700)) {
            let mut fast = vec![0u8; packed_len(x.len())];
            let mut safe = vec![0u8; packed_len(x.len())];
            pack_words(&x, &mut fast);
            pack_words_portable(&x, &mut safe);
            prop_assert_eq!(fast, safe);
        }
    }
}
