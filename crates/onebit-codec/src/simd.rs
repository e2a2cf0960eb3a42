//! SSE2 sign-packing kernel, run-time AVX/AVX2/AVX-512F detection and the AVX2
//! kernels (fused compressor, packing, decoding): the crate's only `unsafe`.
//!
//! `cmpltps` + `movmskps` turn four floats into four sign bits in two
//! instructions; the portable word loop (`pack::word_of`) reaches only about
//! half of read bandwidth because baseline x86_64 has no per-lane variable
//! shift. SSE2 is part of every x86_64 CPU (the target's baseline ABI), so the
//! "detection" is the compile-time `cfg(target_feature = "sse2")`: no runtime
//! check is needed. Other targets use the safe path, which the tests compare
//! this kernel with.
//!
//! AVX/AVX2/FMA (and AVX-512F, which `onebit-adam`'s dense kernel uses) are
//! detected at run time with `cpuid` and `xgetbv` (`no_std` has no
//! `is_x86_feature_detected!`; the OS must also save the YMM/ZMM registers),
//! once, cached in an atomic. With AVX2 the fused compressor's word loop — the
//! same safe code, inlined into a `#[target_feature(enable = "avx2")]` entry
//! point — is compiled to 8-lane `f32` and 4-lane `f64` vectors instead of
//! SSE2's 4 and 2. The operations and their order are the same (no FMA), so
//! the bits are too; the compressor tests run on whichever path the CPU takes
//! and are compared with the two-pass reference.
//!
//! Written out in AVX2 intrinsics (run-time detected, same operations and
//! order as the portable loops, so the same bits; unit tests compare them):
//! the fused compressor loop over a chunk's whole words ([`fused_x8`]: a
//! plain input, or a blend `wa·a + wb·b` read in place, with software
//! prefetch), sign packing ([`pack_avx2`]: four far-apart quarters in turn,
//! since one read stream leaves part of a core's bandwidth unused), and the
//! decoders ([`unpack_avx2`], [`unpack_sum_avx2`]). Where the CPU has
//! AVX-512F the fused loop runs on 16 lanes instead ([`fused_x16_avx512`],
//! same operations and the same `f64` lane order, so the same bits; unit
//! tests compare both with the portable loop). Under load (load 5.4–6.0,
//! two interleaved A/Bs of 7 and 9 rounds against the AVX2 build, 64 Mi
//! elements) it was at parity on the plain compressor (0.99, 0.99) and
//! 1.06 / 1.16× on the blend input of 1-bit Adam's local step, with a
//! memcpy noise floor of 0.97 / 0.94.
#![allow(
    unsafe_code,
    reason = "SSE2 intrinsics behind #[target_feature]; see SAFETY"
)]

use core::arch::x86_64::{
    __cpuid, __cpuid_count, _CMP_LT_OQ, _CMP_NLT_UQ, _MM_HINT_T0, _mm_cmplt_ps, _mm_loadu_ps,
    _mm_movemask_ps, _mm_prefetch, _mm_set_ps, _mm_setzero_ps, _mm_sfence, _mm_stream_ps,
    _mm256_add_pd, _mm256_add_ps, _mm256_and_ps, _mm256_blendv_ps, _mm256_castps_si256,
    _mm256_castps256_ps128, _mm256_castsi256_ps, _mm256_cmp_ps, _mm256_cmpgt_epi32,
    _mm256_cvtps_pd, _mm256_extractf128_ps, _mm256_loadu_pd, _mm256_loadu_ps, _mm256_movemask_ps,
    _mm256_mul_pd, _mm256_mul_ps, _mm256_or_si256, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_setzero_si256, _mm256_storeu_pd, _mm256_storeu_ps, _mm256_sub_ps,
    _mm256_testz_si256, _xgetbv,
};
use core::sync::atomic::{AtomicU8, Ordering};

use core::arch::x86_64::{
    __m256, __m256i, __mmask16, _mm256_and_si256, _mm256_castpd_ps, _mm256_cmpeq_epi32,
    _mm256_setr_epi32, _mm512_add_pd, _mm512_add_ps, _mm512_and_si512, _mm512_castps_pd,
    _mm512_castps_si512, _mm512_castps512_ps128, _mm512_castps512_ps256, _mm512_castsi512_ps,
    _mm512_cmp_ps_mask, _mm512_cmpgt_epi32_mask, _mm512_cvtps_pd, _mm512_extractf32x4_ps,
    _mm512_extractf64x4_pd, _mm512_loadu_pd, _mm512_loadu_ps, _mm512_mask_blend_ps, _mm512_mul_pd,
    _mm512_mul_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_pd,
    _mm512_storeu_ps, _mm512_sub_ps,
};

/// Cached detection: bit 0 = probed, bit 1 = AVX, bit 2 = AVX2, bit 3 =
/// FMA (with AVX usable), bit 4 = AVX-512F (with its state saved by the OS).
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

fn probe() -> u8 {
    // `cpuid` exists on every x86_64 CPU (a safe intrinsic since Rust
    // 1.87); leaf 1 always exists.
    let leaf1 = __cpuid(1);
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
    // Leaf 7 is reported as absent (zeros) if unsupported.
    let leaf7 = if __cpuid(0).eax >= 7 {
        __cpuid_count(7, 0).ebx
    } else {
        0
    };
    let avx2 = u8::from(leaf7 & (1 << 5) != 0) << 2;
    // FMA: leaf 1 ECX bit 12 (its YMM state is AVX's, checked above).
    let fma = u8::from(leaf1.ecx & (1 << 12) != 0) << 3;
    // AVX-512F: leaf 7 EBX bit 16, and XCR0 bits 5-7 (the OS saves the
    // opmask registers, the upper halves of ZMM0-15 and ZMM16-31).
    let zmm_state = xcr0 & 0b1110_0000 == 0b1110_0000;
    let avx512f = u8::from(zmm_state && leaf7 & (1 << 16) != 0) << 4;
    0b010 | avx2 | fma | avx512f
}

/// Whether the CPU has AVX and the OS saves its registers (cached).
pub fn has_avx() -> bool {
    features() & 0b010 != 0
}

/// Whether the CPU has AVX2 (and AVX usable, see [`has_avx`]; cached).
pub fn has_avx2() -> bool {
    features() & 0b100 != 0
}

/// Whether the CPU has FMA and AVX is usable (see [`has_avx`]; cached).
pub fn has_fma() -> bool {
    features() & 0b1000 != 0
}

/// Whether the CPU has AVX-512F and the OS saves the opmask and full ZMM
/// registers (cached).
pub fn has_avx512f() -> bool {
    features() & 0b1_0000 != 0
}

/// A running sum's state for the fused kernels: `(abs, lanes, pos)` — whether
/// the terms are `|v|` (else `v²`), the 8 `f64` lanes (at a group boundary),
/// and the number of elements fed (the kernel adds what it feeds).
pub(crate) type SumLanes<'a> = (bool, &'a mut [f64; 8], &'a mut usize);

/// A fused kernel's input: `a`, and for a blend `wa·a + wb·b` also
/// `(wa, wb, b)`.
pub(crate) type BlendInput<'a> = (&'a [f32], Option<(f32, f32, &'a [f32])>);

/// Safe code to run compiled for AVX2 where the CPU has it ([`with_avx2`]).
/// The kernels' callers implement it, so this module needs none of their
/// types (it imports nothing from the rest of the crate).
pub(crate) trait Avx2Kernel {
    /// What the kernel returns.
    type Output;
    /// The kernel. Implementations are `#[inline(always)]`, so their code is
    /// compiled inside the AVX2 entry point (8-lane `f32`, 4-lane `f64`
    /// vectors instead of SSE2's 4 and 2; same operations and order, so the
    /// same bits).
    fn run(self) -> Self::Output;
}

/// Runs `kernel` compiled for AVX2 when the CPU has it, else as it is. The
/// fused compressor's word loop (`Accumulator::fused_words_into`) goes
/// through here with [`copy_word`] or, for buffers much larger than the
/// cache, [`stream_word`] (non-temporal stores: the lines of `new` are then
/// not read before being overwritten, 4 B/element less traffic, as memcpy
/// does; the caller then runs [`store_fence`] once the step's last word is
/// out).
#[inline(always)]
pub(crate) fn with_avx2<K: Avx2Kernel>(kernel: K) -> K::Output {
    if has_avx2() {
        // SAFETY: AVX2 support (CPU and OS) was checked (`has_avx2`).
        unsafe { avx2_entry(kernel) }
    } else {
        kernel.run()
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
unsafe fn avx2_entry<K: Avx2Kernel>(kernel: K) -> K::Output {
    kernel.run()
}

/// Store one word with ordinary stores.
#[inline(always)]
pub(crate) fn copy_word(dst: &mut [f32], w: &[f32; 64]) {
    dst.copy_from_slice(w);
}

/// Store one word with `movntps`. `dst` is a 64-element word of a buffer
/// whose start is 16-byte aligned (the caller checks it; words start at
/// multiples of 256 bytes from it), so every 4-float piece is.
#[inline(always)]
pub(crate) fn stream_word(dst: &mut [f32], w: &[f32; 64]) {
    for (d, s) in dst.chunks_exact_mut(4).zip(w.chunks_exact(4)) {
        debug_assert!((d.as_ptr() as usize).is_multiple_of(16));
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

/// The fused word loop written out in AVX2 intrinsics, for a plain input or
/// a blend `wa·a + wb·b` read in place (no staging buffer): per 8 lanes
/// `p = x + (old − α·σ(old))`, the NaN/±∞ check, the `f64` terms into the
/// 8 lanes (lanes 0–3 and 4–7 are two `__m256d`, elements in index order:
/// the documented reduction), the sign byte, and the store of `p` to `new`.
/// Same operations, same order, no FMA, so the same bits as the portable
/// `Accumulator::fused_words_into` (unit tests in `vector.rs`). All slices are one
/// run of whole words (`old.len() % 64 == 0`; the others at least as long).
///
/// `sum` is the running scale's `(abs, lanes, pos)`: mean-abs terms `|v|`
/// (else squares), the 8 `f64` lanes at a group boundary, and the count fed
/// so far (advanced here). `x` is the input `a` and, for a blend, `(wa, wb,
/// b)`.
///
/// `None` (nothing done) without AVX2 or when a slice is short;
/// `Some(false)` when a new value is NaN/±∞ (`new` is then garbage, the
/// caller discards it).
pub(crate) fn fused_x8(
    sum: SumLanes<'_>,
    x: BlendInput<'_>,
    old: &[f32],
    new: &mut [f32],
    alpha: f32,
    signs: &mut [u8],
    stream: bool,
) -> Option<bool> {
    if !has_avx2() {
        return None;
    }
    let n = old.len() / 64 * 64;
    let (a, blend) = x;
    let b_len = blend.map_or(usize::MAX, |(_, _, b)| b.len());
    if a.len() < n || b_len < n || new.len() < n || signs.len() < n / 8 {
        return None;
    }
    let stream = stream && (new.as_ptr() as usize).is_multiple_of(16);
    let (abs, lanes, pos) = sum;
    let p = Ptrs {
        a: a.as_ptr(),
        b: blend.map_or(a.as_ptr(), |(_, _, b)| b.as_ptr()),
        old: old.as_ptr(),
        new: new.as_mut_ptr(),
        signs: signs.as_mut_ptr(),
    };
    let (wa, wb) = blend.map_or((1.0, 0.0), |(wa, wb, _)| (wa, wb));
    // SAFETY: AVX2 was checked just above; every pointer covers `n` floats
    // (`n / 8` sign bytes), checked above; with `stream`, `new` is 16-byte
    // aligned (checked), so every 4-float piece of it is.
    let clean = unsafe { fused_kernel((abs, blend.is_some(), stream), lanes, p, n, wa, wb, alpha) };
    *pos += n;
    Some(clean)
}

/// [`fused_x8`] for a plain input with the buffer updated in place
/// (`buf ← x + (buf − α·σ(buf))`, `full_step_chunk`): the kernel loads each
/// 8-lane group of the old buffer before it stores the same group's new
/// values, so one buffer as both `old` and `new` gives the two-buffer bits.
/// `None` (nothing done) as for [`fused_x8`].
pub(crate) fn fused_x8_in_place(
    sum: SumLanes<'_>,
    x: &[f32],
    buf: &mut [f32],
    alpha: f32,
    signs: &mut [u8],
) -> Option<bool> {
    if !has_avx2() {
        return None;
    }
    let n = buf.len() / 64 * 64;
    if x.len() < n || signs.len() < n / 8 {
        return None;
    }
    let (abs, lanes, pos) = sum;
    let new = buf.as_mut_ptr();
    let p = Ptrs {
        a: x.as_ptr(),
        b: x.as_ptr(),
        old: new.cast_const(),
        new,
        signs: signs.as_mut_ptr(),
    };
    // SAFETY: AVX2 was checked just above; `x`, `buf` cover `n` floats and
    // `signs` `n / 8` bytes (checked); `old` and `new` are the same stream,
    // read before written lane group by lane group (see above); no `STREAM`.
    let clean = unsafe { fused_kernel((abs, false, false), lanes, p, n, 1.0, 0.0, alpha) };
    *pos += n;
    Some(clean)
}

/// Elements ahead of the loop that [`fused_x8_avx2`] prefetches.
const PREFETCH: usize = 2048;

/// Raw streams of [`fused_x8_avx2`] (bounds checked by [`fused_x8`]).
#[derive(Clone, Copy)]
struct Ptrs {
    a: *const f32,
    b: *const f32,
    old: *const f32,
    new: *mut f32,
    signs: *mut u8,
}

impl Ptrs {
    /// Software prefetch [`PREFETCH`] elements ahead of element `i` on the
    /// read streams (`b` only with `BLEND`), for both fused kernels: the
    /// hardware prefetcher stops at page boundaries, and one core reaches
    /// memory bandwidth only with more fills in flight.
    ///
    /// # Safety
    /// The streams are valid for `n` floats, `n % 64 == 0` and `i % 64 == 0`
    /// (so every prefetched offset is below `n`).
    #[inline(always)]
    unsafe fn prefetch_ahead<const BLEND: bool>(self, i: usize, n: usize) {
        if i + PREFETCH < n {
            for l in 0..4 {
                let k = i + PREFETCH + 16 * l;
                // SAFETY: `k + 15 < n` by the contract; a prefetch never
                // faults, and SSE is the x86_64 baseline.
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(self.a.add(k).cast());
                    _mm_prefetch::<_MM_HINT_T0>(self.old.add(k).cast());
                    if BLEND {
                        _mm_prefetch::<_MM_HINT_T0>(self.b.add(k).cast());
                    }
                }
            }
        }
    }
}

/// The fused kernel for the flags `(ABS, BLEND, STREAM)`: AVX-512F's
/// ([`fused_x16_avx512`]) when the CPU has it, else AVX2's; one place that
/// turns run-time flags into the const-generic instances.
///
/// # Safety
/// As [`fused_x8_avx2`].
unsafe fn fused_kernel(
    flags: (bool, bool, bool),
    lanes: &mut [f64; 8],
    p: Ptrs,
    n: usize,
    wa: f32,
    wb: f32,
    alpha: f32,
) -> bool {
    macro_rules! pick {
        ($kernel:ident) => {
            match flags {
                (false, false, false) => $kernel::<false, false, false>(lanes, p, n, wa, wb, alpha),
                (false, false, true) => $kernel::<false, false, true>(lanes, p, n, wa, wb, alpha),
                (false, true, false) => $kernel::<false, true, false>(lanes, p, n, wa, wb, alpha),
                (false, true, true) => $kernel::<false, true, true>(lanes, p, n, wa, wb, alpha),
                (true, false, false) => $kernel::<true, false, false>(lanes, p, n, wa, wb, alpha),
                (true, false, true) => $kernel::<true, false, true>(lanes, p, n, wa, wb, alpha),
                (true, true, false) => $kernel::<true, true, false>(lanes, p, n, wa, wb, alpha),
                (true, true, true) => $kernel::<true, true, true>(lanes, p, n, wa, wb, alpha),
            }
        };
    }
    // SAFETY: the caller's contract; AVX-512F checked for its kernel (it
    // implies AVX2's register state, and the CPUs with it have AVX2).
    unsafe {
        if use_avx512() {
            pick!(fused_x16_avx512)
        } else {
            pick!(fused_x8_avx2)
        }
    }
}

/// Whether the fused loop runs on AVX-512F (needs AVX2 too: the caller
/// checked that).
#[cfg(not(test))]
#[inline(always)]
fn use_avx512() -> bool {
    has_avx512f()
}

/// In unit tests a thread can turn AVX-512 off, so both kernels are
/// compared with the portable loop on a machine that has both.
#[cfg(test)]
fn use_avx512() -> bool {
    has_avx512f() && !tests::AVX2_ONLY.with(core::cell::Cell::get)
}

/// # Safety
/// AVX2 available; `a`, `old`, `new` (and `b` with `BLEND`) valid for `n`
/// floats, `signs` for `n / 8` bytes, `n % 64 == 0`; with `STREAM`, `new`
/// 16-byte aligned.
#[target_feature(enable = "avx2")]
unsafe fn fused_x8_avx2<const ABS: bool, const BLEND: bool, const STREAM: bool>(
    lanes: &mut [f64; 8],
    p: Ptrs,
    n: usize,
    wa: f32,
    wb: f32,
    alpha: f32,
) -> bool {
    // SAFETY: the function's contract (AVX2; every offset below is < n, or
    // < n / 8 for the sign bytes, of a stream valid for that many).
    unsafe {
        let (wa, wb) = (_mm256_set1_ps(wa), _mm256_set1_ps(wb));
        let (pos_a, neg_a) = (_mm256_set1_ps(alpha), _mm256_set1_ps(-alpha));
        let zero = _mm256_setzero_ps();
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let max_finite = _mm256_set1_epi32(0x7f7f_ffff);
        let mut lo = _mm256_loadu_pd(lanes.as_ptr());
        let mut hi = _mm256_loadu_pd(lanes.as_ptr().add(4));
        let mut bad = _mm256_setzero_si256();
        let mut i = 0;
        while i < n {
            p.prefetch_ahead::<BLEND>(i, n);
            let mut lsb_first = 0u64;
            for j in 0..8 {
                let k = i + 8 * j;
                let x = if BLEND {
                    _mm256_add_ps(
                        _mm256_mul_ps(wa, _mm256_loadu_ps(p.a.add(k))),
                        _mm256_mul_ps(wb, _mm256_loadu_ps(p.b.add(k))),
                    )
                } else {
                    _mm256_loadu_ps(p.a.add(k))
                };
                let o = _mm256_loadu_ps(p.old.add(k));
                // α·σ(old): −α where old < 0 (ordered: NaN never is; the
                // buffer is finite anyway).
                let s = _mm256_blendv_ps(pos_a, neg_a, _mm256_cmp_ps::<_CMP_LT_OQ>(o, zero));
                let v = _mm256_add_ps(x, _mm256_sub_ps(o, s));
                let mag = _mm256_and_ps(v, abs_mask);
                bad = _mm256_or_si256(
                    bad,
                    _mm256_cmpgt_epi32(_mm256_castps_si256(mag), max_finite),
                );
                let t = if ABS { mag } else { v };
                let (tl, th) = (
                    _mm256_cvtps_pd(_mm256_castps256_ps128(t)),
                    _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(t)),
                );
                let (tl, th) = if ABS {
                    (tl, th)
                } else {
                    (_mm256_mul_pd(tl, tl), _mm256_mul_pd(th, th))
                };
                lo = _mm256_add_pd(lo, tl);
                hi = _mm256_add_pd(hi, th);
                // Bit k set iff !(v[k] < 0) (unordered: NaN gives 1).
                let bits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLT_UQ>(v, zero));
                lsb_first |= u64::from(bits as u8) << (8 * j);
                if STREAM {
                    _mm_stream_ps(p.new.add(k), _mm256_castps256_ps128(v));
                    _mm_stream_ps(p.new.add(k + 4), _mm256_extractf128_ps::<1>(v));
                } else {
                    _mm256_storeu_ps(p.new.add(k), v);
                }
            }
            // Element 0 the most significant bit of byte 0, as `word_sse2`.
            let bytes = lsb_first.reverse_bits().to_be_bytes();
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.signs.add(i / 8), 8);
            i += 64;
        }
        _mm256_storeu_pd(lanes.as_mut_ptr(), lo);
        _mm256_storeu_pd(lanes.as_mut_ptr().add(4), hi);
        _mm256_testz_si256(bad, bad) == 1
    }
}

/// [`fused_x8_avx2`] on 16 lanes (AVX-512F): per 16 lanes the same
/// operations in the same order; the two 8-lane halves are converted to
/// `f64` and added to the 8 lanes one after the other, which is the AVX2
/// kernel's order (each lane gets the same additions in the same
/// sequence), the NaN/±∞ check and the sign bits come straight from
/// opmask compares, and non-temporal stores stay 16-byte pieces (`new` is
/// only known to be 16-byte aligned). Same bits (unit tests below).
///
/// # Safety
/// As [`fused_x8_avx2`], with AVX-512F available.
#[target_feature(enable = "avx512f")]
unsafe fn fused_x16_avx512<const ABS: bool, const BLEND: bool, const STREAM: bool>(
    lanes: &mut [f64; 8],
    p: Ptrs,
    n: usize,
    wa: f32,
    wb: f32,
    alpha: f32,
) -> bool {
    // SAFETY: the function's contract (AVX-512F; every offset below is < n,
    // or < n / 8 for the sign bytes, of a stream valid for that many).
    unsafe {
        let (wa, wb) = (_mm512_set1_ps(wa), _mm512_set1_ps(wb));
        let (pos_a, neg_a) = (_mm512_set1_ps(alpha), _mm512_set1_ps(-alpha));
        let zero = _mm512_setzero_ps();
        let abs_mask = _mm512_set1_epi32(0x7fff_ffff);
        let max_finite = _mm512_set1_epi32(0x7f7f_ffff);
        let mut acc = _mm512_loadu_pd(lanes.as_ptr());
        let mut bad: __mmask16 = 0;
        let mut i = 0;
        while i < n {
            p.prefetch_ahead::<BLEND>(i, n);
            let mut lsb_first = 0u64;
            for j in 0..4 {
                let k = i + 16 * j;
                let x = if BLEND {
                    _mm512_add_ps(
                        _mm512_mul_ps(wa, _mm512_loadu_ps(p.a.add(k))),
                        _mm512_mul_ps(wb, _mm512_loadu_ps(p.b.add(k))),
                    )
                } else {
                    _mm512_loadu_ps(p.a.add(k))
                };
                let o = _mm512_loadu_ps(p.old.add(k));
                // α·σ(old): −α where old < 0 (ordered, as AVX2's).
                let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(o, zero);
                let s = _mm512_mask_blend_ps(neg, pos_a, neg_a);
                let v = _mm512_add_ps(x, _mm512_sub_ps(o, s));
                let mag = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
                bad |= _mm512_cmpgt_epi32_mask(mag, max_finite);
                let t = if ABS { _mm512_castsi512_ps(mag) } else { v };
                let (tl, th) = (
                    _mm512_cvtps_pd(_mm512_castps512_ps256(t)),
                    _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                        _mm512_castps_pd(t),
                    ))),
                );
                let (tl, th) = if ABS {
                    (tl, th)
                } else {
                    (_mm512_mul_pd(tl, tl), _mm512_mul_pd(th, th))
                };
                acc = _mm512_add_pd(acc, tl);
                acc = _mm512_add_pd(acc, th);
                // Bit k set iff !(v[k] < 0) (unordered: NaN gives 1).
                let bits = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(v, zero);
                lsb_first |= u64::from(bits) << (16 * j);
                if STREAM {
                    _mm_stream_ps(p.new.add(k), _mm512_castps512_ps128(v));
                    _mm_stream_ps(p.new.add(k + 4), _mm512_extractf32x4_ps::<1>(v));
                    _mm_stream_ps(p.new.add(k + 8), _mm512_extractf32x4_ps::<2>(v));
                    _mm_stream_ps(p.new.add(k + 12), _mm512_extractf32x4_ps::<3>(v));
                } else {
                    _mm512_storeu_ps(p.new.add(k), v);
                }
            }
            // Element 0 the most significant bit of byte 0, as `word_sse2`.
            let bytes = lsb_first.reverse_bits().to_be_bytes();
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.signs.add(i / 8), 8);
            i += 64;
        }
        _mm512_storeu_pd(lanes.as_mut_ptr(), acc);
        bad == 0
    }
}

/// Pack whole 64-element words with AVX2 (8 floats per compare and
/// `movmskps`); returns how many elements it packed (0 without AVX2). Same
/// bits as [`word_sse2`] and the portable `word_of` (tests compare them).
pub(crate) fn pack_avx2(x: &[f32], out: &mut [u8]) -> usize {
    if !has_avx2() {
        return 0;
    }
    let n = (x.len() / 64 * 64).min(out.len() / 8 * 64);
    // SAFETY: AVX2 checked above; `x` holds at least `n` floats and `out`
    // at least `n / 8` bytes (the `min` above).
    unsafe { pack_avx2_inner(x.as_ptr(), out.as_mut_ptr(), n) };
    n
}

/// # Safety
/// AVX2 available, `x` valid for `n` floats, `out` for `n / 8` bytes,
/// `n % 64 == 0`.
#[target_feature(enable = "avx2")]
unsafe fn pack_avx2_inner(x: *const f32, out: *mut u8, n: usize) {
    // Four far-apart quarters, one word of each per iteration: four read
    // streams keep more cache-line fills in flight than one (a single
    // stream leaves this core's memory bandwidth unused).
    let words = n / 64;
    let q = words / 4;
    // SAFETY: the function's contract; word `w < words` covers elements
    // `64w..64w + 64 <= n` and bytes `8w..8w + 8 <= n / 8`.
    unsafe {
        for w in 0..q {
            for s in 0..4 {
                pack_word_avx2(x, out, w + s * q);
            }
        }
        for w in 4 * q..words {
            pack_word_avx2(x, out, w);
        }
    }
}

/// # Safety
/// AVX2 available; `x` valid for `64 (w + 1)` floats, `out` for `8 (w + 1)`
/// bytes.
#[inline(always)]
unsafe fn pack_word_avx2(x: *const f32, out: *mut u8, w: usize) {
    // SAFETY: the function's contract; offsets below `64 (w + 1)`.
    unsafe {
        let zero = _mm256_setzero_ps();
        let mut lsb_first = 0u64;
        for j in 0..8 {
            let v = _mm256_loadu_ps(x.add(64 * w + 8 * j));
            let bits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLT_UQ>(v, zero));
            lsb_first |= u64::from(bits as u8) << (8 * j);
        }
        let bytes = lsb_first.reverse_bits().to_be_bytes();
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), out.add(8 * w), 8);
    }
}

/// Lane `k` of a decoded byte tests bit `7 − k` (element 0 is the MSB).
#[inline(always)]
unsafe fn byte_bits() -> __m256i {
    // SAFETY: AVX (caller's target feature); values only.
    unsafe { _mm256_setr_epi32(128, 64, 32, 16, 8, 4, 2, 1) }
}

/// `±scale` per lane for the 8 signs of `byte` (bit 1: `+scale`).
#[inline(always)]
unsafe fn decode_byte(byte: u8, bits: __m256i, pos: __m256, neg: __m256) -> __m256 {
    // SAFETY: AVX2 (caller's target feature); values only.
    unsafe {
        let b = _mm256_and_si256(_mm256_set1_epi32(i32::from(byte)), bits);
        let set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bits));
        _mm256_blendv_ps(neg, pos, set)
    }
}

/// `pack::unpack_sum` over the whole bytes with AVX2: per 8 elements, the
/// ranks' `±scale` added in rank order from `0.0` (the same adds in the
/// same order, so the same bits as the scalar loop). Returns the elements
/// done (0 without AVX2); lengths checked by the caller.
pub(crate) fn unpack_sum_avx2(bits: &[&[u8]], scales: &[f32], out: &mut [f32]) -> usize {
    if !has_avx2() || bits.len() != scales.len() {
        return 0;
    }
    let groups = out.len() / 8;
    if bits.iter().any(|b| b.len() < groups) {
        return 0;
    }
    // SAFETY: AVX2 checked above; every `bits[r]` has `groups` bytes and
    // `out` `8 · groups` floats (checked above).
    unsafe { unpack_sum_inner(bits, scales, out, groups) };
    groups * 8
}

/// # Safety
/// AVX2; each `bits[r]` has at least `groups` bytes, `out` `8 · groups`
/// floats, `bits.len() == scales.len()`.
#[target_feature(enable = "avx2")]
unsafe fn unpack_sum_inner(bits: &[&[u8]], scales: &[f32], out: &mut [f32], groups: usize) {
    // Rank blocks of this many groups keep the partial sums in L1 (4 KiB).
    const BLOCK: usize = 128;
    // SAFETY: the function's contract; `g < groups` indexes every stream.
    unsafe {
        let mask = byte_bits();
        let out = out.as_mut_ptr();
        for start in (0..groups).step_by(BLOCK) {
            let end = (start + BLOCK).min(groups);
            for g in start..end {
                _mm256_storeu_ps(out.add(8 * g), _mm256_setzero_ps());
            }
            for (b, &s) in bits.iter().zip(scales) {
                let (pos, neg) = (_mm256_set1_ps(s), _mm256_set1_ps(-s));
                let b = b.as_ptr();
                for g in start..end {
                    let o = out.add(8 * g);
                    let v = decode_byte(*b.add(g), mask, pos, neg);
                    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), v));
                }
            }
        }
    }
}

/// `pack::unpack_signs` over the whole bytes with AVX2; returns the
/// elements done (0 without AVX2); lengths checked by the caller.
pub(crate) fn unpack_avx2(bits: &[u8], scale: f32, out: &mut [f32]) -> usize {
    if !has_avx2() {
        return 0;
    }
    let groups = (out.len() / 8).min(bits.len());
    // SAFETY: AVX2 checked above; `bits` has `groups` bytes and `out`
    // `8 · groups` floats (the `min` above).
    unsafe { unpack_inner(bits.as_ptr(), scale, out.as_mut_ptr(), groups) };
    groups * 8
}

/// # Safety
/// AVX2; `bits` valid for `groups` bytes, `out` for `8 · groups` floats.
#[target_feature(enable = "avx2")]
unsafe fn unpack_inner(bits: *const u8, scale: f32, out: *mut f32, groups: usize) {
    // SAFETY: the function's contract; `g < groups`.
    unsafe {
        let mask = byte_bits();
        let (pos, neg) = (_mm256_set1_ps(scale), _mm256_set1_ps(-scale));
        for g in 0..groups {
            _mm256_storeu_ps(out.add(8 * g), decode_byte(*bits.add(g), mask, pos, neg));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    extern crate std;

    use super::{pack_avx2, word_sse2};
    use crate::pack::word_of;
    use alloc::vec;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => -10.0f32..10.0,
            1 => Just(0.0f32),
            1 => Just(-0.0f32),
            1 => Just(1e-40f32), // subnormal
            1 => Just(-3e38f32), // overflows when added to itself
            1 => any::<f32>(),   // NaN, ±∞, subnormals included
        ]
    }

    std::thread_local! {
        /// Run the fused kernels on AVX2 even where AVX-512F is there.
        pub(crate) static AVX2_ONLY: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    }

    proptest! {
        /// The AVX2 and SSE2 sign kernels equal the portable word.
        #[test]
        fn avx2_and_sse2_packing_equal_the_portable_word(
            x in prop::collection::vec(value(), 0..700),
        ) {
            let words = x.len() / 64;
            let mut out = vec![0u8; words * 8];
            let done = pack_avx2(&x, &mut out);
            prop_assert!(done == 0 || done == words * 64);
            for (w, o) in x.chunks_exact(64).zip(out.chunks_exact(8)) {
                let w = <&[f32; 64]>::try_from(w).unwrap_or(&[0.0; 64]);
                let portable = word_of(w).to_be_bytes();
                prop_assert_eq!(word_sse2(w).to_be_bytes(), portable);
                if done > 0 {
                    prop_assert_eq!(o, &portable[..]);
                }
            }
        }
    }
}
