//! `ShardedTable::checksum` is order-independent and catches one change:
//! tables restored from hand-built snapshots (same rows in another slot
//! order, one coordinate / one id changed, two rows' values swapped), under
//! both index layouts and all row precisions.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;
use common::mix;

use basis_core::Sgd;
use basis_shard::{IndexKind, OwnerRule, RowPrecision, ShardedTable, TableConfig, TableSnapshot};

const DIM: usize = 5;

/// An empty one-rank table of `kind` storing rows at `precision`.
fn empty(kind: IndexKind, precision: RowPrecision) -> ShardedTable<Sgd> {
    let config = TableConfig::new(DIM, OwnerRule::hashed(1, 3).unwrap(), 0)
        .with_index(kind)
        .with_precision(precision, 7);
    ShardedTable::new(config, Sgd::new(DIM, 0.5).unwrap()).unwrap()
}

/// The checksum of a table holding `rows` (id, values) in that slot order.
fn checksum_of(kind: IndexKind, precision: RowPrecision, rows: &[(u64, [f32; DIM])]) -> u64 {
    let mut t = empty(kind, precision);
    let mut snap: TableSnapshot = t.snapshot();
    snap.ids = rows.iter().map(|r| r.0).collect();
    snap.rows = rows.iter().flat_map(|r| r.1).collect();
    t.restore_snapshot(snap).unwrap();
    assert_eq!(t.len(), rows.len());
    t.checksum()
}

/// `n` rows with distinct pseudo-random ids and values exact in bf16 and
/// f16 (small multiples of 1/8), seeded by `seed`.
fn rows(seed: u64, n: usize) -> Vec<(u64, [f32; DIM])> {
    (0..n as u64)
        .map(|i| {
            // `mix` is a bijection: distinct `i` give distinct ids.
            let id = mix(seed.wrapping_mul(1 << 32) ^ i);
            let mut v = [0.0; DIM];
            for (j, x) in v.iter_mut().enumerate() {
                *x = (mix(id ^ j as u64) % 64) as f32 / 8.0 - 4.0;
            }
            (id, v)
        })
        .collect()
}

/// A permutation of `0..n` from `seed` (Fisher–Yates).
fn shuffle<T>(v: &mut [T], seed: u64) {
    for i in (1..v.len()).rev() {
        let j = (mix(seed ^ i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

const KINDS: [IndexKind; 2] = [IndexKind::Fast, IndexKind::Compact];
const PRECISIONS: [RowPrecision; 3] = [RowPrecision::F32, RowPrecision::Bf16, RowPrecision::F16];

#[test]
fn the_same_rows_in_any_order_and_index_give_the_same_checksum() {
    for seed in 0..6 {
        for n in [0, 1, 2, 37, 500] {
            for p in PRECISIONS {
                let base = rows(seed, n);
                let want = checksum_of(IndexKind::Fast, p, &base);
                for (k, kind) in KINDS.into_iter().enumerate() {
                    let mut r = base.clone();
                    shuffle(&mut r, seed * 10 + k as u64);
                    assert_eq!(checksum_of(kind, p, &r), want, "{seed} {n} {p:?} {kind:?}");
                }
            }
        }
    }
}

#[test]
fn one_changed_coordinate_id_or_swap_changes_the_checksum() {
    for seed in 0..6 {
        let n = 40;
        let base = rows(seed, n);
        for kind in KINDS {
            let want = checksum_of(kind, RowPrecision::F32, &base);
            for t in 0..20u64 {
                let i = (mix(seed ^ t << 8) % n as u64) as usize;
                let j = (mix(seed ^ t << 16) % DIM as u64) as usize;
                // One coordinate, by one step of 1/8 or by a sign (also
                // -0.0 against 0.0: a different bit pattern counts).
                let mut r = base.clone();
                r[i].1[j] += 0.125;
                assert_ne!(checksum_of(kind, RowPrecision::F32, &r), want);
                let mut r = base.clone();
                r[i].1[j] = -r[i].1[j];
                if r[i].1[j].to_bits() != base[i].1[j].to_bits() {
                    assert_ne!(checksum_of(kind, RowPrecision::F32, &r), want);
                }
                // One id (to one not held).
                let mut r = base.clone();
                r[i].0 ^= 1 << (t % 64);
                if base.iter().all(|b| b.0 != r[i].0) {
                    assert_ne!(checksum_of(kind, RowPrecision::F32, &r), want);
                }
                // Two rows' values swapped (ids stay).
                let k = (i + 1 + t as usize % (n - 1)) % n;
                let mut r = base.clone();
                let (a, b) = (r[i].1, r[k].1);
                r[i].1 = b;
                r[k].1 = a;
                if a != b {
                    assert_ne!(checksum_of(kind, RowPrecision::F32, &r), want);
                }
                // A row dropped or added.
                let mut r = base.clone();
                r.remove(i);
                assert_ne!(checksum_of(kind, RowPrecision::F32, &r), want);
                let mut r = base.clone();
                r.push((mix(!seed ^ t), [0.0; DIM]));
                assert_ne!(checksum_of(kind, RowPrecision::F32, &r), want);
            }
        }
    }
}
