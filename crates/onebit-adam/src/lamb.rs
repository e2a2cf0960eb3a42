//! 1-bit LAMB (Li et al., "1-bit LAMB: Communication Efficient Large-Scale
//! Large-Batch Training with LAMB's Convergence Speed", 2021; DeepSpeed
//! `deepspeed/runtime/fp16/onebit/lamb.py`), over the crate's compressed
//! all-reduce with error feedback.
//!
//! LAMB (You et al. 2019) is Adam whose update is rescaled per *layer* by a
//! trust ratio `‖x‖/‖update‖`, so that every layer moves by a similar
//! fraction of its weights whatever the batch size. A 1-bit all-reduce
//! cannot carry that ratio: it is a non-linear function of the reduced
//! momentum, and the error feedback only makes *linear* functions of it
//! come out right on average. 1-bit LAMB therefore freezes it, like 1-bit
//! Adam freezes `v`, and then corrects the frozen value with what the
//! compressed momentum still tells about the variance.
//!
//! Here a **parameter group** ([`LambGroup`]) is one LAMB layer. Per step
//! `t` (1-based) and group `k`, with `ḡ` the mean gradient over the `P`
//! ranks and `g_r` rank `r`'s own:
//!
//! * **warm-up** (up to the freeze step of [`FreezePolicy`]; full
//!   precision): `ḡ = all_reduce_sum(g)/P`, `m ← β₁m + (1−β₁)ḡ`,
//!   `v ← β₂v + (1−β₂)ḡ²`, `u = m/(√v + ε) + λx`; the trust ratio
//!   `c = clamp(‖x‖/‖u‖, min_coeff, max_coeff)` (`c = 1` when either norm
//!   is 0); its running average `c̄ ← γc̄ + (1−γ)c` (`γ` = `coeff_beta`,
//!   `c̄₀ = 0`; DeepSpeed skips the update when `c = 1` exactly, and so do
//!   we); `x ← x − η·c·u`.
//! * **the freeze** (at the first compressed step): `v` and `c̄` are
//!   frozen; `v_fresh ← v` starts a second, *fresh* variance estimate;
//!   each group gets a momentum **scaling coefficient**
//!   `s_k = mean_j(μ_j)/μ_k`, `μ_k = ‖m_k‖₂/√n_k` (`s_k = 1` when
//!   `μ_k = 0`), so that every layer's momentum has the same RMS in the
//!   one flat buffer the all-reduce compresses with a single scale.
//! * **compression stage**: `m_prev = m`; every rank forms its local
//!   momentum `s_k·(β₁m + (1−β₁)g_r)`; one [`crate::compressed_allreduce`]
//!   over the live coordinates of all groups back to back averages it;
//!   `m = result/s_k` (the exact-zero coordinates, see below, keep `m = 0`). The
//!   gradient it implies, `ĝ = (m − β₁m_prev)/(1−β₁)`, refreshes
//!   `v_fresh ← β₂v_fresh + (1−β₂)ĝ²`; `d = √v + ε` (frozen),
//!   `p = m/d`, `u = p + λx`; the **adaptation factor**
//!   `f = max_i d_i/(√v_fresh,i + ε)` over the live coordinates (how much
//!   smaller the fresh denominator has become than the frozen one, at its
//!   most; 1 for a group without live coordinates), with weight
//!   decay blended towards 1 by `ρ = min(1, ‖p‖/‖u‖)`: `f ← fρ + (1−ρ)`;
//!   then clipped to `[factor_min, factor_max]` and to
//!   `f_prev·[1 − factor_threshold, 1 + factor_threshold]` (`f_prev`
//!   starts at 1), `f_prev ← f`; the coefficient is `c = c̄·f`;
//!   `x ← x − η·c·u`.
//!
//! Scalars (norms, ratios, `c̄`, `f`) are `f64`, sums in element order;
//! element-wise work is `f32` in the order written above; the step is
//! `x ← x − (η·c as f32)·u`. [`crate::reference_lamb`] is the same math as
//! a single-threaded simulation of `P` ranks, which the tests compare with
//! bit for bit.
//!
//! Differences from DeepSpeed, each on purpose:
//! * DeepSpeed's first call to `step` only allocates (no update); here
//!   every call is a step.
//! * DeepSpeed computes `s_k` per tensor; here per group (a group is a
//!   layer: that is what the coefficient is for).
//! * DeepSpeed's checkpoints drop the error buffers and, mid-warm-up, `c̄`;
//!   here [`OneBitLamb::export_state`] keeps everything, so a restored run
//!   continues bit for bit.
//! * DeepSpeed's `bias_correction` argument has no effect on its 1-bit
//!   LAMB math; there is none here.
//! * Instead of DeepSpeed's user-supplied momentum mask (`exp_avg_mask`)
//!   the exact-zero coordinates are found as 1-bit Adam finds them: those
//!   whose mean gradient was exactly 0 at every warm-up step stay out of
//!   the compressed buffer and keep `m = 0`. 1 bit cannot say 0, and such a
//!   coordinate's frozen `v` is 0, so it would step by `±α/ε`. They are
//!   also left out of the factor's maximum: DeepSpeed's masked coordinates
//!   enter it as `ε/ε = 1`, which pins `f ≥ 1` for any layer with one.
//!
//! Known limitation: mini-batch runs of the logistic problem end at most
//! 0.5 % above full-precision LAMB, but a full-batch run degrades soon after the
//! freeze (`examples/lamb_large_batch.rs`; 1-bit Adam's plain momentum
//! does too, less); the cause is not diagnosed yet.
//!
//! Every step starts with one header exchange (step, length, group layout,
//! gradient verdict), so a NaN gradient or a disagreement fails on every
//! rank before any state changes.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use comm_traits::{CommStats, Communicator};
use num_traits::Float;

use crate::OneBitError;
use crate::allreduce::{self, AllReduceState, ErrorNorms};
use crate::freeze::{FreezePolicy, FreezeTracker};
use crate::header::{self, Op};
use crate::memory::Memory;
use crate::optimizer::Stage;

/// Hyper-parameters of [`OneBitLamb`]; `Default` holds DeepSpeed's
/// `OnebitLamb` values except the freeze (DeepSpeed's `freeze_step` 100000
/// never compresses a short run, so the default is
/// [`FreezePolicy::default`], the share rule, as for [`crate::Config`]).
/// `#[non_exhaustive]`: build it from [`Default`] with the `with_*`
/// setters.
///
/// ```
/// use onebit_adam::{FreezePolicy, LambConfig};
///
/// let c = LambConfig::default().with_lr(1e-2).with_freeze(FreezePolicy::Fixed(100));
/// assert_eq!((c.max_coeff, c.min_coeff, c.coeff_beta), (10.0, 0.01, 0.9));
/// assert_eq!((c.factor_min, c.factor_max, c.factor_threshold), (0.5, 4.0, 0.1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LambConfig {
    /// Learning rate `η`. Finite, ≥ 0. Default 1e-3.
    pub lr: f32,
    /// First-moment decay `β₁`, in `[0, 1)`. Default 0.9.
    pub beta1: f32,
    /// Second-moment decay `β₂`, in `[0, 1)`. Default 0.999.
    pub beta2: f32,
    /// Denominator guard `ε`. Finite, > 0. Default 1e-8.
    pub eps: f32,
    /// Weight decay `λ`, added to the update inside the trust ratio (groups
    /// may override it). Finite, ≥ 0. Default 0.
    pub weight_decay: f32,
    /// When the warm-up ends (the last full-precision step). Default
    /// [`FreezePolicy::default`] = [`FreezePolicy::Share`] with
    /// [`crate::AutoFreeze::share`], the same as [`crate::Config`]'s (one
    /// default for both, and the CLI's one `--dense-warmup` default):
    /// measured on 1-bit Adam only (`docs/ONEBIT_ADAM.md`, "The share rule
    /// on DLRM and its minimum step"). Why it carries over: 1-bit LAMB has
    /// no bias correction, so `Auto` here already measured the raw `v` and
    /// the two rules differ only in window (5 against 25) and `min_step`
    /// (20 against 50); `min_step` 20 is twice the `1/(1−γ)` = 10 steps of
    /// the trust-ratio average frozen with `v` at the default `coeff_beta`
    /// 0.9 (DeepSpeed: at most the warm-up length).
    pub freeze: FreezePolicy,
    /// Upper clip of the warm-up trust ratio. Default 10.0.
    pub max_coeff: f64,
    /// Lower clip of the warm-up trust ratio, in `(0, max_coeff]`.
    /// Default 0.01.
    pub min_coeff: f64,
    /// Decay `γ` of the running average of the trust ratio that is frozen,
    /// in `[0, 1)`. DeepSpeed's advice: `1/(1−γ)` at most the warm-up
    /// length. Default 0.9.
    pub coeff_beta: f64,
    /// Upper clip of the adaptation factor. Default 4.0.
    pub factor_max: f64,
    /// Lower clip of the adaptation factor, in `(0, factor_max]`.
    /// Default 0.5.
    pub factor_min: f64,
    /// Largest relative change of the factor from one step to the next, in
    /// `[0, 1)`. Default 0.1.
    pub factor_threshold: f64,
}

// onebit-codec's macro, one copy per dependency chain.
onebit_codec::with_setters!(LambConfig {
    with_lr => lr: f32,
    with_beta1 => beta1: f32,
    with_beta2 => beta2: f32,
    with_eps => eps: f32,
    with_weight_decay => weight_decay: f32,
    with_freeze => freeze: FreezePolicy,
    with_max_coeff => max_coeff: f64,
    with_min_coeff => min_coeff: f64,
    with_coeff_beta => coeff_beta: f64,
    with_factor_max => factor_max: f64,
    with_factor_min => factor_min: f64,
    with_factor_threshold => factor_threshold: f64,
});

impl Default for LambConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            freeze: FreezePolicy::default(),
            max_coeff: 10.0,
            min_coeff: 0.01,
            coeff_beta: 0.9,
            factor_max: 4.0,
            factor_min: 0.5,
            factor_threshold: 0.1,
        }
    }
}

impl LambConfig {
    /// A fixed last warm-up step `n` ([`FreezePolicy::Fixed`]; must be ≥ 1),
    /// DeepSpeed's `freeze_step`.
    pub fn with_freeze_step(self, n: u64) -> Self {
        self.with_freeze(FreezePolicy::Fixed(n))
    }

    pub(crate) fn validate(&self) -> Result<(), OneBitError> {
        let unit = |x: f32| (0.0..1.0).contains(&x);
        let fin = |x: f64| x.is_finite();
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
        if !(fin(self.min_coeff) && fin(self.max_coeff) && self.min_coeff > 0.0)
            || self.min_coeff > self.max_coeff
        {
            return Err(OneBitError::Config(
                "min_coeff and max_coeff must be finite with 0 < min_coeff <= max_coeff",
            ));
        }
        if !(0.0..1.0).contains(&self.coeff_beta) {
            return Err(OneBitError::Config("coeff_beta must be in [0, 1)"));
        }
        if !(fin(self.factor_min) && fin(self.factor_max) && self.factor_min > 0.0)
            || self.factor_min > self.factor_max
        {
            return Err(OneBitError::Config(
                "factor_min and factor_max must be finite with 0 < factor_min <= factor_max",
            ));
        }
        if !(0.0..1.0).contains(&self.factor_threshold) {
            return Err(OneBitError::Config("factor_threshold must be in [0, 1)"));
        }
        Ok(())
    }
}

/// One LAMB layer: a contiguous range of the flat parameter vector with its
/// own trust ratio. `#[non_exhaustive]`: build it with [`LambGroup::new`].
///
/// ```
/// use onebit_adam::LambGroup;
///
/// let bias = LambGroup::new(64).with_weight_decay(Some(0.0));
/// assert_eq!((bias.len, bias.weight_decay), (64, Some(0.0)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LambGroup {
    /// Number of parameters, ≥ 1.
    pub len: usize,
    /// Weight decay of this group (`None`: the config's).
    pub weight_decay: Option<f32>,
}

// onebit-codec's macro, one copy per dependency chain.
onebit_codec::with_setters!(LambGroup {
    with_len => len: usize,
    with_weight_decay => weight_decay: Option<f32>,
});

impl LambGroup {
    /// A layer of `len` parameters with the config's weight decay.
    pub fn new(len: usize) -> Self {
        Self {
            len,
            weight_decay: None,
        }
    }
}

/// What one [`OneBitLamb::step_with_grad`] did on this rank.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LambStepReport {
    /// The step just taken (1-based).
    pub step: u64,
    /// Its stage ([`Stage::Warmup`] or [`Stage::Compressed`]).
    pub stage: Stage,
    /// Bytes and calls of this step's collectives on this rank.
    pub bytes: CommStats,
    /// The coefficient `c` each group's update was scaled by (the trust
    /// ratio in the warm-up, `c̄·f` after it), in group order.
    pub coefficients: Vec<f64>,
}

/// Per-group scalars (besides `m`, `v`, `v_fresh` in the flat vectors).
#[derive(Debug, Clone)]
pub(crate) struct LambGroupState {
    pub(crate) spec: LambGroup,
    pub(crate) range: Range<usize>,
    /// `c̄`: running average of the warm-up trust ratio (frozen after it).
    pub(crate) coeff_avg: f64,
    /// `f_prev`: the last adaptation factor (1 before the first).
    pub(crate) last_factor: f64,
    /// `s_k`, fixed at the first compressed step (`None` before).
    pub(crate) scaling: Option<f32>,
    /// The coefficient of the last step (0 before the first).
    pub(crate) last_coeff: f64,
}

/// The 1-bit LAMB optimizer for one rank (module docs: the math). Every
/// rank builds it with the same config and groups and calls
/// [`OneBitLamb::step_with_grad`] in lockstep.
///
/// ```
/// use comm_traits::SingleRank;
/// use onebit_adam::{LambConfig, LambGroup, OneBitLamb, Stage};
///
/// let config = LambConfig::default().with_lr(0.05).with_freeze_step(3);
/// let mut opt = OneBitLamb::new(&[LambGroup::new(3), LambGroup::new(2)], config)?;
/// let mut comm = SingleRank::default();
/// let mut x = [1.0f32, -2.0, 0.5, 3.0, -1.0];
/// let mut stages = Vec::new();
/// for _ in 0..6 {
///     let grad = x; // ½‖x‖²
///     let report = opt.step_with_grad(&mut comm, &mut x, &grad)?;
///     assert_eq!(report.coefficients.len(), 2);
///     stages.push(report.stage);
/// }
/// assert_eq!(stages[..3], [Stage::Warmup; 3]);
/// assert_eq!(stages[3..], [Stage::Compressed; 3]);
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct OneBitLamb {
    pub(crate) config: LambConfig,
    pub(crate) groups: Vec<LambGroupState>,
    pub(crate) len: usize,
    /// Completed steps.
    pub(crate) step: u64,
    pub(crate) m: Vec<f32>,
    /// The frozen (after the warm-up) second moment.
    pub(crate) v: Vec<f32>,
    /// The fresh second moment: empty during the warm-up, `len` after it.
    pub(crate) v_fresh: Vec<f32>,
    /// `true` while the mean gradient has been exactly 0 at every warm-up
    /// step: such coordinates stay out of the compressed buffer.
    pub(crate) zero: Vec<bool>,
    /// Rank/size the error buffers are bound to (set by the first step).
    pub(crate) bound: Option<(usize, usize)>,
    /// Worker/server error of the one flat compressed buffer.
    pub(crate) allreduce: AllReduceState,
    pub(crate) freeze: FreezeTracker,
    /// Mean gradient (warm-up) or the compressed buffer (after it).
    scratch: Vec<f32>,
    /// The update `u` of one group, then `m_prev` after the freeze.
    scratch_u: Vec<f32>,
}

impl OneBitLamb {
    /// Groups (LAMB layers) laid out back to back in the flat parameter
    /// vector.
    ///
    /// # Errors
    /// [`OneBitError::Config`] naming the invalid hyper-parameter, an
    /// empty group, or a group weight decay that is negative or not
    /// finite.
    pub fn new(groups: &[LambGroup], config: LambConfig) -> Result<Self, OneBitError> {
        config.validate()?;
        if groups.is_empty() {
            return Err(OneBitError::Config("at least one group is needed"));
        }
        let mut start = 0usize;
        let mut states = Vec::with_capacity(groups.len());
        for &spec in groups {
            if spec.len == 0 {
                return Err(OneBitError::Config("group len must be >= 1"));
            }
            if let Some(wd) = spec.weight_decay
                && !(wd.is_finite() && wd >= 0.0)
            {
                return Err(OneBitError::Config(
                    "group weight_decay must be finite and >= 0",
                ));
            }
            let end = start
                .checked_add(spec.len)
                .ok_or(OneBitError::Config("total length overflows usize"))?;
            states.push(LambGroupState {
                spec,
                range: start..end,
                coeff_avg: 0.0,
                last_factor: 1.0,
                scaling: None,
                last_coeff: 0.0,
            });
            start = end;
        }
        Ok(Self {
            config,
            groups: states,
            len: start,
            step: 0,
            m: vec![0.0; start],
            v: vec![0.0; start],
            v_fresh: Vec::new(),
            zero: vec![true; start],
            bound: None,
            allreduce: AllReduceState::new(),
            freeze: FreezeTracker::new(config.freeze),
            scratch: Vec::new(),
            scratch_u: Vec::new(),
        })
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no parameters (never: groups are non-empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Completed steps.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LambConfig {
        &self.config
    }

    /// First moment `m`.
    pub fn momentum(&self) -> &[f32] {
        &self.m
    }

    /// Second moment `v` (frozen after the warm-up).
    pub fn variance(&self) -> &[f32] {
        &self.v
    }

    /// The fresh second moment of the compression stage (empty before it).
    pub fn fresh_variance(&self) -> &[f32] {
        &self.v_fresh
    }

    /// The last warm-up step, once known (as [`crate::OneBitAdam::frozen_at`]).
    pub fn frozen_at(&self) -> Option<u64> {
        self.freeze.frozen_at
    }

    /// Coordinates whose mean gradient was exactly 0 at every warm-up step
    /// so far (left out of the compressed buffer, `m = 0`).
    pub fn zero_coordinates(&self) -> usize {
        self.zero.iter().filter(|&&z| z).count()
    }

    /// Per group: the frozen running average `c̄` of the trust ratio (still
    /// moving during the warm-up).
    pub fn frozen_coefficients(&self) -> Vec<f64> {
        self.groups.iter().map(|g| g.coeff_avg).collect()
    }

    /// Per group: the coefficient of the last step (0 before the first).
    pub fn coefficients(&self) -> Vec<f64> {
        self.groups.iter().map(|g| g.last_coeff).collect()
    }

    /// Per group: the momentum scaling coefficient `s_k` (`None` before
    /// the first compressed step).
    pub fn scaling_coefficients(&self) -> Vec<Option<f32>> {
        self.groups.iter().map(|g| g.scaling).collect()
    }

    /// `‖e_w‖₂`, `‖e_s‖₂` of the flat compressed buffer.
    pub fn error_norms(&self) -> ErrorNorms {
        self.allreduce.error_norms()
    }

    /// The error-feedback state of the flat compressed buffer (worker and
    /// server errors, call counter).
    pub fn allreduce_state(&self) -> &AllReduceState {
        &self.allreduce
    }

    /// The stage step `t` (1-based) runs in.
    pub fn stage_of(&self, t: u64) -> Stage {
        if self.freeze.is_warmup(t) {
            Stage::Warmup
        } else {
            Stage::Compressed
        }
    }

    /// The bytes this rank's optimizer holds now, by part: `moments` are
    /// `m`, `v` and (after the warm-up) `v_fresh`; `mask_and_accumulator`
    /// the zero mask (one `bool` per parameter; no accumulator);
    /// `error_feedback` the flat buffer's `4(N + N/P)` (`N`: the live
    /// coordinates padded to `8P`); `freeze_snapshot` the automatic freeze's;
    /// `scratch` the per-step buffers.
    pub fn memory(&self) -> Memory {
        let f = core::mem::size_of::<f32>();
        Memory {
            moments: (self.m.len() + self.v.len() + self.v_fresh.len()) * f,
            mask_and_accumulator: self.zero.len() * core::mem::size_of::<bool>(),
            error_feedback: self.allreduce.error_len() * f,
            freeze_snapshot: self.freeze.snapshot.len() * f,
            scratch: (self.scratch.len() + self.scratch_u.len()) * f,
            // No telemetry in 1-bit LAMB's reports.
            telemetry: 0,
        }
    }

    /// One step with this rank's gradient `grad` of `params` (one collective
    /// call: every rank calls it at the same step).
    ///
    /// # Errors
    /// Every rank returns an error, and nothing changes on any rank, when a
    /// rank's `params`/`grad` has the wrong length ([`OneBitError::Length`]),
    /// `grad` holds a NaN/±Inf ([`OneBitError::NonFinite`]), or its state
    /// is bound to another rank or group size ([`OneBitError::StateShape`])
    /// — the other ranks get [`OneBitError::RemoteInput`]; ranks disagree on
    /// step, length, groups or freeze ([`OneBitError::Comm`]). Transport
    /// failures after the header exchange, and a compressed sum that
    /// overflows `f32`, are returned too (the run cannot continue then).
    pub fn step_with_grad(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        grad: &[f32],
    ) -> Result<LambStepReport, OneBitError> {
        let before = comm.stats();
        let local = self.check(comm, params, grad);
        header::exchange(
            comm,
            Op::LambStep,
            self.len,
            self.step,
            self.layout(),
            local,
        )?;
        self.bound = Some((comm.rank(), comm.size()));
        let t = self.step + 1;
        let stage = self.stage_of(t);
        match stage {
            Stage::Warmup => self.warmup(comm, params, grad)?,
            _ => self.compressed(comm, params, grad)?,
        }
        self.step = t;
        if stage == Stage::Warmup {
            let v = &self.v;
            self.freeze
                .observe(&self.config.freeze, t, core::iter::once((&v[..], 1.0)));
        }
        Ok(LambStepReport {
            step: t,
            stage,
            bytes: comm.stats().since(&before),
            coefficients: self.coefficients(),
        })
    }

    /// Local verdict before the header: lengths, finiteness, binding.
    fn check(
        &self,
        comm: &dyn Communicator,
        params: &[f32],
        grad: &[f32],
    ) -> Result<(), OneBitError> {
        for found in [params.len(), grad.len()] {
            if found != self.len {
                return Err(OneBitError::Length {
                    expected: self.len,
                    found,
                });
            }
        }
        if let Some(index) = grad.iter().position(|g| !g.is_finite()) {
            return Err(OneBitError::NonFinite { index });
        }
        if let Some((rank, size)) = self.bound
            && (rank, size) != (comm.rank(), comm.size())
        {
            return Err(OneBitError::StateShape {
                expected: size as u64,
                found: comm.size() as u64,
            });
        }
        Ok(())
    }

    /// FNV-1a over the group lengths and the freeze rule: ranks must agree.
    fn layout(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |x: u64| {
            for b in x.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        for g in &self.groups {
            eat(g.spec.len as u64);
        }
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
        h
    }

    /// The warm-up: full-precision mean gradient, then plain LAMB per group.
    fn warmup(
        &mut self,
        comm: &mut dyn Communicator,
        x: &mut [f32],
        grad: &[f32],
    ) -> Result<(), OneBitError> {
        let mut g = core::mem::take(&mut self.scratch);
        g.clear();
        g.extend_from_slice(grad);
        let reduced = comm.all_reduce_sum(&mut g);
        if let Err(e) = reduced {
            self.scratch = g;
            return Err(e.into());
        }
        let pf = comm.size() as f32;
        for v in &mut g {
            *v /= pf;
        }
        let c = self.config;
        let (b1, b2) = (c.beta1, c.beta2);
        let mut u = core::mem::take(&mut self.scratch_u);
        for group in &mut self.groups {
            let r = group.range.clone();
            let wd = group.spec.weight_decay.unwrap_or(c.weight_decay);
            let (m, v, z) = (
                &mut self.m[r.clone()],
                &mut self.v[r.clone()],
                &mut self.zero[r.clone()],
            );
            let (x, g) = (&mut x[r.clone()], &g[r]);
            u.clear();
            for i in 0..x.len() {
                z[i] &= g[i] == 0.0;
                m[i] = b1 * m[i] + (1.0 - b1) * g[i];
                v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
                u.push(with_decay(m[i] / (Float::sqrt(v[i]) + c.eps), wd, x[i]));
            }
            let (wn, un) = (norm(x), norm(&u));
            let mut coeff = 1.0;
            if wn != 0.0 && un != 0.0 {
                coeff = (wn / un).clamp(c.min_coeff, c.max_coeff);
            }
            if coeff != 1.0 {
                group.coeff_avg = c.coeff_beta * group.coeff_avg + (1.0 - c.coeff_beta) * coeff;
            }
            group.last_coeff = coeff;
            apply(x, &u, c.lr, coeff);
        }
        self.scratch = g;
        self.scratch_u = u;
        Ok(())
    }

    /// The compression stage (see the module docs).
    fn compressed(
        &mut self,
        comm: &mut dyn Communicator,
        x: &mut [f32],
        grad: &[f32],
    ) -> Result<(), OneBitError> {
        let c = self.config;
        let (b1, b2) = (c.beta1, c.beta2);
        let first = self.groups.iter().any(|g| g.scaling.is_none());
        let scaling = if first {
            self.momentum_scaling()
        } else {
            self.groups
                .iter()
                .map(|g| g.scaling.unwrap_or(1.0))
                .collect()
        };
        // The local momentum, scaled per group, back to back.
        let mut buf = core::mem::take(&mut self.scratch);
        buf.clear();
        for (group, &s) in self.groups.iter().zip(&scaling) {
            let r = group.range.clone();
            buf.extend(
                self.m[r.clone()]
                    .iter()
                    .zip(&grad[r.clone()])
                    .zip(&self.zero[r])
                    .filter(|(_, z)| !**z)
                    .map(|((&m, &g), _)| (b1 * m + (1.0 - b1) * g) * s),
            );
        }
        let reduced = allreduce::reduce_counted(comm, &mut buf, None, &mut self.allreduce);
        if let Err(e) = reduced {
            self.scratch = buf;
            return Err(e);
        }
        // Agreed and reduced: from here on nothing can fail.
        if first {
            self.v_fresh.clone_from(&self.v);
            for (group, &s) in self.groups.iter_mut().zip(&scaling) {
                group.scaling = Some(s);
            }
        }
        let mut u = core::mem::take(&mut self.scratch_u);
        // The live coordinates' reduced values, in order.
        let mut y = buf.iter();
        for (group, &s) in self.groups.iter_mut().zip(&scaling) {
            let r = group.range.clone();
            let wd = group.spec.weight_decay.unwrap_or(c.weight_decay);
            let (m, v, vf, x, z) = (
                &mut self.m[r.clone()],
                &self.v[r.clone()],
                &mut self.v_fresh[r.clone()],
                &mut x[r.clone()],
                &self.zero[r],
            );
            // `u` holds `p = m/d`; `factor` the largest `d/d_fresh` over
            // the live coordinates (NaN: none yet).
            u.clear();
            let mut factor = f32::NAN;
            for i in 0..x.len() {
                let m_prev = m[i];
                if !z[i] {
                    // As many live values as live coordinates, by construction.
                    m[i] = y.next().map_or(0.0, |&y| y / s);
                }
                let gh = (m[i] - m_prev * b1) / (1.0 - b1);
                vf[i] = b2 * vf[i] + (1.0 - b2) * gh * gh;
                let d = Float::sqrt(v[i]) + c.eps;
                u.push(m[i] / d);
                if !z[i] {
                    // `f32::max` returns the other operand for a NaN.
                    factor = factor.max(d / (Float::sqrt(vf[i]) + c.eps));
                }
            }
            let mut factor = if factor.is_nan() {
                1.0
            } else {
                f64::from(factor)
            };
            if wd > 0.0 {
                let pn = norm(&u);
                for (u, &x) in u.iter_mut().zip(x.iter()) {
                    *u = with_decay(*u, wd, x);
                }
                let un = norm(&u);
                // `‖u‖ = 0`: DeepSpeed's `min(1.0, nan)` is 1.0.
                let ratio = if un == 0.0 { 1.0 } else { (pn / un).min(1.0) };
                factor = factor * ratio + (1.0 - ratio);
            }
            let factor = factor.clamp(c.factor_min, c.factor_max).clamp(
                group.last_factor * (1.0 - c.factor_threshold),
                group.last_factor * (1.0 + c.factor_threshold),
            );
            group.last_factor = factor;
            let coeff = group.coeff_avg * factor;
            group.last_coeff = coeff;
            apply(x, &u, c.lr, coeff);
        }
        self.scratch = buf;
        self.scratch_u = u;
        Ok(())
    }

    /// `s_k = mean_j(μ_j)/μ_k`, `μ_k = ‖m_k‖₂/√n_k` (1 when `μ_k = 0`).
    fn momentum_scaling(&self) -> Vec<f32> {
        let mu: Vec<f64> = self
            .groups
            .iter()
            .map(|g| norm(&self.m[g.range.clone()]) / Float::sqrt(g.range.len() as f64))
            .collect();
        let united = mu.iter().sum::<f64>() / mu.len() as f64;
        mu.iter()
            .map(|&mu| if mu == 0.0 { 1.0 } else { (united / mu) as f32 })
            .collect()
    }
}

/// `p + λx`, or `p` itself without weight decay (DeepSpeed adds the term
/// only when `λ > 0`, so `p` keeps its bits, `−0.0` included).
fn with_decay(p: f32, wd: f32, x: f32) -> f32 {
    if wd > 0.0 { p + wd * x } else { p }
}

/// `‖x‖₂`: `f64` sum of squares in element order.
fn norm(x: &[f32]) -> f64 {
    Float::sqrt(x.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>())
}

/// `x ← x − (η·c as f32)·u`.
fn apply(x: &mut [f32], u: &[f32], lr: f32, coeff: f64) {
    let s = (f64::from(lr) * coeff) as f32;
    for (x, &u) in x.iter_mut().zip(u) {
        *x -= s * u;
    }
}
