//! Row-sharded training (`--shard rows --workers P`): each rank owns the
//! rows its [`OwnerRule`] gives it ([`owner_of`]) and only their optimizer
//! state, in a `basis_shard::ShardedTable`; the dense parameters are
//! data-parallel with 1-bit Adam. One-choice BASIS rows go to the rank of
//! their bucket, so the ranks hold the single process's bucket state,
//! partitioned (`OwnerRule::buckets`); other optimizers' rows go by a hash.
//! One step, on every rank:
//!
//! 1. take this rank's share of the batch (positions `r, r+P, …`), collect
//!    its unique ids and send them to their owners (`all_to_all_counts`,
//!    then `all_to_all_v`);
//! 2. owners look the ids up (creating new rows from `(seed, id)`), and
//!    return the rows (`all_to_all_v`);
//! 3. forward/backward of the model on the gathered rows only; the row
//!    gradients go back to the owners (`all_to_all_v`);
//! 4. owners sum the gradients of an id in rank order and run the sparse
//!    optimizer over their slots; 1-bit Adam steps the dense parameters
//!    (its all-reduces sum in rank order), and the loss is all-reduced.
//!
//! Every reduction has a fixed order and no step depends on thread timing,
//! so a run over `LocalComm` threads and one over `mpirun` processes with the
//! same `P` give the same bits (`model_crc32`). See docs/DISTRIBUTED.md.

mod fault;
mod resume;
mod source;

use crate::data::Dataset;
use crate::dense_opt::DenseOptimizer;
use crate::metrics::{auc, log_loss};
use crate::model::{Fm, Grads};
use crate::optim::{self, Optimizer};
use crate::rng::Rng;
use crate::run::{
    EpochPoint, Progress, Run, RunResult, Step, StepAt, Strategy, Timing, finish, share, train_loop,
};
use basis_shard::{Admission, Batch, Eviction, OwnerRule, RowInit, ShardedTable, TableConfig};
use comm_traits::{CommStats, Communicator, NonBlocking};
use std::path::Path;
use std::time::Instant;

use source::{Share, Source};

/// Examples per evaluation round (each rank scores its share of them).
const EVAL_CHUNK: usize = 4096;

/// Train row-sharded on `run.model.workers` ranks: MPI processes under
/// `mpirun` (`mpi` feature), threads over `LocalComm` otherwise.
pub(crate) fn train(ds: &Dataset, run: &Run<'_>) -> Result<RunResult, String> {
    let p = run.model.workers.max(1);
    let owner = owner_of(ds, run, p)?;
    #[cfg(feature = "mpi")]
    if let Some(r) = crate::parallel::mpi::with_ranks(p, |comm| rank_main(ds, run, comm, &owner)) {
        return r;
    }
    train_local(ds, run, p, &owner)
}

/// The owner rule of `run` on `p` ranks (`optim::owner_rule`): one-choice
/// BASIS partitions the single process's buckets, which every rank's
/// optimizer is built to match ([`Rank::new`]); any other optimizer spreads
/// ids by a hash.
pub(crate) fn owner_of(ds: &Dataset, run: &Run<'_>, p: usize) -> Result<OwnerRule, String> {
    optim::owner_rule(run.spec, ds.rows, p, run.model.seed)
}

/// The `LocalComm` run: one thread per rank; rank 0's result.
pub(crate) fn train_local(
    ds: &Dataset,
    run: &Run<'_>,
    p: usize,
    owner: &OwnerRule,
) -> Result<RunResult, String> {
    // Every rank fails together; report the first rank's error (rank 0's).
    crate::parallel::on_ranks(p, run.model.dense_overlap, |comm| {
        rank_main(ds, run, comm, owner)
    })
    .into_iter()
    .next()
    .unwrap_or_else(|| Err("no ranks".into()))
}

/// The options every rank must share, by name, as `u64`.
fn options(ds: &Dataset, run: &Run<'_>, lens: [usize; 3]) -> Vec<(&'static str, u64)> {
    let m = run.model;
    let label = balanced_hash::murmur3::x64_128(run.spec.label.as_bytes(), 0)[0];
    let data = balanced_hash::murmur3::x64_128(ds.name.as_bytes(), 0)[0];
    let mut opts = vec![
        ("--opt", label),
        ("learning rate", u64::from(run.spec.lr().to_bits())),
        ("--epochs", u64::from(m.epochs)),
        ("--batch", m.batch as u64),
        ("--dim", m.dim as u64),
        ("--init-std", u64::from(m.init_std.to_bits())),
        ("--l2", u64::from(m.l2.to_bits())),
        ("--dense-lr", u64::from(m.dense_lr.to_bits())),
        ("--seed", m.seed),
        ("--model", m.model as u64),
        (
            "--mlp",
            balanced_hash::murmur3::x64_128(
                format!("{:?}|{:?}", m.mlp, m.bottom_mlp).as_bytes(),
                0,
            )[0],
        ),
        ("--dense-opt", m.dense_opt as u64),
        ("--dense-policy", m.dense_policy.to_bits()),
        ("--dense-warmup", m.dense_warmup.to_bits()),
        ("data set", data),
        ("training examples", lens[0] as u64),
        ("validation examples", lens[1] as u64),
        ("test examples", lens[2] as u64),
    ];
    // Only when set: runs without them keep their checkpoints' fingerprint.
    let admission = [
        ("--admit-min-count", m.admit_min_count.map(u64::from)),
        ("--admit-prob", m.admit_prob.map(f64::to_bits)),
        ("--evict-ttl", m.evict_ttl),
        ("--evict-capacity", m.evict_capacity),
    ];
    opts.extend(admission.into_iter().filter_map(|(k, v)| Some((k, v?))));
    // Only where it changes the run (1-bit Adam's bf16 warm-up, 0/1 Adam's
    // bf16 variance steps): runs before the option (and 0/1 Adam's before
    // it reached that optimizer) reduced in f32 and keep their
    // fingerprint, so such a checkpoint resumes under `f32` and is refused,
    // naming the option, under the default `bf16`.
    if matches!(
        m.dense_opt,
        crate::deep::DenseOpt::OnebitAdam | crate::deep::DenseOpt::ZeroOneAdam
    ) && m.dense_warmup_reduce == crate::dense_opt::DenseWarmupReduce::Bf16
    {
        opts.push(("--dense-warmup-reduce", 1));
    }
    // Only when narrow: f32 runs keep their checkpoints' fingerprint.
    if m.row_precision != basis_shard::RowPrecision::F32 {
        opts.push(("--row-precision", m.row_precision.code()));
    }
    opts
}

/// Counters per row of the `--admit-min-count` sketch (4 rows: 4 MiB per
/// rank; with 10^6 sightings per rank between halvings, at most
/// `(10^6 / 2^20)^4 ≈ 0.8 %` of never-seen ids are admitted at once at
/// `N = 2`, by `Admission::MinCount`'s bound).
const ADMIT_WIDTH: usize = 1 << 20;
/// Rows of the `--admit-min-count` sketch.
const ADMIT_DEPTH: usize = 4;

/// The seed of the rows' stochastic rounding (`--row-precision bf16|f16`).
pub(super) fn rounding_seed(m: &crate::cli::ModelArgs) -> u64 {
    m.seed ^ 0x5EED_B16F
}

/// The table of `m`'s admission and eviction flags over `config`.
fn with_admission(config: TableConfig, m: &crate::cli::ModelArgs) -> Result<TableConfig, String> {
    let err = |e: basis_shard::ShardError| e.to_string();
    let mut config = match (m.admit_min_count, m.admit_prob) {
        (Some(n), _) => {
            config.with_admission(Admission::min_count(n, ADMIT_WIDTH, ADMIT_DEPTH).map_err(err)?)
        }
        (None, Some(p)) => {
            config.with_admission(Admission::probability(p, m.seed ^ 0xAD_0175).map_err(err)?)
        }
        (None, None) => config,
    };
    let eviction = match (m.evict_ttl, m.evict_capacity) {
        (Some(t), c) => Some(Eviction::ttl(t)).map(|e| match c {
            Some(c) => e.with_capacity(usize::try_from(c).unwrap_or(usize::MAX)),
            None => e,
        }),
        (None, Some(c)) => Some(Eviction::capacity(usize::try_from(c).unwrap_or(usize::MAX))),
        (None, None) => None,
    };
    if let Some(e) = eviction {
        config = config.with_eviction(e);
    }
    Ok(config)
}

/// Fail on every rank, naming the first option some rank disagrees on
/// (`basis_shard::agree_values`: the same verdict everywhere).
fn agree(comm: &mut dyn Communicator, opts: &[(&'static str, u64)]) -> Result<(), String> {
    basis_shard::agree_values(comm, opts).map_err(|e| e.to_string())
}

/// One rank's state: its shard of the table (with the sparse optimizer over
/// its rows and the sparse byte counters), the dense parameters
/// (replicated) and the dense byte counter.
struct Rank {
    table: ShardedTable<Optimizer>,
    /// The model with `table` = the rows gathered for the current batch
    /// (positions in its sorted unique ids); `dense` and `tower` are the
    /// replicated dense part.
    model: Fm,
    /// Bytes this rank sent in the dense optimizer's all-reduces.
    dense_bytes: u64,
    /// Per-group dense telemetry (`--json`'s `dense_groups`).
    dense_groups: crate::dense_telemetry::DenseGroups,
    /// `--progress-dense`: put it on the progress line too.
    progress_dense: bool,
    /// `--dense-opt` (named in its errors).
    dense_kind: crate::deep::DenseOpt,
    /// `--dense-overlap on`: the dense step is begun and completed
    /// (`DenseOptimizer::hook`).
    overlap: bool,
    /// The sparse optimizer's label (named when the loss diverges).
    label: String,
}

impl Rank {
    /// An empty shard of `run`'s model for rank `rank` under `owner`: the
    /// sparse optimizer of `optim::build_shard` (one-choice BASIS: this
    /// rank's part of the single process's buckets, matching [`owner_of`]),
    /// rows starting as the single-process model's ([`init_row`]), the dense
    /// parameters initialised as the single-process model's.
    fn new(ds: &Dataset, run: &Run<'_>, rank: usize, owner: &OwnerRule) -> Result<Self, String> {
        let m = run.model;
        let d = m.dim + 1;
        let opt = optim::build_shard(run.spec, ds.rows, (rank, owner), d, m.seed)?;
        let (std, seed) = (m.init_std, m.seed);
        let config = TableConfig::new(d, owner.clone(), rank)
            .with_init(RowInit::from_fn(move |id, row| {
                init_row(row, std, seed, id)
            }))
            .with_l2(m.l2)
            .with_precision(m.row_precision, rounding_seed(m));
        let config = match m.row_index {
            Some(kind) => config.with_index(kind),
            None => config,
        };
        let config = with_admission(config, m)?;
        let table = ShardedTable::new(config, opt).map_err(|e| e.to_string())?;
        // The model without a table: rows live in the shard.
        let mut model = Fm::new(0, m.dim, m.init_std, m.seed)?;
        if let Some(tower) = crate::run::build_tower(ds, m)? {
            model = model.with_tower(tower, m.seed)?;
        }
        Ok(Self {
            table,
            model,
            dense_bytes: 0,
            dense_groups: Default::default(),
            progress_dense: m.progress_dense,
            dense_kind: m.dense_opt,
            overlap: m.dense_overlap == crate::dense_opt::DenseOverlap::On,
            label: run.spec.label.clone(),
        })
    }

    /// One training step on this rank's share `sh` of a batch of
    /// `batch_len` examples: rows from their owners, forward/backward,
    /// gradients to the owners and their sparse step, the dense step.
    /// `grads` (reused across steps: the tower's buffers stay allocated) is
    /// left holding this rank's gradients of its share's part of the
    /// batch-mean loss, without `--l2` (`dense` before the all-reduce).
    ///
    /// The same update as the single-process step on the whole batch (only
    /// float summation order differs; `tests::one_sharded_step_is_the_single_process_step`):
    /// every share's gradients are of its part of the **batch** mean (scale
    /// `1/batch_len`, not `1/share`), so they sum to the batch gradient
    /// whatever the shares' sizes, and `--l2` is added by the owner once
    /// per row after the shares' gradients are summed.
    fn train_step(
        &mut self,
        comm: &mut dyn NonBlocking,
        sh: &Share,
        at: StepAt,
        dense_opt: &mut DenseOptimizer,
        grads: &mut Grads,
    ) -> Result<Step, String> {
        let (rank, p) = (comm.rank(), comm.size());
        let batch = self.gather(comm, sh, true)?;
        let local = sh.local(&batch.ids);
        grads.reserve_rows(batch.ids.len());
        let positions: Vec<usize> = (0..local.len()).collect();
        // `--dense-overlap on`: the dense groups begin inside the backward
        // pass, each as soon as its gradient is final (`dense_opt::Hook`),
        // so their compression and exchanges run while the rest of the
        // tower and the row gradients are computed. The loss all-reduce
        // and the scatter then queue behind them on the FIFO communication
        // thread: every rank issues the same order, so the collectives
        // match (the split step's "nothing else in between" is needed only
        // for a communicator that could complete them out of order). A
        // barrier (no bytes) first waits for the queued dense requests, so
        // the scatter's byte count has none of them; a non-finite loss then
        // drops the split step, which leaves the optimizer unchanged.
        let mut hooked = None;
        if self.overlap {
            let before = comm.stats();
            let mut hook = dense_opt.hook(&mut *comm, p as f32);
            let res = grads.compute_scaled_hooked(
                &self.model,
                &local,
                &positions,
                (0.0, at.batch_len),
                &mut |range, grad| hook.offer(range, grad),
            );
            res?;
            let begun = hook.begun(&grads.dense);
            comm.barrier().map_err(|e| format!("rank {rank}: {e}"))?;
            hooked = Some((begun, comm.stats().since(&before).bytes_sent));
        } else {
            grads.compute_scaled(&self.model, &local, &positions, 0.0, at.batch_len)?;
        }
        // The batch loss first, on every rank: a non-finite one stops the
        // job everywhere before any optimizer has seen its gradients (as
        // the single process stops), with the same message on every rank.
        // Summed in f64 as the single process sums it (one rank: its bits).
        let loss = comm_traits::sum_f64_in_rank_order(comm, grads.loss)
            .map_err(|e| format!("rank {rank}: {e}"))?;
        crate::validate::finite_loss(loss, at.epoch, at.step, &self.label)?;
        let nonfinite = self.scatter(comm, &batch, grads)?;
        let before = comm.stats();
        // The dense optimizer averages over ranks; the shares sum to the
        // batch gradient, so each sends P times its share (scaled as the
        // optimizer reads it in: no scaled copy). `--dense-overlap on`
        // began it in the backward pass (above).
        let (factor, kind) = (p as f32, self.dense_kind);
        let err = |e| format!("rank {rank}: {kind:?}: {e}");
        let (begun, early) = match hooked {
            Some((begun, early)) => (begun.map_err(err)?, early),
            None => (crate::dense_opt::Begun::default(), 0),
        };
        let report = dense_opt
            .complete(comm, begun, &mut self.model.dense, (&grads.dense, factor))
            .map_err(err)?;
        self.dense_bytes += early + comm.stats().since(&before).bytes_sent;
        if let Some(r) = &report.report {
            self.dense_groups.observe(r);
        }
        Ok(Step {
            loss,
            nonfinite,
            dense: self.progress_dense.then(|| report.progress_field()),
        })
    }

    /// Steps 1–2: the unique rows of `share`, fetched from their owners
    /// (`ShardedTable::lookup`), into `self.model.table` (positions in the
    /// batch's sorted unique ids). Training (`train`) creates the owners'
    /// missing rows; evaluation reads only (`lookup_eval`: unseen ids get
    /// their initial rows, nothing is inserted).
    fn gather(
        &mut self,
        comm: &mut dyn Communicator,
        share: &Share,
        train: bool,
    ) -> Result<Batch, String> {
        let rank = comm.rank();
        let batch = if train {
            self.table.lookup(comm, &share.ids)
        } else {
            self.table.lookup_eval(comm, &share.ids)
        }
        .map_err(|e| format!("rank {rank}: {e}"))?;
        let gathered = &mut self.model.table;
        gathered.clear();
        gathered.extend_from_slice(&batch.rows);
        Ok(batch)
    }

    /// Steps 3–4 for the sparse rows: gradients (by position in
    /// `batch.ids`) to the owners, who sum them per id in rank order, add
    /// `l2·θ` once per row (as the single process adds it once per row of
    /// the batch) and step (`ShardedTable::apply`). Returns the rows the
    /// owner's optimizer skipped as non-finite.
    fn scatter(
        &mut self,
        comm: &mut dyn Communicator,
        batch: &Batch,
        grads: &Grads,
    ) -> Result<u64, String> {
        let d = self.model.dim();
        let mut by_pos = vec![0.0f32; batch.ids.len() * d];
        for (k, &pos) in grads.ids.iter().enumerate() {
            let pos = pos as usize;
            by_pos[pos * d..(pos + 1) * d].copy_from_slice(&grads.rows[k * d..(k + 1) * d]);
        }
        let rank = comm.rank();
        let rep = self
            .table
            .apply(comm, batch, &by_pos)
            .map_err(|e| format!("rank {rank}: {e}"))?;
        Ok(rep.rows_skipped_nonfinite as u64)
    }

    /// Metrics on `ex`: every rank scores its share of each chunk with rows
    /// from the owners, then every rank gets all logits (in example order).
    fn evaluate(
        &mut self,
        comm: &mut dyn Communicator,
        src: Source<'_>,
    ) -> Result<(f64, f64), String> {
        let (rank, p) = (comm.rank(), comm.size());
        let mut logits = vec![0.0f32; src.len()];
        let mut labels = vec![0.0f32; src.len()];
        let all: Vec<usize> = (0..src.len()).collect();
        for chunk in all.chunks(EVAL_CHUNK) {
            let mine = share(chunk, rank, p);
            let sh = src.share(&mine);
            let batch = self.gather(comm, &sh, false)?;
            let z = self.model.predict(&sh.local(&batch.ids));
            // Every rank needs every label too (a stream's are generated).
            let whole = src.share(chunk);
            for (k, &e) in chunk.iter().enumerate() {
                labels[e] = whole.ex.labels[k];
            }
            // Everyone sends its logits to everyone.
            let counts: Vec<usize> = (0..p).map(|r| share(chunk, r, p).len()).collect();
            let send: Vec<f32> = (0..p).flat_map(|_| z.iter().copied()).collect();
            let zs = basis_shard::route::exchange_f32(comm, &send, &vec![z.len(); p], &counts, 1)
                .map_err(|e| format!("rank {rank}: {e}"))?;
            let mut at = 0;
            for r in 0..p {
                for &e in &share(chunk, r, p) {
                    logits[e] = zs[at];
                    at += 1;
                }
            }
        }
        if src.len() == 0 {
            return Ok((0.5, 0.0));
        }
        Ok((
            auc(&logits, &labels).unwrap_or(0.5),
            log_loss(&logits, &labels),
        ))
    }
}

/// The training, validation and test sources of `ds`: its splits, or its
/// stream (training examples `0..train`, held-out validation and test
/// slices).
fn sources(ds: &Dataset) -> (Source<'_>, Source<'_>, Source<'_>) {
    match &ds.stream {
        None => (
            Source::Memory(&ds.train),
            Source::Memory(&ds.valid),
            Source::Memory(&ds.test),
        ),
        Some(st) => {
            let at = |first, len| Source::Stream {
                generator: &st.generator,
                first,
                len,
            };
            (
                at(0, st.train),
                at(source::VALID_FIRST, st.valid),
                at(source::TEST_FIRST, st.test),
            )
        }
    }
}

/// One rank's whole run over any [`NonBlocking`] communicator; every rank
/// returns the same global figures (rank 0's memory in `memory`, all ranks
/// in `sharded`).
pub(crate) fn rank_main(
    ds: &Dataset,
    run: &Run<'_>,
    comm: &mut dyn NonBlocking,
    owner: &OwnerRule,
) -> Result<RunResult, String> {
    rank_main_with(ds, run, comm, owner, fault::Fault::from_env()?)
}

/// [`rank_main`] with an injected exit (`fault`).
fn rank_main_with(
    ds: &Dataset,
    run: &Run<'_>,
    comm: &mut dyn NonBlocking,
    owner: &OwnerRule,
    fault: Option<fault::Fault>,
) -> Result<RunResult, String> {
    let start = Instant::now();
    let stats_before = comm.stats();
    let sources = sources(ds);
    let opts = options(ds, run, [sources.0.len(), sources.1.len(), sources.2.len()]);
    agree(comm, &opts)?;
    let m = run.model;
    let me = Rank::new(ds, run, comm.rank(), owner)?;
    let dense_opt = crate::run::dense_optimizer(
        m,
        me.model.dense.len(),
        me.model.tower.as_ref(),
        sources.0.len(),
    )?;
    let sharded = Sharded {
        ds,
        run,
        grads: Grads::new(&me.model, 0),
        me,
        comm,
        dense_opt,
        fault,
        opts,
        sources,
        stats_before,
    };
    train_loop(run, sharded, start)?.ok_or_else(|| "no result".into())
}

/// The row-sharded strategy: this rank's [`Rank`] and the run around it.
struct Sharded<'a> {
    ds: &'a Dataset,
    run: &'a Run<'a>,
    comm: &'a mut dyn NonBlocking,
    me: Rank,
    dense_opt: DenseOptimizer,
    /// Reused across steps (the tower's buffers stay allocated).
    grads: Grads,
    /// An injected exit (`fault`).
    fault: Option<fault::Fault>,
    /// The options every rank agreed on (checkpoint fingerprints).
    opts: Vec<(&'static str, u64)>,
    /// Training, validation and test examples.
    sources: (Source<'a>, Source<'a>, Source<'a>),
    /// `comm`'s counters when the run started.
    stats_before: CommStats,
}

impl Strategy for Sharded<'_> {
    fn examples(&self) -> usize {
        self.sources.0.len()
    }

    fn shuffled(&self) -> bool {
        self.sources.0.shuffled()
    }

    fn bar(&self) -> (String, bool) {
        (
            format!(" sharded ×{}", self.comm.size()),
            self.comm.rank() == 0,
        )
    }

    fn restore(&mut self, base: &Path) -> Result<Progress, String> {
        let at = (self.comm.rank(), self.comm.size());
        let (ds, run) = (self.ds, self.run);
        let (me, dense_opt) = (&mut self.me, &mut self.dense_opt);
        let local = resume::restore(base, at, &self.opts, (ds, run), me, dense_opt);
        let epoch = local.as_ref().map(|r| r.0.epoch).map_err(Clone::clone);
        resume::agree_ok(self.comm, "resume", epoch)?;
        let (progress, p_old) = local?;
        // Stale files could make some ranks reshard and others not.
        agree(self.comm, &[("the checkpoint's --workers", p_old as u64)])?;
        Ok(progress)
    }

    fn step(&mut self, batch: &[usize], at: StepAt) -> Result<Step, String> {
        let (rank, p) = (self.comm.rank(), self.comm.size());
        if let Some(f) = &self.fault {
            // The global step, 0-based, counted over epochs.
            let batches = self.examples().div_ceil(self.run.model.batch) as u64;
            f.check(rank, u64::from(at.epoch - 1) * batches + at.step as u64 - 1)?;
        }
        let sh = self.sources.0.share(&share(batch, rank, p));
        let (dense_opt, grads) = (&mut self.dense_opt, &mut self.grads);
        self.me.train_step(self.comm, &sh, at, dense_opt, grads)
    }

    fn evaluate(&mut self, epoch: u32, train_loss: f64) -> Result<Option<EpochPoint>, String> {
        // 0/1 Adam's local steps leave each rank its own dense parameters:
        // score rank 0's on every share, then put this rank's back.
        let own = if self.dense_opt.params_per_rank() {
            Some(crate::dense_opt::rank0_dense(
                self.comm,
                &mut self.me.model.dense,
            )?)
        } else {
            None
        };
        let valid = self.me.evaluate(self.comm, self.sources.1);
        let test = self.me.evaluate(self.comm, self.sources.2);
        if let Some(own) = own {
            self.me.model.dense = own;
        }
        let ((valid_auc, valid_loss), (test_auc, test_loss)) = (valid?, test?);
        Ok(Some(EpochPoint {
            epoch,
            train_loss,
            valid_auc,
            valid_loss,
            test_auc,
            test_loss,
        }))
    }

    fn save(&mut self, base: &Path, progress: &Progress) -> Result<(), String> {
        let at = (self.comm.rank(), self.comm.size());
        let saved = resume::save(base, at, &self.opts, &self.me, &self.dense_opt, progress);
        resume::agree_ok(self.comm, "checkpoint", saved.map(|()| progress.epoch))?;
        Ok(())
    }

    fn finish(mut self, progress: Progress, timing: Timing) -> Result<Option<RunResult>, String> {
        let (comm, me, m) = (self.comm, &mut self.me, self.run.model);
        let Progress {
            curve, nonfinite, ..
        } = progress;
        let sent = comm.stats().since(&self.stats_before).bytes_sent;
        let rank = comm.rank();
        let err = |e: basis_shard::ShardError| format!("rank {rank}: {e}");
        let mut shard = me.table.report(comm, me.dense_bytes).map_err(err)?;
        shard.train_secs = timing.train_secs;
        let epochs = f64::from(m.epochs - timing.first_epoch);
        shard.examples_per_sec = self.sources.0.len() as f64 * epochs / timing.train_secs.max(1e-9);
        let crc = me
            .table
            .group_checksum(comm, &me.model.dense)
            .map_err(err)?;
        let final_metrics = curve.last().cloned().ok_or("no epochs were run")?;
        me.model.table = Vec::new();
        let bytes = crate::run::CommBytes {
            total: sent,
            sparse: me.table.stats().bytes_sent,
            dense: me.dense_bytes,
        };
        let (ds, run, opt) = (self.ds, self.run, me.table.optimizer());
        let mut out = finish(
            ds,
            run,
            &me.model,
            opt,
            curve,
            final_metrics,
            nonfinite,
            timing.start,
            Some(bytes),
        );
        out.model_crc32 = crc;
        out.dense_freeze_step = self.dense_opt.freeze_step_reached(m.dense_opt);
        out.dense_groups = Some(me.dense_groups.0.clone());
        // `finish` sized the memory ratios by the data's row count (for a
        // stream, the estimated vocabulary) and one optimizer; the job holds
        // `shard.rows` rows in all ranks' state.
        out.bytes_per_row = shard.state_bytes_per_row;
        let state: u64 = shard.ranks.iter().map(|r| r.state_bytes).sum();
        let d = m.dim + 1;
        out.compression_vs_adam = if state == 0 {
            f64::INFINITY
        } else {
            shard.rows as f64 * d as f64 * 8.0 / state as f64
        };
        if m.admits_or_evicts() && comm.rank() == 0 {
            eprintln!(
                "sharded table: {} rows held, {} rows evicted, {} gradient rows dropped (ids not admitted yet)",
                shard.rows, shard.rows_evicted, shard.grads_dropped
            );
        }
        out.sharded = Some(shard);
        Ok(Some(out))
    }
}

/// Row `id`'s initial value `[0, N(0, std²) …]`, drawn from `(seed, id)`
/// alone: the values `Fm::new` gives row `id` (its stream, skipped to the
/// row; Box–Muller draws two numbers per value).
fn init_row(row: &mut [f32], std: f32, seed: u64, id: u64) {
    let mut rng = Rng::derive(seed, 0x1417);
    rng.skip(id.wrapping_mul(2 * (row.len() as u64 - 1)));
    row[0] = 0.0;
    for x in &mut row[1..] {
        *x = std * rng.normal() as f32;
    }
}

#[cfg(test)]
mod tests;
