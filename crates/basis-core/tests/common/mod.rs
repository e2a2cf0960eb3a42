//! Test helpers: a tiny deterministic PRNG, simple bucketers, Zipf sampling.
#![allow(dead_code, unreachable_pub)] // each test file uses a different subset

use balanced_hash::Bucketer;

/// SplitMix64: deterministic, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.unit().max(1e-300);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (2.0 * core::f64::consts::PI * v).cos()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// `bucket(id) = id` (injective when `B ≥ N`).
#[derive(Debug, Clone, Copy)]
pub struct Identity(pub u32);

impl Bucketer for Identity {
    fn buckets(&self) -> u32 {
        self.0
    }
    fn bucket(&self, key: u64) -> u32 {
        (key % u64::from(self.0)) as u32
    }
}

/// Zipf(s) over `0..n` by inverse CDF (exact probabilities, binary search).
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
    pub probs: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let w: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
        let total: f64 = w.iter().sum();
        let probs: Vec<f64> = w.iter().map(|x| x / total).collect();
        let mut acc = 0.0;
        let cdf = probs
            .iter()
            .map(|p| {
                acc += p;
                acc
            })
            .collect();
        Self { cdf, probs }
    }
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) as u64
    }
}

/// Random gradients: `n * dim` values, normal times `scale`.
pub fn grads(rng: &mut Rng, n: usize, dim: usize, scale: f32) -> Vec<f32> {
    (0..n * dim).map(|_| rng.normal() as f32 * scale).collect()
}
