//! Checkpoints of a row-sharded run (`--shard rows --checkpoint PATH`):
//! each rank writes its own file `PATH.rankR` after every epoch, with the
//! existing container (`crate::checkpoint`: atomic temp-file → fsync →
//! rename, CRC-32 per file): its table's `basis_shard::TableSnapshot` (rows
//! at `--row-precision`, ids, the sparse optimizer's state by slot, the
//! admission and eviction state), the replicated dense parameters and the dense
//! optimizer's whole state (1-bit Adam's error-feedback buffers and stage
//! included), the data-order RNG, the metric history, and a fingerprint of
//! the options **with `P` and the rank**.
//!
//! Every rank's verdict is agreed collectively ([`agree_ok`]): when one
//! rank's file is missing, corrupt, of another rank, or the files are of
//! different epochs, every rank fails with the same message naming that
//! rank — nobody waits for a rank that gave up.
//!
//! Files of another group size `P` (every other option equal) are
//! resharded ([`restore_resharded`]): each of the `P'` ranks reads the `P`
//! files one at a time and takes the rows it now owns, with their optimizer
//! row state and, under one-choice BASIS, their buckets
//! (`ShardedTable::restore_resharded`); the replicated parts (dense
//! parameters and optimizer, data order, history) come from rank 0's file.
//! 1-bit Adam's error-feedback buffers are per rank: once its compressed
//! stage has begun they cannot move exactly, and such a resume is refused.

use super::Rank;
use crate::checkpoint::{self, Checkpoint, CheckpointError};
use crate::data::Dataset;
use crate::dense_opt::DenseOptimizer;
use crate::optim;
use crate::rng::Rng;
use crate::run::{Progress, Run};
use basis_shard::ShardError;
use basis_shard::rank_path;
use comm_traits::Communicator;
use core::cell::RefCell;
use std::path::Path;

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
    dense_opt: &DenseOptimizer,
    progress: &Progress,
) -> Result<(), String> {
    let (fingerprint, options) = fingerprint(opts, p, rank);
    let c = Checkpoint {
        fingerprint,
        epoch: progress.epoch,
        rng_state: progress.rng.state(),
        nonfinite: progress.nonfinite,
        table: Vec::new(),
        dense: me.model.dense.clone(),
        dense_opt: dense_opt.export_state(),
        optimizer: Vec::new(),
        history: serde_json::to_string(&progress.curve).map_err(|e| e.to_string())?,
        options,
        shard: Some(me.table.snapshot()),
    };
    checkpoint::save(&rank_path(base, rank), &c).map_err(|e| e.to_string())
}

/// Read this rank's file into `me` and `dense_opt`, or, when the files
/// are of another group size `P` (found in rank 0's file), reshard them
/// ([`restore_resharded`]). Returns the progress and the files' `P`. On
/// error `me` and `dense_opt` may be half restored (the run then fails on
/// every rank).
pub(super) fn restore(
    base: &Path,
    (rank, p): (usize, usize),
    opts: &[(&'static str, u64)],
    (ds, run): (&Dataset, &Run<'_>),
    me: &mut Rank,
    dense_opt: &mut DenseOptimizer,
) -> Result<(Progress, usize), String> {
    let path = rank_path(base, rank);
    let (fp, options) = fingerprint(opts, p, rank);
    let c = match checkpoint::load(&path, fp, &options) {
        Ok(c) => c,
        Err(e) => {
            // Only on failure: is rank 0's file of another group size
            // (every option before `--workers` equal)?
            return match group_size_of(base, opts, p) {
                Some(p_old) => {
                    let at = (rank, p, p_old);
                    restore_resharded(base, at, opts, (ds, run), me, dense_opt)
                        .map(|progress| (progress, p_old))
                }
                None => Err(readable(e).to_string()),
            };
        }
    };
    restore_own(&path, c, me, dense_opt).map(|progress| (progress, p))
}

/// `e` with the differing option's values as a user writes them: the
/// fingerprint's lines keep floats as their bits and `--dense-warmup` as
/// its code (`super::options`), which would tell a user resuming a file
/// of another `--dense-lr` or warm-up nothing.
fn readable(e: CheckpointError) -> CheckpointError {
    let CheckpointError::Mismatch {
        path,
        differs: Some((option, theirs, ours)),
    } = e
    else {
        return e;
    };
    let shown = |value: String| {
        let bits = value.parse::<u64>().ok();
        let float = || bits.and_then(|b| u32::try_from(b).ok()).map(f32::from_bits);
        match option.as_str() {
            "learning rate" | "--init-std" | "--l2" | "--dense-lr" => {
                float().map(|x| x.to_string())
            }
            "--dense-warmup" => bits.map(|b| crate::deep::DenseWarmup::from_bits(b).to_string()),
            // Listed only for bf16 (`super::options`): unlisted is f32.
            "--dense-warmup-reduce" if bits == Some(1) => Some("bf16".to_string()),
            "--dense-warmup-reduce" if value.is_empty() => Some("f32".to_string()),
            _ => None,
        }
        .unwrap_or(value)
    };
    let (theirs, ours) = (shown(theirs), shown(ours));
    CheckpointError::Mismatch {
        path,
        differs: Some((option, theirs, ours)),
    }
}

/// The group size rank 0's file was written with, when it is not `p` and
/// every option the file records before `--workers` equals this run's.
fn group_size_of(base: &Path, opts: &[(&'static str, u64)], p: usize) -> Option<usize> {
    let (fp, options) = fingerprint(opts, p, 0);
    match checkpoint::load(&rank_path(base, 0), fp, &options) {
        Err(CheckpointError::Mismatch {
            differs: Some((option, theirs, _)),
            ..
        }) if option == "--workers" => theirs.parse().ok().filter(|&q| q >= 1 && q != p),
        _ => None,
    }
}

/// Rank `rank` of `p` takes its rows from the `p_old` files of a run with
/// the same options on `p_old` ranks (`ShardedTable::restore_resharded`,
/// one file at a time); the replicated parts come from rank 0's file.
fn restore_resharded(
    base: &Path,
    (rank, p, p_old): (usize, usize, usize),
    opts: &[(&'static str, u64)],
    (ds, run): (&Dataset, &Run<'_>),
    me: &mut Rank,
    dense_opt: &mut DenseOptimizer,
) -> Result<Progress, String> {
    let m = run.model;
    let old_owner = optim::owner_rule(run.spec, ds.rows, p_old, m.seed)?;
    let d = me.table.dim();
    // Why a file failed (the table sees only a placeholder error), and rank
    // 0's file without its table, with its dense optimizer state.
    let failure: RefCell<Option<String>> = RefCell::new(None);
    let mut first: Option<(Checkpoint, Vec<u8>)> = None;
    // Rows skipped as non-finite are counted per rank: new rank 0 carries
    // the old ranks' sum, so the total over ranks stays.
    let mut nonfinite = 0u64;
    let fail = |msg: String| {
        failure.borrow_mut().get_or_insert(msg);
        ShardError::Corrupt("a checkpoint file of the old group was refused")
    };
    let files = (0..p_old).map(|r| {
        let path = rank_path(base, r);
        let (fp, options) = fingerprint(opts, p_old, r);
        let mut c = checkpoint::load(&path, fp, &options).map_err(|e| fail(e.to_string()))?;
        let table = c.shard.take().ok_or_else(|| {
            fail(format!(
                "checkpoint {}: not a sharded run's file",
                path.display()
            ))
        })?;
        if let Some((f, _)) = first.as_ref().filter(|(f, _)| f.epoch != c.epoch) {
            return Err(fail(format!(
                "resharding {p_old} ranks' checkpoints: the files are of different epochs (rank 0 has epoch {}, rank {r} has epoch {}): a run stopped while saving; start afresh",
                f.epoch, c.epoch
            )));
        }
        nonfinite += c.nonfinite;
        if r == 0 {
            let dense_opt = core::mem::take(&mut c.dense_opt);
            first = Some((c, dense_opt));
        }
        Ok(table)
    });
    let old_optimizer =
        |r: usize| optim::build_shard(run.spec, ds.rows, (r, &old_owner), d, m.seed).map_err(&fail);
    let moved = me.table.restore_resharded(&old_owner, files, old_optimizer);
    let at = |e: &dyn core::fmt::Display| {
        format!(
            "resharding the {p_old} ranks' checkpoints {} into {p} ranks (rank {rank}): {e}",
            base.display()
        )
    };
    if let Err(e) = moved {
        return Err(failure.into_inner().unwrap_or_else(|| at(&e)));
    }
    let (c, rank0_dense_opt) = first.ok_or_else(|| at(&"no rank 0 file"))?;
    if c.dense.len() != me.model.dense.len() {
        return Err(at(&format_args!("dense parameters: {}", c.dense.len())));
    }
    dense_opt
        .import_state(&rank0_dense_opt)
        .map_err(|e| at(&format_args!("dense optimizer state: {e}")))?;
    // Rank 0's dense optimizer state is every rank's (replicated) unless
    // 1-bit compression has run: then its error feedback is per rank.
    dense_opt.unbind().map_err(|e| {
        at(&format_args!(
            "dense optimizer: {e} (resume with --workers {p_old}, or train with --dense-opt adam)"
        ))
    })?;
    me.model.dense = c.dense;
    Ok(Progress {
        epoch: c.epoch,
        rng: Rng::new(c.rng_state),
        nonfinite: if rank == 0 { nonfinite } else { 0 },
        curve: serde_json::from_str(&c.history).map_err(|e| at(&format_args!("history: {e}")))?,
    })
}

/// Read this rank's own file `c` (at `path`) into `me` and `dense_opt`.
fn restore_own(
    path: &Path,
    c: Checkpoint,
    me: &mut Rank,
    dense_opt: &mut DenseOptimizer,
) -> Result<Progress, String> {
    let at = |what: &str, e: &dyn core::fmt::Display| {
        format!("checkpoint {}: {what}: {e}", path.display())
    };
    let table = c.shard.ok_or_else(|| {
        at(
            "not a sharded run's file",
            &"no `shard_ids` section (written by the single-process trainer?)",
        )
    })?;
    if c.dense.len() != me.model.dense.len() {
        return Err(at("dense parameters", &c.dense.len()));
    }
    // The table checks the snapshot's rank, group, owner rule, dimension,
    // precision and rounding seed; the fingerprint (checked by `load`) the
    // options.
    me.table
        .restore_snapshot(table)
        .map_err(|e| at("shard", &e))?;
    dense_opt
        .import_state(&c.dense_opt)
        .map_err(|e| at("dense optimizer state", &e))?;
    me.model.dense = c.dense;
    Ok(Progress {
        epoch: c.epoch,
        rng: Rng::new(c.rng_state),
        nonfinite: c.nonfinite,
        curve: serde_json::from_str(&c.history).map_err(|e| at("history", &e))?,
    })
}

/// Every rank's `local` verdict (an epoch, or why not), agreed
/// collectively (`basis_shard::agree_outcome`): every rank gets the same
/// answer — the first failing rank's message, or an error when the epochs
/// differ, or the common epoch.
pub(super) fn agree_ok(
    comm: &mut dyn Communicator,
    what: &str,
    local: Result<u32, String>,
) -> Result<u64, String> {
    let local = local
        .as_ref()
        .map(|&e| u64::from(e))
        .map_err(String::as_str);
    basis_shard::agree_outcome(comm, "epoch", local).map_err(|e| format!("{what} {e}"))
}
