//! The bucketer's own state travels with a BASIS blob: export → import →
//! continue is bit-identical for every bucketer (one-choice, d-choice with
//! d = 2..4, dense and sparse, both weightings) and every direction mode,
//! including keys first seen after the restart; a version-2 blob (no
//! bucketer state) is read where that is exact and refused where it is not.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use balanced_hash::{Bucketer, DChoice, HashError, OneChoice, SavedSetting, Weighting};
use basis_core::{
    Basis, BasisConfig, DenseTable, Direction, RowIndex, ScalarStorage, SparseOptimizer, StateError,
};
use common::{Rng, grads};

const DIM: usize = 3;
const ROWS: u64 = 40;

/// Step `i` draws 6 ids from `0..8 + 2·i`: keys keep appearing for the
/// first time, before and after the restart.
fn steps(opt: &mut dyn SparseOptimizer, table: &mut [f32], rng: &mut Rng, from: u64, n: u64) {
    for i in from..from + n {
        let ids: Vec<u64> = (0..6).map(|_| rng.below((8 + 2 * i).min(ROWS))).collect();
        let g = grads(rng, ids.len(), DIM, 0.5);
        opt.step(&ids, &g, &mut DenseTable::new(table, DIM).unwrap())
            .unwrap();
    }
}

/// The bucketers under test, by index (`BUCKETERS` of them).
const BUCKETERS: usize = 8;

fn bucketer(i: usize) -> Box<dyn Fn() -> Box<dyn BucketerLike>> {
    match i {
        0 => Box::new(|| Box::new(OneChoice::new(5, 8).unwrap())),
        1..=3 => Box::new(move || Box::new(DChoice::dense(ROWS, 5, i as u8 + 1, 8).unwrap())),
        4..=6 => Box::new(move || Box::new(DChoice::sparse(5, i as u8 - 2, 8).unwrap())),
        _ => Box::new(|| {
            Box::new(
                DChoice::sparse(5, 2, 8)
                    .unwrap()
                    .with_weighting(Weighting::Frequency),
            )
        }),
    }
}

/// A bucketer boxed with a way to build a BASIS optimizer over it.
trait BucketerLike {
    fn basis(self: Box<Self>, c: BasisConfig) -> Box<dyn SparseOptimizer>;
}

impl<H: Bucketer + 'static> BucketerLike for H {
    fn basis(self: Box<Self>, c: BasisConfig) -> Box<dyn SparseOptimizer> {
        Box::new(Basis::new(c, *self).unwrap())
    }
}

fn configs() -> Vec<BasisConfig> {
    let mut out = Vec::new();
    for direction in [
        Direction::RowScaled,
        Direction::Shared,
        Direction::Signed,
        Direction::OwnGradient,
    ] {
        for (storage, index) in [
            (ScalarStorage::F32, RowIndex::Sparse),
            (ScalarStorage::LogU8, RowIndex::Dense { rows: ROWS }),
        ] {
            out.push(
                BasisConfig::default()
                    .with_dim(DIM)
                    .with_direction(direction)
                    .with_scalar_storage(storage)
                    .with_row_index(index),
            );
        }
    }
    out
}

#[test]
fn every_bucketer_and_mode_continues_bit_identically_after_a_round_trip() {
    for c in configs() {
        for i in 0..BUCKETERS {
            let make = bucketer(i);
            let mut a = make().basis(c);
            let mut ta = vec![0.1f32; ROWS as usize * DIM];
            let mut rng = Rng(17);
            steps(a.as_mut(), &mut ta, &mut rng, 0, 6);
            let blob = a.export_state();
            let mut b = make().basis(c);
            b.import_state(&blob).unwrap();
            assert_eq!(b.export_state(), blob, "{c:?} bucketer {i}");
            let (mut tb, mut rng_b) = (ta.clone(), rng.clone());
            steps(a.as_mut(), &mut ta, &mut rng, 6, 10);
            steps(b.as_mut(), &mut tb, &mut rng_b, 6, 10);
            let same = ta.iter().zip(&tb).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{:?} bucketer {i}: tables differ", c.direction);
            assert_eq!(a.export_state(), b.export_state(), "{c:?} bucketer {i}");
        }
    }
}

/// Without the bucketer's state the same continuation differs: the round
/// trip above would fail if the choices were not carried.
#[test]
fn a_fresh_d_choice_bucketer_would_diverge() {
    let c = configs()[2];
    let make = || DChoice::sparse(5, 2, 8).unwrap();
    let mut a = Basis::new(c, make()).unwrap();
    let mut ta = vec![0.1f32; ROWS as usize * DIM];
    let mut rng = Rng(17);
    steps(&mut a, &mut ta, &mut rng, 0, 6);
    let mut fresh = make();
    // What an import without the choices gave: the other state, a fresh map.
    let kept = a.bucketer().clone();
    assert!((0..ROWS).any(|k| fresh.assign(k) != kept.bucket(k)));
}

/// Rewrites a version-3 blob as version 2: the bucketer section (its `u64`
/// length and the `section` bytes, the last of the payload) removed, header
/// and CRC fixed.
fn as_version_2(blob: &[u8], section: usize) -> Vec<u8> {
    let payload = &blob[16..blob.len() - 4];
    let end = payload.len() - 8 - section;
    let len = u64::from_le_bytes(payload[end..end + 8].try_into().unwrap());
    assert_eq!(
        len as usize, section,
        "the bucketer section ends the payload"
    );
    let mut out = Vec::new();
    out.extend_from_slice(b"BSIS");
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&blob[6..8]);
    out.extend_from_slice(&(end as u64).to_le_bytes());
    out.extend_from_slice(&payload[..end]);
    let crc = common::crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// What `save_state` writes for `h`.
fn saved<H: Bucketer>(h: &H) -> Vec<u8> {
    let mut out = Vec::new();
    h.save_state(&mut out);
    out
}

#[test]
fn a_version_2_blob_is_read_only_where_that_is_exact() {
    let c = configs()[3];
    // One-choice: no bucketer state, so version 2 is exact and still read.
    let mut one = Basis::new(c, OneChoice::new(5, 8).unwrap()).unwrap();
    let mut t = vec![0.1f32; ROWS as usize * DIM];
    steps(&mut one, &mut t, &mut Rng(3), 0, 4);
    let v3 = one.export_state();
    let v2 = as_version_2(&v3, 0);
    assert_eq!(v2.len(), v3.len() - 8);
    let mut fresh = Basis::new(c, OneChoice::new(5, 8).unwrap()).unwrap();
    assert_eq!(fresh.import_state(&v2), Ok(()));
    assert_eq!(fresh.export_state(), v3);
    // d-choice: its remembered choices are not in a version-2 blob.
    let mut two = Basis::new(c, DChoice::dense(ROWS, 5, 2, 8).unwrap()).unwrap();
    steps(&mut two, &mut t, &mut Rng(3), 0, 4);
    let v2 = as_version_2(&two.export_state(), saved(two.bucketer()).len());
    let mut fresh = Basis::new(c, DChoice::dense(ROWS, 5, 2, 8).unwrap()).unwrap();
    let before = fresh.export_state();
    assert_eq!(
        fresh.import_state(&v2),
        Err(StateError::MissingBucketerState)
    );
    assert_eq!(fresh.export_state(), before);
}

#[test]
fn another_bucketer_store_or_weighting_is_refused_by_name() {
    let c = configs()[1];
    let mut t = vec![0.1f32; ROWS as usize * DIM];
    let mut dense = Basis::new(c, DChoice::dense(ROWS, 5, 2, 8).unwrap()).unwrap();
    steps(&mut dense, &mut t, &mut Rng(5), 0, 4);
    let blob = dense.export_state();
    let cases = [
        (DChoice::sparse(5, 2, 8).unwrap(), SavedSetting::KeyStore),
        (
            DChoice::dense(ROWS, 5, 2, 8)
                .unwrap()
                .with_weighting(Weighting::Frequency),
            SavedSetting::Weighting,
        ),
    ];
    for (h, setting) in cases {
        let mut other = Basis::new(c, h).unwrap();
        let before = other.export_state();
        assert_eq!(
            other.import_state(&blob),
            Err(StateError::Bucketer(HashError::StateMismatch { setting }))
        );
        assert_eq!(
            other.export_state(),
            before,
            "a refused import changed state"
        );
    }
}

/// The `basis_import` fuzz target's d-choice selectors (`52..100`) on blobs
/// they accept (exported by the same optimizer after some steps) and on
/// damaged copies of them: accepted blobs re-export identically, refused
/// ones change nothing (the target panics otherwise).
#[test]
fn import_fuzz_property_holds_for_d_choice_blobs() {
    for sel in 0..48u8 {
        let mut opt = basis_core::fuzzing::d_choice_basis(sel);
        let mut t = vec![0.5f32; 6 * 2];
        let mut rng = Rng(u64::from(sel));
        for _ in 0..3 {
            let ids: Vec<u64> = (0..4).map(|_| rng.below(6)).collect();
            let g = grads(&mut rng, ids.len(), 2, 0.5);
            opt.step(&ids, &g, &mut DenseTable::new(&mut t, 2).unwrap())
                .unwrap();
        }
        assert!(opt.bucketer().assigned_keys() > 0);
        let mut data = vec![52 + sel];
        data.extend(opt.export_state());
        basis_core::fuzzing::import_bytes(&data);
        let mut fresh = basis_core::fuzzing::d_choice_basis(sel);
        assert_eq!(fresh.import_state(&data[1..]), Ok(()));
        assert_eq!(fresh.export_state(), data[1..]);
        for pos in (1..data.len()).step_by(7) {
            let mut bad = data.clone();
            bad[pos] ^= 0x10;
            basis_core::fuzzing::import_bytes(&bad);
        }
    }
}
