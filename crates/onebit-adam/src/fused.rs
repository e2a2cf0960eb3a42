//! The full-precision step of one group in a single pass over memory: the
//! dense Adam(W) step ([`crate::dense`]) run a block at a time, with what
//! the optimizer used to do in sweeps of its own done on each block while
//! it is still in cache:
//!
//! * the zero mask `z &= (g == 0)` of the warm-up, in a loop of its own
//!   over the block's gradient (vectorised; the kernel runs without it —
//!   its vector paths set the mask lane by lane), and only on the blocks
//!   where some of the mask is still set: a flag per block says so, so a
//!   block whose coordinates have all had a non-zero gradient reads and
//!   writes 28 B per element, not 30 (`x m v` read and written, `g` read,
//!   as torch's fused Adam), and a few dead coordinates cost only their
//!   blocks;
//! * the automatic freeze's measure ([`crate::FreezePolicy::Auto`]):
//!   `Σ|v̂ − v̂_snap|` and `Σ|v̂|` in `f64`, element after element in the
//!   order `freeze::change_sums` sums them (so the same bits), and the
//!   new snapshot `v̂ = v/bc₂` written over the old one in the same loop —
//!   instead of a second sweep that read all of `v` back from memory.
//!
//! Every element gets exactly the arithmetic of the unblocked step (the
//! kernels are element-wise), so blocking changes no bit.

use num_traits::Float;

use crate::OneBitError;
use crate::dense::{AdamW, Kernel};

/// Elements per block: 64 KiB of each `f32` stream (`x m v g` and the
/// snapshot, 320 KiB) stays in L2 between the step and the measure that
/// reads `v` back; also the granularity of the zero mask's flags. 1024
/// (everything in L1) timed about 10 % slower at 64 Mi elements than
/// 16 Ki and 256 Ki blocks (the kernel's per-call set-up and the broken
/// streams; one busy-machine run, interleaved).
pub(crate) const BLOCK: usize = 16 * 1024;

/// One flag per [`BLOCK`] of `mask`: whether any of the block is set.
pub(crate) fn block_flags(mask: &[bool]) -> alloc::vec::Vec<bool> {
    mask.chunks(BLOCK).map(|b| b.contains(&true)).collect()
}

/// How the step forms its gradient from the slice it reads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scale {
    /// `g / div` (the all-reduced sum of P ranks; `1` is an exact no-op).
    Div(f32),
    /// `g·f + 0.0` (the caller's gradient read directly, the bits of the
    /// mean-gradient copy; [`AdamW::step_prescaled`]).
    Pre(f32),
}

/// The automatic freeze's measure over one group (see the module docs).
#[derive(Debug)]
pub(crate) struct Measure<'a> {
    /// The group's part of the snapshot: `v̂` at the previous measure
    /// (compared when `compare`), overwritten with this step's `v̂`.
    pub(crate) snapshot: &'a mut [f32],
    /// Whether to accumulate the sums (the snapshot is from `window`
    /// steps ago) or only write the new snapshot.
    pub(crate) compare: bool,
    /// The group's bias correction `1 − β₂^{t_v}` (`1` when off).
    pub(crate) bc2: f32,
    /// Running `(Σ|v̂ − snap|, Σ|v̂|)`, carried from group to group in order.
    pub(crate) sums: &'a mut (f64, f64),
}

/// One group's fused step. `zero`: the group's mask and its
/// [`block_flags`], both updated (a block whose flag is clear is skipped:
/// `&=` on a clear mask changes nothing).
///
/// # Errors
/// [`OneBitError::Length`] when a slice differs in length from `x` (or the
/// flags from the blocks); nothing changes then.
#[allow(
    clippy::too_many_arguments,
    reason = "the optimizer's four tensors plus the pass's options"
)]
pub(crate) fn step(
    h: &AdamW,
    kernel: Kernel,
    x: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    scale: Scale,
    mut zero: Option<(&mut [bool], &mut [bool])>,
    mut measure: Option<Measure<'_>>,
) -> Result<(), OneBitError> {
    let n = x.len();
    for len in [m.len(), v.len(), g.len()]
        .into_iter()
        .chain(zero.as_ref().map(|z| z.0.len()))
        .chain(measure.as_ref().map(|s| s.snapshot.len()))
    {
        if len != n {
            return Err(OneBitError::Length {
                expected: n,
                found: len,
            });
        }
    }
    if let Some((_, flags)) = &zero
        && flags.len() != n.div_ceil(BLOCK)
    {
        return Err(OneBitError::Length {
            expected: n.div_ceil(BLOCK),
            found: flags.len(),
        });
    }
    for (b, s) in (0..n).step_by(BLOCK).enumerate() {
        let e = (s + BLOCK).min(n);
        let (xb, mb, vb, gb) = (&mut x[s..e], &mut m[s..e], &mut v[s..e], &g[s..e]);
        match scale {
            Scale::Div(d) => h.step_scaled(kernel, xb, mb, vb, gb, d, None)?,
            Scale::Pre(f) => h.step_prescaled(kernel, xb, mb, vb, gb, f, None)?,
        }
        if let Some((mask, flags)) = zero.as_mut()
            && flags[b]
        {
            flags[b] = clear_nonzero(&mut mask[s..e], gb, scale);
        }
        if let Some(ms) = measure.as_mut() {
            let (bc, snap) = (ms.bc2, &mut ms.snapshot[s..e]);
            if ms.compare {
                let (mut diff, mut norm) = *ms.sums;
                for (&v, s) in vb.iter().zip(snap) {
                    let now = v / bc;
                    let wide = f64::from(now);
                    diff += Float::abs(wide - f64::from(*s));
                    norm += Float::abs(wide);
                    *s = now;
                }
                *ms.sums = (diff, norm);
            } else {
                for (&v, s) in vb.iter().zip(snap) {
                    *s = v / bc;
                }
            }
        }
    }
    Ok(())
}

/// `z &= (ĝ == 0)` with `ĝ` the gradient exactly as the kernel forms it
/// (`g·f + 0.0`, or `g/div` unless `div` is 1: the same IEEE operations,
/// so the same zeros); returns whether any of `z` is still set. Plain
/// loops without early exit, so they vectorise.
fn clear_nonzero(z: &mut [bool], g: &[f32], scale: Scale) -> bool {
    let mut any = false;
    match scale {
        Scale::Div(d) if d != 1.0 => {
            for (z, &g) in z.iter_mut().zip(g) {
                *z &= g / d == 0.0;
                any |= *z;
            }
        }
        Scale::Div(_) => {
            for (z, &g) in z.iter_mut().zip(g) {
                *z &= g == 0.0;
                any |= *z;
            }
        }
        Scale::Pre(f) => {
            for (z, &g) in z.iter_mut().zip(g) {
                *z &= g * f + 0.0 == 0.0;
                any |= *z;
            }
        }
    }
    any
}
