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
use crate::batch::{Merged, apply_row, merge};
use crate::error::{ConfigError, GrowError, StateError, StepError};
use crate::kernel::bias_corrections;
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::rows::{Lane, RowSlots, read_nonneg};
use crate::state::{Reader, Writer, kind};
use crate::table::RowAccess;

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
    rows: RowSlots,
    m: Lane<f32>,
    v: Lane<f32>,
    t: Lane<u32>,
    steps: u64,
    nonfinite: u64,
    scratch: Merged,
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
        let rows = RowSlots::new(config.row_index);
        let n = rows.slots as u64;
        Ok(Self {
            m: Lane::new(config.dim, n, 0.0)?,
            v: Lane::new(config.dim, n, 0.0)?,
            t: Lane::new(1, n, 0)?,
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

    /// Row `id`'s `(m, v)`, if it has state.
    pub fn moments(&self, id: u64) -> Option<(&[f32], &[f32])> {
        let s = self.rows.index.get(id)?;
        Some((self.m.row(s), self.v.row(s)))
    }

    /// Steps in which row `id` had a gradient (0 when never updated).
    pub fn row_steps(&self, id: u64) -> u32 {
        self.rows.index.get(id).map_or(0, |s| self.t.row(s)[0])
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
        self.steps += 1;
        self.upd.resize(d, 0.0);
        for (k, &id) in merged.ids.iter().enumerate() {
            let (slot, created) = self.rows.slot(id);
            if created {
                self.m.ensure(self.rows.slots, 0.0);
                self.v.ensure(self.rows.slots, 0.0);
                self.t.ensure(self.rows.slots, 0);
            }
            let t = &mut self.t.row_mut(slot)[0];
            *t = t.saturating_add(1);
            let (bc1, bc2) = bias_corrections(c.beta1, c.beta2, *t, c.bias_correction);
            let g = &merged.grads[k * d..(k + 1) * d];
            let m = self.m.row_mut(slot);
            let v = self.v.row_mut(slot);
            for j in 0..d {
                m[j] = c.beta1 * m[j] + (1.0 - c.beta1) * g[j];
                v[j] = c.beta2 * v[j] + (1.0 - c.beta2) * (g[j] * g[j]);
                self.upd[j] = c.lr * ((m[j] / bc1) / (Float::sqrt(v[j] / bc2) + c.eps));
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
        // Reserve all before touching any, so a failure changes nothing.
        self.m.try_reserve(n, rows)?;
        self.v.try_reserve(n, rows)?;
        self.t.try_reserve(n, rows)?;
        self.m.ensure(n, 0.0);
        self.v.ensure(n, 0.0);
        self.t.ensure(n, 0);
        self.rows.set_rows(rows, n);
        Ok(())
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            scalars: self.m.bytes() + self.v.bytes(),
            row_counters: self.t.bytes(),
            row_index: self.rows.index.bytes(),
            scratch: self.scratch.capacity_bytes() + self.upd.capacity() * 4,
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
                w.f32s(self.m.row(s));
                w.f32s(self.v.row(s));
                w.u32(self.t.row(s)[0]);
            },
        );
        w.finish(kind::ROWSTEP_ADAM)
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let d = self.config.dim;
        let mut r = Reader::open(bytes, kind::ROWSTEP_ADAM)?;
        let (mut m, mut v, mut t) = (Vec::new(), Vec::new(), Vec::new());
        let (rows, steps, nonfinite) = self.rows.read(&mut r, d, 8 * d + 4, |r| {
            m.extend(r.f32s(d)?);
            v.extend(read_nonneg(r, d)?);
            t.push(r.u32()?);
            Ok(())
        })?;
        r.end()?;
        self.m = Lane::from_vec(d, m);
        self.v = Lane::from_vec(d, v);
        self.t = Lane::from_vec(1, t);
        self.rows = rows;
        self.steps = steps;
        self.nonfinite = nonfinite;
        Ok(())
    }
}
