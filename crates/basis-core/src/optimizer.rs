//! The object-safe [`SparseOptimizer`] trait every optimizer here implements.

use alloc::vec::Vec;

use crate::error::{GrowError, StateError, StepError};
use crate::report::{MemoryReport, StepReport};
use crate::table::RowAccess;

/// A sparse-row optimizer: one step over a batch of `(row id, gradient)`.
///
/// `grads` holds `ids.len() * dim()` values, row-major (row `k`'s gradient is
/// `grads[k*dim..(k+1)*dim]`). Duplicate ids are summed. The result never
/// depends on the order of the rows in the batch.
///
/// # Example
///
/// Every optimizer steps through the same object-safe interface, so a
/// training loop can hold any of them:
///
/// ```
/// use basis_core::{
///     Adam8bit, AdagradConfig, AdamConfig, DenseTable, ExactAdam, Ftrl, FtrlConfig,
///     PartialRowwiseAdam, RowStepAdam, RowwiseAdagrad, SparseOptimizer,
/// };
///
/// let dim = 4;
/// let adam = AdamConfig::default().with_dim(dim);
/// let mut opts: Vec<Box<dyn SparseOptimizer>> = vec![
///     Box::new(ExactAdam::new(adam)?),
///     Box::new(RowwiseAdagrad::new(AdagradConfig::default().with_dim(dim))?),
///     // The baselines: FBGEMM's PARTIAL_ROWWISE_ADAM, Adam with per-row
///     // bias correction, FTRL-Proximal, 8-bit block-wise Adam state.
///     Box::new(PartialRowwiseAdam::new(adam)?),
///     Box::new(RowStepAdam::new(adam)?),
///     Box::new(Ftrl::new(FtrlConfig::default().with_dim(dim))?),
///     Box::new(Adam8bit::new(adam, basis_core::DEFAULT_BLOCK)?),
/// ];
/// for opt in &mut opts {
///     let mut rows = vec![0.5f32; 10 * dim]; // 10 rows
///     let mut table = DenseTable::new(&mut rows, dim)?;
///     // Rows 3 and 7 get a gradient; a duplicate id is summed.
///     let grads = [1.0f32; 3 * 4];
///     opt.step(&[3, 7, 3], &grads, &mut table)?;
///     assert!(rows[3 * dim] < 0.5 && rows[7 * dim] < 0.5 && rows[0] == 0.5);
///     assert!(opt.memory().total_bytes > 0);
///     // State round-trips through bytes (a checkpoint).
///     let saved = opt.export_state();
///     opt.import_state(&saved)?;
/// }
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
pub trait SparseOptimizer {
    /// Row dimension.
    fn dim(&self) -> usize;

    /// Applies one step to `table`.
    ///
    /// # Errors
    /// [`StepError`] for a wrong gradient length, a table of another dim, a
    /// missing row, an id outside dense state, or (policy `Error`) a
    /// non-finite gradient. On error nothing changed.
    fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError>;

    /// One step where the row each gradient belongs to is named twice: by
    /// its `keys[k]` (what the optimizer hashes: BASIS's bucket, sign and
    /// rounding bits; typically a global row id) and by its `slots[k]`
    /// (where its state and its `table` row are stored: the id the dense
    /// state and [`RowAccess::row_mut`] are indexed by). A table that owns
    /// its own `id → slot` map (a shard store, numbering rows as they
    /// arrive) steps with its slots and the global ids, so the result does
    /// not depend on the slot numbering. The result is then the one
    /// [`step`](Self::step) gives with `ids = keys` over a table and state
    /// indexed by key; with `keys == slots` it *is* `step(slots, ..)`, bit
    /// for bit.
    ///
    /// Keys and slots must pair one-to-one within the batch. The default
    /// suits optimizers whose step hashes nothing (per-row state only:
    /// Adam, AdaGrad, SGD): it checks the pairing and steps by slot.
    ///
    /// # Errors
    /// [`StepError::KeyLength`] when `keys.len() != slots.len()`,
    /// [`StepError::KeyConflict`] when the pairing is not one-to-one, then
    /// everything [`step`](Self::step) returns (ids are slots there, except
    /// a bucket error, which names the key). On error nothing changed.
    fn step_keyed(
        &mut self,
        keys: &[u64],
        slots: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        crate::keys::slot_keys(keys, slots)?;
        self.step(slots, grads, table)
    }

    /// Grows a dense row range (`RowIndex::Dense`) to `rows` ids; the new
    /// rows start as never-updated rows. This is how a table that owns the
    /// id → slot map (a shard store) keeps every optimizer's state a dense
    /// array parallel to its slots, with no id map of the optimizer's own.
    /// Allocation is fallible (`try_reserve`): on error nothing changed.
    ///
    /// # Errors
    /// [`GrowError::NotDense`] for a sparse index (the default for
    /// optimizers that do not support growing), [`GrowError::Shrink`] below
    /// the current rows, [`GrowError::OutOfMemory`].
    fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        let _ = rows;
        Err(GrowError::NotDense)
    }

    /// Exact bytes of state held.
    fn memory(&self) -> MemoryReport;

    /// The whole state as versioned, checksummed bytes.
    fn export_state(&self) -> Vec<u8>;

    /// Replaces the state with an exported one.
    ///
    /// # Errors
    /// [`StateError`] for a truncated, corrupted, foreign or mismatched blob;
    /// the optimizer is unchanged then.
    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError>;
}
