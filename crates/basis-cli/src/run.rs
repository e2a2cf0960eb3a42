//! The one training loop ([`train_loop`]) and what its three step
//! strategies share: the run's options ([`Run`]), where a run stands
//! ([`Progress`], what a checkpoint saves besides the model), its metric
//! points and result record ([`RunResult`], assembled by [`finish`]), the
//! model, the dense optimizer of the data-parallel ranks, the thread
//! launcher. The strategies — single process (`train.rs`), replicated ranks
//! (`parallel.rs`), row-sharded ranks (`shard/`) — implement [`Strategy`]:
//! one step, evaluation, checkpoint save/restore, the result. They depend
//! on this module and not on each other's, so they import no cycle.

use crate::cli::ModelArgs;
use crate::data::Dataset;
use crate::deep::{DeepFm, DenseOpt, Dlrm, Tower};
use crate::dense_opt::DenseOptimizer;
use crate::metrics::{auc, log_loss};
use crate::model::Fm;
use crate::optim::{self, Telemetry};
use crate::rng::Rng;
use crate::spec::OptSpec;
use basis_std::local::LocalComm;
use core::time::Duration;
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
    /// The last full-precision step of the dense 1-bit Adam (`--dense-opt
    /// onebit-adam`; with `--dense-warmup auto` the step it decided), if the
    /// run reached it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dense_freeze_step: Option<u64>,
    /// Per dense-optimizer group (`--dense-policy`), this rank: bytes,
    /// scales, error-feedback norms, sign flips (data-parallel runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dense_groups: Option<Vec<crate::dense_telemetry::DenseGroup>>,
    /// CRC-32 of the final model table and dense parameters (equal iff bit-identical).
    pub(crate) model_crc32: u32,
    /// Per-rank figures of a row-sharded run (`--shard rows`): the table's
    /// group report, with the run's training time and rate filled in by
    /// `shard::Sharded::finish`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sharded: Option<basis_shard::GroupReport>,
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
        if ex.is_empty() {
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
        dense_groups: None,
        model_crc32: model_crc(fm),
        sharded: None,
    }
}

/// Where a run stands: what the epoch loop carries besides the model and
/// the optimizers (a checkpoint saves it with them).
#[derive(Debug)]
pub(crate) struct Progress {
    /// Epochs completed.
    pub(crate) epoch: u32,
    /// The data-order RNG.
    pub(crate) rng: Rng,
    /// Non-finite rows skipped so far.
    pub(crate) nonfinite: u64,
    /// Metric history.
    pub(crate) curve: Vec<EpochPoint>,
}

/// Where a training step is, for its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepAt {
    /// Examples in the whole batch (a rank's share of it computes the
    /// gradients of the batch mean).
    pub(crate) batch_len: usize,
    /// 1-based epoch.
    pub(crate) epoch: u32,
    /// 1-based step within the epoch.
    pub(crate) step: usize,
}

/// What one training step leaves behind.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// Summed log-loss of the whole batch (all ranks').
    pub(crate) loss: f64,
    /// Rows the sparse optimizer skipped as non-finite (this rank's).
    pub(crate) nonfinite: u64,
    /// `--progress-dense`: the dense groups' telemetry for the progress line.
    pub(crate) dense: Option<String>,
}

/// The clock of a finished loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// When the run started (before the model was built).
    pub(crate) start: Instant,
    /// Seconds spent in training steps (evaluation excluded).
    pub(crate) train_secs: f64,
    /// The epoch the loop started from (after a resume, the checkpoint's).
    pub(crate) first_epoch: u32,
}

/// How the loop steps, evaluates, saves and ends: one process, replicated
/// ranks or row-sharded ranks.
pub(crate) trait Strategy {
    /// Training examples per epoch.
    fn examples(&self) -> usize;

    /// Whether each epoch visits the examples in a freshly shuffled order
    /// (a stream is read in order: no `n`-long permutation).
    fn shuffled(&self) -> bool {
        true
    }

    /// The progress bar's label after the optimizer's (` ×4`), and whether
    /// this process draws it.
    fn bar(&self) -> (String, bool);

    /// Reads the checkpoint `base` into the model and optimizers; returns
    /// the progress it saved.
    fn restore(&mut self, base: &Path) -> Result<Progress, String>;

    /// One training step on the examples at positions `batch`.
    fn step(&mut self, batch: &[usize], at: StepAt) -> Result<Step, String>;

    /// The metrics after `epoch` (`None` on a rank that does not evaluate).
    fn evaluate(&mut self, epoch: u32, train_loss: f64) -> Result<Option<EpochPoint>, String>;

    /// Writes the checkpoint `base` of `progress`.
    fn save(&mut self, base: &Path, progress: &Progress) -> Result<(), String>;

    /// The run's result (`None` on a rank that does not report).
    fn finish(self, progress: Progress, timing: Timing) -> Result<Option<RunResult>, String>;
}

/// The training loop of every trainer: resume, then per epoch a shuffled
/// order (one RNG stream, [`Progress::rng`]), its mini-batches through
/// `s.step`, the evaluation, the checkpoint; then the result.
///
/// Fails with the strategy's first error.
pub(crate) fn train_loop(
    run: &Run<'_>,
    mut s: impl Strategy,
    start: Instant,
) -> Result<Option<RunResult>, String> {
    let m = run.model;
    let mut progress = Progress {
        epoch: 0,
        rng: Rng::derive(m.seed, 0x0DE5),
        nonfinite: 0,
        curve: Vec::new(),
    };
    if let (true, Some(base)) = (run.resume, &run.checkpoint) {
        progress = s.restore(base)?;
    }
    let first_epoch = progress.epoch;
    let (n, shuffled) = (s.examples(), s.shuffled());
    let mut order: Vec<usize> = if shuffled {
        (0..n).collect()
    } else {
        Vec::new()
    };
    let mut in_order: Vec<usize> = Vec::new();
    let batches = n.div_ceil(m.batch);
    let (label, show) = s.bar();
    let mut train_secs = 0.0f64;
    for epoch in progress.epoch..m.epochs {
        let bar = crate::progress::count(
            batches as u64,
            &format!("{}{label} epoch {}/{}", run.spec.label, epoch + 1, m.epochs),
            run.progress && show,
        );
        for (i, o) in order.iter_mut().enumerate() {
            *o = i;
        }
        progress.rng.shuffle(&mut order);
        let mut loss_sum = 0.0f64;
        let epoch_start = Instant::now();
        for b in 0..batches {
            let range = b * m.batch..((b + 1) * m.batch).min(n);
            let batch: &[usize] = if shuffled {
                &order[range]
            } else {
                in_order.clear();
                in_order.extend(range);
                &in_order
            };
            let at = StepAt {
                batch_len: batch.len(),
                epoch: epoch + 1,
                step: b + 1,
            };
            let step = s.step(batch, at)?;
            progress.nonfinite += step.nonfinite;
            loss_sum += step.loss;
            if let Some(d) = &step.dense {
                bar.set_message(format!(
                    "{}{label} epoch {}/{} {d}",
                    run.spec.label,
                    epoch + 1,
                    m.epochs
                ));
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        train_secs += epoch_start.elapsed().as_secs_f64();
        if let Some(point) = s.evaluate(epoch + 1, loss_sum / n.max(1) as f64)? {
            progress.curve.push(point);
        }
        progress.epoch = epoch + 1;
        if let Some(base) = &run.checkpoint {
            s.save(base, &progress)?;
        }
    }
    let timing = Timing {
        start,
        train_secs,
        first_epoch,
    };
    s.finish(progress, timing)
}

/// Shares of a batch: rank `r` takes positions `r, r+P, …`.
pub(crate) fn share(batch: &[usize], rank: usize, p: usize) -> Vec<usize> {
    batch.iter().skip(rank).step_by(p).copied().collect()
}

/// `f` on `p` ranks, one thread each over `LocalComm` (a collective waits
/// at most 300 s for a peer); every rank's result, in rank order.
pub(crate) fn on_local_ranks<T: Send>(
    p: usize,
    f: impl Fn(&mut LocalComm) -> Result<T, String> + Sync,
) -> Vec<Result<T, String>> {
    let comms = LocalComm::group_with_timeout(p, Duration::from_secs(300));
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut comm| s.spawn(move || f(&mut comm)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect()
    })
}

/// The data-parallel dense optimizer (`--dense-opt`) of `len` parameters
/// for a run of `n` training examples per epoch.
///
/// Fails on options the optimizer refuses.
///
/// `--dense-policy` and 1-bit LAMB's layers split the parameters by
/// `tower`'s layers (`None`: one layer of `len`).
pub(crate) fn dense_optimizer(
    m: &ModelArgs,
    len: usize,
    tower: Option<&crate::deep::Tower>,
    n: usize,
) -> Result<DenseOptimizer, String> {
    let run = crate::dense_opt::RunLength {
        batches_per_epoch: n.div_ceil(m.batch) as u64,
        epochs: m.epochs,
    };
    let layers = match tower {
        Some(t) => {
            let layers = t.dense_layers();
            if layers.iter().map(|l| l.0).sum::<usize>() != len {
                return Err("--dense-opt: the tower's layers do not cover its parameters".into());
            }
            layers
        }
        None => vec![(len, crate::deep::LayerRole::Rest)],
    };
    // Only 1-bit Adam's groups have a split step: under the others the
    // flag would change nothing, silently.
    if m.dense_overlap == crate::dense_opt::DenseOverlap::On
        && !matches!(m.dense_opt, DenseOpt::Adam | DenseOpt::OnebitAdam)
    {
        let name = clap::ValueEnum::to_possible_value(&m.dense_opt).map_or_else(
            || format!("{:?}", m.dense_opt),
            |v| v.get_name().to_string(),
        );
        return Err(format!(
            "--dense-overlap on: only --dense-opt adam and onebit-adam overlap their collectives, not {name}: add --dense-opt onebit-adam"
        ));
    }
    DenseOptimizer::build(
        m.dense_opt,
        &layers,
        (m.dense_policy, m.dense_groups, m.dense_warmup_reduce),
        (m.dense_lr, run, m.dense_warmup),
    )
}

/// The single process's dense optimizer: `--dense-opt adam`'s (one
/// full-precision group of `onebit-adam`, `--dense-lr`, bias-corrected), so
/// that its steps are the bits of a `--workers 1 --shard rows --dense-opt
/// adam` run's, but with a fixed warm-up that never ends: a full-precision
/// group steps the same whatever the freeze, and an automatic rule would
/// decide a freeze step and write it into the saved state (a resumed run
/// with another `--epochs` could then not import it; `FreezePolicy::Fixed`
/// of the run's length would tie the state to `--epochs` the same way).
///
/// Fails when `onebit-adam` refuses the configuration (it does not for a
/// finite `--dense-lr`).
pub(crate) fn single_dense_optimizer(m: &ModelArgs, len: usize) -> Result<DenseOptimizer, String> {
    let adam = crate::deep::DenseOpt::Adam.build(
        len,
        m.dense_lr,
        (1, m.dense_warmup),
        onebit_adam::WarmupReduce::F32,
    )?;
    let config = adam
        .config()
        .with_freeze(onebit_adam::FreezePolicy::Fixed(u64::MAX));
    onebit_adam::OneBitAdam::with_groups(&[onebit_adam::GroupSpec::full_precision(len)], config)
        .map(DenseOptimizer::from)
        .map_err(|e| format!("--dense-lr: {e}"))
}

/// The message of a dense step that `onebit-adam` refused (`e`) at `at`:
/// with a non-finite gradient `grad` (the library's finiteness check, which
/// leaves the parameters unchanged), the run has diverged; otherwise the
/// library's reason, prefixed with `who` (`rank R: --dense-opt …`).
pub(crate) fn dense_step_error(e: &str, grad: &[f32], at: StepAt, who: &str) -> String {
    match grad.iter().position(|g| !g.is_finite()) {
        Some(i) => format!(
            "training diverged: the dense gradient became {} (parameter {i}) at epoch {}, step {} ({who}: {e}); lower --dense-lr, the learning rate or --init-std",
            grad[i], at.epoch, at.step
        ),
        None => format!("{who}: {e}"),
    }
}
