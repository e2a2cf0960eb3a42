//! Dense Adam(W) over contiguous `f32` tensors: the local arithmetic of both
//! 1-bit Adam stages, vectorized.
//!
//! Per element, all in `f32`, in this order (the reference the 1-bit Adam
//! tests and the PyTorch/DeepSpeed comparisons were written against):
//!
//! ```text
//! g ← g / div                                  (div: ranks or micro-batches; 1 = exact no-op)
//! m ← β₁·m + (1−β₁)·g
//! v ← β₂·v + ((1−β₂)·g)·g
//! m̂, v̂ = m/b₁, v/b₂  with bias correction (b₁ = 1−β₁ᵗ, b₂ = 1−β₂^{t_v}), else m, v
//! x ← x − lr·(m̂/(√v̂ + ε) + λ·x)
//! ```
//!
//! Every operation is a correctly rounded IEEE-754 add, multiply, divide or
//! square root, never contracted into an FMA. The vector paths (SSE2, the
//! x86_64 baseline; AVX and AVX-512F, detected at run time) run the same
//! operations in the same order on 4, 8 or 16 lanes, so **every path gives
//! the same bits** as the scalar reference ([`Kernel::Scalar`]); tests
//! compare them on random inputs including subnormals, zeros and large
//! values, at every length (vector tails; AVX-512 does its tail as one
//! masked vector). `no_std`: detection reads `cpuid`/`xgetbv` directly
//! (`onebit_codec::cpu`), once, cached.

use num_traits::Float;

use crate::OneBitError;
use crate::allreduce::ServerSigns;
pub use crate::kernel::Kernel;
pub(crate) use crate::kernel::{Consts, Flags, Job};

/// Hyper-parameters of one dense Adam(W) step, resolved for the step at hand.
/// `Default` holds the reference values (DeepSpeed `OnebitAdam`: lr 1e-3,
/// betas (0.9, 0.999), eps 1e-8, no weight decay, no bias correction).
///
/// # Example
///
/// ```
/// use onebit_adam::{AdamW, Kernel};
///
/// let adam = AdamW::default().with_lr(0.1).with_bias(Some((0.1, 0.001)));
/// let (mut x, mut m, mut v) = (vec![1.0f32; 5], vec![0.0; 5], vec![0.0; 5]);
/// adam.step(&mut x, &mut m, &mut v, &[0.5; 5])?;
/// // The first bias-corrected Adam step moves every coordinate by ≈ lr.
/// assert!(x.iter().all(|&xi| (xi - 0.9).abs() < 1e-5));
/// // Every kernel this CPU runs gives the same bits.
/// for k in Kernel::all_available() {
///     let (mut y, mut m, mut v) = (vec![1.0f32; 5], vec![0.0; 5], vec![0.0; 5]);
///     adam.step_scaled(k, &mut y, &mut m, &mut v, &[0.5; 5], 1.0, None)?;
///     assert_eq!(x, y);
/// }
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct AdamW {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay β₁.
    pub beta1: f32,
    /// Second-moment decay β₂.
    pub beta2: f32,
    /// Denominator guard ε.
    pub eps: f32,
    /// Decoupled weight decay λ.
    pub weight_decay: f32,
    /// `Some((1−β₁ᵗ, 1−β₂^{t_v}))` divides `m` and `v` by these before the
    /// update (bias correction); `None` uses `m`, `v` as they are.
    pub bias: Option<(f32, f32)>,
}

onebit_codec::with_setters!(AdamW {
    with_lr => lr: f32,
    with_beta1 => beta1: f32,
    with_beta2 => beta2: f32,
    with_eps => eps: f32,
    with_weight_decay => weight_decay: f32,
    with_bias => bias: Option<(f32, f32)>,
});

impl Default for AdamW {
    /// The reference values (PyTorch's and DeepSpeed's Adam defaults: lr
    /// 1e-3, β 0.9 / 0.999, ε 1e-8, no weight decay, no bias correction);
    /// the optimizer's [`crate::Config`] takes its defaults from here.
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            bias: None,
        }
    }
}

impl Consts {
    fn new(h: &AdamW, div: f32) -> Self {
        let (bc1, bc2) = h.bias.unwrap_or((1.0, 1.0));
        Self {
            div,
            b1: h.beta1,
            c1: 1.0 - h.beta1,
            b2: h.beta2,
            c2: 1.0 - h.beta2,
            bc1,
            bc2,
            eps: h.eps,
            wd: h.weight_decay,
            lr: h.lr,
            pre: 1.0,
        }
    }
}

impl AdamW {
    /// One full Adam(W) step: `m`, `v` from `g`, then `x`.
    ///
    /// # Errors
    /// [`OneBitError::Length`] when `m`, `v` or `g` differ in length from
    /// `x`; nothing changes then.
    pub fn step(
        &self,
        x: &mut [f32],
        m: &mut [f32],
        v: &mut [f32],
        g: &[f32],
    ) -> Result<(), OneBitError> {
        self.step_scaled(Kernel::detect(), x, m, v, g, 1.0, None)
    }

    /// [`Self::step`] with the gradient divided by `div` first (the number
    /// of ranks or micro-batches summed into `g`), on kernel `kernel`
    /// ([`Kernel::detect`] unless comparing paths), and, with `zero`,
    /// `zero[i] &= (g[i]/div == 0)` (1-bit Adam's warm-up zero mask).
    /// A kernel this CPU lacks falls back to the next narrower one it has
    /// (same bits).
    ///
    /// # Errors
    /// [`OneBitError::Length`] when a slice differs in length from `x`;
    /// nothing changes then.
    #[allow(
        clippy::too_many_arguments,
        reason = "the optimizer's four tensors plus options"
    )]
    pub fn step_scaled(
        &self,
        kernel: Kernel,
        x: &mut [f32],
        m: &mut [f32],
        v: &mut [f32],
        g: &[f32],
        div: f32,
        zero: Option<&mut [bool]>,
    ) -> Result<(), OneBitError> {
        let n = x.len();
        for len in [m.len(), v.len(), g.len()]
            .into_iter()
            .chain(zero.as_ref().map(|z| z.len()))
        {
            check_len(n, len)?;
        }
        let k = Consts::new(self, div);
        let flags = Flags {
            bias: self.bias.is_some(),
            scale: div != 1.0,
            pre: false,
        };
        run(kernel, &k, flags, x, m, v, g, zero);
        Ok(())
    }

    /// [`Self::step_scaled`] on the gradient `g·factor + 0.0` formed in the
    /// step's own pass (`div` 1): the optimizer's warm-up step on one rank
    /// reads the caller's gradient without a mean-gradient copy. The bits of
    /// `step_scaled` on the copy `g.map(|g| g * factor + 0.0)`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the optimizer's four tensors plus options"
    )]
    pub(crate) fn step_prescaled(
        &self,
        kernel: Kernel,
        x: &mut [f32],
        m: &mut [f32],
        v: &mut [f32],
        g: &[f32],
        factor: f32,
        zero: Option<&mut [bool]>,
    ) -> Result<(), OneBitError> {
        let n = x.len();
        for len in [m.len(), v.len(), g.len()]
            .into_iter()
            .chain(zero.as_ref().map(|z| z.len()))
        {
            check_len(n, len)?;
        }
        let k = Consts {
            pre: factor,
            ..Consts::new(self, 1.0)
        };
        let flags = Flags {
            bias: self.bias.is_some(),
            scale: false,
            pre: true,
        };
        run(kernel, &k, flags, x, m, v, g, zero);
        Ok(())
    }

    /// The parameter update alone, `v` frozen and `m` given (1-bit Adam's
    /// compressed stage): `x ← x − lr·(m̂/(√v̂ + ε) + λ·x)`.
    ///
    /// # Errors
    /// [`OneBitError::Length`] when `m` or `v` differ in length from `x`;
    /// nothing changes then.
    pub fn update(
        &self,
        kernel: Kernel,
        x: &mut [f32],
        m: &[f32],
        v: &[f32],
    ) -> Result<(), OneBitError> {
        check_len(x.len(), m.len())?;
        check_len(x.len(), v.len())?;
        let k = Consts::new(self, 1.0);
        let flags = Flags {
            bias: self.bias.is_some(),
            scale: false,
            pre: false,
        };
        run_update(kernel, &k, flags, x, m, v);
        Ok(())
    }

    /// The 1-bit stage's `Momentum` finish (every coordinate live),
    /// fused with the all-reduce's decode: block by block, the reduced
    /// momentum is decoded from the server signs into `m` and the block
    /// updated while it is in L1. The bits of decoding all of `m` and then
    /// [`AdamW::update`] (element-wise arithmetic, the same kernel), without
    /// the second read of `m` from memory.
    pub(crate) fn update_decoded(
        &self,
        kernel: Kernel,
        x: &mut [f32],
        m: &mut [f32],
        v: &[f32],
        signs: ServerSigns<'_>,
    ) -> Result<(), OneBitError> {
        check_len(x.len(), m.len())?;
        check_len(x.len(), v.len())?;
        let k = Consts::new(self, 1.0);
        let flags = Flags {
            bias: self.bias.is_some(),
            scale: false,
            pre: false,
        };
        for start in (0..x.len()).step_by(DECODE_BLOCK) {
            let end = (start + DECODE_BLOCK).min(x.len());
            signs.decode(start, &mut m[start..end]);
            run_update(
                kernel,
                &k,
                flags,
                &mut x[start..end],
                &m[start..end],
                &v[start..end],
            );
        }
        Ok(())
    }

    /// The 1-bit stage's `PreconditionedMomentum` finish, fused: on each
    /// live run `m = u·d` (`u` the reduced preconditioned momentum, decoded
    /// from the server signs a block at a time into an L1 buffer, never
    /// written out; `d` the frozen `√(v/bc2) + ε`, packed run after run)
    /// and the update divides by `d` itself, which is the update's own
    /// denominator bit for bit; the dead coordinates between runs get
    /// [`AdamW::update`]. The bits of decoding `u`, `m[run] = u·d`, then
    /// `update(x, m, v)`, in one pass that neither reads `m` back nor takes
    /// a `√` per element.
    pub(crate) fn update_preconditioned(
        &self,
        kernel: Kernel,
        x: &mut [f32],
        m: &mut [f32],
        v: &[f32],
        packed: PackedRuns<'_>,
    ) -> Result<(), OneBitError> {
        let PackedRuns { live, u, d } = packed;
        check_len(x.len(), m.len())?;
        check_len(x.len(), v.len())?;
        check_len(u.len(), d.len())?;
        let count = live.iter().map(ExactSizeIterator::len).sum();
        check_len(count, u.len())?;
        let mut block = [0.0f32; DECODE_BLOCK];
        if live.last().is_some_and(|r| r.end > x.len()) {
            return Err(OneBitError::Length {
                expected: x.len(),
                found: live.last().map_or(0, |r| r.end),
            });
        }
        let k = Consts::new(self, 1.0);
        let flags = Flags {
            bias: self.bias.is_some(),
            scale: false,
            pre: false,
        };
        // The empty run at `x.len()` sends the tail after the last live
        // run through the plain update too.
        let end = x.len()..x.len();
        let (mut at, mut packed) = (0, 0);
        for r in live.iter().chain(core::iter::once(&end)) {
            let gap = at..r.start;
            run_update(
                kernel,
                &k,
                flags,
                &mut x[gap.clone()],
                &m[gap.clone()],
                &v[gap],
            );
            // The run a decoded block at a time (`u` never leaves L1).
            for s in (r.start..r.end).step_by(DECODE_BLOCK) {
                let e = (s + DECODE_BLOCK).min(r.end);
                let (p, len) = (packed + (s - r.start), e - s);
                let decoded = &mut block[..len];
                u.signs.decode(p, decoded);
                let d = &d[p..p + len];
                for (((x, m), &u), &d) in x[s..e].iter_mut().zip(&mut m[s..e]).zip(&*decoded).zip(d)
                {
                    *m = u * d;
                    // `update_elem` with `√(v/bc2) + ε` = `d`.
                    let mh = if flags.bias { *m / k.bc1 } else { *m };
                    *x -= k.lr * (mh / d + k.wd * *x);
                }
            }
            packed += r.len();
            at = r.end;
        }
        Ok(())
    }
}

/// Elements decoded from the server signs per block of the fused 1-bit
/// finishes (4 KiB of `f32`: stays in L1 between the decode and its use).
const DECODE_BLOCK: usize = 1024;

/// Values packed run after run over a group's live coordinates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedRuns<'a> {
    /// The live runs (group-relative, in order).
    pub(crate) live: &'a [core::ops::Range<usize>],
    /// The reduced preconditioned momentum, as the all-reduce left it.
    pub(crate) u: PackedSigns<'a>,
    /// The frozen denominators `√(v/bc2) + ε`.
    pub(crate) d: &'a [f32],
}

/// The all-reduce's server signs of `len` packed values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedSigns<'a> {
    /// The gathered chunks.
    pub(crate) signs: ServerSigns<'a>,
    /// Packed values (the live coordinates).
    pub(crate) len: usize,
}

impl PackedSigns<'_> {
    fn len(&self) -> usize {
        self.len
    }
}

fn check_len(expected: usize, found: usize) -> Result<(), OneBitError> {
    if expected == found {
        Ok(())
    } else {
        Err(OneBitError::Length { expected, found })
    }
}

/// `job` on `kernel` (SSE2, AVX or AVX-512 as the CPU has them): whole
/// vectors, and on AVX-512 the tail too; returns how many elements were
/// done (0 for [`Kernel::Scalar`]).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn vector(kernel: Kernel, k: &Consts, f: Flags, job: Job<'_>) -> usize {
    crate::simd::run(kernel, k, f, job)
}

/// Whether any `g[i]·f` is NaN/±∞ (for `f = 1`, any `g[i]`): one read of
/// `g`, branch-free, on the widest vectors `kernel` may use (AVX-512F or
/// AVX2 when the CPU has them; the optimizer's finiteness check of the
/// caller's gradient, a pass of its own before the step). The same answer
/// on every kernel.
pub(crate) fn any_non_finite(kernel: Kernel, g: &[f32], f: f32) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let bad = crate::simd::any_non_finite(kernel, g, f);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let bad = {
        let _ = kernel;
        crate::kernel::non_finite_fold(g, f)
    };
    bad
}

/// No vector kernels off x86_64: the scalar loop does everything.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn vector(_: Kernel, _: &Consts, _: Flags, _: Job<'_>) -> usize {
    0
}

/// Full step on `kernel` (lengths checked): the vector kernel takes whole
/// vectors (AVX-512: everything), the scalar loop the rest.
#[allow(
    clippy::too_many_arguments,
    reason = "internal: the four tensors and options"
)]
fn run(
    kernel: Kernel,
    k: &Consts,
    f: Flags,
    x: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    mut zero: Option<&mut [bool]>,
) {
    let job = Job::Step {
        x: &mut *x,
        m: &mut *m,
        v: &mut *v,
        g,
        zero: zero.as_deref_mut(),
    };
    let done = vector(kernel, k, f, job);
    let z = zero.map(|z| &mut z[done..]);
    scalar_step(
        k,
        f,
        &mut x[done..],
        &mut m[done..],
        &mut v[done..],
        &g[done..],
        z,
    );
}

fn run_update(kernel: Kernel, k: &Consts, f: Flags, x: &mut [f32], m: &[f32], v: &[f32]) {
    let done = vector(kernel, k, f, Job::Update { x: &mut *x, m, v });
    for ((x, &m), &v) in x[done..].iter_mut().zip(&m[done..]).zip(&v[done..]) {
        update_elem(k, f.bias, x, m, v);
    }
}

/// The scalar reference loop (also the vector kernels' tail).
fn scalar_step(
    k: &Consts,
    f: Flags,
    x: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    zero: Option<&mut [bool]>,
) {
    match zero {
        Some(z) => {
            for ((((x, m), v), &g), z) in x.iter_mut().zip(m).zip(v).zip(g).zip(z) {
                let g = if f.pre { g * k.pre + 0.0 } else { g };
                let g = if f.scale { g / k.div } else { g };
                *z &= g == 0.0;
                moments_elem(k, m, v, g);
                update_elem(k, f.bias, x, *m, *v);
            }
        }
        None => {
            for (((x, m), v), &g) in x.iter_mut().zip(m).zip(v).zip(g) {
                let g = if f.pre { g * k.pre + 0.0 } else { g };
                let g = if f.scale { g / k.div } else { g };
                moments_elem(k, m, v, g);
                update_elem(k, f.bias, x, *m, *v);
            }
        }
    }
}

#[inline(always)]
fn moments_elem(k: &Consts, m: &mut f32, v: &mut f32, g: f32) {
    *m = k.b1 * *m + k.c1 * g;
    *v = k.b2 * *v + k.c2 * g * g;
}

#[inline(always)]
fn update_elem(k: &Consts, bias: bool, x: &mut f32, m: f32, v: f32) {
    let (mh, vh) = if bias { (m / k.bc1, v / k.bc2) } else { (m, v) };
    let u = mh / (Float::sqrt(vh) + k.eps) + k.wd * *x;
    *x -= k.lr * u;
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::{AdamW, Kernel};

    /// `step_prescaled` (the optimizer's one-rank warm-up, reading the
    /// caller's gradient) gives, on every kernel this CPU runs and at every
    /// length 0–40 (vector bodies and tails), the bits of `step_scaled` on
    /// the copy `g·f + 0.0` on the scalar reference — signed zeros,
    /// subnormals, large values, with and without bias correction.
    #[test]
    fn prescaled_step_is_the_step_on_the_copy_on_every_kernel() {
        let edge = [
            0.0f32,
            -0.0,
            f32::from_bits(1),
            -f32::MIN_POSITIVE,
            1e-3,
            -2.5,
            3e15,
            -7e-20,
        ];
        let value = |i: usize, salt: u32| -> f32 {
            let h = (i as u32 + 1).wrapping_mul(0x9E37_79B9) ^ salt;
            if h.is_multiple_of(5) {
                edge[(h / 5) as usize % edge.len()]
            } else {
                ((h >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.1
            }
        };
        for bias in [None, Some((0.19f32, 0.002f32))] {
            for factor in [1.0f32, 3.0, -0.5] {
                let adam = AdamW::default().with_weight_decay(0.01).with_bias(bias);
                for n in 0..=40 {
                    let g: Vec<f32> = (0..n).map(|i| value(i, 1)).collect();
                    let start: Vec<f32> = (0..n).map(|i| value(i, 2)).collect();
                    // `m = −0` where `g` is a zero: only `g·f + 0.0` (not
                    // `g·f`) then gives the copy's `+0` momentum.
                    let m0: Vec<f32> = (0..n)
                        .map(|i| if g[i] == 0.0 { -0.0 } else { value(i, 3) })
                        .collect();
                    let v0: Vec<f32> = (0..n).map(|i| value(i, 4).abs()).collect();
                    let copy: Vec<f32> = g.iter().map(|&g| g * factor + 0.0).collect();
                    let (mut x, mut m, mut v) = (start.clone(), m0.clone(), v0.clone());
                    let mut z = alloc::vec![true; n];
                    adam.step_scaled(
                        Kernel::Scalar,
                        &mut x,
                        &mut m,
                        &mut v,
                        &copy,
                        1.0,
                        Some(&mut z),
                    )
                    .unwrap();
                    let want = (bits(&x), bits(&m), bits(&v), z);
                    for k in Kernel::all_available() {
                        let (mut x, mut m, mut v) = (start.clone(), m0.clone(), v0.clone());
                        let mut z = alloc::vec![true; n];
                        adam.step_prescaled(k, &mut x, &mut m, &mut v, &g, factor, Some(&mut z))
                            .unwrap();
                        assert_eq!((bits(&x), bits(&m), bits(&v), z), want, "{k:?} n={n}");
                    }
                }
            }
        }
    }

    /// The finiteness check agrees with the obvious reference
    /// (`!(g·f).is_finite()` anywhere) on every kernel this CPU runs, at
    /// every length 0–70 (vector bodies and tails) and at lengths around
    /// the multi-stream body (8 streams of 64-element chunks: 511, 512,
    /// 513, 1541) with one bad value — NaN, ±∞, or a finite `g` whose
    /// product overflows — at every index (every 7th and the ends of each
    /// stream's part for the long ones), and with none (including
    /// `±f32::MAX`, subnormals and signed zeros, finite for `f = 1`).
    #[test]
    fn the_finiteness_check_matches_the_reference_on_every_kernel() {
        let fine = [
            0.0f32,
            -0.0,
            1.5,
            -2.0,
            f32::from_bits(1),
            f32::MAX,
            -f32::MAX,
        ];
        for f in [1.0f32, 3.0, -0.5] {
            for n in (0..=70usize).chain([511, 512, 513, 1541]) {
                let clean: Vec<f32> = (0..n).map(|i| fine[i % fine.len()] * 0.25).collect();
                let mut cases = alloc::vec![clean.clone()];
                // Long: every 7th index, and each stream part's first and
                // last element (parts of 64 or 192 here) and the tail's.
                let edge = |i: usize| i.is_multiple_of(64) || i % 64 == 63 || i + 8 >= n;
                for at in (0..n).filter(|&i| n <= 70 || i % 7 == 0 || edge(i)) {
                    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX] {
                        let mut g = clean.clone();
                        g[at] = bad;
                        cases.push(g);
                    }
                }
                for g in &cases {
                    let want = g.iter().any(|&g| !(g * f).is_finite());
                    for k in Kernel::all_available() {
                        assert_eq!(super::any_non_finite(k, g, f), want, "{k:?} n={n} f={f}");
                    }
                }
            }
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }
}
