//! The step's merge (duplicates summed in canonical order, non-finite rows
//! skipped, the L2 clip) against an obviously correct slow reference: the
//! same optimizer stepped on a batch that the reference merged already must
//! end bit-identical, for every direction mode, with and without a clip.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

extern crate alloc;

use alloc::collections::BTreeMap;
use core::cmp::Ordering;

use balanced_hash::OneChoice;
use basis_core::{
    Basis, BasisConfig, DenseTable, Direction, MAX_GRAD_ABS, NonFinitePolicy, RowIndex,
    SparseOptimizer,
};
use common::{Rng, grads};
use proptest::prelude::*;

/// Merges `ids`/`g` the slow way: rows grouped by id (ascending), each
/// group sorted by its values' total order, summed in that order; rows with
/// an element above `MAX_GRAD_ABS` (or NaN) dropped; the rest clipped to L2
/// norm `clip`.
fn reference_merge(ids: &[u64], g: &[f32], dim: usize, clip: Option<f32>) -> (Vec<u64>, Vec<f32>) {
    let mut groups: BTreeMap<u64, Vec<&[f32]>> = BTreeMap::new();
    for (k, &id) in ids.iter().enumerate() {
        groups
            .entry(id)
            .or_default()
            .push(&g[k * dim..(k + 1) * dim]);
    }
    let (mut out_ids, mut out_g) = (Vec::new(), Vec::new());
    for (id, mut rows) in groups {
        rows.sort_by(|a, b| {
            a.iter()
                .zip(b.iter())
                .map(|(x, y)| x.total_cmp(y))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        });
        let mut sum = rows[0].to_vec();
        for row in &rows[1..] {
            for (s, &x) in sum.iter_mut().zip(row.iter()) {
                *s += x;
            }
        }
        if !sum.iter().all(|x| x.abs() <= MAX_GRAD_ABS) {
            continue;
        }
        if let Some(c) = clip {
            let norm = sum.iter().fold(0.0f32, |acc, &x| acc + x * x).sqrt();
            if norm > c {
                let scale = c / norm;
                sum.iter_mut().for_each(|x| *x *= scale);
            }
        }
        out_ids.push(id);
        out_g.extend(sum);
    }
    (out_ids, out_g)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    #[test]
    fn merge_matches_the_slow_reference(seed in any::<u64>(), which in 0usize..4, clipped in any::<bool>()) {
        let direction = [Direction::Shared, Direction::Signed, Direction::OwnGradient, Direction::RowScaled][which];
        let (dim, rows) = (5usize, 40u64);
        let clip = clipped.then_some(1.5f32);
        let config = |grad_clip| BasisConfig::default()
.with_dim(dim)
.with_direction(direction)
.with_row_index(RowIndex::Dense { rows })
// RowScaled has no learned scalar (a rate there is refused).
.with_scalar_lr(if direction == Direction::RowScaled { 0.0 } else { 0.05 })
.with_grad_clip(grad_clip)
.with_nonfinite(NonFinitePolicy::Skip);
        let make = |grad_clip| Basis::new(config(grad_clip), OneChoice::new(7, 3).unwrap()).unwrap();
        let (mut step, mut premerged) = (make(clip), make(None));
        let mut rng = Rng(seed);
        let mut t_step = vec![0.1f32; rows as usize * dim];
        let mut t_pre = t_step.clone();
        for _ in 0..3 {
            // Duplicates (40 ids, 150 rows), a few NaN and huge rows, and
            // some exact repeats of a row (ties of the canonical order).
            let n = 150;
            let ids: Vec<u64> = (0..n).map(|_| rng.below(rows)).collect();
            let mut g = grads(&mut rng, n, dim, 2.0);
            for k in 0..n {
                match rng.below(40) {
                    0 => g[k * dim] = f32::NAN,
                    1 => g[k * dim + 1] = 1e30,
                    2 if k > 0 => {
                        let prev = g[(k - 1) * dim..k * dim].to_vec();
                        g[k * dim..(k + 1) * dim].copy_from_slice(&prev);
                    }
                    _ => {}
                }
            }
            let (mids, mg) = reference_merge(&ids, &g, dim, clip);
            step.step(&ids, &g, &mut DenseTable::new(&mut t_step, dim).unwrap()).unwrap();
            premerged.step(&mids, &mg, &mut DenseTable::new(&mut t_pre, dim).unwrap()).unwrap();
        }
        let bits = |t: &[f32]| t.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&t_step), bits(&t_pre));
        for id in 0..rows {
            prop_assert_eq!(step.scalar(id).to_bits(), premerged.scalar(id).to_bits());
        }
        for b in 0..7 {
            prop_assert_eq!(step.bucket_view(b), premerged.bucket_view(b));
        }
    }
}
