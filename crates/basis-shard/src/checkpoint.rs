//! Per-rank checkpoint files of a sharded table: its [`TableSnapshot`] in
//! a `basis-std` checkpoint file (atomic write, CRC-32 over the whole
//! file), one file per rank.

use basis_core::SparseOptimizer;
use basis_std::checkpoint as file;
use std::path::Path;

use crate::snapshot::TableSnapshot;
use crate::{ShardError, ShardedTable};

impl<O: SparseOptimizer> ShardedTable<O> {
    /// Write this rank's checkpoint to `path` (atomic: the old file or the
    /// new one, never a mix; checksummed). Local: each rank writes its own
    /// file (see [`rank_path`]); agreeing that every rank saved is the
    /// caller's (a run stopped while saving leaves files of two steps,
    /// which [`restore`](Self::restore) tells apart only by their contents).
    ///
    /// # Errors
    /// [`ShardError::Checkpoint`] for an I/O failure.
    pub fn checkpoint(&self, path: &Path) -> Result<(), ShardError> {
        file::save(path, &self.snapshot().to_checkpoint()).map_err(ShardError::Checkpoint)
    }

    /// Read this rank's checkpoint from `path` into this empty table.
    ///
    /// # Errors
    /// [`ShardError::Checkpoint`] for I/O or a damaged container (checksum,
    /// truncation), [`ShardError::Corrupt`] for malformed sections, then
    /// what [`restore_snapshot`](Self::restore_snapshot) returns (a file of
    /// another rank, group, dimension or owner rule: [`ShardError::Mismatch`]).
    pub fn restore(&mut self, path: &Path) -> Result<(), ShardError> {
        let c = file::load(path).map_err(ShardError::Checkpoint)?;
        self.restore_snapshot(TableSnapshot::from_checkpoint(&c)?)
    }
}

/// `base` with `.rank{rank}` appended: one file per rank beside each other.
pub fn rank_path(base: &Path, rank: usize) -> std::path::PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(alloc::format!(".rank{rank}"));
    s.into()
}
