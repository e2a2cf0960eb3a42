//! Checkpoints of a row-sharded run (`--shard rows --checkpoint PATH`):
//! each rank writes its own file `PATH.rankR` after every epoch, with the
//! existing container (`crate::checkpoint`: atomic temp-file → fsync →
//! rename, CRC-32 per file): its shard's rows and slot → id list, the sparse
//! optimizer's state by slot, the replicated dense parameters and the dense
//! optimizer's whole state (1-bit Adam's error-feedback buffers and stage
//! included), the data-order RNG, the metric history, and a fingerprint of
//! the options **with `P` and the rank**.
//!
//! Every rank's verdict is agreed collectively ([`agree_ok`]): when one
//! rank's file is missing, corrupt, of another `P` or of another rank, or
//! the files are of different epochs, every rank fails with the same
//! message naming that rank — nobody waits for a rank that gave up.

use super::Rank;
use crate::checkpoint::{self, Checkpoint, ShardSections};
use crate::rng::Rng;
use crate::run::Progress;
use basis_shard::TableSnapshot;
use comm_traits::Communicator;
use onebit_adam::OneBitAdam;
use std::path::{Path, PathBuf};

/// The file of `rank` for `--checkpoint base`.
pub(super) fn rank_path(base: &Path, rank: usize) -> PathBuf {
    basis_shard::rank_path(base, rank)
}

/// `(fingerprint, option=value lines)` of a rank's file: the options every
/// rank agrees on (not `--epochs`: a run may be resumed to train longer, as
/// the single-process trainer allows), then `P` and the rank.
fn fingerprint(opts: &[(&'static str, u64)], p: usize, rank: usize) -> (u64, String) {
    let lines: Vec<String> = opts
        .iter()
        .filter(|(k, _)| *k != "--epochs")
        .map(|(k, v)| format!("{k}={v}"))
        .chain([format!("--workers={p}"), format!("rank={rank}")])
        .collect();
    let text = lines.join("\n");
    let fp = balanced_hash::murmur3::x64_128(text.as_bytes(), 0x5AAD)[0];
    (fp, text)
}

/// Write this rank's file for `progress`.
pub(super) fn save(
    base: &Path,
    (rank, p): (usize, usize),
    opts: &[(&'static str, u64)],
    me: &Rank,
    dense_opt: &OneBitAdam,
    progress: &Progress,
) -> Result<(), String> {
    let (fingerprint, options) = fingerprint(opts, p, rank);
    let TableSnapshot {
        ids,
        rows,
        optimizer,
        ..
    } = me.table.snapshot();
    let c = Checkpoint {
        fingerprint,
        epoch: progress.epoch,
        rng_state: progress.rng.state(),
        nonfinite: progress.nonfinite,
        table: rows,
        dense: me.model.dense.clone(),
        dense_m: Vec::new(),
        dense_v: Vec::new(),
        dense_t: 0,
        optimizer,
        history: serde_json::to_string(&progress.curve).map_err(|e| e.to_string())?,
        options,
        shard: Some(ShardSections {
            ids,
            dense_opt: dense_opt.export_state(),
        }),
    };
    checkpoint::save(&rank_path(base, rank), &c).map_err(|e| e.to_string())
}

/// Read this rank's file into `me` and `dense_opt`; on error they may be
/// half restored (the run then fails on every rank).
pub(super) fn restore(
    base: &Path,
    (rank, p): (usize, usize),
    opts: &[(&'static str, u64)],
    me: &mut Rank,
    dense_opt: &mut OneBitAdam,
) -> Result<Progress, String> {
    let path = rank_path(base, rank);
    let (fp, options) = fingerprint(opts, p, rank);
    let c = checkpoint::load(&path, fp, &options).map_err(|e| e.to_string())?;
    let at = |what: &str, e: &dyn core::fmt::Display| {
        format!("checkpoint {}: {what}: {e}", path.display())
    };
    let sh = c.shard.ok_or_else(|| {
        at(
            "not a sharded run's file",
            &"no `shard_ids` section (written by the single-process trainer?)",
        )
    })?;
    if c.dense.len() != me.model.dense.len() {
        return Err(at("dense parameters", &c.dense.len()));
    }
    // The file's fingerprint (checked by `load`) covers P, the rank and
    // every option the owner rule and the rows depend on.
    let t = &me.table;
    let snapshot = TableSnapshot {
        rank: t.rank() as u64,
        ranks: t.owner().ranks() as u64,
        dim: t.dim() as u64,
        owner: t.owner().identity(),
        ids: sh.ids,
        rows: c.table,
        optimizer: c.optimizer,
        ..TableSnapshot::default()
    };
    me.table
        .restore_snapshot(snapshot)
        .map_err(|e| at("shard", &e))?;
    dense_opt
        .import_state(&sh.dense_opt)
        .map_err(|e| at("dense optimizer state", &e))?;
    me.model.dense = c.dense;
    Ok(Progress {
        epoch: c.epoch,
        rng: Rng::new(c.rng_state),
        nonfinite: c.nonfinite,
        curve: serde_json::from_str(&c.history).map_err(|e| at("history", &e))?,
    })
}

/// Bytes of a message in [`agree_ok`]'s record.
const MESSAGE: usize = 500;

/// Every rank's `local` verdict (an epoch, or why not), all-gathered: every
/// rank gets the same answer — the first failing rank's message, or an
/// error when the epochs differ, or the common epoch.
pub(super) fn agree_ok(
    comm: &mut dyn Communicator,
    what: &str,
    local: Result<u32, String>,
) -> Result<u32, String> {
    let (rank, p) = (comm.rank(), comm.size());
    let mut mine = vec![0u8; 7 + MESSAGE];
    match &local {
        Ok(epoch) => {
            mine[0] = 1;
            mine[1..5].copy_from_slice(&epoch.to_le_bytes());
        }
        Err(e) => {
            // Cut at a char boundary so every rank decodes the same text.
            let mut end = e.len().min(MESSAGE);
            while !e.is_char_boundary(end) {
                end -= 1;
            }
            mine[5..7].copy_from_slice(&(end as u16).to_le_bytes());
            mine[7..7 + end].copy_from_slice(&e.as_bytes()[..end]);
        }
    }
    let mut all = vec![0u8; mine.len() * p];
    comm.all_gather(&mine, &mut all)
        .map_err(|e| format!("rank {rank}: agreeing on the {what}: {e}"))?;
    let records: Vec<&[u8]> = all.chunks_exact(mine.len()).collect();
    let epoch_of = |r: &[u8]| u32::from_le_bytes([r[1], r[2], r[3], r[4]]);
    if let Some((r, rec)) = records.iter().enumerate().find(|(_, r)| r[0] != 1) {
        let n = usize::from(u16::from_le_bytes([rec[5], rec[6]])).min(MESSAGE);
        let msg = String::from_utf8_lossy(&rec[7..7 + n]);
        return Err(format!("{what} failed on rank {r}: {msg}"));
    }
    let e0 = epoch_of(records[0]);
    if let Some(r) = (1..p).find(|&r| epoch_of(records[r]) != e0) {
        return Err(format!(
            "{what}: the ranks' checkpoints are of different epochs (rank 0 has epoch {e0}, rank {r} has epoch {}): a run stopped while saving; start afresh",
            epoch_of(records[r])
        ));
    }
    Ok(e0)
}
