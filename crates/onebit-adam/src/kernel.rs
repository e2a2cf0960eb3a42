//! The contract between the dense Adam(W) step (`dense.rs`) and its
//! vector bodies (`simd.rs`): which kernel runs ([`Kernel`], detected at run
//! time), the step's constants and options, the element loop's job, and the
//! portable finiteness fold. Both sides import it; neither imports the other
//! back.

use core::sync::atomic::{AtomicU8, Ordering};

/// Which implementation runs the element loop. All give the same bits.
/// `#[non_exhaustive]`: kernels for more instruction sets will be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kernel {
    /// One element at a time (the reference; every target).
    Scalar,
    /// 4 lanes, SSE2 (part of every x86_64 CPU).
    Sse2,
    /// 8 lanes, AVX (detected at run time).
    Avx,
    /// 16 lanes, AVX-512F (detected at run time); the tail is one masked
    /// vector instead of a scalar loop.
    Avx512,
}

impl Kernel {
    /// Every kernel, slowest first.
    const ALL: [Self; 4] = [Self::Scalar, Self::Sse2, Self::Avx, Self::Avx512];

    /// The fastest kernel this CPU runs (detected once, then cached): the
    /// widest available. On the Xeon this was tuned on AVX-512 measured
    /// 1.04× AVX on one thread and at parity on two (under load;
    /// docs/BENCHMARKS.md, "Dense kernels against PyTorch and numpy").
    pub fn detect() -> Self {
        static CACHE: AtomicU8 = AtomicU8::new(0);
        match CACHE.load(Ordering::Relaxed) {
            code @ 1..=4 => Self::ALL[usize::from(code - 1)],
            _ => {
                let k = Self::all_available().last().unwrap_or(Self::Scalar);
                let code = Self::ALL.iter().position(|&a| a == k).unwrap_or(0);
                CACHE.store(code as u8 + 1, Ordering::Relaxed);
                k
            }
        }
    }

    /// Whether this CPU can run `self` (`Scalar` always).
    pub fn is_available(self) -> bool {
        cpu_has(self)
    }

    /// Every kernel this CPU runs, slowest first (for tests and benches).
    pub fn all_available() -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(|k| k.is_available())
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn cpu_has(k: Kernel) -> bool {
    match k {
        Kernel::Scalar | Kernel::Sse2 => true,
        Kernel::Avx => onebit_codec::cpu::has_avx(),
        Kernel::Avx512 => onebit_codec::cpu::has_avx512f(),
    }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn cpu_has(k: Kernel) -> bool {
    k == Kernel::Scalar
}

/// The step's constants, derived once from [`crate::AdamW`] (every path uses these
/// exact `f32` values, so they agree bit for bit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Consts {
    pub(crate) div: f32,
    pub(crate) b1: f32,
    pub(crate) c1: f32,
    pub(crate) b2: f32,
    pub(crate) c2: f32,
    pub(crate) bc1: f32,
    pub(crate) bc2: f32,
    pub(crate) eps: f32,
    pub(crate) wd: f32,
    pub(crate) lr: f32,
    /// The factor of [`Flags::pre`].
    pub(crate) pre: f32,
}

/// Options of the element loops; the vector kernels take the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flags {
    /// Divide `m`, `v` by `bc1`, `bc2` (bias correction).
    pub(crate) bias: bool,
    /// Divide `g` by `div` (skipped for `div == 1`: `g/1 = g` exactly, and a
    /// division is the loop's most expensive operation).
    pub(crate) scale: bool,
    /// First form `g ← g·pre + 0.0` (the optimizer reading the caller's
    /// gradient directly: the bits its mean-gradient copy would hold, `−0`
    /// becoming `+0`), before `/div`.
    pub(crate) pre: bool,
}

/// One element loop's tensors, handed to the vector dispatcher
/// (`dense.rs`'s `vector`): it runs the whole vectors (AVX-512: everything), the
/// scalar loop the rest.
#[cfg_attr(
    not(all(target_arch = "x86_64", target_feature = "sse2")),
    allow(dead_code, reason = "read by the x86_64 kernels only")
)]
pub(crate) enum Job<'a> {
    /// The full step ([`crate::AdamW::step_scaled`]).
    Step {
        x: &'a mut [f32],
        m: &'a mut [f32],
        v: &'a mut [f32],
        g: &'a [f32],
        zero: Option<&'a mut [bool]>,
    },
    /// The update alone ([`crate::AdamW::update`]).
    Update {
        x: &'a mut [f32],
        m: &'a [f32],
        v: &'a [f32],
    },
}

/// Read streams of [`non_finite_fold`]: `g` is cut into this many equal
/// parts, read a [`FOLD_CHUNK`] of each in turn. One core keeps more cache
/// lines in flight over several far-apart streams than over one (the
/// hardware prefetcher follows each): at 64 Mi elements, under load, 8
/// streams read `g` in about half the time of one (docs/ONEBIT_ADAM.md,
/// "Passes and bytes of the full-precision step").
const FOLD_STREAMS: usize = 8;

/// Elements of one stream read at a time (256 B: four cache lines).
const FOLD_CHUNK: usize = 64;

/// The bits a finite `x` stays below once shifted left by one (the sign
/// dropped): an all-ones exponent (NaN or ±∞) is `≥` this.
const SHIFTED_EXP: u32 = 0xff00_0000;

/// `acc[l] = max(acc[l], bits(ĝ) << 1)` lane by lane over `c` (whole
/// vectors of 16), `ĝ = g·f` when `PRE`, else `g`: an unsigned max, which
/// every width has as one instruction, no branch and no early exit.
#[inline(always)]
fn fold_max<const PRE: bool>(acc: &mut [u32; 16], c: &[f32], f: f32) {
    for v in c.chunks_exact(16) {
        for (a, &g) in acc.iter_mut().zip(v) {
            let g = if PRE { g * f } else { g };
            *a = (*a).max(g.to_bits() << 1);
        }
    }
}

/// [`non_finite_fold`] for one `PRE` (see [`fold_max`]).
#[inline(always)]
fn fold_streams<const PRE: bool>(g: &[f32], f: f32) -> bool {
    let part = g.len() / (FOLD_STREAMS * FOLD_CHUNK) * FOLD_CHUNK;
    let mut acc = [0u32; 16];
    if part > 0 {
        let mut parts = g.chunks_exact(part);
        let streams: [&[f32]; FOLD_STREAMS] = core::array::from_fn(|_| parts.next().unwrap_or(&[]));
        for w in (0..part).step_by(FOLD_CHUNK) {
            for s in &streams {
                fold_max::<PRE>(&mut acc, &s[w..w + FOLD_CHUNK], f);
            }
        }
    }
    let mut bad = acc.iter().any(|&a| a >= SHIFTED_EXP);
    for &x in &g[FOLD_STREAMS * part..] {
        let x = if PRE { x * f } else { x };
        bad |= x.to_bits() << 1 >= SHIFTED_EXP;
    }
    bad
}

/// The portable body of `dense.rs`'s `any_non_finite`: whether any
/// `g[i]·f` has an all-ones exponent (NaN or ±∞), as an unsigned max over
/// the bits shifted past the sign, over [`FOLD_STREAMS`] streams; the
/// compiler vectorises it at whatever width the calling function is
/// compiled for (`simd.rs` inlines it into its `#[target_feature]` entry
/// points). `g·1` is `g` for every non-NaN `g` and a NaN for a NaN: `f = 1`
/// skips the product.
#[inline(always)]
pub(crate) fn non_finite_fold(g: &[f32], f: f32) -> bool {
    if f == 1.0 {
        fold_streams::<false>(g, f)
    } else {
        fold_streams::<true>(g, f)
    }
}
