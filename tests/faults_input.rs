//! Bad input across crates: optimizer blobs stored in checkpoint files and
//! corrupted on disk, blobs fed to the wrong optimizer or configuration.
//! (Overflowing gradients and fuzz regressions: `faults_overflow.rs`.)

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use std::path::PathBuf;

use basis::core::{
    AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam, RowIndex, SparseOptimizer,
    StateError,
};
use basis::hash::OneChoice;
use basis_std::checkpoint::{self, Checkpoint, CheckpointError, FormatError};

fn trained_basis() -> (Basis<OneChoice>, Vec<f32>) {
    let config = BasisConfig::default()
        .with_dim(4)
        .with_row_index(RowIndex::Dense { rows: 16 });
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
    let mut adam = ExactAdam::new(AdamConfig::default().with_dim(4)).unwrap();
    let adam_before = adam.export_state();
    assert!(matches!(
        adam.import_state(&blob),
        Err(StateError::WrongKind { .. })
    ));
    assert_eq!(adam.export_state(), adam_before);

    let other = BasisConfig::default()
        .with_dim(4)
        .with_direction(Direction::Shared)
        .with_row_index(RowIndex::Dense { rows: 16 });
    let mut mismatched = Basis::new(other, OneChoice::new(4, 9).unwrap()).unwrap();
    let before = mismatched.export_state();
    assert_eq!(
        mismatched.import_state(&blob),
        Err(StateError::ConfigMismatch {
            field: basis::core::StateField::Direction
        })
    );
    assert_eq!(mismatched.export_state(), before);
}
