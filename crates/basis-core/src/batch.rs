//! Phase 1, shared by every optimizer: validate a batch and merge duplicate
//! ids in a canonical order, so the result never depends on the batch order.

use alloc::vec::Vec;
use core::cmp::Ordering;
use core::mem::size_of;

use num_traits::Float;

use crate::config::NonFinitePolicy;
use crate::error::StepError;
use crate::table::RowAccess;

/// The largest gradient magnitude a row may carry: `2^44 ≈ 1.8e13`. A larger
/// (or non-finite, NaN included) element makes the row count as non-finite
/// under [`NonFinitePolicy`]: its square (`> 2^88`) summed over the rows of a
/// bucket and the steps of an EMA could overflow an f32 second moment to +inf,
/// which would freeze that coordinate for every row of the bucket. Real
/// gradients sit many orders of magnitude below this bound.
pub const MAX_GRAD_ABS: f32 = 17_592_186_044_416.0;

/// A merged batch: distinct ids ascending, with their summed gradients.
#[derive(Debug, Clone, Default)]
pub(crate) struct Merged {
    pub(crate) ids: Vec<u64>,
    pub(crate) grads: Vec<f32>,
    pub(crate) skipped: usize,
    order: Vec<usize>,
}

impl Merged {
    /// Bytes of the reusable buffers.
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.ids.capacity() * 8
            + self.grads.capacity() * 4
            + self.order.capacity() * size_of::<usize>()
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

/// Checks lengths and the table's dim, merges duplicates (sorted by id, ties
/// by the gradient's bits, summed in that order), applies `policy` and the
/// optional L2 `clip` to each merged row, and checks every kept id against
/// `table` and `in_range`. Nothing is mutated.
///
/// # Errors
/// See [`StepError`].
/// Takes the reusable buffers out of `scratch` for the merged batch; on an
/// error they go back into `scratch` (so a failed step keeps its capacity).
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
    let mut out = core::mem::take(scratch);
    match merge_into(&mut out, ids, grads, dim, policy, clip, table, in_range) {
        Ok(()) => Ok(out),
        Err(e) => {
            *scratch = out;
            Err(e)
        }
    }
}

#[allow(clippy::too_many_arguments)] // the body of `merge`
fn merge_into(
    out: &mut Merged,
    ids: &[u64],
    grads: &[f32],
    dim: usize,
    policy: NonFinitePolicy,
    clip: Option<f32>,
    table: &mut dyn RowAccess,
    mut in_range: impl FnMut(u64) -> Result<(), StepError>,
) -> Result<(), StepError> {
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
    let row = |k: usize| &grads[k * dim..(k + 1) * dim];
    out.ids.clear();
    out.grads.clear();
    out.skipped = 0;
    let mut order = core::mem::take(&mut out.order);
    order.clear();
    order.extend(0..ids.len());
    order.sort_unstable_by(|&a, &b| ids[a].cmp(&ids[b]).then_with(|| cmp_rows(row(a), row(b))));
    let result = merge_sorted(out, &order, ids, policy, clip, table, &mut in_range, row);
    out.order = order;
    result
}

#[allow(clippy::too_many_arguments)] // the body of `merge`, split for buffer reuse
fn merge_sorted<'g>(
    out: &mut Merged,
    order: &[usize],
    ids: &[u64],
    policy: NonFinitePolicy,
    clip: Option<f32>,
    table: &mut dyn RowAccess,
    in_range: &mut impl FnMut(u64) -> Result<(), StepError>,
    row: impl Fn(usize) -> &'g [f32],
) -> Result<(), StepError> {
    let mut k = 0;
    while k < order.len() {
        let id = ids[order[k]];
        let start = out.grads.len();
        out.grads.extend_from_slice(row(order[k]));
        k += 1;
        while k < order.len() && ids[order[k]] == id {
            for (acc, &g) in out.grads[start..].iter_mut().zip(row(order[k])) {
                *acc += g;
            }
            k += 1;
        }
        let merged = &mut out.grads[start..];
        if !merged.iter().all(|g| g.abs() <= MAX_GRAD_ABS) {
            out.grads.truncate(start);
            match policy {
                NonFinitePolicy::Skip => {
                    out.skipped += 1;
                    continue;
                }
                NonFinitePolicy::Error => return Err(StepError::NonFinite { id }),
            }
        }
        if let Some(max_norm) = clip {
            let mut sq = 0.0f32;
            for &g in merged.iter() {
                sq += g * g;
            }
            let norm = Float::sqrt(sq);
            if norm > max_norm {
                let scale = max_norm / norm;
                merged.iter_mut().for_each(|g| *g *= scale);
            }
        }
        in_range(id)?;
        if table.row_mut(id).is_none() {
            return Err(StepError::MissingRow { id });
        }
        out.ids.push(id);
    }
    Ok(())
}

/// Applies `row −= upd` (after AdamW's decoupled decay `row *= 1 − decay`).
pub(crate) fn apply_row(row: &mut [f32], upd: &[f32], decay: f32) {
    if decay != 0.0 {
        let keep = 1.0 - decay;
        row.iter_mut().for_each(|x| *x *= keep);
    }
    for (x, &u) in row.iter_mut().zip(upd) {
        *x -= u;
    }
}
