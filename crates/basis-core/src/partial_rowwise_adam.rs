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
use crate::batch::{Merged, apply_row, merge};
use crate::error::{ConfigError, GrowError, StateError, StepError};
use crate::kernel::bias_corrections;
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::rows::{Lane, RowSlots, read_nonneg};
use crate::state::{Reader, Writer, kind};
use crate::table::RowAccess;

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
    rows: RowSlots,
    m: Lane<f32>,
    v: Lane<f32>,
    steps: u32,
    nonfinite: u64,
    scratch: Merged,
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
        let rows = RowSlots::new(config.row_index);
        let n = rows.slots as u64;
        Ok(Self {
            m: Lane::new(config.dim, n, 0.0)?,
            v: Lane::new(1, n, 0.0)?,
            config,
            rows,
            steps: 0,
            nonfinite: 0,
            scratch: Merged::default(),
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
        let s = self.rows.index.get(id)?;
        Some((self.m.row(s), self.v.row(s)[0]))
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
        self.steps = self.steps.saturating_add(1);
        let (bc1, bc2) = bias_corrections(c.beta1, c.beta2, self.steps, c.bias_correction);
        self.upd.resize(d, 0.0);
        for (k, &id) in merged.ids.iter().enumerate() {
            let (slot, created) = self.rows.slot(id);
            if created {
                self.m.ensure(self.rows.slots, 0.0);
                self.v.ensure(self.rows.slots, 0.0);
            }
            let g = &merged.grads[k * d..(k + 1) * d];
            let mut sq = 0.0f32;
            for &x in g {
                sq += x * x;
            }
            let v = &mut self.v.row_mut(slot)[0];
            *v = c.beta2 * *v + (1.0 - c.beta2) * (sq / d as f32);
            let denom = Float::sqrt(*v / bc2) + c.eps;
            let m = self.m.row_mut(slot);
            for j in 0..d {
                m[j] = c.beta1 * m[j] + (1.0 - c.beta1) * g[j];
                self.upd[j] = c.lr * ((m[j] / bc1) / denom);
            }
            if let Some(row) = table.row_mut(id) {
                apply_row(row, &self.upd, c.lr * c.weight_decay);
            }
        }
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
        self.m.try_reserve(n, rows)?;
        self.v.try_reserve(n, rows)?;
        self.m.ensure(n, 0.0);
        self.v.ensure(n, 0.0);
        self.rows.set_rows(rows, n);
        Ok(())
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            scalars: self.m.bytes() + self.v.bytes(),
            row_index: self.rows.index.bytes(),
            scratch: self.scratch.capacity_bytes() + self.upd.capacity() * 4,
            rows_with_state: self.rows.slots as u64,
            ..MemoryReport::default()
        }
        .finish()
    }

    fn export_state(&self) -> Vec<u8> {
        let mut w = Writer::default();
        let steps = u64::from(self.steps);
        self.rows
            .write(&mut w, self.config.dim, steps, self.nonfinite, |w, s| {
                w.f32s(self.m.row(s));
                w.f32(self.v.row(s)[0]);
            });
        w.finish(kind::PARTIAL_ROWWISE_ADAM)
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let d = self.config.dim;
        let mut r = Reader::open(bytes, kind::PARTIAL_ROWWISE_ADAM)?;
        let (mut m, mut v) = (Vec::new(), Vec::new());
        let (rows, steps, nonfinite) = self.rows.read(&mut r, d, 4 * d + 4, |r| {
            m.extend(r.f32s(d)?);
            v.extend(read_nonneg(r, 1)?);
            Ok(())
        })?;
        r.end()?;
        let steps = u32::try_from(steps).map_err(|_| StateError::Malformed)?;
        self.m = Lane::from_vec(d, m);
        self.v = Lane::from_vec(1, v);
        self.rows = rows;
        self.steps = steps;
        self.nonfinite = nonfinite;
        Ok(())
    }
}
