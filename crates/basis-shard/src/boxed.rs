//! [`BoxedOptimizer`]: any `SparseOptimizer` behind a box, for a table whose
//! optimizer is chosen at run time (`ShardedTable<BoxedOptimizer>`).

use alloc::boxed::Box;
use alloc::vec::Vec;
use basis_core::{
    GrowError, MemoryReport, RowAccess, RowStateError, SparseOptimizer, StateError, StepError,
    StepReport,
};
use core::fmt;

/// A boxed sparse optimizer; every call goes to the box.
pub struct BoxedOptimizer(pub Box<dyn SparseOptimizer + Send>);

impl fmt::Debug for BoxedOptimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxedOptimizer")
            .field("dim", &self.0.dim())
            .finish_non_exhaustive()
    }
}

impl SparseOptimizer for BoxedOptimizer {
    fn dim(&self) -> usize {
        self.0.dim()
    }

    fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        self.0.step(ids, grads, table)
    }

    fn step_keyed(
        &mut self,
        keys: &[u64],
        slots: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        self.0.step_keyed(keys, slots, grads, table)
    }

    fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        self.0.grow_rows(rows)
    }

    fn memory(&self) -> MemoryReport {
        self.0.memory()
    }

    fn export_state(&self) -> Vec<u8> {
        self.0.export_state()
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        self.0.import_state(bytes)
    }

    fn export_rows(&self, slots: &[u64]) -> Result<Vec<u8>, RowStateError> {
        self.0.export_rows(slots)
    }

    fn import_rows(&mut self, slots: &[u64], bytes: &[u8]) -> Result<(), RowStateError> {
        self.0.import_rows(slots, bytes)
    }

    fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        self.0.swap_remove_row(slot)
    }

    fn bucket_count(&self) -> u32 {
        self.0.bucket_count()
    }

    fn export_buckets(&self, buckets: &[u32]) -> Result<Vec<u8>, RowStateError> {
        self.0.export_buckets(buckets)
    }

    fn import_buckets(&mut self, buckets: &[u32], bytes: &[u8]) -> Result<(), RowStateError> {
        self.0.import_buckets(buckets, bytes)
    }
}
