//! SSE2 sign-packing kernel, run-time AVX/AVX2 detection and the AVX2
//! build of the fused compressor loop: the crate's only `unsafe`.
//!
//! `cmpltps` + `movmskps` turn four floats into four sign bits in two
//! instructions; the portable word loop (`pack::word_of`) reaches only about
//! half of read bandwidth because baseline x86_64 has no per-lane variable
//! shift. SSE2 is part of every x86_64 CPU (the target's baseline ABI), so the
//! "detection" is the compile-time `cfg(target_feature = "sse2")`: no runtime
//! check is needed. Other targets use the safe path, which the tests compare
//! this kernel with.
//!
//! AVX/AVX2 are detected at run time with `cpuid` and `xgetbv` (`no_std` has
//! no `is_x86_feature_detected!`; the OS must also save the YMM registers),
//! once, cached in an atomic. With AVX2 the fused compressor's word loop — the
//! same safe code, inlined into a `#[target_feature(enable = "avx2")]` entry
//! point — is compiled to 8-lane `f32` and 4-lane `f64` vectors instead of
//! SSE2's 4 and 2. The operations and their order are the same (no FMA), so
//! the bits are too; the compressor tests run on whichever path the CPU takes
//! and are compared with the two-pass reference.
#![allow(
    unsafe_code,
    reason = "SSE2 intrinsics behind #[target_feature]; see SAFETY"
)]

use core::arch::x86_64::{
    __cpuid, __cpuid_count, _mm_cmplt_ps, _mm_movemask_ps, _mm_set_ps, _mm_setzero_ps, _xgetbv,
};
use core::sync::atomic::{AtomicU8, Ordering};

use crate::scale::Accumulator;

/// Cached detection: bit 0 = probed, bit 1 = AVX, bit 2 = AVX2.
static FEATURES: AtomicU8 = AtomicU8::new(0);

fn features() -> u8 {
    let f = FEATURES.load(Ordering::Relaxed);
    if f != 0 {
        return f;
    }
    let f = 1 | probe();
    FEATURES.store(f, Ordering::Relaxed);
    f
}

#[allow(unused_unsafe, reason = "__cpuid is an unsafe fn before Rust 1.87")]
fn probe() -> u8 {
    // SAFETY: `cpuid` exists on every x86_64 CPU; leaf 1 always exists.
    let leaf1 = unsafe { __cpuid(1) };
    let (osxsave, avx) = (leaf1.ecx & (1 << 27) != 0, leaf1.ecx & (1 << 28) != 0);
    if !(osxsave && avx) {
        return 0;
    }
    // SAFETY: OSXSAVE (checked above) means the OS enabled `xgetbv`;
    // register 0 (XCR0) always exists then.
    let xcr0 = unsafe { _xgetbv(0) };
    // Bits 1 and 2: the OS saves SSE and AVX (YMM upper) state.
    if xcr0 & 0b110 != 0b110 {
        return 0;
    }
    // SAFETY: as above; leaf 7 is reported as absent (zeros) if unsupported.
    let max_leaf = unsafe { __cpuid(0) }.eax;
    // SAFETY: leaf 7 exists when the maximum leaf is at least 7.
    let avx2 = max_leaf >= 7 && unsafe { __cpuid_count(7, 0) }.ebx & (1 << 5) != 0;
    if avx2 { 0b110 } else { 0b010 }
}

/// Whether the CPU has AVX and the OS saves its registers (cached).
pub fn has_avx() -> bool {
    features() & 0b010 != 0
}

/// Whether the CPU has AVX2 (and AVX usable, see [`has_avx`]; cached).
pub fn has_avx2() -> bool {
    features() & 0b100 != 0
}

/// `Accumulator::fused_words_into` on the widest vectors the CPU has: the
/// same code and bits, compiled for AVX2 when it is there.
#[inline(always)]
pub(crate) fn fused_words_into(
    acc: &mut Accumulator,
    x: &[f32],
    old: &[f32],
    new: &mut [f32],
    alpha: f32,
    signs: &mut [u8],
) -> Option<bool> {
    if has_avx2() {
        // SAFETY: AVX2 support (CPU and OS) was checked just above.
        unsafe { fused_words_into_avx2(acc, x, old, new, alpha, signs) }
    } else {
        acc.fused_words_into(x, old, new, alpha, signs)
    }
}

#[target_feature(enable = "avx2")]
unsafe fn fused_words_into_avx2(
    acc: &mut Accumulator,
    x: &[f32],
    old: &[f32],
    new: &mut [f32],
    alpha: f32,
    signs: &mut [u8],
) -> Option<bool> {
    acc.fused_words_into(x, old, new, alpha, signs)
}

/// The 64 sign bits of `w`, element 0 in the most significant bit.
#[inline(always)]
pub(crate) fn word_sse2(w: &[f32; 64]) -> u64 {
    let mut lsb_first = 0u64;
    for (j, q) in w.chunks_exact(4).enumerate() {
        // SAFETY: the intrinsics need only SSE/SSE2, which this module is
        // compiled under: `lib.rs` includes it only with
        // `cfg(target_feature = "sse2")` (every x86_64 target except the
        // soft-float ones). They take values, not pointers: no memory is
        // touched except through the bounds-checked slice above.
        let neg = unsafe {
            let v = _mm_set_ps(q[3], q[2], q[1], q[0]);
            _mm_movemask_ps(_mm_cmplt_ps(v, _mm_setzero_ps()))
        };
        // Bit k set iff q[k] < 0; our bit is !(x < 0).
        lsb_first |= ((neg as u64) ^ 0xF) << (4 * j);
    }
    // Element k is bit k; numpy wants element 0 as the MSB of byte 0.
    lsb_first.reverse_bits()
}
