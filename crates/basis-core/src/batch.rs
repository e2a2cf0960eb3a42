//! Phase 1, shared by every optimizer: validate a batch and merge duplicate
//! ids in a canonical order, so the result never depends on the batch order.

use alloc::vec::Vec;
use core::cmp::Ordering;
use core::mem::size_of;

use num_traits::Float;

use crate::config::NonFinitePolicy;
use crate::error::StepError;
use crate::exec::{Executor, ROWS_PER_ITEM, Sequential, row_chunks};
use crate::table::RowAccess;

/// The largest gradient magnitude a row may carry: `2^44 ≈ 1.8e13`. A larger
/// (or non-finite, NaN included) element makes the row count as non-finite
/// under [`NonFinitePolicy`]: its square (`> 2^88`) summed over the rows of a
/// bucket and the steps of an EMA could overflow an f32 second moment to +inf,
/// which would freeze that coordinate for every row of the bucket. Real
/// gradients sit many orders of magnitude below this bound.
pub const MAX_GRAD_ABS: f32 = 17_592_186_044_416.0;

/// A merged batch: distinct ids ascending, with their summed gradients.
///
/// Materialized (`MergeRules::materialize`), `grads` holds every kept row in
/// id order. Otherwise only runs of two or more rows are summed (into
/// `grads` at their run index) and a single-occurrence row stays in the
/// batch: [`Merged::row`] finds either, which saves copying most rows twice.
#[derive(Debug, Clone, Default)]
pub(crate) struct Merged {
    pub(crate) ids: Vec<u64>,
    pub(crate) grads: Vec<f32>,
    pub(crate) skipped: usize,
    materialized: bool,
    /// Per kept row (not materialized): its run.
    kept_runs: Vec<usize>,
    /// `(id, batch position)` sorted by id, then by the gradient's bits.
    order: Vec<(u64, usize)>,
    /// Where each run of equal ids starts in `order` (plus the end).
    runs: Vec<usize>,
    /// Per run: every merged value within `MAX_GRAD_ABS`.
    finite: Vec<bool>,
    /// Per batch row (not materialized): every value within `MAX_GRAD_ABS`.
    row_finite: Vec<bool>,
}

impl Merged {
    /// The step's report for an optimizer without shared buckets: the rows
    /// this merge kept and skipped.
    pub(crate) fn row_report(&self) -> crate::StepReport {
        crate::StepReport {
            rows_updated: self.ids.len(),
            rows_skipped_nonfinite: self.skipped,
            buckets_touched: 0,
        }
    }

    /// Bytes of the reusable buffers.
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.ids.capacity() * 8
            + self.grads.capacity() * 4
            + self.order.capacity() * size_of::<(u64, usize)>()
            + (self.runs.capacity() + self.kept_runs.capacity()) * size_of::<usize>()
            + self.finite.capacity()
            + self.row_finite.capacity()
    }

    /// Kept row `k`'s merged gradient, and whether the clip is still to be
    /// applied to a copy of it (a single-occurrence row read from the batch
    /// `input` when not materialized; sums are clipped already).
    pub(crate) fn row<'a>(&'a self, k: usize, input: &'a [f32], dim: usize) -> (&'a [f32], bool) {
        if self.materialized {
            return (&self.grads[k * dim..(k + 1) * dim], false);
        }
        let r = self.kept_runs[k];
        let (start, end) = (self.runs[r], self.runs[r + 1]);
        if end - start == 1 {
            let pos = self.order[start].1;
            (&input[pos * dim..(pos + 1) * dim], true)
        } else {
            (&self.grads[r * dim..(r + 1) * dim], false)
        }
    }
}

fn cmp_rows(a: &[f32], b: &[f32]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.total_cmp(y) {
            Ordering::Equal => {}
            o => return o,
        }
    }
    Ordering::Equal
}

/// What every merge needs besides the batch: the row width and the policy
/// knobs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MergeRules {
    pub(crate) dim: usize,
    pub(crate) policy: NonFinitePolicy,
    pub(crate) clip: Option<f32>,
    /// Copy every kept row into `Merged::grads` (else see [`Merged`]).
    pub(crate) materialize: bool,
}

/// [`merge_with`] on the calling thread.
///
/// # Errors
/// See [`StepError`].
#[allow(clippy::too_many_arguments)] // the step's inputs plus policy knobs; called from four places
pub(crate) fn merge(
    scratch: &mut Merged,
    ids: &[u64],
    grads: &[f32],
    dim: usize,
    policy: NonFinitePolicy,
    clip: Option<f32>,
    table: &mut dyn RowAccess,
    in_range: impl FnMut(u64) -> Result<(), StepError>,
) -> Result<Merged, StepError> {
    let rules = MergeRules {
        dim,
        policy,
        clip,
        materialize: true,
    };
    merge_with(&Sequential, scratch, ids, grads, rules, table, in_range)
}

/// Checks lengths and the table's dim, merges duplicates (sorted by id, ties
/// by the gradient's bits, summed in that order), applies the non-finite
/// policy and the optional L2 clip to each merged row, and checks every kept
/// id against `table` and `in_range`, in id order (so the first failing id
/// is reported). Nothing is mutated. The sort and the per-row sums run on
/// `exec`; the result's bits do not depend on it.
///
/// Takes the reusable buffers out of `scratch` for the merged batch; on an
/// error they go back into `scratch` (so a failed step keeps its capacity).
///
/// # Errors
/// See [`StepError`].
pub(crate) fn merge_with<E: Executor>(
    exec: &E,
    scratch: &mut Merged,
    ids: &[u64],
    grads: &[f32],
    rules: MergeRules,
    table: &mut dyn RowAccess,
    in_range: impl FnMut(u64) -> Result<(), StepError>,
) -> Result<Merged, StepError> {
    let mut out = core::mem::take(scratch);
    match merge_into(exec, &mut out, ids, grads, rules, table, in_range) {
        Ok(()) => Ok(out),
        Err(e) => {
            *scratch = out;
            Err(e)
        }
    }
}

fn merge_into<E: Executor>(
    exec: &E,
    out: &mut Merged,
    ids: &[u64],
    grads: &[f32],
    rules: MergeRules,
    table: &mut dyn RowAccess,
    mut in_range: impl FnMut(u64) -> Result<(), StepError>,
) -> Result<(), StepError> {
    let dim = rules.dim;
    let expected = ids.len().saturating_mul(dim);
    if grads.len() != expected {
        return Err(StepError::GradLength {
            expected,
            actual: grads.len(),
        });
    }
    if table.dim() != dim {
        return Err(StepError::DimMismatch {
            optimizer: dim,
            table: table.dim(),
        });
    }
    out.ids.clear();
    out.kept_runs.clear();
    out.skipped = 0;
    out.materialized = rules.materialize;
    let order = &mut out.order;
    order.clear();
    order.extend(ids.iter().copied().zip(0..));
    // By id first (inline keys: no indirection; ties may come out in any
    // order); `sum_runs` then sorts each run of equal ids by its rows' bits,
    // which makes the order canonical: rows still equal are identical, so
    // interchangeable.
    exec.sort_by(order, |a, b| a.0.cmp(&b.0));
    out.runs.clear();
    for k in 0..order.len() {
        if k == 0 || order[k].0 != order[k - 1].0 {
            out.runs.push(k);
        }
    }
    out.runs.push(order.len());
    let n = out.runs.len() - 1;
    sum_runs(exec, out, grads, rules);
    // Policy and table checks in id order; kept rows are compacted forward.
    let mut kept = 0usize;
    for r in 0..n {
        let id = out.order[out.runs[r]].0;
        if !out.finite[r] {
            match rules.policy {
                NonFinitePolicy::Skip => {
                    out.skipped += 1;
                    continue;
                }
                NonFinitePolicy::Error => return Err(StepError::NonFinite { id }),
            }
        }
        in_range(id)?;
        if table.row_mut(id).is_none() {
            return Err(StepError::MissingRow { id });
        }
        if !rules.materialize {
            out.kept_runs.push(r);
        } else if kept != r {
            out.grads.copy_within(r * dim..(r + 1) * dim, kept * dim);
        }
        out.ids.push(id);
        kept += 1;
    }
    if rules.materialize {
        out.grads.truncate(kept * dim);
    }
    Ok(())
}

/// Sorts each run of `out.order` by its rows' bits, then fills `out.grads`
/// with each run's sum (in that order) and `out.finite` with whether it
/// stayed within `MAX_GRAD_ABS`; finite sums are clipped. Work items own
/// disjoint runs.
fn sum_runs<E: Executor>(exec: &E, out: &mut Merged, grads: &[f32], rules: MergeRules) {
    let dim = rules.dim;
    let row = |k: usize| &grads[k * dim..(k + 1) * dim];
    let n = out.runs.len() - 1;
    if !rules.materialize {
        // Single-occurrence rows are only checked: check every batch row in
        // batch order, a sequential read that also brings the batch into
        // cache for the gather (in id order the reads would be random).
        let rows = grads.len() / dim.max(1);
        resize_for_overwrite(&mut out.row_finite, rows, false);
        let items: Vec<_> = grads
            .chunks(ROWS_PER_ITEM * dim.max(1))
            .zip(row_chunks(&mut out.row_finite, rows, 1))
            .collect();
        exec.for_each(items, |(g, ok)| {
            for (row, ok) in g.chunks_exact(dim.max(1)).zip(ok) {
                *ok = row.iter().all(|x| x.abs() <= MAX_GRAD_ABS);
            }
        });
    }
    // Every value is written below.
    resize_for_overwrite(&mut out.grads, n * dim, 0.0);
    resize_for_overwrite(&mut out.finite, n, false);
    let (runs, row_finite) = (&out.runs, &out.row_finite);
    let mut order = out.order.as_mut_slice();
    let mut items = Vec::with_capacity(n.div_ceil(ROWS_PER_ITEM));
    let sums = row_chunks(&mut out.grads, n, dim);
    let finite = row_chunks(&mut out.finite, n, 1);
    for (item, (sums, finite)) in sums.into_iter().zip(finite).enumerate() {
        let first = item * ROWS_PER_ITEM;
        let last = first + finite.len();
        let size = (runs[last] - runs[first]).min(order.len());
        let (members, rest) = core::mem::take(&mut order).split_at_mut(size);
        order = rest;
        items.push((&runs[first..=last], members, sums, finite));
    }
    exec.for_each(items, |(runs, order, sums, finite)| {
        let base = runs[0];
        for (j, (sum, ok)) in sums.chunks_exact_mut(dim).zip(finite).enumerate() {
            let members = &mut order[runs[j] - base..runs[j + 1] - base];
            if let [(_, k)] = *members
                && !rules.materialize
            {
                // Stays in the batch; checked above.
                *ok = row_finite[k];
                continue;
            }
            if members.len() > 1 {
                members.sort_unstable_by(|a, b| cmp_rows(row(a.1), row(b.1)));
            }
            let mut members = members.iter();
            if let Some(&(_, k)) = members.next() {
                sum.copy_from_slice(row(k));
            }
            for &(_, k) in members {
                for (acc, &g) in sum.iter_mut().zip(row(k)) {
                    *acc += g;
                }
            }
            *ok = sum.iter().all(|g| g.abs() <= MAX_GRAD_ABS);
            if *ok {
                clip_row(sum, rules.clip);
            }
        }
    });
}

/// Sets `v`'s length to `n`, writing `fill` only into new slots: for buffers
/// reused between steps whose every value the caller then overwrites (the
/// fill of a full `clear` + `resize` would be a serial pass over them).
pub(crate) fn resize_for_overwrite<T: Copy>(v: &mut Vec<T>, n: usize, fill: T) {
    v.truncate(n);
    v.resize(n, fill);
}

/// Scales `row` down to L2 norm `max_norm` when it is longer.
pub(crate) fn clip_row(row: &mut [f32], clip: Option<f32>) {
    let Some(max_norm) = clip else {
        return;
    };
    let mut sq = 0.0f32;
    for &g in row.iter() {
        sq += g * g;
    }
    let norm = Float::sqrt(sq);
    if norm > max_norm {
        let scale = max_norm / norm;
        row.iter_mut().for_each(|g| *g *= scale);
    }
}

/// Applies `row −= upd` (after AdamW's decoupled decay `row *= 1 − decay`,
/// skipped when `decay` is 0): phase 4's per-row arithmetic, public through
/// [`kernel`](crate::kernel) so a parallel adapter applying rows itself gets
/// the same bits.
pub fn apply_row(row: &mut [f32], upd: &[f32], decay: f32) {
    if decay != 0.0 {
        let keep = 1.0 - decay;
        row.iter_mut().for_each(|x| *x *= keep);
    }
    for (x, &u) in row.iter_mut().zip(upd) {
        *x -= u;
    }
}
