//! What every training loop shares: the run's options ([`Run`]), its
//! metric points and result record ([`RunResult`], assembled by [`finish`]),
//! and building the model. The single-process loop (`train.rs`), the
//! replicated one (`parallel.rs`) and the sharded one (`shard/`) depend on
//! this module and not on each other's, so they import no cycle.

use crate::cli::ModelArgs;
use crate::data::Dataset;
use crate::deep::{DeepFm, Dlrm, Tower};
use crate::metrics::{auc, log_loss};
use crate::model::Fm;
use crate::optim::{self, Telemetry};
use crate::spec::OptSpec;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
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
    /// The last full-precision step of the dense 1-bit Adam (`--dense-opt
    /// onebit-adam`; with `--dense-warmup auto` the step it decided), if the
    /// run reached it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dense_freeze_step: Option<u64>,
    /// CRC-32 of the final model table and dense parameters (equal iff bit-identical).
    pub(crate) model_crc32: u32,
    /// Per-rank figures of a row-sharded run (`--shard rows`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sharded: Option<crate::shard_report::ShardReport>,
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

/// CRC-32 of the model's table and dense parameters.
fn model_crc(fm: &Fm) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for x in fm.table.iter().chain(&fm.dense) {
        h.update(&x.to_le_bytes());
    }
    h.finalize()
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
        dense_freeze_step: None,
        model_crc32: model_crc(fm),
        sharded: None,
    }
}
