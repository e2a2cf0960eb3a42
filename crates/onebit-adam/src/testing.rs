//! A small deterministic training problem for tests, examples and
//! cross-backend comparisons (e.g. `LocalComm` vs MPI, bit for bit):
//! sparse logistic regression on a generated data set, one shard per rank.
//!
//! Data: `samples_per_rank` samples per rank, each with `active` distinct
//! binary features out of `features`, drawn with a skew towards low indices
//! (like hashed recommender features; some features never occur, so their
//! gradient is exactly zero — the case 1-bit Adam's zero detection is for).
//! Labels are Bernoulli draws from a teacher model, so the best loss is well
//! above 0. Everything comes from a SplitMix64 stream seeded by `seed`, and
//! all arithmetic is fixed-order `f32`/`f64` with libm's `exp`/`ln`, so the
//! problem and any training run on it are reproducible bit for bit.

use alloc::vec;
use alloc::vec::Vec;

use comm_traits::Communicator;
use num_traits::Float;

use crate::{OneBitAdam, OneBitError, StepReport};

/// SplitMix64: tiny, fast, good enough for generating test data.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One rank's samples.
#[derive(Debug, Clone)]
struct Shard {
    /// `active` feature indices per sample.
    index: Vec<u32>,
    /// Labels in {0, 1}.
    label: Vec<f32>,
}

/// Sparse binary logistic regression; parameters are `features` weights
/// followed by one bias.
#[derive(Debug, Clone)]
pub struct LogisticProblem {
    features: usize,
    active: usize,
    shards: Vec<Shard>,
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + Float::exp(-z))
}

/// `log(1 + e^{−|z|}) + max(z, 0) − y·z` (stable binary cross-entropy).
fn bce(z: f32, y: f32) -> f32 {
    Float::ln(1.0 + Float::exp(-z.abs())) + z.max(0.0) - y * z
}

impl LogisticProblem {
    /// Generate a problem for `ranks` ranks (see the module docs).
    /// `active` is clamped to `1..=features`.
    pub fn generate(
        ranks: usize,
        samples_per_rank: usize,
        features: usize,
        active: usize,
        seed: u64,
    ) -> Self {
        let features = features.max(1);
        let active = active.clamp(1, features);
        let mut rng = SplitMix64(seed);
        // Teacher: weights roughly N(0, 1) (Irwin–Hall of 4), bias −0.2.
        let teacher: Vec<f32> = (0..features)
            .map(|_| ((0..4).map(|_| rng.unit()).sum::<f64>() - 2.0) as f32 * 1.7)
            .collect();
        let scale = 1.0 / Float::sqrt(active as f32);
        let shards = (0..ranks)
            .map(|_| {
                let mut index = Vec::with_capacity(samples_per_rank * active);
                let mut label = Vec::with_capacity(samples_per_rank);
                for _ in 0..samples_per_rank {
                    let start = index.len();
                    while index.len() - start < active {
                        let u = rng.unit();
                        let f = ((u * u) * features as f64) as u32;
                        if !index[start..].contains(&f) {
                            index.push(f);
                        }
                    }
                    let z: f32 = index[start..]
                        .iter()
                        .map(|&f| teacher[f as usize])
                        .sum::<f32>()
                        * scale
                        - 0.2;
                    label.push(if (rng.unit() as f32) < sigmoid(z) { 1.0 } else { 0.0 });
                }
                Shard { index, label }
            })
            .collect();
        Self {
            features,
            active,
            shards,
        }
    }

    /// Number of parameters (`features + 1`).
    pub fn params(&self) -> usize {
        self.features + 1
    }

    /// Number of shards (ranks).
    pub fn ranks(&self) -> usize {
        self.shards.len()
    }

    fn logit(&self, sample: &[u32], params: &[f32]) -> f32 {
        sample.iter().map(|&f| params[f as usize]).sum::<f32>() + params[self.features]
    }

    /// Mean loss of shard `rank` at `params`, and its gradient written to
    /// `grad` (`params()` elements). Returns `None` for an unknown rank or
    /// wrong lengths.
    pub fn shard_loss_grad(&self, rank: usize, params: &[f32], grad: &mut [f32]) -> Option<f32> {
        let shard = self.shards.get(rank)?;
        if params.len() != self.params() || grad.len() != self.params() {
            return None;
        }
        grad.fill(0.0);
        let n = shard.label.len().max(1) as f32;
        let mut loss = 0.0f32;
        for (sample, &y) in shard.index.chunks_exact(self.active).zip(&shard.label) {
            let z = self.logit(sample, params);
            loss += bce(z, y);
            let d = (sigmoid(z) - y) / n;
            for &f in sample {
                grad[f as usize] += d;
            }
            grad[self.features] += d;
        }
        Some(loss / n)
    }

    /// Mean loss over all shards (no communication: every rank can compute it).
    pub fn loss(&self, params: &[f32]) -> f64 {
        let mut sum = 0.0f64;
        let mut count = 0usize;
        for shard in &self.shards {
            for (sample, &y) in shard.index.chunks_exact(self.active).zip(&shard.label) {
                sum += f64::from(bce(self.logit(sample, params), y));
                count += 1;
            }
        }
        sum / count.max(1) as f64
    }
}

/// Run `steps` full-batch steps of `opt` on this rank's shard of `problem`,
/// starting from `params`; returns one report per step.
///
/// # Errors
/// [`OneBitError::Length`] if `params` does not fit the problem or the
/// optimizer, [`OneBitError::Config`] if `comm.rank()` has no shard; any
/// error of [`OneBitAdam::step_with_grad`].
pub fn run_steps(
    comm: &mut dyn Communicator,
    problem: &LogisticProblem,
    opt: &mut OneBitAdam,
    params: &mut [f32],
    steps: u64,
) -> Result<Vec<StepReport>, OneBitError> {
    if params.len() != problem.params() {
        return Err(OneBitError::Length {
            expected: problem.params(),
            found: params.len(),
        });
    }
    let mut grad = vec![0.0f32; problem.params()];
    let mut reports = Vec::new();
    for _ in 0..steps {
        problem
            .shard_loss_grad(comm.rank(), params, &mut grad)
            .ok_or(OneBitError::Config("no shard for this rank"))?;
        reports.push(opt.step_with_grad(comm, params, &grad)?);
    }
    Ok(reports)
}
