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
