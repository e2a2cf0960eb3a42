//! [`RowwiseAdagrad`]: FBGEMM's `EXACT_ROWWISE_ADAGRAD`, one f32 per row.

use alloc::vec::Vec;

use num_traits::Float;

use crate::batch::{Merged, apply_row, merge};
use crate::checks;
use crate::config::{NonFinitePolicy, RowIndex, ScalarStorage};
use crate::error::{ConfigError, GrowError, RowStateError, StateError, StateField, StepError};
use crate::optimizer::SparseOptimizer;
use crate::quant::LogCode;
use crate::report::{MemoryReport, StepReport};
use crate::row_move;
use crate::state::{Reader, Writer, kind};
use crate::store::ScalarStore;
use crate::table::RowAccess;

/// Hyper-parameters of [`RowwiseAdagrad`] (FBGEMM's defaults);
/// `#[non_exhaustive]`, built from [`Default`] with the `with_*` setters.
///
/// ```
/// use basis_core::{AdagradConfig, RowIndex};
///
/// let config = AdagradConfig::default()
///     .with_dim(8)
///     .with_lr(0.05)
///     .with_row_index(RowIndex::Dense { rows: 1000 });
/// assert_eq!(config.validate(), Ok(()));
/// assert!(config.with_lr(-1.0).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct AdagradConfig {
    /// Row dimension.
    pub dim: usize,
    /// Learning rate.
    pub lr: f32,
    /// ε added to `√G_i`.
    pub eps: f32,
    /// L2 weight decay folded into the gradient (`g += λ·θ`, FBGEMM's `L2` mode).
    pub weight_decay: f32,
    /// Non-finite gradient policy.
    pub nonfinite: NonFinitePolicy,
    /// Optional per-row L2 gradient clip.
    pub grad_clip: Option<f32>,
    /// Dense or sparse row state.
    pub row_index: RowIndex,
}

with_setters!(AdagradConfig {
    with_dim => dim: usize,
    with_lr => lr: f32,
    with_eps => eps: f32,
    with_weight_decay => weight_decay: f32,
    with_nonfinite => nonfinite: NonFinitePolicy,
    with_grad_clip => grad_clip: Option<f32>,
    with_row_index => row_index: RowIndex,
});

impl Default for AdagradConfig {
    fn default() -> Self {
        Self {
            dim: 16,
            lr: 0.01,
            eps: 1e-8,
            weight_decay: 0.0,
            nonfinite: NonFinitePolicy::Skip,
            grad_clip: None,
            row_index: RowIndex::Sparse,
        }
    }
}

impl AdagradConfig {
    /// Checks every value.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        checks::dim(self.dim)?;
        checks::positive(self.lr, ConfigError::LearningRate)?;
        checks::positive(self.eps, ConfigError::Epsilon)?;
        checks::non_negative(self.weight_decay, ConfigError::WeightDecay)?;
        checks::grad_clip(self.grad_clip)
    }
}

/// Row-wise AdaGrad: `G_i += mean_d g_i²; θ_i −= η/(√G_i + ε) · g_i`.
///
/// ```
/// use basis_core::{AdagradConfig, DenseTable, RowwiseAdagrad, SparseOptimizer};
///
/// let mut opt = RowwiseAdagrad::new(AdagradConfig::default().with_dim(2))?;
/// let mut w = vec![1.0f32; 4]; // two rows of dim 2
/// opt.step(&[1], &[0.5, -0.5], &mut DenseTable::new(&mut w, 2)?)?;
/// assert_eq!(&w[..2], &[1.0, 1.0]); // row 0 untouched
/// assert!(w[2] < 1.0 && w[3] > 1.0);
/// assert_eq!(opt.memory().rows_with_state, 1); // state only for rows seen
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct RowwiseAdagrad {
    config: AdagradConfig,
    sums: ScalarStore,
    steps: u64,
    nonfinite: u64,
    scratch: Merged,
}

impl RowwiseAdagrad {
    /// Zero accumulators.
    ///
    /// # Errors
    /// [`ConfigError`] from [`AdagradConfig::validate`].
    pub fn new(config: AdagradConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let sums = ScalarStore::new(
            config.row_index,
            ScalarStorage::F32,
            0.0,
            LogCode::new(-1.0, 1.0, 0.0), // unused: f32 storage
            None,
        )?;
        Ok(Self {
            config,
            sums,
            steps: 0,
            nonfinite: 0,
            scratch: Default::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AdagradConfig {
        &self.config
    }

    /// Row `id`'s accumulator `G_i` (0 when never updated).
    pub fn accumulator(&self, id: u64) -> f32 {
        self.sums.get(id).0
    }
}

impl SparseOptimizer for RowwiseAdagrad {
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
        let sums = &self.sums;
        let mut merged = merge(
            &mut self.scratch,
            ids,
            grads,
            d,
            c.nonfinite,
            c.grad_clip,
            table,
            |id| sums.index.check(id),
        )?;
        let inv_d = 1.0 / d as f32;
        for (k, &id) in merged.ids.iter().enumerate() {
            let Some(row) = table.row_mut(id) else {
                continue;
            };
            let g = &mut merged.grads[k * d..(k + 1) * d];
            if c.weight_decay != 0.0 {
                for (gj, &x) in g.iter_mut().zip(row.iter()) {
                    *gj += c.weight_decay * x;
                }
            }
            let mut sq = 0.0f32;
            for &x in g.iter() {
                sq += x * x;
            }
            let sum = self.sums.get(id).0 + sq * inv_d;
            self.sums.set(id, sum, 0, 0, 0);
            let multiplier = c.lr / (Float::sqrt(sum) + c.eps);
            g.iter_mut().for_each(|x| *x *= multiplier);
            apply_row(row, g, 0.0);
        }
        self.steps += 1;
        self.nonfinite += merged.skipped as u64;
        let report = merged.row_report();
        self.scratch = merged;
        Ok(report)
    }

    fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        self.sums.grow_rows(rows)
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            scalars: self.sums.value_bytes(),
            row_index: self.sums.index.bytes(),
            scratch: self.scratch.capacity_bytes(),
            rows_with_state: self.sums.len() as u64,
            ..MemoryReport::default()
        }
        .finish()
    }

    fn export_state(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(self.config.dim as u64);
        w.u64(self.steps);
        w.u64(self.nonfinite);
        self.sums.write(&mut w);
        w.finish(kind::ADAGRAD)
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let mut r = Reader::open(bytes, kind::ADAGRAD)?;
        if r.u64()? != self.config.dim as u64 {
            return Err(StateError::ConfigMismatch {
                field: StateField::Dim,
            });
        }
        let steps = r.u64()?;
        let nonfinite = r.u64()?;
        let sums = self.sums.read(&mut r)?;
        r.end()?;
        self.sums = sums;
        self.steps = steps;
        self.nonfinite = nonfinite;
        Ok(())
    }

    fn export_rows(&self, slots: &[u64]) -> Result<Vec<u8>, RowStateError> {
        self.sums.index.check_slots(slots)?;
        let mut w = Writer::default();
        let fp = [(StateField::Dim, self.config.dim as u64)];
        row_move::write_header(&mut w, &fp, self.steps, slots.len());
        slots.iter().for_each(|&id| self.sums.write_row(&mut w, id));
        Ok(w.finish(row_move::rows_tag(kind::ADAGRAD)))
    }

    fn import_rows(&mut self, slots: &[u64], bytes: &[u8]) -> Result<(), RowStateError> {
        self.sums.index.check_slots(slots)?;
        let fp = [(StateField::Dim, self.config.dim as u64)];
        let tag = row_move::rows_tag(kind::ADAGRAD);
        let (r, steps) = row_move::open(bytes, tag, &fp, self.steps, slots.len())?;
        let rows = self.sums.read_rows(r, slots)?;
        self.sums.put_rows(rows)?;
        self.steps = steps;
        Ok(())
    }

    fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        self.sums.swap_remove(slot)
    }
}
