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

/// The portable body of `dense.rs`'s `any_non_finite`: an OR over the exponent bits
/// (all ones: NaN or ±∞), which the compiler vectorises at whatever width
/// the calling function is compiled for (`simd.rs` inlines it into its
/// `#[target_feature]` entry points). `g·1` is `g` for every non-NaN `g`
/// and a NaN for a NaN: `f = 1` skips the product.
#[inline(always)]
pub(crate) fn non_finite_fold(g: &[f32], f: f32) -> bool {
    const EXP: u32 = 0x7f80_0000;
    let mut bad = 0u32;
    if f == 1.0 {
        for &g in g {
            bad |= u32::from(g.to_bits() & EXP == EXP);
        }
    } else {
        for &g in g {
            bad |= u32::from((g * f).to_bits() & EXP == EXP);
        }
    }
    bad != 0
}
