//! [`Ftrl`]: per-coordinate FTRL-Proximal (McMahan et al., "Ad Click
//! Prediction: a View from the Trenches", KDD 2013, Algorithm 1), the CTR
//! classic, over a caller's embedding table.
//!
//! Per coordinate `j` of a row with summed gradient `g`, with `w` the
//! table's current value:
//!
//! ```text
//! σ  = (√(n + g²) − √n) / α
//! z ← z + g − σ·w
//! n ← n + g²
//! w ← 0                                                  if |z| ≤ λ1
//! w ← −(z − sign(z)·λ1) / ((β + √n)/α + λ2)              otherwise
//! ```
//!
//! **How it works over a user's table.** The table row holds `w`; the
//! optimizer holds `z` and `n` (`8·d` bytes per row). In the paper `w` is a
//! function of `(z, n)` and starts at 0. An embedding table starts at a
//! random initialization instead (all-zero embeddings give an FM no
//! gradient at all), so a coordinate whose `n` is still 0 (it never had a
//! non-zero gradient) *adopts the table's value*: before its first update
//! `z` is set to the value whose closed form, at `n = 0`, is that `w`:
//!
//! ```text
//! z₀(w) = −w·(β/α + λ2) − sign(w)·λ1        (0 for w = 0)
//! ```
//!
//! From then on the coordinate is FTRL-Proximal started from `(z₀, 0)`: each
//! step in which the row has a gradient overwrites `w` with the closed form.
//! A coordinate whose gradient is 0 while its `n` is 0 is left alone (its
//! table value and state are not touched). The `σ·w` term reads the table,
//! which equals the closed form unless someone else wrote the row between
//! steps. With `λ1 > 0` the closed form sets small-`z` coordinates to
//! exactly 0 (FTRL's sparsity). `β > 0` is required: it keeps the
//! denominator positive at `n = 0`.

use alloc::vec::Vec;

use num_traits::Float;

use crate::batch::{Merged, merge};
use crate::config::{NonFinitePolicy, RowIndex};
use crate::error::{ConfigError, GrowError, StateError, StepError};
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::rows::{Lane, RowSlots, read_nonneg};
use crate::state::{Reader, Writer, kind};
use crate::table::RowAccess;

/// Hyper-parameters of [`Ftrl`] (the paper's names); `#[non_exhaustive]`,
/// built from [`Default`] with the `with_*` setters.
///
/// ```
/// use basis_core::FtrlConfig;
///
/// let config = FtrlConfig::default().with_dim(8).with_alpha(0.05).with_l1(1e-4);
/// assert_eq!(config.validate(), Ok(()));
/// assert!(config.with_beta(0.0).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct FtrlConfig {
    /// Row dimension.
    pub dim: usize,
    /// α, the learning rate (per-coordinate rate `α/(β + √n)`). Default
    /// 0.1: best validation AUC on the CLI's synthetic FM data with the
    /// default β (docs/RESULTS.md, "Baselines").
    pub alpha: f32,
    /// β, the rate's smoothing (> 0). Default 0.01. The paper's β = 1 suits
    /// per-example gradients (magnitude ~1); batch-mean gradients are far
    /// smaller, and with β = 1 the rate stays near α/β (plain SGD) for a
    /// long time: on the synthetic data β = 1 needed α ≥ 3 and still
    /// trailed β = 0.01 (validation AUC 0.7146 vs 0.7191).
    pub beta: f32,
    /// λ1, L1 regularization (≥ 0; > 0 makes weights exactly 0). Default 0.
    pub l1: f32,
    /// λ2, L2 regularization (≥ 0). Default 0.
    pub l2: f32,
    /// Non-finite gradient policy. Default skip.
    pub nonfinite: NonFinitePolicy,
    /// Optional per-row L2 gradient clip. Default none.
    pub grad_clip: Option<f32>,
    /// Dense or sparse row state. Default sparse.
    pub row_index: RowIndex,
}

with_setters!(FtrlConfig {
    with_dim => dim: usize,
    with_alpha => alpha: f32,
    with_beta => beta: f32,
    with_l1 => l1: f32,
    with_l2 => l2: f32,
    with_nonfinite => nonfinite: NonFinitePolicy,
    with_grad_clip => grad_clip: Option<f32>,
    with_row_index => row_index: RowIndex,
});

impl Default for FtrlConfig {
    fn default() -> Self {
        Self {
            dim: 16,
            alpha: 0.1,
            beta: 0.01,
            l1: 0.0,
            l2: 0.0,
            nonfinite: NonFinitePolicy::Skip,
            grad_clip: None,
            row_index: RowIndex::Sparse,
        }
    }
}

impl FtrlConfig {
    /// Checks every value.
    ///
    /// # Errors
    /// The first [`ConfigError`] found: [`ConfigError::LearningRate`] for
    /// α, [`ConfigError::Ftrl`] for β, λ1 or λ2.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.dim == 0 {
            return Err(ConfigError::ZeroDim);
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(ConfigError::LearningRate);
        }
        let nonneg = |x: f32| x.is_finite() && x >= 0.0;
        if !(self.beta.is_finite() && self.beta > 0.0 && nonneg(self.l1) && nonneg(self.l2)) {
            return Err(ConfigError::Ftrl);
        }
        if self.grad_clip.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Err(ConfigError::GradClip);
        }
        Ok(())
    }
}

/// Per-coordinate FTRL-Proximal over the caller's table (see the module
/// documentation for how the table's values and the state relate).
///
/// ```
/// use basis_core::{DenseTable, Ftrl, FtrlConfig, SparseOptimizer};
///
/// let mut opt = Ftrl::new(FtrlConfig::default().with_dim(2).with_l1(0.5))?;
/// let mut w = vec![0.0f32, -0.2];
/// // A zero gradient on an untrained coordinate leaves it alone.
/// opt.step(&[0], &[0.0, 0.0], &mut DenseTable::new(&mut w, 2)?)?;
/// assert_eq!(w, [0.0, -0.2]);
/// // L1: while |z| <= l1 the weight is exactly 0 (z = 0.1 here).
/// opt.step(&[0], &[0.1, 0.0], &mut DenseTable::new(&mut w, 2)?)?;
/// assert_eq!(w, [0.0, -0.2]);
/// // A larger gradient moves it (against the gradient's sign).
/// opt.step(&[0], &[1.0, 0.0], &mut DenseTable::new(&mut w, 2)?)?;
/// assert!(w[0] < 0.0);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Ftrl {
    config: FtrlConfig,
    rows: RowSlots,
    z: Lane<f32>,
    n: Lane<f32>,
    steps: u64,
    nonfinite: u64,
    scratch: Merged,
}

impl Ftrl {
    /// Empty state.
    ///
    /// # Errors
    /// [`ConfigError`] from [`FtrlConfig::validate`], or
    /// [`ConfigError::AllocationFailed`] for a dense range that does not fit.
    pub fn new(config: FtrlConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let rows = RowSlots::new(config.row_index);
        let n = rows.slots as u64;
        Ok(Self {
            z: Lane::new(config.dim, n, 0.0)?,
            n: Lane::new(config.dim, n, 0.0)?,
            config,
            rows,
            steps: 0,
            nonfinite: 0,
            scratch: Merged::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FtrlConfig {
        &self.config
    }

    /// Row `id`'s `(z, n)`, if it has state.
    pub fn state(&self, id: u64) -> Option<(&[f32], &[f32])> {
        let s = self.rows.index.get(id)?;
        Some((self.z.row(s), self.n.row(s)))
    }

    /// The weight FTRL-Proximal assigns to accumulators `(z, n)` under `config`.
    pub fn weight(config: &FtrlConfig, z: f32, n: f32) -> f32 {
        if z.abs() <= config.l1 {
            0.0
        } else {
            let shrunk = z - z.signum() * config.l1;
            -shrunk / ((config.beta + Float::sqrt(n)) / config.alpha + config.l2)
        }
    }

    /// The `z` whose weight at `n = 0` is `w` (`z₀` of the module documentation).
    pub fn adopted_z(config: &FtrlConfig, w: f32) -> f32 {
        if w == 0.0 {
            0.0
        } else {
            -w * (config.beta / config.alpha + config.l2) - w.signum() * config.l1
        }
    }
}

impl SparseOptimizer for Ftrl {
    fn dim(&self) -> usize {
        self.config.dim
    }

    fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        let c = self.config;
        let d = c.dim;
        let index = &self.rows.index;
        let merged = merge(
            &mut self.scratch,
            ids,
            grads,
            d,
            c.nonfinite,
            c.grad_clip,
            table,
            |id| index.check(id),
        )?;
        for (k, &id) in merged.ids.iter().enumerate() {
            let (slot, created) = self.rows.slot(id);
            if created {
                self.z.ensure(self.rows.slots, 0.0);
                self.n.ensure(self.rows.slots, 0.0);
            }
            let Some(row) = table.row_mut(id) else {
                continue;
            };
            let g = &merged.grads[k * d..(k + 1) * d];
            let z = self.z.row_mut(slot);
            let n = self.n.row_mut(slot);
            for j in 0..d {
                if n[j] == 0.0 {
                    if g[j] == 0.0 {
                        continue;
                    }
                    z[j] = Self::adopted_z(&c, row[j]);
                }
                let n_new = n[j] + g[j] * g[j];
                let sigma = (Float::sqrt(n_new) - Float::sqrt(n[j])) / c.alpha;
                z[j] += g[j] - sigma * row[j];
                n[j] = n_new;
                row[j] = Self::weight(&c, z[j], n_new);
            }
        }
        self.steps += 1;
        self.nonfinite += merged.skipped as u64;
        let report = StepReport {
            rows_updated: merged.ids.len(),
            rows_skipped_nonfinite: merged.skipped,
            buckets_touched: 0,
        };
        self.scratch = merged;
        Ok(report)
    }

    fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        let n = self.rows.check_grow(rows)?;
        // Reserve both before touching either, so a failure changes nothing.
        self.z.try_reserve(n, rows)?;
        self.n.try_reserve(n, rows)?;
        self.z.ensure(n, 0.0);
        self.n.ensure(n, 0.0);
        self.rows.set_rows(rows, n);
        Ok(())
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            scalars: self.z.bytes() + self.n.bytes(),
            row_index: self.rows.index.bytes(),
            scratch: self.scratch.capacity_bytes(),
            rows_with_state: self.rows.slots as u64,
            ..MemoryReport::default()
        }
        .finish()
    }

    fn export_state(&self) -> Vec<u8> {
        let mut w = Writer::default();
        self.rows.write(
            &mut w,
            self.config.dim,
            self.steps,
            self.nonfinite,
            |w, s| {
                w.f32s(self.z.row(s));
                w.f32s(self.n.row(s));
            },
        );
        w.finish(kind::FTRL)
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let d = self.config.dim;
        let mut r = Reader::open(bytes, kind::FTRL)?;
        let (mut z, mut n) = (Vec::new(), Vec::new());
        let (rows, steps, nonfinite) = self.rows.read(&mut r, d, 8 * d, |r| {
            z.extend(r.f32s(d)?);
            n.extend(read_nonneg(r, d)?);
            Ok(())
        })?;
        r.end()?;
        self.z = Lane::from_vec(d, z);
        self.n = Lane::from_vec(d, n);
        self.rows = rows;
        self.steps = steps;
        self.nonfinite = nonfinite;
        Ok(())
    }
}
