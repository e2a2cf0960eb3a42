//! Per-row state moves (`export_rows` / `import_rows`, `export_buckets` /
//! `import_buckets`, `swap_remove_row`) against the obviously correct
//! reference: the optimizer the rows came from, stepping on. Rows moved
//! into a fresh optimizer under other slot numbers, then stepped on both
//! with the same batches, stay bit-identical (table rows and state); a
//! swap-removed row's neighbour continues as if nothing happened.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use balanced_hash::{DChoice, OneChoice};
use basis_core::{
    AdagradConfig, Adam8bit, AdamConfig, Basis, BasisConfig, DenseTable, ExactAdam, Ftrl,
    FtrlConfig, PartialRowwiseAdam, RowIndex, RowStateError, RowStateUnsupported, RowStepAdam,
    RowwiseAdagrad, ScalarLrSchedule, ScalarStorage, Sgd, SparseOptimizer, StateError,
    TablePrecision,
};
use common::Rng;
use proptest::prelude::*;

const DIM: usize = 3;
const ROWS: usize = 12;
const BUCKETS: u32 = 5;

type Make = Box<dyn Fn(RowIndex) -> Box<dyn SparseOptimizer>>;

/// Every optimizer kind whose rows move, BASIS in every mode and storage.
fn movable() -> Vec<(&'static str, Make)> {
    let adam = |index| {
        AdamConfig::default()
            .with_dim(DIM)
            .with_lr(0.01)
            .with_weight_decay(0.1)
            .with_row_index(index)
    };
    let basis = |build: fn(RowIndex) -> BasisConfig| -> Make {
        Box::new(move |index| {
            Box::new(Basis::new(build(index), OneChoice::new(BUCKETS, 3).unwrap()).unwrap())
        })
    };
    vec![
        (
            "basis f32",
            basis(|i| {
                BasisConfig::shared(DIM)
                    .row_index(i)
                    .seed(5)
                    .build()
                    .unwrap()
            }),
        ),
        (
            "basis u8 + bf16 tables",
            basis(|i| {
                BasisConfig::shared(DIM)
                    .scalar_storage(ScalarStorage::LogU8)
                    .table_precision(TablePrecision::Bf16)
                    .row_index(i)
                    .build()
                    .unwrap()
            }),
        ),
        (
            "basis bf16 scalars, signed",
            basis(|i| {
                BasisConfig::signed(DIM)
                    .scalar_storage(ScalarStorage::Bf16)
                    .row_index(i)
                    .build()
                    .unwrap()
            }),
        ),
        (
            "basis own-gradient, counted",
            basis(|i| {
                BasisConfig::own_gradient(DIM)
                    .scalar_lr_schedule(ScalarLrSchedule::InverseFrequency { power: 0.5 })
                    .row_index(i)
                    .build()
                    .unwrap()
            }),
        ),
        (
            "basis frozen scalars",
            basis(|i| {
                BasisConfig::shared(DIM)
                    .scalar_lr(0.0)
                    .row_index(i)
                    .build()
                    .unwrap()
            }),
        ),
        (
            "basis rowscaled",
            basis(|i| BasisConfig::row_scaled(DIM).row_index(i).build().unwrap()),
        ),
        (
            "adagrad",
            Box::new(|i| {
                let c = AdagradConfig::default()
                    .with_dim(DIM)
                    .with_weight_decay(0.01)
                    .with_row_index(i);
                Box::new(RowwiseAdagrad::new(c).unwrap())
            }),
        ),
        (
            "adam",
            Box::new(move |i| Box::new(ExactAdam::new(adam(i)).unwrap())),
        ),
        (
            "partial-rowwise-adam",
            Box::new(move |i| Box::new(PartialRowwiseAdam::new(adam(i)).unwrap())),
        ),
        (
            "rowstep-adam",
            Box::new(move |i| Box::new(RowStepAdam::new(adam(i)).unwrap())),
        ),
        (
            "ftrl",
            Box::new(|i| {
                let c = FtrlConfig::default()
                    .with_dim(DIM)
                    .with_l1(0.01)
                    .with_row_index(i);
                Box::new(Ftrl::new(c).unwrap())
            }),
        ),
        // Blocks of 2 over d = 3: two blocks per row, the last one short.
        (
            "adam8bit",
            Box::new(move |i| Box::new(Adam8bit::new(adam(i), 2).unwrap())),
        ),
    ]
}

/// A table of `ROWS` rows whose row `slot` starts from `key`'s values.
fn start_table(keys: &[u64]) -> Vec<f32> {
    keys.iter()
        .flat_map(|&k| (0..DIM).map(move |j| ((k % 97) as f32 - 48.0) * 0.01 + j as f32 * 0.1))
        .collect()
}

/// A batch over `slots` (duplicates allowed): `(keys, slots, grads)`.
fn batch(
    rng: &mut Rng,
    keys_of: &[u64],
    slots: &[u64],
    map: &dyn Fn(u64) -> u64,
) -> (Vec<u64>, Vec<u64>, Vec<f32>) {
    let n = 1 + rng.below(6) as usize;
    let picked: Vec<u64> = (0..n)
        .map(|_| slots[rng.below(slots.len() as u64) as usize])
        .collect();
    let keys = picked.iter().map(|&s| keys_of[s as usize]).collect();
    let mapped = picked.iter().map(|&s| map(s)).collect();
    let grads = (0..n * DIM).map(|_| rng.normal() as f32).collect();
    (keys, mapped, grads)
}

/// Steps `opt` over `table` (indexed by slot).
fn step(opt: &mut dyn SparseOptimizer, table: &mut [f32], b: &(Vec<u64>, Vec<u64>, Vec<f32>)) {
    let mut t = DenseTable::new(table, DIM).unwrap();
    opt.step_keyed(&b.0, &b.1, &b.2, &mut t).unwrap();
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Moves a random subset of A's rows into a fresh B under a permutation of
/// slots, then steps both on those rows: rows and state stay equal.
fn moved_rows_continue_bit_identical(seed: u64, index_dense: bool) {
    let sgd: Make = Box::new(|_| Box::new(Sgd::new(DIM, 0.1).unwrap()));
    for (name, make) in movable().into_iter().chain([("sgd", sgd)]) {
        let mut rng = Rng(seed);
        let index = if index_dense {
            RowIndex::Dense { rows: ROWS as u64 }
        } else {
            RowIndex::Sparse
        };
        let mut a = make(index);
        let mut b = make(index);
        let keys: Vec<u64> = (0..ROWS as u64).map(|s| 1000 + 7 * s).collect();
        let all: Vec<u64> = (0..ROWS as u64).collect();
        let mut ta = start_table(&keys);
        for _ in 0..1 + rng.below(5) {
            step(a.as_mut(), &mut ta, &batch(&mut rng, &keys, &all, &|s| s));
        }
        // The rows that move, and their slots on B (a permutation).
        let mut perm: Vec<u64> = all.clone();
        rng.shuffle(&mut perm);
        let moving: Vec<u64> = all.iter().copied().filter(|_| rng.below(3) != 0).collect();
        if moving.is_empty() {
            continue;
        }
        let on_b: Vec<u64> = moving.iter().map(|&s| perm[s as usize]).collect();
        let blob = a
            .export_rows(&moving)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        b.import_rows(&on_b, &blob)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if a.bucket_count() > 0 {
            let buckets: Vec<u32> = (0..a.bucket_count()).collect();
            let blob = a.export_buckets(&buckets).unwrap();
            b.import_buckets(&buckets, &blob).unwrap();
        }
        // B's table: the moved rows at their new slots (the caller's move).
        let mut tb = vec![0.0f32; ROWS * DIM];
        for (&sa, &sb) in moving.iter().zip(&on_b) {
            let (sa, sb) = (sa as usize * DIM, sb as usize * DIM);
            tb[sb..sb + DIM].copy_from_slice(&ta[sa..sa + DIM]);
        }
        for _ in 0..1 + rng.below(5) {
            let on_a = batch(&mut rng, &keys, &moving, &|s| s);
            let on_b = (
                on_a.0.clone(),
                on_a.1.iter().map(|&s| perm[s as usize]).collect(),
                on_a.2.clone(),
            );
            step(a.as_mut(), &mut ta, &on_a);
            step(b.as_mut(), &mut tb, &on_b);
        }
        for (&sa, &sb) in moving.iter().zip(&on_b) {
            let (sa, sb) = (sa as usize * DIM, sb as usize * DIM);
            assert_eq!(
                bits(&ta[sa..sa + DIM]),
                bits(&tb[sb..sb + DIM]),
                "{name}: table row"
            );
        }
        assert_eq!(
            a.export_rows(&moving).unwrap(),
            b.export_rows(&on_b).unwrap(),
            "{name}: row state"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn moved_rows_continue_bit_identical_dense(seed in any::<u64>()) {
        moved_rows_continue_bit_identical(seed, true);
    }

    #[test]
    fn moved_rows_continue_bit_identical_sparse(seed in any::<u64>()) {
        moved_rows_continue_bit_identical(seed, false);
    }
}

/// Swap-removing a slot: the last row's state now sits in the slot, the
/// others are untouched, the range shrank, and the moved row steps on as
/// it did in its old slot.
fn swap_remove_moves_the_last_row(seed: u64) {
    for (name, make) in movable() {
        let mut rng = Rng(seed);
        let mut a = make(RowIndex::Dense { rows: ROWS as u64 });
        let keys: Vec<u64> = (0..ROWS as u64).map(|s| 1000 + 7 * s).collect();
        let all: Vec<u64> = (0..ROWS as u64).collect();
        let mut ta = start_table(&keys);
        for _ in 0..1 + rng.below(5) {
            step(a.as_mut(), &mut ta, &batch(&mut rng, &keys, &all, &|s| s));
        }
        let before = a.export_rows(&all).unwrap();
        let mut reference = make(RowIndex::Dense { rows: ROWS as u64 });
        reference.import_state(&a.export_state()).unwrap();
        let freed = rng.below(ROWS as u64);
        let last = ROWS as u64 - 1;
        let moved = a
            .swap_remove_row(freed)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(moved, (freed != last).then_some(last), "{name}");
        // The slots as they are now, named by their old numbers.
        let now: Vec<u64> = (0..last)
            .map(|s| if s == freed { last } else { s })
            .collect();
        assert_eq!(
            a.export_rows(&(0..last).collect::<Vec<_>>()).unwrap(),
            reference.export_rows(&now).unwrap(),
            "{name}: state after the swap"
        );
        assert_ne!(before.len(), 0);
        assert_eq!(
            a.export_rows(&[last]),
            Err(RowStateError::SlotOutOfRange {
                slot: last,
                rows: last
            }),
            "{name}"
        );
        // The caller moves its table row the same way.
        let mut tr = ta.clone();
        let (f, l) = (freed as usize * DIM, last as usize * DIM);
        ta.copy_within(l..l + DIM, f);
        ta.truncate(l);
        let rest: Vec<u64> = (0..last).collect();
        // Slot `s` of A now holds the row (and key) of old slot `now[s]`.
        let keys_now: Vec<u64> = now.iter().map(|&o| keys[o as usize]).collect();
        for _ in 0..1 + rng.below(5) {
            let on_a = batch(&mut rng, &keys_now, &rest, &|s| s);
            let on_ref = (
                on_a.0.clone(),
                on_a.1
                    .iter()
                    .map(|&s| now[s as usize])
                    .collect::<Vec<u64>>(),
                on_a.2.clone(),
            );
            step(a.as_mut(), &mut ta, &on_a);
            step(reference.as_mut(), &mut tr, &on_ref);
        }
        for (s, &old) in now.iter().enumerate() {
            let (s, old) = (s * DIM, old as usize * DIM);
            assert_eq!(
                bits(&ta[s..s + DIM]),
                bits(&tr[old..old + DIM]),
                "{name}: table row"
            );
        }
        assert_eq!(
            a.export_rows(&rest).unwrap(),
            reference.export_rows(&now).unwrap(),
            "{name}"
        );
        // A sparse index has no slots to swap.
        let mut sparse = make(RowIndex::Sparse);
        assert_eq!(
            sparse.swap_remove_row(0),
            Err(RowStateError::Unsupported(RowStateUnsupported::SparseIndex)),
            "{name}"
        );
    }
}

/// Every refusal is typed and changes nothing.
#[test]
fn bad_moves_are_refused_and_change_nothing() {
    for (name, make) in movable() {
        let mut rng = Rng(9);
        let mut a = make(RowIndex::Dense { rows: ROWS as u64 });
        let mut b = make(RowIndex::Dense { rows: ROWS as u64 });
        let keys: Vec<u64> = (0..ROWS as u64).map(|s| 1000 + 7 * s).collect();
        let all: Vec<u64> = (0..ROWS as u64).collect();
        let (mut ta, mut tb) = (start_table(&keys), start_table(&keys));
        for _ in 0..3 {
            step(a.as_mut(), &mut ta, &batch(&mut rng, &keys, &all, &|s| s));
        }
        step(b.as_mut(), &mut tb, &batch(&mut rng, &keys, &all, &|s| s));
        let blob = a.export_rows(&[1, 2]).unwrap();
        let saved = b.export_state();
        let cases: Vec<(Vec<u64>, Vec<u8>, RowStateError)> = vec![
            (
                vec![1, 1],
                blob.clone(),
                RowStateError::Duplicate { slot: 1 },
            ),
            (
                vec![1, ROWS as u64],
                blob.clone(),
                RowStateError::SlotOutOfRange {
                    slot: ROWS as u64,
                    rows: ROWS as u64,
                },
            ),
            (
                vec![1],
                blob.clone(),
                RowStateError::CountMismatch {
                    expected: 1,
                    found: 2,
                },
            ),
            // b has stepped once, a three times.
            (
                vec![3, 4],
                blob.clone(),
                RowStateError::StepMismatch {
                    exported: 3,
                    here: 1,
                },
            ),
            (
                vec![3, 4],
                blob[..blob.len() - 1].to_vec(),
                RowStateError::State(StateError::Truncated {
                    needed: blob.len() as u64,
                    found: blob.len() as u64 - 1,
                }),
            ),
        ];
        for (slots, bytes, want) in cases {
            assert_eq!(b.import_rows(&slots, &bytes), Err(want), "{name}");
            assert_eq!(b.export_state(), saved, "{name}: changed on error");
        }
        // Any corrupted byte is refused (checksum or header), nothing
        // changes; the intact blob is taken by a fresh optimizer.
        let mut fresh = make(RowIndex::Dense { rows: ROWS as u64 });
        let empty = fresh.export_state();
        for at in 0..blob.len() {
            let mut bad = blob.clone();
            bad[at] ^= 0x5a;
            assert!(
                fresh.import_rows(&[3, 4], &bad).is_err(),
                "{name}: byte {at}"
            );
        }
        assert_eq!(fresh.export_state(), empty, "{name}: changed on error");
        fresh.import_rows(&[3, 4], &blob).unwrap();
        // A whole-state blob is not a row blob.
        let whole = a.export_state();
        assert!(
            matches!(
                b.import_rows(&[3], &whole),
                Err(RowStateError::State(StateError::WrongKind { .. }))
            ),
            "{name}"
        );
        assert_eq!(
            a.export_rows(&[0, 0]),
            Err(RowStateError::Duplicate { slot: 0 }),
            "{name}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn swap_remove_moves_the_last_row_and_steps_on(seed in any::<u64>()) {
        swap_remove_moves_the_last_row(seed);
    }
}

/// A d-choice bucketer remembers each key's bucket: rows cannot move
/// without it, and the refusal says so (whole-state export still works).
#[test]
fn d_choice_rows_are_refused_with_the_reason() {
    let config = BasisConfig::shared(DIM)
        .row_index(RowIndex::Dense { rows: ROWS as u64 })
        .build()
        .unwrap();
    let mut a = Basis::new(config, DChoice::sparse(BUCKETS, 2, 3).unwrap()).unwrap();
    let want = RowStateError::Unsupported(RowStateUnsupported::BucketerState);
    assert_eq!(a.export_rows(&[0]), Err(want));
    let b = Basis::new(config, OneChoice::new(BUCKETS, 3).unwrap()).unwrap();
    let blob = b.export_rows(&[0]).unwrap();
    assert_eq!(a.import_rows(&[0], &blob), Err(want));
    // Eviction needs no key: the scalar goes, the bucketer keeps its choice.
    assert_eq!(a.swap_remove_row(3), Ok(Some(ROWS as u64 - 1)));
    // Other optimizers have no buckets.
    let adam = ExactAdam::new(AdamConfig::default().with_dim(DIM)).unwrap();
    assert_eq!(adam.bucket_count(), 0);
    assert_eq!(
        adam.export_buckets(&[0]),
        Err(RowStateError::Unsupported(RowStateUnsupported::NoBuckets))
    );
}

/// Bucket moves: typed refusals, and a bucket blob of another kind or
/// configuration is refused.
#[test]
fn bad_bucket_moves_are_refused() {
    let config = |seed| {
        BasisConfig::shared(DIM)
            .row_index(RowIndex::Dense { rows: ROWS as u64 })
            .seed(seed)
            .build()
            .unwrap()
    };
    let a = Basis::new(config(1), OneChoice::new(BUCKETS, 3).unwrap()).unwrap();
    let mut b = Basis::new(config(2), OneChoice::new(BUCKETS, 3).unwrap()).unwrap();
    assert_eq!(
        a.export_buckets(&[BUCKETS]),
        Err(RowStateError::BucketOutOfRange {
            bucket: BUCKETS,
            buckets: BUCKETS
        })
    );
    assert_eq!(
        a.export_buckets(&[1, 1]),
        Err(RowStateError::Duplicate { slot: 1 })
    );
    let blob = a.export_buckets(&[0, 1]).unwrap();
    assert_eq!(
        b.import_buckets(&[0, 1], &blob),
        Err(RowStateError::State(StateError::ConfigMismatch {
            field: basis_core::StateField::Seed
        }))
    );
    let rows = a.export_rows(&[0]).unwrap();
    assert!(matches!(
        b.import_buckets(&[0], &rows),
        Err(RowStateError::State(StateError::WrongKind { .. }))
    ));
}

/// A row the exporter has no state for ("absent" in the blob) resets the
/// importer's state of that row: both then step it alike.
#[test]
fn an_absent_row_resets_the_importers_row() {
    for (name, make) in movable() {
        let index = RowIndex::Sparse;
        let (mut a, mut b) = (make(index), make(index));
        let keys: Vec<u64> = (0..ROWS as u64).map(|s| 1000 + 7 * s).collect();
        let (mut ta, mut tb) = (start_table(&keys), start_table(&keys));
        let g = vec![0.5f32; DIM];
        // One step each, on different rows: a never saw row 5, b did.
        step(a.as_mut(), &mut ta, &(vec![keys[1]], vec![1], g.clone()));
        step(b.as_mut(), &mut tb, &(vec![keys[5]], vec![5], g.clone()));
        if a.bucket_count() > 0 {
            let all: Vec<u32> = (0..a.bucket_count()).collect();
            b.import_buckets(&all, &a.export_buckets(&all).unwrap())
                .unwrap();
        }
        b.import_rows(&[5], &a.export_rows(&[5]).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        tb[5 * DIM..6 * DIM].copy_from_slice(&ta[5 * DIM..6 * DIM]);
        let batch = (vec![keys[5]], vec![5], vec![-0.25f32; DIM]);
        step(a.as_mut(), &mut ta, &batch);
        step(b.as_mut(), &mut tb, &batch);
        assert_eq!(
            bits(&ta[5 * DIM..6 * DIM]),
            bits(&tb[5 * DIM..6 * DIM]),
            "{name}"
        );
        assert_eq!(
            a.export_rows(&[5]).unwrap(),
            b.export_rows(&[5]).unwrap(),
            "{name}"
        );
    }
}
