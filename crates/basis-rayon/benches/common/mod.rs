//! The workload shared by the bench and the `step_phases` example:
//! basis-core's `sparse_step` shape.

#![allow(dead_code, reason = "each includer uses a different part")]

/// Row dimension.
pub(crate) const DIM: usize = 64;
/// Rows per batch.
pub(crate) const BATCH: usize = 4096;
/// Id range the Zipf draws come from.
pub(crate) const IDS: f64 = 10_000_000.0;
/// Distinct batches cycled through.
pub(crate) const BATCHES: usize = 32;

/// splitmix64: deterministic inputs without a dependency (as basis-core's bench).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s) over `0..n` by inverting the continuous power-law CDF.
pub(crate) fn zipf(rng: &mut Rng, n: f64, s: f64) -> u64 {
    let a = 1.0 - s;
    let x = ((n.powf(a) - 1.0) * rng.unit() + 1.0).powf(1.0 / a);
    (x as u64).clamp(1, n as u64) - 1
}

/// basis-core's `sparse_step` workload: `BATCHES` batches of `BATCH` ids
/// drawn Zipf(1.05) from 10M, remapped to a compact range by a random
/// permutation of the distinct ids seen (so the table and dense row state fit
/// in memory, with no locality), gradients uniform in ±0.01.
pub(crate) struct Workload {
    /// Ids and gradients of each batch.
    pub(crate) batches: Vec<(Vec<u64>, Vec<f32>)>,
    /// Distinct rows over all batches (the table size).
    pub(crate) rows: usize,
}

pub(crate) fn workload() -> Workload {
    let mut rng = Rng(2026);
    let mut remap = std::collections::HashMap::new();
    let mut batches = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let ids: Vec<u64> = (0..BATCH)
            .map(|_| {
                let raw = zipf(&mut rng, IDS, 1.05);
                let next = remap.len() as u64;
                *remap.entry(raw).or_insert(next)
            })
            .collect();
        let grads = (0..BATCH * DIM)
            .map(|_| (rng.unit() as f32 - 0.5) * 0.02)
            .collect();
        batches.push((ids, grads));
    }
    let rows = remap.len();
    let mut perm: Vec<u64> = (0..rows as u64).collect();
    for i in (1..rows).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    for (ids, _) in &mut batches {
        ids.iter_mut().for_each(|id| *id = perm[*id as usize]);
    }
    Workload { batches, rows }
}
