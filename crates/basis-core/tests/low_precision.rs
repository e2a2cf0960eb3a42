//! `LowPrecisionRows`: the stochastic rounding is unbiased (exactly, over
//! every noise value, and by Monte Carlo), a step is deterministic and
//! order-free, representable values survive a step untouched, and an
//! optimizer's updates smaller than a bf16 step survive on average.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use basis_core::half::{bf16, f16};
use basis_core::{LowPrecisionRows, RowAccess, RowFormat, Sgd, SparseOptimizer};

/// Values across binades and signs, none representable in bf16 or f16.
const XS: [f32; 6] = [
    1.000_123_4,
    -2.345_678,
    0.001_234_567,
    1_234.567_8,
    -0.099_99,
    7.777_7e-4,
];

#[test]
fn bf16_rounding_is_exactly_unbiased_over_all_noise_values() {
    for x in XS {
        let lo = f64::from(f32::from_bits(x.to_bits() & 0xFFFF_0000));
        let mut sum = 0.0f64; // exact: 2^16 values of 8 significant bits
        for noise in 0..1u64 << 16 {
            let y = f64::from(bf16::stochastic(x, noise).to_f32());
            let ulp = f64::from(f32::from_bits((x.to_bits() & 0xFFFF_0000) + 0x1_0000)) - lo;
            assert!(y == lo || y == lo + ulp, "{x}: {y} is not a neighbour");
            sum += y;
        }
        assert_eq!(sum / 65536.0, f64::from(x), "E[round({x})]");
    }
}

#[test]
fn f16_rounding_is_exactly_unbiased_over_all_noise_values() {
    for x in XS.iter().copied().filter(|x| x.abs() < 65504.0) {
        let mut sum = 0.0f64;
        let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
        for noise in 0..1u64 << 13 {
            let y = f16::stochastic(x, noise).to_f32();
            (lo, hi) = (lo.min(y), hi.max(y));
            sum += f64::from(y);
        }
        // Two neighbours: adjacent f16 values around x.
        assert!(lo < x && x < hi, "{x}: {lo} {hi}");
        let gap = i32::from(f16::from_f32(hi).to_bits()) - i32::from(f16::from_f32(lo).to_bits());
        assert_eq!(gap.abs(), 1, "{x}: {lo} and {hi} are adjacent");
        assert_eq!(sum / 8192.0, f64::from(x), "E[round({x})]");
    }
}

#[test]
fn f16_subnormal_rounding_is_unbiased_by_monte_carlo() {
    for x in [3.3e-6f32, -1.0e-7, 2.0e-8] {
        let n = 40_000u64;
        let step = 2f64.powi(-24);
        let mut sum = 0.0f64;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..n {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let y = f64::from(f16::stochastic(x, z ^ (z >> 31)).to_f32());
            assert!((y - f64::from(x)).abs() < step);
            sum += y;
        }
        // 5 standard errors of a two-point distribution on the 2^-24 grid.
        let mean = sum / n as f64;
        assert!(
            (mean - f64::from(x)).abs() < 5.0 * step * 0.5 / (n as f64).sqrt(),
            "{x}: {mean}"
        );
    }
}

#[test]
fn representable_values_round_trip_and_saturation_is_finite() {
    for v in [0.0f32, -0.0, 1.0, -2.5, 32768.0, 6.103_515_6e-5] {
        for bits in [0u64, u64::MAX, 0x1234_5678_9ABC_DEF0] {
            assert_eq!(f16::stochastic(v, bits).to_f32().to_bits(), v.to_bits());
            assert_eq!(bf16::stochastic(v, bits).to_f32().to_bits(), v.to_bits());
        }
    }
    assert_eq!(f16::stochastic(65504.0, u64::MAX).to_f32(), 65504.0);
    assert_eq!(f16::stochastic(1.0e6, u64::MAX).to_f32(), 65504.0);
    assert_eq!(f16::stochastic(-1.0e6, 0).to_f32(), -65504.0);
    assert!(f16::stochastic(f32::NAN, 0).to_f32().is_nan());
}

fn table<T: RowFormat>(seed: u64) -> LowPrecisionRows<T> {
    let mut rows = LowPrecisionRows::<T>::new(3, seed).unwrap();
    for id in 0..20u64 {
        let v = id as f32 * 0.25;
        rows.try_push(id << 40, &[v, -v, 1.0]).unwrap();
    }
    rows
}

fn bits_of(rows: &LowPrecisionRows<bf16>) -> Vec<u16> {
    (0..20u64)
        .flat_map(|id| {
            rows.raw(id << 40)
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn untouched_reads_change_nothing_and_steps_are_order_free() {
    let mut a = table::<bf16>(5);
    let before = bits_of(&a);
    {
        let mut step = a.begin_step();
        for id in 0..20u64 {
            assert!(step.row_mut(id << 40).is_some());
        }
        assert!(step.row_mut(7).is_none());
    }
    assert_eq!(bits_of(&a), before, "reading rows stores them back exactly");
    assert_eq!(a.steps(), 1);
    // The same updates in two orders give the same bits.
    let mut b = table::<bf16>(5);
    drop(b.begin_step()); // the same step count as `a`
    let update = |rows: &mut LowPrecisionRows<bf16>, order: &[u64]| {
        let mut step = rows.begin_step();
        for &id in order {
            for x in step.row_mut(id << 40).unwrap() {
                *x += 1.0e-3 * (id as f32 + 1.0);
            }
        }
    };
    let forward: Vec<u64> = (0..20).collect();
    let backward: Vec<u64> = (0..20).rev().collect();
    update(&mut a, &forward);
    update(&mut b, &backward);
    assert_eq!(bits_of(&a), bits_of(&b));
    assert_ne!(bits_of(&a), before, "the update was stored");
    // Another seed rounds differently.
    let mut c = table::<bf16>(6);
    drop(c.begin_step());
    update(&mut c, &forward);
    assert_ne!(bits_of(&a), bits_of(&c));
}

#[test]
fn sgd_updates_below_a_bf16_step_survive_on_average() {
    // 1.0 has bf16 spacing 2^-7; 100 steps of -1e-4 move it by -0.01, which
    // round-to-nearest would lose entirely (each step rounds back to 1.0).
    let (steps, seeds) = (100, 200u64);
    let mut mean = 0.0f64;
    for seed in 0..seeds {
        let mut rows = LowPrecisionRows::<bf16>::new(1, seed).unwrap();
        rows.try_push(9, &[1.0]).unwrap();
        let mut sgd = Sgd::new(1, 1.0e-4).unwrap();
        for _ in 0..steps {
            sgd.step(&[9], &[1.0], &mut rows.begin_step()).unwrap();
        }
        let mut out = [0.0f32];
        assert!(rows.read(9, &mut out));
        mean += f64::from(out[0]) / seeds as f64;
    }
    let want = 1.0 - 100.0 * 1.0e-4;
    // Each step's rounding error has sd <= 2^-8; 100 steps, 200 seeds.
    assert!(
        (mean - want).abs() < 5.0 * 2f64.powi(-8) * 10.0 / (seeds as f64).sqrt(),
        "{mean}"
    );
}

#[test]
fn wrong_lengths_are_refused_and_memory_counts_rows_and_index() {
    let mut rows = LowPrecisionRows::<f16>::new(4, 0).unwrap();
    assert!(rows.try_push(1, &[1.0; 3]).is_err());
    assert!(rows.is_empty());
    for id in 0..1000 {
        rows.try_push(id, &[0.5; 4]).unwrap();
    }
    let mut out = [0.0; 3];
    assert!(!rows.read(1, &mut out), "wrong output length");
    let bytes = rows.memory_bytes();
    // 8 B of f16 values per row (plus the Vec's slack, at most 2x) and the index.
    assert!(bytes >= 1000 * 8, "{bytes}");
    assert!(bytes <= 2 * 1000 * 8 + 40_000, "{bytes}");
    assert!(LowPrecisionRows::<f16>::new(0, 0).is_err());
}
