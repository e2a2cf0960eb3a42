//! `SparseOptimizer::grow_rows`: a dense row range grown step by step as new
//! ids appear gives bit for bit the state and table of an optimizer built
//! with the full range up front (the reference), for every optimizer; bad
//! growth is a typed error that changes nothing.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use balanced_hash::OneChoice;
use basis_core::{
    AdagradConfig, AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam, GrowError,
    RowIndex, RowwiseAdagrad, ScalarStorage, Sgd, SparseOptimizer,
};

const DIM: usize = 4;
const ROWS: u64 = 64;

fn all(index: RowIndex) -> Vec<Box<dyn SparseOptimizer>> {
    let basis = |direction, storage| -> Box<dyn SparseOptimizer> {
        let c = BasisConfig::default()
            .with_dim(DIM)
            .with_lr(0.05)
            .with_direction(direction)
            .with_scalar_storage(storage)
            .with_row_index(index);
        Box::new(Basis::new(c, OneChoice::new(8, 3).unwrap()).unwrap())
    };
    vec![
        Box::new(
            ExactAdam::new(
                AdamConfig::default()
                    .with_dim(DIM)
                    .with_lr(0.01)
                    .with_row_index(index),
            )
            .unwrap(),
        ),
        Box::new(
            RowwiseAdagrad::new(
                AdagradConfig::default()
                    .with_dim(DIM)
                    .with_lr(0.1)
                    .with_row_index(index),
            )
            .unwrap(),
        ),
        Box::new(Sgd::new(DIM, 0.1).unwrap()),
        basis(Direction::RowScaled, ScalarStorage::LogU8),
        basis(Direction::Shared, ScalarStorage::Bf16),
    ]
}

/// Batch `t`: ids that reach further into the range as `t` grows.
fn batch(t: u64) -> (Vec<u64>, Vec<f32>) {
    let ids: Vec<u64> = (0..6)
        .map(|k| (t * 7 + k * 5) % (4 + 4 * t).min(ROWS))
        .collect();
    let grads = (0..ids.len() * DIM)
        .map(|i| ((i as u64 * 2_654_435_761 + t) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    (ids, grads)
}

#[test]
fn growing_equals_preallocating() {
    let mut grown = all(RowIndex::Dense { rows: 0 });
    let mut full = all(RowIndex::Dense { rows: ROWS });
    for (g, f) in grown.iter_mut().zip(full.iter_mut()) {
        let mut tg = vec![0.1f32; ROWS as usize * DIM];
        let mut tf = tg.clone();
        let mut rows = 0;
        for t in 0..20 {
            let (ids, grads) = batch(t);
            let need = ids.iter().max().map_or(0, |m| m + 1).max(rows);
            g.grow_rows(need).unwrap();
            rows = need;
            g.step(&ids, &grads, &mut DenseTable::new(&mut tg, DIM).unwrap())
                .unwrap();
            f.step(&ids, &grads, &mut DenseTable::new(&mut tf, DIM).unwrap())
                .unwrap();
        }
        g.grow_rows(ROWS).unwrap();
        assert_eq!(tg, tf);
        assert_eq!(g.export_state(), f.export_state());
    }
}

#[test]
fn bad_growth_is_a_typed_error_and_changes_nothing() {
    for mut o in all(RowIndex::Dense { rows: 8 }) {
        let before = o.export_state();
        let r = o.grow_rows(4);
        // SGD holds no rows, so any range is fine.
        if r.is_ok() {
            assert_eq!(o.memory().rows_with_state, 0);
        } else {
            assert_eq!(
                r,
                Err(GrowError::Shrink {
                    rows: 4,
                    current: 8
                })
            );
        }
        if o.grow_rows(u64::MAX).is_ok() {
            assert_eq!(o.memory().rows_with_state, 0);
        } else {
            assert_eq!(
                o.grow_rows(u64::MAX),
                Err(GrowError::OutOfMemory { rows: u64::MAX })
            );
        }
        assert_eq!(o.export_state(), before);
    }
    let mut sparse = all(RowIndex::Sparse);
    assert_eq!(sparse[0].grow_rows(10), Err(GrowError::NotDense));
    assert_eq!(sparse[1].grow_rows(10), Err(GrowError::NotDense));
    assert_eq!(sparse[3].grow_rows(10), Err(GrowError::NotDense));
}

/// A grown optimizer's exported state imports into a fresh one grown to the
/// same rows, and both then step alike (the import keeps the grown range,
/// not the configured `rows: 0`).
#[test]
fn grown_state_exports_and_imports() {
    let none = || all(RowIndex::Dense { rows: 0 });
    for (mut grown, mut fresh) in none().into_iter().zip(none()) {
        let mut t = vec![0.5f32; 6 * DIM];
        grown.grow_rows(6).unwrap();
        let g = vec![0.25f32; 2 * DIM];
        grown
            .step(&[1, 5], &g, &mut DenseTable::new(&mut t, DIM).unwrap())
            .unwrap();
        fresh.grow_rows(6).unwrap();
        fresh.import_state(&grown.export_state()).unwrap();
        let mut t2 = t.clone();
        grown
            .step(&[0, 5], &g, &mut DenseTable::new(&mut t, DIM).unwrap())
            .unwrap();
        fresh
            .step(&[0, 5], &g, &mut DenseTable::new(&mut t2, DIM).unwrap())
            .unwrap();
        assert_eq!(t, t2);
        assert_eq!(grown.export_state(), fresh.export_state());
    }
}
