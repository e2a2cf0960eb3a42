//! Prints one-choice vs d-choice load statistics for N keys in B buckets.
//!
//! `cargo run --release -p basisopt-balanced-hash --example loads [N] [B] [seed]`
//! (defaults: N = 10^6, B = 10^4, seed = 0). Keys are the sequential ids
//! `0..N`, then the same number of ids with stride 64 (`0, 64, 128, …`), the
//! structured case where `id mod B` breaks down.

use balanced_hash::{Bucketer, DChoice, HashError, LoadStats, OneChoice};

/// `id mod B`: the naive baseline.
#[derive(Debug)]
struct Modulo(u32);

impl Bucketer for Modulo {
    fn buckets(&self) -> u32 {
        self.0
    }
    fn bucket(&self, key: u64) -> u32 {
        // The remainder is < B ≤ u32::MAX.
        (key % u64::from(self.0)) as u32
    }
}

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn row(name: &str, bucketer: &mut dyn Bucketer, keys: &[u64]) -> Result<(), HashError> {
    let s = LoadStats::from_keys(bucketer, keys.iter().copied())?;
    println!(
        "{name:<14} {:>7} {:>9.1} {:>8.4} {:>9.1} {:>7} {:>9.3} {:>12}",
        s.max,
        s.mean,
        s.max_over_mean,
        s.excess(),
        s.empty_buckets,
        s.chi_square / s.degrees_of_freedom().max(1) as f64,
        bucketer.memory_bytes(),
    );
    Ok(())
}

fn main() -> Result<(), HashError> {
    let n = arg(1, 1_000_000);
    let buckets = u32::try_from(arg(2, 10_000)).unwrap_or(u32::MAX);
    let seed = arg(3, 0);
    let alpha = n as f64 / f64::from(buckets);
    let ln_b = f64::from(buckets).ln();
    println!("N = {n}, B = {buckets}, α = N/B = {alpha:.1}, seed = {seed}");
    println!(
        "expected max: one choice ≈ α + sqrt(2α ln B) = {:.1}; d choices ≈ α + ln ln B / ln d + O(1) = {:.1} (d=2), {:.1} (d=4)",
        alpha + (2.0 * alpha * ln_b).sqrt(),
        alpha + ln_b.ln() / 2f64.ln(),
        alpha + ln_b.ln() / 4f64.ln(),
    );

    let sequential: Vec<u64> = (0..n).collect();
    let strided: Vec<u64> = (0..n).map(|i| i * 64).collect();
    for (label, keys) in [
        ("sequential ids 0..N", &sequential),
        ("strided ids 64·i", &strided),
    ] {
        println!("\n{label}");
        println!(
            "{:<14} {:>7} {:>9} {:>8} {:>9} {:>7} {:>9} {:>12}",
            "strategy", "max", "mean", "max/mean", "max-mean", "empty", "chi2/df", "memory B"
        );
        row("id mod B", &mut Modulo(buckets), keys)?;
        row("one-choice", &mut OneChoice::new(buckets, seed)?, keys)?;
        let dense_n = keys.last().map_or(0, |&k| k + 1);
        for d in 2..=4 {
            let mut dense = DChoice::dense(dense_n, buckets, d, seed)?;
            row(&format!("{d}-choice dense"), &mut dense, keys)?;
        }
        row(
            "2-choice sparse",
            &mut DChoice::sparse(buckets, 2, seed)?,
            keys,
        )?;
    }
    Ok(())
}
