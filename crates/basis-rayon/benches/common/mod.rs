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

// One generator for both crates' sparse-step benches (same shape).
pub(crate) use basis_core::workload::Rng;
use basis_core::workload::{Remap, scatter, zipf_batch};

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
    let mut remap = Remap::new();
    let mut batches: Vec<(Vec<u64>, Vec<f32>)> = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let ids = zipf_batch(&mut rng, &mut remap, BATCH, IDS);
        let grads = (0..BATCH * DIM)
            .map(|_| (rng.unit() as f32 - 0.5) * 0.02)
            .collect();
        batches.push((ids, grads));
    }
    let rows = remap.len();
    scatter(&mut rng, rows, batches.iter_mut().map(|(ids, _)| ids));
    Workload { batches, rows }
}
