//! SSE2 sign-packing kernel: the crate's only `unsafe`.
//!
//! `cmpltps` + `movmskps` turn four floats into four sign bits in two
//! instructions; the portable word loop (`pack::word_of`) reaches only about
//! half of read bandwidth because baseline x86_64 has no per-lane variable
//! shift. SSE2 is part of every x86_64 CPU (the target's baseline ABI), so the
//! "detection" is the compile-time `cfg(target_feature = "sse2")`: no runtime
//! check is needed, and `no_std` has no runtime detection anyway. Other
//! targets use the safe path, which the tests compare this kernel with.
#![allow(
    unsafe_code,
    reason = "SSE2 intrinsics behind #[target_feature]; see SAFETY"
)]

use core::arch::x86_64::{_mm_cmplt_ps, _mm_movemask_ps, _mm_set_ps, _mm_setzero_ps};

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
