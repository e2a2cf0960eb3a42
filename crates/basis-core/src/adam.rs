//! [`ExactAdam`]: plain per-row Adam(W), the readable reference BASIS reduces to.

use alloc::vec::Vec;
use core::mem::size_of;

use num_traits::Float;

use crate::batch::{MergeRules, Merged, apply_row, merge, merge_with};
use crate::checks;
use crate::config::{NonFinitePolicy, RowIndex};
use crate::error::try_filled;
use crate::error::{ConfigError, GrowError, RowStateError, StateError, StateField, StepError};
use crate::exec::{Executor, ROWS_PER_ITEM};
use crate::kernel::bias_corrections;
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::row_move;
use crate::state::{Reader, Writer, kind};
use crate::store::Slots;
use crate::table::{DenseTable, RowAccess};

/// Hyper-parameters of [`ExactAdam`] (PyTorch's defaults);
/// `#[non_exhaustive]`, built from [`Default`] with the `with_*` setters.
///
/// ```
/// use basis_core::AdamConfig;
///
/// let config = AdamConfig::default()
///     .with_dim(8)
///     .with_weight_decay(0.01)
///     .with_grad_clip(Some(1.0));
/// assert_eq!(config.validate(), Ok(()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct AdamConfig {
    /// Row dimension.
    pub dim: usize,
    /// Learning rate.
    pub lr: f32,
    /// β1.
    pub beta1: f32,
    /// β2.
    pub beta2: f32,
    /// ε.
    pub eps: f32,
    /// Decoupled weight decay (AdamW: `θ *= 1 − lr·λ`).
    pub weight_decay: f32,
    /// Bias correction on.
    pub bias_correction: bool,
    /// Non-finite gradient policy.
    pub nonfinite: NonFinitePolicy,
    /// Optional per-row L2 gradient clip.
    pub grad_clip: Option<f32>,
    /// Dense or sparse row state.
    pub row_index: RowIndex,
}

adam_setters!(AdamConfig);
with_setters!(AdamConfig {
    with_nonfinite => nonfinite: NonFinitePolicy,
    with_grad_clip => grad_clip: Option<f32>,
    with_row_index => row_index: RowIndex,
});

impl Default for AdamConfig {
    fn default() -> Self {
        Self {
            dim: 16,
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            bias_correction: true,
            nonfinite: NonFinitePolicy::Skip,
            grad_clip: None,
            row_index: RowIndex::Sparse,
        }
    }
}

impl AdamConfig {
    /// Checks every value.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        checks::dim(self.dim)?;
        checks::positive(self.lr, ConfigError::LearningRate)?;
        checks::betas(self.beta1, self.beta2)?;
        checks::positive(self.eps, ConfigError::Epsilon)?;
        checks::non_negative(self.weight_decay, ConfigError::WeightDecay)?;
        checks::grad_clip(self.grad_clip)
    }
}

/// Per-row Adam: `m_i, v_i ∈ R^d` for every row seen, one global step count
/// (PyTorch `SparseAdam` semantics: rows absent from a batch keep their
/// moments; bias correction uses the number of steps taken).
///
/// ```
/// use basis_core::{AdamConfig, DenseTable, ExactAdam, SparseOptimizer};
///
/// let mut opt = ExactAdam::new(AdamConfig::default().with_dim(2).with_lr(0.1))?;
/// let mut w = vec![0.0f32; 4];
/// opt.step(&[0], &[1.0, -1.0], &mut DenseTable::new(&mut w, 2)?)?;
/// // Adam's first bias-corrected step moves each coordinate by about lr.
/// assert!((w[0] + 0.1).abs() < 1e-4 && (w[1] - 0.1).abs() < 1e-4);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ExactAdam {
    config: AdamConfig,
    index: Slots,
    m: Vec<f32>,
    v: Vec<f32>,
    slots: usize,
    steps: u32,
    nonfinite: u64,
    scratch: Merged,
}

impl ExactAdam {
    /// Zero moments.
    ///
    /// # Errors
    /// [`ConfigError`] from [`AdamConfig::validate`].
    pub fn new(config: AdamConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let rows = match config.row_index {
            RowIndex::Dense { rows } => rows,
            RowIndex::Sparse => 0,
        };
        let m = try_filled(rows, config.dim, 0.0)?;
        let v = try_filled(rows, config.dim, 0.0)?;
        let index = Slots::new(config.row_index);
        let slots = index.dense_rows();
        Ok(Self {
            config,
            index,
            m,
            v,
            slots,
            steps: 0,
            nonfinite: 0,
            scratch: Default::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AdamConfig {
        &self.config
    }

    /// Row `id`'s `(m, v)`, if it has state.
    pub fn moments(&self, id: u64) -> Option<(&[f32], &[f32])> {
        let d = self.config.dim;
        let s = self.index.get(id)?;
        Some((&self.m[s * d..(s + 1) * d], &self.v[s * d..(s + 1) * d]))
    }

    /// [`SparseOptimizer::step`] on a [`DenseTable`], with the merge's sorts
    /// and sums and the per-row updates handed to `exec` (a thread pool:
    /// `basis-rayon`'s `par_exact_adam_step_dense`). **The same bits as
    /// `step`** for every executor: the merge's result does not depend on
    /// it (see [`Executor`]), and rows are distinct after merging, each
    /// row's `m`, `v` and table row are written by one work item with the
    /// serial arithmetic, and nothing is summed across rows. Only a dense
    /// row index ([`RowIndex::Dense`]: slot = id, no slot is created in a
    /// step) runs this way; a sparse index runs the serial `step`.
    ///
    /// # Errors
    /// Exactly as `step`; nothing changes then.
    pub fn step_dense_with<E: Executor>(
        &mut self,
        exec: &E,
        ids: &[u64],
        grads: &[f32],
        table: &mut DenseTable<'_>,
    ) -> Result<StepReport, StepError> {
        if !self.index.is_dense() {
            return self.step(ids, grads, table);
        }
        let c = self.config;
        let d = c.dim;
        let index = &self.index;
        let rules = MergeRules {
            dim: d,
            policy: c.nonfinite,
            clip: c.grad_clip,
            materialize: true,
        };
        let merged = merge_with(exec, &mut self.scratch, ids, grads, rules, table, |id| {
            index.check(id)
        })?;
        self.steps = self.steps.saturating_add(1);
        let (bc1, bc2) = bias_corrections(c.beta1, c.beta2, self.steps, c.bias_correction);
        // The merged ids ascend and are distinct, and each is below both the
        // index's and the table's row count (the merge checked them). So a
        // work item of consecutive merged rows owns the id range from its
        // first id up to the next item's first: the table, `m` and `v` are
        // cut there into disjoint pieces, each item indexing its own piece
        // from its first id.
        let data = table.data_mut();
        let n = merged.ids.len();
        let mut items = Vec::with_capacity(n.div_ceil(ROWS_PER_ITEM));
        let (mut rest_t, mut rest_m, mut rest_v) =
            (&mut data[..], &mut self.m[..], &mut self.v[..]);
        let mut at = 0usize; // the float offset `rest_*` start at
        for first in (0..n).step_by(ROWS_PER_ITEM) {
            let last = (first + ROWS_PER_ITEM).min(n);
            let start = merged.ids[first] as usize * d;
            // Up to the next item's first row; the last item up to the end
            // of its last row (the table and the moments may differ in length).
            let end = merged
                .ids
                .get(last)
                .map_or((merged.ids[last - 1] as usize + 1) * d, |&id| {
                    id as usize * d
                });
            let (skip, len) = (start - at, end - start);
            let t = cut(&mut rest_t, skip, len);
            let m = cut(&mut rest_m, skip, len);
            let v = cut(&mut rest_v, skip, len);
            at = end;
            let ids = &merged.ids[first..last];
            let g = &merged.grads[first * d..last * d];
            items.push((ids, g, t, m, v));
        }
        let decay = c.lr * c.weight_decay;
        exec.for_each(items, |(ids, g, t, m, v)| {
            let base = ids[0] as usize;
            let mut upd = alloc::vec![0.0f32; d];
            for (&id, g) in ids.iter().zip(g.chunks_exact(d)) {
                let at = (id as usize - base) * d;
                let m = &mut m[at..at + d];
                let v = &mut v[at..at + d];
                // `step`'s per-row arithmetic, unchanged.
                for j in 0..d {
                    m[j] = c.beta1 * m[j] + (1.0 - c.beta1) * g[j];
                    v[j] = c.beta2 * v[j] + (1.0 - c.beta2) * (g[j] * g[j]);
                    let u = (m[j] / bc1) / (Float::sqrt(v[j] / bc2) + c.eps);
                    upd[j] = c.lr * u;
                }
                apply_row(&mut t[at..at + d], &upd, decay);
            }
        });
        self.nonfinite += merged.skipped as u64;
        let report = merged.row_report();
        self.scratch = merged;
        Ok(report)
    }

    /// What a moved row's `(m, v)` mean: the dimension and the averages.
    fn row_fingerprint(&self) -> [(StateField, u64); 2] {
        let c = &self.config;
        let betas = (u64::from(c.beta1.to_bits()) << 32) | u64::from(c.beta2.to_bits());
        [(StateField::Dim, c.dim as u64), (StateField::Betas, betas)]
    }
}

/// The `len` values after the first `skip` of `rest`; `rest` keeps what
/// follows them.
fn cut<'a>(rest: &mut &'a mut [f32], skip: usize, len: usize) -> &'a mut [f32] {
    let tail = core::mem::take(rest).split_at_mut(skip).1;
    let (piece, tail) = tail.split_at_mut(len);
    *rest = tail;
    piece
}

impl SparseOptimizer for ExactAdam {
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
        let index = &self.index;
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
        let mut upd = alloc::vec![0.0f32; d];
        for (k, &id) in merged.ids.iter().enumerate() {
            let (slot, created) = self.index.get_or_insert(id, self.slots);
            if created {
                self.slots += 1;
                self.m.resize(self.slots * d, 0.0);
                self.v.resize(self.slots * d, 0.0);
            }
            let g = &merged.grads[k * d..(k + 1) * d];
            let m = &mut self.m[slot * d..(slot + 1) * d];
            let v = &mut self.v[slot * d..(slot + 1) * d];
            for j in 0..d {
                m[j] = c.beta1 * m[j] + (1.0 - c.beta1) * g[j];
                v[j] = c.beta2 * v[j] + (1.0 - c.beta2) * (g[j] * g[j]);
                let u = (m[j] / bc1) / (Float::sqrt(v[j] / bc2) + c.eps);
                upd[j] = c.lr * u;
            }
            if let Some(row) = table.row_mut(id) {
                apply_row(row, &upd, c.lr * c.weight_decay);
            }
        }
        self.nonfinite += merged.skipped as u64;
        let report = merged.row_report();
        self.scratch = merged;
        Ok(report)
    }

    fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        let n = self.index.check_grow(rows)?;
        let len = n
            .checked_mul(self.config.dim)
            .ok_or(GrowError::OutOfMemory { rows })?;
        // Reserve both before touching either, so a failure changes nothing.
        let extra = len.saturating_sub(self.m.len());
        self.m
            .try_reserve_exact(extra)
            .and_then(|()| self.v.try_reserve_exact(extra))
            .map_err(|_| GrowError::OutOfMemory { rows })?;
        self.m.resize(len, 0.0);
        self.v.resize(len, 0.0);
        self.index.set_dense_rows(rows);
        self.slots = n;
        Ok(())
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            scalars: (self.m.capacity() + self.v.capacity()) * size_of::<f32>(),
            row_index: self.index.bytes(),
            scratch: self.scratch.capacity_bytes(),
            rows_with_state: self.slots as u64,
            ..MemoryReport::default()
        }
        .finish()
    }

    fn export_state(&self) -> Vec<u8> {
        let d = self.config.dim;
        let mut w = Writer::default();
        w.u64(d as u64);
        w.u64(if self.index.is_dense() {
            self.index.dense_rows() as u64
        } else {
            u64::MAX
        });
        w.u32(self.steps);
        w.u64(self.nonfinite);
        w.u64(self.slots as u64);
        let put = |w: &mut Writer, slot: usize| {
            w.f32s(&self.m[slot * d..(slot + 1) * d]);
            w.f32s(&self.v[slot * d..(slot + 1) * d]);
        };
        match self.index.sorted_pairs() {
            None => (0..self.slots).for_each(|s| put(&mut w, s)),
            Some(pairs) => pairs.into_iter().for_each(|(id, s)| {
                w.u64(id);
                put(&mut w, s as usize);
            }),
        }
        w.finish(kind::ADAM)
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let d = self.config.dim;
        let mut r = Reader::open(bytes, kind::ADAM)?;
        let dense = if self.index.is_dense() {
            self.index.dense_rows() as u64
        } else {
            u64::MAX
        };
        if r.u64()? != d as u64 {
            return Err(StateError::ConfigMismatch {
                field: StateField::Dim,
            });
        }
        if r.u64()? != dense {
            return Err(StateError::ConfigMismatch {
                field: StateField::Rows,
            });
        }
        let steps = r.u32()?;
        let nonfinite = r.u64()?;
        let slots = usize::try_from(r.u64()?).map_err(|_| StateError::Malformed)?;
        if self.index.is_dense() && slots != self.index.dense_rows() {
            return Err(StateError::ConfigMismatch {
                field: StateField::Rows,
            });
        }
        let per = 8 * d + if self.index.is_dense() { 0 } else { 8 };
        r.ensure(slots, per)?;
        // A grown dense range (`grow_rows`) keeps its current rows: the
        // configured `rows` is only where it started (checked equal above).
        let mut index = match &self.index {
            Slots::Dense { rows } => Slots::Dense { rows: *rows },
            Slots::Sparse { .. } => Slots::new(self.config.row_index),
        };
        let mut m = Vec::with_capacity(slots * d);
        let mut v = Vec::with_capacity(slots * d);
        let mut last = None;
        for s in 0..slots {
            if !index.is_dense() {
                let id = r.u64()?;
                if last.is_some_and(|l| l >= id) {
                    return Err(StateError::Malformed);
                }
                last = Some(id);
                index.get_or_insert(id, s);
            }
            m.extend(r.f32s(d)?);
            v.extend(r.f32s(d)?);
        }
        if v.iter().any(|&x| x < 0.0) {
            return Err(StateError::Malformed);
        }
        r.end()?;
        *self = Self {
            config: self.config,
            index,
            m,
            v,
            slots,
            steps,
            nonfinite,
            scratch: core::mem::take(&mut self.scratch),
        };
        Ok(())
    }

    fn export_rows(&self, slots: &[u64]) -> Result<Vec<u8>, RowStateError> {
        self.index.check_slots(slots)?;
        let d = self.config.dim;
        let mut w = Writer::default();
        let fp = self.row_fingerprint();
        row_move::write_header(&mut w, &fp, u64::from(self.steps), slots.len());
        for &id in slots {
            match self.index.get(id) {
                Some(s) => {
                    w.u8(1);
                    w.f32s(&self.m[s * d..(s + 1) * d]);
                    w.f32s(&self.v[s * d..(s + 1) * d]);
                }
                None => w.u8(0),
            }
        }
        Ok(w.finish(row_move::rows_tag(kind::ADAM)))
    }

    fn import_rows(&mut self, slots: &[u64], bytes: &[u8]) -> Result<(), RowStateError> {
        self.index.check_slots(slots)?;
        let d = self.config.dim;
        let fp = self.row_fingerprint();
        let tag = row_move::rows_tag(kind::ADAM);
        let (mut r, steps) = row_move::open(bytes, tag, &fp, u64::from(self.steps), slots.len())?;
        let steps = u32::try_from(steps).map_err(|_| StateError::Malformed)?;
        // Everything is read and checked before anything changes.
        let mut rows = Vec::with_capacity(slots.len().min(bytes.len()));
        for _ in slots {
            rows.push(if row_move::present(&mut r)? {
                let m = r.f32s(d)?;
                let v = r.f32s(d)?;
                if v.iter().any(|&x| x < 0.0) {
                    return Err(StateError::Malformed.into());
                }
                Some((m, v))
            } else {
                None
            });
        }
        r.end()?;
        let new = rows.iter().zip(slots);
        let extra = new
            .filter(|&(row, &id)| row.is_some() && self.index.get(id).is_none())
            .count()
            * d;
        self.m
            .try_reserve(extra)
            .and_then(|()| self.v.try_reserve(extra))
            .map_err(|_| RowStateError::OutOfMemory)?;
        for (row, &id) in rows.into_iter().zip(slots) {
            let slot = match (&row, self.index.get(id)) {
                (_, Some(s)) => s,
                // No state here and none to take: stays without.
                (None, None) => continue,
                (Some(_), None) => {
                    let (s, _) = self.index.get_or_insert(id, self.slots);
                    self.slots += 1;
                    self.m.resize(self.slots * d, 0.0);
                    self.v.resize(self.slots * d, 0.0);
                    s
                }
            };
            let (m, v) = row.unwrap_or_else(|| (alloc::vec![0.0; d], alloc::vec![0.0; d]));
            self.m[slot * d..(slot + 1) * d].copy_from_slice(&m);
            self.v[slot * d..(slot + 1) * d].copy_from_slice(&v);
        }
        self.steps = steps;
        Ok(())
    }

    fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        let last = self.index.check_remove(slot)?;
        let d = self.config.dim;
        row_move::swap_remove_slot(&mut self.m, d, slot as usize, last as usize);
        row_move::swap_remove_slot(&mut self.v, d, slot as usize, last as usize);
        self.index.set_dense_rows(last);
        self.slots = last as usize;
        Ok(row_move::moved(slot, last))
    }
}
