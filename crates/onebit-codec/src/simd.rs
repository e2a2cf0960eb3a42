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
    __cpuid, __cpuid_count, _mm_cmplt_ps, _mm_loadu_ps, _mm_movemask_ps, _mm_set_ps,
    _mm_setzero_ps, _mm_sfence, _mm_stream_ps, _xgetbv,
};
use core::sync::atomic::{AtomicU8, Ordering};

use crate::scale::{Accumulator, Words};

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
/// same code and bits, compiled for AVX2 when it is there. With `stream`
/// (buffers much larger than the cache) and a 16-byte aligned `new`, the new
/// values go out with non-temporal stores: the lines of `new` are then not
/// read before being overwritten (4 B/element less traffic), as memcpy does;
/// the caller then runs [`store_fence`] once the step's last word is out.
#[inline(always)]
pub(crate) fn fused_words_into(acc: &mut Accumulator, w: Words<'_>, stream: bool) -> Option<bool> {
    let stream = stream && w.new.as_ptr() as usize % 16 == 0;
    match (has_avx2(), stream) {
        // SAFETY: AVX2 support (CPU and OS) was checked (`has_avx2`).
        (true, true) => unsafe { fused_avx2(acc, w, stream_word) },
        // SAFETY: as above.
        (true, false) => unsafe { fused_avx2(acc, w, copy_word) },
        (false, true) => acc.fused_words_into(w, stream_word),
        (false, false) => acc.fused_words_into(w, copy_word),
    }
}

/// Order the non-temporal stores of the calls above before anything this
/// thread does next (so another thread that later synchronizes with it — a
/// move, a lock — sees the new buffer). Once per step, after the last word.
pub(crate) fn store_fence() {
    // SAFETY: `sfence` is SSE, part of the x86_64 baseline; no operands.
    unsafe { _mm_sfence() }
}

#[target_feature(enable = "avx2")]
unsafe fn fused_avx2(
    acc: &mut Accumulator,
    w: Words<'_>,
    store: impl Fn(&mut [f32], &[f32; 64]),
) -> Option<bool> {
    acc.fused_words_into(w, store)
}

#[inline(always)]
fn copy_word(dst: &mut [f32], w: &[f32; 64]) {
    dst.copy_from_slice(w);
}

/// Store one word with `movntps`. `dst` is a 64-element word of a buffer
/// whose start is 16-byte aligned (checked in [`fused_words_into`]; words
/// start at multiples of 256 bytes from it), so every 4-float piece is.
#[inline(always)]
fn stream_word(dst: &mut [f32], w: &[f32; 64]) {
    for (d, s) in dst.chunks_exact_mut(4).zip(w.chunks_exact(4)) {
        debug_assert!(d.as_ptr() as usize % 16 == 0);
        // SAFETY: `d` is 4 writable floats at a 16-byte aligned address (see
        // above), `s` 4 readable floats (`loadu`: any alignment); SSE is in
        // the x86_64 baseline.
        unsafe { _mm_stream_ps(d.as_mut_ptr(), _mm_loadu_ps(s.as_ptr())) }
    }
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
