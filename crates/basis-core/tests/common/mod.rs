//! Test helpers: a tiny deterministic PRNG, simple bucketers, Zipf sampling.
#![allow(dead_code, unreachable_pub)] // each test file uses a different subset

use balanced_hash::Bucketer;
use basis_core::{Basis, BasisConfig, DenseTable, SparseOptimizer};

/// SplitMix64 (with `unit`, `normal`, `below`): the crate's bench workload
/// generator, one copy for tests, benches and the basis-rayon benches.
pub use basis_core::workload::Rng;

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

/// Bitwise CRC-32 (IEEE), the obviously-correct reference.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Trains `c` for `before` batches (`ids(rng)` each, with random
/// gradients), exports, imports into a fresh optimizer and runs both
/// `after` more batches: asserts the same table bits and the same state,
/// and returns both optimizers. A table of `rows` rows; a batch whose ids
/// repeat a hot row makes counting rules read their counters.
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
pub fn continues_after_round_trip(
    c: BasisConfig,
    rows: usize,
    (before, after): (usize, usize),
    mut rng: Rng,
    ids: impl Fn(&mut Rng) -> Vec<u64>,
) -> (Basis<Identity>, Basis<Identity>) {
    let dim = c.dim;
    let mut a = Basis::new(c, Identity(3)).unwrap();
    let mut w = vec![0.0f32; rows * dim];
    let batch = |rng: &mut Rng| {
        let ids = ids(rng);
        let grads = grads(rng, ids.len(), dim, 0.3);
        (ids, grads)
    };
    for _ in 0..before {
        let (ids, grads) = batch(&mut rng);
        a.step(&ids, &grads, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
    }
    let mut b = Basis::new(c, Identity(3)).unwrap();
    b.import_state(&a.export_state()).unwrap();
    let mut wb = w.clone();
    for _ in 0..after {
        let (ids, grads) = batch(&mut rng);
        a.step(&ids, &grads, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
        b.step(&ids, &grads, &mut DenseTable::new(&mut wb, dim).unwrap())
            .unwrap();
    }
    let bits = |w: &[f32]| w.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&w), bits(&wb));
    assert_eq!(a.export_state(), b.export_state());
    (a, b)
}
