//! [`PartialRowwiseAdam`]: FBGEMM's `PARTIAL_ROWWISE_ADAM`, per-coordinate
//! momentum with one second moment per row (`4·d + 4` B/row).
//!
//! The math, restated from FBGEMM's code generator
//! (`fbgemm_gpu/codegen/.../optimizers.py`, `partial_rowwise_adam()`: the
//! `split_precomputation` and `split_weight_update` of the
//! `embedding_backward_split_*_template` kernels). With `g` the row's summed
//! gradient, `t` the optimizer's step count (FBGEMM's `iter`, one per
//! backward pass, shared by every row):
//!
//! ```text
//! v_i ← β2·v_i + (1 − β2)·(Σ_j g_j²)/d          one f32 per row (momentum2[idx])
//! m_ij ← β1·m_ij + (1 − β1)·g_j                 d f32 per row   (momentum1[idx*D + d])
//! θ_ij ← θ_ij − η·( (m_ij/(1 − β1^t)) / (√(v_i/(1 − β2^t)) + ε) + λ·θ_ij )
//! ```
//!
//! FBGEMM folds the decay `η·λ·θ` into the same expression; here it is the
//! decoupled decay every optimizer of this crate applies
//! ([`apply_row`](crate::kernel::apply_row): `θ *= 1 − η·λ`, then the
//! update), which is the same math in another rounding order. Rows absent
//! from a batch keep their moments (lazy, like FBGEMM's sparse update).

use alloc::vec::Vec;

use num_traits::Float;

use crate::adam::AdamConfig;
use crate::batch::apply_row;
use crate::error::{ConfigError, StateError, StateField, StepError};
use crate::kernel::bias_corrections;
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::rows::{Lane, Plumbing, RowDriver, adam_fingerprint};
use crate::state::kind;
use crate::table::RowAccess;

/// `m` (d values) and the row-wise `v` (one value, `≥ 0`) per slot.
type Moments = (Lane<f32>, Lane<f32>);

/// FBGEMM's `PARTIAL_ROWWISE_ADAM`: Adam with per-coordinate momentum and a
/// row-wise second moment (the mean of the squared gradient), `4·d + 4`
/// bytes per row. Takes [`AdamConfig`] (every field applies).
///
/// ```
/// use basis_core::{AdamConfig, DenseTable, PartialRowwiseAdam, RowIndex, SparseOptimizer};
///
/// let config = AdamConfig::default().with_dim(4).with_lr(0.1).with_row_index(RowIndex::Dense { rows: 10 });
/// let mut opt = PartialRowwiseAdam::new(config)?;
/// let mut w = vec![0.0f32; 10 * 4];
/// opt.step(&[2], &[1.0, 1.0, 1.0, 1.0], &mut DenseTable::new(&mut w, 4)?)?;
/// // Equal gradients: the row's second moment equals each coordinate's, so
/// // the first bias-corrected step moves each coordinate by about lr.
/// assert!((w[8] + 0.1).abs() < 1e-4);
/// // d momenta and one second moment per row.
/// assert_eq!(opt.memory().scalars, 10 * (4 * 4 + 4));
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PartialRowwiseAdam {
    config: AdamConfig,
    state: RowDriver<Moments>,
    upd: Vec<f32>,
}

impl PartialRowwiseAdam {
    /// Zero moments.
    ///
    /// # Errors
    /// [`ConfigError`] from [`AdamConfig::validate`], or
    /// [`ConfigError::AllocationFailed`] for a dense range that does not fit.
    pub fn new(config: AdamConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let plumbing = Plumbing {
            dim: config.dim,
            nonfinite: config.nonfinite,
            grad_clip: config.grad_clip,
            kind: kind::PARTIAL_ROWWISE_ADAM,
            max_steps: u64::from(u32::MAX),
        };
        let state = RowDriver::new(plumbing, config.row_index, |n| {
            Ok((
                Lane::new(config.dim, n, 0.0)?,
                Lane::new(1, n, 0.0)?.nonneg(),
            ))
        })?;
        Ok(Self {
            config,
            state,
            upd: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AdamConfig {
        &self.config
    }

    /// Row `id`'s momentum `m` (d values) and row-wise second moment `v`,
    /// if it has state.
    pub fn moments(&self, id: u64) -> Option<(&[f32], f32)> {
        let s = self.state.slot_of(id)?;
        let (m, v) = &self.state.lanes;
        Some((m.row(s), v.row(s)[0]))
    }

    fn fingerprint(&self) -> [(StateField, u64); 2] {
        adam_fingerprint(self.config.dim, self.config.beta1, self.config.beta2)
    }
}

impl SparseOptimizer for PartialRowwiseAdam {
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
        let upd = &mut self.upd;
        upd.resize(d, 0.0);
        self.state
            .step(ids, grads, table, |(m, v), slot, g, row, steps| {
                let (bc1, bc2) = bias_corrections(
                    c.beta1,
                    c.beta2,
                    u32::try_from(steps).unwrap_or(u32::MAX),
                    c.bias_correction,
                );
                let mut sq = 0.0f32;
                for &x in g {
                    sq += x * x;
                }
                let v = &mut v.row_mut(slot)[0];
                *v = c.beta2 * *v + (1.0 - c.beta2) * (sq / d as f32);
                let denom = Float::sqrt(*v / bc2) + c.eps;
                let m = m.row_mut(slot);
                for j in 0..d {
                    m[j] = c.beta1 * m[j] + (1.0 - c.beta1) * g[j];
                    upd[j] = c.lr * ((m[j] / bc1) / denom);
                }
                if let Some(row) = row {
                    apply_row(row, upd, c.lr * c.weight_decay);
                }
            })
    }

    crate::rows::driver_methods!();

    fn memory(&self) -> MemoryReport {
        let (m, v) = &self.state.lanes;
        let base = self.state.memory();
        MemoryReport {
            scalars: m.bytes() + v.bytes(),
            scratch: base.scratch + self.upd.capacity() * 4,
            ..base
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
