//! The full-precision step of one group in a single pass over memory: the
//! dense Adam(W) step ([`crate::dense`]) run a block at a time, with what
//! the optimizer used to do in sweeps of its own done on each block while
//! it is still in L1:
//!
//! * the zero mask `z &= (g == 0)` of the warm-up, and whether any of the
//!   group's mask is still set afterwards, so that the next step passes no
//!   mask at all once none is (a dense gradient clears it at its first
//!   step; from then on the step reads and writes 28 B per element, not
//!   30: `x m v` read and written, `g` read, as torch's fused Adam);
//! * the automatic freeze's measure ([`crate::FreezePolicy::Auto`]):
//!   `Σ|v̂ − v̂_snap|` and `Σ|v̂|` in `f64`, element after element in the
//!   order `freeze::relative_change` sums them (so the same bits), and the
//!   new snapshot `v̂ = v/bc₂` written over the old one in the same loop —
//!   instead of a second sweep that read all of `v` back from memory.
//!
//! Every element gets exactly the arithmetic of the unblocked step (the
//! kernels are element-wise), so blocking changes no bit.

use num_traits::Float;

use crate::OneBitError;
use crate::dense::{AdamW, Kernel};

/// Elements per block: 4 KiB of each `f32` stream (`x m v g` and the
/// snapshot, 20 KiB) stays in a 32 KiB L1 between the step and the
/// measure that reads `v` back.
const BLOCK: usize = 1024;

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

/// One group's fused step; returns whether any of `zero` is still set
/// (`false` without a mask).
///
/// # Errors
/// [`OneBitError::Length`] when a slice differs in length from `x`;
/// nothing changes then.
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
    mut zero: Option<&mut [bool]>,
    mut measure: Option<Measure<'_>>,
) -> Result<bool, OneBitError> {
    let n = x.len();
    for len in [m.len(), v.len(), g.len()]
        .into_iter()
        .chain(zero.as_ref().map(|z| z.len()))
        .chain(measure.as_ref().map(|s| s.snapshot.len()))
    {
        if len != n {
            return Err(OneBitError::Length {
                expected: n,
                found: len,
            });
        }
    }
    let mut left = false;
    for s in (0..n).step_by(BLOCK) {
        let e = (s + BLOCK).min(n);
        let z = zero.as_deref_mut().map(|z| &mut z[s..e]);
        let (xb, mb, vb, gb) = (&mut x[s..e], &mut m[s..e], &mut v[s..e], &g[s..e]);
        match scale {
            Scale::Div(d) => h.step_scaled(kernel, xb, mb, vb, gb, d, z)?,
            Scale::Pre(f) => h.step_prescaled(kernel, xb, mb, vb, gb, f, z)?,
        }
        if let Some(z) = zero.as_deref() {
            // A fold, not `any`: no early exit, so it vectorises.
            left |= z[s..e].iter().fold(false, |a, &b| a | b);
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
    Ok(left)
}
