//! Reduction property of BASIS: with an injective bucket map
//! (B ≥ N), scalar learning rate 0 and every row in every batch, BASIS is
//! Adam. `Shared` and `Signed` must equal [`ExactAdam`]; `OwnGradient` must
//! equal `ExactAdam` with β1 = 0. `RowScaled` with `d = 1` (a flat profile) is
//! row-wise AdaGrad, and so is `RowScaled` at any `d` with the profile off
//! (`power = 0`); with the first dimension in its own profile group
//! (`lead = 1`) that dimension steps exactly as row-wise AdaGrad's.
//!
//! Tolerance: the kernels evaluate the same f32 expressions in the same order,
//! so we expect bit equality; the assertion allows `4e-6 · max(1, |θ|)` per
//! coordinate (a few f32 ulps at the scales involved) and the test prints the
//! largest difference seen.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use basis_core::{
    Accumulate, AdagradConfig, AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam,
    Profile, RowIndex, RowScaleConfig, RowwiseAdagrad, ScalarStorage, SparseOptimizer,
};
use common::{Identity, Rng, grads};
use proptest::prelude::*;

const TOL: f32 = 4e-6;

fn run(
    opt: &mut dyn SparseOptimizer,
    n: usize,
    dim: usize,
    steps: usize,
    seed: u64,
    scale: f32,
) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut theta: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
    let mut order_rng = Rng(seed ^ 0xABCD);
    for _ in 0..steps {
        let mut ids: Vec<u64> = (0..n as u64).collect();
        order_rng.shuffle(&mut ids);
        let g = grads(&mut rng, n, dim, scale);
        let mut table = DenseTable::new(&mut theta, dim).unwrap();
        let report = opt.step(&ids, &g, &mut table).unwrap();
        assert_eq!(report.rows_updated, n);
    }
    theta
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(1.0))
        .fold(0.0, f32::max)
}

fn basis_config(dim: usize, n: usize, direction: Direction, wd: f32) -> BasisConfig {
    // f32 row scalars: the reductions are exact arithmetic, which the
    // default 1-byte stochastic code only matches in expectation.
    BasisConfig::default()
        .with_scalar_storage(ScalarStorage::F32)
        .with_dim(dim)
        .with_lr(0.01)
        .with_weight_decay(wd)
        .with_direction(direction)
        .with_scalar_lr(0.0)
        .with_row_index(RowIndex::Dense { rows: n as u64 })
}

fn adam_config(dim: usize, n: usize, beta1: f32, wd: f32) -> AdamConfig {
    AdamConfig::default()
        .with_dim(dim)
        .with_lr(0.01)
        .with_beta1(beta1)
        .with_weight_decay(wd)
        .with_row_index(RowIndex::Dense { rows: n as u64 })
}

#[allow(clippy::too_many_arguments)] // one knob per problem dimension
fn check(
    direction: Direction,
    beta1: f32,
    n: usize,
    dim: usize,
    steps: usize,
    seed: u64,
    scale: f32,
    wd: f32,
) -> f32 {
    let mut basis = Basis::new(basis_config(dim, n, direction, wd), Identity(n as u32)).unwrap();
    let mut adam = ExactAdam::new(adam_config(dim, n, beta1, wd)).unwrap();
    let a = run(&mut basis, n, dim, steps, seed, scale);
    let b = run(&mut adam, n, dim, steps, seed, scale);
    max_rel_diff(&a, &b)
}

#[test]
fn shared_signed_own_gradient_reduce_to_adam_over_many_steps() {
    for (direction, beta1) in [
        (Direction::Shared, 0.9),
        (Direction::Signed, 0.9),
        (Direction::OwnGradient, 0.0),
    ] {
        let diff = check(direction, beta1, 64, 16, 500, 7, 0.3, 0.01);
        println!("{direction:?}: max |Δθ|/max(1,|θ|) after 500 steps = {diff:e}");
        assert!(diff <= TOL, "{direction:?} differs from Adam by {diff}");
    }
}

#[test]
fn row_scaled_with_one_dimension_is_rowwise_adagrad() {
    let (a, b) = row_scaled_vs_adagrad(1, Identity(32), Profile::default(), 300, 11);
    let diff = max_rel_diff(&a, &b);
    println!("RowScaled(d=1) vs row-wise AdaGrad: {diff:e}");
    assert!(diff <= 1e-5, "{diff}");
}

/// `RowScaled` (bucketed by `h`, with `profile`) and row-wise AdaGrad on
/// the same gradients (they do not depend on θ here), 32 rows of `dim`.
fn row_scaled_vs_adagrad<H: balanced_hash::Bucketer>(
    dim: usize,
    h: H,
    profile: Profile,
    steps: usize,
    seed: u64,
) -> (Vec<f32>, Vec<f32>) {
    let n = 32;
    let config = basis_config(dim, n, Direction::RowScaled, 0.0)
        .with_lr(0.05)
        // AdaGrad's sums: the reduction to row-wise AdaGrad is a property
        // of that accumulation, not of the EMA default.
        .with_row_scale(
            RowScaleConfig::default()
                .with_profile(profile)
                .with_accumulate(Accumulate::Sum),
        );
    let mut basis = Basis::new(config, h).unwrap();
    let mut adagrad = RowwiseAdagrad::new(
        AdagradConfig::default()
            .with_dim(dim)
            .with_lr(0.05)
            .with_row_index(RowIndex::Dense { rows: n as u64 }),
    )
    .unwrap();
    let a = run(&mut basis, n, dim, steps, seed, 1.0);
    let b = run(&mut adagrad, n, dim, steps, seed, 1.0);
    (a, b)
}

/// Over 8 dimensions, 4 rows per bucket.
fn profiled_vs_adagrad(profile: Profile) -> (Vec<f32>, Vec<f32>) {
    let buckets = balanced_hash::OneChoice::new(8, 3).unwrap();
    row_scaled_vs_adagrad(8, buckets, profile, 200, 12)
}

#[test]
fn row_scaled_without_profile_is_rowwise_adagrad() {
    let (a, b) = profiled_vs_adagrad(Profile::default().with_power(0.0));
    let diff = max_rel_diff(&a, &b);
    println!("RowScaled(power 0, d=8) vs row-wise AdaGrad: {diff:e}");
    assert!(diff <= 1e-5, "{diff}");
}

#[test]
fn lead_group_steps_like_rowwise_adagrad_and_the_rest_is_shaped() {
    let (a, b) = profiled_vs_adagrad(Profile::default().with_lead(1));
    let first = |t: &[f32]| t.iter().step_by(8).copied().collect::<Vec<f32>>();
    let diff = max_rel_diff(&first(&a), &first(&b));
    println!("RowScaled(lead 1) dimension 0 vs row-wise AdaGrad: {diff:e}");
    assert!(diff <= 1e-5, "{diff}");
    // The other dimensions follow the bucket profile, so they differ.
    assert!(max_rel_diff(&a, &b) > 1e-4);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn reduction_holds_for_random_problems(
        n in 1usize..20,
        dim in 1usize..9,
        steps in 1usize..40,
        seed in any::<u64>(),
        scale_exp in -3i32..3,
        which in 0usize..3,
    ) {
        let (direction, beta1) = [(Direction::Shared, 0.9), (Direction::Signed, 0.9), (Direction::OwnGradient, 0.0)][which];
        let diff = check(direction, beta1, n, dim, steps, seed, 10f32.powi(scale_exp), 0.0);
        prop_assert!(diff <= TOL, "{:?}: {}", direction, diff);
    }
}
