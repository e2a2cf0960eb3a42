//! Resharding: restoring the checkpoints of a `P`-rank table into a table
//! of `P' ≠ P` ranks (or under another owner rule). Each new rank reads the
//! old ranks' snapshots one at a time and takes the rows its owner rule now
//! gives it, with their optimizer row state
//! (`SparseOptimizer::{export_rows, import_rows}`), last-seen steps and the
//! step counter. Under [`OwnerRule::buckets`] on both sides (one-choice
//! BASIS), global bucket `g` lives on old rank `g mod P` as local bucket
//! `g / P` and moves to new rank `g mod P'` as local bucket `g / P'`
//! (`SparseOptimizer::{export_buckets, import_buckets}`): the new ranks hold
//! exactly the single process's bucket state, partitioned anew. The
//! admission sketches of the old ranks are added (a count-min sketch of the
//! union of their streams; counts only grow, so no id loses admission).
//!
//! The moved state continues bit for bit: a sharded table equals the single
//! process at every group size, so a run resharded from `P` to `P'` goes on
//! exactly as a `P'`-rank run of the same steps.
//!
//! [`OwnerRule::buckets`]: crate::OwnerRule::buckets

use alloc::vec::Vec;
use balanced_hash::Bucketer;
use basis_core::SparseOptimizer;
use basis_std::checkpoint as file;
use std::path::Path;

use crate::snapshot::TableSnapshot;
use crate::{OwnerRule, ShardError, ShardedTable};

impl<O: SparseOptimizer> ShardedTable<O> {
    /// Fill this empty table (any group size, any owner rule) from the
    /// snapshots of every rank of a table under `old_owner`, given in rank
    /// order (read one at a time). `old_optimizer(r)` builds an optimizer
    /// like old rank `r`'s (same kind and configuration; for BASIS under
    /// [`OwnerRule::buckets`], over `old_owner.partition(r)`): the old
    /// state is read into it, and the rows this rank now owns (and their
    /// buckets) move from it into this table's optimizer.
    ///
    /// # Errors
    /// [`ShardError::NotEmpty`]; [`ShardError::Mismatch`] for a snapshot of
    /// another rank position, group size, owner rule, dimension, admission
    /// rule, eviction setting, or step than the others;
    /// [`ShardError::BadConfig`] for shared bucket state (BASIS) without a
    /// bucket partition on both sides (per-rank private buckets cannot be
    /// merged exactly); [`ShardError::Corrupt`] for an id held by two old
    /// ranks or malformed sections; [`ShardError::State`] /
    /// [`ShardError::RowState`] when an optimizer refuses the state;
    /// [`ShardError::OutOfMemory`] / [`ShardError::Grow`];
    /// [`ShardError::Precision`] (or a rounding-seed
    /// [`ShardError::Mismatch`]) for rows stored unlike this table's; the
    /// iterator's own errors. After an error the table holds part of the rows: drop
    /// it (the snapshots are only read).
    pub fn restore_resharded<I, F>(
        &mut self,
        old_owner: &OwnerRule,
        old: I,
        mut old_optimizer: F,
    ) -> Result<(), ShardError>
    where
        I: IntoIterator<Item = Result<TableSnapshot, ShardError>>,
        F: FnMut(usize) -> Result<O, ShardError>,
    {
        if !self.is_empty() {
            return Err(ShardError::NotEmpty);
        }
        let p_old = old_owner.ranks();
        let new_part = self.owner.partition(self.rank)?;
        let bucketed = self.opt.bucket_count() > 0;
        let mut step = None;
        let mut counters: Option<Vec<u8>> = None;
        let mut seen = 0usize;
        for (r, snap) in old.into_iter().enumerate() {
            let snap = snap?;
            let expect = [
                ("rank", r as u64, snap.rank),
                ("group size", p_old as u64, snap.ranks),
                ("row dimension", self.dim as u64, snap.dim),
                ("owner rule", old_owner.identity(), snap.owner),
                (
                    "admission rule",
                    self.admit.rule().identity(),
                    snap.admission,
                ),
                (
                    "eviction (on = 1)",
                    u64::from(self.eviction.is_some()),
                    u64::from(snap.eviction),
                ),
                ("step", *step.get_or_insert(snap.step), snap.step),
            ];
            for (what, expected, found) in expect {
                if expected != found {
                    return Err(ShardError::Mismatch {
                        what,
                        expected,
                        found,
                    });
                }
            }
            self.check_precision(&snap)?;
            self.take_rows(r, &snap, old_owner, &mut old_optimizer, bucketed, new_part)?;
            match &mut counters {
                None => counters = Some(snap.counters),
                Some(acc) => {
                    if acc.len() != snap.counters.len() {
                        return Err(ShardError::Corrupt(
                            "admission counters are not the sketch's size",
                        ));
                    }
                    for (a, &b) in acc.iter_mut().zip(&snap.counters) {
                        *a = a.saturating_add(b);
                    }
                }
            }
            seen += 1;
        }
        if seen != p_old {
            return Err(ShardError::Mismatch {
                what: "snapshots (one per old rank)",
                expected: p_old as u64,
                found: seen as u64,
            });
        }
        if let Some(c) = counters {
            self.admit.set_counters(c)?;
        }
        self.generation = step.unwrap_or(0);
        self.pending = None;
        Ok(())
    }

    /// The rows (and buckets) of old rank `r`'s snapshot that this rank
    /// owns now, appended with their state.
    fn take_rows<F>(
        &mut self,
        r: usize,
        snap: &TableSnapshot,
        old_owner: &OwnerRule,
        old_optimizer: &mut F,
        bucketed: bool,
        new_part: Option<crate::PartitionedBuckets>,
    ) -> Result<(), ShardError>
    where
        F: FnMut(usize) -> Result<O, ShardError>,
    {
        let d = self.dim;
        let n = snap.ids.len();
        if Some(snap.rows.len()) != n.checked_mul(d)
            || (self.eviction.is_some() && snap.last_seen.len() != n)
        {
            return Err(ShardError::Corrupt(
                "rows or last-seen steps are not one per id",
            ));
        }
        if snap.opt_rows != 0 && snap.opt_rows != n as u64 {
            return Err(ShardError::Corrupt("optimizer rows are not the row count"));
        }
        // Narrow rows move unchanged: widened exactly into the snapshot,
        // narrowed exactly back (a value the width cannot hold is refused).
        let p = self.rows.precision();
        if !snap.rows.iter().all(|&x| p.holds(x)) {
            return Err(ShardError::Corrupt(
                "a row value is not exact at the checkpoint's precision",
            ));
        }
        let mut from = old_optimizer(r)?;
        from.grow_rows(n as u64).map_err(ShardError::Grow)?;
        from.import_state(&snap.optimizer)
            .map_err(ShardError::State)?;
        let mine: Vec<usize> = (0..n)
            .filter(|&k| self.owner.owner(snap.ids[k]) == self.rank)
            .collect();
        let old_slots: Vec<u64> = mine.iter().map(|&k| k as u64).collect();
        // Exported even when empty: the blob also carries the step count
        // a fresh optimizer takes.
        let blob = from.export_rows(&old_slots).map_err(ShardError::RowState)?;
        let base = self.len();
        let total = base + mine.len();
        if total >= u32::MAX as usize {
            return Err(ShardError::OutOfMemory { rows: total });
        }
        self.index.try_reserve(mine.len())?;
        self.rows
            .try_reserve_exact(mine.len() * d)
            .map_err(|_| ShardError::OutOfMemory { rows: total })?;
        if total as u64 > self.opt_rows {
            self.opt.grow_rows(total as u64).map_err(ShardError::Grow)?;
            self.opt_rows = total as u64;
        }
        let new_slots: Vec<u64> = (base..total).map(|s| s as u64).collect();
        self.opt
            .import_rows(&new_slots, &blob)
            .map_err(ShardError::RowState)?;
        for &k in &mine {
            if !self.index.insert_new(snap.ids[k])? {
                return Err(ShardError::Corrupt("an id is held by two old ranks"));
            }
            self.rows.push(&snap.rows[k * d..(k + 1) * d]);
            if self.eviction.is_some() {
                self.last_seen.push(snap.last_seen[k]);
            }
        }
        if bucketed {
            let (Some(new), true) = (new_part, old_owner.partition(r)?.is_some()) else {
                return Err(ShardError::BadConfig(
                    "resharding shared bucket state needs OwnerRule::buckets on both sides",
                ));
            };
            let (b, p_new, p_old) = (
                new.global().buckets() as usize,
                self.owner.ranks(),
                old_owner.ranks(),
            );
            // Global buckets of this rank now that lived on old rank `r`.
            let (mut olds, mut news) = (Vec::new(), Vec::new());
            for g in (self.rank..b).step_by(p_new) {
                if g % p_old == r {
                    olds.push((g / p_old) as u32);
                    news.push((g / p_new) as u32);
                }
            }
            let blob = from.export_buckets(&olds).map_err(ShardError::RowState)?;
            self.opt
                .import_buckets(&news, &blob)
                .map_err(ShardError::RowState)?;
        }
        Ok(())
    }

    /// [`restore_resharded`](Self::restore_resharded) from the per-rank
    /// checkpoint files of a `old_owner.ranks()`-rank run at
    /// [`rank_path`](crate::rank_path)`(base, r)`, read one at a time.
    ///
    /// # Errors
    /// [`ShardError::Checkpoint`] for I/O or a damaged file, then what
    /// [`restore_resharded`](Self::restore_resharded) returns.
    pub fn restore_resharded_files<F>(
        &mut self,
        base: &Path,
        old_owner: &OwnerRule,
        old_optimizer: F,
    ) -> Result<(), ShardError>
    where
        F: FnMut(usize) -> Result<O, ShardError>,
    {
        let files = (0..old_owner.ranks()).map(|r| {
            let c = file::load(&crate::rank_path(base, r)).map_err(ShardError::Checkpoint)?;
            TableSnapshot::from_checkpoint(&c)
        });
        self.restore_resharded(old_owner, files, old_optimizer)
    }

    /// Row `id`'s optimizer state as `SparseOptimizer::export_rows` gives
    /// it (`None` when this rank holds no row `id`): to check that a moved
    /// row carries its state.
    ///
    /// # Errors
    /// [`ShardError::RowState`] when the optimizer cannot export rows.
    pub fn row_state(&self, id: u64) -> Result<Option<Vec<u8>>, ShardError> {
        let Some(slot) = self.index.get(id) else {
            return Ok(None);
        };
        self.opt
            .export_rows(&[u64::from(slot)])
            .map(Some)
            .map_err(ShardError::RowState)
    }
}
