//! Scales: the documented 8-lane order, reproduced by a plain loop; accuracy.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

mod common;

use common::naive_scale;
use onebit_codec::scale::{max_abs, mean_abs, rms, sum_abs, sum_sq};
use onebit_codec::{CodecError, ScaleKind, check_finite};
use proptest::prelude::*;

proptest! {
    #[test]
    fn scales_follow_the_documented_order(x in prop::collection::vec(-1e6f32..1e6, 0..200)) {
        prop_assert_eq!(rms(&x).to_bits(), naive_scale(ScaleKind::Rms, &x).to_bits());
        prop_assert_eq!(mean_abs(&x).to_bits(), naive_scale(ScaleKind::MeanAbs, &x).to_bits());
        prop_assert_eq!(max_abs(&x).to_bits(), naive_scale(ScaleKind::MaxAbs, &x).to_bits());
        prop_assert_eq!(ScaleKind::Unit.of(&x), 1.0);
        // Accuracy against a compensated (two-sum) sum: f64 rounding only.
        let exact_sq: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        prop_assert!((sum_sq(&x) - exact_sq).abs() <= exact_sq * 1e-13);
        let exact_abs: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
        prop_assert!((sum_abs(&x) - exact_abs).abs() <= exact_abs * 1e-13);
    }
}

#[test]
fn rms_preserves_the_l2_norm() {
    let x = [3.0f32, -4.0];
    assert_eq!(rms(&x), (12.5f64).sqrt() as f32);
    assert_eq!(mean_abs(&x), 3.5);
    assert_eq!(max_abs(&x), 4.0);
    assert_eq!((rms(&[]), mean_abs(&[]), max_abs(&[])), (0.0, 0.0, 0.0));
}

#[test]
fn check_finite_reports_the_first_bad_index() {
    let mut x = vec![1.0f32; 5000];
    assert_eq!(check_finite(&x), Ok(()));
    x[4097] = f32::NEG_INFINITY;
    x[4500] = f32::NAN;
    assert_eq!(check_finite(&x), Err(CodecError::NonFinite { index: 4097 }));
    x[3] = f32::NAN;
    assert_eq!(check_finite(&x), Err(CodecError::NonFinite { index: 3 }));
}
