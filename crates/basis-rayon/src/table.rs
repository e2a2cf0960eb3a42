//! What every concurrent bucket-moment table offers ([`MomentTable`]), its
//! hyper-parameters, and the input checks the implementations share.
//!
//! A moment table holds, per bucket `b`, a step count `t_b` and two
//! `d`-vectors `M_b`, `V_b`. Many threads update it at once through `&self`,
//! without a global step (Hogwild): each call is one row's update of its
//! bucket, applied atomically per coordinate (lock-free table) or per bucket
//! (striped table). Each table's page states its guarantees.

use crate::Error;

/// Adam-style hyper-parameters for [`MomentTable::adam_update`];
/// `#[non_exhaustive]`, built from [`Default`] with the `with_*` setters.
///
/// ```
/// let p = basis_rayon::MomentParams::default().with_beta2(0.99);
/// assert!(p.validate().is_ok());
/// assert!(p.with_eps(0.0).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct MomentParams {
    /// First-moment decay β1 ∈ [0, 1).
    pub beta1: f32,
    /// Second-moment decay β2 ∈ [0, 1).
    pub beta2: f32,
    /// ε > 0 added to `sqrt(V̂)`.
    pub eps: f32,
    /// Divide by `1 − β^t` (Adam's bias correction).
    pub bias_correction: bool,
}

// basis-core's macro, one copy per dependency chain.
basis_core::with_setters!(MomentParams {
    with_beta1 => beta1: f32,
    with_beta2 => beta2: f32,
    with_eps => eps: f32,
    with_bias_correction => bias_correction: bool,
});

impl Default for MomentParams {
    /// Adam's reference values: β1 = 0.9, β2 = 0.999, ε = 1e-8, bias correction on.
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            bias_correction: true,
        }
    }
}

impl MomentParams {
    /// `Err(InvalidParams)` unless β1, β2 ∈ [0, 1) and ε is finite and > 0.
    pub fn validate(&self) -> Result<(), Error> {
        let beta_ok = |b: f32| (0.0..1.0).contains(&b);
        if beta_ok(self.beta1) && beta_ok(self.beta2) && self.eps.is_finite() && self.eps > 0.0 {
            Ok(())
        } else {
            Err(Error::InvalidParams)
        }
    }

    /// `(1 − β1^t, 1 − β2^t)`, or `(1, 1)` without bias correction.
    pub(crate) fn corrections(&self, t: u64) -> (f32, f32) {
        if !self.bias_correction {
            return (1.0, 1.0);
        }
        // β^t underflows to 0 long before t reaches i32::MAX.
        let t = i32::try_from(t).unwrap_or(i32::MAX);
        (1.0 - self.beta1.powi(t), 1.0 - self.beta2.powi(t))
    }

    /// The EMA step of one coordinate: `(β1·m + (1−β1)·g, β2·v + (1−β2)·g²)`.
    #[inline]
    pub(crate) fn ema(&self, m: f32, v: f32, g: f32) -> (f32, f32) {
        (
            self.beta1 * m + (1.0 - self.beta1) * g,
            self.beta2 * v + (1.0 - self.beta2) * (g * g),
        )
    }

    /// Adam's direction `M̂ / (sqrt(V̂) + ε)` of one coordinate.
    #[inline]
    pub(crate) fn direction(&self, m: f32, v: f32, (c1, c2): (f32, f32)) -> f32 {
        (m / c1) / ((v / c2).sqrt() + self.eps)
    }
}

/// A table of per-bucket moments that many threads update at once through
/// `&self`. Implemented lock-free by [`AtomicMomentTable`](crate::AtomicMomentTable)
/// and with striped locks by [`StripedMomentTable`](crate::StripedMomentTable).
///
/// Every method checks its input first and returns `Err` without touching
/// the table when the bucket is out of range, a slice has the wrong length,
/// or a gradient element is not finite.
///
/// # Example
///
/// Four threads add gradients to one bucket at once; no update is lost,
/// with either implementation.
///
/// ```
/// use basis_rayon::{AtomicMomentTable, MomentTable, StripedMomentTable};
///
/// fn hammer(table: &(impl MomentTable + ?Sized)) -> Result<(), basis_rayon::Error> {
///     std::thread::scope(|s| {
///         let add = || (0..250).try_for_each(|_| table.accumulate(3, &[1.0, -0.5]).map(drop));
///         let threads: Vec<_> = (0..4).map(|_| s.spawn(add)).collect();
///         threads.into_iter().try_for_each(|t| t.join().expect("no panic"))
///     })?;
///     let (mut m, mut v) = ([0.0f32; 2], [0.0f32; 2]);
///     assert_eq!(table.snapshot(3, &mut m, &mut v)?, 1000); // t_b: every update counted
///     assert_eq!((m, v), ([1000.0, -500.0], [1000.0, 250.0]));
///     assert!(table.accumulate(3, &[f32::NAN, 0.0]).is_err()); // refused, table unchanged
///     Ok(())
/// }
/// hammer(&AtomicMomentTable::new(8, 2)?)?;
/// hammer(&StripedMomentTable::new(8, 2)?)?;
/// # Ok::<(), basis_rayon::Error>(())
/// ```
pub trait MomentTable: Sync {
    /// Number of buckets `B`.
    fn buckets(&self) -> usize;

    /// Row dimension `d` (length of `M_b`, `V_b`).
    fn dim(&self) -> usize;

    /// Sum mode (AdaGrad-like): `M_b += g`, `V_b += g⊙g`, `t_b += 1`.
    /// Returns the new `t_b`. Updates from different threads are never lost.
    fn accumulate(&self, bucket: usize, grad: &[f32]) -> Result<u64, Error>;

    /// Adam mode: `t_b += 1`, `M_b ← β1·M_b + (1−β1)·g`,
    /// `V_b ← β2·V_b + (1−β2)·g⊙g`, and writes the row's step direction
    /// `M̂/(sqrt(V̂)+ε)` (from the moments this update produced) to `direction`.
    /// Returns the new `t_b`.
    fn adam_update(
        &self,
        bucket: usize,
        grad: &[f32],
        params: &MomentParams,
        direction: &mut [f32],
    ) -> Result<u64, Error>;

    /// Copies `M_b`, `V_b` into `m`, `v` and returns `t_b`.
    fn snapshot(&self, bucket: usize, m: &mut [f32], v: &mut [f32]) -> Result<u64, Error>;

    /// Bytes the table holds (cells, counts, locks).
    fn memory_bytes(&self) -> usize;
}

/// `buckets · dim`, or `BadShape` when either is zero or the product overflows.
pub(crate) fn cells(buckets: usize, dim: usize) -> Result<usize, Error> {
    match buckets.checked_mul(dim) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(Error::BadShape { buckets, dim }),
    }
}

/// The checks every update runs before it touches shared state.
pub(crate) fn check_update(
    buckets: usize,
    dim: usize,
    bucket: usize,
    grad: &[f32],
) -> Result<(), Error> {
    check_bucket(buckets, bucket)?;
    check_len(dim, grad.len())?;
    // The same bound as the batched step: a larger element's square could
    // overflow a shared second moment to +inf (NaN fails the test too).
    match grad
        .iter()
        .position(|g| g.is_nan() || g.abs() > basis_core::MAX_GRAD_ABS)
    {
        Some(index) => Err(Error::NonFinite { index }),
        None => Ok(()),
    }
}

pub(crate) fn check_bucket(buckets: usize, bucket: usize) -> Result<(), Error> {
    if bucket < buckets {
        Ok(())
    } else {
        Err(Error::BucketOutOfRange { bucket, buckets })
    }
}

pub(crate) fn check_len(expected: usize, got: usize) -> Result<(), Error> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::LengthMismatch { expected, got })
    }
}
