//! The parallel exact-Adam step (`par_exact_adam_step_dense`) is
//! bit-identical to the serial `ExactAdam::step` on 1, 2, 3 and 8 threads:
//! table, exported state (moments, step count, skipped rows) and report,
//! over several steps with duplicate ids, non-finite rows, weight decay and
//! clipping; errors are the serial step's, with nothing changed.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers too: a panic is a failing test"
)]

use std::sync::OnceLock;

use basis_core::{
    AdamConfig, DenseTable, ExactAdam, NonFinitePolicy, RowIndex, SparseOptimizer, StepError,
};
use basis_rayon::{Error, par_exact_adam_step_dense, thread_pool};
use proptest::prelude::*;

const THREADS: [usize; 4] = [1, 2, 3, 8];

fn pools() -> &'static [rayon::ThreadPool] {
    static POOLS: OnceLock<Vec<rayon::ThreadPool>> = OnceLock::new();
    POOLS.get_or_init(|| THREADS.iter().map(|&t| thread_pool(t).unwrap()).collect())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs `batches` serially and on every pool from the same start and
/// asserts equal bits after every step.
fn check(config: AdamConfig, rows: usize, table0: &[f32], batches: &[(Vec<u64>, Vec<f32>)]) {
    let d = config.dim;
    let mut serial = ExactAdam::new(config).unwrap();
    let mut want_table = table0.to_vec();
    let mut want = Vec::new();
    for (ids, grads) in batches {
        let rep = serial
            .step(
                ids,
                grads,
                &mut DenseTable::new(&mut want_table, d).unwrap(),
            )
            .map_err(|e| format!("{e:?}"));
        want.push((rep, bits(&want_table), serial.export_state()));
    }
    for (pool, t) in pools().iter().zip(THREADS) {
        let mut par = ExactAdam::new(config).unwrap();
        let mut table = table0.to_vec();
        for (s, (ids, grads)) in batches.iter().enumerate() {
            let rep = pool
                .install(|| par_exact_adam_step_dense(&mut par, ids, grads, &mut table))
                .map_err(|e| match e {
                    Error::Step(e) => format!("{e:?}"),
                    other => panic!("not a step error: {other:?}"),
                });
            let got = (rep, bits(&table), par.export_state());
            assert!(
                got == want[s],
                "{t} threads, step {s}, {rows} rows: {:?} vs {:?}",
                got.0,
                want[s].0
            );
        }
    }
}

fn config(
    dim: usize,
    rows: usize,
    wd: f32,
    clip: Option<f32>,
    policy: NonFinitePolicy,
) -> AdamConfig {
    AdamConfig::default()
        .with_dim(dim)
        .with_lr(0.01)
        .with_weight_decay(wd)
        .with_grad_clip(clip)
        .with_nonfinite(policy)
        .with_row_index(RowIndex::Dense { rows: rows as u64 })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn same_bits_as_the_serial_step(
        dim in 1usize..9,
        rows in 1usize..400,
        wd in prop_oneof![Just(0.0f32), Just(0.05)],
        clip in prop_oneof![Just(None), Just(Some(0.7f32))],
        seed in any::<u64>(),
        steps in 1usize..4,
        nan in any::<bool>(),
    ) {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let unit = |r: u64| (r >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        let table0: Vec<f32> = (0..rows * dim).map(|_| unit(next())).collect();
        let batches: Vec<(Vec<u64>, Vec<f32>)> = (0..steps)
            .map(|_| {
                // Up to 3 × rows ids: many repeated, some rows absent.
                let n = (next() % (3 * rows as u64 + 1)) as usize;
                let ids: Vec<u64> = (0..n).map(|_| next() % rows as u64).collect();
                let mut grads: Vec<f32> = (0..n * dim).map(|_| unit(next())).collect();
                if nan && n > 0 {
                    grads[(next() % (n * dim) as u64) as usize] = f32::NAN;
                }
                (ids, grads)
            })
            .collect();
        check(config(dim, rows, wd, clip, NonFinitePolicy::Skip), rows, &table0, &batches);
    }
}

/// A large skewed batch: many work items, hot ids repeated, over a table
/// with more rows than the index (the pieces end at the last row, not at
/// the table's end).
#[test]
fn a_large_skewed_batch_is_the_same_bits() {
    let (dim, rows) = (17, 20_000);
    let table0: Vec<f32> = (0..(rows + 5) * dim)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    let batches: Vec<(Vec<u64>, Vec<f32>)> = (0..3u64)
        .map(|s| {
            let ids: Vec<u64> = (0..6000u64)
                .map(|i| {
                    let h = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15 ^ s);
                    if i % 3 == 0 { h % 50 } else { h % rows as u64 }
                })
                .collect();
            let grads = (0..ids.len() * dim)
                .map(|i| (((i as u64 + s) * 2654435761) % 2001) as f32 * 1e-3 - 1.0)
                .collect();
            (ids, grads)
        })
        .collect();
    check(
        config(dim, rows, 0.01, None, NonFinitePolicy::Skip),
        rows,
        &table0,
        &batches,
    );
}

/// The check can fail: a step that differs in one row is told apart.
#[test]
fn a_different_step_is_told_apart() {
    let (dim, rows) = (4, 300);
    let mut a = ExactAdam::new(config(dim, rows, 0.0, None, NonFinitePolicy::Skip)).unwrap();
    let mut b = a.clone();
    let ids: Vec<u64> = (0..200).map(|i| (i * 37) % rows as u64).collect();
    let grads: Vec<f32> = (0..ids.len() * dim).map(|i| i as f32 * 1e-3).collect();
    let (mut ta, mut tb) = (vec![0.5f32; rows * dim], vec![0.5f32; rows * dim]);
    pools()[1]
        .install(|| par_exact_adam_step_dense(&mut a, &ids, &grads, &mut ta))
        .unwrap();
    let mut g2 = grads.clone();
    // Adam's first step is about lr·sign(g): flip a sign, not a digit.
    g2[ids.len() * dim - 1] -= 10.0;
    b.step(&ids, &g2, &mut DenseTable::new(&mut tb, dim).unwrap())
        .unwrap();
    assert_ne!(bits(&ta), bits(&tb));
}

/// Errors: the serial step's, with the table and state unchanged; a
/// non-finite row under `Error` and an id past the index's rows; a ragged
/// table is a table error.
#[test]
fn refusals_are_the_serial_steps_and_change_nothing() {
    let (dim, rows) = (3, 10);
    for t in [1, 2] {
        let pool = &pools()[t - 1];
        let mut opt = ExactAdam::new(config(dim, rows, 0.0, None, NonFinitePolicy::Error)).unwrap();
        let mut table = vec![1.0f32; rows * dim];
        let state = opt.export_state();
        let err = pool
            .install(|| par_exact_adam_step_dense(&mut opt, &[3, 11], &[0.1; 6], &mut table))
            .unwrap_err();
        assert!(
            matches!(err, Error::Step(StepError::IdOutOfRange { id: 11, .. })),
            "{err:?}"
        );
        let err = pool
            .install(|| {
                par_exact_adam_step_dense(
                    &mut opt,
                    &[4, 2],
                    &[0.1, 0.1, 0.1, f32::NAN, 0.0, 0.0],
                    &mut table,
                )
            })
            .unwrap_err();
        assert!(
            matches!(err, Error::Step(StepError::NonFinite { id: 2 })),
            "{err:?}"
        );
        let err = pool
            .install(|| par_exact_adam_step_dense(&mut opt, &[1], &[0.1; 3], &mut table[..29]))
            .unwrap_err();
        assert!(matches!(err, Error::Table(_)), "{err:?}");
        assert!(table.iter().all(|&x| x == 1.0));
        assert_eq!(opt.export_state(), state);
    }
}

/// A sparse row index runs the serial step (slots are created in batch
/// order): still the same bits.
#[test]
fn a_sparse_index_is_the_serial_step() {
    let dim = 2;
    let config = AdamConfig::default().with_dim(dim).with_lr(0.05);
    let ids: Vec<u64> = vec![7, 3, 7, 9, 0];
    let grads: Vec<f32> = (0..ids.len() * dim).map(|i| i as f32 * 0.1 - 0.3).collect();
    let mut serial = ExactAdam::new(config).unwrap();
    let mut want = vec![0.25f32; 10 * dim];
    serial
        .step(&ids, &grads, &mut DenseTable::new(&mut want, dim).unwrap())
        .unwrap();
    let mut par = ExactAdam::new(config).unwrap();
    let mut got = vec![0.25f32; 10 * dim];
    pools()[1]
        .install(|| par_exact_adam_step_dense(&mut par, &ids, &grads, &mut got))
        .unwrap();
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(par.export_state(), serial.export_state());
}
