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
//! arithmetic) gives the same bits too. Planning stays serial, but is fed a
//! batch whose duplicates were already merged in parallel (in the exact
//! order and arithmetic of the serial merge), which halves its work.

use balanced_hash::Bucketer;
use basis_core::kernel::{BucketJob, KernelParams, StepPlan, update_bucket};
use basis_core::{Basis, DenseTable, RowAccess, StepReport};
use rayon::prelude::*;

use crate::Error;

/// Jobs handed to one rayon task at least (a job is one bucket's few rows).
const MIN_JOBS_PER_TASK: usize = 32;
/// Rows handed to one rayon task at least when applying updates.
const MIN_ROWS_PER_TASK: usize = 64;

/// Phase 3 on the current rayon pool.
fn run_jobs(p: &KernelParams, jobs: Vec<BucketJob<'_>>) {
    jobs.into_par_iter()
        .with_min_len(MIN_JOBS_PER_TASK)
        .for_each(|job| update_bucket(p, job));
}

/// A batch with duplicate ids merged exactly as `basis-core` merges them:
/// rows sorted by id, ties by the gradient's bits (`total_cmp`, element by
/// element), each id's rows summed in that order into a copy of its first
/// row. Sorting and summing run in parallel.
///
/// `Basis::plan` fed the merged batch sees each id once, so it sums nothing
/// and every later phase sees the same merged rows: the step's bits do not
/// change, but the serial planning does half the work (its sort finds the
/// ids already in order). `None` when `grads` is not `ids.len() · dim` long
/// (the plan then reports the error on the original batch).
fn premerge(ids: &[u64], grads: &[f32], dim: usize) -> Option<(Vec<u64>, Vec<f32>)> {
    if dim == 0 || grads.len() != ids.len().checked_mul(dim)? {
        return None;
    }
    let row = |k: usize| &grads[k * dim..(k + 1) * dim];
    // Sort by id (plain integer keys), then order each run of equal ids by
    // the rows' bits. Pairs need no tie order: `a + b` and `b + a` are the
    // same f32, so only runs of three or more are sorted.
    let mut keyed: Vec<(u64, usize)> = ids.iter().copied().zip(0..).collect();
    keyed.par_sort_unstable();
    let mut order: Vec<usize> = keyed.iter().map(|&(_, k)| k).collect();
    let mut run = 0;
    while run < keyed.len() {
        let id = keyed[run].0;
        let end = run + keyed[run..].iter().take_while(|&&(other, _)| other == id).count();
        if end - run > 2 {
            order[run..end].sort_unstable_by(|&a, &b| {
                row(a)
                    .iter()
                    .zip(row(b))
                    .map(|(x, y)| x.total_cmp(y))
                    .find(|o| o.is_ne())
                    .unwrap_or(core::cmp::Ordering::Equal)
            });
        }
        run = end;
    }
    // Group starts: positions in `order` where a new id begins.
    let mut starts: Vec<usize> = Vec::with_capacity(order.len());
    for (pos, &k) in order.iter().enumerate() {
        if pos == 0 || ids[order[pos - 1]] != ids[k] {
            starts.push(pos);
        }
    }
    let merged_ids: Vec<u64> = starts.iter().map(|&pos| ids[order[pos]]).collect();
    let mut merged = vec![0.0f32; starts.len() * dim];
    merged
        .par_chunks_mut(dim)
        .enumerate()
        .with_min_len(MIN_ROWS_PER_TASK)
        .for_each(|(group, acc)| {
            let end = starts.get(group + 1).copied().unwrap_or(order.len());
            let members = &order[starts[group]..end];
            acc.copy_from_slice(row(members[0]));
            for &k in &members[1..] {
                for (a, &g) in acc.iter_mut().zip(row(k)) {
                    *a += g;
                }
            }
        });
    Some((merged_ids, merged))
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
    let mut plan = match premerge(ids, grads, basis.config().dim) {
        Some((ids, grads)) => basis.plan(&ids, &grads, table)?,
        None => basis.plan(ids, grads, table)?,
    };
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
    let mut plan = match premerge(ids, grads, dim) {
        Some((ids, grads)) => basis.plan(&ids, &grads, &mut table)?,
        None => basis.plan(ids, grads, &mut table)?,
    };
    basis.run_plan(&mut plan, run_jobs);
    // `finish` applies rows as `row *= 1 − lr·λ; row −= update`.
    let decay = basis.config().lr * basis.config().weight_decay;
    apply_rows(&plan, data, dim, decay);
    // The rows are done: `finish` sees no rows (it skips rows it cannot
    // find) and only stores the scalars and counts the step.
    Ok(basis.finish(plan, &mut NoRows(dim)))
}

#[doc(hidden)]
#[allow(missing_docs)]
pub fn par_step_dense_plain<H: Bucketer>(basis: &mut Basis<H>, ids: &[u64], grads: &[f32], data: &mut [f32]) -> Result<StepReport, Error> {
    let dim = basis.config().dim;
    let mut table = DenseTable::new(data, dim)?;
    let mut plan = basis.plan(ids, grads, &mut table)?;
    basis.run_plan(&mut plan, run_jobs);
    let decay = basis.config().lr * basis.config().weight_decay;
    apply_rows(&plan, data, dim, decay);
    Ok(basis.finish(plan, &mut NoRows(dim)))
}

/// Applies every planned row's update to `data`, rows in parallel.
fn apply_rows(plan: &StepPlan, data: &mut [f32], dim: usize, decay: f32) {
    // Carve `data` into the planned rows (distinct ids, all in range: the
    // plan checked them against this table) in id order.
    let mut order: Vec<(u64, usize)> = plan.ids().iter().copied().zip(0..).collect();
    order.sort_unstable();
    let mut rows: Vec<(&mut [f32], usize)> = Vec::with_capacity(order.len());
    let mut rest = data;
    let mut offset = 0usize;
    for (id, k) in order {
        let Some(start) = usize::try_from(id).ok().and_then(|i| i.checked_mul(dim)) else {
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

/// `row *= 1 − decay` (when decay ≠ 0), then `row −= update`: the exact
/// arithmetic of `basis-core`'s serial apply, so the bits agree.
fn apply_row(row: &mut [f32], update: &[f32], decay: f32) {
    if decay != 0.0 {
        let keep = 1.0 - decay;
        row.iter_mut().for_each(|x| *x *= keep);
    }
    for (x, &u) in row.iter_mut().zip(update) {
        *x -= u;
    }
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
