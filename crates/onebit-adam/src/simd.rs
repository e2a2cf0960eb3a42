//! x86_64 vector kernels of the dense Adam(W) loops: the crate's only
//! `unsafe`.
//!
//! One generic loop body ([`step_body`], [`update_body`]) over a [`Vector`]
//! of 4 (SSE2), 8 (AVX) or 16 (AVX-512F) lanes, inlined into a
//! `#[target_feature]` entry point per width, so each width compiles to
//! packed `addps`/`mulps`/`divps`/`sqrtps` (checked in the release build's
//! disassembly, see [`run_avx512`]). The lane operations are exactly the
//! scalar reference's, in its order, without FMA, so the results are
//! bit-identical (tests compare every path). SSE2 is the x86_64 baseline
//! (`cfg(target_feature = "sse2")`, compile time); AVX and AVX-512F are
//! detected at run time (`onebit_codec::cpu`: `cpuid` and `xgetbv`, since
//! `no_std` has no `is_x86_feature_detected!` and the OS must also save the
//! YMM/ZMM state). AVX-512 loads and stores take an opmask, so its loop
//! ends with one masked partial vector instead of the scalar tail the
//! narrower widths leave to `dense.rs`.
#![allow(
    unsafe_code,
    reason = "SIMD intrinsics behind #[target_feature]; see SAFETY"
)]

use core::arch::x86_64::{
    __m128, __m256, __m512, __mmask16, _CMP_EQ_OQ, _mm_add_ps, _mm_cmpeq_ps, _mm_div_ps,
    _mm_loadu_ps, _mm_movemask_ps, _mm_mul_ps, _mm_set1_ps, _mm_setzero_ps, _mm_sqrt_ps,
    _mm_storeu_ps, _mm_sub_ps, _mm256_add_ps, _mm256_cmp_ps, _mm256_div_ps, _mm256_loadu_ps,
    _mm256_movemask_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_sqrt_ps,
    _mm256_storeu_ps, _mm256_sub_ps, _mm512_add_ps, _mm512_cmp_ps_mask, _mm512_div_ps,
    _mm512_loadu_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_mul_ps, _mm512_set1_ps,
    _mm512_setzero_ps, _mm512_sqrt_ps, _mm512_storeu_ps, _mm512_sub_ps,
};

use crate::kernel::{Consts, Flags, Job, Kernel, non_finite_fold};

/// [`crate::dense::any_non_finite`] on `kernel`'s width: the portable
/// fold compiled with AVX-512F (16 lanes) or AVX2 (8 lanes; its integer
/// compare needs AVX2, not AVX) when the CPU has them, else at the SSE2
/// baseline. The same answer on every width (an OR over the lanes).
pub(crate) fn any_non_finite(kernel: Kernel, g: &[f32], f: f32) -> bool {
    match kernel {
        // SAFETY: AVX-512F support (CPU and OS) is checked in the guard.
        Kernel::Avx512 if onebit_codec::cpu::has_avx512f() => unsafe { non_finite_avx512(g, f) },
        // SAFETY: AVX2 support (CPU and OS) is checked in the guard.
        Kernel::Avx | Kernel::Avx512 if onebit_codec::cpu::has_avx2() => unsafe {
            non_finite_avx2(g, f)
        },
        _ => non_finite_fold(g, f),
    }
}

/// [`non_finite_fold`] compiled with AVX-512F enabled.
#[target_feature(enable = "avx512f")]
unsafe fn non_finite_avx512(g: &[f32], f: f32) -> bool {
    non_finite_fold(g, f)
}

/// [`non_finite_fold`] compiled with AVX2 enabled.
#[target_feature(enable = "avx2")]
unsafe fn non_finite_avx2(g: &[f32], f: f32) -> bool {
    non_finite_fold(g, f)
}

/// One vector of `LANES` `f32`s and the operations the Adam loop needs.
/// Every method is `unsafe`: it needs its width's CPU feature, which the
/// `#[target_feature]` entry points below guarantee.
trait Vector: Copy {
    const LANES: usize;
    /// Whether [`Self::load`]/[`Self::store`] also take 1 to `LANES − 1`
    /// floats (opmask): the loop then does the tail itself.
    const MASKED: bool;
    /// Load the first `LANES` floats of `s` (`s.len() >= LANES`); with
    /// `MASKED` also a shorter non-empty `s`, the missing lanes `0.0`.
    unsafe fn load(s: &[f32]) -> Self;
    /// Store to the first `LANES` floats of `s` (`s.len() >= LANES`); with
    /// `MASKED` to all of a shorter non-empty `s`, nothing past its end.
    unsafe fn store(self, s: &mut [f32]);
    unsafe fn splat(v: f32) -> Self;
    unsafe fn add(self, o: Self) -> Self;
    unsafe fn sub(self, o: Self) -> Self;
    unsafe fn mul(self, o: Self) -> Self;
    unsafe fn div(self, o: Self) -> Self;
    unsafe fn sqrt(self) -> Self;
    /// Bit `j` set iff lane `j` is `== 0.0` (ordered compare: NaN is not).
    unsafe fn zero_bits(self) -> u32;
}

/// A [`Vector`] over one register type: the same methods for every width,
/// only the intrinsics' names differ. `load`/`store` are given as
/// expressions of the pointer and the slice length.
macro_rules! vector {
    ($name:ident, $reg:ty, $lanes:expr, masked: $masked:expr,
     load |$lp:ident, $llen:ident| $load:expr,
     store |$sp:ident, $slen:ident, $sv:ident| $store:expr,
     $set1:ident, $add:ident, $sub:ident, $mul:ident, $div:ident, $sqrt:ident,
     |$v:ident| $zero_mask:expr) => {
        #[derive(Clone, Copy)]
        struct $name($reg);

        impl Vector for $name {
            const LANES: usize = $lanes;
            const MASKED: bool = $masked;
            #[inline(always)]
            unsafe fn load(s: &[f32]) -> Self {
                debug_assert!(s.len() >= Self::LANES || (Self::MASKED && !s.is_empty()));
                let ($lp, $llen) = (s.as_ptr(), s.len());
                // SAFETY: the caller passes at least LANES floats, or (masked
                // widths) masks the load to the slice's length: masked-off
                // lanes are not read and cannot fault; `loadu` has no
                // alignment requirement; the width's feature is enabled.
                Self(unsafe { $load })
            }
            #[inline(always)]
            unsafe fn store(self, s: &mut [f32]) {
                debug_assert!(s.len() >= Self::LANES || (Self::MASKED && !s.is_empty()));
                let ($sp, $slen, $sv) = (s.as_mut_ptr(), s.len(), self.0);
                // SAFETY: at least LANES writable floats, or (masked widths)
                // the store is masked to the slice's length; no alignment
                // needed; the width's feature is enabled.
                unsafe { $store }
            }
            #[inline(always)]
            unsafe fn splat(v: f32) -> Self {
                // SAFETY: the width's feature is enabled (module contract).
                Self(unsafe { $set1(v) })
            }
            #[inline(always)]
            unsafe fn add(self, o: Self) -> Self {
                // SAFETY: the width's feature is enabled (module contract).
                Self(unsafe { $add(self.0, o.0) })
            }
            #[inline(always)]
            unsafe fn sub(self, o: Self) -> Self {
                // SAFETY: the width's feature is enabled (module contract).
                Self(unsafe { $sub(self.0, o.0) })
            }
            #[inline(always)]
            unsafe fn mul(self, o: Self) -> Self {
                // SAFETY: the width's feature is enabled (module contract).
                Self(unsafe { $mul(self.0, o.0) })
            }
            #[inline(always)]
            unsafe fn div(self, o: Self) -> Self {
                // SAFETY: the width's feature is enabled (module contract).
                Self(unsafe { $div(self.0, o.0) })
            }
            #[inline(always)]
            unsafe fn sqrt(self) -> Self {
                // SAFETY: the width's feature is enabled (module contract).
                Self(unsafe { $sqrt(self.0) })
            }
            #[inline(always)]
            unsafe fn zero_bits(self) -> u32 {
                let $v = self.0;
                // SAFETY: the width's feature is enabled (module contract).
                let bits: i32 = unsafe { $zero_mask };
                bits as u32
            }
        }
    };
}

vector!(
    Sse2,
    __m128,
    4,
    masked: false,
    load |p, _len| _mm_loadu_ps(p),
    store |p, _len, v| _mm_storeu_ps(p, v),
    _mm_set1_ps,
    _mm_add_ps,
    _mm_sub_ps,
    _mm_mul_ps,
    _mm_div_ps,
    _mm_sqrt_ps,
    |v| _mm_movemask_ps(_mm_cmpeq_ps(v, _mm_setzero_ps()))
);

vector!(
    Avx,
    __m256,
    8,
    masked: false,
    load |p, _len| _mm256_loadu_ps(p),
    store |p, _len, v| _mm256_storeu_ps(p, v),
    _mm256_set1_ps,
    _mm256_add_ps,
    _mm256_sub_ps,
    _mm256_mul_ps,
    _mm256_div_ps,
    _mm256_sqrt_ps,
    |v| _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(v, _mm256_setzero_ps()))
);

// Whole vectors (`len >= 16`, a constant in the main loop after inlining)
// use plain `vmovups`; the one partial vector at the end a masked one.
vector!(
    Avx512,
    __m512,
    16,
    masked: true,
    load |p, len| if len >= 16 {
        _mm512_loadu_ps(p)
    } else {
        _mm512_maskz_loadu_ps(first_lanes(len), p)
    },
    store |p, len, v| if len >= 16 {
        _mm512_storeu_ps(p, v)
    } else {
        _mm512_mask_storeu_ps(p, first_lanes(len), v)
    },
    _mm512_set1_ps,
    _mm512_add_ps,
    _mm512_sub_ps,
    _mm512_mul_ps,
    _mm512_div_ps,
    _mm512_sqrt_ps,
    |v| i32::from(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(v, _mm512_setzero_ps()))
);

/// The opmask of lanes `0..len` (`len < 16`).
#[inline(always)]
fn first_lanes(len: usize) -> __mmask16 {
    debug_assert!(len < 16);
    ((1u32 << len) - 1) as __mmask16
}

/// The step's constants as vectors.
#[derive(Clone, Copy)]
struct Splat<V> {
    div: V,
    b1: V,
    c1: V,
    b2: V,
    c2: V,
    bc1: V,
    bc2: V,
    eps: V,
    wd: V,
    lr: V,
    pre: V,
    zero: V,
}

impl<V: Vector> Splat<V> {
    #[inline(always)]
    unsafe fn new(k: &Consts) -> Self {
        // SAFETY: each splat needs only the width's feature, enabled (caller).
        unsafe {
            Self {
                div: V::splat(k.div),
                b1: V::splat(k.b1),
                c1: V::splat(k.c1),
                b2: V::splat(k.b2),
                c2: V::splat(k.c2),
                bc1: V::splat(k.bc1),
                bc2: V::splat(k.bc2),
                eps: V::splat(k.eps),
                wd: V::splat(k.wd),
                lr: V::splat(k.lr),
                pre: V::splat(k.pre),
                zero: V::splat(0.0),
            }
        }
    }

    /// `x − lr·(m̂/(√v̂ + ε) + λ·x)`, the scalar `update_elem` lane-wise.
    #[inline(always)]
    unsafe fn update(&self, bias: bool, x: V, m: V, v: V) -> V {
        // SAFETY: the width's feature is enabled (caller); values only.
        unsafe {
            let (mh, vh) = if bias {
                (m.div(self.bc1), v.div(self.bc2))
            } else {
                (m, v)
            };
            let u = mh.div(vh.sqrt().add(self.eps)).add(self.wd.mul(x));
            x.sub(self.lr.mul(u))
        }
    }
}

/// One vector of the full step: every slice (and `zero`) has `V::LANES`
/// elements, or, on a masked width, 1 to `V::LANES − 1` (the tail).
#[inline(always)]
unsafe fn step_vec<V: Vector>(
    s: &Splat<V>,
    f: Flags,
    x: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    zero: Option<&mut [bool]>,
) {
    // SAFETY: the width's feature is enabled (the entry points); every
    // slice is as long as the vector, or shorter on a masked width (the
    // caller's contract), which is what `load`/`store` need.
    unsafe {
        let gv = V::load(g);
        let gv = if f.pre { gv.mul(s.pre).add(s.zero) } else { gv };
        let gv = if f.scale { gv.div(s.div) } else { gv };
        if let Some(z) = zero {
            let zb = gv.zero_bits();
            for (j, zj) in z.iter_mut().enumerate() {
                *zj &= zb >> j & 1 != 0;
            }
        }
        let mv = s.b1.mul(V::load(m)).add(s.c1.mul(gv));
        let vv = s.b2.mul(V::load(v)).add(s.c2.mul(gv).mul(gv));
        mv.store(m);
        vv.store(v);
        s.update(f.bias, V::load(x), mv, vv).store(x);
    }
}

/// The full step over whole vectors, then, on a masked width, the tail as
/// one partial vector; returns how many elements it did (the scalar loop
/// in `dense.rs` does the rest). `zero`, when given, has `x.len()` entries.
#[inline(always)]
unsafe fn step_body<V: Vector>(
    k: &Consts,
    f: Flags,
    x: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    mut zero: Option<&mut [bool]>,
) -> usize {
    let w = V::LANES;
    let n = x.len().min(m.len()).min(v.len()).min(g.len());
    let whole = n / w * w;
    // SAFETY: the width's feature is enabled (the entry points); the loop
    // passes `w` elements of every slice (`i + w <= whole <= len`), so each
    // `load`/`store` is a plain full-width one (the length is a constant
    // after inlining); the tail call, on a masked width only, `1..w`.
    unsafe {
        let s = Splat::<V>::new(k);
        let mut i = 0;
        while i < whole {
            let e = i + w;
            let z = zero.as_deref_mut().map(|z| &mut z[i..e]);
            step_vec(&s, f, &mut x[i..e], &mut m[i..e], &mut v[i..e], &g[i..e], z);
            i = e;
        }
        if V::MASKED && whole < n {
            let z = zero.map(|z| &mut z[whole..n]);
            let (x, m, v) = (&mut x[whole..n], &mut m[whole..n], &mut v[whole..n]);
            step_vec(&s, f, x, m, v, &g[whole..n], z);
            return n;
        }
    }
    whole
}

/// The update alone (`v` frozen) over whole vectors and, on a masked width,
/// the tail; returns elements done.
#[inline(always)]
unsafe fn update_body<V: Vector>(
    k: &Consts,
    f: Flags,
    x: &mut [f32],
    m: &[f32],
    v: &[f32],
) -> usize {
    let w = V::LANES;
    let n = x.len().min(m.len()).min(v.len());
    let whole = n / w * w;
    // SAFETY: as in `step_body`: feature enabled, slices of `w` elements in
    // the loop, of `1..w` in the tail call (masked widths only).
    unsafe {
        let s = Splat::<V>::new(k);
        let mut i = 0;
        while i < whole {
            let e = i + w;
            update_vec(&s, f, &mut x[i..e], &m[i..e], &v[i..e]);
            i = e;
        }
        if V::MASKED && whole < n {
            update_vec(&s, f, &mut x[whole..n], &m[whole..n], &v[whole..n]);
            return n;
        }
    }
    whole
}

/// One vector of the update (slices as for [`step_vec`]).
#[inline(always)]
unsafe fn update_vec<V: Vector>(s: &Splat<V>, f: Flags, x: &mut [f32], m: &[f32], v: &[f32]) {
    // SAFETY: the width's feature is enabled; slice lengths as `load`/
    // `store` need (the caller's contract).
    unsafe {
        s.update(f.bias, V::load(x), V::load(m), V::load(v))
            .store(x);
    }
}

/// `job` on `kernel`'s width; returns elements done (0 for
/// [`Kernel::Scalar`], all of them for AVX-512, the whole vectors
/// otherwise). A width without CPU support falls back to the next narrower
/// one (same bits).
pub(crate) fn run(kernel: Kernel, k: &Consts, f: Flags, job: Job<'_>) -> usize {
    match kernel {
        Kernel::Scalar => 0,
        // SAFETY: AVX-512F support (CPU and OS) is checked in the guard.
        Kernel::Avx512 if onebit_codec::cpu::has_avx512f() => unsafe { run_avx512(k, f, job) },
        // SAFETY: AVX support (CPU and OS) is checked in the guard.
        Kernel::Avx | Kernel::Avx512 if onebit_codec::cpu::has_avx() => unsafe {
            run_avx(k, f, job)
        },
        // SAFETY: SSE2 is part of the x86_64 baseline; `lib.rs` compiles
        // this module only with `target_feature = "sse2"`.
        Kernel::Sse2 | Kernel::Avx | Kernel::Avx512 => unsafe { body::<Sse2>(k, f, job) },
    }
}

/// [`body`] compiled with AVX enabled (8 lanes).
#[target_feature(enable = "avx")]
unsafe fn run_avx(k: &Consts, f: Flags, job: Job<'_>) -> usize {
    // SAFETY: this function runs only with AVX enabled (its attribute).
    unsafe { body::<Avx>(k, f, job) }
}

/// [`body`] compiled with AVX-512F enabled (16 lanes, masked tail).
///
/// Checked in the release build's disassembly (`objdump -d` of the
/// `peers` example, Rust 1.95): the main loops are packed `zmm`
/// `vdivps`/`vsqrtps`/`vmulps`/`vaddps`/`vsubps` with plain `vmovups`, no
/// FMA and no scalar arithmetic; the tail uses `vmovups` under a `k`
/// opmask.
#[target_feature(enable = "avx512f")]
unsafe fn run_avx512(k: &Consts, f: Flags, job: Job<'_>) -> usize {
    // SAFETY: this function runs only with AVX-512F enabled (its attribute).
    unsafe { body::<Avx512>(k, f, job) }
}

/// The loop body of `job` on vectors `V` (inlined into each entry point,
/// so each width compiles to its own packed instructions).
#[inline(always)]
unsafe fn body<V: Vector>(k: &Consts, f: Flags, job: Job<'_>) -> usize {
    // SAFETY: `V`'s feature is enabled (the caller's contract).
    unsafe {
        match job {
            Job::Step { x, m, v, g, zero } => step_body::<V>(k, f, x, m, v, g, zero),
            Job::Update { x, m, v } => update_body::<V>(k, f, x, m, v),
        }
    }
}
