//! Deterministic Zipf id batches for the sparse-step benches and examples of
//! this crate and of `basis-rayon` (one generator, so both measure the same
//! shape). Test support, not API: hidden from the docs, free to change.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use num_traits::Float;

/// Raw id → compact id, numbered in order of first sight.
pub type Remap = BTreeMap<u64, u64>;

/// splitmix64: deterministic inputs without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` (53 bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.unit().max(1e-300);
        let v = self.unit();
        Float::sqrt(-2.0 * Float::ln(u)) * Float::cos(2.0 * core::f64::consts::PI * v)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Fisher–Yates shuffle of `v`.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// Zipf(s) over `0..n` by inverting the continuous power-law CDF.
pub fn zipf(rng: &mut Rng, n: f64, s: f64) -> u64 {
    let a = 1.0 - s;
    let x = Float::powf((Float::powf(n, a) - 1.0) * rng.unit() + 1.0, 1.0 / a);
    (x as u64).clamp(1, n as u64) - 1
}

/// `len` ids drawn Zipf(1.05) from `0..n`, each raw id numbered in order of
/// first sight (`remap`, shared across batches).
pub fn zipf_batch(rng: &mut Rng, remap: &mut Remap, len: usize, n: f64) -> Vec<u64> {
    (0..len)
        .map(|_| {
            let raw = zipf(rng, n, 1.05);
            let next = remap.len() as u64;
            *remap.entry(raw).or_insert(next)
        })
        .collect()
}

/// Scatters the compact ids `0..rows` by a random permutation: real ids
/// carry no locality, and first-seen order would pack the hot rows of the
/// table and of per-row state into a few cache lines.
pub fn scatter<'a>(rng: &mut Rng, rows: usize, batches: impl Iterator<Item = &'a mut Vec<u64>>) {
    let mut perm: Vec<u64> = (0..rows as u64).collect();
    for i in (1..rows).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    for ids in batches {
        ids.iter_mut().for_each(|id| *id = perm[*id as usize]);
    }
}
