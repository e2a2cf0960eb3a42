//! 0/1 Adam (Lu et al., "Maximizing Communication Efficiency for
//! Large-scale Training via 0/1 Adam", ICLR 2023, arXiv:2202.06009;
//! DeepSpeed `deepspeed/runtime/fp16/onebit/zoadam.py`), over this crate's
//! [`crate::compressed_allreduce`] and any [`Communicator`].
//!
//! 1-bit Adam runs a full-precision warm-up until `v` is frozen, then
//! compresses every step. 0/1 Adam removes both costs: `v` is refreshed only
//! on an exponentially thinning set of steps `T_v` (with a full-precision
//! gradient), the other steps carry a 1-bit gradient, and once `v` is frozen
//! the ranks take **local steps** and exchange a 1-bit *accumulated* update
//! only on the steps of a second, thinning set `T_u`.
//!
//! Per step `t` (1-based), `P` ranks, `g` this rank's (mean accumulated)
//! gradient, `d = √v + ε`, `λ` the group's weight decay, `η` the learning
//! rate of this step:
//!
//! * **Variance step** (`t ≤ var_freeze_step` and `t mod I_v = 0`):
//!   `ḡ = Σ_r g_r / P` (full-precision all-reduce: `f32` by default, or
//!   bfloat16 at half the bytes, [`ZeroOneConfig::variance_reduce`]),
//!   `v ← β₂v + (1−β₂)ḡ²`, `m ← β₁m + (1−β₁)ḡ`, `x ← x − η(m/d + λx)`.
//!   A coordinate whose `ḡ` was exactly 0 at every variance step is *masked*
//!   (DeepSpeed's `exp_avg_mask`, found automatically here): the 1-bit
//!   results below are 0 there, since one bit cannot say 0 and `d = ε`
//!   would turn `±α` into a step of `α/ε`.
//! * **1-bit gradient step** (`t ≤ var_freeze_step`, `t mod I_v ≠ 0`):
//!   `ĝ = compressed_allreduce(g)` (worker and server error feedback),
//!   masked; `m ← β₁m + (1−β₁)ĝ`, `x ← x − η(m/d + λx)`; `v` unchanged.
//! * **Local step** (`t > var_freeze_step`, `t mod I_u ≠ 0`), no
//!   communication: `m ← β₁m + (1−β₁)g`, `x ← x − η(m/d + λx)`,
//!   `S ← S + η` (`S`: DeepSpeed's `lrs`).
//! * **Synchronisation step** (`t > var_freeze_step`, `t mod I_u = 0`): the
//!   local step, then with `a` the parameters at the last synchronisation
//!   (the *anchor*; the parameters at the end of step `var_freeze_step`
//!   for the first one), `u = x − a` (the update since, DeepSpeed's
//!   `momentum_accumulator`), `û = compressed_allreduce(u ⊙ d)`, masked
//!   (the momentum-space sum `−Σ η_k m_k`, averaged over ranks),
//!   `m ← −û/S`, `x ← a + û/d`, `a ← x`, `S ← 0`.
//!
//! Schedules (DeepSpeed's counters): `I_v` starts at 1 and doubles after
//! every `var_update_scaler` variance steps (so `T_v` = the first
//! `κ` steps, then `κ` more at spacing 2, `κ` at 4, …); `I_u` starts at 1
//! and doubles (capped at `local_step_clipper`, the paper's `H`) after every
//! `local_step_scaler` steps past the freeze. At the end of step
//! `var_freeze_step` the error buffers are zeroed: they held gradient
//! residue, they will hold update residue.
//!
//! The paper ties `T_u` to the learning-rate schedule; DeepSpeed (and this
//! module) count steps, `local_step_scaler` standing for "steps per halving
//! of the learning rate". Differences from DeepSpeed, on purpose:
//! * DeepSpeed's first `step` call only allocates buffers (it runs a dummy
//!   all-reduce and counts a step); here step 1 is a real step.
//! * With one rank DeepSpeed skips the 1-bit all-reduce and leaves `m`
//!   unchanged on 1-bit gradient steps; here the one-rank all-reduce still
//!   quantises (as [`crate::compressed_allreduce`] does), so `P = 1` runs
//!   the same algorithm as `P > 1`.
//! * The full-precision mean gradient of a variance step is all-reduced by
//!   the optimizer, not by the training engine's backward hook, in `f32`
//!   by default; [`WarmupReduce::Bf16`] in
//!   [`ZeroOneConfig::variance_reduce`] rounds each rank's gradient and the
//!   mean to bfloat16 (sums in `f32`, half the bytes), where DeepSpeed
//!   reduces in the model's precision (fp16 in its published runs).
//! * DeepSpeed accumulates `u` in a buffer of its own and returns to the
//!   synchronised point as `x − u`, which is off by a few ulps that differ
//!   from rank to rank: its ranks drift apart (the reference test of this
//!   module showed it when this code did the same). Here `u = x − a`
//!   with the anchor `a`, the same memory as DeepSpeed's buffer, and after
//!   every synchronisation all ranks hold the same bits.
//! * [`Policy::FullPrecision`] groups run plain Adam (no bias correction)
//!   with a full-precision all-reduce every step, as 1-bit Adam's do.
//!
//! **Preconditioned variant** ([`ZeroOneConfig::preconditioned`], off by
//! default; a deviation from the paper, made for the same reason as 1-bit
//! Adam's `Variant::PreconditionedMomentum` and its clamp,
//! docs/ONEBIT_ADAM.md). One bit gives every coordinate the buffer's RMS
//! magnitude `α`; the paper's stages then divide by `d`, and a coordinate
//! whose `√v` stayed near ε (a ReLU unit that rarely fired before `v`
//! was last refreshed) steps by `ηα/ε`: the CLI's DeepFM tower diverged
//! within 120 steps after the freeze. The variant compresses quantities
//! already divided by `d` and clamps them to bounds full-precision Adam
//! itself obeys (`G = 1/√(1−β₂)`, `B = (1−β₁)/√((1−β₂)(1−β₁²/β₂))`, see
//! [`preconditioned_caps`]), so each coordinate's step stays Adam-sized:
//! * 1-bit gradient step: `p̂ = compressed_allreduce(clamp(g/d, ±G))`,
//!   `ĝ = p̂·d` (masked), `m ← β₁m + (1−β₁)ĝ`,
//!   `x ← x − η(clamp(m/d, ±B) + λx)`;
//! * local step: `x ← x − η(clamp(m/d, ±B) + λx)`;
//! * synchronisation: `û = compressed_allreduce(x − a)` (masked; the
//!   parameter-space update, not `u ⊙ d`), `m ← −û·d/S`, `x ← a + û`.
//!
//! Variance steps and full-precision groups are unchanged. Clamping `g/d`
//! to `G` is raising `v` to `(1−β₂)g²`, the least value it has once `g` is
//! in it; clamping `m/d` to `B` raises it to the floor `(m/B)²` Adam's own
//! `v` would have reached.
//!
//! Every step that communicates starts with the crate's header exchange
//! (step, length, layout, input verdict), so a NaN gradient or a
//! disagreement fails on every rank before any state changes. A local step
//! (with no full-precision group) sends nothing at all: a rank whose input
//! is refused then fails alone, with nothing changed, and a rank that skips
//! the step is caught by the step counter in the next synchronisation's
//! header.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use comm_traits::{CommStats, Communicator};
use num_traits::Float;

use onebit_codec::Grade;

use crate::OneBitError;
use crate::allreduce::{self, AllReduceState};
use crate::graded;
use crate::header::{self, Op};
use crate::optimizer::GroupSpec;
use crate::policy::{Policy, WarmupReduce};

/// Hyper-parameters of 0/1 Adam; `Default` holds DeepSpeed's
/// `ZeroOneAdam` values. `#[non_exhaustive]`: build it from [`Default`]
/// with the `with_*` setters.
///
/// ```
/// use onebit_adam::ZeroOneConfig;
///
/// let c = ZeroOneConfig::default().with_var_freeze_step(400).with_local_step_scaler(100);
/// assert_eq!((c.var_update_scaler, c.local_step_clipper), (16, 16));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ZeroOneConfig {
    /// Learning rate `η` (must be > 0: a synchronisation divides by the sum
    /// of the learning rates since the last one). Default `1e-3`;
    /// [`ZeroOneAdam::set_lr`] changes it between steps (a schedule).
    pub lr: f32,
    /// First-moment decay β₁. Default `0.9`.
    pub beta1: f32,
    /// Second-moment decay β₂. Default `0.999`.
    pub beta2: f32,
    /// Denominator guard ε (added to `√v`). Default `1e-8`.
    pub eps: f32,
    /// Weight decay λ, added to the update as `λx` (DeepSpeed's
    /// `weight_decay`; groups may override it). Default `0.0`.
    pub weight_decay: f32,
    /// The last step that may update `v` (the paper's `max T_v`; usually
    /// the end of the learning-rate warm-up); from the next step on `v` is
    /// frozen and the local steps begin. Must be ≥ 1. Default `100_000`.
    pub var_freeze_step: u64,
    /// `κ`: variance steps per doubling of the variance interval. Must be
    /// ≥ 1. Default `16`.
    pub var_update_scaler: u64,
    /// Steps after the freeze per doubling of the local-step interval
    /// (DeepSpeed's stand-in for the learning-rate policy). Must be ≥ 1.
    /// Default `32_678` (DeepSpeed's value, sic).
    pub local_step_scaler: u64,
    /// `H`: the largest local-step interval (steps between
    /// synchronisations). Must be ≥ 1. Default `16`.
    pub local_step_clipper: u64,
    /// The preconditioned, clamped variant of the 1-bit stages (module
    /// docs, "Preconditioned variant"; not in the paper): compress `g/d`
    /// and the parameter-space update instead of `g` and `u ⊙ d`, and clamp
    /// to Adam's own bounds. Default `false` (the paper's 0/1 Adam).
    pub preconditioned: bool,
    /// How a variance step all-reduces the gradient (every group's, the
    /// full-precision groups' too on that step, as 1-bit Adam's
    /// [`crate::Config::warmup_reduce`] covers every group during its
    /// warm-up; on the other steps those groups reduce in `f32`):
    /// [`WarmupReduce::F32`] (an `f32` sum, then `/P`) or
    /// [`WarmupReduce::Bf16`] (each rank's gradient rounded to bfloat16,
    /// summed in `f32` in rank order, `/P`, rounded again: half the bytes,
    /// no error feedback, so nothing of it enters the state; see its docs).
    /// One rank skips the reduce either way. Default
    /// [`WarmupReduce::F32`], the default of 1-bit Adam's
    /// `warmup_reduce`, so the two optimizers built from their defaults
    /// reduce their full-precision steps alike (and this one keeps the
    /// bits it had before the field existed).
    #[cfg_attr(feature = "serde", serde(default))]
    pub variance_reduce: WarmupReduce,
}

// onebit-codec's macro, one copy per dependency chain.
onebit_codec::with_setters!(ZeroOneConfig {
    with_lr => lr: f32,
    with_beta1 => beta1: f32,
    with_beta2 => beta2: f32,
    with_eps => eps: f32,
    with_weight_decay => weight_decay: f32,
    with_var_freeze_step => var_freeze_step: u64,
    with_var_update_scaler => var_update_scaler: u64,
    with_local_step_scaler => local_step_scaler: u64,
    with_local_step_clipper => local_step_clipper: u64,
    with_preconditioned => preconditioned: bool,
    with_variance_reduce => variance_reduce: WarmupReduce,
});

impl Default for ZeroOneConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            var_freeze_step: 100_000,
            var_update_scaler: 16,
            local_step_scaler: 32_678,
            local_step_clipper: 16,
            preconditioned: false,
            variance_reduce: WarmupReduce::F32,
        }
    }
}

fn check_lr(lr: f32) -> Result<(), OneBitError> {
    if lr.is_finite() && lr > 0.0 {
        Ok(())
    } else {
        Err(OneBitError::Config("lr must be finite and > 0"))
    }
}

impl ZeroOneConfig {
    fn validate(&self) -> Result<(), OneBitError> {
        let unit = |x: f32| (0.0..1.0).contains(&x);
        check_lr(self.lr)?;
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
        if self.var_freeze_step == 0 {
            return Err(OneBitError::Config("var_freeze_step must be >= 1"));
        }
        if self.var_update_scaler == 0 {
            return Err(OneBitError::Config("var_update_scaler must be >= 1"));
        }
        if self.local_step_scaler == 0 {
            return Err(OneBitError::Config("local_step_scaler must be >= 1"));
        }
        if self.local_step_clipper == 0 {
            return Err(OneBitError::Config("local_step_clipper must be >= 1"));
        }
        Ok(())
    }
}

/// The clamps of the preconditioned variant: `(G, B)`, `G = 1/√(1−β₂)`
/// the largest `|g|/√v` once `g` is in `v` (`v ≥ (1−β₂)g²`), `B =
/// (1−β₁)/√((1−β₂)(1−β₁²/β₂))` the largest `|m/√v|` full-precision Adam can
/// produce from a zero start (Cauchy–Schwarz; the bound 1-bit Adam's
/// `Variant::PreconditionedMomentum` clamps to, `docs/ONEBIT_ADAM.md`);
/// `+∞` where no bound exists (`β₁² ≥ β₂`).
pub(crate) fn preconditioned_caps(c: &ZeroOneConfig) -> (f32, f32) {
    let (b1, b2) = (f64::from(c.beta1), f64::from(c.beta2));
    let g = (1.0 / Float::sqrt(1.0 - b2)) as f32;
    let r = b1 * b1 / b2;
    let b = if r >= 1.0 {
        f32::INFINITY
    } else {
        ((1.0 - b1) / Float::sqrt((1.0 - b2) * (1.0 - r))) as f32
    };
    (g, b)
}

/// What one 0/1 Adam step did with the 1-bit groups (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum ZeroOneStage {
    /// Full-precision gradient all-reduce, `v` updated.
    Variance,
    /// 1-bit gradient all-reduce, `v` unchanged.
    OneBitGradient,
    /// `v` frozen, no communication.
    Local,
    /// `v` frozen, the accumulated update all-reduced in 1 bit.
    Sync,
}

/// What one [`ZeroOneAdam::step`] did on this rank.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ZeroOneReport {
    /// The step just taken (1-based).
    pub step: u64,
    /// Its stage.
    pub stage: ZeroOneStage,
    /// Bytes and calls of this step's collectives on this rank (all zero
    /// on a local step without full-precision groups).
    pub bytes: CommStats,
}

/// The schedule counters (DeepSpeed's `var_interval`, `var_counter`,
/// `local_step_interval`, `local_step_counter`, `lrs`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Schedule {
    pub(crate) var_interval: u64,
    pub(crate) var_counter: u64,
    pub(crate) local_interval: u64,
    pub(crate) local_counter: u64,
    /// Sum of the learning rates since the last synchronisation (`f64`, as
    /// DeepSpeed's Python float).
    pub(crate) lrs: f64,
}

impl Schedule {
    const START: Self = Self {
        var_interval: 1,
        var_counter: 0,
        local_interval: 1,
        local_counter: 0,
        lrs: 0.0,
    };
}

/// One group's place and error feedback.
#[derive(Debug, Clone)]
pub(crate) struct ZoGroup {
    pub(crate) spec: GroupSpec,
    pub(crate) range: Range<usize>,
    /// Worker/server errors of the 1-bit all-reduce (gradients up to the
    /// freeze, the accumulated update after it).
    pub(crate) errors: AllReduceState,
}

/// The bytes one rank's [`ZeroOneAdam`] holds, by part (lengths, not
/// capacities; `n` parameters, `N` a 1-bit group's length padded to `8P`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ZeroOneMemory {
    /// `m` and `v`: `8n`.
    pub moments: usize,
    /// The anchor `a` (parameters at the last synchronisation): `4n`.
    pub anchor: usize,
    /// The mask (one `bool` per parameter) and the accumulated gradient:
    /// `5n`.
    pub mask_and_gradient: usize,
    /// Error-feedback buffers: `4(N + N/P)` per 1-bit group, 0 before its
    /// first 1-bit all-reduce.
    pub error_feedback: usize,
    /// The mean-gradient copy reused across steps (`4n` after the first
    /// step) and, under [`WarmupReduce::Bf16`] with more than one rank, the
    /// bfloat16 reduce's buffers, from the first variance step to the end of
    /// step `var_freeze_step` (no later step uses them): `14N + 6N/P` for
    /// the group it reduced last, `N` that group's length padded to `8P`.
    pub scratch: usize,
}

impl ZeroOneMemory {
    /// Every part added up.
    pub fn total(&self) -> usize {
        self.moments + self.anchor + self.mask_and_gradient + self.error_feedback + self.scratch
    }
}

/// The 0/1 Adam optimizer for one rank (module docs of `src/zero_one.rs`
/// for the math). Every rank builds it with the same config and groups and
/// calls [`ZeroOneAdam::step`] in lockstep.
///
/// ```
/// use basis_std::local::LocalComm;
/// use onebit_adam::comm_traits::Communicator;
/// use onebit_adam::{ZeroOneAdam, ZeroOneConfig, ZeroOneStage};
///
/// let config = ZeroOneConfig::default()
///     .with_lr(0.01)
///     .with_var_freeze_step(4)
///     .with_var_update_scaler(2)
///     .with_local_step_scaler(2);
/// let out = LocalComm::run(2, |mut comm| {
///     let mut opt = ZeroOneAdam::new(64, config)?;
///     let mut x = vec![1.0f32; 64];
///     let mut stages = Vec::new();
///     for _ in 0..9 {
///         let g: Vec<f32> = x.iter().map(|x| x + comm.rank() as f32).collect();
///         stages.push(opt.step_with_grad(&mut comm, &mut x, &g)?.stage);
///     }
///     Ok::<_, onebit_adam::OneBitError>((x, stages))
/// });
/// let (x0, stages) = out[0].as_ref().unwrap().as_ref().unwrap();
/// use ZeroOneStage::*;
/// assert_eq!(stages, &[Variance, Variance, OneBitGradient, Variance,
///                      Sync, Sync, Local, Sync, Local]);
/// // Synchronised after step 8; rank 1 moved alone in step 9.
/// assert!(x0.iter().all(|&x| x < 1.0));
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ZeroOneAdam {
    pub(crate) config: ZeroOneConfig,
    pub(crate) groups: Vec<ZoGroup>,
    pub(crate) len: usize,
    /// Completed steps.
    pub(crate) step: u64,
    pub(crate) schedule: Schedule,
    pub(crate) m: Vec<f32>,
    pub(crate) v: Vec<f32>,
    /// The anchor `a`: parameters at the last synchronisation (set at the
    /// end of step `var_freeze_step`; 0 before).
    pub(crate) anchor: Vec<f32>,
    /// `true` while the mean gradient was exactly 0 at every variance step
    /// (always `false` in full-precision groups).
    pub(crate) zero: Vec<bool>,
    pub(crate) grad_sum: Vec<f32>,
    pub(crate) grad_count: u32,
    /// Rank/size the state is bound to (set by the first step).
    pub(crate) bound: Option<(usize, usize)>,
    scratch: Vec<f32>,
    /// [`WarmupReduce::Bf16`]'s buffers, shared by the groups: made at the
    /// first bfloat16 variance step, reused by the next ones, freed after
    /// step `var_freeze_step` (never saved: nothing in them outlives a call).
    var_scratch: Option<alloc::boxed::Box<graded::Scratch>>,
}

impl ZeroOneAdam {
    /// One 1-bit group of `len` parameters.
    ///
    /// # Errors
    /// [`OneBitError::Config`] naming the invalid hyper-parameter.
    pub fn new(len: usize, config: ZeroOneConfig) -> Result<Self, OneBitError> {
        Self::with_groups(&[GroupSpec::one_bit(len)], config)
    }

    /// Groups laid out back to back in the flat parameter vector
    /// ([`Policy::OneBit`]: 0/1 Adam; [`Policy::FullPrecision`]: plain Adam
    /// with a full-precision all-reduce every step).
    ///
    /// # Errors
    /// [`OneBitError::Config`] naming the invalid hyper-parameter or a group
    /// weight decay that is negative or not finite.
    pub fn with_groups(groups: &[GroupSpec], config: ZeroOneConfig) -> Result<Self, OneBitError> {
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
            // 0/1 Adam's local steps and 1-bit gradient stage are defined for
            // the 1-bit codec only; graded codecs are 1-bit Adam's.
            if let Policy::Graded(_) = spec.policy {
                return Err(OneBitError::Config(
                    "0/1 Adam groups must be Policy::OneBit or Policy::FullPrecision (Policy::Graded is for OneBitAdam)",
                ));
            }
            states.push(ZoGroup {
                spec,
                range: start..start + spec.len,
                errors: AllReduceState::new(),
            });
            start += spec.len;
        }
        Ok(Self {
            config,
            groups: states,
            len: start,
            step: 0,
            schedule: Schedule::START,
            m: vec![0.0; start],
            v: vec![0.0; start],
            anchor: vec![0.0; start],
            // Full-precision groups are never masked.
            zero: groups
                .iter()
                .flat_map(|g| core::iter::repeat_n(g.policy == Policy::OneBit, g.len))
                .collect(),
            grad_sum: vec![0.0; start],
            grad_count: 0,
            bound: None,
            scratch: Vec::new(),
            var_scratch: None,
        })
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

    /// The hyper-parameters (with the current learning rate).
    pub fn config(&self) -> &ZeroOneConfig {
        &self.config
    }

    /// Set the learning rate for the following steps (every rank alike).
    ///
    /// # Errors
    /// [`OneBitError::Config`] unless `lr` is finite and > 0; unchanged then.
    pub fn set_lr(&mut self, lr: f32) -> Result<(), OneBitError> {
        check_lr(lr)?;
        self.config.lr = lr;
        Ok(())
    }

    /// First moment `m`.
    pub fn momentum(&self) -> &[f32] {
        &self.m
    }

    /// Second moment `v`.
    pub fn variance(&self) -> &[f32] {
        &self.v
    }

    /// The anchor `a`: the parameters at the last synchronisation (all
    /// zero before the end of step `var_freeze_step`).
    pub fn anchor(&self) -> &[f32] {
        &self.anchor
    }

    /// Coordinates of the 1-bit groups masked so far (mean gradient exactly
    /// 0 at every variance step).
    pub fn masked_coordinates(&self) -> usize {
        self.zero.iter().filter(|&&z| z).count()
    }

    /// The stage the next step ([`Self::steps`] + 1) runs in.
    pub fn next_stage(&self) -> ZeroOneStage {
        let t = self.step + 1;
        let s = &self.schedule;
        if t <= self.config.var_freeze_step {
            if t.is_multiple_of(s.var_interval) {
                ZeroOneStage::Variance
            } else {
                ZeroOneStage::OneBitGradient
            }
        } else if t.is_multiple_of(s.local_interval) {
            ZeroOneStage::Sync
        } else {
            ZeroOneStage::Local
        }
    }

    /// The current variance interval `I_v` and local-step interval `I_u`.
    pub fn intervals(&self) -> (u64, u64) {
        (self.schedule.var_interval, self.schedule.local_interval)
    }

    /// The bytes this rank's optimizer holds now, by part.
    pub fn memory(&self) -> ZeroOneMemory {
        let f = core::mem::size_of::<f32>();
        ZeroOneMemory {
            moments: (self.m.len() + self.v.len()) * f,
            anchor: self.anchor.len() * f,
            mask_and_gradient: self.zero.len() * core::mem::size_of::<bool>()
                + self.grad_sum.len() * f,
            error_feedback: self
                .groups
                .iter()
                .map(|g| g.errors.error_len())
                .sum::<usize>()
                * f,
            scratch: self.scratch.len() * f + self.var_scratch.as_ref().map_or(0, |s| s.bytes()),
        }
    }

    /// Add one micro-batch gradient; the next step uses the average of all
    /// gradients added since the previous one.
    ///
    /// # Errors
    /// [`OneBitError::Length`] for a wrong length, [`OneBitError::NonFinite`]
    /// for a NaN/±Inf; nothing is added then.
    pub fn accumulate(&mut self, grad: &[f32]) -> Result<(), OneBitError> {
        if grad.len() != self.len {
            return Err(OneBitError::Length {
                expected: self.len,
                found: grad.len(),
            });
        }
        if let Some(index) = grad.iter().position(|g| !g.is_finite()) {
            return Err(OneBitError::NonFinite { index });
        }
        if self.grad_count == u32::MAX {
            return Err(OneBitError::Config("too many accumulated gradients"));
        }
        for (s, g) in self.grad_sum.iter_mut().zip(grad) {
            *s += *g;
        }
        self.grad_count += 1;
        Ok(())
    }

    /// `accumulate(grad)` then `step`, as one call.
    ///
    /// # Errors
    /// As [`Self::step`].
    pub fn step_with_grad(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        grad: &[f32],
    ) -> Result<ZeroOneReport, OneBitError> {
        self.step_inner(comm, params, Some((grad, 1.0)))
    }

    /// [`Self::step_with_grad`] with `factor · grad` as this rank's
    /// gradient, scaled in the pass that reads it (a data-parallel rank whose
    /// `grad` is its share of the batch gradient passes `factor = P`). The
    /// same bits as `step_with_grad` on the product.
    ///
    /// # Errors
    /// As [`Self::step`]; a non-finite `factor` is [`OneBitError::Config`],
    /// a product that overflows is [`OneBitError::NonFinite`].
    pub fn step_with_grad_scaled(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        grad: &[f32],
        factor: f32,
    ) -> Result<ZeroOneReport, OneBitError> {
        self.step_inner(comm, params, Some((grad, factor)))
    }

    /// One optimizer step on `params` with the averaged accumulated gradient.
    ///
    /// # Errors
    /// On a step that communicates, every rank returns an error, and nothing
    /// changes on any rank, when a rank's `params`/gradient has the wrong
    /// length ([`OneBitError::Length`]), holds a NaN/±Inf
    /// ([`OneBitError::NonFinite`]), has no gradient
    /// ([`OneBitError::NoGradient`]) or state bound to another rank or group
    /// size ([`OneBitError::StateShape`]) — the other ranks get
    /// [`OneBitError::RemoteInput`] — or the ranks disagree on step, length
    /// or layout ([`OneBitError::Comm`]). On a local step only the rank
    /// with the bad input fails (nothing changed). Transport failures after
    /// the header exchange are [`OneBitError::Comm`] (the group is broken);
    /// under [`WarmupReduce::Bf16`] a variance step whose `f32` sum of
    /// bfloat16 gradients overflows fails every rank too
    /// ([`OneBitError::NonFinite`] / [`OneBitError::RemoteInput`]), the
    /// groups before it already stepped.
    pub fn step(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
    ) -> Result<ZeroOneReport, OneBitError> {
        self.step_inner(comm, params, None)
    }

    /// FNV-1a over the group layout, the schedule's hyper-parameters, the
    /// variant and (when bfloat16) the variance reduce.
    fn layout(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |x: u64| {
            for b in x.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for g in &self.groups {
            eat(g.spec.len as u64);
            eat(policy_code(g.spec.policy).into());
        }
        let c = &self.config;
        for x in [
            c.var_freeze_step,
            c.var_update_scaler,
            c.local_step_scaler,
            c.local_step_clipper,
            u64::from(c.preconditioned),
        ] {
            eat(x);
        }
        // Only when not the default, so an `F32` layout stays what it was
        // (as 1-bit Adam's `warmup_reduce`): ranks that disagree fail
        // together at the header instead of in mismatched collectives.
        if c.variance_reduce == WarmupReduce::Bf16 {
            eat(16);
        }
        h
    }

    /// Local verdict: lengths, gradient, binding; fills `scratch` with the
    /// mean accumulated gradient.
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
        if let Some((g, f)) = extra {
            if g.len() != self.len {
                return Err(OneBitError::Length {
                    expected: self.len,
                    found: g.len(),
                });
            }
            if !f.is_finite() {
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
        self.scratch.resize(self.len, 0.0);
        let inv = count as f32;
        match extra {
            // `f·g + 0.0`: the sum a fresh accumulator would form (`g · 1.0`
            // is `g`, so `step_with_grad` keeps its bits).
            Some((g, f)) if self.grad_count == 0 => {
                for (o, g) in self.scratch.iter_mut().zip(g) {
                    *o = *g * f + 0.0;
                }
            }
            Some((g, f)) => {
                for ((o, s), g) in self.scratch.iter_mut().zip(&self.grad_sum).zip(g) {
                    *o = (s + g * f) / inv;
                }
            }
            None => {
                for (o, s) in self.scratch.iter_mut().zip(&self.grad_sum) {
                    *o = s / inv;
                }
            }
        }
        match self.scratch.iter().position(|g| !g.is_finite()) {
            Some(index) => Err(OneBitError::NonFinite { index }),
            None => Ok(()),
        }
    }

    fn step_inner(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        extra: Option<(&[f32], f32)>,
    ) -> Result<ZeroOneReport, OneBitError> {
        let before = comm.stats();
        let local = self.prepare(comm, params, extra);
        let stage = self.next_stage();
        let any_full = self
            .groups
            .iter()
            .any(|g| g.spec.policy == Policy::FullPrecision);
        if stage == ZeroOneStage::Local && !any_full {
            local?;
        } else {
            header::exchange(
                comm,
                Op::ZeroOneStep,
                self.len,
                self.step,
                self.layout(),
                local,
            )?;
        }
        self.bound = Some((comm.rank(), comm.size()));
        if self.grad_count > 0 {
            self.grad_sum.fill(0.0);
            self.grad_count = 0;
        }
        let t = self.step + 1;
        // One rank reduces nothing (its `f32` all-reduce is the identity):
        // both modes then run the same bits, as in 1-bit Adam.
        let half = stage == ZeroOneStage::Variance
            && self.config.variance_reduce == WarmupReduce::Bf16
            && comm.size() > 1;
        let mut g = core::mem::take(&mut self.scratch);
        let mut result = Ok(());
        for gi in 0..self.groups.len() {
            let range = self.groups[gi].range.clone();
            let x = &mut params[range.clone()];
            let gg = &mut g[range];
            result = match self.groups[gi].spec.policy {
                // On a variance step a full-precision group reduces as the
                // 1-bit groups do (`half`), as 1-bit Adam's warm-up reduce
                // covers its full-precision groups; on the other steps in
                // `f32`, as 1-bit Adam's after its freeze.
                Policy::FullPrecision => self.full_group(comm, gi, gg, x, true, half),
                // `with_groups` refuses `Policy::Graded`.
                Policy::OneBit | Policy::Graded(_) => match stage {
                    ZeroOneStage::Variance => self.full_group(comm, gi, gg, x, false, half),
                    ZeroOneStage::OneBitGradient => self.one_bit_gradient(comm, gi, gg, x),
                    ZeroOneStage::Local => {
                        self.local_step(gi, gg, x);
                        Ok(())
                    }
                    ZeroOneStage::Sync => {
                        self.local_step(gi, gg, x);
                        self.sync(comm, gi, gg, x)
                    }
                },
            };
            if result.is_err() {
                break;
            }
        }
        self.scratch = g;
        result?;
        self.advance(t, stage);
        if t == self.config.var_freeze_step {
            self.anchor.copy_from_slice(params);
            // No variance step follows.
            self.var_scratch = None;
        }
        Ok(ZeroOneReport {
            step: t,
            stage,
            bytes: comm.stats().since(&before),
        })
    }

    /// The schedule after step `t` (module docs).
    fn advance(&mut self, t: u64, stage: ZeroOneStage) {
        let c = self.config;
        let s = &mut self.schedule;
        match stage {
            ZeroOneStage::Variance => {
                s.var_counter += 1;
                if s.var_counter == c.var_update_scaler {
                    s.var_counter = 0;
                    s.var_interval = s.var_interval.saturating_mul(2);
                }
            }
            ZeroOneStage::OneBitGradient => {}
            ZeroOneStage::Local | ZeroOneStage::Sync => {
                s.lrs += f64::from(c.lr);
                if stage == ZeroOneStage::Sync {
                    s.lrs = 0.0;
                }
                s.local_counter += 1;
                if s.local_counter == c.local_step_scaler {
                    s.local_counter = 0;
                    s.local_interval = c.local_step_clipper.min(s.local_interval.saturating_mul(2));
                }
            }
        }
        self.step = t;
        if t == c.var_freeze_step {
            for g in &mut self.groups {
                g.errors.reset_errors();
            }
        }
    }

    fn decay(&self, gi: usize) -> f32 {
        self.groups[gi]
            .spec
            .weight_decay
            .unwrap_or(self.config.weight_decay)
    }

    /// Full-precision mean all-reduce of `g` (the bfloat16 one when
    /// `half`), then Adam on `m`, `v`, `x`; `always` (a full-precision
    /// group) leaves the mask alone.
    fn full_group(
        &mut self,
        comm: &mut dyn Communicator,
        gi: usize,
        g: &mut [f32],
        x: &mut [f32],
        always: bool,
        half: bool,
    ) -> Result<(), OneBitError> {
        // The divisor that turns `g` into the mean: the bfloat16 reduce
        // returns the mean itself, and `y / 1.0` is `y` bit for bit.
        let pf = if half {
            let scratch = self.var_scratch.get_or_insert_with(Default::default);
            graded::mean_without_feedback(comm, g, Grade::Bf16, scratch)?;
            1.0
        } else {
            comm.all_reduce_sum(g)?;
            comm.size() as f32
        };
        let c = self.config;
        let wd = self.decay(gi);
        let range = self.groups[gi].range.clone();
        let (m, v, z) = (
            &mut self.m[range.clone()],
            &mut self.v[range.clone()],
            &mut self.zero[range],
        );
        for i in 0..x.len() {
            let gm = g[i] / pf;
            if !always {
                z[i] &= gm == 0.0;
            }
            v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * gm * gm;
            m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * gm;
            let w = m[i] / (Float::sqrt(v[i]) + c.eps) + wd * x[i];
            x[i] -= c.lr * w;
        }
        Ok(())
    }

    /// 1-bit all-reduce of the gradient, masked; `m` and `x` updated.
    fn one_bit_gradient(
        &mut self,
        comm: &mut dyn Communicator,
        gi: usize,
        g: &mut [f32],
        x: &mut [f32],
    ) -> Result<(), OneBitError> {
        let c = self.config;
        let (cap_g, cap_m) = preconditioned_caps(&c);
        let range = self.groups[gi].range.clone();
        if c.preconditioned {
            let v = &self.v[range.clone()];
            for i in 0..g.len() {
                g[i] = (g[i] / (Float::sqrt(v[i]) + c.eps)).clamp(-cap_g, cap_g);
            }
        }
        allreduce::reduce_counted(comm, g, None, &mut self.groups[gi].errors)?;
        let wd = self.decay(gi);
        let (m, v, z) = (
            &mut self.m[range.clone()],
            &self.v[range.clone()],
            &self.zero[range],
        );
        for i in 0..x.len() {
            let d = Float::sqrt(v[i]) + c.eps;
            let gh = match (z[i], c.preconditioned) {
                (true, _) => 0.0,
                (false, true) => g[i] * d,
                (false, false) => g[i],
            };
            m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * gh;
            let w = clamped(m[i] / d, c.preconditioned, cap_m) + wd * x[i];
            x[i] -= c.lr * w;
        }
        Ok(())
    }

    /// A local step on this rank's own gradient: `m`, `x`.
    fn local_step(&mut self, gi: usize, g: &[f32], x: &mut [f32]) {
        let c = self.config;
        let wd = self.decay(gi);
        let range = self.groups[gi].range.clone();
        let (m, v) = (&mut self.m[range.clone()], &self.v[range]);
        let cap_m = preconditioned_caps(&c).1;
        for i in 0..x.len() {
            m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g[i];
            let p = m[i] / (Float::sqrt(v[i]) + c.eps);
            let w = clamped(p, c.preconditioned, cap_m) + wd * x[i];
            x[i] -= c.lr * w;
        }
    }

    /// The synchronisation after this step's local step (module docs);
    /// `buf` (the group's spent gradient copy) carries `u ⊙ d`.
    fn sync(
        &mut self,
        comm: &mut dyn Communicator,
        gi: usize,
        buf: &mut [f32],
        x: &mut [f32],
    ) -> Result<(), OneBitError> {
        let c = self.config;
        // This step's η is not in `lrs` yet (`advance` adds it).
        let lrs = (self.schedule.lrs + f64::from(c.lr)) as f32;
        let range = self.groups[gi].range.clone();
        let (v, a) = (&self.v[range.clone()], &self.anchor[range.clone()]);
        for i in 0..x.len() {
            buf[i] = if c.preconditioned {
                x[i] - a[i]
            } else {
                (x[i] - a[i]) * (Float::sqrt(v[i]) + c.eps)
            };
        }
        allreduce::reduce_counted(comm, buf, None, &mut self.groups[gi].errors)?;
        let (m, z, a) = (
            &mut self.m[range.clone()],
            &self.zero[range.clone()],
            &mut self.anchor[range],
        );
        for i in 0..x.len() {
            let uh = if z[i] { 0.0 } else { buf[i] };
            let d = Float::sqrt(v[i]) + c.eps;
            if c.preconditioned {
                m[i] = -(uh * d / lrs);
                x[i] = a[i] + uh;
            } else {
                m[i] = -(uh / lrs);
                x[i] = a[i] + uh / d;
            }
            a[i] = x[i];
        }
        Ok(())
    }
}

/// `p` clamped to `±cap` in the preconditioned variant, `p` otherwise.
#[inline]
pub(crate) fn clamped(p: f32, preconditioned: bool, cap: f32) -> f32 {
    if preconditioned {
        p.clamp(-cap, cap)
    } else {
        p
    }
}

/// Policy byte on the wire and in saved records.
pub(crate) fn policy_code(p: Policy) -> u8 {
    match p {
        Policy::OneBit => 1,
        Policy::FullPrecision => 2,
        // Refused by `with_groups`, so never written; a distinct code all the same.
        Policy::Graded(_) => 3,
    }
}
