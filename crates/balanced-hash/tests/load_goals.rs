//! The load goals of issue 2 at N/B = 100 on sequential ids `0..N` (the hard,
//! realistic case: `id mod B` would be perfect here, a weak hash would not be).
//!
//! - one-choice: `max/mean ≤ 1 + 1.1·sqrt(2·ln B · B/N)` (Gaussian tail of a
//!   Poisson(α) bucket, α = N/B, with 10 % slack). This is *not* a sure
//!   bound: the Poisson tail is heavier than the Gaussian, and an ideal random
//!   placement exceeds it with probability ≈ 6 % (B = 10³), 4 % (10⁴), 5 %
//!   (10⁵) per seed. So we run the seeds `0..S` (no seed picking) and allow
//!   the exceedances that ideal hashing would produce: at most 4 of 16, 3 of
//!   8, 1 of 2 — each allowance fails for ideal hashing with probability
//!   < 0.3 %.
//! - two-choice: `max − mean ≤ ceil(log2 ln B) + 2` for every seed
//!   (Berenbrink et al.: the gap is `ln ln B / ln 2 + O(1)`, independent of N;
//!   we observe 2–3 against bounds of 5–6).
#![allow(clippy::unwrap_used, reason = "tests: a panic is a failing test")]

use balanced_hash::{DChoice, LoadStats, OneChoice};

const ALPHA: u64 = 100;

/// Runs both strategies for one seed; returns whether one-choice exceeded its bound.
fn check(buckets: u32, seed: u64) -> bool {
    let n = u64::from(buckets) * ALPHA;
    let b = f64::from(buckets);
    let ln_b = b.ln();

    let mut one = OneChoice::new(buckets, seed).unwrap();
    let s1 = LoadStats::from_keys(&mut one, 0..n).unwrap();
    let one_bound = 1.0 + 1.1 * (2.0 * ln_b * b / n as f64).sqrt();
    assert_eq!(s1.total, n);
    // Far beyond the goal would mean a broken hash, whatever the seed.
    assert!(s1.max_over_mean <= 1.0 + 1.5 * (2.0 * ln_b * b / n as f64).sqrt());

    let mut two = DChoice::dense(n, buckets, 2, seed).unwrap();
    let s2 = LoadStats::from_keys(&mut two, 0..n).unwrap();
    let two_bound = ln_b.log2().ceil() + 2.0;
    assert_eq!(s2.total, n);
    assert_eq!(s2.mean, ALPHA as f64);
    assert!(
        s2.excess() <= two_bound,
        "B={buckets} seed={seed}: two-choice max-mean {} > {two_bound}",
        s2.excess()
    );
    // The two-choice table agrees with the statistics' own count.
    assert_eq!(two.loads().iter().max().copied(), Some(s2.max));
    // And it is far better balanced than one choice.
    assert!(s2.max < s1.max);
    assert!(s2.chi_square < s1.chi_square / 10.0);
    s1.max_over_mean > one_bound
}

fn run(buckets: u32, seeds: u64, allowed: usize) {
    let exceeded: Vec<u64> = (0..seeds).filter(|&seed| check(buckets, seed)).collect();
    assert!(
        exceeded.len() <= allowed,
        "B={buckets}: one-choice bound exceeded for seeds {exceeded:?}"
    );
}

#[test]
fn load_goals_b_1e3() {
    run(1_000, 16, 4);
}

#[test]
fn load_goals_b_1e4() {
    run(10_000, 8, 3);
}

#[test]
fn load_goals_b_1e5() {
    run(100_000, 2, 1);
}
