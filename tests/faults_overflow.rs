//! Finite gradients whose squares (or sums) overflow f32, and the fuzz
//! regressions of the `basis_step` target replayed from `fuzz/regressions/`.
//!
//! A gradient of 3e19 is finite, so it passes a plain `is_finite` check, but
//! `g²` is +inf: it must not turn a shared bucket's second moment into +inf
//! (which freezes that coordinate for every row of the bucket forever) nor a
//! neighbour row into NaN.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use std::path::{Path, PathBuf};

use basis::core::{Basis, BasisConfig, DenseTable, Direction, RowIndex, SparseOptimizer};
use basis::hash::Bucketer;
use basis_rayon::{AtomicMomentTable, MomentParams, MomentTable, StripedMomentTable};

fn assert_buckets_finite<H: Bucketer>(opt: &Basis<H>, what: &str) {
    for b in 0..opt.bucketer().buckets() {
        let view = opt.bucket_view(b).unwrap();
        assert!(
            view.m
                .iter()
                .flatten()
                .chain(&view.v)
                .all(|x| x.is_finite()),
            "{what}: bucket {b} holds a non-finite value: {view:?}"
        );
    }
}

fn regressions(target: &str) -> Vec<PathBuf> {
    // This package is the repository's `tests/` directory.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn fuzz_regressions_of_the_basis_step_stay_fixed() {
    let files = regressions("basis_step");
    assert!(!files.is_empty());
    for file in files {
        let data = std::fs::read(&file).unwrap();
        // The fuzz target's own entry point: panics if a bucket turns non-finite.
        basis::core::fuzzing::step_bytes(&data);
    }
}

/// A finite gradient whose square overflows f32 (|g| > 1.8e19) must not put
/// an infinity into a shared bucket, nor a NaN into a row that merely shares
/// the bucket — the failure mode the non-finite policy exists to prevent.
#[test]
fn a_gradient_whose_square_overflows_poisons_no_bucket_and_no_neighbour() {
    /// Every id maps to bucket 0.
    #[derive(Debug)]
    struct OneBucket;
    impl Bucketer for OneBucket {
        fn buckets(&self) -> u32 {
            1
        }
        fn bucket(&self, _: u64) -> u32 {
            0
        }
    }
    for direction in [
        Direction::Shared,
        Direction::Signed,
        Direction::OwnGradient,
        Direction::RowScaled,
    ] {
        // (ids, gradients): rows 0 and 3 carry the huge value, rows 1 and 2
        // are ordinary neighbours in the same bucket. Row 0 gets it twice
        // (duplicates are summed); with 1.5e19 each square is finite but
        // the bucket's sum of squares is not.
        let cases = |h: f32| -> [(Vec<u64>, Vec<f32>); 2] {
            [
                (vec![0, 0, 1, 2], vec![h, 1.0, h, 1.0, 0.1, -0.2, 0.3, 0.1]),
                (vec![0, 3, 1, 2], vec![h, 1.0, h, 1.0, 0.1, -0.2, 0.3, 0.1]),
            ]
        };
        for huge in [1.5e19f32, 3e19, 2e38, f32::MAX, -f32::MAX] {
            for (case, (ids, grads)) in cases(huge).into_iter().enumerate() {
                let config = BasisConfig::default()
                    .with_dim(2)
                    .with_direction(direction)
                    .with_row_index(RowIndex::Dense { rows: 4 });
                let mut opt = Basis::new(config, OneBucket).unwrap();
                let mut weights = [0.5f32; 8];
                let what = format!("{direction:?}, g = {huge:e}, case {case}");
                let _ = opt.step(&ids, &grads, &mut DenseTable::new(&mut weights, 2).unwrap());
                assert_buckets_finite(&opt, &what);
                // A normal step afterwards must still be well defined.
                let _ = opt.step(
                    &[1, 2],
                    &[0.1, 0.2, 0.3, 0.4],
                    &mut DenseTable::new(&mut weights, 2).unwrap(),
                );
                assert_buckets_finite(&opt, &what);
                assert!(
                    weights[2..6].iter().all(|w| w.is_finite()),
                    "{what}: a neighbour row went non-finite: {weights:?}"
                );
            }
        }
    }
}

/// The Hogwild tables: an update either is refused or leaves the bucket finite.
#[test]
fn hogwild_tables_never_store_an_overflowed_moment() {
    let tables: [Box<dyn MomentTable>; 2] = [
        Box::new(AtomicMomentTable::new(1, 2).unwrap()),
        Box::new(StripedMomentTable::new(1, 2).unwrap()),
    ];
    for table in &tables {
        let params = MomentParams::default();
        let mut dir = [0.0f32; 2];
        for huge in [3e19f32, 3e38, -f32::MAX] {
            let _ = table.adam_update(0, &[huge, 1.0], &params, &mut dir);
            let _ = table.accumulate(0, &[huge, 1.0]);
            let _ = table.accumulate(0, &[huge, 1.0]);
            let (mut m, mut v) = ([0.0f32; 2], [0.0f32; 2]);
            table.snapshot(0, &mut m, &mut v).unwrap();
            assert!(
                m.iter().chain(&v).all(|x| x.is_finite()),
                "g = {huge:e}: m = {m:?}, v = {v:?}"
            );
            assert!(dir.iter().all(|x| x.is_finite()), "{dir:?}");
        }
    }
}
