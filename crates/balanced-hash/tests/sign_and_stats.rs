//! Sign hash balance/independence, byte keys, and `LoadStats` against a naive
//! reference.
#![allow(clippy::unwrap_used, reason = "tests: a panic is a failing test")]

use balanced_hash::{
    Bucketer, HashError, LoadStats, OneChoice, SignHash, count_loads, key_of_bytes,
};
use proptest::prelude::*;

const N: u64 = 20_000;
/// 5 standard deviations of a sum of N independent ±1: a false failure has
/// probability ≈ 6·10⁻⁷ per check.
fn five_sigma() -> f64 {
    5.0 * (N as f64).sqrt()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// σ takes only ±1, and Σσ over N keys (sequential or random) stays within
    /// 5σ of 0, as for fair independent coins.
    #[test]
    fn sign_hash_is_balanced(seed in any::<u64>(), start in any::<u64>()) {
        let sigma = SignHash::new(seed);
        prop_assert_eq!(sigma.seed(), seed);
        let mut sequential = 0.0f64;
        let mut scattered = 0.0f64;
        for i in 0..N {
            let s = sigma.sign(start.wrapping_add(i));
            prop_assert!(s == 1.0 || s == -1.0);
            prop_assert_eq!(s == -1.0, sigma.is_negative(start.wrapping_add(i)));
            sequential += f64::from(s);
            // N distinct scattered keys: xor and an odd multiplier are both
            // bijections (`start * (i | 1)` repeated each key twice, doubling
            // the variance, so the 5σ bound failed about one run in ten).
            let key = (start ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
            scattered += f64::from(sigma.sign(key));
        }
        prop_assert!(sequential.abs() <= five_sigma(), "sum {}", sequential);
        prop_assert!(scattered.abs() <= five_sigma(), "sum {}", scattered);
    }

    /// σ is uncorrelated with another seed's σ and with the bucket parity of a
    /// bucketer built from the *same* seed (domain separation).
    #[test]
    fn sign_hash_is_independent(seed in any::<u64>(), other in any::<u64>()) {
        prop_assume!(seed != other);
        let (a, b) = (SignHash::new(seed), SignHash::new(other));
        let buckets = OneChoice::new(2, seed).unwrap();
        let (mut ab, mut parity) = (0.0f64, 0.0f64);
        for k in 0..N {
            ab += f64::from(a.sign(k) * b.sign(k));
            let p = if buckets.bucket(k) == 0 { 1.0 } else { -1.0 };
            parity += f64::from(a.sign(k)) * p;
        }
        prop_assert!(ab.abs() <= five_sigma(), "{}", ab);
        prop_assert!(parity.abs() <= five_sigma(), "{}", parity);
    }
}

proptest! {
    /// `LoadStats` equals a direct computation from its definitions.
    #[test]
    fn load_stats_match_definitions(loads in proptest::collection::vec(0u64..3000, 1..300)) {
        let s = LoadStats::from_loads(&loads).unwrap();
        let b = loads.len();
        let total: u64 = loads.iter().sum();
        let max = *loads.iter().max().unwrap();
        let mean = total as f64 / b as f64;
        prop_assert_eq!(s.buckets, b);
        prop_assert_eq!(s.total, total);
        prop_assert_eq!(s.max, max);
        prop_assert_eq!(s.min, *loads.iter().min().unwrap());
        prop_assert_eq!(s.empty_buckets, loads.iter().filter(|&&l| l == 0).count() as u64);
        prop_assert!((s.mean - mean).abs() <= 1e-9 * mean.max(1.0));
        prop_assert_eq!(s.degrees_of_freedom(), b - 1);
        if total == 0 {
            prop_assert_eq!(s.max_over_mean, 1.0);
            prop_assert_eq!(s.chi_square, 0.0);
        } else {
            prop_assert!((s.max_over_mean - max as f64 / mean).abs() <= 1e-9 * s.max_over_mean);
            let chi: f64 = loads.iter().map(|&l| (l as f64 - mean).powi(2) / mean).sum();
            prop_assert!((s.chi_square - chi).abs() <= 1e-9 * chi.max(1.0));
        }
        prop_assert!((s.excess() - (max as f64 - mean)).abs() <= 1e-9 * (max as f64).max(1.0));
        // Histogram: bins of width `bin_width` from 0, covering 0..=max, ≤ 1024 bins.
        prop_assert!(s.histogram.len() <= 1024);
        prop_assert_eq!(s.bin_width, (max + 1).div_ceil(1024));
        for (i, &count) in s.histogram.iter().enumerate() {
            let lo = i as u64 * s.bin_width;
            let hi = lo + s.bin_width;
            prop_assert_eq!(count, loads.iter().filter(|&&l| lo <= l && l < hi).count() as u64);
        }
        prop_assert!((s.histogram.len() as u64) * s.bin_width > max);
    }

    /// Byte keys: deterministic within the process, distinct inputs → distinct ids.
    #[test]
    fn byte_keys(a in proptest::collection::vec(any::<u8>(), 0..64), b in proptest::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(key_of_bytes(&a), key_of_bytes(&a.clone()));
        if a != b {
            prop_assert_ne!(key_of_bytes(&a), key_of_bytes(&b));
        }
    }
}

#[test]
fn uniform_chi_square_is_near_its_degrees_of_freedom() {
    // For one-choice placement the loads are multinomial, so chi-square has
    // mean B − 1 and sd ≈ sqrt(2(B − 1)); allow 6 sd.
    let buckets = 1000u32;
    let s = LoadStats::from_keys(&mut OneChoice::new(buckets, 11).unwrap(), 0..100_000).unwrap();
    let df = s.degrees_of_freedom() as f64;
    assert!(
        (s.chi_square - df).abs() <= 6.0 * (2.0 * df).sqrt(),
        "{}",
        s.chi_square
    );
}

#[test]
fn load_stats_errors_and_edges() {
    assert_eq!(LoadStats::from_loads(&[]), Err(HashError::ZeroBuckets));
    let s = LoadStats::from_loads(&[0, 0, 0]).unwrap();
    assert_eq!(
        (
            s.max,
            s.mean,
            s.max_over_mean,
            s.chi_square,
            s.empty_buckets
        ),
        (0, 0.0, 1.0, 0.0, 3)
    );
    assert_eq!(s.histogram, vec![3]);
    let s = LoadStats::from_loads(&[u64::MAX, 1]).unwrap();
    assert_eq!(s.total, u64::MAX); // saturates instead of overflowing
    assert_eq!(s.histogram.iter().sum::<u64>(), 2);
}

/// A bucketer that breaks the trait contract.
#[derive(Debug)]
struct Broken;

impl Bucketer for Broken {
    fn buckets(&self) -> u32 {
        4
    }
    fn bucket(&self, key: u64) -> u32 {
        key as u32
    }
}

#[test]
fn count_loads_rejects_out_of_range_buckets() {
    assert_eq!(count_loads(&mut Broken, 0..4).unwrap(), vec![1, 1, 1, 1]);
    assert_eq!(
        count_loads(&mut Broken, 0..5),
        Err(HashError::BucketOutOfRange {
            bucket: 4,
            buckets: 4
        })
    );
}
