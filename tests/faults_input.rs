//! Bad input across crates: fuzz-found regressions replayed from
//! `fuzz/regressions/`, gradients whose squares overflow f32, optimizer
//! blobs stored in checkpoint files and corrupted on disk, blobs fed to the
//! wrong optimizer.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use std::path::{Path, PathBuf};

use basis::core::{
    AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam, RowIndex, ScalarStorage,
    SparseOptimizer, StateError, TablePrecision,
};
use basis::hash::{Bucketer, OneChoice};
use basis_std::checkpoint::{self, Checkpoint, CheckpointError, FormatError};

/// The configuration the `basis_step` / `basis_import` fuzz targets derive
/// from their first input byte (keep in sync with `fuzz/fuzz_targets/`).
fn fuzz_config(sel: u8) -> BasisConfig {
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
    let table_precision = if sel / 12 % 2 == 0 {
        TablePrecision::F32
    } else {
        TablePrecision::Bf16
    };
    let row_index = if sel / 24 % 2 == 0 {
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

/// The `basis_step` fuzz target's body, replayed on a committed input.
fn replay_basis_step(data: &[u8], what: &str) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut opt = Basis::new(fuzz_config(sel), OneChoice::new(3, 1).unwrap()).unwrap();
    let mut weights = [0.5f32; 12];
    for batch in rest.split(|&b| b == 0xFF) {
        let rows: Vec<&[u8]> = batch.chunks_exact(9).collect();
        let ids: Vec<u64> = rows.iter().map(|r| u64::from(r[0] % 8)).collect();
        let grads: Vec<f32> = rows
            .iter()
            .flat_map(|r| {
                [
                    f32::from_le_bytes(r[1..5].try_into().unwrap()),
                    f32::from_le_bytes(r[5..9].try_into().unwrap()),
                ]
            })
            .collect();
        let _ = opt.step(&ids, &grads, &mut DenseTable::new(&mut weights, 2).unwrap());
        assert_buckets_finite(&opt, what);
    }
}

fn regressions(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
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
        replay_basis_step(&data, &file.display().to_string());
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
        for huge in [3e19f32, 2e38, f32::MAX, -f32::MAX] {
            let config = BasisConfig {
                dim: 2,
                direction,
                row_index: RowIndex::Dense { rows: 4 },
                ..BasisConfig::default()
            };
            let mut opt = Basis::new(config, OneBucket).unwrap();
            let mut weights = [0.5f32; 8];
            let what = format!("{direction:?}, g = {huge:e}");
            // Row 0 gets the huge value (twice: duplicates are summed),
            // rows 1 and 2 are ordinary neighbours in the same bucket.
            let ids = [0u64, 0, 1, 2];
            let grads = [huge, 1.0, huge, 1.0, 0.1, -0.2, 0.3, 0.1];
            let _ = opt.step(&ids, &grads, &mut DenseTable::new(&mut weights, 2).unwrap());
            assert_buckets_finite(&opt, &what);
            // A normal step afterwards must still be well defined.
            let _ = opt.step(
                &[1, 2, 3],
                &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
                &mut DenseTable::new(&mut weights, 2).unwrap(),
            );
            assert_buckets_finite(&opt, &what);
            assert!(
                weights[2..].iter().all(|w| w.is_finite()),
                "{what}: a neighbour row went non-finite: {weights:?}"
            );
        }
    }
}

fn trained_basis() -> (Basis<OneChoice>, Vec<f32>) {
    let config = BasisConfig {
        dim: 4,
        row_index: RowIndex::Dense { rows: 16 },
        ..BasisConfig::default()
    };
    let mut opt = Basis::new(config, OneChoice::new(4, 9).unwrap()).unwrap();
    let mut weights = vec![0.25f32; 16 * 4];
    for step in 0..5u64 {
        let ids = [step % 16, (step * 7) % 16, 3];
        let grads: Vec<f32> = (0..12)
            .map(|k| ((k + step) % 5) as f32 * 0.1 - 0.2)
            .collect();
        opt.step(&ids, &grads, &mut DenseTable::new(&mut weights, 4).unwrap())
            .unwrap();
    }
    (opt, weights)
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("basis-faults-input-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An optimizer blob inside a checkpoint file: every single-byte corruption
/// of the file is caught by the file's CRC and named with the path, and the
/// optimizer the caller holds is never touched.
#[test]
fn a_corrupted_checkpoint_never_reaches_the_optimizer() {
    let (opt, weights) = trained_basis();
    let dir = scratch("ckpt");
    let path = dir.join("run.ckpt");
    let mut c = Checkpoint::new();
    c.insert("optimizer", opt.export_state()).unwrap();
    c.insert(
        "model",
        weights
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    checkpoint::save(&path, &c).unwrap();
    let good = std::fs::read(&path).unwrap();
    for pos in (0..good.len()).step_by(7) {
        let mut bad = good.clone();
        bad[pos] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let err = checkpoint::load(&path).unwrap_err();
        assert_eq!(err.path(), path);
        assert!(matches!(err, CheckpointError::Corrupt { .. }), "{err}");
    }
    // Restored intact, the blob continues the run.
    std::fs::write(&path, &good).unwrap();
    let back = checkpoint::load(&path).unwrap();
    let mut fresh = trained_basis().0;
    fresh.import_state(back.get("optimizer").unwrap()).unwrap();
    assert_eq!(fresh.export_state(), opt.export_state());
    // A truncated file (e.g. copied while being written by a non-atomic tool).
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    assert!(matches!(
        checkpoint::load(&path).unwrap_err().format_error(),
        Some(FormatError::Truncated { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_blob_of_another_optimizer_or_config_is_rejected_and_changes_nothing() {
    let (opt, _) = trained_basis();
    let blob = opt.export_state();
    let mut adam = ExactAdam::new(AdamConfig {
        dim: 4,
        ..AdamConfig::default()
    })
    .unwrap();
    let adam_before = adam.export_state();
    assert!(matches!(
        adam.import_state(&blob),
        Err(StateError::WrongKind { .. })
    ));
    assert_eq!(adam.export_state(), adam_before);

    let other = BasisConfig {
        dim: 4,
        direction: Direction::Shared,
        row_index: RowIndex::Dense { rows: 16 },
        ..BasisConfig::default()
    };
    let mut mismatched = Basis::new(other, OneChoice::new(4, 9).unwrap()).unwrap();
    let before = mismatched.export_state();
    assert_eq!(
        mismatched.import_state(&blob),
        Err(StateError::ConfigMismatch)
    );
    assert_eq!(mismatched.export_state(), before);
}
