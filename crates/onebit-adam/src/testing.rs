//! A small deterministic training problem for tests, examples and
//! cross-backend comparisons (e.g. `LocalComm` vs MPI, bit for bit):
//! sparse logistic regression on a generated data set, one shard per rank.
//!
//! Data: `samples_per_rank` samples per rank, each with `active` distinct
//! features drawn uniformly from the first `features − features/16` (the last
//! sixteenth never occurs, so its gradient is exactly zero — the case 1-bit
//! Adam's zero detection is for), with values roughly `N(0, 1)`.
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
    /// Roughly `N(0, 1)`: centred Irwin–Hall sum of 4 uniforms, scaled by √3.
    fn normal(&mut self) -> f32 {
        (((0..4).map(|_| self.unit()).sum::<f64>() - 2.0) * 1.732_050_8) as f32
    }
}

/// One rank's samples.
#[derive(Debug, Clone)]
struct Shard {
    /// `active` feature indices per sample.
    index: Vec<u32>,
    /// Their values.
    value: Vec<f32>,
    /// Labels in {0, 1}.
    label: Vec<f32>,
}

/// Sparse logistic regression; parameters are `features` weights
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
        let live = (features - features / 16).max(1);
        let active = active.clamp(1, live);
        let mut rng = SplitMix64(seed);
        let teacher: Vec<f32> = (0..features).map(|_| 1.5 * rng.normal()).collect();
        let scale = 1.0 / Float::sqrt(active as f32);
        let shards = (0..ranks)
            .map(|_| {
                let mut index = Vec::with_capacity(samples_per_rank * active);
                let mut value = Vec::with_capacity(samples_per_rank * active);
                let mut label = Vec::with_capacity(samples_per_rank);
                for _ in 0..samples_per_rank {
                    let start = index.len();
                    while index.len() - start < active {
                        let f = (rng.unit() * live as f64) as u32;
                        if !index[start..].contains(&f) {
                            index.push(f);
                            value.push(rng.normal());
                        }
                    }
                    let z: f32 = index[start..]
                        .iter()
                        .zip(&value[start..])
                        .map(|(&f, &x)| teacher[f as usize] * x)
                        .sum::<f32>()
                        * scale
                        - 0.2;
                    label.push(if (rng.unit() as f32) < sigmoid(z) {
                        1.0
                    } else {
                        0.0
                    });
                }
                Shard {
                    index,
                    value,
                    label,
                }
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

    fn logit(&self, sample: &[u32], values: &[f32], params: &[f32]) -> f32 {
        sample
            .iter()
            .zip(values)
            .map(|(&f, &x)| params[f as usize] * x)
            .sum::<f32>()
            + params[self.features]
    }

    /// Mean loss of shard `rank` at `params`, and its gradient written to
    /// `grad` (`params()` elements). Returns `None` for an unknown rank or
    /// wrong lengths.
    pub fn shard_loss_grad(&self, rank: usize, params: &[f32], grad: &mut [f32]) -> Option<f32> {
        let all = self.shards.get(rank)?.label.len();
        self.batch_loss_grad(rank, 0..all, params, grad)
    }

    /// Like [`Self::shard_loss_grad`] on the samples `batch` of shard `rank`
    /// (a mini-batch). `None` also when `batch` is out of range.
    pub fn batch_loss_grad(
        &self,
        rank: usize,
        batch: core::ops::Range<usize>,
        params: &[f32],
        grad: &mut [f32],
    ) -> Option<f32> {
        let shard = self.shards.get(rank)?;
        if params.len() != self.params()
            || grad.len() != self.params()
            || batch.end > shard.label.len()
            || batch.start > batch.end
        {
            return None;
        }
        grad.fill(0.0);
        let n = batch.len().max(1) as f32;
        let mut loss = 0.0f32;
        let a = self.active;
        for ((sample, values), &y) in shard.index[batch.start * a..batch.end * a]
            .chunks_exact(a)
            .zip(shard.value[batch.start * a..batch.end * a].chunks_exact(a))
            .zip(&shard.label[batch.clone()])
        {
            let z = self.logit(sample, values, params);
            loss += bce(z, y);
            let d = (sigmoid(z) - y) / n;
            for (&f, &x) in sample.iter().zip(values) {
                grad[f as usize] += d * x;
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
            for ((sample, values), &y) in shard
                .index
                .chunks_exact(self.active)
                .zip(shard.value.chunks_exact(self.active))
                .zip(&shard.label)
            {
                sum += f64::from(bce(self.logit(sample, values, params), y));
                count += 1;
            }
        }
        sum / count.max(1) as f64
    }
}

/// Run `steps` steps of `opt` on this rank's shard of `problem`, starting
/// from `params`; returns one report per step. With `batch = Some(b)` step
/// `t` (counted by `opt.steps()`) uses the `b` samples starting at
/// `(t·b) mod (shard − b + 1)`: deterministic mini-batches; `None` is full batch.
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
    batch: Option<usize>,
) -> Result<Vec<StepReport>, OneBitError> {
    let shard = problem.shards.get(comm.rank()).map_or(0, |s| s.label.len());
    if params.len() != problem.params() {
        return Err(OneBitError::Length {
            expected: problem.params(),
            found: params.len(),
        });
    }
    let mut grad = vec![0.0f32; problem.params()];
    let mut reports = Vec::new();
    for _ in 0..steps {
        let range = match batch {
            Some(b) if b <= shard => {
                let start = (opt.steps() as usize).wrapping_mul(b) % (shard - b + 1);
                start..start + b
            }
            _ => 0..shard,
        };
        problem
            .batch_loss_grad(comm.rank(), range, params, &mut grad)
            .ok_or(OneBitError::Config("no shard for this rank"))?;
        reports.push(opt.step_with_grad(comm, params, &grad)?);
    }
    Ok(reports)
}

/// The bit patterns of `v`: the tests compare floats bit for bit.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Deterministic pseudo-random input of rank `r` at call `t`: `n` values
/// spread over about ±(1 + r)/2 (an LCG, so every run and target sees the
/// same values).
pub fn rank_input(r: usize, t: usize, n: usize) -> Vec<f32> {
    let mut s = (r as u64 + 1) * 0x9e37_79b9 + t as u64 * 0x85eb_ca6b;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1.0 + r as f32)
        })
        .collect()
}

/// One rank of the "sleeper" problem: a noisy quadratic bowl with its
/// optimum at 1 in all `n + 1` coordinates, of which the last gets a
/// gradient scaled by 1e-12 up to step `freeze` (a ReLU unit that rarely
/// fires: its second moment stays near ε) and a full one after it. `step`
/// takes one optimizer step (`false`: it failed). Returns (mean distance
/// from 1 over the first `n`, largest over them, the sleeper's), or `None`
/// when a step failed or a value went non-finite. The noise is the rank's
/// own SplitMix64 stream, so a run is the same on every backend.
pub fn sleeper_run<C: Communicator>(
    comm: &mut C,
    n: usize,
    freeze: u64,
    steps: u64,
    mut step: impl FnMut(&mut C, &mut [f32], &[f32]) -> bool,
) -> Option<(f64, f64, f64)> {
    let mut x = vec![0.0f32; n + 1];
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ comm.rank() as u64;
    let mut noise = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = (s ^ (s >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    };
    for t in 1..=steps {
        let mut g: Vec<f32> = x.iter().map(|&x| (x - 1.0) + 0.5 * noise()).collect();
        if t <= freeze {
            g[n] *= 1e-12;
        }
        if !step(comm, &mut x, &g) || !x.iter().all(|x| x.is_finite()) {
            return None;
        }
    }
    let d: Vec<f64> = x.iter().map(|&v| f64::from((v - 1.0).abs())).collect();
    Some((
        d[..n].iter().sum::<f64>() / n as f64,
        d[..n].iter().copied().fold(0.0, f64::max),
        d[n],
    ))
}
