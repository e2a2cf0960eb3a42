//! The object-safe [`SparseOptimizer`] trait every optimizer here implements.

use alloc::vec::Vec;

use crate::error::{GrowError, RowStateError, RowStateUnsupported, StateError, StepError};
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

    /// Single rows' state as versioned, checksummed bytes, in the order of
    /// `slots`: what a row that moves to another optimizer (resharding:
    /// another rank's table) takes with it. `slots` are what the state is
    /// indexed by (the slots of [`step_keyed`](Self::step_keyed), or the
    /// ids of a sparse index); a row that has no state yet travels as such.
    /// The blob also records the global step count (see
    /// [`import_rows`](Self::import_rows)) and the configuration the rows'
    /// meaning depends on. State shared between rows (BASIS's buckets)
    /// moves separately, with [`export_buckets`](Self::export_buckets).
    ///
    /// # Errors
    /// [`RowStateError::SlotOutOfRange`] for a slot outside a dense range,
    /// [`RowStateError::Duplicate`] for a slot named twice,
    /// [`RowStateError::Unsupported`] when the rows cannot move exactly
    /// (the default: [`RowStateUnsupported::NotImplemented`]).
    fn export_rows(&self, slots: &[u64]) -> Result<Vec<u8>, RowStateError> {
        let _ = slots;
        Err(RowStateError::Unsupported(
            RowStateUnsupported::NotImplemented,
        ))
    }

    /// Takes in rows exported by [`export_rows`](Self::export_rows) of an
    /// optimizer of the same kind and configuration: the `k`-th row of the
    /// blob replaces the state of `slots[k]` (other slot numbers than the
    /// exporter's are fine; a dense range must already hold them, see
    /// [`grow_rows`](Self::grow_rows)). The rows then continue bit for bit
    /// as they would have on the exporter.
    ///
    /// Global step count: an optimizer that has not stepped yet (a fresh
    /// one, built to take in moved rows) takes the blob's; one that has
    /// must be at the blob's step count (every rank of a sharded table
    /// steps together, so their counts agree).
    ///
    /// # Errors
    /// [`RowStateError::State`] for a blob that is truncated, corrupted, of
    /// another kind or configuration; [`RowStateError::CountMismatch`]
    /// when it holds another number of rows than `slots`;
    /// [`RowStateError::StepMismatch`]; the slot errors of
    /// [`export_rows`](Self::export_rows); [`RowStateError::Unsupported`]
    /// as there. On error nothing changed.
    fn import_rows(&mut self, slots: &[u64], bytes: &[u8]) -> Result<(), RowStateError> {
        let _ = (slots, bytes);
        Err(RowStateError::Unsupported(
            RowStateUnsupported::NotImplemented,
        ))
    }

    /// Frees row `slot`'s state in a dense range of `rows` slots, the way
    /// [`SlotIndex::remove`](crate::SlotIndex::remove) frees a slot: the
    /// state of the last slot (`rows − 1`) moves into `slot` and the range
    /// shrinks by one. Returns `Some(rows − 1)` when a row moved (the caller
    /// moves its table row the same way), `None` when `slot` was the last.
    /// This is eviction: the freed row's state is gone, the moved row
    /// continues bit for bit. Shared state is not touched (BASIS: the
    /// buckets keep what the row contributed; a row admitted later starts
    /// from a fresh scalar over the same buckets).
    ///
    /// # Errors
    /// [`RowStateError::SlotOutOfRange`];
    /// [`RowStateError::Unsupported`] for a sparse index
    /// ([`RowStateUnsupported::SparseIndex`]) or an optimizer without the
    /// call (the default). On error nothing changed.
    fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        let _ = slot;
        Err(RowStateError::Unsupported(
            RowStateUnsupported::NotImplemented,
        ))
    }

    /// The number of buckets of shared state (BASIS's `B`; 0, the default,
    /// for optimizers whose state is all per row).
    fn bucket_count(&self) -> u32 {
        0
    }

    /// Buckets' shared state (BASIS: each bucket's moments and step count)
    /// as versioned, checksummed bytes, in the order of `buckets` (this
    /// optimizer's bucket numbers). With a bucket partition over ranks,
    /// the rows of a bucket and the bucket move together.
    ///
    /// # Errors
    /// [`RowStateError::BucketOutOfRange`], [`RowStateError::Duplicate`],
    /// [`RowStateError::Unsupported`] (the default:
    /// [`RowStateUnsupported::NoBuckets`]).
    fn export_buckets(&self, buckets: &[u32]) -> Result<Vec<u8>, RowStateError> {
        let _ = buckets;
        Err(RowStateError::Unsupported(RowStateUnsupported::NoBuckets))
    }

    /// Takes in buckets exported by [`export_buckets`](Self::export_buckets):
    /// the `k`-th bucket of the blob replaces bucket `buckets[k]`. The global
    /// step count follows the rule of [`import_rows`](Self::import_rows).
    ///
    /// # Errors
    /// As [`import_rows`](Self::import_rows), with buckets for slots. On
    /// error nothing changed.
    fn import_buckets(&mut self, buckets: &[u32], bytes: &[u8]) -> Result<(), RowStateError> {
        let _ = (buckets, bytes);
        Err(RowStateError::Unsupported(RowStateUnsupported::NoBuckets))
    }
}
