//! Stochastic variant: exact expectation, Hoeffding-bounded Monte Carlo.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failing test")]

mod common;

use core::num::NonZeroUsize;

use common::naive_get;
use onebit_codec::stochastic::{RandomU32, SplitMix64, compress, compress_into, prob_one};
use onebit_codec::{CodecError, ScaleKind};
use proptest::prelude::*;

proptest! {
    /// E[x̂] = s·(2P − 1) with the implementation's exact P equals x up to the
    /// 2⁻³² probability grid: |E − x| ≤ s·2⁻³⁰.
    #[test]
    fn exact_expectation_is_x(x in prop::collection::vec(-1e4f32..1e4, 1..64)) {
        let s = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for &v in &x {
            let p = prob_one(v, s);
            prop_assert!((0.0..=1.0).contains(&p));
            let expectation = f64::from(s) * (2.0 * p - 1.0);
            prop_assert!((expectation - f64::from(v)).abs() <= f64::from(s) * 2f64.powi(-30),
                "x {} s {} E {}", v, s, expectation);
        }
    }
}

#[test]
fn extremes_are_deterministic() {
    assert_eq!(prob_one(2.0, 2.0), 1.0);
    assert_eq!(prob_one(-2.0, 2.0), 0.0);
    assert_eq!(prob_one(0.0, 2.0), 0.5);
    assert_eq!(prob_one(0.0, 0.0), 1.0);
}

/// Monte-Carlo mean over M draws of x̂ ∈ [−s, s]: Hoeffding gives
/// P(|mean − x| ≥ t) ≤ 2·exp(−M·t² / (2s²)). With δ = 1e-9 per element
/// (union over 48 elements: < 1e-7 for the whole test) t = s·√(2·ln(2/δ)/M).
#[test]
fn monte_carlo_mean_is_within_hoeffding_bound() {
    let x: Vec<f32> = (0..48)
        .map(|i| ((i * 37 % 48) as f32 - 24.0) / 7.0)
        .collect();
    let s = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let draws = 20_000usize;
    let mut rng = SplitMix64::new(0x5eed);
    let mut sum = vec![0.0f64; x.len()];
    for _ in 0..draws {
        let c = compress(&x, None, &mut rng).unwrap();
        assert_eq!(c.scales(), &[s]);
        assert_eq!(c.scale_kind(), ScaleKind::MaxAbs);
        for (acc, v) in sum.iter_mut().zip(c.to_f32()) {
            *acc += f64::from(v);
        }
    }
    let delta: f64 = 1e-9;
    let t = f64::from(s) * (2.0 * (2.0 / delta).ln() / draws as f64).sqrt();
    for (i, &v) in x.iter().enumerate() {
        let mean = sum[i] / draws as f64;
        assert!(
            (mean - f64::from(v)).abs() < t,
            "element {i}: mean {mean} vs {v} (t {t})"
        );
    }
}

#[test]
fn chunks_have_their_own_scale_and_zero_chunks_draw_nothing() {
    let x = [0.0f32, -0.0, 0.0, 4.0, -2.0, 1.0, 0.0];
    let chunk = NonZeroUsize::new(3);
    let mut rng = SplitMix64::new(1);
    let mut bits = [0u8; 1];
    let mut scales = [0.0f32; 3];
    compress_into(&x, chunk, &mut rng, &mut bits, &mut scales).unwrap();
    assert_eq!(scales, [0.0, 4.0, 0.0]);
    // Zero chunks send bit 1; x = s sends bit 1 surely.
    assert!(naive_get(&bits, 0) && naive_get(&bits, 1) && naive_get(&bits, 2));
    assert!(naive_get(&bits, 3) && naive_get(&bits, 6));
    assert_eq!(bits[0] & 1, 0, "padding bit set");
    // Exactly 3 draws (elements 3, 4, 5) were consumed.
    let mut a = SplitMix64::new(1);
    for _ in 0..3 {
        a.next_u32();
    }
    assert_eq!(a.next_u32(), rng.next_u32());
}

#[test]
fn non_finite_and_sizes_are_errors_before_drawing() {
    let mut rng = SplitMix64::new(9);
    let untouched = rng.clone();
    let mut bits = [0x77u8; 1];
    let mut scales = [0.0f32; 1];
    assert_eq!(
        compress_into(&[1.0, f32::NAN], None, &mut rng, &mut bits, &mut scales),
        Err(CodecError::NonFinite { index: 1 })
    );
    assert_eq!(bits, [0x77]);
    assert_eq!(
        compress_into(&[1.0; 9], None, &mut rng, &mut bits, &mut scales),
        Err(CodecError::BufferSize {
            expected: 2,
            found: 1
        })
    );
    assert_eq!(rng, untouched);
}
