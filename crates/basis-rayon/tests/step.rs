//! The parallel BASIS step is bit-identical to the serial `Basis::step` for
//! 1, 2, 3 and 8 threads, in every direction mode and storage option.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers too: a panic is a failing test"
)]

use std::sync::OnceLock;

use balanced_hash::OneChoice;
use basis_core::{
    Basis, BasisConfig, DenseTable, Direction, NonFinitePolicy, ScalarLrSchedule, ScalarStorage,
    SparseOptimizer, StepError, TablePrecision,
};
use basis_rayon::{Error, par_step, par_step_dense, thread_pool};
use proptest::prelude::*;

const THREADS: [usize; 4] = [1, 2, 3, 8];

fn pools() -> &'static [rayon::ThreadPool] {
    static POOLS: OnceLock<Vec<rayon::ThreadPool>> = OnceLock::new();
    POOLS.get_or_init(|| THREADS.iter().map(|&t| thread_pool(t).unwrap()).collect())
}

#[derive(Debug, Clone)]
struct Case {
    config: BasisConfig,
    buckets: u32,
    rows: usize,
    /// Per step: ids and their gradients (`ids.len() * dim`).
    batches: Vec<(Vec<u64>, Vec<f32>)>,
}

fn config() -> impl Strategy<Value = BasisConfig> {
    let direction = prop_oneof![
        Just(Direction::Shared),
        Just(Direction::Signed),
        Just(Direction::OwnGradient),
        Just(Direction::RowScaled),
    ];
    let precision = prop_oneof![Just(TablePrecision::F32), Just(TablePrecision::Bf16)];
    let storage = prop_oneof![Just(ScalarStorage::F32), Just(ScalarStorage::LogU8)];
    (
        1usize..9,
        direction,
        precision,
        storage,
        prop_oneof![Just(0.0f32), Just(0.05)],
        prop_oneof![Just(0.0f32), Just(0.01)],
        any::<u64>(),
        // Optional L2 clip of merged rows; frequency-aware scalar lr (counts).
        prop_oneof![Just(None), Just(Some(1.5f32))],
        prop_oneof![
            Just(ScalarLrSchedule::Constant),
            Just(ScalarLrSchedule::InverseFrequency { power: 0.5 })
        ],
    )
        .prop_map(
            |(
                dim,
                direction,
                table_precision,
                scalar_storage,
                scalar_lr,
                weight_decay,
                seed,
                grad_clip,
                scalar_lr_schedule,
            )| {
                // Options the configuration would not read are refused: a
                // rate or schedule needs a learning scalar, a storage a stored one.
                let row_scaled = direction == Direction::RowScaled;
                let learns = !row_scaled && scalar_lr > 0.0;
                BasisConfig::default()
                    .with_dim(dim)
                    .with_direction(direction)
                    .with_table_precision(table_precision)
                    .with_scalar_storage(if learns || row_scaled {
                        scalar_storage
                    } else {
                        ScalarStorage::F32
                    })
                    .with_scalar_lr(if row_scaled { 0.0 } else { scalar_lr })
                    .with_weight_decay(weight_decay)
                    .with_seed(seed)
                    .with_grad_clip(grad_clip)
                    .with_scalar_lr_schedule(if learns {
                        scalar_lr_schedule
                    } else {
                        ScalarLrSchedule::Constant
                    })
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (config(), 1u32..200, 1usize..2000).prop_flat_map(|(config, buckets, rows)| {
        let dim = config.dim;
        let batch = (1usize..300).prop_flat_map(move |n| {
            (
                proptest::collection::vec(0..rows as u64, n),
                // Mostly finite; a rare NaN exercises the skip policy.
                proptest::collection::vec(
                    prop_oneof![50 => -4.0f32..4.0, 1 => Just(f32::NAN)],
                    n * dim,
                ),
            )
        });
        proptest::collection::vec(batch, 1..4).prop_map(move |batches| Case {
            config,
            buckets,
            rows,
            batches,
        })
    })
}

fn fresh(case: &Case) -> (Basis<OneChoice>, Vec<f32>) {
    let h = OneChoice::new(case.buckets, 11).unwrap();
    let basis = Basis::new(case.config, h).unwrap();
    let table = (0..case.rows * case.config.dim)
        .map(|i| (i % 13) as f32 * 0.1 - 0.6)
        .collect();
    (basis, table)
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn parallel_step_is_bit_identical_to_serial(case in case()) {
        let dim = case.config.dim;
        let (mut serial, mut serial_table) = fresh(&case);
        for (ids, grads) in &case.batches {
            let mut t = DenseTable::new(&mut serial_table, dim).unwrap();
            serial.step(ids, grads, &mut t).unwrap();
        }
        let want_state = serial.export_state();
        for (pool, threads) in pools().iter().zip(THREADS) {
            for dense in [false, true] {
                let (mut basis, mut table) = fresh(&case);
                pool.install(|| {
                    for (ids, grads) in &case.batches {
                        let report = if dense {
                            par_step_dense(&mut basis, ids, grads, &mut table)
                        } else {
                            par_step(&mut basis, ids, grads, &mut DenseTable::new(&mut table, dim).unwrap())
                        };
                        report.unwrap();
                    }
                });
                prop_assert_eq!(bits(&table), bits(&serial_table), "rows differ: {} threads, dense {}", threads, dense);
                prop_assert!(basis.export_state() == want_state, "state differs: {} threads, dense {}", threads, dense);
            }
        }
    }
}

#[test]
fn bad_batches_fail_like_serial_and_change_nothing() {
    let config = BasisConfig::default().with_dim(2);
    let mut basis = Basis::new(config, OneChoice::new(4, 1).unwrap()).unwrap();
    let mut table = vec![1.0f32; 10];
    let before = basis.export_state();
    // Wrong gradient length.
    assert_eq!(
        par_step_dense(&mut basis, &[0, 1], &[0.5; 3], &mut table),
        Err(Error::Step(StepError::GradLength {
            expected: 4,
            actual: 3
        }))
    );
    // Row 5 is not in a 5-row table.
    assert_eq!(
        par_step_dense(&mut basis, &[5], &[0.5; 2], &mut table),
        Err(Error::Step(StepError::MissingRow { id: 5 }))
    );
    assert_eq!(
        par_step(
            &mut basis,
            &[5],
            &[0.5; 2],
            &mut DenseTable::new(&mut table, 2).unwrap()
        ),
        Err(Error::Step(StepError::MissingRow { id: 5 }))
    );
    // Not whole rows.
    assert!(matches!(
        par_step_dense(&mut basis, &[0], &[0.5; 2], &mut table[..9]),
        Err(Error::Table(_))
    ));
    assert_eq!(table, vec![1.0; 10]);
    assert!(basis.export_state() == before);
    assert_eq!(thread_pool(0).err(), Some(Error::InvalidParams));
}

/// A large skewed batch (hot rows repeat; many buckets per task, many tasks) on 2 threads.
#[test]
fn large_skewed_batch_matches_serial() {
    let dim = 16;
    let rows = 50_000usize;
    let config = BasisConfig::default()
        .with_dim(dim)
        .with_direction(Direction::Shared)
        .with_scalar_lr(0.05);
    let make = || Basis::new(config, OneChoice::new(997, 3).unwrap()).unwrap();
    // Skewed ids: a few hot rows repeat often (duplicates merge).
    let ids: Vec<u64> = (0..4096u64)
        .map(|k| (k * k * 2_654_435_761) % (1 + k % rows as u64))
        .collect();
    let grads: Vec<f32> = (0..ids.len() * dim)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let (mut serial, mut par) = (make(), make());
    let (mut t_serial, mut t_par) = (vec![0.25f32; rows * dim], vec![0.25f32; rows * dim]);
    for _ in 0..3 {
        serial
            .step(
                &ids,
                &grads,
                &mut DenseTable::new(&mut t_serial, dim).unwrap(),
            )
            .unwrap();
        pools()[1]
            .install(|| par_step_dense(&mut par, &ids, &grads, &mut t_par))
            .unwrap();
    }
    assert_eq!(bits(&t_par), bits(&t_serial));
    assert!(par.export_state() == serial.export_state());
}

/// With the `Error` policy, the parallel plan reports the same first failing
/// id (in id order) as the serial step, whichever check fails first, even
/// when the failures sit in different work items.
#[test]
fn first_failure_in_id_order_matches_serial() {
    let dim = 3;
    let config = BasisConfig::default()
        .with_dim(dim)
        .with_nonfinite(NonFinitePolicy::Error);
    let make = || Basis::new(config, OneChoice::new(50, 5).unwrap()).unwrap();
    // The batch holds every id below 300 twice, in descending order; one id
    // has a NaN, and ids from `rows` on are missing from the table.
    let cases = [
        (250u64, 300usize, StepError::NonFinite { id: 250 }),
        (290, 280, StepError::MissingRow { id: 280 }),
        (20, 10, StepError::MissingRow { id: 10 }),
        (5, 10, StepError::NonFinite { id: 5 }),
    ];
    for (nan_id, rows, want) in cases {
        let ids: Vec<u64> = (0..300u64).rev().chain(0..300).collect();
        let mut grads: Vec<f32> = (0..ids.len() * dim).map(|i| (i % 7) as f32 - 3.0).collect();
        let at = ids.iter().position(|&id| id == nan_id).unwrap();
        grads[at * dim + 1] = f32::NAN;
        let mut serial_table = vec![0.5f32; rows * dim];
        let serial = make()
            .step(
                &ids,
                &grads,
                &mut DenseTable::new(&mut serial_table, dim).unwrap(),
            )
            .unwrap_err();
        assert_eq!(serial, want);
        for pool in pools() {
            let mut basis = make();
            let before = basis.export_state();
            let mut table = vec![0.5f32; rows * dim];
            let got = pool.install(|| par_step_dense(&mut basis, &ids, &grads, &mut table));
            assert_eq!(got, Err(Error::Step(want)), "nan {nan_id}, rows {rows}");
            assert!(basis.export_state() == before);
            assert_eq!(table, vec![0.5f32; rows * dim]);
        }
    }
}
