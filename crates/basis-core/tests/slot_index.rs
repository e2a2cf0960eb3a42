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
    /// Remove every held id with `id % 3 == r` (a batch eviction).
    Retain(u64),
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
        30 => id.clone().prop_map(Op::Insert),
        10 => id.clone().prop_map(Op::Remove),
        10 => id.prop_map(Op::Get),
        1 => (0u64..3).prop_map(Op::Retain),
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

    /// `retain`'s contract spelled out: the removed slots in decreasing
    /// order, each an ordinary swap-remove.
    fn retain(&mut self, r: u64) -> Vec<Removed> {
        let mut gone: Vec<u32> = self
            .keys
            .iter()
            .zip(0u32..)
            .filter(|(k, _)| *k % 3 == r)
            .map(|(_, s)| s)
            .collect();
        gone.sort_unstable_by_key(|&s| core::cmp::Reverse(s));
        gone.iter()
            .map(|&s| self.remove(self.keys[s as usize]).unwrap())
            .collect()
    }
}

fn run(ops: &[Op], index: &mut SlotIndex) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    for op in ops {
        match *op {
            // Every other new id goes through `try_insert_absent` (the
            // caller knows it is not held): same slots as `try_insert`.
            Op::Insert(k) if !model.slots.contains_key(&k) && model.keys.len() % 2 == 1 => {
                prop_assert_eq!(index.try_insert_absent(k).unwrap(), model.insert(k).0);
            }
            Op::Insert(k) => prop_assert_eq!(index.try_insert(k).unwrap(), model.insert(k)),
            // Odd ids go through `remove_swap` (the caller names the last
            // slot's id); a wrong last id is refused and changes nothing.
            Op::Remove(k) if k % 2 == 1 && !model.keys.is_empty() => {
                let last = model.keys[model.keys.len() - 1];
                if model.slots.contains_key(&k) && model.keys.len() > 1 {
                    let wrong = model.keys[0];
                    prop_assert_eq!(index.remove_swap(k, wrong), None);
                    prop_assert_eq!(index.len(), model.keys.len());
                }
                prop_assert_eq!(index.remove_swap(k, last), model.remove(k));
            }
            Op::Remove(k) => prop_assert_eq!(index.remove(k), model.remove(k)),
            Op::Get(k) => prop_assert_eq!(index.get(k), model.slots.get(&k).copied()),
            Op::Retain(r) => {
                let mut asked = Vec::new();
                let got = index
                    .retain(|k, s| {
                        asked.push((k, s));
                        k % 3 != r
                    })
                    .unwrap();
                // `keep` saw every (id, slot) pair once.
                asked.sort_unstable_by_key(|p| p.1);
                let held: Vec<(u64, u32)> = model.keys.iter().copied().zip(0u32..).collect();
                prop_assert_eq!(asked, held);
                prop_assert_eq!(got, model.retain(r));
            }
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
    // The batched lookup answers as the model for every id the ops named
    // (held, removed or never inserted), in runs longer than its batch.
    let asked: Vec<u64> = ops
        .iter()
        .map(|op| match *op {
            Op::Insert(k) | Op::Remove(k) | Op::Get(k) => k,
            Op::Retain(r) => r.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        })
        .collect();
    let mut got = vec![Some(u32::MAX); asked.len()];
    index.get_many(&asked, &mut got);
    let want: Vec<Option<u32>> = asked.iter().map(|k| model.slots.get(k).copied()).collect();
    prop_assert_eq!(&got, &want);
    let mut slots = vec![0u32; asked.len()];
    index.get_many_slots(&asked, &mut slots);
    let want: Vec<u32> = want.iter().map(|s| s.unwrap_or(u32::MAX)).collect();
    prop_assert_eq!(slots, want);
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
fn memory_is_the_records_and_small_per_id() {
    let mut index = SlotIndex::new();
    assert_eq!(index.memory_bytes(), 0);
    let n = 200_000u64;
    let id = |i: u64| i.wrapping_mul(0x2545_F491_4F6C_DD1D);
    for i in 0..n {
        index.try_insert(id(i)).unwrap();
    }
    // ≈ 68–69-bit records (8.6 B) at loads between 7/8 and 31/32, plus
    // the directory: under 10 B per id, and no key array.
    let per_id = index.memory_bytes() as f64 / n as f64;
    assert!((8.5..10.0).contains(&per_id), "{per_id} B/id");
    // A batch removal of every other id keeps the slots dense and frees
    // nothing (segments do not shrink), the rest still answer.
    let steps = index.retain(|k, _| k % 2 == 0).unwrap();
    assert_eq!(index.len() + steps.len(), n as usize);
    assert!(steps.windows(2).all(|w| w[0].slot > w[1].slot));
    let mut seen = vec![false; index.len()];
    for i in 0..n {
        match index.get(id(i)) {
            Some(s) => {
                assert_eq!(id(i) % 2, 0);
                assert!(!core::mem::replace(&mut seen[s as usize], true));
            }
            None => assert_eq!(id(i) % 2, 1),
        }
    }
    assert!(seen.iter().all(|&b| b));
    index.check_invariants();
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
