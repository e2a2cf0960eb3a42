//! [`Sgd`]: plain sparse SGD, the floor every adaptive method must beat.

use alloc::vec::Vec;

use crate::batch::{Merged, apply_row, merge};
use crate::checks;
use crate::config::NonFinitePolicy;
use crate::error::{ConfigError, GrowError, RowStateError, StateError, StateField, StepError};
use crate::optimizer::SparseOptimizer;
use crate::report::{MemoryReport, StepReport};
use crate::row_move;
use crate::state::{Reader, Writer, kind};
use crate::table::RowAccess;

/// `θ_i −= η·g_i` (duplicates summed), no state beyond a step counter.
///
/// ```
/// use basis_core::{DenseTable, Sgd, SparseOptimizer};
///
/// let mut opt = Sgd::new(1, 0.5)?;
/// let mut w = vec![1.0f32; 3];
/// opt.step(&[2, 2], &[1.0, 1.0], &mut DenseTable::new(&mut w, 1)?)?; // duplicates summed
/// assert_eq!(w, [1.0, 1.0, 0.0]);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sgd {
    dim: usize,
    lr: f32,
    nonfinite: NonFinitePolicy,
    steps: u64,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`, skipping non-finite rows.
    ///
    /// # Errors
    /// [`ConfigError::ZeroDim`] or [`ConfigError::LearningRate`].
    pub fn new(dim: usize, lr: f32) -> Result<Self, ConfigError> {
        checks::dim(dim)?;
        checks::positive(lr, ConfigError::LearningRate)?;
        Ok(Self {
            dim,
            lr,
            nonfinite: NonFinitePolicy::Skip,
            steps: 0,
        })
    }

    /// The same with another non-finite policy.
    pub fn with_nonfinite(mut self, policy: NonFinitePolicy) -> Self {
        self.nonfinite = policy;
        self
    }
}

impl SparseOptimizer for Sgd {
    fn dim(&self) -> usize {
        self.dim
    }

    fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        let d = self.dim;
        let mut merged = merge(
            &mut Merged::default(),
            ids,
            grads,
            d,
            self.nonfinite,
            None,
            table,
            |_| Ok(()),
        )?;
        for (k, &id) in merged.ids.iter().enumerate() {
            let g = &mut merged.grads[k * d..(k + 1) * d];
            g.iter_mut().for_each(|x| *x *= self.lr);
            if let Some(row) = table.row_mut(id) {
                apply_row(row, g, 0.0);
            }
        }
        self.steps += 1;
        Ok(merged.row_report())
    }

    /// SGD keeps no per-row state: any row range is fine.
    fn grow_rows(&mut self, _rows: u64) -> Result<(), GrowError> {
        Ok(())
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport::default()
    }

    fn export_state(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(self.dim as u64);
        w.u64(self.steps);
        w.finish(kind::SGD)
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let mut r = Reader::open(bytes, kind::SGD)?;
        if r.u64()? != self.dim as u64 {
            return Err(StateError::ConfigMismatch {
                field: StateField::Dim,
            });
        }
        let steps = r.u64()?;
        r.end()?;
        self.steps = steps;
        Ok(())
    }

    /// SGD keeps no per-row state: every row travels as "no state".
    fn export_rows(&self, slots: &[u64]) -> Result<Vec<u8>, RowStateError> {
        row_move::check_distinct(slots)?;
        let mut w = Writer::default();
        let fp = [(StateField::Dim, self.dim as u64)];
        row_move::write_header(&mut w, &fp, self.steps, slots.len());
        slots.iter().for_each(|_| w.u8(0));
        Ok(w.finish(row_move::rows_tag(kind::SGD)))
    }

    fn import_rows(&mut self, slots: &[u64], bytes: &[u8]) -> Result<(), RowStateError> {
        row_move::check_distinct(slots)?;
        let fp = [(StateField::Dim, self.dim as u64)];
        let tag = row_move::rows_tag(kind::SGD);
        let (mut r, steps) = row_move::open(bytes, tag, &fp, self.steps, slots.len())?;
        for _ in slots {
            if row_move::present(&mut r)? {
                return Err(StateError::Malformed.into());
            }
        }
        r.end()?;
        self.steps = steps;
        Ok(())
    }

    /// No per-row state to free: nothing moves (the caller's own index
    /// says which row took the slot).
    fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        let _ = slot;
        Ok(None)
    }
}
