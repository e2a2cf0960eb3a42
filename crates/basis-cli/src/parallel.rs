//! Data-parallel training over `P` ranks (`--workers P`): in-process threads
//! connected by `basis-std`'s `LocalComm`.
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
//!   `--dense-opt onebit-adam` (default) is 1-bit Adam (`onebit-adam`) —
//!   full-precision warm-up for the first `--dense-warmup` of the steps
//!   (default 20 %), then compressed
//!   momentum all-reduce with error feedback; `--dense-opt adam` is f32 Adam
//!   on the all-reduced gradient at every step (the baseline).
//!
//! The bytes each rank sends (logical collective bytes, `CommStats`) are
//! reported, in total and split into the sparse exchange and the dense
//! optimizer. Rank 0 evaluates. Checkpoints are not supported with `P > 1`.
//! With the `mpi` feature under `mpirun`, the ranks are MPI processes
//! (the `mpi` module) running the same [`rank_main`].

use crate::data::Dataset;
use crate::model::Grads;
use crate::optim;
use crate::rng::Rng;
use crate::run::{CommBytes, EpochPoint, Run, RunResult, evaluate, finish};
use basis_std::local::LocalComm;
use comm_traits::Communicator;
use core::time::Duration;
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
    if let Some(result) = mpi::train(ds, run) {
        return result;
    }
    let comms = LocalComm::group_with_timeout(p, Duration::from_secs(300));
    let results: Vec<Result<Option<RunResult>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut comm| s.spawn(move || rank_main(ds, run, &mut comm, false)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect()
    });
    let mut out = None;
    for r in results {
        if let Some(res) = r? {
            out = Some(res);
        }
    }
    out.ok_or_else(|| "rank 0 produced no result".into())
}

/// Shares of a batch: rank `r` takes positions `r, r+P, …`.
fn share(batch: &[usize], rank: usize, p: usize) -> Vec<usize> {
    batch.iter().skip(rank).step_by(p).copied().collect()
}

/// One rank's training loop over any [`Communicator`]; rank 0 (every rank
/// with `every_rank_evaluates`, as under MPI) returns the result.
pub(crate) fn rank_main(
    ds: &Dataset,
    run: &Run<'_>,
    comm: &mut dyn Communicator,
    every_rank_evaluates: bool,
) -> Result<Option<RunResult>, String> {
    let evaluates = every_rank_evaluates || comm.rank() == 0;
    // An MPI communicator lives for the whole process: count this run only.
    let stats_before = comm.stats();
    let m = run.model;
    let (rank, p) = (comm.rank(), comm.size());
    let start = Instant::now();
    let mut fm = crate::run::build_model(ds, m)?;
    let d = fm.dim();
    let mut opt = optim::build(run.spec, ds.rows, d, m.seed)?;
    let n = ds.train.len();
    let steps_total = (n.div_ceil(m.batch) * m.epochs as usize) as u64;
    let mut dense_opt =
        m.dense_opt
            .build(fm.dense.len(), m.dense_lr, steps_total, m.dense_warmup)?;
    let mut bytes = CommBytes::default();
    let mut rng = Rng::derive(m.seed, 0x0DE5);
    let mut grads = Grads::new(&fm, ds.rows);
    let mut order: Vec<usize> = (0..n).collect();
    let mut curve: Vec<EpochPoint> = Vec::new();
    let mut nonfinite = 0u64;
    let comm_err = |e: comm_traits::CommError| format!("rank {rank}: {e}");
    let row_bytes = 8 + 4 * d;
    let (mut ids, mut rows): (Vec<u64>, Vec<f32>) = (Vec::new(), Vec::new());
    for epoch in 0..m.epochs {
        let bar = crate::progress::count(
            n.div_ceil(m.batch) as u64,
            &format!("{} ×{p} epoch {}/{}", run.spec.label, epoch + 1, m.epochs),
            run.progress && rank == 0,
        );
        for (i, o) in order.iter_mut().enumerate() {
            *o = i;
        }
        rng.shuffle(&mut order);
        let mut loss_sum = 0.0f64;
        for (step, batch) in order.chunks(m.batch).enumerate() {
            let mine = share(batch, rank, p);
            grads.compute_scaled(&fm, &ds.train, &mine, m.l2, batch.len())?;
            // Sparse: all-gather counts, then the padded (id, gradient) lists.
            let before_sparse = comm.stats().bytes_sent;
            let mut count = [0u8; 8];
            count.copy_from_slice(&(grads.ids.len() as u64).to_le_bytes());
            let mut counts = vec![0u8; 8 * p];
            comm.all_gather(&count, &mut counts).map_err(comm_err)?;
            let counts: Vec<usize> = counts
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as usize)
                .collect();
            let max = counts.iter().copied().max().unwrap_or(0);
            let mut send = vec![0u8; max * row_bytes];
            for (k, &id) in grads.ids.iter().enumerate() {
                let at = k * row_bytes;
                send[at..at + 8].copy_from_slice(&id.to_le_bytes());
                for (j, g) in grads.rows[k * d..(k + 1) * d].iter().enumerate() {
                    send[at + 8 + 4 * j..at + 12 + 4 * j].copy_from_slice(&g.to_le_bytes());
                }
            }
            let mut recv = vec![0u8; max * row_bytes * p];
            comm.all_gather(&send, &mut recv).map_err(comm_err)?;
            ids.clear();
            rows.clear();
            for (r, &c) in counts.iter().enumerate() {
                for k in 0..c {
                    let at = (r * max + k) * row_bytes;
                    let rec = &recv[at..at + row_bytes];
                    ids.push(u64::from_le_bytes(rec[..8].try_into().unwrap_or([0; 8])));
                    rows.extend(
                        rec[8..]
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                    );
                }
            }
            bytes.sparse += comm.stats().bytes_sent - before_sparse;
            let rep = opt.step(&ids, &rows, &mut fm.table, d)?;
            nonfinite += rep.rows_skipped_nonfinite as u64;
            // Dense: 1-bit Adam averages over ranks; our shares sum to the batch mean.
            let rep = dense_opt
                .step_with_grad_scaled(comm, &mut fm.dense, &grads.dense, p as f32)
                .map_err(|e| format!("rank {rank}: {:?}: {e}", m.dense_opt))?;
            bytes.dense += rep.bytes.bytes_sent;
            let mut loss = [grads.loss as f32];
            comm.all_reduce_sum(&mut loss).map_err(comm_err)?;
            loss_sum += f64::from(loss[0]);
            // The summed loss is the same on every rank: all stop together.
            crate::validate::finite_loss(f64::from(loss[0]), epoch + 1, step + 1, &run.spec.label)?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        if evaluates {
            curve.push(evaluate(&fm, ds, epoch + 1, loss_sum / n as f64));
        }
    }
    if !evaluates {
        return Ok(None);
    }
    let final_metrics = curve
        .last()
        .cloned()
        .unwrap_or_else(|| evaluate(&fm, ds, 0, f64::NAN));
    bytes.total = comm.stats().since(&stats_before).bytes_sent;
    let mut out = finish(
        ds,
        run,
        &fm,
        &opt,
        curve,
        final_metrics,
        nonfinite,
        start,
        Some(bytes),
    );
    out.dense_freeze_step = crate::deep::freeze_step_reached(m.dense_opt, &dense_opt);
    Ok(Some(out))
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
    use super::rank_main;
    use crate::data::Dataset;
    use crate::run::{Run, RunResult};
    use comm_mpi::MpiComm;
    use comm_traits::Communicator;
    use core::cell::RefCell;
    use core::mem::ManuallyDrop;

    // `ManuallyDrop`: `std::process::exit` on the main thread runs its
    // thread-local destructors (glibc's `exit` calls them), and dropping an
    // `MpiComm` there calls `MPI_Finalize`, which waits for every other
    // rank — all of them blocked in the collective this rank left. A rank
    // exiting by any path other than [`finish`] must leave MPI unfinalized,
    // as a killed process does, so `mpirun` sees it go and ends the job.
    std::thread_local! {
        static COMM: RefCell<Option<ManuallyDrop<MpiComm>>> = const { RefCell::new(None) };
    }

    /// Initialise MPI when launched by `mpirun`; returns an error message on failure.
    pub(crate) fn init() -> Result<(), String> {
        if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_none()
            && std::env::var_os("PMI_SIZE").is_none()
        {
            return Ok(());
        }
        let comm = MpiComm::init().map_err(|e| e.to_string())?;
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
    pub(crate) fn with_comm<T>(f: impl FnOnce(&mut MpiComm) -> T) -> Option<T> {
        COMM.with(|c| c.borrow_mut().as_mut().map(|m| f(m)))
    }

    /// Train over MPI, or `None` when not launched by `mpirun`.
    pub(crate) fn train(ds: &Dataset, run: &Run<'_>) -> Option<Result<RunResult, String>> {
        COMM.with(|c| {
            let mut c = c.borrow_mut();
            let comm: &mut MpiComm = c.as_mut()?;
            if comm.size() != run.model.workers {
                return Some(Err(format!(
                    "--workers {} but mpirun started {} processes",
                    run.model.workers,
                    comm.size()
                )));
            }
            Some(
                rank_main(ds, run, comm, true)
                    .and_then(|r| r.ok_or_else(|| "no result".to_string())),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_partition_the_batch() {
        let batch: Vec<usize> = (10..27).collect();
        let mut all: Vec<usize> = (0..3).flat_map(|r| share(&batch, r, 3)).collect();
        all.sort_unstable();
        assert_eq!(all, batch);
    }
}
