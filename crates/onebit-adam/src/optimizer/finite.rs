//! The gradient's finiteness check: whether a step refuses a NaN/±∞
//! before it changes anything ([`FiniteCheck`]), and the two forms the
//! check takes — a read-only pass of its own over the caller's gradient
//! ([`check_products`], where the step has no other pass to put it in),
//! or an exponent-bits OR inside a pass that writes the values anyway
//! ([`fill_checked`], free).

use crate::OneBitError;
use crate::dense::Kernel;

/// Whether [`crate::OneBitAdam`]'s steps check the gradient for NaN/±∞
/// before changing any state. Set with [`crate::Config::with_finite_check`];
/// default [`FiniteCheck::On`].
///
/// ```
/// use onebit_adam::comm_traits::SingleRank;
/// use onebit_adam::{Config, FiniteCheck, OneBitAdam, OneBitError};
///
/// let mut x = [1.0f32, 1.0];
/// let mut comm = SingleRank::default();
/// // On (the default): refused, nothing changed.
/// let mut checked = OneBitAdam::new(2, Config::default())?;
/// let err = checked.step_with_grad(&mut comm, &mut x, &[0.5, f32::NAN]);
/// assert!(matches!(err, Err(OneBitError::NonFinite { index: 1 })));
/// assert_eq!((x, checked.steps()), ([1.0, 1.0], 0));
/// // Off: the step runs, and the bad coordinate is poisoned (as torch's Adam).
/// let config = Config::default().with_finite_check(FiniteCheck::Off);
/// let mut unchecked = OneBitAdam::new(2, config)?;
/// unchecked.step_with_grad(&mut comm, &mut x, &[0.5, f32::NAN])?;
/// assert!(x[0] < 1.0 && x[1].is_nan() && unchecked.momentum()[1].is_nan());
/// # Ok::<(), OneBitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FiniteCheck {
    /// Every step, [`crate::OneBitAdam::accumulate`] and
    /// [`crate::OneBitAdam::begin_group`]/`finish` refuse a gradient holding
    /// a NaN/±∞ (or whose `factor·g` overflows) with
    /// [`OneBitError::NonFinite`] at its index on this rank and
    /// [`OneBitError::RemoteInput`] on the others, before any state or
    /// parameter changes. Where the step reads the caller's gradient in no
    /// pass of its own before the update (one rank, full precision:
    /// `step_with_grad` hands `g` straight to the fused Adam pass; and
    /// `accumulate`), this is a read-only pass over `g` first: 4 more bytes
    /// per element (32 instead of 28 for the warm-up step; see
    /// docs/ONEBIT_ADAM.md, "Passes and bytes of the full-precision step").
    /// Elsewhere it rides in the pass that forms the mean-gradient copy and
    /// costs no read.
    #[default]
    On,
    /// No check, for callers that check their gradients themselves (a loss
    /// scaler's `isfinite`, as PyTorch leaves it to `GradScaler`); the
    /// warm-up step on one rank then reads 28 bytes per element, as
    /// `torch.optim.Adam(fused=True)`. A NaN/±∞ is used as it is: in a
    /// full-precision step (the warm-up, [`crate::Policy::FullPrecision`]
    /// groups, the final stage) the step returns `Ok` and `m`, `v` and the
    /// parameter of each bad coordinate become NaN/±∞ (the parameter NaN
    /// for a ±∞ gradient) — the state is poisoned, as torch's Adam's is;
    /// with `P > 1` on every rank, since the mean all-reduce spreads it.
    /// The other coordinates get the bits a checked step gives them. In a
    /// compressed step the codec's own checks (part of its passes) still
    /// meet it: the step fails on every rank ([`OneBitError::NonFinite`] /
    /// [`OneBitError::RemoteInput`]), but after the header exchange, so the
    /// state may be partly updated (earlier groups, counters).
    Off,
}

/// Write `values` into `out` (same length) and say whether any is NaN/±Inf,
/// in the same pass (an integer OR over the exponent bits, which
/// vectorises; no second read of `out`).
pub(super) fn fill_checked(out: &mut [f32], values: impl Iterator<Item = f32>) -> bool {
    let mut bad = 0u32;
    for (o, v) in out.iter_mut().zip(values) {
        *o = v;
        bad |= u32::from(v.to_bits() & 0x7f80_0000 == 0x7f80_0000);
    }
    bad != 0
}

/// `Err(NonFinite)` at the first `i` where `g[i]·f` is NaN/±Inf (one read
/// of `g`, on the widest vectors the CPU has, over several streams:
/// [`crate::dense::any_non_finite`]); `Ok` without reading `g` when
/// `check` is [`FiniteCheck::Off`].
pub(super) fn check_products(check: FiniteCheck, g: &[f32], f: f32) -> Result<(), OneBitError> {
    if check == FiniteCheck::On && crate::dense::any_non_finite(Kernel::detect(), g, f) {
        return Err(OneBitError::NonFinite {
            index: g.iter().position(|&g| !(g * f).is_finite()).unwrap_or(0),
        });
    }
    Ok(())
}
