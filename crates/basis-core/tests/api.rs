//! Construction errors, table errors, config defaults and small behaviours of
//! the public API, each checked against a hand-computed value.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use balanced_hash::{Bucketer, DChoice, OneChoice};
use basis_core::{
    Accumulate, AdagradConfig, AdamConfig, Basis, BasisConfig, ConfigError, DenseTable, Direction,
    ExactAdam, RowAccess, RowIndex, RowScaleConfig, RowwiseAdagrad, ScalarLrSchedule,
    ScalarStorage, Sgd, SparseOptimizer, TableError, TablePrecision,
};

#[test]
fn dense_table_validates_shape_and_ranges() {
    let mut data = vec![0.0f32; 6];
    assert_eq!(
        DenseTable::new(&mut data, 0).unwrap_err(),
        TableError::ZeroDim
    );
    assert_eq!(
        DenseTable::new(&mut data, 4).unwrap_err(),
        TableError::Ragged { len: 6, dim: 4 }
    );
    let mut t = DenseTable::new(&mut data, 3).unwrap();
    assert_eq!(t.rows(), 2);
    assert_eq!(t.dim(), 3);
    t.row_mut(1).unwrap()[2] = 5.0;
    assert!(t.row_mut(2).is_none());
    assert!(t.row_mut(u64::MAX).is_none());
    assert_eq!(t.row(1).unwrap(), &[0.0, 0.0, 5.0]);
}

#[test]
fn config_validation_names_the_bad_value() {
    let ok = BasisConfig::default();
    assert_eq!(ok.validate(), Ok(()));
    let cases = [
        (ok.with_dim(0), ConfigError::ZeroDim),
        (ok.with_lr(f32::NAN), ConfigError::LearningRate),
        (ok.with_lr(0.0), ConfigError::LearningRate),
        (ok.with_beta1(1.0), ConfigError::Beta),
        (ok.with_beta2(-0.1), ConfigError::Beta),
        (ok.with_eps(0.0), ConfigError::Epsilon),
        (ok.with_weight_decay(-1.0), ConfigError::WeightDecay),
        (
            ok.with_scalar_lr(f32::INFINITY),
            ConfigError::ScalarLearningRate,
        ),
        (ok.with_scalar_clip((1.5, 2.0)), ConfigError::ScalarClip),
        (ok.with_scalar_clip((0.0, 2.0)), ConfigError::ScalarClip),
        (ok.with_grad_clip(Some(0.0)), ConfigError::GradClip),
        (
            ok.with_scalar_lr_schedule(ScalarLrSchedule::InverseFrequency { power: -1.0 }),
            ConfigError::FrequencyPower,
        ),
        (
            ok.with_row_scale(ok.row_scale.with_accumulate(Accumulate::Ema { beta: 1.0 })),
            ConfigError::Beta,
        ),
        (
            ok.with_row_scale(
                ok.row_scale
                    .with_accumulate(Accumulate::Decayed { beta: -0.1 }),
            ),
            ConfigError::Beta,
        ),
        (
            ok.with_row_scale(ok.row_scale.with_log2_range((3.0, 3.0))),
            ConfigError::RowScaleRange,
        ),
    ];
    for (c, e) in cases {
        assert_eq!(c.validate(), Err(e));
        assert_eq!(Basis::new(c, OneChoice::new(4, 1).unwrap()).unwrap_err(), e);
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(
        AdamConfig::default().with_beta2(1.0).validate(),
        Err(ConfigError::Beta)
    );
    assert_eq!(
        AdagradConfig::default().with_eps(-1.0).validate(),
        Err(ConfigError::Epsilon)
    );
    assert_eq!(Sgd::new(0, 0.1).unwrap_err(), ConfigError::ZeroDim);
    assert_eq!(Sgd::new(2, -0.1).unwrap_err(), ConfigError::LearningRate);
}

#[test]
fn bf16_tables_raise_epsilon() {
    let c = BasisConfig::default()
        .with_eps(1e-8)
        .with_table_precision(TablePrecision::Bf16);
    assert_eq!(c.effective_eps(), c.bf16_eps_floor);
    let c = c.with_eps(1e-3);
    assert_eq!(c.effective_eps(), 1e-3);
    assert_eq!(
        c.with_table_precision(TablePrecision::F32).effective_eps(),
        1e-3
    );
}

/// One row-wise AdaGrad step by hand, and one Adam step by hand.
#[test]
fn baselines_match_hand_computation() {
    let mut data = vec![1.0f32, 2.0];
    let mut ada = RowwiseAdagrad::new(
        AdagradConfig::default()
            .with_dim(2)
            .with_lr(0.1)
            .with_eps(1e-8),
    )
    .unwrap();
    ada.step(
        &[0],
        &[3.0, 4.0],
        &mut DenseTable::new(&mut data, 2).unwrap(),
    )
    .unwrap();
    let g_sum = (9.0f32 + 16.0) / 2.0;
    assert_eq!(ada.accumulator(0), g_sum);
    let mult = 0.1 / (g_sum.sqrt() + 1e-8);
    assert_eq!(data, vec![1.0 - mult * 3.0, 2.0 - mult * 4.0]);

    let mut data = vec![1.0f32];
    let mut adam = ExactAdam::new(AdamConfig::default().with_dim(1).with_lr(0.5)).unwrap();
    adam.step(
        &[0, 0],
        &[0.25, 0.75],
        &mut DenseTable::new(&mut data, 1).unwrap(),
    )
    .unwrap();
    // First bias-corrected Adam step moves by lr·g/(|g|+ε) ≈ lr·sign(g).
    assert!((data[0] - 0.5).abs() < 1e-6);
    let (m, v) = adam.moments(0).unwrap();
    assert!((m[0] - 0.1).abs() < 1e-7 && (v[0] - 0.001).abs() < 1e-7);

    let mut data = vec![1.0f32, 1.0];
    let mut sgd = Sgd::new(1, 0.5).unwrap();
    let r = sgd
        .step(
            &[1, 1, 0],
            &[1.0, 2.0, f32::NAN],
            &mut DenseTable::new(&mut data, 1).unwrap(),
        )
        .unwrap();
    assert_eq!((r.rows_updated, r.rows_skipped_nonfinite), (1, 1));
    assert_eq!(data, vec![1.0, -0.5]);
}

/// A per-row L2 clip bounds the merged gradient's norm.
#[test]
fn gradient_clip_bounds_the_row_norm() {
    let mut data = vec![0.0f32; 2];
    let mut sgd_like = RowwiseAdagrad::new(
        AdagradConfig::default()
            .with_dim(2)
            .with_lr(1.0)
            .with_grad_clip(Some(1.0)),
    )
    .unwrap();
    sgd_like
        .step(
            &[0],
            &[30.0, 40.0],
            &mut DenseTable::new(&mut data, 2).unwrap(),
        )
        .unwrap();
    // Clipped to (0.6, 0.8): G = mean(0.36, 0.64) = 0.5.
    assert!((sgd_like.accumulator(0) - 0.5).abs() < 1e-6);
}

/// RowScaled: `V̂_ij = G_i·C_bj/mean_j C_bj` on a single hand-checked step.
#[test]
fn row_scaled_step_by_hand() {
    // f32 `G_i`: the hand-computed values are exact, which the default
    // 1-byte stochastic code is only in expectation. AdaGrad sums (the EMA
    // default's profile starts at 0 and holds (1−β)·x after one step; its
    // arithmetic is checked against the slow reference, kernel_reference.rs).
    let c = BasisConfig::default()
        .with_dim(2)
        .with_lr(0.1)
        .with_eps(1e-8)
        .with_scalar_storage(ScalarStorage::F32)
        .with_direction(Direction::RowScaled)
        .with_row_scale(RowScaleConfig::default().with_accumulate(Accumulate::Sum));
    let mut opt = Basis::new(c, OneChoice::new(1, 1).unwrap()).unwrap();
    let mut data = vec![0.0f32; 4];
    opt.step(
        &[0, 1],
        &[1.0, 0.0, 0.0, 2.0],
        &mut DenseTable::new(&mut data, 2).unwrap(),
    )
    .unwrap();
    // C = (1, 4), mean 2.5; G_0 = 0.5, G_1 = 2.
    assert_eq!(opt.scalar(0), 0.5);
    assert_eq!(opt.scalar(1), 2.0);
    let v00 = 0.5f32 * (1.0 / 2.5);
    let v11 = 2.0f32 * (4.0 / 2.5);
    assert!((data[0] + 0.1 * 1.0 / v00.sqrt()).abs() < 1e-6);
    assert!((data[3] + 0.1 * 2.0 / v11.sqrt()).abs() < 1e-6);
    assert_eq!(data[1], 0.0);
    let view = opt.bucket_view(0).unwrap();
    assert_eq!((view.v, view.steps, view.m), (vec![1.0, 4.0], 1, None));
}

/// `Accumulate::Decayed`: `G ← β·G + x` from 0 (no seeding), the profile
/// likewise, over three hand-checked steps of one row.
#[test]
fn decayed_accumulation_by_hand() {
    let c = BasisConfig::default()
        .with_dim(2)
        .with_lr(0.1)
        .with_scalar_storage(ScalarStorage::F32)
        .with_direction(Direction::RowScaled);
    let c = c.with_row_scale(
        c.row_scale
            .with_accumulate(Accumulate::Decayed { beta: 0.5 }),
    );
    let mut opt = Basis::new(c, OneChoice::new(1, 1).unwrap()).unwrap();
    let mut data = vec![0.0f32; 2];
    // x = mean(g²) per step: 2, 8, 0.5 (g = (1, √3), (2, √12), (0.5, 0.5·√3)).
    let g = [
        (1.0f32, 3.0f32.sqrt()),
        (2.0, 12.0f32.sqrt()),
        (0.5, 0.75f32.sqrt()),
    ];
    let mut want_g = 0.0f32;
    let mut want_c = [0.0f32; 2];
    for (a, b) in g {
        opt.step(&[0], &[a, b], &mut DenseTable::new(&mut data, 2).unwrap())
            .unwrap();
        want_g = 0.5 * want_g + (a * a + b * b) / 2.0;
        want_c = [0.5 * want_c[0] + a * a, 0.5 * want_c[1] + b * b];
        assert!(
            (opt.scalar(0) - want_g).abs() < 1e-5 * want_g,
            "{}",
            opt.scalar(0)
        );
        let view = opt.bucket_view(0).unwrap();
        for (&got, &want) in view.v.iter().zip(&want_c) {
            assert!((got - want).abs() < 1e-5 * want, "{:?}", view.v);
        }
    }
    // 2, 0.5·2 + 8 = 9, 0.5·9 + 0.5 = 5: a sum while β^n is large, not an EMA.
    assert!((want_g - 5.0).abs() < 1e-5);
}

/// Diagnostics count loads, updates and scalars; a d-choice bucketer works
/// and its memory shows in the report.
#[test]
fn diagnostics_and_d_choice() {
    let rows = 64u64;
    let c = BasisConfig::default()
        .with_dim(2)
        .with_direction(Direction::Shared)
        .with_row_index(RowIndex::Dense { rows });
    let h = DChoice::dense(rows, 8, 2, 3).unwrap();
    let mut opt = Basis::new(c, h).unwrap();
    let mut data = vec![0.0f32; rows as usize * 2];
    let ids: Vec<u64> = (0..rows).collect();
    for _ in 0..3 {
        opt.step(
            &ids,
            &vec![0.1; ids.len() * 2],
            &mut DenseTable::new(&mut data, 2).unwrap(),
        )
        .unwrap();
    }
    let d = opt.diagnostics();
    assert_eq!(d.rows, rows);
    assert_eq!(
        d.bucket_loads.iter().map(|&x| u64::from(x)).sum::<u64>(),
        rows
    );
    assert_eq!(d.bucket_updates.len(), 8);
    assert!(d.bucket_updates.iter().all(|&t| t == 3 || t == 0));
    assert_eq!(d.steps, 3);
    assert!(opt.memory().bucket_map > 0);
    assert_eq!(opt.memory().bucket_map, opt.bucketer().memory_bytes());
}

/// A bucketer that breaks its contract is a typed error, not a panic.
#[test]
fn a_broken_bucketer_is_an_error() {
    #[derive(Debug)]
    struct Broken;
    impl Bucketer for Broken {
        fn buckets(&self) -> u32 {
            2
        }
        fn bucket(&self, key: u64) -> u32 {
            key as u32
        }
    }
    let c = BasisConfig::default().with_dim(1);
    let mut opt = Basis::new(c, Broken).unwrap();
    let mut data = vec![0.0f32; 8];
    let before = opt.export_state();
    assert_eq!(
        opt.step(
            &[1, 5],
            &[0.1, 0.2],
            &mut DenseTable::new(&mut data, 1).unwrap()
        ),
        Err(basis_core::StepError::BucketOutOfRange { id: 5, bucket: 5 })
    );
    assert_eq!(opt.export_state(), before);
    assert!(data.iter().all(|&x| x == 0.0));
    opt.step(
        &[0, 1],
        &[0.1, 0.2],
        &mut DenseTable::new(&mut data, 1).unwrap(),
    )
    .unwrap();
    assert!(data[0] < 0.0 && data[1] < 0.0);
}

/// Dense per-row state sized past what fits is a typed error naming the
/// bytes, from every constructor. Before: `u64::MAX` rows panicked with
/// "capacity overflow" and `1 << 40` rows aborted the process in the
/// allocator ("memory allocation of 4398046511104 bytes failed"). The
/// `1 << 40` cases assume a machine with less than 4 TiB of memory.
#[test]
fn dense_state_that_does_not_fit_is_a_typed_error() {
    for (rows, scalar_bytes) in [(u64::MAX, 4u128), (1 << 40, 4)] {
        let c = BasisConfig::default()
            .with_dim(4)
            .with_scalar_storage(ScalarStorage::F32)
            .with_row_index(RowIndex::Dense { rows });
        let e = Basis::new(c, OneChoice::new(8, 1).unwrap()).unwrap_err();
        assert_eq!(
            e,
            ConfigError::AllocationFailed {
                bytes: u128::from(rows) * scalar_bytes
            }
        );
        assert!(
            e.to_string().contains(&(u128::from(rows) * 4).to_string()),
            "{e}"
        );
        let adam = ExactAdam::new(
            AdamConfig::default()
                .with_dim(4)
                .with_row_index(RowIndex::Dense { rows }),
        );
        assert_eq!(
            adam.unwrap_err(),
            ConfigError::AllocationFailed {
                bytes: u128::from(rows) * 4 * 4
            }
        );
        let adagrad = RowwiseAdagrad::new(
            AdagradConfig::default()
                .with_dim(4)
                .with_row_index(RowIndex::Dense { rows }),
        );
        assert_eq!(
            adagrad.unwrap_err(),
            ConfigError::AllocationFailed {
                bytes: u128::from(rows) * 4
            }
        );
    }
    // Bucket tables too: `dim` so large that `B·d` overflows.
    let c = BasisConfig::default().with_dim(usize::MAX / 2);
    assert!(matches!(
        Basis::new(c, OneChoice::new(8, 1).unwrap()),
        Err(ConfigError::AllocationFailed { .. })
    ));
}
