//! `SparseOptimizer::step_keyed` (rows hashed by key, stored by slot)
//! against the obviously correct references: with `keys == slots` it is
//! `step` bit for bit, and with slots numbered in arrival order (what a
//! shard store does) it equals `step` by key over a key-indexed table.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

extern crate alloc;

use alloc::collections::BTreeMap;

use balanced_hash::{DChoice, OneChoice};
use basis_core::{
    AdagradConfig, Adam8bit, AdamConfig, Basis, BasisConfig, DenseTable, ExactAdam, Ftrl,
    FtrlConfig, PartialRowwiseAdam, RowAccess, RowIndex, RowStepAdam, RowwiseAdagrad,
    ScalarStorage, Sgd, SparseOptimizer, StepError, TablePrecision,
};
use common::{Rng, grads};
use proptest::prelude::*;

const DIM: usize = 3;
const BUCKETS: u32 = 7;

/// Every optimizer kind, its per-row state indexed by `index`; BASIS in the
/// modes whose step reads the id differently (signs, compact scalars with
/// stochastic rounding, bf16 tables, row scaling, d-choice buckets).
fn optimizers(index: RowIndex) -> Vec<(&'static str, Box<dyn SparseOptimizer>)> {
    let shared = |storage, precision| {
        BasisConfig::shared(DIM)
            .scalar_storage(storage)
            .table_precision(precision)
            .row_index(index)
            .seed(5)
            .build()
            .unwrap()
    };
    let one = || OneChoice::new(BUCKETS, 3).unwrap();
    let basis = |c| -> Box<dyn SparseOptimizer> { Box::new(Basis::new(c, one()).unwrap()) };
    let adam = AdamConfig::default()
        .with_dim(DIM)
        .with_lr(0.01)
        .with_weight_decay(0.1)
        .with_row_index(index);
    vec![
        (
            "basis f32",
            basis(shared(ScalarStorage::F32, TablePrecision::F32)),
        ),
        (
            "basis u8",
            basis(shared(ScalarStorage::LogU8, TablePrecision::F32)),
        ),
        (
            "basis bf16",
            basis(shared(ScalarStorage::Bf16, TablePrecision::Bf16)),
        ),
        (
            "basis signed",
            basis(BasisConfig::signed(DIM).row_index(index).build().unwrap()),
        ),
        (
            "basis rowscaled",
            basis(
                BasisConfig::row_scaled(DIM)
                    .row_index(index)
                    .build()
                    .unwrap(),
            ),
        ),
        (
            "basis 2-choice",
            Box::new(
                Basis::new(
                    shared(ScalarStorage::F32, TablePrecision::F32),
                    DChoice::sparse(BUCKETS, 2, 3).unwrap(),
                )
                .unwrap(),
            ),
        ),
        (
            "adam",
            Box::new(
                ExactAdam::new(AdamConfig::default().with_dim(DIM).with_row_index(index)).unwrap(),
            ),
        ),
        (
            "adagrad",
            Box::new(
                RowwiseAdagrad::new(AdagradConfig::default().with_dim(DIM).with_row_index(index))
                    .unwrap(),
            ),
        ),
        ("sgd", Box::new(Sgd::new(DIM, 0.1).unwrap())),
        (
            "partial-rowwise-adam",
            Box::new(PartialRowwiseAdam::new(adam).unwrap()),
        ),
        ("rowstep-adam", Box::new(RowStepAdam::new(adam).unwrap())),
        (
            "ftrl",
            Box::new(
                Ftrl::new(
                    FtrlConfig::default()
                        .with_dim(DIM)
                        .with_l1(0.01)
                        .with_row_index(index),
                )
                .unwrap(),
            ),
        ),
        // Blocks of 2 over d = 3: two blocks per row, the last one short.
        ("adam8bit", Box::new(Adam8bit::new(adam, 2).unwrap())),
    ]
}

/// Rows by key (the reference's table).
struct ByKey(BTreeMap<u64, Vec<f32>>);

impl RowAccess for ByKey {
    fn dim(&self) -> usize {
        DIM
    }
    fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
        self.0.get_mut(&id).map(Vec::as_mut_slice)
    }
}

fn start_row(key: u64) -> Vec<f32> {
    (0..DIM)
        .map(|j| ((key % 97) as f32 - 48.0) * 0.01 + j as f32 * 0.1)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `keys == slots`: the keyed step is `step`, bit for bit (tables and
    /// exported state).
    #[test]
    fn keys_equal_to_slots_are_step(seed in any::<u64>(), steps in 1usize..6) {
        let rows = 40u64;
        let index = RowIndex::Dense { rows };
        for ((name, mut a), (_, mut b)) in optimizers(index).into_iter().zip(optimizers(index)) {
            let mut ta = vec![0.5f32; rows as usize * DIM];
            let mut tb = ta.clone();
            let mut rng = Rng(seed);
            for _ in 0..steps {
                let n = 1 + rng.below(24) as usize;
                let ids: Vec<u64> = (0..n).map(|_| rng.below(rows)).collect();
                let g = grads(&mut rng, n, DIM, 0.3);
                let ra = a.step_keyed(&ids, &ids, &g, &mut DenseTable::new(&mut ta, DIM).unwrap()).unwrap();
                let rb = b.step(&ids, &g, &mut DenseTable::new(&mut tb, DIM).unwrap()).unwrap();
                prop_assert_eq!(ra, rb, "{}", name);
            }
            let bits = |t: &[f32]| t.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&ta), bits(&tb), "{}", name);
            prop_assert_eq!(a.export_state(), b.export_state(), "{}", name);
        }
    }

    /// Slots numbered in arrival order over keys from the whole `u64`
    /// space, state dense by slot and grown as rows arrive, equal the same
    /// optimizer stepped by key over a key-indexed table with a sparse
    /// index: the slot numbering leaves no trace.
    #[test]
    fn arrival_order_slots_equal_stepping_by_key(seed in any::<u64>(), steps in 1usize..6) {
        for ((name, mut keyed), (_, mut by_key)) in optimizers(RowIndex::Dense { rows: 0 })
            .into_iter()
            .zip(optimizers(RowIndex::Sparse))
        {
            let mut rng = Rng(seed);
            let universe: Vec<u64> = (0..30).map(|_| rng.next_u64()).collect();
            let mut slot_of: BTreeMap<u64, u64> = BTreeMap::new();
            let mut slotted: Vec<f32> = Vec::new();
            let mut reference = ByKey(BTreeMap::new());
            for _ in 0..steps {
                let n = 1 + rng.below(20) as usize;
                let keys: Vec<u64> = (0..n).map(|_| universe[rng.below(30) as usize]).collect();
                for &k in &keys {
                    if !slot_of.contains_key(&k) {
                        slot_of.insert(k, slot_of.len() as u64);
                        slotted.extend(start_row(k));
                        reference.0.insert(k, start_row(k));
                    }
                }
                keyed.grow_rows(slot_of.len() as u64).or_else(|e| {
                    // SGD holds no per-row state to grow.
                    if name == "sgd" { Ok(()) } else { Err(e) }
                }).unwrap();
                let slots: Vec<u64> = keys.iter().map(|k| slot_of[k]).collect();
                let g = grads(&mut rng, n, DIM, 0.3);
                keyed.step_keyed(&keys, &slots, &g, &mut DenseTable::new(&mut slotted, DIM).unwrap()).unwrap();
                by_key.step(&keys, &g, &mut reference).unwrap();
            }
            for (k, row) in &reference.0 {
                let s = slot_of[k] as usize;
                let got: Vec<u32> = slotted[s * DIM..(s + 1) * DIM].iter().map(|x| x.to_bits()).collect();
                let want: Vec<u32> = row.iter().map(|x| x.to_bits()).collect();
                prop_assert_eq!(got, want, "{} key {}", name, k);
            }
        }
    }
}

#[test]
fn mismatched_keys_are_typed_errors_and_change_nothing() {
    for (name, mut opt) in optimizers(RowIndex::Dense { rows: 4 }) {
        let mut t = vec![1.0f32; 4 * DIM];
        let before = opt.export_state();
        let g = vec![0.5f32; 2 * DIM];
        let mut step = |keys: &[u64], slots: &[u64]| {
            opt.step_keyed(keys, slots, &g, &mut DenseTable::new(&mut t, DIM).unwrap())
                .unwrap_err()
        };
        assert_eq!(
            step(&[9], &[0, 1]),
            StepError::KeyLength { keys: 1, slots: 2 },
            "{name}"
        );
        assert_eq!(
            step(&[9, 8], &[1, 1]),
            StepError::KeyConflict { key: 9, slot: 1 },
            "{name}"
        );
        assert_eq!(
            step(&[9, 9], &[0, 1]),
            StepError::KeyConflict { key: 9, slot: 1 },
            "{name}"
        );
        assert_eq!(opt.export_state(), before, "{name}");
        assert!(t.iter().all(|&x| x == 1.0), "{name}");
    }
}
