//! Phase 1, shared by every optimizer: validate a batch and merge duplicate
//! ids in a canonical order, so the result never depends on the batch order.

use alloc::vec::Vec;
use core::cmp::Ordering;

use num_traits::Float;

use crate::config::NonFinitePolicy;
use crate::error::StepError;
use crate::table::RowAccess;

/// A merged batch: distinct ids ascending, with their summed gradients.
#[derive(Debug, Clone, Default)]
pub(crate) struct Merged {
    pub(crate) ids: Vec<u64>,
    pub(crate) grads: Vec<f32>,
    pub(crate) skipped: usize,
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
pub(crate) fn merge(
    ids: &[u64],
    grads: &[f32],
    dim: usize,
    policy: NonFinitePolicy,
    clip: Option<f32>,
    table: &mut dyn RowAccess,
    mut in_range: impl FnMut(u64) -> Result<(), StepError>,
) -> Result<Merged, StepError> {
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
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_unstable_by(|&a, &b| ids[a].cmp(&ids[b]).then_with(|| cmp_rows(row(a), row(b))));

    let mut out = Merged {
        ids: Vec::with_capacity(ids.len()),
        grads: Vec::with_capacity(grads.len()),
        skipped: 0,
    };
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
        if !merged.iter().all(|g| g.is_finite()) {
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
    Ok(out)
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
