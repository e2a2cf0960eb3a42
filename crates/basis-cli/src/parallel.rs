//! The replicated strategy of the training loop: a full replica of the
//! model and of the sparse optimizer in a single process (f32 Adam on the
//! dense parameters, checkpoints), or on every rank of data-parallel
//! training over `P` ranks (`--workers P`): in-process threads connected by
//! `basis-std`'s `LocalComm`.
//!
//! Every rank holds a full replica of the model and of the sparse optimizer
//! (same seed, so the replicas start equal). Each global mini-batch is split
//! across ranks (rank `r` takes examples `r, r+P, …`); each rank computes the
//! gradient of its share of the batch's mean loss. Then:
//!
//! - **sparse rows**: ranks all-gather their `(row id, gradient)` lists
//!   (exact f32, padded to the longest list), and every rank applies the same
//!   sparse-optimizer step to the concatenation (duplicate ids are summed by
//!   the optimizer), so the replicas stay bit-identical;
//! - **dense parameters** (the global bias; with DeepFM also the tower):
//!   `--dense-opt zero-one-adam` (default) is 0/1 Adam, `onebit-adam`
//!   1-bit Adam — full-precision warm-up (`--dense-warmup`), then
//!   compressed momentum all-reduce with error feedback — and
//!   `--dense-opt adam` f32 Adam on the all-reduced gradient at every step
//!   (the baseline); `dense_opt.rs` holds all of them.
//!
//! The bytes each rank sends (logical collective bytes, `CommStats`) are
//! reported, in total and split into the sparse exchange and the dense
//! optimizer. Rank 0 evaluates. Checkpoints are not supported with `P > 1`.
//! With the `mpi` feature under `mpirun`, the ranks are MPI processes
//! (the `mpi` module) running the same [`rank_main`].

use crate::checkpoint::{self, Checkpoint};
use crate::data::Dataset;
use crate::dense_opt::DenseOptimizer;
use crate::dense_opt::DenseOverlap;
use crate::eager::Eager;
use crate::model::{Fm, Grads};
use crate::optim::{self, Optimizer};
use crate::rng::Rng;
use crate::run::{
    CommBytes, EpochPoint, Progress, Run, RunResult, Step, StepAt, Strategy, Timing, build_model,
    dense_step_error, evaluate, finish, on_local_ranks, share,
};
use basis_std::local::LocalComm;
use basis_std::overlap::Overlapped;
use comm_traits::{CommStats, NonBlocking, SingleRank};
use core::time::Duration;
use std::path::Path;
use std::time::Instant;

/// Train with `run.model.workers` ranks.
///
/// Fails when checkpoints are asked for, the optimizer cannot be built, or a
/// collective or step fails (on every rank).
pub(crate) fn train(ds: &Dataset, run: &Run<'_>) -> Result<RunResult, String> {
    let p = run.model.workers;
    if run.checkpoint.is_some() {
        return Err("--checkpoint is not supported with --workers > 1".into());
    }
    #[cfg(feature = "mpi")]
    if let Some(result) = mpi::with_ranks(p, |comm| rank_main(ds, run, comm, true)) {
        return result.and_then(|r| r.ok_or_else(|| "no result".to_string()));
    }
    let mut out = None;
    let overlap = run.model.dense_overlap;
    for r in on_ranks(p, overlap, |comm| rank_main(ds, run, comm, false)) {
        if let Some(res) = r? {
            out = Some(res);
        }
    }
    out.ok_or_else(|| "rank 0 produced no result".into())
}

/// `f` on each of `p` in-process ranks (threads connected by `LocalComm`),
/// each rank's communicator on its own communication thread
/// (`--dense-overlap on`) or used in place ([`Eager`]).
pub(crate) fn on_ranks<T: Send>(
    p: usize,
    overlap: DenseOverlap,
    f: impl Fn(&mut dyn NonBlocking) -> Result<T, String> + Sync,
) -> Vec<Result<T, String>> {
    if overlap == DenseOverlap::Off {
        return on_local_ranks(p, |comm| f(&mut Eager::new(comm)));
    }
    let comms = LocalComm::group_with_timeout(p, Duration::from_secs(300));
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|comm| {
                s.spawn(move || {
                    let mut comm = Overlapped::spawn(move || Ok::<_, String>(comm))
                        .map_err(|e| e.to_string())?;
                    f(&mut comm)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect()
    })
}

/// One rank's training loop over any [`NonBlocking`] communicator; rank 0
/// (every rank with `every_rank_evaluates`, as under MPI) returns the
/// result.
pub(crate) fn rank_main(
    ds: &Dataset,
    run: &Run<'_>,
    comm: &mut dyn NonBlocking,
    every_rank_evaluates: bool,
) -> Result<Option<RunResult>, String> {
    let start = Instant::now();
    let mut replica = Replica::new(ds, run, (0, String::new()))?;
    let dense = replica.fm.dense.len();
    replica.dense_opt =
        crate::run::dense_optimizer(run.model, dense, replica.fm.tower.as_ref(), ds.train.len())?;
    replica.ranks = Some(Ranks {
        evaluates: every_rank_evaluates || comm.rank() == 0,
        // An MPI communicator lives for the whole process: count this run only.
        stats_before: comm.stats(),
        comm,
        bytes: CommBytes::default(),
        dense_groups: Default::default(),
        ids: Vec::new(),
        rows: Vec::new(),
    });
    crate::run::train_loop(run, replica, start)
}

/// A full replica of the model and its sparse optimizer, alone in this
/// process or one of the data-parallel ranks ([`Ranks`]).
pub(crate) struct Replica<'a> {
    ds: &'a Dataset,
    run: &'a Run<'a>,
    /// The other replicas (`None`: a single process).
    ranks: Option<Ranks<'a>>,
    fm: Fm,
    opt: Optimizer,
    /// The dense optimizer: `--dense-opt` on ranks, f32 Adam in a single
    /// process (`run::single_dense_optimizer`).
    dense_opt: DenseOptimizer,
    /// A single process's checkpoint fingerprint and option lines.
    fingerprint: (u64, String),
    /// Reused across steps.
    grads: Grads,
}

/// What a replica on one of several ranks adds.
struct Ranks<'a> {
    comm: &'a mut dyn NonBlocking,
    /// Whether this rank evaluates and reports.
    evaluates: bool,
    stats_before: CommStats,
    bytes: CommBytes,
    /// Per-group dense telemetry (`--json`'s `dense_groups`).
    dense_groups: crate::dense_telemetry::DenseGroups,
    /// Every rank's rows of the step (reused).
    ids: Vec<u64>,
    rows: Vec<f32>,
}

impl<'a> Replica<'a> {
    /// `run`'s model and optimizers, as a single process (checkpoints with
    /// `fingerprint`); the ranks' part is added by [`rank_main`].
    ///
    /// Fails when the model or the optimizer cannot be built.
    pub(crate) fn new(
        ds: &'a Dataset,
        run: &'a Run<'a>,
        fingerprint: (u64, String),
    ) -> Result<Self, String> {
        let fm = build_model(ds, run.model)?;
        Ok(Self {
            ds,
            run,
            ranks: None,
            opt: optim::build(run.spec, ds.rows, fm.dim(), run.model.seed)?,
            dense_opt: crate::run::single_dense_optimizer(run.model, fm.dense.len())?,
            grads: Grads::new(&fm, ds.rows),
            fm,
            fingerprint,
        })
    }
}

impl Ranks<'_> {
    /// All-gather every rank's `(row id, gradient)` list into `ids` and
    /// `rows` (`basis_shard::route::all_gather_rows`).
    fn gather(&mut self, grads: &Grads, d: usize) -> Result<(), String> {
        let rank = self.comm.rank();
        let mine = (&grads.ids[..], &grads.rows[..], d);
        basis_shard::route::all_gather_rows(&mut *self.comm, mine, &mut self.ids, &mut self.rows)
            .map_err(|e| format!("rank {rank}: {e}"))
    }
}

impl Strategy for Replica<'_> {
    fn examples(&self) -> usize {
        self.ds.train.len()
    }

    fn bar(&self) -> (String, bool) {
        match &self.ranks {
            None => (String::new(), true),
            Some(r) => (format!(" ×{}", r.comm.size()), r.comm.rank() == 0),
        }
    }

    /// A single process's file (the dispatch refuses `--checkpoint` with ranks).
    fn restore(&mut self, path: &Path) -> Result<Progress, String> {
        let (fp, options) = &self.fingerprint;
        let c = checkpoint::load(path, *fp, options).map_err(|e| e.to_string())?;
        let fm = &mut self.fm;
        if c.table.len() != fm.table.len() || c.dense.len() != fm.dense.len() {
            let e = checkpoint::CheckpointError::Mismatch {
                path: path.to_path_buf(),
                differs: None,
            };
            return Err(e.to_string());
        }
        fm.table = c.table;
        fm.dense = c.dense;
        self.dense_opt
            .import_state(&c.dense_opt)
            .map_err(|e| format!("checkpoint {}: dense optimizer state: {e}", path.display()))?;
        self.opt
            .import_state(&c.optimizer)
            .map_err(|e| format!("checkpoint {}: optimizer state: {e}", path.display()))?;
        Ok(Progress {
            epoch: c.epoch,
            rng: Rng::new(c.rng_state),
            nonfinite: c.nonfinite,
            curve: serde_json::from_str(&c.history)
                .map_err(|e| format!("checkpoint history: {e}"))?,
        })
    }

    fn step(&mut self, batch: &[usize], at: StepAt) -> Result<Step, String> {
        let (m, d, label) = (self.run.model, self.fm.dim(), &self.run.spec.label);
        let (rank, p) = self
            .ranks
            .as_ref()
            .map_or((0, 1), |r| (r.comm.rank(), r.comm.size()));
        let (g, fm) = (&mut self.grads, &mut self.fm);
        let ex = &self.ds.train;
        // `--dense-overlap on`: the dense groups begin inside the backward
        // pass, each as soon as its gradient is final (`dense_opt::Hook`),
        // so the tower's exchanges overlap the rest of the backward pass,
        // the sparse all-gather and the sparse step. The all-gather then
        // queues behind them on the FIFO communication thread: every rank
        // issues the same order, so the collectives still match; the
        // split step's "nothing in between" is for a communicator that
        // completes out of order, which this thread never does.
        let mut hooked = None;
        if p == 1 {
            g.compute(fm, ex, batch, m.l2)?;
        } else if let Some(r) = self
            .ranks
            .as_mut()
            .filter(|_| m.dense_overlap == DenseOverlap::On)
        {
            let before = r.comm.stats();
            let mut hook = self.dense_opt.hook(&mut *r.comm, p as f32);
            let res = g.compute_scaled_hooked(
                fm,
                ex,
                &share(batch, rank, p),
                (m.l2, batch.len()),
                &mut |range, grad| hook.offer(range, grad),
            );
            // A failed gradient pass: the groups begun are dropped (their
            // requests complete in the background, the optimizer unchanged).
            res?;
            let begun = hook.begun(&g.dense);
            // The sparse all-gather would wait for the dense requests queued
            // before it anyway (FIFO); a barrier (no bytes) waits for them
            // first so that both byte counts stay each their own.
            r.comm.barrier().map_err(|e| format!("rank {rank}: {e}"))?;
            hooked = Some((begun, r.comm.stats().since(&before).bytes_sent));
        } else {
            g.compute_scaled(fm, ex, &share(batch, rank, p), m.l2, batch.len())?;
        }
        let Some(ranks) = &mut self.ranks else {
            crate::validate::finite_loss(g.loss, at.epoch, at.step, label)?;
            let rep = self.opt.step(&g.ids, &g.rows, &mut fm.table, d)?;
            self.dense_opt
                .step(&mut SingleRank::default(), &mut fm.dense, &g.dense, 1.0)
                .map_err(|e| dense_step_error(&e, &g.dense, at, "dense Adam"))?;
            let nonfinite = rep.rows_skipped_nonfinite as u64;
            return Ok(Step {
                loss: g.loss,
                nonfinite,
                dense: None,
            });
        };
        // Sparse: every rank steps the concatenation of all ranks' rows.
        let before_sparse = ranks.comm.stats().bytes_sent;
        ranks.gather(g, d)?;
        ranks.bytes.sparse += ranks.comm.stats().bytes_sent - before_sparse;
        // Dense: 1-bit Adam averages over ranks; our shares sum to the batch
        // mean. Begun before the sparse step, whose pass over the rows runs
        // while the dense exchanges fly (`--dense-overlap on`; the dense and
        // sparse parameters are disjoint, so the order changes no bit).
        let comm = &mut *ranks.comm;
        let factor = p as f32;
        let who = format!("rank {rank}: {:?}", m.dense_opt);
        let dense_err = |e: String| dense_step_error(&e, &g.dense, at, &who);
        let (begun, early) = match hooked {
            Some((begun, early)) => (begun.map_err(dense_err)?, Some(early)),
            None => (crate::dense_opt::Begun::default(), None),
        };
        let complete_at = comm.stats();
        let rep = self.opt.step(&ranks.ids, &ranks.rows, &mut fm.table, d);
        let dense = self
            .dense_opt
            .complete(comm, begun, &mut fm.dense, (&g.dense, factor))
            .map_err(dense_err)?;
        let rep = rep?;
        // Begun in the backward pass, the split step's own count also has
        // the all-gather made between: the dense bytes are the ones before
        // the barrier and the ones of `complete`.
        ranks.bytes.dense += early.map_or(dense.bytes_sent, |b| {
            b + comm.stats().since(&complete_at).bytes_sent
        });
        if let Some(r) = &dense.report {
            ranks.dense_groups.observe(r);
        }
        // Summed in f64 as the single process sums it (one rank: its bits).
        let loss = comm_traits::sum_f64_in_rank_order(comm, g.loss)
            .map_err(|e| format!("rank {rank}: {e}"))?;
        // The summed loss is the same on every rank: all stop together.
        crate::validate::finite_loss(loss, at.epoch, at.step, label)?;
        Ok(Step {
            loss,
            nonfinite: rep.rows_skipped_nonfinite as u64,
            dense: m.progress_dense.then(|| dense.progress_field()),
        })
    }

    fn evaluate(&mut self, epoch: u32, train_loss: f64) -> Result<Option<EpochPoint>, String> {
        let evaluates = self.ranks.as_ref().is_none_or(|r| r.evaluates);
        Ok(evaluates.then(|| evaluate(&self.fm, self.ds, epoch, train_loss)))
    }

    /// A single process's file (the dispatch refuses `--checkpoint` with ranks).
    fn save(&mut self, path: &Path, progress: &Progress) -> Result<(), String> {
        let c = Checkpoint {
            fingerprint: self.fingerprint.0,
            epoch: progress.epoch,
            rng_state: progress.rng.state(),
            nonfinite: progress.nonfinite,
            table: self.fm.table.clone(),
            dense: self.fm.dense.clone(),
            dense_opt: self.dense_opt.export_state(),
            optimizer: self.opt.export_state(),
            history: serde_json::to_string(&progress.curve).map_err(|e| e.to_string())?,
            options: self.fingerprint.1.clone(),
            shard: None,
        };
        checkpoint::save(path, &c).map_err(|e| e.to_string())
    }

    fn finish(self, progress: Progress, timing: Timing) -> Result<Option<RunResult>, String> {
        let kind = self.run.model.dense_opt;
        let (bytes, dense_freeze_step, dense_groups) = match self.ranks {
            Some(r) if !r.evaluates => return Ok(None),
            Some(r) => (
                Some(CommBytes {
                    total: r.comm.stats().since(&r.stats_before).bytes_sent,
                    ..r.bytes
                }),
                self.dense_opt.freeze_step_reached(kind),
                Some(r.dense_groups.0),
            ),
            None => (None, None, None),
        };
        let Progress {
            curve, nonfinite, ..
        } = progress;
        let (ds, fm) = (self.ds, &self.fm);
        let last = curve.last().cloned();
        let final_metrics = last.unwrap_or_else(|| evaluate(fm, ds, 0, f64::NAN));
        let mut out = finish(
            ds,
            self.run,
            fm,
            &self.opt,
            curve,
            final_metrics,
            nonfinite,
            timing.start,
            bytes,
        );
        out.dense_freeze_step = dense_freeze_step;
        out.dense_groups = dense_groups;
        Ok(Some(out))
    }
}

/// Whether this process prints and writes results (false on MPI ranks > 0).
pub(crate) fn is_output_rank() -> bool {
    #[cfg(feature = "mpi")]
    {
        mpi::rank() == 0
    }
    #[cfg(not(feature = "mpi"))]
    {
        true
    }
}

/// The MPI path (`mpi` feature): under `mpirun` (Open MPI sets
/// `OMPI_COMM_WORLD_SIZE`), `--workers P` uses one `MpiComm` per process
/// instead of P threads; `P` must equal the number of MPI processes. Every
/// rank trains and evaluates its (identical) replica; only rank 0 prints.
#[cfg(feature = "mpi")]
pub(crate) mod mpi {
    use crate::eager::Eager;
    use basis_std::overlap::Overlapped;
    use comm_mpi::MpiComm;
    use comm_traits::{Communicator, NonBlocking};
    use core::cell::RefCell;
    use core::mem::ManuallyDrop;

    /// The process's communicator: used in place, or built and used on a
    /// communication thread (`--dense-overlap on`; MPI is then initialised
    /// and called on that thread only).
    enum Process {
        Plain(MpiComm),
        Overlapped(Overlapped),
    }

    impl Process {
        fn rank(&self) -> usize {
            match self {
                Self::Plain(c) => c.rank(),
                Self::Overlapped(c) => c.rank(),
            }
        }
    }

    // `ManuallyDrop`: `std::process::exit` on the main thread runs its
    // thread-local destructors (glibc's `exit` calls them), and dropping an
    // `MpiComm` there calls `MPI_Finalize`, which waits for every other
    // rank — all of them blocked in the collective this rank left. A rank
    // exiting by any path other than [`finish`] must leave MPI unfinalized,
    // as a killed process does, so `mpirun` sees it go and ends the job.
    // (An `Overlapped` left undropped leaves its thread, and MPI, as is.)
    std::thread_local! {
        static COMM: RefCell<Option<ManuallyDrop<Process>>> = const { RefCell::new(None) };
    }

    /// Initialise MPI when launched by `mpirun` (on a communication thread
    /// with `overlap`); returns an error message on failure.
    pub(crate) fn init(overlap: bool) -> Result<(), String> {
        if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_none()
            && std::env::var_os("PMI_SIZE").is_none()
        {
            return Ok(());
        }
        let comm = if overlap {
            Process::Overlapped(Overlapped::spawn(MpiComm::init).map_err(|e| e.to_string())?)
        } else {
            Process::Plain(MpiComm::init().map_err(|e| e.to_string())?)
        };
        COMM.with(|c| *c.borrow_mut() = Some(ManuallyDrop::new(comm)));
        Ok(())
    }

    /// Finalise MPI (drops the communicator): the only place it is dropped.
    pub(crate) fn finish() {
        COMM.with(|c| drop(c.borrow_mut().take().map(ManuallyDrop::into_inner)));
    }

    /// This process's rank (0 without MPI).
    pub(crate) fn rank() -> usize {
        COMM.with(|c| c.borrow().as_ref().map_or(0, |m| m.rank()))
    }

    /// Run `f` on this process's communicator, or `None` without `mpirun`.
    pub(crate) fn with_comm<T>(f: impl FnOnce(&mut dyn NonBlocking) -> T) -> Option<T> {
        COMM.with(|c| {
            c.borrow_mut().as_mut().map(|m| match &mut **m {
                Process::Plain(comm) => f(&mut Eager::new(comm)),
                Process::Overlapped(comm) => f(comm),
            })
        })
    }

    /// `f` on this process's communicator when launched by `mpirun`
    /// (`None` otherwise); fails when `mpirun` started other than `p`
    /// processes.
    pub(crate) fn with_ranks<T>(
        p: usize,
        f: impl FnOnce(&mut dyn NonBlocking) -> Result<T, String>,
    ) -> Option<Result<T, String>> {
        with_comm(|comm| {
            if comm.size() != p {
                return Err(format!(
                    "--workers {p} but mpirun started {} processes",
                    comm.size()
                ));
            }
            f(comm)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::run::{StepAt, dense_step_error, share, single_dense_optimizer};
    use clap::Parser;
    use comm_traits::SingleRank;

    /// The single process's dense Adam refuses a non-finite gradient
    /// (`onebit-adam`'s finiteness check) with the parameters unchanged,
    /// and the CLI says the run diverged, where and what to lower; a
    /// finite gradient then steps as before the refusal.
    #[test]
    fn a_non_finite_dense_gradient_stops_the_run_clearly() {
        let a = crate::cli::Cli::try_parse_from(["basis", "train"]).unwrap();
        let crate::cli::Command::Train(a) = a.command else {
            unreachable!("a train command")
        };
        let mut opt = single_dense_optimizer(&a.model, 3).unwrap();
        let mut params = vec![0.5f32, -1.0, 2.0];
        let at = StepAt {
            batch_len: 8,
            epoch: 2,
            step: 7,
        };
        for bad in [f32::NAN, f32::INFINITY] {
            let grad = [0.1, bad, 0.3];
            let e = opt
                .step(&mut SingleRank::default(), &mut params, &grad, 1.0)
                .unwrap_err();
            let msg = dense_step_error(&e, &grad, at, "dense Adam");
            assert!(
                msg.starts_with("training diverged: the dense gradient became")
                    && msg.contains("(parameter 1) at epoch 2, step 7")
                    && msg.contains("dense Adam: ")
                    && msg.contains("--dense-lr"),
                "{msg}"
            );
            assert_eq!(params, [0.5, -1.0, 2.0]);
        }
        // Another refusal (a wrong length) keeps the library's reason.
        let e = opt
            .step(&mut SingleRank::default(), &mut params, &[0.1], 1.0)
            .unwrap_err();
        let msg = dense_step_error(&e, &[0.1], at, "dense Adam");
        assert!(
            msg.starts_with("dense Adam: ") && !msg.contains("diverged"),
            "{msg}"
        );
        opt.step(
            &mut SingleRank::default(),
            &mut params,
            &[0.1, 0.2, 0.3],
            1.0,
        )
        .unwrap();
        assert!(params.iter().zip([0.5, -1.0, 2.0]).all(|(p, q)| *p < q));
    }

    #[test]
    fn shares_partition_the_batch() {
        let batch: Vec<usize> = (10..27).collect();
        let mut all: Vec<usize> = (0..3).flat_map(|r| share(&batch, r, 3)).collect();
        all.sort_unstable();
        assert_eq!(all, batch);
    }
}
