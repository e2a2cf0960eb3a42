//! The 1-bit Adam optimizer (Tang et al. 2021; DeepSpeed
//! `onebit/adam.py`), over one flat parameter vector split into groups.
//!
//! Per step `t` (1-based) and group, with `ḡ` the mean gradient over ranks:
//! * **full-precision stage** (the warm-up, up to the freeze step that
//!   [`FreezePolicy`] fixes or decides; every step of a
//!   [`Policy::FullPrecision`] group, and the final stage of a staged
//!   schedule): `ḡ = all_reduce_sum(g)/P`, `m ← β₁m + (1−β₁)ḡ`,
//!   `v ← β₂v + (1−β₂)ḡ²`;
//! * **1-bit stage** ([`Policy::OneBit`] groups after the freeze): `v` is
//!   frozen; only the *live* coordinates are communicated — those whose mean
//!   gradient was not exactly 0 at every warm-up step (the others keep
//!   `m = 0`); [`Variant::Momentum`]: `m ← β₁m + (1−β₁)g_local`,
//!   `m ← compressed_allreduce(m)`; [`Variant::DecayedGradient`]: `ĝ` = mean of the ranks' decayed-error-feedback compressed
//!   gradients, `m ← β₁m + (1−β₁)ĝ`;
//! * **update**: `x ← x − lr·(m̂/(√v̂ + ε) + λ·x)`, with `m̂ = m/(1−β₁ᵗ)` and
//!   `v̂ = v/(1−β₂^{t_v})` when bias correction is on (`t_v` = updates of `v`),
//!   else `m̂ = m`, `v̂ = v` (the reference's default).
//!
//! Every step starts with one header exchange (step, length, group layout,
//! gradient verdict), so a NaN gradient or a disagreement fails on every rank
//! before any state changes.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use comm_traits::{CommStats, Communicator};
use num_traits::Float;
use onebit_codec::{Compressor, CompressorConfig, ErrorFeedback, Grade, ScaleKind};

use crate::OneBitError;
use crate::allreduce::{self, AllReduceState, ErrorNorms};
use crate::dense::{AdamW, Kernel, PackedRuns, PackedSigns};
use crate::freeze::{FreezePolicy, FreezeTracker};
use crate::fused::{self, Measure, Scale};
use crate::graded::{self, GradedState};
use crate::header::{self, Op};
use crate::policy::{Policy, WarmupReduce};

// The gradient's finiteness check and its switch.
pub(crate) mod finite;
// The split step (`begin_group`/`finish`): a child module, so it reaches
// the step's private passes without widening their visibility.
pub(crate) mod split;

use finite::{FiniteCheck, check_products, fill_checked};

/// What is compressed in the 1-bit stage.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Variant {
    /// DeepSpeed's scheme: local momentum through [`crate::compressed_allreduce`]
    /// (worker and server error feedback). The default.
    #[default]
    Momentum,
    /// As [`Variant::Momentum`], but the all-reduce carries the momentum
    /// divided by the frozen Adam denominator `d = √v̂ + ε` (equal on every
    /// rank, since `v` was all-reduced during warm-up), and `m = d ⊙ u` after
    /// it. Without compression this is the same step (the all-reduce is
    /// linear and `d` is fixed); with it, each coordinate's update is
    /// `lr·(±α_u)` with `α_u` the scale of the *preconditioned* buffer, so
    /// the update stays bounded like Adam's. Plain [`Variant::Momentum`]
    /// gives every coordinate `±α` of the raw momentum instead, which a
    /// coordinate whose `√v̂` is orders of magnitude below `α` turns into a
    /// step of `lr·α/√v̂` — a tower whose `√v̂` spans 10⁻⁹..10⁻² (ReLU units
    /// that rarely fire) diverges within a few 1-bit steps that way. Error
    /// feedback lives in the preconditioned space.
    PreconditionedMomentum,
    /// A gradient-compression variant: each rank compresses its **gradient**
    /// with a decayed error buffer `e ← β·e + (1−β)·(p − α·σ(p))`
    /// ([`ErrorFeedback::Decayed`]); the ranks all-gather signs and scales and
    /// average the decoded gradients in rank order; `m` is updated from that
    /// mean. `scale` is the codec's scale; [`ScaleKind::Unit`] is a
    /// bare sign (then the momentum is in units of ±1, not of the gradient).
    DecayedGradient {
        /// Decay of the old error (Adam's β₁ = 0.9 is a natural choice).
        beta: f32,
        /// Scale of the compressed gradient.
        scale: ScaleKind,
    },
}

/// Hyper-parameters; `Default` holds the reference values (DeepSpeed
/// `OnebitAdam`: lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay,
/// no bias correction) except the freeze: DeepSpeed's `freeze_step` 100000
/// never compresses a short run, so the default is
/// [`FreezePolicy::Share`] with [`crate::AutoFreeze::share`] (the warm-up
/// ends when the early burst of gradient energy is over, not before step
/// 20; [`FreezePolicy`] gives the measured reason).
/// `#[non_exhaustive]`: build it from [`Default`] with the `with_*` setters
/// (or [`Config::staged`]).
///
/// ```
/// use onebit_adam::{Config, FreezePolicy};
///
/// let config = Config::default().with_lr(1e-2).with_freeze_step(10);
/// assert_eq!((config.lr, config.freeze), (1e-2, FreezePolicy::Fixed(10)));
/// let staged = Config::default().staged(1000);
/// assert_eq!((staged.freeze, staged.final_full_after), (FreezePolicy::Fixed(100), Some(900)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Config {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay β₁.
    pub beta1: f32,
    /// Second-moment decay β₂.
    pub beta2: f32,
    /// Denominator guard ε.
    pub eps: f32,
    /// Decoupled weight decay λ (groups may override it).
    pub weight_decay: f32,
    /// When the warm-up ends: steps up to the freeze are full precision and
    /// update `v`; `v` of 1-bit groups is frozen afterwards. Default
    /// [`FreezePolicy::default`] = [`FreezePolicy::Share`] with
    /// [`crate::AutoFreeze::share`] (window 5, threshold 0.05, `min_step`
    /// 20, `max_step` 10 000): within 0.001 test AUC of f32 Adam on every
    /// harness run measured, DeepFM and DLRM, 3 seeds, 200 and 600 steps,
    /// freezing earlier than [`FreezePolicy::Auto`] on each
    /// (`docs/ONEBIT_ADAM.md`, "The share rule on DLRM and its minimum
    /// step"); `Auto` was the default before 2026-12-06.
    /// [`Config::with_freeze_step`] sets a fixed step.
    pub freeze: FreezePolicy,
    /// Divide by `1−β₁ᵗ` and `1−β₂^{t_v}` (off in the reference).
    pub bias_correction: bool,
    /// What the 1-bit stage compresses.
    pub variant: Variant,
    /// Staged schedule: steps after this one are full
    /// precision again (`v` resumes). `None`: 1-bit until the end.
    pub final_full_after: Option<u64>,
    /// Zero every error buffer after each `k`-th 1-bit step (bounds how long
    /// a stale error can linger). `None`: never.
    pub error_reset_every: Option<u64>,
    /// Fill [`GroupTelemetry::error_norms`] and
    /// [`GroupTelemetry::sign_flips`] at every step (one extra read of each
    /// compressing group's error buffers, `4(N + N/P)` bytes, and of each
    /// group's `m`, `4n` bytes, plus one bit per parameter kept between
    /// steps). Default `false`: those fields are `None`; the bytes and
    /// scales are reported either way (they cost nothing).
    pub telemetry: bool,
    /// Whether steps refuse a NaN/±∞ gradient before changing anything
    /// ([`FiniteCheck::On`], the default) or use it as given
    /// ([`FiniteCheck::Off`]: a poisoned state, as torch's Adam; for callers
    /// that check gradients themselves). The variants' docs say exactly
    /// what happens and what the check costs.
    #[cfg_attr(feature = "serde", serde(default))]
    pub finite_check: FiniteCheck,
    /// How warm-up steps average the gradients over the ranks:
    /// [`WarmupReduce::F32`] (the default, DeepSpeed's stage exactly) or
    /// [`WarmupReduce::Bf16`] (half the bytes; see its docs).
    #[cfg_attr(feature = "serde", serde(default))]
    pub warmup_reduce: WarmupReduce,
}

// onebit-codec's macro, one copy per dependency chain.
onebit_codec::with_setters!(Config {
    with_lr => lr: f32,
    with_beta1 => beta1: f32,
    with_beta2 => beta2: f32,
    with_eps => eps: f32,
    with_weight_decay => weight_decay: f32,
    with_freeze => freeze: FreezePolicy,
    with_bias_correction => bias_correction: bool,
    with_variant => variant: Variant,
    with_final_full_after => final_full_after: Option<u64>,
    with_error_reset_every => error_reset_every: Option<u64>,
    with_telemetry => telemetry: bool,
    with_finite_check => finite_check: FiniteCheck,
    with_warmup_reduce => warmup_reduce: WarmupReduce,
});

impl Default for Config {
    fn default() -> Self {
        // The Adam hyper-parameters' defaults are the dense kernel's.
        let adam = AdamW::default();
        Self {
            lr: adam.lr,
            beta1: adam.beta1,
            beta2: adam.beta2,
            eps: adam.eps,
            weight_decay: adam.weight_decay,
            freeze: FreezePolicy::default(),
            bias_correction: false,
            variant: Variant::Momentum,
            final_full_after: None,
            error_reset_every: None,
            telemetry: false,
            finite_check: FiniteCheck::On,
            warmup_reduce: WarmupReduce::F32,
        }
    }
}

impl Config {
    /// A fixed last warm-up step `n` ([`FreezePolicy::Fixed`]; must be ≥ 1),
    /// DeepSpeed's `freeze_step`.
    pub fn with_freeze_step(self, n: u64) -> Self {
        Self {
            freeze: FreezePolicy::Fixed(n),
            ..self
        }
    }

    /// The staged schedule for a run of `total_steps`: full
    /// precision for the first 10 %, 1-bit for the middle 80 %, full precision
    /// for the last 10 %.
    pub fn staged(self, total_steps: u64) -> Self {
        Self {
            freeze: FreezePolicy::Fixed((total_steps / 10).max(1)),
            final_full_after: Some(total_steps - total_steps / 10),
            ..self
        }
    }

    fn validate(&self) -> Result<(), OneBitError> {
        let unit = |x: f32| (0.0..1.0).contains(&x);
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            return Err(OneBitError::Config("lr must be finite and >= 0"));
        }
        if !unit(self.beta1) {
            return Err(OneBitError::Config("beta1 must be in [0, 1)"));
        }
        if !unit(self.beta2) {
            return Err(OneBitError::Config("beta2 must be in [0, 1)"));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(OneBitError::Config("eps must be finite and > 0"));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(OneBitError::Config("weight_decay must be finite and >= 0"));
        }
        self.freeze.validate()?;
        if self.error_reset_every == Some(0) {
            return Err(OneBitError::Config("error_reset_every must be >= 1"));
        }
        if let Variant::DecayedGradient { beta, .. } = self.variant
            && !(0.0..=1.0).contains(&beta)
        {
            return Err(OneBitError::Config("variant beta must be in [0, 1]"));
        }
        Ok(())
    }
}

/// One parameter group: a contiguous range of the flat parameter vector.
/// `#[non_exhaustive]`: build it with [`GroupSpec::one_bit`] or
/// [`GroupSpec::full_precision`] and the `with_*` setters.
///
/// ```
/// use onebit_adam::{GroupSpec, Policy};
///
/// let embeddings = GroupSpec::one_bit(4096).with_weight_decay(Some(0.0));
/// let norms = GroupSpec::full_precision(64);
/// assert_eq!((embeddings.policy, norms.policy), (Policy::OneBit, Policy::FullPrecision));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct GroupSpec {
    /// Number of parameters.
    pub len: usize,
    /// Communication policy after the freeze.
    pub policy: Policy,
    /// Weight decay for this group (`None`: the config's).
    pub weight_decay: Option<f32>,
}

// onebit-codec's macro, one copy per dependency chain.
onebit_codec::with_setters!(GroupSpec {
    with_len => len: usize,
    with_policy => policy: Policy,
    with_weight_decay => weight_decay: Option<f32>,
});

impl GroupSpec {
    /// A 1-bit group of `len` parameters.
    pub fn one_bit(len: usize) -> Self {
        Self {
            len,
            policy: Policy::OneBit,
            weight_decay: None,
        }
    }

    /// A full-precision group of `len` parameters.
    pub fn full_precision(len: usize) -> Self {
        Self {
            len,
            policy: Policy::FullPrecision,
            weight_decay: None,
        }
    }
}

/// Which stage a step ran in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Stage {
    /// Up to the freeze ([`OneBitAdam::frozen_at`]): full precision, `v` updated.
    Warmup,
    /// 1-bit groups compressed, `v` frozen.
    Compressed,
    /// After `final_full_after`: full precision again.
    FinalFull,
}

/// What one [`OneBitAdam::step`] did on this rank.
///
/// ```
/// use onebit_adam::comm_traits::SingleRank;
/// use onebit_adam::{Config, OneBitAdam, Stage};
///
/// let mut opt = OneBitAdam::new(2, Config::default().with_freeze_step(1))?;
/// let mut comm = SingleRank::default();
/// let mut x = [1.0f32, -1.0];
/// let first = opt.step_with_grad(&mut comm, &mut x, &[0.5, -0.5])?;
/// assert_eq!((first.step, first.stage), (1, Stage::Warmup));
/// let second = opt.step_with_grad(&mut comm, &mut x, &[0.5, -0.5])?;
/// assert_eq!((second.step, second.stage), (2, Stage::Compressed));
/// assert_eq!(second.bytes.bytes_sent, 0); // one rank sends nothing
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct StepReport {
    /// The step just taken (1-based).
    pub step: u64,
    /// Its stage.
    pub stage: Stage,
    /// Bytes and calls of this step's collectives on this rank (the
    /// header exchange included; the groups' bytes add up to this minus
    /// the header's `(P−1)·40`).
    pub bytes: CommStats,
    /// Per group, in order: what it sent and its error-feedback health.
    pub groups: Vec<GroupTelemetry>,
}

/// One group's part of a [`StepReport`] (the monitoring the layered
/// 1-bit Adam deployments recommend: error-feedback norm, quantisation
/// scale, how much the update direction churns, bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct GroupTelemetry {
    /// The group's policy.
    pub policy: Policy,
    /// Whether it was compressed this step (else a full-precision mean
    /// all-reduce of the gradient, or nothing on one rank).
    pub compressed: bool,
    /// Bytes and calls of this group's collectives this step on this rank.
    pub bytes: CommStats,
    /// This rank's worker scale: `α_r` (1-bit), the mean of its chunk
    /// scales (2-bit), `1.0` (bf16, no scale); `0.0` when not compressed.
    pub worker_scale: f32,
    /// This rank's server scale (`β_r`, the 2-bit server chunk's scale,
    /// `1.0` for bf16); `0.0` when not compressed or for the
    /// decayed-gradient variant (no server stage).
    pub server_scale: f32,
    /// `‖e_w‖₂`, `‖e_s‖₂` after the step (zero for a group without error
    /// buffers); `None` unless [`Config::telemetry`].
    pub error_norms: Option<ErrorNorms>,
    /// Fraction of the group's coordinates whose momentum changed sign
    /// class (`m < 0` or not) in this step; the first step compares with
    /// the initial `m = 0`. `None` unless [`Config::telemetry`] (or an
    /// empty group).
    pub sign_flips: Option<f64>,
}

/// State of one group (besides `m`, `v` which live in the flat vectors).
#[derive(Debug, Clone)]
pub(crate) struct GroupState {
    pub(crate) spec: GroupSpec,
    pub(crate) range: Range<usize>,
    /// Updates of `v` so far (for bias correction).
    pub(crate) v_updates: u64,
    /// Momentum variant: worker/server errors.
    pub(crate) allreduce: AllReduceState,
    /// Seed variant: decayed gradient compressor over the live coordinates
    /// (created at the first 1-bit step).
    pub(crate) seed: Option<Compressor>,
    /// [`Policy::Graded`]: worker/server errors of the graded all-reduce.
    pub(crate) graded: GradedState,
    /// What the 1-bit stage derives from the frozen `v` and zero mask, built
    /// at the first 1-bit step after they last changed (see [`Frozen`]).
    pub(crate) frozen: Option<Frozen>,
    /// Per block of [`fused::BLOCK`] coordinates of the group, whether any
    /// of its zero mask is still set: a warm-up step updates the mask only
    /// on those blocks (`&=` on an all-clear mask changes nothing), sparing
    /// the 2 B per element of reading and writing it where a gradient has
    /// cleared it (`src/fused.rs`). Derived from the mask: all `true` when
    /// built, updated by each warm-up step, recounted by
    /// [`OneBitAdam::recount_zero_left`] when the mask is imported.
    pub(crate) zero_left: Vec<bool>,
}

/// Per-group values that stay fixed while `v` and the zero mask are frozen:
/// rebuilding them every compressed step cost an index vector of 8 B per
/// coordinate and a scalar `√`/`÷` per coordinate (a sixth of a DeepFM
/// rank's CPU time in the 1-bit stage).
#[derive(Debug, Clone)]
pub(crate) struct Frozen {
    /// The `v_updates` it was built at (a full-precision step changes `v`).
    v_updates: u64,
    /// Runs of live coordinates (group-relative), in order: a tower's dead
    /// units leave whole rows and columns out, so runs keep the loops
    /// contiguous.
    live: Vec<Range<usize>>,
    /// Live coordinates in all.
    count: usize,
    /// `PreconditionedMomentum`: `√(v/bc2) + ε` per live coordinate, the
    /// same expression (and so the same bits) the update kernel divides by.
    denom: Vec<f32>,
    /// `PreconditionedMomentum`: the bound `|u| ≤ cap` of the buffer sent
    /// ([`preconditioned_cap`]; `+∞` for the other variants).
    cap: f32,
}

impl Frozen {
    /// Bytes of its vectors (lengths).
    pub(crate) fn bytes(&self) -> usize {
        self.live.len() * core::mem::size_of::<Range<usize>>()
            + self.denom.len() * core::mem::size_of::<f32>()
    }
}

/// The 1-bit Adam optimizer for one rank. Every rank builds it with the same
/// config and groups and calls [`OneBitAdam::step`] in lockstep.
///
/// # Example
///
/// Full-precision warm-up for a fixed 3 steps, then compressed momentum.
/// With one rank ([`comm_traits::SingleRank`]) the all-reduce is the
/// identity, so this is plain (then 1-bit-quantised) Adam:
///
/// ```
/// use comm_traits::SingleRank;
/// use onebit_adam::{Config, OneBitAdam, Stage};
///
/// let config = Config::default().with_lr(0.05).with_freeze_step(3);
/// let mut opt = OneBitAdam::new(4, config)?;
/// let mut comm = SingleRank::default();
/// let mut params = [1.0f32, -2.0, 0.5, 3.0];
/// let mut stages = Vec::new();
/// for _ in 0..6 {
///     // The gradient of ½‖x‖²: the optimizer drives every parameter to 0.
///     let grad = params;
///     let report = opt.step_with_grad(&mut comm, &mut params, &grad)?;
///     stages.push(report.stage);
/// }
/// assert_eq!(stages[..3], [Stage::Warmup; 3]);
/// assert_eq!(stages[3], Stage::Compressed);
/// assert!(params.iter().all(|p| p.abs() < 3.0));
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct OneBitAdam {
    pub(crate) config: Config,
    pub(crate) groups: Vec<GroupState>,
    pub(crate) len: usize,
    /// Completed steps.
    pub(crate) step: u64,
    /// 1-bit steps taken (for `error_reset_every`).
    pub(crate) compressed_steps: u64,
    pub(crate) m: Vec<f32>,
    pub(crate) v: Vec<f32>,
    /// `true` while the mean gradient has been exactly 0 at every warm-up step.
    pub(crate) zero: Vec<bool>,
    /// Gradient accumulated since the last step and how many were added.
    pub(crate) grad_sum: Vec<f32>,
    pub(crate) grad_count: u32,
    /// Whether every element of `grad_sum` is known to be finite: set by
    /// `accumulate` in its summing pass (an OR over the exponent bits of
    /// the new sums), so a step on the sum needs no check pass of its own;
    /// `false` after an import (unknown: the step then checks).
    pub(crate) sum_finite: bool,
    /// Rank/size the error buffers are bound to (set by the first step).
    pub(crate) bound: Option<(usize, usize)>,
    scratch: Vec<f32>,
    scratch_bits: Vec<u8>,
    scratch_gather: Vec<u8>,
    scratch_packed: Vec<f32>,
    /// [`WarmupReduce::Bf16`]'s buffers, shared by the groups (freed at
    /// the first compressed step).
    warm_scratch: Option<alloc::boxed::Box<graded::Scratch>>,
    /// Where the run is in its [`FreezePolicy`].
    pub(crate) freeze: FreezeTracker,
    /// [`Config::telemetry`]: per group, the signs of its `m` after the
    /// previous step, packed as `numpy.packbits(~(m < 0))` (the codec's
    /// SIMD packing; allocated at the first step with telemetry).
    pub(crate) negative: Vec<Vec<u8>>,
}

impl OneBitAdam {
    /// One 1-bit group of `len` parameters.
    ///
    /// # Errors
    /// [`OneBitError::Config`] naming the invalid hyper-parameter.
    pub fn new(len: usize, config: Config) -> Result<Self, OneBitError> {
        Self::with_groups(&[GroupSpec::one_bit(len)], config)
    }

    /// Groups laid out back to back in the flat parameter vector.
    ///
    /// # Errors
    /// [`OneBitError::Config`] naming the invalid hyper-parameter or a group
    /// weight decay that is negative or not finite.
    pub fn with_groups(groups: &[GroupSpec], config: Config) -> Result<Self, OneBitError> {
        config.validate()?;
        let mut start = 0;
        let mut states = Vec::with_capacity(groups.len());
        for &spec in groups {
            if let Some(wd) = spec.weight_decay
                && !(wd.is_finite() && wd >= 0.0)
            {
                return Err(OneBitError::Config(
                    "group weight_decay must be finite and >= 0",
                ));
            }
            if matches!(spec.policy, Policy::Graded(_))
                && matches!(config.variant, Variant::DecayedGradient { .. })
            {
                return Err(OneBitError::Config(
                    "a graded group needs a momentum variant, not DecayedGradient",
                ));
            }
            states.push(GroupState {
                spec,
                range: start..start + spec.len,
                v_updates: 0,
                allreduce: AllReduceState::new(),
                seed: None,
                graded: GradedState::new(),
                frozen: None,
                zero_left: vec![true; spec.len.div_ceil(fused::BLOCK)],
            });
            start += spec.len;
        }
        Ok(Self {
            config,
            groups: states,
            len: start,
            step: 0,
            compressed_steps: 0,
            m: vec![0.0; start],
            v: vec![0.0; start],
            zero: vec![true; start],
            grad_sum: vec![0.0; start],
            grad_count: 0,
            sum_finite: true,
            bound: None,
            scratch: Vec::new(),
            scratch_bits: Vec::new(),
            scratch_gather: Vec::new(),
            scratch_packed: Vec::new(),
            warm_scratch: None,
            freeze: FreezeTracker::new(config.freeze),
            negative: Vec::new(),
        })
    }

    /// Set each group's [`GroupState::zero_left`] from the zero mask (after
    /// the mask was replaced, e.g. by an import).
    pub(crate) fn recount_zero_left(&mut self) {
        for g in &mut self.groups {
            g.zero_left = fused::block_flags(&self.zero[g.range.clone()]);
        }
    }

    /// Bytes of the per-step buffers (lengths).
    pub(crate) fn scratch_bytes(&self) -> usize {
        (self.scratch.len() + self.scratch_packed.len()) * core::mem::size_of::<f32>()
            + self.warm_scratch.as_ref().map_or(0, |s| s.bytes())
            + self.scratch_bits.len()
            + self.scratch_gather.len()
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no parameters.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Completed steps.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// First moment `m`.
    pub fn momentum(&self) -> &[f32] {
        &self.m
    }

    /// Second moment `v`.
    pub fn variance(&self) -> &[f32] {
        &self.v
    }

    /// Coordinates whose mean gradient was exactly 0 at every warm-up step
    /// so far (their momentum is kept at 0 in the 1-bit stage).
    pub fn zero_coordinates(&self) -> usize {
        self.zero.iter().filter(|&&z| z).count()
    }

    /// The last warm-up step, once it is known: from the start for
    /// [`FreezePolicy::Fixed`], from the step that decided it for
    /// the automatic rules (`None` before). The same on every rank.
    pub fn frozen_at(&self) -> Option<u64> {
        self.freeze.frozen_at
    }

    /// The last relative change `‖v̂ − v̂_snap‖₁ / ‖v̂‖₁` the automatic
    /// freeze measured (`None` before its first measure, and always for
    /// [`FreezePolicy::Fixed`]): what the threshold was compared with.
    pub fn freeze_change(&self) -> Option<f64> {
        self.freeze.last_change
    }

    /// The stage step `t` (1-based) runs in. Under an automatic rule
    /// ([`FreezePolicy::Share`], [`FreezePolicy::Auto`]) every step after
    /// the last completed one is `Warmup` until the freeze is decided (it
    /// is decided at the end of a warm-up step).
    pub fn stage_of(&self, t: u64) -> Stage {
        if self.freeze.is_warmup(t) {
            Stage::Warmup
        } else if self.config.final_full_after.is_some_and(|f| t > f) {
            Stage::FinalFull
        } else {
            Stage::Compressed
        }
    }

    /// Error-buffer norms per group (`0` for full-precision groups); for the
    /// seed variant `worker` is the decayed gradient error and `server` is 0.
    pub fn error_norms(&self) -> Vec<ErrorNorms> {
        (0..self.groups.len())
            .map(|gi| self.group_error_norms(gi))
            .collect()
    }

    /// [`Self::error_norms`] of group `gi`.
    fn group_error_norms(&self, gi: usize) -> ErrorNorms {
        [&self.groups[gi]]
            .into_iter()
            .map(|g| match (&g.seed, g.spec.policy) {
                (Some(c), _) => ErrorNorms {
                    worker: c.error_norm(),
                    server: 0.0,
                },
                (None, Policy::Graded(_)) => g.graded.error_norms(),
                (None, _) => g.allreduce.error_norms(),
            })
            .fold(ErrorNorms::default(), |_, n| n)
    }

    /// Rebuild [`Self::negative`] from `m` (after an import): with
    /// telemetry on, every step stores the signs of every coordinate, so the
    /// bits are a function of the restored `m`, and the next step's
    /// [`GroupTelemetry::sign_flips`] reports the flips the uninterrupted run
    /// reports. Empty without telemetry, as in a fresh optimizer.
    pub(crate) fn rebuild_negative(&mut self) {
        self.negative = Vec::new();
        if self.config.telemetry {
            for g in &self.groups {
                let mut signs = vec![0; g.range.len().div_ceil(8)];
                let packed = onebit_codec::pack_signs_into(&self.m[g.range.clone()], &mut signs);
                debug_assert!(packed.is_ok(), "one sign byte per 8 coordinates");
                self.negative.push(signs);
            }
        }
    }

    /// Fraction of group `gi`'s coordinates whose `m < 0` differs from the
    /// stored bit, and store the new bits: one read of `m` through the
    /// codec's sign packing, in blocks that stay in L1, then a popcount of
    /// the changed bits (the per-coordinate loop it replaces cost 7 % of a
    /// 1-bit step's CPU on the DeepFM harness).
    fn sign_flips(&mut self, gi: usize) -> Option<f64> {
        /// Coordinates per packed block (512 sign bytes on the stack).
        const BLOCK: usize = 4096;
        let range = self.groups[gi].range.clone();
        if self.negative.len() != self.groups.len() {
            // Before the first step every `m` is 0: no sign is negative.
            self.negative = self
                .groups
                .iter()
                .map(|g| all_non_negative(g.range.len()))
                .collect();
        }
        let signs = &mut self.negative[gi];
        let mut packed = [0u8; BLOCK / 8];
        let mut flips = 0u64;
        for (m, old) in self.m[range.clone()]
            .chunks(BLOCK)
            .zip(signs.chunks_mut(BLOCK / 8))
        {
            let new = &mut packed[..old.len()];
            let packed_ok = onebit_codec::pack_signs_into(m, new).is_ok();
            debug_assert!(packed_ok, "one sign byte per 8 coordinates");
            flips += old
                .iter()
                .zip(new.iter())
                .map(|(a, b)| u64::from((a ^ b).count_ones()))
                .sum::<u64>();
            old.copy_from_slice(new);
        }
        (!range.is_empty()).then(|| flips as f64 / range.len() as f64)
    }

    /// Zero every error buffer now (all ranks at the same step).
    pub fn reset_errors(&mut self) {
        for g in &mut self.groups {
            g.allreduce.reset_errors();
            g.graded.reset_errors();
            if let Some(c) = &mut g.seed {
                c.reset_error();
            }
        }
    }

    /// Forget the rank and group size the state is bound to, so that it
    /// continues in a group of another size (a resumed run resharded over
    /// more or fewer ranks). Allowed only while nothing in the state is
    /// per rank: no error-feedback buffer (full-precision groups, or no
    /// 1-bit step yet) and no accumulated gradient. The rest (moments,
    /// counters, freeze state) is the same on every rank, so every rank of
    /// the new group can import one rank's record, unbind, and continue
    /// exactly as a run of that size would.
    ///
    /// # Errors
    /// [`OneBitError::Config`] when a group holds error-feedback buffers or
    /// a gradient is accumulated; nothing changed then.
    pub fn unbind(&mut self) -> Result<(), OneBitError> {
        let per_rank = self.grad_count > 0
            || self.groups.iter().any(|g| {
                g.seed.is_some() || g.allreduce.shape.is_some() || g.graded.shape.is_some()
            });
        if per_rank {
            return Err(OneBitError::Config(
                "the state holds per-rank error feedback or an accumulated gradient",
            ));
        }
        self.bound = None;
        Ok(())
    }

    /// Add one micro-batch gradient; [`Self::step`] uses the average of all
    /// gradients added since the previous step (both stages).
    ///
    /// # Errors
    /// [`OneBitError::Length`] for a wrong length, [`OneBitError::NonFinite`]
    /// for a NaN/±Inf (unless [`Config::finite_check`] is
    /// [`FiniteCheck::Off`]); nothing is added then.
    pub fn accumulate(&mut self, grad: &[f32]) -> Result<(), OneBitError> {
        self.check_grad_len(grad)?;
        check_products(self.config.finite_check, grad, 1.0)?;
        if self.grad_count == u32::MAX {
            return Err(OneBitError::Config("too many accumulated gradients"));
        }
        let mut bad = 0u32;
        for (s, g) in self.grad_sum.iter_mut().zip(grad) {
            *s += *g;
            bad |= u32::from(s.to_bits() & 0x7f80_0000 == 0x7f80_0000);
        }
        self.sum_finite &= bad == 0;
        self.grad_count += 1;
        Ok(())
    }

    fn check_grad_len(&self, grad: &[f32]) -> Result<(), OneBitError> {
        if grad.len() == self.len {
            Ok(())
        } else {
            Err(OneBitError::Length {
                expected: self.len,
                found: grad.len(),
            })
        }
    }

    /// `accumulate(grad)` then `step`, as one collective call: a NaN/±Inf in
    /// `grad` on any rank fails the step on every rank before anything changes.
    ///
    /// # Errors
    /// As [`Self::step`].
    pub fn step_with_grad(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        grad: &[f32],
    ) -> Result<StepReport, OneBitError> {
        self.step_inner(comm, params, Some((grad, 1.0)))
    }

    /// [`Self::step_with_grad`] with `factor · grad` as this rank's
    /// gradient, scaled in the pass that reads `grad` in (the caller makes no
    /// scaled copy). A data-parallel rank whose `grad` is its share of the
    /// *batch* gradient passes `factor = P`, so that the ranks' mean is the
    /// batch gradient. The same bits as `step_with_grad` on the product.
    ///
    /// # Errors
    /// As [`Self::step`]; a non-finite `factor` is
    /// [`OneBitError::Config`], and a product that overflows is
    /// [`OneBitError::NonFinite`] like a NaN/±Inf in `grad`.
    ///
    /// ```
    /// use basis_std::local::LocalComm;
    /// use onebit_adam::comm_traits::Communicator;
    /// use onebit_adam::{Config, OneBitAdam};
    ///
    /// // Each rank holds half of a batch gradient: ×2 makes the ranks'
    /// // mean the whole batch's, as one process stepping on it would see.
    /// let halves = [[0.5f32, -0.25, 0.0], [0.25, -0.25, 0.0]];
    /// let out = LocalComm::run(2, |mut comm| {
    ///     let mut opt = OneBitAdam::new(3, Config::default())?;
    ///     let mut x = [1.0f32; 3];
    ///     let g = halves[comm.rank()];
    ///     opt.step_with_grad_scaled(&mut comm, &mut x, &g, 2.0)?;
    ///     Ok::<_, onebit_adam::OneBitError>(x)
    /// });
    /// let mut xs = Vec::new();
    /// for rank in out {
    ///     xs.push(rank.unwrap()?);
    /// }
    /// assert_eq!(xs[0], xs[1]);
    /// assert!(xs[0][0] < 1.0 && xs[0][1] > 1.0 && xs[0][2] == 1.0);
    /// # Ok::<(), onebit_adam::OneBitError>(())
    /// ```
    pub fn step_with_grad_scaled(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        grad: &[f32],
        factor: f32,
    ) -> Result<StepReport, OneBitError> {
        self.step_inner(comm, params, Some((grad, factor)))
    }

    /// One optimizer step on `params` with the averaged accumulated gradient.
    ///
    /// # Errors
    /// Every rank returns an error, and nothing changes on any rank, when:
    /// a rank's `params`/gradient has the wrong length ([`OneBitError::Length`]),
    /// holds a NaN/±Inf ([`OneBitError::NonFinite`]; with
    /// [`Config::finite_check`] at [`FiniteCheck::Off`] it is used instead,
    /// see there), has no gradient
    /// ([`OneBitError::NoGradient`]), or has state bound to another rank or
    /// group size ([`OneBitError::StateShape`]) — the other ranks get
    /// [`OneBitError::RemoteInput`]; ranks disagree on step, length or group
    /// layout ([`OneBitError::Comm`]). Transport failures after the header
    /// exchange are returned as [`OneBitError::Comm`] (the group is broken).
    pub fn step(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
    ) -> Result<StepReport, OneBitError> {
        self.step_inner(comm, params, None)
    }

    /// FNV-1a over the group layout: ranks must agree on it.
    fn layout(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |x: u64| {
            for b in x.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for g in &self.groups {
            eat(g.spec.len as u64);
            eat(match g.spec.policy {
                Policy::OneBit => 1,
                Policy::FullPrecision => 2,
                Policy::Graded(grade) => 16 + u64::from(grade.bits()),
            });
        }
        eat(match self.config.variant {
            Variant::Momentum => 1,
            Variant::DecayedGradient { .. } => 2,
            Variant::PreconditionedMomentum => 3,
        });
        // The freeze rule and the step it decided: ranks that disagree fail
        // together at this header instead of running other collectives.
        match self.config.freeze {
            FreezePolicy::Fixed(n) => {
                eat(1);
                eat(n);
            }
            FreezePolicy::Auto(a) | FreezePolicy::Share(a) => {
                eat(if matches!(self.config.freeze, FreezePolicy::Auto(_)) {
                    2
                } else {
                    3
                });
                eat(a.window);
                eat(a.threshold.to_bits());
                eat(a.min_step);
                eat(a.max_step);
            }
        }
        eat(self.freeze.frozen_at.unwrap_or(0));
        // Only when not the default, so an `F32` layout stays what it was.
        if self.config.warmup_reduce == WarmupReduce::Bf16 {
            eat(16);
        }
        h
    }

    /// Local verdict: lengths, gradient, binding; fills `scratch` with the
    /// averaged gradient.
    fn prepare(
        &mut self,
        comm: &dyn Communicator,
        params: &[f32],
        extra: Option<(&[f32], f32)>,
    ) -> Result<(), OneBitError> {
        if params.len() != self.len {
            return Err(OneBitError::Length {
                expected: self.len,
                found: params.len(),
            });
        }
        if let Some((g, factor)) = extra {
            // Finiteness is checked on the mean below, in the pass after it.
            self.check_grad_len(g)?;
            if !factor.is_finite() {
                return Err(OneBitError::Config("gradient factor is not finite"));
            }
        }
        let count = self.grad_count + u32::from(extra.is_some());
        if count == 0 {
            return Err(OneBitError::NoGradient);
        }
        if let Some((rank, size)) = self.bound
            && (rank, size) != (comm.rank(), comm.size())
        {
            return Err(OneBitError::StateShape {
                expected: size as u64,
                found: comm.size() as u64,
            });
        }
        let inv = count as f32;
        let n = self.len;
        if self.summed(comm, extra) {
            // The kernel divides the sum by the count itself; `s/k` (k >= 1)
            // is finite exactly where `s` is: only the check here, and not
            // even that when `accumulate` saw every sum finite.
            if self.sum_finite {
                return Ok(());
            }
            return check_products(self.config.finite_check, &self.grad_sum, 1.0);
        }
        if self.direct(comm, extra) {
            // The kernel forms `f·g + 0.0` itself: only the check here, one
            // read of `g` (the products must be finite too).
            let (g, f) = extra.unwrap_or((&[], 1.0));
            return check_products(self.config.finite_check, g, f);
        }
        // Every value is written below: size once, no per-step clear/fill.
        self.scratch.resize(n, 0.0);
        // One pass forms the mean gradient and checks it (a NaN/±Inf in
        // `grad`, or an overflowing product, is found at its index). `g · 1.0`
        // is `g`, so `step_with_grad` keeps its bits.
        let bad = match extra {
            // Nothing accumulated (the usual case): `grad_sum` is all +0.0
            // and `count` is 1, so `(s + f·g) / 1` is `f·g + 0.0` (−0.0
            // becomes +0.0, as in the sum): same bits, one pass.
            Some((g, f)) if self.grad_count == 0 => {
                fill_checked(&mut self.scratch, g.iter().map(|&g| g * f + 0.0))
            }
            Some((g, f)) => fill_checked(
                &mut self.scratch,
                self.grad_sum.iter().zip(g).map(|(s, g)| (s + g * f) / inv),
            ),
            None => fill_checked(&mut self.scratch, self.grad_sum.iter().map(|s| s / inv)),
        };
        if bad && self.config.finite_check == FiniteCheck::On {
            return Err(OneBitError::NonFinite {
                index: self
                    .scratch
                    .iter()
                    .position(|g| !g.is_finite())
                    .unwrap_or(0),
            });
        }
        Ok(())
    }

    /// Whether this step's kernels read the caller's gradient directly
    /// (no mean-gradient copy), nothing accumulated, and either: no 1-bit
    /// group compresses this step and there is one rank (its all-reduce is
    /// the identity); or every group is 1-bit and compresses with
    /// `PreconditionedMomentum`, whose packing pass forms `f·g + 0.0`
    /// itself (the other variants' compressors read the copy).
    fn direct(&self, comm: &dyn Communicator, extra: Option<(&[f32], f32)>) -> bool {
        let t = self.step + 1;
        let compressing = self.stage_of(t) == Stage::Compressed
            && self.groups.iter().any(|g| g.spec.policy.compresses());
        extra.is_some()
            && self.grad_count == 0
            && if compressing {
                matches!(self.config.variant, Variant::PreconditionedMomentum)
                    && self.groups.iter().all(|g| g.spec.policy == Policy::OneBit)
            } else {
                comm.size() == 1
            }
    }

    /// Whether this step's kernels read the accumulated sum itself, each
    /// dividing it by the count in its own pass (no mean-gradient copy):
    /// `step` after `accumulate` on one rank, no 1-bit group compressing.
    /// `(s/k)` in the kernel has the bits of the copy's `s/k`.
    fn summed(&self, comm: &dyn Communicator, extra: Option<(&[f32], f32)>) -> bool {
        let t = self.step + 1;
        let compressing = self.stage_of(t) == Stage::Compressed
            && self.groups.iter().any(|g| g.spec.policy.compresses());
        extra.is_none() && self.grad_count > 0 && comm.size() == 1 && !compressing
    }

    fn step_inner(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        extra: Option<(&[f32], f32)>,
    ) -> Result<StepReport, OneBitError> {
        let before = comm.stats();
        let local = self.prepare(comm, params, extra);
        let direct = self.direct(comm, extra);
        let summed = self.summed(comm, extra);
        header::exchange(
            comm,
            Op::OptimizerStep,
            self.len,
            self.step,
            self.layout(),
            local,
        )?;
        // Agreed: from here on every rank runs the same collectives.
        self.bound = Some((comm.rank(), comm.size()));
        // `grad_sum` is all zeros whenever `grad_count` is 0 (the fast path
        // of `prepare` relies on it; `import_state` refuses a record without).
        // A `summed` step lends it to the kernels and zeroes it after them.
        let sum = if summed {
            let div = self.grad_count as f32;
            Some((core::mem::take(&mut self.grad_sum), div))
        } else {
            None
        };
        if self.grad_count > 0 && !summed {
            self.grad_sum.fill(0.0);
        }
        self.grad_count = 0;
        let t = self.step + 1;
        let stage = self.stage_of(t);
        // The automatic freeze's measure of this warm-up step, if it takes
        // one, is made inside the groups' step passes (`src/fused.rs`): its
        // snapshot is lent to them, sized for the compressing groups.
        let (planned, mut snapshot) = self.plan_measure(t, stage);
        let mut sums = (0.0f64, 0.0f64);
        let mut g = core::mem::take(&mut self.scratch);
        let result = self.run_groups(
            comm,
            params,
            (extra, sum.as_ref().map(|(s, div)| (&s[..], *div))),
            (direct, t, stage),
            &mut g,
            planned.map(|c| (&mut snapshot[..], c, &mut sums)),
        );
        if let Some((mut s, _)) = sum {
            s.fill(0.0);
            self.grad_sum = s;
        }
        self.sum_finite = true;
        self.scratch = g;
        self.freeze.snapshot = snapshot;
        let groups = result?;
        Ok(self.conclude(
            t,
            stage,
            (planned, sums),
            comm.stats().since(&before),
            groups,
        ))
    }

    /// Before step `t`'s group passes: whether the automatic freeze
    /// measures in them ([`FreezeTracker::plan`], `Some(compare)`), and the
    /// snapshot lent to them, sized for the compressing groups.
    fn plan_measure(&mut self, t: u64, stage: Stage) -> (Option<bool>, Vec<f32>) {
        let planned = if stage == Stage::Warmup {
            self.freeze.plan(&self.config.freeze, t)
        } else {
            None
        };
        let mut snapshot = core::mem::take(&mut self.freeze.snapshot);
        if let Some(compare) = planned {
            let len = self.compressing_len();
            if !compare || snapshot.len() != len {
                snapshot.clear();
                snapshot.resize(len, 0.0);
            }
        }
        let planned = planned.map(|c| c && snapshot.len() == self.compressing_len());
        (planned, snapshot)
    }

    /// After step `t`'s group passes all succeeded (the snapshot given
    /// back): count the step, let the freeze decide on the measure
    /// `(planned, sums)`, reset the error buffers on their schedule, report.
    fn conclude(
        &mut self,
        t: u64,
        stage: Stage,
        (planned, sums): (Option<bool>, (f64, f64)),
        bytes: CommStats,
        groups: Vec<GroupTelemetry>,
    ) -> StepReport {
        self.step = t;
        if stage == Stage::Warmup {
            self.freeze.settle(&self.config.freeze, t, planned, sums);
        }
        if stage == Stage::Compressed {
            self.warm_scratch = None;
            self.compressed_steps += 1;
            if let Some(k) = self.config.error_reset_every
                && self.compressed_steps.is_multiple_of(k)
            {
                self.reset_errors();
            }
        }
        StepReport {
            step: t,
            stage,
            bytes,
            groups,
        }
    }

    /// Parameters in the groups that compress after the freeze (the
    /// automatic freeze's snapshot length).
    fn compressing_len(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| g.spec.policy.compresses())
            .map(|g| g.spec.len)
            .sum()
    }

    /// The per-group part of [`Self::step_inner`]: each group's exchange
    /// and update in order, `g` the mean-gradient copy (unless `direct`, or
    /// `sum`: the accumulated sum and its count, see [`Self::summed`]);
    /// `measure`: the freeze snapshot of the compressing groups back to
    /// back, whether to compare with it, and the running sums.
    #[allow(
        clippy::type_complexity,
        reason = "internal: the step's context tuple and the lent snapshot"
    )]
    fn run_groups(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        (extra, sum): (Option<(&[f32], f32)>, Option<(&[f32], f32)>),
        (direct, t, stage): (bool, u64, Stage),
        g: &mut [f32],
        mut measure: Option<Lent<'_>>,
    ) -> Result<Vec<GroupTelemetry>, OneBitError> {
        let mut at_snapshot = 0;
        let mut groups = Vec::with_capacity(self.groups.len());
        for gi in 0..self.groups.len() {
            let policy = self.groups[gi].spec.policy;
            let compressed = stage == Stage::Compressed && policy.compresses();
            let range = self.groups[gi].range.clone();
            let at = comm.stats();
            let mut scales = (0.0, 0.0);
            if let (true, Policy::Graded(grade)) = (compressed, policy) {
                scales = self.graded_group(comm, gi, &g[range.clone()], grade)?;
                self.update(gi, t, &mut params[range])?;
            } else if compressed {
                let (grad, factor) = match extra {
                    Some((grad, f)) if direct => (&grad[range.clone()], Some(f)),
                    _ => (&g[range.clone()], None),
                };
                scales = self.one_bit_group(comm, gi, grad, factor)?;
                self.finish_one_bit(gi, t, &mut params[range])?;
            } else {
                let warmup = stage == Stage::Warmup;
                let source = match (extra, sum) {
                    (Some((grad, f)), _) if direct => Grad::Direct(&grad[range.clone()], f),
                    (_, Some((s, div))) => Grad::Sum(&s[range.clone()], div),
                    _ => Grad::Mean(&mut g[range.clone()]),
                };
                let lent = lend_snapshot(&mut measure, &mut at_snapshot, policy, range.len());
                self.full_group(comm, gi, t, source, &mut params[range], warmup, lent)?;
            }
            let watch = self.config.telemetry;
            groups.push(GroupTelemetry {
                policy,
                compressed,
                bytes: comm.stats().since(&at),
                worker_scale: scales.0,
                server_scale: scales.1,
                error_norms: watch.then(|| self.group_error_norms(gi)),
                sign_flips: if watch { self.sign_flips(gi) } else { None },
            });
        }
        Ok(groups)
    }

    /// Mean all-reduce of the gradient, then one fused dense Adam(W) pass
    /// (`src/fused.rs`): `m`, `v`, the zero mask during warm-up where any
    /// of it is still set, the parameters, and, when `measure` is
    /// lent, the automatic freeze's measure and snapshot of this group. A
    /// [`Grad::Direct`] gradient (one rank) skips the all-reduce, the
    /// identity there, and is scaled in the kernel's pass.
    #[allow(
        clippy::too_many_arguments,
        reason = "internal: the group, its gradient source and the pass's options"
    )]
    fn full_group(
        &mut self,
        comm: &mut dyn Communicator,
        gi: usize,
        t: u64,
        g: Grad<'_>,
        x: &mut [f32],
        warmup: bool,
        measure: Option<Lent<'_>>,
    ) -> Result<(), OneBitError> {
        let (g, scale) = match g {
            // One rank reduces nothing (its f32 all-reduce is the identity).
            Grad::Mean(g)
                if warmup && self.config.warmup_reduce == WarmupReduce::Bf16 && comm.size() > 1 =>
            {
                let scratch = self.warm_scratch.get_or_insert_with(Default::default);
                graded::mean_without_feedback(comm, g, Grade::Bf16, scratch)?;
                (&*g, Scale::Div(1.0))
            }
            Grad::Mean(g) => {
                comm.all_reduce_sum(g)?;
                (&*g, Scale::Div(comm.size() as f32))
            }
            Grad::Direct(g, f) => (g, Scale::Pre(f)),
            Grad::Sum(s, div) => (s, Scale::Div(div)),
            Grad::Reduced(g) => (g, Scale::Div(comm.size() as f32)),
        };
        self.groups[gi].v_updates += 1;
        let h = self.hyper(gi, t);
        // The measure's `v̂ = v/bc2`; the share rule measures the raw `v`.
        let raw = self.config.freeze.rule().is_some_and(|(_, raw)| raw);
        let bc2 = if raw {
            1.0
        } else {
            h.bias.map_or(1.0, |(_, b)| b)
        };
        let group = &mut self.groups[gi];
        let range = group.range.clone();
        fused::step(
            &h,
            Kernel::detect(),
            x,
            &mut self.m[range.clone()],
            &mut self.v[range.clone()],
            g,
            scale,
            warmup.then_some((&mut self.zero[range], &mut group.zero_left[..])),
            measure.map(|(snapshot, compare, sums)| Measure {
                snapshot,
                compare,
                bc2,
                sums,
            }),
        )
    }

    /// 1-bit stage of one group: compressed momentum (or the seed variant's
    /// compressed gradient) over the group's **live** coordinates only.
    ///
    /// Coordinates whose mean gradient was exactly 0 at every warm-up step
    /// are left out of the compressed buffer (the mask is the same on every
    /// rank, computed from the all-reduced warm-up gradients) and keep `m = 0`.
    /// Leaving them in would not do: 1 bit cannot say 0, so each would get
    /// `±α` every step, and their error-feedback residue (`|e| ≈ α`) would
    /// inflate the RMS scale of the whole buffer.
    ///
    /// `factor = Some(f)`: `g` is the caller's gradient, not the mean copy,
    /// and the packing pass forms the copy's `f·g + 0.0` itself (only
    /// `PreconditionedMomentum`, see [`Self::direct`]).
    fn one_bit_group(
        &mut self,
        comm: &mut dyn Communicator,
        gi: usize,
        g: &[f32],
        factor: Option<f32>,
    ) -> Result<(f32, f32), OneBitError> {
        let b1 = self.config.beta1;
        if factor.is_some() && !matches!(self.config.variant, Variant::PreconditionedMomentum) {
            return Err(OneBitError::Config(
                "internal: a direct gradient reached a variant that reads the mean copy",
            ));
        }
        let range = self.groups[gi].range.clone();
        let frozen = match self.groups[gi].frozen.take() {
            Some(f) if f.v_updates == self.groups[gi].v_updates => f,
            _ => self.freeze(gi),
        };
        let runs = &frozen.live;
        let mut packed = core::mem::take(&mut self.scratch_packed);
        // Every value is written below: resize only (no per-step memset).
        packed.resize(frozen.count, 0.0);
        let m = &mut self.m[range];
        let result = match self.config.variant {
            Variant::Momentum if frozen.count == m.len() => {
                // Every coordinate live (the usual dense case): the momentum
                // `β₁m + (1−β₁)g` is formed inside the worker compressor's one
                // pass; the reduced result stays as server signs until
                // `finish_one_bit` decodes it into `m` in the update's pass
                // (the same bits as the gather path below).
                let state = &mut self.groups[gi].allreduce;
                allreduce::reduce_counted_signs(comm, m, Some((b1, g)), state)
            }
            Variant::Momentum => {
                for_runs(runs, &mut packed, |r, out| {
                    for ((o, &m), &g) in out.iter_mut().zip(&m[r.clone()]).zip(&g[r]) {
                        *o = b1 * m + (1.0 - b1) * g;
                    }
                });
                let state = &mut self.groups[gi].allreduce;
                let r = allreduce::reduce_counted(comm, &mut packed, None, state);
                r.inspect(|_| {
                    for_runs(runs, &mut packed, |r, out| m[r].copy_from_slice(out));
                })
            }
            Variant::PreconditionedMomentum => {
                // `÷` and `×` are exact, so these contiguous (vectorised)
                // loops give the bits of the per-coordinate formula.
                let (d, cap) = (&frozen.denom, frozen.cap);
                for_runs_at(runs, &mut packed, |r, k, out| {
                    let d = &d[k..k + out.len()];
                    let (m, g) = (&m[r.clone()], &g[r]);
                    match factor {
                        // The mean copy's `f·g + 0.0`, formed here: same bits.
                        Some(f) => {
                            for (((o, &m), &g), &d) in out.iter_mut().zip(m).zip(g).zip(d) {
                                *o = ((b1 * m + (1.0 - b1) * (g * f + 0.0)) / d).clamp(-cap, cap);
                            }
                        }
                        None => {
                            for (((o, &m), &g), &d) in out.iter_mut().zip(m).zip(g).zip(d) {
                                *o = ((b1 * m + (1.0 - b1) * g) / d).clamp(-cap, cap);
                            }
                        }
                    }
                });
                // `m = u·d` is formed by `finish_one_bit`, in the update's
                // pass, decoding `u` from the server signs as it goes.
                let state = &mut self.groups[gi].allreduce;
                allreduce::reduce_counted_signs(comm, &packed, None, state)
            }
            Variant::DecayedGradient { beta, scale } => {
                for_runs(runs, &mut packed, |r, out| out.copy_from_slice(&g[r]));
                let group = &mut self.groups[gi];
                if group.seed.is_none() {
                    let c = Compressor::with_config(
                        packed.len(),
                        CompressorConfig::default()
                            .with_feedback(ErrorFeedback::Decayed { beta })
                            .with_scale(scale)
                            .with_chunk(None),
                    )
                    .map_err(|_| OneBitError::Config("variant beta"))?;
                    group.seed = Some(c);
                }
                match group.seed.as_mut() {
                    Some(c) if c.len() == packed.len() => gather_mean(
                        comm,
                        c,
                        &mut packed,
                        &mut self.scratch_bits,
                        &mut self.scratch_gather,
                    )
                    .map(|alpha| {
                        for_runs(runs, &mut packed, |r, v| {
                            for (m, &v) in m[r].iter_mut().zip(&*v) {
                                *m = b1 * *m + (1.0 - b1) * v;
                            }
                        });
                        (alpha, 0.0)
                    }),
                    _ => Err(OneBitError::StateShape {
                        expected: group.seed.as_ref().map_or(0, Compressor::len) as u64,
                        found: packed.len() as u64,
                    }),
                }
            }
        };
        self.groups[gi].frozen = Some(frozen);
        self.scratch_packed = packed;
        result
    }

    /// Compressed stage of a [`Policy::Graded`] group: the variant's buffer
    /// over the live coordinates (`β₁m + (1−β₁)ḡ`, or for
    /// `PreconditionedMomentum` that divided by the frozen denominator and
    /// clamped, as [`Self::one_bit_group`] forms it), the graded
    /// all-reduce, then `m` from the result (`u·d` for the preconditioned
    /// variant; dead coordinates keep `m = 0`). `g` is the mean-gradient copy.
    fn graded_group(
        &mut self,
        comm: &mut dyn Communicator,
        gi: usize,
        g: &[f32],
        grade: Grade,
    ) -> Result<(f32, f32), OneBitError> {
        let b1 = self.config.beta1;
        let range = self.groups[gi].range.clone();
        let frozen = match self.groups[gi].frozen.take() {
            Some(f) if f.v_updates == self.groups[gi].v_updates => f,
            _ => self.freeze(gi),
        };
        let mut packed = core::mem::take(&mut self.scratch_packed);
        packed.resize(frozen.count, 0.0);
        let m = &mut self.m[range];
        let pre = matches!(self.config.variant, Variant::PreconditionedMomentum);
        let (d, cap) = (&frozen.denom, frozen.cap);
        for_runs_at(&frozen.live, &mut packed, |r, k, out| {
            for (i, (o, (&m, &g))) in out
                .iter_mut()
                .zip(m[r.clone()].iter().zip(&g[r]))
                .enumerate()
            {
                let mom = b1 * m + (1.0 - b1) * g;
                *o = if pre {
                    (mom / d[k + i]).clamp(-cap, cap)
                } else {
                    mom
                };
            }
        });
        let state = &mut self.groups[gi].graded;
        let result = graded::reduce_counted(comm, &mut packed, grade, state).inspect(|_| {
            for_runs_at(&frozen.live, &mut packed, |r, k, out| {
                for (i, (m, &u)) in m[r].iter_mut().zip(out.iter()).enumerate() {
                    *m = if pre { u * d[k + i] } else { u };
                }
            });
        });
        self.groups[gi].frozen = Some(frozen);
        self.scratch_packed = packed;
        result
    }

    /// Build group `gi`'s [`Frozen`] values from the current `v` and zero
    /// mask (both fixed from here until the next full-precision step).
    fn freeze(&self, gi: usize) -> Frozen {
        let group = &self.groups[gi];
        let range = group.range.clone();
        let zero = &self.zero[range.clone()];
        let mut live: Vec<Range<usize>> = Vec::new();
        for (i, _) in zero.iter().enumerate().filter(|(_, z)| !**z) {
            match live.last_mut() {
                Some(run) if run.end == i => run.end += 1,
                _ => live.push(i..i + 1),
            }
        }
        let count = live.iter().map(ExactSizeIterator::len).sum();
        let mut denom = Vec::new();
        let mut cap = f32::INFINITY;
        if matches!(self.config.variant, Variant::PreconditionedMomentum) {
            let c = self.config;
            let bc2 = if c.bias_correction {
                (1.0 - Float::powi(f64::from(c.beta2), clamp_i32(group.v_updates))) as f32
            } else {
                1.0
            };
            cap = preconditioned_cap(c.beta1, c.beta2, bc2);
            let v = &self.v[range];
            // The update kernel's denominator, `√(v/bc2) + ε`.
            for r in &live {
                denom.extend(v[r.clone()].iter().map(|&v| Float::sqrt(v / bc2) + c.eps));
            }
        }
        Frozen {
            v_updates: group.v_updates,
            live,
            count,
            denom,
            cap,
        }
    }

    /// The dense Adam(W) hyper-parameters of group `gi` at step `t` (bias
    /// corrections from `t` and the group's `v` updates so far).
    fn hyper(&self, gi: usize, t: u64) -> AdamW {
        let c = self.config;
        let group = &self.groups[gi];
        let bias = c.bias_correction.then(|| {
            (
                (1.0 - Float::powi(f64::from(c.beta1), clamp_i32(t))) as f32,
                (1.0 - Float::powi(f64::from(c.beta2), clamp_i32(group.v_updates))) as f32,
            )
        });
        AdamW {
            lr: c.lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: group.spec.weight_decay.unwrap_or(c.weight_decay),
            bias,
        }
    }

    /// The update after [`Self::one_bit_group`], decoding the reduced
    /// result the all-reduce left as server signs in the update's own pass:
    /// `PreconditionedMomentum`: the fused `m = u·d` and update (the frozen
    /// denominators are the update's own); `Momentum` with every
    /// coordinate live: `m` decoded block by block, each block updated
    /// while in cache; else (`m` already holds the result) [`Self::update`].
    fn finish_one_bit(&mut self, gi: usize, t: u64, x: &mut [f32]) -> Result<(), OneBitError> {
        let h = self.hyper(gi, t);
        let group = &self.groups[gi];
        let range = group.range.clone();
        let p = group.allreduce.shape.map_or(1, |s| s.ranks);
        match (&self.config.variant, &group.frozen) {
            (Variant::PreconditionedMomentum, Some(f)) => h.update_preconditioned(
                Kernel::detect(),
                x,
                &mut self.m[range.clone()],
                &self.v[range],
                PackedRuns {
                    live: &f.live,
                    u: PackedSigns {
                        signs: allreduce::server_signs(&group.allreduce, f.count, p)?,
                        len: f.count,
                    },
                    d: &f.denom,
                },
            ),
            (Variant::Momentum, Some(f)) if f.count == range.len() && f.count > 0 => {
                let signs = allreduce::server_signs(&group.allreduce, f.count, p)?;
                h.update_decoded(
                    Kernel::detect(),
                    x,
                    &mut self.m[range.clone()],
                    &self.v[range],
                    signs,
                )
            }
            _ => self.update(gi, t, x),
        }
    }

    /// `x ← x − lr·(m̂/(√v̂+ε) + λ·x)` for one group at step `t` (`v` frozen).
    fn update(&mut self, gi: usize, t: u64, x: &mut [f32]) -> Result<(), OneBitError> {
        let range = self.groups[gi].range.clone();
        self.hyper(gi, t)
            .update(Kernel::detect(), x, &self.m[range.clone()], &self.v[range])
    }
}

/// The automatic freeze's measure lent to a step's group passes: the
/// snapshot of the compressing groups back to back, whether to compare
/// with it, and the running sums ([`OneBitAdam::plan_measure`]).
pub(crate) type Lent<'a> = (&'a mut [f32], bool, &'a mut (f64, f64));

/// The part of the lent measure for the next group (`policy`, `len`
/// parameters) in group order: its slice of the snapshot from `*at` on
/// (then `*at` moves past it) if the group compresses, else `None` (only
/// compressing groups are measured). The blocking and the split step's
/// group loops both take their parts here.
pub(crate) fn lend_snapshot<'a>(
    measure: &'a mut Option<Lent<'_>>,
    at: &mut usize,
    policy: Policy,
    len: usize,
) -> Option<Lent<'a>> {
    match measure.as_mut() {
        Some((snap, compare, sums)) if policy.compresses() => {
            let part = &mut snap[*at..*at + len];
            *at += len;
            Some((part, *compare, &mut **sums))
        }
        _ => None,
    }
}

/// Where a full-precision group's gradient comes from.
enum Grad<'a> {
    /// The mean-gradient copy (all-reduced in place, then divided by P).
    Mean(&'a mut [f32]),
    /// The caller's gradient and factor, read by the kernel (one rank).
    Direct(&'a [f32], f32),
    /// The accumulated sum and the count it is divided by in the kernel
    /// (one rank, [`OneBitAdam::summed`]).
    Sum(&'a [f32], f32),
    /// The mean-gradient copy already all-reduced (by the split step's
    /// non-blocking request): divided by P in the kernel, as `Mean`.
    Reduced(&'a [f32]),
}

/// The largest `|m/(√(v/bc₂)+ε)|` full-precision Adam can produce with
/// decays `β₁² < β₂`: with a zero start, `m_t = Σ_k a_k g_{t−k}` and
/// `v_t = Σ_k b_k g²_{t−k}` (`a_k = (1−β₁)β₁^k`, `b_k = (1−β₂)β₂^k`), so by
/// Cauchy–Schwarz `|m_t| ≤ √(Σ a_k²/b_k)·√v_t`, i.e.
/// `|m_t|/√v_t ≤ B = (1−β₁) / (√(1−β₂)·√(1−β₁²/β₂))` (≈ 7.27 at the
/// defaults; reached by a gradient growing `β₂/β₁`-fold per step), and the
/// preconditioned value is at most `B·√bc₂`.
///
/// After the freeze `v` no longer follows the gradient: a coordinate whose
/// gradient was ~0 during warm-up (a ReLU unit that rarely fired, `√v̂`
/// down at ε) and grows later gets `u = m/ε`, unbounded. Clamping `u` to
/// `cap` is the same as raising the frozen `v` to the floor `(m/B)²` that
/// the momentum itself proves Adam's `v` would have reached — so no
/// coordinate asks for a larger step than Adam could take (Adafactor's
/// update clipping, for the same cause: a stale second moment). Without it
/// the RMS scale of the compressed buffer follows those outliers, every
/// coordinate steps `±lr·α`, and the error feedback grows without bound
/// (DLRM at the CLI defaults: `α` from ≈ 5 to 140 in 190 1-bit steps, then
/// a NaN). `β₁² ≥ β₂` has no bound: `+∞` (no clamp).
fn preconditioned_cap(beta1: f32, beta2: f32, bc2: f32) -> f32 {
    let (b1, b2) = (f64::from(beta1), f64::from(beta2));
    let r = b1 * b1 / b2;
    if r >= 1.0 {
        return f32::INFINITY;
    }
    ((1.0 - b1) / Float::sqrt((1.0 - b2) * (1.0 - r)) * Float::sqrt(f64::from(bc2))) as f32
}

/// `f(run, packed values of that run)` for every run of live coordinates,
/// the runs' values back to back in `packed`.
fn for_runs(
    runs: &[Range<usize>],
    packed: &mut [f32],
    mut f: impl FnMut(Range<usize>, &mut [f32]),
) {
    for_runs_at(runs, packed, |r, _, out| f(r, out));
}

/// [`for_runs`] that also passes where the run starts in `packed`.
fn for_runs_at(
    runs: &[Range<usize>],
    packed: &mut [f32],
    mut f: impl FnMut(Range<usize>, usize, &mut [f32]),
) {
    let mut k = 0;
    for r in runs {
        let n = r.len();
        f(r.clone(), k, &mut packed[k..k + n]);
        k += n;
    }
}

fn clamp_i32(t: u64) -> i32 {
    i32::try_from(t).unwrap_or(i32::MAX)
}

/// Seed variant: compress `g` with decayed error feedback, all-gather
/// `[signs | scale]`, and replace `g` by the rank-order mean of the
/// decoded gradients `Σ_i (α_i/P)·σ_i`; returns this rank's `α`.
fn gather_mean(
    comm: &mut dyn Communicator,
    c: &mut Compressor,
    g: &mut [f32],
    send: &mut Vec<u8>,
    recv: &mut Vec<u8>,
) -> Result<f32, OneBitError> {
    let p = comm.size();
    let bytes = onebit_codec::packed_len(g.len());
    let unit = bytes + 4;
    send.clear();
    send.resize(unit, 0);
    // An overflow is sent as a NaN scale so every rank fails together.
    let result = c.compress_into(g, &mut send[..bytes]);
    let alpha = *result.as_ref().unwrap_or(&f32::NAN);
    send[bytes..].copy_from_slice(&alpha.to_le_bytes());
    recv.clear();
    recv.resize(p * unit, 0);
    comm.all_gather(send, recv)?;
    if let Err(onebit_codec::CodecError::NonFinite { index }) = result {
        return Err(OneBitError::NonFinite { index });
    }
    let pf = p as f32;
    let mut scales = Vec::with_capacity(p);
    for (i, piece) in recv.chunks_exact(unit).enumerate() {
        let mut w = [0u8; 4];
        w.copy_from_slice(&piece[bytes..]);
        let a = f32::from_le_bytes(w);
        if !a.is_finite() {
            return Err(OneBitError::RemoteInput { rank: i });
        }
        scales.push(a / pf);
    }
    g.fill(0.0);
    for (piece, &a) in recv.chunks_exact(unit).zip(&scales) {
        onebit_codec::unpack_add(&piece[..bytes], a, g)
            .map_err(|_| OneBitError::Config("internal buffer size"))?;
    }
    Ok(alpha)
}

/// Packed signs (`numpy.packbits(~(m < 0))`) of `n` coordinates that are all
/// `0`: every bit 1, the padding bits of the last byte 0.
fn all_non_negative(n: usize) -> Vec<u8> {
    let mut signs = vec![0xFF; n.div_ceil(8)];
    if let (Some(last), 1..) = (signs.last_mut(), n % 8) {
        *last = 0xFF << (8 - n % 8);
    }
    signs
}

#[cfg(test)]
mod tests {
    use super::preconditioned_cap;

    /// The bound against f64 Adam moments on gradient sequences that push
    /// `|m/√v|` up (geometrically growing gradients, among them the
    /// `β₂/β₁`-fold growth that attains it, and sign noise): never above
    /// it, and within 1 % of it at the worst case (the bound is tight).
    #[test]
    fn the_cap_bounds_adam_and_is_nearly_reached() {
        let (b1, b2) = (0.9f64, 0.999f64);
        let cap = f64::from(preconditioned_cap(0.9, 0.999, 1.0));
        let mut highest = 0.0f64;
        for growth in [1.0f64, 1.01, 1.03, b2 / b1, 1.2, 2.0] {
            for noisy in [false, true] {
                let (mut m, mut v, mut g) = (0.0f64, 0.0f64, 1e-3f64);
                for t in 0..3000u64 {
                    g *= growth;
                    if g > 1e30 {
                        break;
                    }
                    let s = if noisy && t.wrapping_mul(0x9E37_79B9) % 7 == 3 {
                        -1.0
                    } else {
                        1.0
                    };
                    m = b1 * m + (1.0 - b1) * s * g;
                    v = b2 * v + (1.0 - b2) * g * g;
                    let r = m.abs() / v.sqrt();
                    assert!(r <= cap * (1.0 + 1e-6), "growth {growth}: {r} > {cap}");
                    highest = highest.max(r);
                }
            }
        }
        assert!(highest > 0.99 * cap, "highest {highest} vs {cap}");
        // With bias correction the cap scales by √bc₂; β₁² ≥ β₂: no bound.
        let c = preconditioned_cap(0.9, 0.999, 0.25);
        assert!((f64::from(c) - cap * 0.5).abs() < 1e-4 * cap);
        assert_eq!(preconditioned_cap(0.99, 0.9, 1.0), f32::INFINITY);
        assert!((cap - 7.2703).abs() < 1e-3, "{cap}");
    }
}
