//! `SlotIndex` against `std::collections::HashMap` (plus a key-per-slot
//! vector for the swap-remove slot numbering): random sequences of
//! insert / get / remove over small and wide id ranges, with small segments
//! so that rebuilds, splits and directory doubling all happen.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use basis_core::{Removed, SlotIndex};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(u64),
    Remove(u64),
    Get(u64),
}

/// Ids from a narrow range (many repeats, removals that hit) mapped through
/// one of three shapes: sequential, strided by 2^32, or high-bit only.
fn op(shape: u8) -> impl Strategy<Value = Op> {
    let id = (0u64..300).prop_map(move |i| match shape {
        0 => i,
        1 => i << 32,
        _ => i.rotate_right(9) ^ 0xFFFF_0000_0000_0000,
    });
    prop_oneof![
        3 => id.clone().prop_map(Op::Insert),
        1 => id.clone().prop_map(Op::Remove),
        1 => id.prop_map(Op::Get),
    ]
}

/// The obviously correct model: slot → key and key → slot.
#[derive(Default)]
struct Model {
    keys: Vec<u64>,
    slots: HashMap<u64, u32>,
}

impl Model {
    fn insert(&mut self, k: u64) -> (u32, bool) {
        if let Some(&s) = self.slots.get(&k) {
            return (s, false);
        }
        let s = self.keys.len() as u32;
        self.keys.push(k);
        self.slots.insert(k, s);
        (s, true)
    }

    fn remove(&mut self, k: u64) -> Option<Removed> {
        let slot = self.slots.remove(&k)?;
        let last = self.keys.len() as u32 - 1;
        self.keys.swap_remove(slot as usize);
        let moved_from = (slot != last).then(|| {
            self.slots.insert(self.keys[slot as usize], slot);
            last
        });
        Some(Removed { slot, moved_from })
    }
}

fn run(ops: &[Op], index: &mut SlotIndex) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    for op in ops {
        match *op {
            Op::Insert(k) => prop_assert_eq!(index.try_insert(k).unwrap(), model.insert(k)),
            Op::Remove(k) => prop_assert_eq!(index.remove(k), model.remove(k)),
            Op::Get(k) => prop_assert_eq!(index.get(k), model.slots.get(&k).copied()),
        }
        prop_assert_eq!(index.len(), model.keys.len());
    }
    index.check_invariants();
    let pairs: Vec<(u64, u32)> = index.iter().collect();
    let want: Vec<(u64, u32)> = model.keys.iter().copied().zip(0u32..).collect();
    prop_assert_eq!(pairs, want);
    for (s, &k) in model.keys.iter().enumerate() {
        prop_assert_eq!(index.key_of(s as u32), Some(k));
        prop_assert!(index.contains_key(k));
    }
    prop_assert_eq!(index.key_of(model.keys.len() as u32), None);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn index_equals_a_hashmap(
        ops in (0u8..3).prop_flat_map(|s| prop::collection::vec(op(s), 0..600)),
        seed in any::<u64>(),
        small in any::<bool>(),
    ) {
        let mut index = if small {
            SlotIndex::with_segment_max(seed, 16)
        } else {
            SlotIndex::with_seed(seed)
        };
        run(&ops, &mut index)?;
    }

    #[test]
    fn growth_then_removal_of_everything(n in 0usize..3000, seed in any::<u64>()) {
        let ops: Vec<Op> = (0..n as u64)
            .map(|i| Op::Insert(i.wrapping_mul(0x9E37_79B9)))
            .chain((0..n as u64).rev().map(|i| Op::Remove(i.wrapping_mul(0x9E37_79B9))))
            .collect();
        let mut index = SlotIndex::with_segment_max(seed, 32);
        run(&ops, &mut index)?;
        prop_assert!(index.is_empty());
    }
}

#[test]
fn memory_is_the_sum_of_the_allocations_and_small_per_id() {
    let mut index = SlotIndex::new();
    assert_eq!(index.memory_bytes(), 0);
    let n = 200_000u64;
    for i in 0..n {
        index
            .try_insert(i.wrapping_mul(0x2545_F491_4F6C_DD1D))
            .unwrap();
    }
    let keys = (n as usize).div_ceil(basis_core::slot_index::KEY_CHUNK)
        * basis_core::slot_index::KEY_CHUNK
        * 8;
    // Keys by slot plus the table; the table alone stays under 7 B per id
    // (5 B per position at loads between 3/4 and 15/16, plus directory).
    let rest = index.memory_bytes() - index.table_bytes();
    // The chunk list's own capacity: 16 B per chunk pointer.
    assert!((keys..=keys + 64 * 16).contains(&rest), "{rest} B of keys");
    let table_per_id = index.table_bytes() as f64 / n as f64;
    assert!((5.3..7.0).contains(&table_per_id), "{table_per_id} B/id");
    // Removing everything frees the keys down to one spare chunk.
    for i in 0..n {
        index.remove(i.wrapping_mul(0x2545_F491_4F6C_DD1D)).unwrap();
    }
    assert!(index.memory_bytes() - index.table_bytes() <= 2 * 8 * 4096 + 1024);
}

#[test]
fn the_fuzz_entry_agrees_on_pseudo_random_bytes() {
    // An xorshift stream: thousands of ops per selector byte.
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    for sel in [0u8, 1, 2, 3, 0x41, 0xFE] {
        let mut data = vec![sel];
        for _ in 0..6000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.push(x as u8);
        }
        basis_core::fuzzing::slot_index(&data);
    }
}
