//! x86_64 vector kernels of the dense Adam(W) loops: the crate's only
//! `unsafe`.
//!
//! One generic loop body ([`step_body`], [`update_body`]) over a [`Vector`]
//! of 4 (SSE2) or 8 (AVX) lanes, inlined into a `#[target_feature]` entry
//! point per width, so each width compiles to packed `addps`/`mulps`/
//! `divps`/`sqrtps` (checked in the release build's disassembly). The lane
//! operations are exactly the scalar reference's, in its order, without FMA,
//! so the results are bit-identical (tests compare every path). SSE2 is the
//! x86_64 baseline (`cfg(target_feature = "sse2")`, compile time); AVX is
//! detected at run time (`onebit_codec::cpu`: `cpuid` and `xgetbv`, since
//! `no_std` has no `is_x86_feature_detected!` and the OS must also save the
//! YMM state).
#![allow(
    unsafe_code,
    reason = "SIMD intrinsics behind #[target_feature]; see SAFETY"
)]

use core::arch::x86_64::{
    __m128, __m256, _CMP_EQ_OQ, _mm_add_ps, _mm_cmpeq_ps, _mm_div_ps, _mm_loadu_ps,
    _mm_movemask_ps, _mm_mul_ps, _mm_set1_ps, _mm_setzero_ps, _mm_sqrt_ps, _mm_storeu_ps,
    _mm_sub_ps, _mm256_add_ps, _mm256_cmp_ps, _mm256_div_ps, _mm256_loadu_ps, _mm256_movemask_ps,
    _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_sqrt_ps, _mm256_storeu_ps,
    _mm256_sub_ps,
};

use crate::dense::{Consts, Flags, Job, Kernel};

/// Whether the CPU has AVX and the OS saves the YMM registers (cached; the
/// codec's `no_std` detection).
pub(crate) fn has_avx() -> bool {
    onebit_codec::cpu::has_avx()
}

/// One vector of `LANES` `f32`s and the operations the Adam loop needs.
/// Every method is `unsafe`: it needs its width's CPU feature, which the
/// `#[target_feature]` entry points below guarantee.
trait Vector: Copy {
    const LANES: usize;
    /// Load `LANES` floats from the start of `s` (`s.len() >= LANES`).
    unsafe fn load(s: &[f32]) -> Self;
    /// Store to the start of `s` (`s.len() >= LANES`).
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
/// only the intrinsics' names differ.
macro_rules! vector {
    ($name:ident, $reg:ty, $lanes:expr, $load:ident, $store:ident, $set1:ident, $add:ident,
     $sub:ident, $mul:ident, $div:ident, $sqrt:ident, |$v:ident| $zero_mask:expr) => {
        #[derive(Clone, Copy)]
        struct $name($reg);

        impl Vector for $name {
            const LANES: usize = $lanes;
            #[inline(always)]
            unsafe fn load(s: &[f32]) -> Self {
                debug_assert!(s.len() >= $lanes);
                // SAFETY: the caller passes at least LANES floats; `loadu` has
                // no alignment requirement; the width's feature is enabled.
                Self(unsafe { $load(s.as_ptr()) })
            }
            #[inline(always)]
            unsafe fn store(self, s: &mut [f32]) {
                debug_assert!(s.len() >= $lanes);
                // SAFETY: at least LANES writable floats (caller); no
                // alignment needed; the width's feature is enabled.
                unsafe { $store(s.as_mut_ptr(), self.0) }
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
    _mm_loadu_ps,
    _mm_storeu_ps,
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
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_add_ps,
    _mm256_sub_ps,
    _mm256_mul_ps,
    _mm256_div_ps,
    _mm256_sqrt_ps,
    |v| _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(v, _mm256_setzero_ps()))
);

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

/// Whole vectors of the full step; returns how many elements it did (the
/// scalar loop does the rest). `zero`, when given, has `x.len()` entries.
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
    // SAFETY: the width's feature is enabled (the entry points); every
    // load/store is at `i..i + w` with `i + w <= whole <= len` of its slice.
    unsafe {
        let s = Splat::<V>::new(k);
        let mut i = 0;
        while i < whole {
            let gv = V::load(&g[i..]);
            let gv = if f.scale { gv.div(s.div) } else { gv };
            if let Some(z) = zero.as_deref_mut() {
                let zb = gv.zero_bits();
                for (j, zj) in z[i..i + w].iter_mut().enumerate() {
                    *zj &= zb >> j & 1 != 0;
                }
            }
            let mv = s.b1.mul(V::load(&m[i..])).add(s.c1.mul(gv));
            let vv = s.b2.mul(V::load(&v[i..])).add(s.c2.mul(gv).mul(gv));
            mv.store(&mut m[i..]);
            vv.store(&mut v[i..]);
            s.update(f.bias, V::load(&x[i..]), mv, vv)
                .store(&mut x[i..]);
            i += w;
        }
    }
    whole
}

/// Whole vectors of the update alone (`v` frozen); returns elements done.
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
    // SAFETY: as in `step_body`: feature enabled, every access in bounds.
    unsafe {
        let s = Splat::<V>::new(k);
        let mut i = 0;
        while i < whole {
            s.update(f.bias, V::load(&x[i..]), V::load(&m[i..]), V::load(&v[i..]))
                .store(&mut x[i..]);
            i += w;
        }
    }
    whole
}

/// Whole vectors of `job` on `kernel`'s width; returns elements done (0
/// for [`Kernel::Scalar`]). AVX without CPU support falls back to SSE2.
pub(crate) fn run(kernel: Kernel, k: &Consts, f: Flags, job: Job<'_>) -> usize {
    match kernel {
        Kernel::Scalar => 0,
        // SAFETY: AVX support (CPU and OS) is checked in the guard.
        Kernel::Avx if has_avx() => unsafe { run_avx(k, f, job) },
        // SAFETY: SSE2 is part of the x86_64 baseline; `lib.rs` compiles
        // this module only with `target_feature = "sse2"`.
        Kernel::Sse2 | Kernel::Avx => unsafe { body::<Sse2>(k, f, job) },
    }
}

/// [`body`] compiled with AVX enabled (8 lanes).
#[target_feature(enable = "avx")]
unsafe fn run_avx(k: &Consts, f: Flags, job: Job<'_>) -> usize {
    // SAFETY: this function runs only with AVX enabled (its attribute).
    unsafe { body::<Avx>(k, f, job) }
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
