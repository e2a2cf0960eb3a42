//! The training loop: mini-batch FM training with one sparse optimizer,
//! per-epoch evaluation, checkpoints, and the result record.

use crate::checkpoint::{self, Checkpoint};
use crate::cli::ModelArgs;
use crate::data::Dataset;
use crate::deep::{DeepFm, Dlrm, Tower};
use crate::metrics::{auc, log_loss};
use crate::model::{DenseAdam, Fm, Grads};
use crate::optim::{self, Telemetry};
use crate::rng::Rng;
use crate::spec::OptSpec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Metrics after one epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EpochPoint {
    /// Epochs completed.
    pub(crate) epoch: u32,
    /// Mean training log-loss over the epoch.
    pub(crate) train_loss: f64,
    /// Validation AUC (NaN-free: 0.5 when the split is empty).
    pub(crate) valid_auc: f64,
    /// Validation log-loss.
    pub(crate) valid_loss: f64,
    /// Test AUC.
    pub(crate) test_auc: f64,
    /// Test log-loss.
    pub(crate) test_loss: f64,
}

/// Optimizer-state memory, broken down (bytes).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Memory {
    /// Total optimizer state (everything `memory()` reports but the scratch buffers).
    pub(crate) total: usize,
    /// The part that does not grow with the rows (`MemoryReport::fixed_bytes`:
    /// shared tables, step counts, owned code tables).
    pub(crate) fixed: usize,
    /// The part that grows with the rows (`MemoryReport::per_row_bytes`).
    pub(crate) growing: usize,
    /// Shared bucket tables.
    pub(crate) shared_tables: usize,
    /// Per-bucket step counts.
    pub(crate) step_counts: usize,
    /// Per-row values (scalars, moments, accumulators).
    pub(crate) per_row: usize,
    /// Per-row counters.
    pub(crate) row_counters: usize,
    /// Id → slot index.
    pub(crate) row_index: usize,
    /// Remembered hash choices.
    pub(crate) bucket_map: usize,
    /// Step buffers the optimizer keeps between steps (`O(batch·d)`, not
    /// per-row state; excluded from `total`).
    pub(crate) scratch: usize,
}

/// The outcome of one training run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunResult {
    /// Optimizer spec as given.
    pub(crate) optimizer: String,
    /// Learning rate used.
    pub(crate) lr: f32,
    /// Seed.
    pub(crate) seed: u64,
    /// Table rows (for a stream, the estimated vocabulary; a sharded run's
    /// rows held are `sharded.rows`).
    pub(crate) rows: usize,
    /// Row dimension (k + 1).
    pub(crate) row_dim: usize,
    /// Final metrics (last epoch).
    pub(crate) final_metrics: EpochPoint,
    /// Per-epoch metrics.
    pub(crate) curve: Vec<EpochPoint>,
    /// Optimizer-state bytes (sharded: rank 0's optimizer).
    pub(crate) memory: Memory,
    /// `memory.total / rows` (sharded: all ranks' state over the rows held).
    pub(crate) bytes_per_row: f64,
    /// Exact Adam's state for the same table (`rows · d · 8`) over ours
    /// (sharded: for the rows held, over all ranks' state).
    pub(crate) compression_vs_adam: f64,
    /// Wall-clock seconds of training and evaluation (this process only).
    pub(crate) wall_secs: f64,
    /// Rows skipped as non-finite.
    pub(crate) nonfinite_rows: u64,
    /// BASIS telemetry.
    pub(crate) telemetry: Option<Telemetry>,
    /// Bytes sent per rank by the data-parallel collectives (`--workers`).
    pub(crate) comm_bytes: Option<u64>,
    /// Of those, the sparse row exchange.
    pub(crate) comm_sparse_bytes: Option<u64>,
    /// Of those, the dense optimizer's collectives (`--dense-opt`).
    pub(crate) comm_dense_bytes: Option<u64>,
    /// Dense parameters (1 for the FM's bias; with a tower, `1 + MLP`).
    pub(crate) dense_params: usize,
    /// CRC-32 of the final model table and dense parameters (equal iff bit-identical).
    pub(crate) model_crc32: u32,
    /// Per-rank figures of a row-sharded run (`--shard rows`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sharded: Option<crate::shard::ShardReport>,
}

/// A run: optimizer, model options, checkpoint file.
#[derive(Debug, Clone)]
pub(crate) struct Run<'a> {
    /// Optimizer.
    pub(crate) spec: &'a OptSpec,
    /// Model / loop options (the seed is `model.seed`).
    pub(crate) model: &'a ModelArgs,
    /// Checkpoint file (saved after every epoch).
    pub(crate) checkpoint: Option<PathBuf>,
    /// Continue from the checkpoint.
    pub(crate) resume: bool,
    /// Progress bars.
    pub(crate) progress: bool,
}

/// Metrics of `fm` on the validation and test splits.
pub(crate) fn evaluate(fm: &Fm, ds: &Dataset, epoch: u32, train_loss: f64) -> EpochPoint {
    let metrics = |ex: &crate::data::Examples| {
        if ex.len() == 0 {
            return (0.5, 0.0);
        }
        let z = fm.predict(ex);
        (auc(&z, &ex.labels).unwrap_or(0.5), log_loss(&z, &ex.labels))
    };
    let (valid_auc, valid_loss) = metrics(&ds.valid);
    let (test_auc, test_loss) = metrics(&ds.test);
    EpochPoint {
        epoch,
        train_loss,
        valid_auc,
        valid_loss,
        test_auc,
        test_loss,
    }
}

/// Everything that determines a run except the epoch count, as
/// `option=value` lines (what a refused `--resume` names), and its
/// fingerprint. The fingerprint hashes the values joined by `|` in this
/// order, as before the lines were stored, so older checkpoints still match.
fn fingerprint(ds: &Dataset, run: &Run<'_>) -> (u64, String) {
    let m = run.model;
    let pairs: [(&str, String); 11] = [
        ("data", ds.name.clone()),
        ("table rows", ds.rows.to_string()),
        ("training examples", ds.train.len().to_string()),
        ("--opt", run.spec.label.clone()),
        ("learning rate", run.spec.lr().to_string()),
        ("--batch", m.batch.to_string()),
        ("--dim", m.dim.to_string()),
        ("--init-std", m.init_std.to_string()),
        ("--l2", m.l2.to_string()),
        ("--dense-lr", m.dense_lr.to_string()),
        ("--seed", m.seed.to_string()),
    ];
    let mut pairs: Vec<(&str, String)> = pairs.into();
    // FM runs keep their old fingerprint (existing checkpoints stay valid).
    match m.model {
        crate::deep::ModelKind::Fm => {}
        crate::deep::ModelKind::Deepfm => {
            pairs.push(("--model", "Deepfm".into()));
            pairs.push(("--mlp", format!("{:?}", m.mlp)));
        }
        kind => {
            pairs.push(("--model", format!("{kind:?}")));
            pairs.push(("--mlp", format!("{:?}", m.mlp)));
            pairs.push(("--bottom-mlp", format!("{:?}", m.bottom_mlp)));
        }
    }
    let text: Vec<&str> = pairs.iter().map(|(_, v)| v.as_str()).collect();
    let lines: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    (
        balanced_hash::murmur3::x64_128(text.join("|").as_bytes(), 0)[0],
        lines.join("\n"),
    )
}

/// The model `run` asks for, initialised from its seed.
///
/// Fails on a bad `--mlp` or a tower that cannot be allocated.
pub(crate) fn build_model(ds: &Dataset, m: &ModelArgs) -> Result<Fm, String> {
    let fm = Fm::new(ds.rows, m.dim, m.init_std, m.seed)?;
    match build_tower(ds, m)? {
        None => Ok(fm),
        Some(tower) => fm.with_tower(tower, m.seed),
    }
}

/// The dense tower `m` asks for (`None` for the plain FM), without a table
/// (a row-sharded trainer holds only its shard).
///
/// Fails on a bad `--mlp`.
pub(crate) fn build_tower(ds: &Dataset, m: &ModelArgs) -> Result<Option<Tower>, String> {
    match m.model {
        crate::deep::ModelKind::Fm => Ok(None),
        kind => {
            let fields = [&ds.train, &ds.valid, &ds.test]
                .iter()
                .map(|e| e.field_count())
                .max()
                .unwrap_or(1);
            Ok(Some(if kind == crate::deep::ModelKind::Dlrm {
                let w = ds.train.dense_width;
                Tower::Dlrm(Dlrm::new(m.dim, fields, w, &m.bottom_mlp, &m.mlp)?)
            } else {
                Tower::DeepFm(DeepFm::new(m.dim, fields, &m.mlp)?)
            }))
        }
    }
}

fn model_crc(fm: &Fm) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for x in fm.table.iter().chain(&fm.dense) {
        h.update(&x.to_le_bytes());
    }
    h.finalize()
}

/// Train `run.spec` on `ds` for `run.model.epochs` epochs.
///
/// Fails with a message when the optimizer cannot be built, a step fails,
/// or a checkpoint cannot be written or does not match this run.
pub(crate) fn train(ds: &Dataset, run: &Run<'_>) -> Result<RunResult, String> {
    let m = run.model;
    if m.dim == 0 || m.batch == 0 {
        return Err("--dim and --batch must be >= 1".into());
    }
    if m.shard.is_some() {
        return crate::shard::train(ds, run);
    }
    if ds.stream.is_some() {
        return Err("--stream needs --shard rows (only the sharded trainer reads a stream)".into());
    }
    if m.workers > 1 {
        return crate::parallel::train(ds, run);
    }
    if let Some(path) = &run.checkpoint {
        // A run killed while saving leaves its temp file behind; clean up
        // before this run writes (or resumes) in the same directory.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        let removed = checkpoint::remove_stale_temp_files(dir).map_err(|e| e.to_string())?;
        if removed > 0 {
            eprintln!(
                "removed {removed} stale checkpoint temp file(s) from {} (left by an interrupted run)",
                dir.display()
            );
        }
    }
    let start = Instant::now();
    let mut fm = build_model(ds, m)?;
    let d = fm.dim();
    let mut opt = optim::build(run.spec, ds.rows, d, m.seed)?;
    let mut dense_opt = DenseAdam::new(fm.dense.len(), m.dense_lr);
    let mut rng = Rng::derive(m.seed, 0x0DE5);
    let mut curve: Vec<EpochPoint> = Vec::new();
    let mut nonfinite = 0u64;
    let mut epoch0 = 0;
    let (fp, options) = fingerprint(ds, run);
    if let (true, Some(path)) = (run.resume, &run.checkpoint) {
        let c = checkpoint::load(path, fp, &options).map_err(|e| e.to_string())?;
        if c.table.len() != fm.table.len() || c.dense.len() != fm.dense.len() {
            let e = checkpoint::CheckpointError::Mismatch {
                path: path.clone(),
                differs: None,
            };
            return Err(e.to_string());
        }
        fm.table = c.table;
        fm.dense = c.dense;
        dense_opt.m = c.dense_m;
        dense_opt.v = c.dense_v;
        dense_opt.t = c.dense_t;
        opt.import_state(&c.optimizer)
            .map_err(|e| format!("checkpoint {}: optimizer state: {e}", path.display()))?;
        rng = Rng::new(c.rng_state);
        nonfinite = c.nonfinite;
        curve = serde_json::from_str(&c.history).map_err(|e| format!("checkpoint history: {e}"))?;
        epoch0 = c.epoch;
    }
    let n = ds.train.len();
    let mut grads = Grads::new(&fm, ds.rows);
    let mut order: Vec<usize> = (0..n).collect();
    let batches = n.div_ceil(m.batch);
    for epoch in epoch0..m.epochs {
        let bar = crate::progress::count(
            batches as u64,
            &format!("{} epoch {}/{}", run.spec.label, epoch + 1, m.epochs),
            run.progress,
        );
        for (i, o) in order.iter_mut().enumerate() {
            *o = i;
        }
        rng.shuffle(&mut order);
        let mut loss_sum = 0.0;
        for (step, batch) in order.chunks(m.batch).enumerate() {
            grads.compute(&fm, &ds.train, batch, m.l2)?;
            loss_sum += grads.loss;
            crate::validate::finite_loss(grads.loss, epoch + 1, step + 1, &run.spec.label)?;
            let rep = opt.step(&grads.ids, &grads.rows, &mut fm.table, d)?;
            nonfinite += rep.rows_skipped_nonfinite as u64;
            if grads.dense.iter().all(|g| g.is_finite()) {
                dense_opt.step(&mut fm.dense, &grads.dense);
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        curve.push(evaluate(&fm, ds, epoch + 1, loss_sum / n as f64));
        if let Some(path) = &run.checkpoint {
            let c = Checkpoint {
                fingerprint: fp,
                epoch: epoch + 1,
                rng_state: rng.state(),
                nonfinite,
                table: fm.table.clone(),
                dense: fm.dense.clone(),
                dense_m: dense_opt.m.clone(),
                dense_v: dense_opt.v.clone(),
                dense_t: dense_opt.t,
                optimizer: opt.export_state(),
                history: serde_json::to_string(&curve).map_err(|e| e.to_string())?,
                options: options.clone(),
                shard: None,
            };
            checkpoint::save(path, &c).map_err(|e| e.to_string())?;
        }
    }
    let final_metrics = curve
        .last()
        .cloned()
        .unwrap_or_else(|| evaluate(&fm, ds, 0, f64::NAN));
    Ok(finish(
        ds,
        run,
        &fm,
        &opt,
        curve,
        final_metrics,
        nonfinite,
        start,
        None,
    ))
}

/// Bytes one rank sent in a data-parallel run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CommBytes {
    /// Everything (also the loss all-reduce).
    pub(crate) total: u64,
    /// The sparse row exchange.
    pub(crate) sparse: u64,
    /// The dense optimizer.
    pub(crate) dense: u64,
}

/// Assemble the result record.
#[allow(clippy::too_many_arguments)] // one call site per trainer; a struct would only rename the list
pub(crate) fn finish(
    ds: &Dataset,
    run: &Run<'_>,
    fm: &Fm,
    opt: &optim::Optimizer,
    curve: Vec<EpochPoint>,
    final_metrics: EpochPoint,
    nonfinite: u64,
    start: Instant,
    comm: Option<CommBytes>,
) -> RunResult {
    let mem = opt.memory();
    let state = mem.total_bytes - mem.scratch;
    let adam_bytes = (ds.rows * fm.dim() * 8) as f64;
    RunResult {
        optimizer: run.spec.label.clone(),
        lr: run.spec.lr(),
        seed: run.model.seed,
        rows: ds.rows,
        row_dim: fm.dim(),
        final_metrics,
        curve,
        memory: Memory {
            total: state,
            fixed: mem.fixed_bytes(),
            growing: mem.per_row_bytes(),
            shared_tables: mem.shared_tables,
            step_counts: mem.step_counts,
            per_row: mem.scalars,
            row_counters: mem.row_counters,
            row_index: mem.row_index,
            bucket_map: mem.bucket_map,
            scratch: mem.scratch,
        },
        bytes_per_row: state as f64 / ds.rows.max(1) as f64,
        compression_vs_adam: if state == 0 {
            f64::INFINITY
        } else {
            adam_bytes / state as f64
        },
        wall_secs: start.elapsed().as_secs_f64(),
        nonfinite_rows: nonfinite,
        telemetry: opt.telemetry(),
        comm_bytes: comm.map(|c| c.total),
        comm_sparse_bytes: comm.map(|c| c.sparse),
        comm_dense_bytes: comm.map(|c| c.dense),
        dense_params: fm.dense.len(),
        model_crc32: model_crc(fm),
        sharded: None,
    }
}
