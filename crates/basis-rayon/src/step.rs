//! The BASIS step with its per-bucket phase (and, for dense tables, the row
//! updates) run on rayon, bit-identical to the serial `Basis::step`.
//!
//! `basis-core` splits a step into phases (see `basis_core::kernel`):
//! plan (validate, merge duplicates, group rows by bucket) → per-bucket
//! kernel → finish (store scalars, apply rows). The per-bucket jobs own
//! disjoint slices of the state and each job reduces its rows in id order,
//! so running them on any number of threads in any order gives the same
//! bits. Rows are distinct after merging, so applying their updates in
//! parallel (each row written by exactly one task, with the serial
//! arithmetic) gives the same bits too. Planning runs its sorts and per-row
//! work (summing duplicates, gathering rows into bucket order) on rayon
//! through [`Rayon`], an `Executor` whose pieces own disjoint outputs;
//! only bucket assignment and the table checks stay on the calling thread.

use balanced_hash::Bucketer;
use basis_core::exec::Executor;
use basis_core::kernel::{BucketJob, KernelParams, StepPlan, apply_row, update_bucket};
use basis_core::{Basis, DenseTable, ExactAdam, RowAccess, StepReport};
use core::cmp::Ordering;
use rayon::prelude::*;

use crate::Error;

/// Jobs handed to one rayon task at least (a job is one bucket's few rows).
const MIN_JOBS_PER_TASK: usize = 32;
/// Rows handed to one rayon task at least when applying updates.
const MIN_ROWS_PER_TASK: usize = 64;
/// Shortest slice [`Rayon`] sorts in parallel.
const PAR_SORT_MIN: usize = 1 << 14;

/// Planning's data-parallel pieces on the current rayon pool
/// (`basis_core::exec::Executor`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rayon;

impl Executor for Rayon {
    fn sort_by<T, F>(&self, items: &mut [T], cmp: F)
    where
        T: Send,
        F: Fn(&T, &T) -> Ordering + Sync + Send,
    {
        // Below this a parallel sort lost to the serial one in
        // `examples/step_phases` (waking a pool thread costs ~0.1 ms on a VM).
        if items.len() < PAR_SORT_MIN {
            items.sort_unstable_by(cmp);
        } else {
            items.par_sort_unstable_by(cmp);
        }
    }

    fn for_each<T, F>(&self, items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send,
    {
        items.into_par_iter().for_each(f);
    }
}

/// Phase 3 on the current rayon pool.
fn run_jobs(p: &KernelParams, jobs: Vec<BucketJob<'_>>) {
    jobs.into_par_iter()
        .with_min_len(MIN_JOBS_PER_TASK)
        .for_each(|job| update_bucket(p, job));
}

/// One BASIS step over any row table, the per-bucket kernels on the current
/// rayon pool (choose the thread count with `ThreadPool::install`). Rows are
/// then applied serially through `table`. Bit-identical to
/// `SparseOptimizer::step` for every thread count.
///
/// # Errors
/// [`Error::Step`] exactly when the serial step fails; nothing changes then.
pub fn par_step<H: Bucketer>(
    basis: &mut Basis<H>,
    ids: &[u64],
    grads: &[f32],
    table: &mut dyn RowAccess,
) -> Result<StepReport, Error> {
    let mut plan = basis.plan_with(&Rayon, ids, grads, table)?;
    basis.run_plan(&mut plan, run_jobs);
    Ok(basis.finish(plan, table))
}

/// One BASIS step over a dense row-major table (`data[i·d .. (i+1)·d]` is
/// row `i`): the per-bucket kernels *and* the row updates run on the current
/// rayon pool. Bit-identical to `SparseOptimizer::step` on a
/// [`DenseTable`] over the same slice, for every thread count.
///
/// # Errors
/// [`Error::Table`] when `data` is not whole rows of `dim`, [`Error::Step`]
/// exactly when the serial step fails; nothing changes then.
pub fn par_step_dense<H: Bucketer>(
    basis: &mut Basis<H>,
    ids: &[u64],
    grads: &[f32],
    data: &mut [f32],
) -> Result<StepReport, Error> {
    let dim = basis.config().dim;
    let mut table = DenseTable::new(data, dim)?;
    let mut plan = basis.plan_with(&Rayon, ids, grads, &mut table)?;
    basis.run_plan(&mut plan, run_jobs);
    // `finish` applies rows as `row *= 1 − lr·λ; row −= update`.
    let decay = basis.config().lr * basis.config().weight_decay;
    apply_rows(&plan, data, dim, decay);
    // The rows are done: `finish` sees no rows (it skips rows it cannot
    // find) and only stores the scalars and counts the step.
    Ok(basis.finish(plan, &mut NoRows(dim)))
}

/// One exact per-row Adam step (`basis_core::ExactAdam`, PyTorch's
/// `SparseAdam` math) over a dense row-major table, with the merge's sorts
/// and sums and the row updates on the current rayon pool
/// (`ExactAdam::step_dense_with` over [`Rayon`]): each merged row's moments
/// and table row are written by one task with the serial arithmetic.
/// Bit-identical to `SparseOptimizer::step` on a [`DenseTable`] over the
/// same slice, for every thread count. An optimizer with a sparse row index
/// runs the serial step.
///
/// # Errors
/// [`Error::Table`] when `data` is not whole rows of the optimizer's `dim`,
/// [`Error::Step`] exactly when the serial step fails; nothing changes then.
pub fn par_exact_adam_step_dense(
    adam: &mut ExactAdam,
    ids: &[u64],
    grads: &[f32],
    data: &mut [f32],
) -> Result<StepReport, Error> {
    let mut table = DenseTable::new(data, adam.config().dim)?;
    Ok(adam.step_dense_with(&Rayon, ids, grads, &mut table)?)
}

/// Applies every planned row's update to `data`, rows in parallel. (Fusing
/// this into the per-bucket tasks, rows then written in bucket order, was
/// measured no faster in `examples/step_phases`.)
fn apply_rows(plan: &StepPlan, data: &mut [f32], dim: usize, decay: f32) {
    // Carve `data` into the planned rows (distinct ids, all in range: the
    // plan checked them against this table), walking it forward in id order.
    let ids = plan.ids();
    let mut rows: Vec<(&mut [f32], usize)> = Vec::with_capacity(ids.len());
    let mut rest = data;
    let mut offset = 0usize;
    for &pos in plan.id_order() {
        let k = pos as usize;
        let Some(start) = usize::try_from(ids[k])
            .ok()
            .and_then(|i| i.checked_mul(dim))
        else {
            continue;
        };
        let Some(skip) = start.checked_sub(offset) else {
            continue;
        };
        if rest.len() < skip + dim {
            continue;
        }
        let (_, tail) = core::mem::take(&mut rest).split_at_mut(skip);
        let (row, tail) = tail.split_at_mut(dim);
        rows.push((row, k));
        rest = tail;
        offset = start + dim;
    }
    let updates = plan.updates();
    rows.into_par_iter()
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|(row, k)| apply_row(row, &updates[k * dim..(k + 1) * dim], decay));
}

/// A table with no rows: lets `finish` store scalars without touching rows.
#[derive(Debug)]
struct NoRows(usize);

impl RowAccess for NoRows {
    fn dim(&self) -> usize {
        self.0
    }

    fn row_mut(&mut self, _id: u64) -> Option<&mut [f32]> {
        None
    }
}

/// A rayon pool of `threads` threads, for `pool.install(|| par_step(..))`.
///
/// # Errors
/// [`Error::InvalidParams`] when `threads` is 0, [`Error::ThreadPool`] when
/// the operating system refuses the threads.
pub fn thread_pool(threads: usize) -> Result<rayon::ThreadPool, Error> {
    if threads == 0 {
        return Err(Error::InvalidParams);
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|_| Error::ThreadPool)
}
