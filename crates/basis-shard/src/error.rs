//! [`ShardError`]: every way a sharded-table call can fail, typed.

use basis_core::{GrowError, RowStateError, StateError, StepError};
use basis_std::checkpoint::CheckpointError;
use comm_traits::CommError;
use core::fmt;

use crate::RowPrecision;

/// Why a [`ShardedTable`](crate::ShardedTable) call failed.
///
/// A collective call (`lookup`, `lookup_eval`, `apply`) that fails on one
/// rank leaves the other ranks waiting in, or failing, their own exchange:
/// like any collective error, it ends the group's run on every rank (the
/// communicator reports the lost peer to the others). The local table is
/// unchanged by a failed call unless the variant says otherwise.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShardError {
    /// A configuration that cannot work (zero ranks, a rank outside the
    /// group, a zero dimension).
    BadConfig(&'static str),
    /// The communicator's group is not the table's.
    GroupMismatch {
        /// `(rank, ranks)` the table was built for.
        table: (usize, usize),
        /// `(rank, size)` of the communicator passed.
        comm: (usize, usize),
    },
    /// A collective failed (a rank died, timed out, or disagreed on sizes).
    Comm(CommError),
    /// Growing the table to `rows` rows could not be allocated (the table
    /// is unchanged apart from reserved capacity).
    OutOfMemory {
        /// Rows the table would have held.
        rows: usize,
    },
    /// The optimizer could not grow its per-row state.
    Grow(GrowError),
    /// The optimizer refused the step (nothing changed).
    Step(StepError),
    /// `apply` got gradients of the wrong length.
    GradLength {
        /// `ids × dim` of the batch.
        expected: usize,
        /// Values passed.
        got: usize,
    },
    /// `apply` got a batch that is not this table's latest training
    /// `lookup` (already applied, an evaluation batch, or another table's).
    StaleBatch,
    /// Reading or writing a checkpoint file failed (I/O, or not a valid
    /// checkpoint container: bad magic, checksum, truncation).
    Checkpoint(CheckpointError),
    /// A checkpoint whose sections are missing or malformed.
    Corrupt(&'static str),
    /// A checkpoint of another table: another rank, group size, dimension
    /// or owner rule (a file mixed in from another run or rank).
    Mismatch {
        /// What differs.
        what: &'static str,
        /// This table's value.
        expected: u64,
        /// The checkpoint's value.
        found: u64,
    },
    /// The optimizer refused the checkpoint's state (foreign, corrupt or
    /// of another configuration).
    State(StateError),
    /// `restore` into a table that already holds rows.
    NotEmpty,
    /// The optimizer could not free, hand out or take in one row's (or
    /// bucket's) state: eviction and resharding need
    /// `SparseOptimizer::{swap_remove_row, export_rows, import_rows}` (and
    /// for BASIS the bucket calls).
    RowState(RowStateError),
    /// A checkpoint whose rows are stored at another precision than the
    /// table's ([`TableConfig::precision`](crate::TableConfig::precision)):
    /// restoring it would widen or round every row, so it is refused.
    Precision {
        /// This table's precision.
        table: RowPrecision,
        /// The checkpoint's precision.
        checkpoint: RowPrecision,
    },
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadConfig(what) => write!(f, "bad sharded-table configuration: {what}"),
            Self::GroupMismatch { table, comm } => write!(
                f,
                "the table is rank {} of {} but the communicator is rank {} of {}",
                table.0, table.1, comm.0, comm.1
            ),
            Self::Comm(e) => write!(f, "{e}"),
            Self::OutOfMemory { rows } => {
                write!(f, "out of memory growing the shard to {rows} rows")
            }
            Self::Grow(e) => write!(f, "sparse optimizer: {e}"),
            Self::Step(e) => write!(f, "{e}"),
            Self::GradLength { expected, got } => {
                write!(f, "{got} gradient values for a batch of {expected}")
            }
            Self::StaleBatch => {
                f.write_str("apply: the batch is not this table's latest training lookup")
            }
            Self::Checkpoint(e) => write!(f, "{e}"),
            Self::Corrupt(what) => write!(f, "corrupt shard checkpoint: {what}"),
            Self::Mismatch {
                what,
                expected,
                found,
            } => write!(
                f,
                "checkpoint of another table: {what} is {found}, this table's is {expected}"
            ),
            Self::State(e) => write!(f, "sparse optimizer state: {e}"),
            Self::NotEmpty => f.write_str("restore into a table that already holds rows"),
            Self::RowState(e) => write!(f, "sparse optimizer row state: {e}"),
            Self::Precision { table, checkpoint } => write!(
                f,
                "checkpoint rows are {checkpoint}, this table's are {table}: \
                 restore into a table of the checkpoint's row precision"
            ),
        }
    }
}

impl core::error::Error for ShardError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Comm(e) => Some(e),
            Self::Checkpoint(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CommError> for ShardError {
    fn from(e: CommError) -> Self {
        Self::Comm(e)
    }
}
