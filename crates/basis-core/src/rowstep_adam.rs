//! [`RowStepAdam`]: per-row Adam whose bias correction counts each row's own
//! steps (lazy / sparse Adam with a per-row step counter).
//!
//! [`ExactAdam`](crate::ExactAdam) follows PyTorch's `SparseAdam`: one
//! global step count `t`, so a row first seen at step 1000 gets
//! `1 − β1^1000 ≈ 1` as its correction and its first update is shrunk by
//! `(1 − β1)/√(1 − β2) ≈ 3` (defaults) instead of being a full Adam step.
//! Here each row keeps `t_i`, the number of steps in which it had a (kept,
//! finite) gradient, and is corrected with it:
//!
//! ```text
//! t_i ← t_i + 1
//! m_i ← β1·m_i + (1 − β1)·g_i,    v_i ← β2·v_i + (1 − β2)·g_i²
//! θ_i ← θ_i·(1 − η·λ) − η·(m_i/(1 − β1^t_i)) / (√(v_i/(1 − β2^t_i)) + ε)
//! ```
//!
//! A row's update then depends only on its own gradient history, as if it
//! were a dense parameter trained by Adam on the steps it took part in.
//! State: `8·d + 4` bytes per row (the counter is a `u32`, saturating).

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

/// `m`, `v` (`≥ 0`; d values each) and the row's step count `t_i` per slot.
type Moments = (Lane<f32>, Lane<f32>, Lane<u32>);

/// Per-row Adam with a per-row step counter for bias correction. Takes
/// [`AdamConfig`] (every field applies; with `bias_correction` off it
/// steps exactly like [`ExactAdam`](crate::ExactAdam) and only spends the
/// counters).
///
/// ```
/// use basis_core::{AdamConfig, DenseTable, RowStepAdam, SparseOptimizer};
///
/// let mut opt = RowStepAdam::new(AdamConfig::default().with_dim(1).with_lr(0.1))?;
/// let mut w = vec![0.0f32; 2];
/// let mut t = DenseTable::new(&mut w, 1)?;
/// for _ in 0..50 {
///     opt.step(&[0], &[1.0], &mut t)?; // row 0 trains for 50 steps
/// }
/// opt.step(&[1], &[1.0], &mut t)?; // row 1 is new at step 51
/// // Its own count is 1: a full first Adam step of about lr.
/// assert_eq!(opt.row_steps(1), 1);
/// assert!((w[1] + 0.1).abs() < 1e-4);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct RowStepAdam {
    config: AdamConfig,
    state: RowDriver<Moments>,
    upd: Vec<f32>,
}

impl RowStepAdam {
    /// Zero moments and counters.
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
            kind: kind::ROWSTEP_ADAM,
            max_steps: u64::MAX,
        };
        let d = config.dim;
        let state = RowDriver::new(plumbing, config.row_index, |n| {
            Ok((
                Lane::new(d, n, 0.0)?,
                Lane::new(d, n, 0.0)?.nonneg(),
                Lane::new(1, n, 0)?,
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

    /// Row `id`'s `(m, v)`, if it has state.
    pub fn moments(&self, id: u64) -> Option<(&[f32], &[f32])> {
        let s = self.state.slot_of(id)?;
        let (m, v, _) = &self.state.lanes;
        Some((m.row(s), v.row(s)))
    }

    /// Steps in which row `id` had a gradient (0 when never updated).
    pub fn row_steps(&self, id: u64) -> u32 {
        self.state
            .slot_of(id)
            .map_or(0, |s| self.state.lanes.2.row(s)[0])
    }

    fn fingerprint(&self) -> [(StateField, u64); 2] {
        adam_fingerprint(self.config.dim, self.config.beta1, self.config.beta2)
    }
}

impl SparseOptimizer for RowStepAdam {
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
            .step(ids, grads, table, |(m, v, t), slot, g, row, _| {
                let t = &mut t.row_mut(slot)[0];
                *t = t.saturating_add(1);
                let (bc1, bc2) = bias_corrections(c.beta1, c.beta2, *t, c.bias_correction);
                let m = m.row_mut(slot);
                let v = v.row_mut(slot);
                for j in 0..d {
                    m[j] = c.beta1 * m[j] + (1.0 - c.beta1) * g[j];
                    v[j] = c.beta2 * v[j] + (1.0 - c.beta2) * (g[j] * g[j]);
                    upd[j] = c.lr * ((m[j] / bc1) / (Float::sqrt(v[j] / bc2) + c.eps));
                }
                if let Some(row) = row {
                    apply_row(row, upd, c.lr * c.weight_decay);
                }
            })
    }

    crate::rows::driver_methods!();

    fn memory(&self) -> MemoryReport {
        let (m, v, t) = &self.state.lanes;
        let base = self.state.memory();
        MemoryReport {
            scalars: m.bytes() + v.bytes(),
            row_counters: t.bytes(),
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
