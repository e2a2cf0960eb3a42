//! Export → import → continue equals never stopping, bit for bit; every
//! single-byte corruption and every truncation of a blob is a typed error that
//! leaves the optimizer unchanged.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use balanced_hash::OneChoice;
use basis_core::{
    AdagradConfig, AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam, RowIndex,
    RowwiseAdagrad, ScalarLrSchedule, ScalarStorage, Sgd, SparseOptimizer, StateError, StateField,
    TablePrecision,
};
use common::{Rng, grads};

const DIM: usize = 3;
const ROWS: u64 = 12;

fn steps(opt: &mut dyn SparseOptimizer, table: &mut [f32], rng: &mut Rng, n: usize) {
    for _ in 0..n {
        let ids: Vec<u64> = (0..8).map(|_| rng.below(ROWS)).collect();
        let g = grads(rng, ids.len(), DIM, 0.5);
        opt.step(&ids, &g, &mut DenseTable::new(table, DIM).unwrap())
            .unwrap();
    }
}

/// Runs `make()` 10 steps, exports, imports into a fresh `make()`, runs both
/// 10 more steps: tables and states must be bit-identical.
fn round_trip_continues(make: &dyn Fn() -> Box<dyn SparseOptimizer>) {
    let mut a = make();
    let mut ta = vec![0.1f32; ROWS as usize * DIM];
    let mut rng = Rng(31);
    steps(a.as_mut(), &mut ta, &mut rng, 10);
    let blob = a.export_state();
    let mut b = make();
    b.import_state(&blob).unwrap();
    assert_eq!(b.export_state(), blob);
    let mut tb = ta.clone();
    let mut rng_b = rng.clone();
    steps(a.as_mut(), &mut ta, &mut rng, 10);
    steps(b.as_mut(), &mut tb, &mut rng_b, 10);
    assert!(ta.iter().zip(&tb).all(|(x, y)| x.to_bits() == y.to_bits()));
    assert_eq!(a.export_state(), b.export_state());
}

fn basis_variants() -> Vec<BasisConfig> {
    let mut out = Vec::new();
    for direction in [
        Direction::Shared,
        Direction::Signed,
        Direction::OwnGradient,
        Direction::RowScaled,
    ] {
        for storage in [
            ScalarStorage::F32,
            ScalarStorage::Bf16,
            ScalarStorage::LogU8,
        ] {
            for (precision, index) in [
                (TablePrecision::F32, RowIndex::Dense { rows: ROWS }),
                (TablePrecision::Bf16, RowIndex::Sparse),
            ] {
                out.push(
                    BasisConfig::default()
                        .with_dim(DIM)
                        .with_direction(direction)
                        .with_scalar_storage(storage)
                        .with_table_precision(precision)
                        .with_row_index(index)
                        // RowScaled has no learned scalar to schedule.
                        .with_scalar_lr_schedule(
                            if storage == ScalarStorage::Bf16 && direction != Direction::RowScaled {
                                ScalarLrSchedule::InverseFrequency { power: 0.5 }
                            } else {
                                ScalarLrSchedule::Constant
                            },
                        ),
                );
            }
        }
    }
    // RowScaled's other accumulations (1-byte `G_i`, the default storage).
    for accumulate in [
        basis_core::Accumulate::Ema { beta: 0.9 },
        basis_core::Accumulate::Decayed { beta: 0.9 },
        // with a per-row update counter in the state
        basis_core::Accumulate::CountAnnealed { power: 0.5 },
        basis_core::Accumulate::EmaAnnealed {
            beta: 0.9,
            power: 1.0,
        },
    ] {
        let c = BasisConfig::default().with_dim(DIM);
        out.push(c.with_row_scale(c.row_scale.with_accumulate(accumulate)));
    }
    out
}

#[test]
fn every_optimizer_continues_bit_identically_after_a_round_trip() {
    for c in basis_variants() {
        round_trip_continues(&move || {
            Box::new(Basis::new(c, OneChoice::new(4, 8).unwrap()).unwrap())
        });
    }
    for index in [RowIndex::Dense { rows: ROWS }, RowIndex::Sparse] {
        round_trip_continues(&move || {
            Box::new(
                ExactAdam::new(AdamConfig::default().with_dim(DIM).with_row_index(index)).unwrap(),
            )
        });
        round_trip_continues(&move || {
            Box::new(
                RowwiseAdagrad::new(AdagradConfig::default().with_dim(DIM).with_row_index(index))
                    .unwrap(),
            )
        });
    }
    round_trip_continues(&|| Box::new(Sgd::new(DIM, 0.1).unwrap()));
}

/// Every byte position, every non-zero XOR mask: detected, nothing changes.
fn corruption_is_detected(opt: &mut dyn SparseOptimizer) {
    let mut t = vec![0.1f32; ROWS as usize * DIM];
    steps(opt, &mut t, &mut Rng(3), 4);
    let blob = opt.export_state();
    for pos in 0..blob.len() {
        for mask in 1..=255u8 {
            let mut bad = blob.clone();
            bad[pos] ^= mask;
            assert!(
                opt.import_state(&bad).is_err(),
                "byte {pos} ^ {mask:#x} accepted"
            );
        }
    }
    // A cut blob is reported as cut (not as a checksum mismatch), with the
    // length its header announces once the header is there (16 bytes; the
    // smallest blob is header + CRC = 20).
    for len in 0..blob.len() {
        let needed = if len < 16 { 20 } else { blob.len() as u64 };
        assert_eq!(
            opt.import_state(&blob[..len]),
            Err(StateError::Truncated {
                needed,
                found: len as u64
            }),
            "truncation to {len}"
        );
    }
    let mut longer = blob.clone();
    longer.push(0);
    assert!(opt.import_state(&longer).is_err());
    assert_eq!(opt.export_state(), blob);
}

#[test]
fn every_single_byte_corruption_is_detected() {
    let c = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(Direction::Shared)
        .with_scalar_storage(ScalarStorage::LogU8);
    corruption_is_detected(&mut Basis::new(c, OneChoice::new(2, 1).unwrap()).unwrap());
    corruption_is_detected(&mut ExactAdam::new(AdamConfig::default().with_dim(DIM)).unwrap());
    corruption_is_detected(
        &mut RowwiseAdagrad::new(AdagradConfig::default().with_dim(DIM)).unwrap(),
    );
}

/// The messages a user reads name what happened: the optimizer kinds by
/// name, a cut blob's lengths.
#[test]
fn state_error_messages_explain_themselves() {
    let c = BasisConfig::default().with_dim(DIM);
    let mut basis = Basis::new(c, OneChoice::new(4, 1).unwrap()).unwrap();
    let adagrad = RowwiseAdagrad::new(AdagradConfig::default().with_dim(DIM)).unwrap();
    let err = basis.import_state(&adagrad.export_state()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "state blob is a row-wise AdaGrad state (kind 3), expected a BASIS state (kind 1)"
    );
    let mut adam = ExactAdam::new(AdamConfig::default().with_dim(DIM)).unwrap();
    let err = adam.import_state(&Sgd::new(DIM, 0.1).unwrap().export_state());
    assert_eq!(
        err.unwrap_err().to_string(),
        "state blob is an SGD state (kind 4), expected an exact Adam state (kind 2)"
    );
    assert_eq!(
        StateError::WrongKind {
            expected: 1,
            found: 200
        }
        .to_string(),
        "state blob is of an unknown optimizer kind (kind 200), expected a BASIS state (kind 1)"
    );
    let blob = basis.export_state();
    let cut = blob.len() - 3;
    assert_eq!(
        basis.import_state(&blob[..cut]).unwrap_err().to_string(),
        format!(
            "state blob is truncated: {cut} bytes present, {} needed",
            blob.len()
        )
    );
}

#[test]
fn foreign_and_mismatched_blobs_are_typed_errors() {
    let c = BasisConfig::default().with_dim(DIM);
    let mut basis = Basis::new(c, OneChoice::new(4, 1).unwrap()).unwrap();
    let adam = ExactAdam::new(AdamConfig::default().with_dim(DIM)).unwrap();
    assert_eq!(
        basis.import_state(&adam.export_state()),
        Err(StateError::WrongKind {
            expected: 1,
            found: 2
        })
    );
    let other = Basis::new(c, OneChoice::new(5, 1).unwrap()).unwrap();
    assert_eq!(
        basis.import_state(&other.export_state()),
        Err(StateError::ConfigMismatch {
            field: StateField::Buckets
        })
    );
    let other = Basis::new(
        c.with_direction(Direction::Shared),
        OneChoice::new(4, 1).unwrap(),
    )
    .unwrap();
    assert_eq!(
        basis.import_state(&other.export_state()),
        Err(StateError::ConfigMismatch {
            field: StateField::Direction
        })
    );
    assert_eq!(
        basis.import_state(b"not a blob at all, really"),
        Err(StateError::BadMagic)
    );
    assert_eq!(
        basis.import_state(b"BSIS"),
        Err(StateError::Truncated {
            needed: 20,
            found: 4
        })
    );
    assert_eq!(
        basis.import_state(b"BS"),
        Err(StateError::Truncated {
            needed: 20,
            found: 2
        })
    );
    assert_eq!(basis.import_state(b"BX"), Err(StateError::BadMagic));
    // A blob with a valid checksum but a future version.
    let mut blob = basis.export_state();
    blob[4] = 9;
    let n = blob.len();
    let crc = common::crc32(&blob[..n - 4]);
    blob[n - 4..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        basis.import_state(&blob),
        Err(StateError::UnsupportedVersion { found: 9 })
    );
}

/// A blob is only read by an optimizer that would give its state the same
/// meaning: every setting it depends on is checked, and the error names the
/// first that differs. Before version 2 of the format, all of these imports
/// returned `Ok(())` and bucket state landed on the wrong rows.
#[test]
fn a_blob_of_another_seed_bucketer_or_accumulation_names_the_field() {
    let c = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(Direction::Shared);
    let one = |seed| OneChoice::new(4, seed).unwrap();
    let two = |d, seed| balanced_hash::DChoice::sparse(4, d, seed).unwrap();
    let mut trained = Basis::new(c, one(1)).unwrap();
    let mut table = vec![0.1f32; ROWS as usize * DIM];
    steps(&mut trained, &mut table, &mut Rng(5), 5);
    let blob = trained.export_state();
    let cases: Vec<(Box<dyn SparseOptimizer>, StateField)> = vec![
        (
            Box::new(Basis::new(c, one(2)).unwrap()),
            StateField::BucketerSeed,
        ),
        (
            Box::new(Basis::new(c, two(2, 1)).unwrap()),
            StateField::BucketerKind,
        ),
        (
            Box::new(Basis::new(c.with_seed(c.seed ^ 1), one(1)).unwrap()),
            StateField::Seed,
        ),
        (
            Box::new(Basis::new(c.with_beta2(0.99), one(1)).unwrap()),
            StateField::Betas,
        ),
        (
            Box::new(Basis::new(c.with_scalar_clip((0.5, 2.0)), one(1)).unwrap()),
            StateField::ScalarClip,
        ),
        (
            Box::new(Basis::new(c.with_scalar_lr(0.0), one(1)).unwrap()),
            StateField::LearnedScalars,
        ),
    ];
    for (mut opt, field) in cases {
        let before = opt.export_state();
        assert_eq!(
            opt.import_state(&blob),
            Err(StateError::ConfigMismatch { field }),
            "{field}"
        );
        assert_eq!(opt.export_state(), before, "{field}: state changed");
        let msg = StateError::ConfigMismatch { field }.to_string();
        assert!(msg.contains(&field.to_string()), "{msg}");
    }
    // d-choice: the number of choices, then the seed.
    let mut d2 = Basis::new(c, two(2, 1)).unwrap();
    steps(&mut d2, &mut table, &mut Rng(6), 3);
    let blob = d2.export_state();
    let mut d3 = Basis::new(c, two(3, 1)).unwrap();
    assert_eq!(
        d3.import_state(&blob),
        Err(StateError::ConfigMismatch {
            field: StateField::BucketerChoices
        })
    );
    let mut d2_other = Basis::new(c, two(2, 9)).unwrap();
    assert_eq!(
        d2_other.import_state(&blob),
        Err(StateError::ConfigMismatch {
            field: StateField::BucketerSeed
        })
    );
    // RowScaled: sums and an EMA are different state.
    let rs = BasisConfig::default().with_dim(DIM).with_row_scale(
        basis_core::RowScaleConfig::default().with_accumulate(basis_core::Accumulate::Sum),
    );
    let sum = Basis::new(rs, one(1)).unwrap();
    let mut ema = Basis::new(
        rs.with_row_scale(
            rs.row_scale
                .with_accumulate(basis_core::Accumulate::Ema { beta: 0.9 }),
        ),
        one(1),
    )
    .unwrap();
    assert_eq!(
        ema.import_state(&sum.export_state()),
        Err(StateError::ConfigMismatch {
            field: StateField::Accumulate
        })
    );
    // A decayed sum with the EMA's β is different state again (its `G_i`
    // are 1/(1−β) times larger), and reads its own blob.
    let decayed_config = rs.with_row_scale(
        rs.row_scale
            .with_accumulate(basis_core::Accumulate::Decayed { beta: 0.9 }),
    );
    let mut decayed = Basis::new(decayed_config, one(1)).unwrap();
    assert_eq!(
        decayed.import_state(&ema.export_state()),
        Err(StateError::ConfigMismatch {
            field: StateField::Accumulate
        })
    );
    assert_eq!(
        ema.import_state(&decayed.export_state()),
        Err(StateError::ConfigMismatch {
            field: StateField::Accumulate
        })
    );
    let own_blob = decayed.export_state();
    assert_eq!(
        Basis::new(decayed_config, one(1))
            .unwrap()
            .import_state(&own_blob),
        Ok(())
    );
    // The same configuration still reads its own blob, and so does one with
    // other plain hyper-parameters (η, η_s, the scalar rule, ε): the state
    // means the same under them, and a learning-rate schedule across a
    // restart keeps working.
    let mut same = Basis::new(c, two(2, 1)).unwrap();
    assert_eq!(same.import_state(&blob), Ok(()));
    let retuned = c
        .with_lr(c.lr * 0.1)
        .with_scalar_lr(c.scalar_lr * 3.0)
        .with_scalar_rule(basis_core::ScalarRule::Hypergradient)
        .with_eps(1e-6);
    let mut retuned = Basis::new(retuned, two(2, 1)).unwrap();
    assert_eq!(retuned.import_state(&blob), Ok(()));
    assert_eq!(retuned.export_state(), blob);
}

/// The `basis_fingerprint` fuzz target's property on a grid of selector
/// pairs: same settings (each selector with itself, `s + 576`, which picks
/// the same, and `s + 96`, which only doubles the learning rate) import; any
/// one setting changed (config `+1`, seed `+48`, bucketer `+192`) is refused.
#[test]
fn fingerprint_fuzz_property_holds_on_a_grid() {
    let grads = [7u8, 200, 13, 99, 0, 255];
    for a in (0u16..576).step_by(5) {
        for b in [a, a + 576, a + 96, a + 1, a + 48, a + 192] {
            let mut data = Vec::new();
            data.extend_from_slice(&a.to_le_bytes());
            data.extend_from_slice(&b.to_le_bytes());
            data.extend_from_slice(&grads);
            basis_core::fuzzing::fingerprint_pair(&data);
        }
    }
}
