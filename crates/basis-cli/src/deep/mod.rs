//! Models with a dense tower: DeepFM (`--model deepfm`), the FM plus a ReLU
//! MLP over the concatenated per-field embeddings.
//!
//! # The interface a trainer uses (single process, replicated or sharded)
//!
//! The model never indexes the embedding table itself. A trainer
//!
//! 1. builds a [`LocalBatch`]: the batch's **unique** row ids (`ids`, in
//!    first-seen order; a row's *local index* is its position there) and the
//!    examples' features as `(local index, value, field)` plus labels —
//!    [`LocalBatch::fill_from`] does it for a table in this process, a
//!    row-sharded trainer fills one with [`LocalBatch::push_row`] /
//!    [`LocalBatch::push_feature`] / [`LocalBatch::end_example`];
//! 2. gathers those rows into one contiguous buffer, `ids.len() × (k + 1)`
//!    floats, row `i` = the table row of `ids[i]` ([`gather_rows`] locally; a
//!    sharded trainer fills it with rows fetched from their owner ranks);
//! 3. calls [`DeepFm::forward_backward`] with the dense parameters, the
//!    gathered rows and the batch. It returns ([`DeepGrads`]) the gradient
//!    of `scale · Σ_examples log-loss` for every **gathered row** (same
//!    layout and order as the buffer, so row `i` goes back to the owner of
//!    `ids[i]`), the gradient of the dense parameters, and the batch loss.
//!
//! [`DeepFm::forward`] is the same without the backward pass (evaluation).
//! Nothing in the model depends on which rank a row came from, so a
//! sharded run computes exactly what a single process computes on the same
//! rows.
//!
//! Layout: a table row is `[w, v_1..v_k]` (shared with the FM part, as in
//! DeepFM); the dense parameters are `[b, MLP…]` (the FM's global bias, then
//! the tower, [`mlp`]).

pub(crate) mod batch;
pub(crate) mod deepfm;
pub(crate) mod gemm;
pub(crate) mod mlp;

use onebit_adam::{Config, GroupSpec, OneBitAdam};

pub(crate) use batch::{LocalBatch, gather_rows};
pub(crate) use deepfm::{DeepFm, DeepGrads, Workspace};

/// `--model`: which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModelKind {
    /// Factorization machine (linear terms + pairwise interactions).
    Fm,
    /// DeepFM: the FM plus an MLP over the concatenated field embeddings.
    Deepfm,
}

/// `--dense-opt`: how data-parallel ranks train the dense parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DenseOpt {
    /// f32 Adam on the all-reduced (mean) gradient at every step.
    Adam,
    /// 1-bit Adam: full-precision warm-up, then compressed momentum
    /// all-reduce with error feedback.
    OnebitAdam,
}

impl DenseOpt {
    /// The optimizer of `len` dense parameters for a run of `steps_total`
    /// steps (`--dense-lr` = `lr`, bias-corrected; 1-bit Adam's warm-up is
    /// the first 20 % of the steps).
    ///
    /// Fails when `onebit-adam` refuses the configuration.
    pub(crate) fn build(self, len: usize, lr: f32, steps_total: u64) -> Result<OneBitAdam, String> {
        let config = Config {
            lr,
            freeze_step: (steps_total / 5).max(1),
            bias_correction: true,
            ..Config::default()
        };
        let group = match self {
            // Full precision at every step: Adam on the mean gradient.
            Self::Adam => GroupSpec::full_precision(len),
            Self::OnebitAdam => GroupSpec::one_bit(len),
        };
        OneBitAdam::with_groups(&[group], config).map_err(|e| format!("--dense-opt: {e}"))
    }
}

/// `n` zeros, or an error naming `what` when they cannot be allocated.
pub(crate) fn zeros(n: usize, what: &str) -> Result<Vec<f32>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| format!("{what}: cannot allocate {n} floats"))?;
    v.resize(n, 0.0);
    Ok(v)
}
