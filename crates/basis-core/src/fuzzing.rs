//! Entry points of the cargo-fuzz targets, kept outside this package (one
//! library call per target), also replayed by the regression tests.
//!
//! They panic when an invariant breaks: that is how a fuzzer reports a bug.

use alloc::boxed::Box;
use alloc::vec::Vec;

use balanced_hash::{Bucketer, DChoice, OneChoice, Weighting};

use crate::{
    AdagradConfig, AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam, RowIndex,
    RowwiseAdagrad, ScalarStorage, Sgd, SparseOptimizer, TablePrecision,
};

/// One of 48 small BASIS configurations (`dim = 2`), picked by `sel`: every
/// direction × scalar storage × table precision × row index.
pub fn config(sel: u8) -> BasisConfig {
    let direction = [
        Direction::Shared,
        Direction::Signed,
        Direction::OwnGradient,
        Direction::RowScaled,
    ][usize::from(sel % 4)];
    let scalar_storage = [
        ScalarStorage::F32,
        ScalarStorage::Bf16,
        ScalarStorage::LogU8,
    ][usize::from(sel / 4 % 3)];
    let table_precision = if (sel / 12).is_multiple_of(2) {
        TablePrecision::F32
    } else {
        TablePrecision::Bf16
    };
    let row_index = if (sel / 24).is_multiple_of(2) {
        RowIndex::Sparse
    } else {
        RowIndex::Dense { rows: 6 }
    };
    BasisConfig {
        dim: 2,
        direction,
        scalar_storage,
        table_precision,
        row_index,
        ..BasisConfig::default()
    }
}

fn basis(sel: u8) -> Basis<OneChoice> {
    let buckets = OneChoice::new(3, 1).expect("3 buckets are valid");
    Basis::new(config(sel), buckets).expect("the fuzz configurations are valid")
}

/// BASIS over d-choice buckets for [`import_bytes`]: [`config`]`(sel)` over
/// 3 buckets with `d = 2` (dense keys `0..6` when the config's rows are
/// dense, sparse keys otherwise) or `d = 3` (sparse, frequency-weighted),
/// seed 1: every store and weighting of the bucketer's saved state.
pub fn d_choice_basis(sel: u8) -> Basis<DChoice> {
    let config = config(sel);
    let valid = "the fuzz configurations are valid";
    let bucketer = match (sel % 2, config.row_index) {
        (0, RowIndex::Dense { rows }) => DChoice::dense(rows, 3, 2, 1),
        (0, RowIndex::Sparse) => DChoice::sparse(3, 2, 1),
        _ => DChoice::sparse(3, 3, 1).map(|h| h.with_weighting(Weighting::Frequency)),
    };
    Basis::new(config, bucketer.expect(valid)).expect(valid)
}

/// `Basis::step` on arbitrary ids and gradient bits: byte 0 picks the
/// [`config`]; the rest is split into batches at every `0xFF` byte, each read
/// as 9-byte rows (an id byte taken mod 8, so ids 6 and 7 miss the 6-row
/// table, then two f32 gradient values).
///
/// # Panics
/// When a non-finite value reaches a shared bucket.
pub fn step_bytes(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut opt = basis(sel);
    let mut weights = [0.5f32; 12];
    for batch in rest.split(|&b| b == 0xFF) {
        let rows: Vec<&[u8]> = batch.chunks_exact(9).collect();
        let ids: Vec<u64> = rows.iter().map(|r| u64::from(r[0] % 8)).collect();
        let grads: Vec<f32> = rows
            .iter()
            .flat_map(|r| {
                [
                    f32::from_le_bytes([r[1], r[2], r[3], r[4]]),
                    f32::from_le_bytes([r[5], r[6], r[7], r[8]]),
                ]
            })
            .collect();
        if let Ok(mut table) = DenseTable::new(&mut weights, 2) {
            let _ = opt.step(&ids, &grads, &mut table);
        }
        for b in 0..opt.bucketer().buckets() {
            let Some(view) = opt.bucket_view(b) else {
                continue;
            };
            let finite = view
                .m
                .iter()
                .flatten()
                .chain(&view.v)
                .all(|x| x.is_finite());
            assert!(finite, "bucket {b} holds a non-finite value: {view:?}");
        }
    }
}

/// `SparseOptimizer::import_state` on arbitrary bytes: byte 0 picks one of
/// the 48 BASIS [`config`]s over one-choice buckets (`0..48`), exact Adam /
/// row-wise AdaGrad (`48..52`, odd selectors with dense rows), one of the 48
/// configs over d-choice buckets (`52..100`, see [`d_choice_basis`]: the
/// blob then carries remembered choices and loads), or SGD (`100..`); the
/// rest is the blob.
///
/// # Panics
/// When a rejected blob changed the optimizer, or an accepted one does not
/// re-export to the same bytes.
pub fn import_bytes(data: &[u8]) {
    let Some((&sel, blob)) = data.split_first() else {
        return;
    };
    let mut opt = optimizer(sel);
    let before = opt.export_state();
    let after = if opt.import_state(blob).is_ok() {
        blob.to_vec()
    } else {
        before
    };
    assert_eq!(opt.export_state(), after);
}

fn optimizer(sel: u8) -> Box<dyn SparseOptimizer> {
    let row_index = if sel.is_multiple_of(2) {
        RowIndex::Sparse
    } else {
        RowIndex::Dense { rows: 6 }
    };
    match sel {
        0..48 => Box::new(basis(sel)),
        52..100 => Box::new(d_choice_basis(sel - 52)),
        48..50 => Box::new(
            ExactAdam::new(AdamConfig {
                dim: 2,
                row_index,
                ..AdamConfig::default()
            })
            .expect("valid Adam configuration"),
        ),
        50..52 => Box::new(
            RowwiseAdagrad::new(AdagradConfig {
                dim: 2,
                row_index,
                ..AdagradConfig::default()
            })
            .expect("valid AdaGrad configuration"),
        ),
        _ => Box::new(Sgd::new(2, 0.1).expect("valid SGD configuration")),
    }
}

/// The state fingerprint: two BASIS optimizers, each picked by a 2-byte
/// selector (`data[0..2]`, `data[2..4]`, LE) from the 48 [`config`]s ×
/// {default seed, another seed} × {default lr, doubled lr} × {one-choice
/// seed 1, one-choice seed 2, two-choice seed 1}. The first steps on the
/// gradients in `data[4..]` and exports; the second imports. The import must
/// succeed exactly when both pick the same settings apart from the learning
/// rate (a plain hyper-parameter, free to change between export and
/// import), and a refused import changes nothing.
///
/// # Panics
/// When a blob of other settings is accepted, a blob of the same settings
/// refused, an accepted one does not re-export identically, or a refused
/// import changed the importer.
pub fn fingerprint_pair(data: &[u8]) {
    let [a0, a1, b0, b1, rest @ ..] = data else {
        return;
    };
    let (a, b) = (
        variant(u16::from_le_bytes([*a0, *a1])),
        variant(u16::from_le_bytes([*b0, *b1])),
    );
    let (mut from, mut to) = (build(a), build(b));
    let mut weights = [0.5f32; 12];
    let ids: Vec<u64> = rest.iter().map(|&x| u64::from(x % 6)).collect();
    let grads: Vec<f32> = rest
        .iter()
        .flat_map(|&x| [f32::from(x) / 64.0 - 2.0, 0.25])
        .collect();
    if let Ok(mut table) = DenseTable::new(&mut weights, 2) {
        let _ = from.step(&ids, &grads, &mut table);
    }
    let blob = from.export_state();
    let before = to.export_state();
    let same = a.settings == b.settings;
    match to.import_state(&blob) {
        Ok(()) => {
            assert!(same, "a blob of other settings was accepted: {a:?} → {b:?}");
            assert_eq!(to.export_state(), blob);
        }
        Err(e) => {
            assert!(!same, "a blob of the same settings was refused: {e}");
            assert_eq!(to.export_state(), before, "a refused import changed state");
        }
    }
}

/// What a [`fingerprint_pair`] selector picks.
#[derive(Debug, Clone, Copy)]
struct Variant {
    /// What the state depends on: (config, other seed, bucketer).
    settings: (u8, bool, u8),
    /// A hyper-parameter it does not depend on.
    double_lr: bool,
}

fn variant(sel: u16) -> Variant {
    let sel = sel % (48 * 2 * 2 * 3);
    Variant {
        settings: ((sel % 48) as u8, sel / 48 % 2 == 1, (sel / 192) as u8),
        double_lr: sel / 96 % 2 == 1,
    }
}

fn build(v: Variant) -> Box<dyn SparseOptimizer> {
    let (c, other_seed, bucketer) = v.settings;
    let base = config(c);
    let config = BasisConfig {
        seed: if other_seed {
            base.seed ^ 0xA5
        } else {
            base.seed
        },
        lr: if v.double_lr { base.lr * 2.0 } else { base.lr },
        ..base
    };
    let valid = "the fuzz configurations are valid";
    match bucketer {
        0 => Box::new(Basis::new(config, OneChoice::new(3, 1).expect(valid)).expect(valid)),
        1 => Box::new(Basis::new(config, OneChoice::new(3, 2).expect(valid)).expect(valid)),
        _ => Box::new(Basis::new(config, DChoice::sparse(3, 2, 1).expect(valid)).expect(valid)),
    }
}

/// [`SlotIndex`](crate::SlotIndex) against a slow model (a key per slot
/// and a `BTreeMap`): byte 0 picks the seed and a small segment size (so
/// splits happen), then 3-byte ops: `op % 4` = insert (0, 1; 1 on an absent id
/// through `try_insert_absent`), remove (2),
/// get (3) of the id `b1 | b2 << 56` (256 × 256 ids, clustered in the low
/// and spread in the high bits); `op = 0xFF` is a batch removal
/// (`retain`) of the ids `≡ b1 (mod 4)`, checked against swap-removes in
/// decreasing slot order.
///
/// # Panics
/// When the index and the model disagree or an invariant breaks.
pub fn slot_index(data: &[u8]) {
    use alloc::collections::BTreeMap;
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut index = crate::SlotIndex::with_segment_max(u64::from(sel >> 2), 16 << (sel & 3));
    let mut keys: Vec<u64> = Vec::new();
    let mut slots: BTreeMap<u64, u32> = BTreeMap::new();
    for (i, op) in rest.chunks_exact(3).enumerate() {
        let key = u64::from(op[1]) | u64::from(op[2]) << 56;
        if op[0] == 0xFF {
            let r = u64::from(op[1] & 3);
            let got = index.retain(|k, _| k % 4 != r).expect("small lists fit");
            let mut gone: Vec<u32> = (0u32..)
                .zip(&keys)
                .filter(|(_, k)| *k % 4 == r)
                .map(|(s, _)| s)
                .collect();
            gone.sort_unstable_by_key(|&s| core::cmp::Reverse(s));
            let want: Vec<crate::Removed> = gone
                .into_iter()
                .map(|slot| {
                    slots.remove(&keys[slot as usize]);
                    let last = keys.len() as u32 - 1;
                    keys.swap_remove(slot as usize);
                    let moved_from = (slot != last).then(|| {
                        slots.insert(keys[slot as usize], slot);
                        last
                    });
                    crate::Removed { slot, moved_from }
                })
                .collect();
            assert_eq!(got, want, "retain {r}");
            continue;
        }
        match op[0] % 4 {
            0 | 1 => {
                // Op 1 on an absent key: the caller-knows-absent insertion.
                let got = if op[0] % 4 == 1 && !slots.contains_key(&key) {
                    (
                        index
                            .try_insert_absent(key)
                            .expect("small tables always fit"),
                        true,
                    )
                } else {
                    index.try_insert(key).expect("small tables always fit")
                };
                let want = match slots.get(&key) {
                    Some(&s) => (s, false),
                    None => {
                        let s = keys.len() as u32;
                        keys.push(key);
                        slots.insert(key, s);
                        (s, true)
                    }
                };
                assert_eq!(got, want, "insert {key}");
            }
            2 => {
                let got = index.remove(key);
                let want = slots.remove(&key).map(|slot| {
                    let last = keys.len() as u32 - 1;
                    keys.swap_remove(slot as usize);
                    let moved_from = (slot != last).then(|| {
                        slots.insert(keys[slot as usize], slot);
                        last
                    });
                    crate::Removed { slot, moved_from }
                });
                assert_eq!(got, want, "remove {key}");
            }
            _ => assert_eq!(index.get(key), slots.get(&key).copied(), "get {key}"),
        }
        if i % 64 == 63 {
            index.check_invariants();
        }
    }
    index.check_invariants();
    assert_eq!(index.len(), keys.len());
    let pairs: Vec<(u64, u32)> = index.iter().collect();
    let want: Vec<(u64, u32)> = keys.iter().copied().zip(0u32..).collect();
    assert_eq!(pairs, want);
    // The batched lookup over every key the input named, held or not.
    let asked: Vec<u64> = rest
        .chunks_exact(3)
        .map(|op| u64::from(op[1]) | u64::from(op[2]) << 56)
        .collect();
    let mut got = alloc::vec![Some(u32::MAX); asked.len()];
    index.get_many(&asked, &mut got);
    for (k, g) in asked.iter().zip(got) {
        assert_eq!(g, slots.get(k).copied(), "get_many {k}");
    }
}
