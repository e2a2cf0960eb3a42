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

use crate::checks;
use crate::config::{NonFinitePolicy, RowIndex};
use crate::error::{ConfigError, StateError, StateField, StepError};
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::rows::{Lane, Plumbing, RowDriver};
use crate::state::kind;
use crate::table::RowAccess;

/// `z` and `n` (`≥ 0`), d values each, per slot.
type Accumulators = (Lane<f32>, Lane<f32>);

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
        checks::dim(self.dim)?;
        checks::positive(self.alpha, ConfigError::LearningRate)?;
        checks::positive(self.beta, ConfigError::Ftrl)?;
        checks::non_negative(self.l1, ConfigError::Ftrl)?;
        checks::non_negative(self.l2, ConfigError::Ftrl)?;
        checks::grad_clip(self.grad_clip)
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
    state: RowDriver<Accumulators>,
}

impl Ftrl {
    /// Empty state.
    ///
    /// # Errors
    /// [`ConfigError`] from [`FtrlConfig::validate`], or
    /// [`ConfigError::AllocationFailed`] for a dense range that does not fit.
    pub fn new(config: FtrlConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let plumbing = Plumbing {
            dim: config.dim,
            nonfinite: config.nonfinite,
            grad_clip: config.grad_clip,
            kind: kind::FTRL,
            max_steps: u64::MAX,
        };
        let d = config.dim;
        let state = RowDriver::new(plumbing, config.row_index, |n| {
            Ok((Lane::new(d, n, 0.0)?, Lane::new(d, n, 0.0)?.nonneg()))
        })?;
        Ok(Self { config, state })
    }

    /// The configuration.
    pub fn config(&self) -> &FtrlConfig {
        &self.config
    }

    /// Row `id`'s `(z, n)`, if it has state.
    pub fn state(&self, id: u64) -> Option<(&[f32], &[f32])> {
        let s = self.state.slot_of(id)?;
        let (z, n) = &self.state.lanes;
        Some((z.row(s), n.row(s)))
    }

    /// What moved rows' `(z, n)` are checked against: the dimension (the
    /// accumulators are sums of gradients, as [`export_state`] checks;
    /// the weight they give follows the importer's α, β, λ1, λ2).
    ///
    /// [`export_state`]: SparseOptimizer::export_state
    fn fingerprint(&self) -> [(StateField, u64); 1] {
        [(StateField::Dim, self.config.dim as u64)]
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
        self.state
            .step(ids, grads, table, |(z, n), slot, g, row, _| {
                let Some(row) = row else {
                    return;
                };
                let z = z.row_mut(slot);
                let n = n.row_mut(slot);
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
            })
    }

    crate::rows::driver_methods!();

    fn memory(&self) -> MemoryReport {
        let (z, n) = &self.state.lanes;
        MemoryReport {
            scalars: z.bytes() + n.bytes(),
            ..self.state.memory()
        }
        .finish()
    }

    fn export_state(&self) -> Vec<u8> {
        self.state.export_state(|_| {})
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        self.state.import_state(bytes, |_| Ok(()))
    }
}
