//! When the full-precision warm-up ends: [`FreezePolicy`] (a fixed step, or
//! an automatic one decided from the second moment settling) and the
//! per-optimizer tracker that applies it.
//!
//! The automatic rule compares, every `window` warm-up steps, the Adam
//! denominator's second moment `v̂` of every 1-bit group with a snapshot
//! taken `window` steps earlier: `‖v̂ − v̂_snap‖₁ / ‖v̂‖₁` (f64 sums, groups
//! and elements in order). Below the threshold (and not before `min_step`)
//! the step that measured it is the last warm-up step; `max_step` is the
//! latest one whatever the measure says. `v̂` is `v` divided by its bias
//! correction `1−β₂^{t_v}` when bias correction is on (else `v` itself):
//! the quantity the update divides by. The raw `v` of a bias-corrected run
//! grows like `t` for the first `1/(1−β₂)` steps, so its relative change
//! would measure the step count, not whether the estimate has settled.
//!
//! [`FreezePolicy::Share`] (the default, with [`AutoFreeze::share`]'s
//! parameters; see [`FreezePolicy`] for the measured reason) runs the same
//! rule on the raw `v` (every
//! `bc` taken as 1): for `t ≪ 1/(1−β₂)`, `v_t ≈ (1−β₂)·Σ_{s≤t} g_s²`, so
//! its relative change over `window` steps is the share of the accumulated
//! gradient energy the last `window` steps brought — small once an early
//! burst is over, whatever `v̂`'s `1/t` drift. Its blind spot is the other
//! one: a stationary gradient reads `≈ window/t` and settles only at
//! `t ≈ window/threshold` (a fixed step in disguise there).
//!
//! What the `v̂` rule cannot see: with β₂ near 1, `v̂` is close to the running mean of
//! `g²` over the whole run for the first ~`1/(1−β₂)` steps, so after an
//! early burst of gradient energy it falls like `1/t` and the measure reads
//! `≈ window/(t − window)` whatever comes after: the rule then settles only
//! near `t ≈ window·(1 + 1/threshold)` and, in a shorter run, `max_step`
//! decides (`tests/freeze_burst.rs`; measured on the DeepFM job of
//! `docs/ONEBIT_ADAM.md`, "The automatic freeze on the harness job").
//!
//! No communication: during the warm-up `v` is built from the all-reduced
//! gradient, so it has the same bits on every rank, and so has the decision.
//! The decided step is also part of the layout fingerprint each step's
//! header carries, so ranks that disagreed (a transport whose all-reduce is
//! not bit-identical on every rank) fail together at the next step instead
//! of running different collectives.

use alloc::vec::Vec;

use num_traits::Float;

use crate::OneBitError;

/// When the warm-up ends (see the module docs of `src/freeze.rs`).
///
/// The default is [`FreezePolicy::Share`] with [`AutoFreeze::share`]
/// (since 2026-12-06; [`FreezePolicy::Auto`] with [`AutoFreeze::default`]
/// before). Measured reason (`docs/ONEBIT_ADAM.md`, "The share rule on DLRM
/// and its minimum step", and the DeepFM table of "`auto` against `share`
/// at the default batch"): on the harness job (batch 1024, 4 ranks) it
/// stayed within 0.001 test AUC of f32 Adam on every run measured (DeepFM
/// 200 steps seeds 1–3 and 600 steps seeds 1–2, DLRM 200 and 600 steps
/// seeds 1–3), freezing at steps 20–75 where `auto` sat at its cap on
/// every run (a quarter of the run in the CLI): 2.40–2.91× implied at 200
/// steps against `auto`'s 2.21×.
///
/// ```
/// use onebit_adam::{AutoFreeze, Config, FreezePolicy};
///
/// // The default decides the step itself, by the share rule.
/// assert_eq!(Config::default().freeze, FreezePolicy::Share(AutoFreeze::share()));
/// assert_eq!(FreezePolicy::default(), FreezePolicy::Share(AutoFreeze::share()));
/// // A fixed step, as DeepSpeed's `freeze_step`.
/// let fixed = Config::default().with_freeze_step(400);
/// assert_eq!(fixed.freeze, FreezePolicy::Fixed(400));
/// // A tighter automatic rule.
/// let auto = Config::default().with_freeze(FreezePolicy::Auto(
///     AutoFreeze::default().with_threshold(0.05).with_max_step(2_000),
/// ));
/// assert_eq!(auto.freeze.fixed_step(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum FreezePolicy {
    /// Steps `1..=n` are the warm-up (DeepSpeed's `freeze_step`). Must be ≥ 1.
    Fixed(u64),
    /// The warm-up ends when `v̂` has settled ([`AutoFreeze`]; its
    /// `Default` holds this rule's measured parameters). The default until
    /// 2026-12-06: it can settle only near `t ≈ window·(1 + 1/threshold)`
    /// after an early burst (module docs), so on the harness job its
    /// `max_step` decided every run.
    Auto(AutoFreeze),
    /// The warm-up ends when the gradient's energy burst is over: the same
    /// windows, threshold and bounds as [`FreezePolicy::Auto`], measured on
    /// the *raw* `v` (no bias correction), whose relative change over
    /// `window` steps is, for `t ≪ 1/(1−β₂)`, the share of the accumulated
    /// `Σg²` that the last `window` steps contributed. The default, with
    /// [`AutoFreeze::share`]'s parameters (see the module docs and the
    /// type's docs for the measured reason).
    Share(AutoFreeze),
}

impl Default for FreezePolicy {
    /// `Share(AutoFreeze::share())`: the rule that decided its own step on
    /// every harness run and stayed within 0.001 test AUC of f32 Adam
    /// (the type's docs).
    fn default() -> Self {
        Self::Share(AutoFreeze::share())
    }
}

impl FreezePolicy {
    /// The fixed last warm-up step, `None` for the automatic rules
    /// ([`FreezePolicy::Auto`], [`FreezePolicy::Share`]).
    pub fn fixed_step(&self) -> Option<u64> {
        match *self {
            Self::Fixed(n) => Some(n),
            Self::Auto(_) | Self::Share(_) => None,
        }
    }

    /// The automatic rule's parameters and whether it measures the raw `v`
    /// (`true` for [`FreezePolicy::Share`]); `None` for a fixed step.
    pub(crate) fn rule(&self) -> Option<(AutoFreeze, bool)> {
        match *self {
            Self::Fixed(_) => None,
            Self::Auto(a) => Some((a, false)),
            Self::Share(a) => Some((a, true)),
        }
    }

    /// `Err(Config)` saying which constraint a field breaks.
    pub(crate) fn validate(&self) -> Result<(), OneBitError> {
        match *self {
            Self::Fixed(0) => Err(OneBitError::Config("freeze_step must be >= 1")),
            Self::Fixed(_) => Ok(()),
            Self::Auto(a) | Self::Share(a) => a.validate(),
        }
    }
}

/// The automatic freeze rule's parameters. `Default` (the parameters of
/// [`FreezePolicy::Auto`], not of the default policy, which is
/// [`FreezePolicy::Share`] with [`AutoFreeze::share`]): window 25 steps, threshold 0.05
/// (chosen on a DeepFM tower against fixed fractions over seeds:
/// `docs/ONEBIT_ADAM.md`, "Choosing the automatic freeze"), `min_step` 50,
/// `max_step` 10 000 (a bound, not a measurement: whatever `v` does, a run
/// longer than that compresses; a caller that knows its step budget should
/// lower it, as the CLI does to a quarter of the run).
///
/// ```
/// use onebit_adam::AutoFreeze;
///
/// let a = AutoFreeze::default();
/// assert_eq!((a.window, a.threshold, a.min_step, a.max_step), (25, 0.05, 50, 10_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct AutoFreeze {
    /// Steps between two measures (and between a snapshot and the measure
    /// against it). Must be ≥ 1. Default 25.
    pub window: u64,
    /// Freeze when `‖v̂ − v̂_snap‖₁ / ‖v̂‖₁` is below this. Finite, in
    /// `(0, 1)`. Default 0.05.
    pub threshold: f64,
    /// Never freeze before this step. Must be ≥ 1. Default 50.
    pub min_step: u64,
    /// Freeze at this step at the latest. Must be ≥ `min_step`.
    /// Default 10 000.
    pub max_step: u64,
}

impl Default for AutoFreeze {
    fn default() -> Self {
        Self {
            window: 25,
            threshold: 0.05,
            min_step: 50,
            max_step: 10_000,
        }
    }
}

// onebit-codec's macro, one copy per dependency chain.
onebit_codec::with_setters!(AutoFreeze {
    with_window => window: u64,
    with_threshold => threshold: f64,
    with_min_step => min_step: u64,
    with_max_step => max_step: u64,
});

impl AutoFreeze {
    /// The parameters of [`FreezePolicy::Share`], and so of the default
    /// policy ([`FreezePolicy::default`]): window 5, threshold 0.05,
    /// `min_step` 20, `max_step` 10 000. Window and threshold from the
    /// DeepFM harness trace (`docs/ONEBIT_ADAM.md`, "The automatic freeze on
    /// the harness job": the share of `Σg²` from the last 5 steps read
    /// 0.197, 0.079, 0.0072 at steps 10, 15, 20, so 0.05 separates "burst
    /// still arriving" from "over" with a margin both sides). `min_step` 20
    /// (four windows; 10 before 2026-12-06): "the burst is over" is not "the
    /// frozen `v` is good enough": 8 of 9 measured freezes at steps 10–15
    /// lost 0.0008–0.0020 test AUC (DLRM seed 3 at step 15: −0.0009, at
    /// step 20: +0.0001) while no freeze at 20 or later lost more than
    /// 0.00073 (`docs/ONEBIT_ADAM.md`, "The share rule on DLRM and its
    /// minimum step"). A stationary gradient reads `≈ w/t`, so it settles
    /// at `t ≈ window/threshold` = 100 (`tests/freeze_share.rs`).
    ///
    /// ```
    /// use onebit_adam::AutoFreeze;
    ///
    /// let s = AutoFreeze::share();
    /// assert_eq!((s.window, s.threshold, s.min_step, s.max_step), (5, 0.05, 20, 10_000));
    /// ```
    pub fn share() -> Self {
        Self {
            window: 5,
            threshold: 0.05,
            min_step: 20,
            max_step: 10_000,
        }
    }

    fn validate(&self) -> Result<(), OneBitError> {
        if self.window == 0 {
            return Err(OneBitError::Config("auto freeze window must be >= 1"));
        }
        if !(self.threshold.is_finite() && self.threshold > 0.0 && self.threshold < 1.0) {
            return Err(OneBitError::Config(
                "auto freeze threshold must be finite and in (0, 1)",
            ));
        }
        if self.min_step == 0 {
            return Err(OneBitError::Config("auto freeze min_step must be >= 1"));
        }
        if self.max_step < self.min_step {
            return Err(OneBitError::Config(
                "auto freeze max_step must be >= min_step",
            ));
        }
        Ok(())
    }
}

/// One optimizer's progress through its [`FreezePolicy`].
#[derive(Debug, Clone, Default)]
pub(crate) struct FreezeTracker {
    /// The last warm-up step once known (a fixed policy knows it from the
    /// start).
    pub(crate) frozen_at: Option<u64>,
    /// `v̂` of every 1-bit group, back to back in group order, at step
    /// `snapshot_at`; empty when there is none (freed at the freeze).
    pub(crate) snapshot: Vec<f32>,
    /// The step the snapshot was taken at (`None`: no snapshot).
    pub(crate) snapshot_at: Option<u64>,
    /// The last relative change measured (diagnostics; `None` before the
    /// first measure).
    pub(crate) last_change: Option<f64>,
}

impl FreezeTracker {
    /// The tracker of a fresh optimizer under `policy`.
    pub(crate) fn new(policy: FreezePolicy) -> Self {
        Self {
            frozen_at: policy.fixed_step(),
            ..Self::default()
        }
    }

    /// Whether step `t` (1-based) is a warm-up step.
    pub(crate) fn is_warmup(&self, t: u64) -> bool {
        self.frozen_at.is_none_or(|f| t <= f)
    }

    /// After warm-up step `t` updated `v`: measure, decide, re-snapshot.
    /// `vhat` yields each 1-bit group's `(v, bias correction)` in order.
    /// The unfused form of [`Self::plan`] + [`Self::settle`] (which hold
    /// the decisions): here the measure is a separate sweep over `v̂`.
    pub(crate) fn observe<'a>(
        &mut self,
        policy: &FreezePolicy,
        t: u64,
        vhat: impl Iterator<Item = (&'a [f32], f32)> + Clone,
    ) {
        let planned = self.plan(policy, t);
        let mut sums = (0.0, 0.0);
        if let Some(compare) = planned {
            if compare {
                sums = change_sums(&self.snapshot, vhat.clone());
            }
            self.snapshot.clear();
            for (v, bc) in vhat {
                self.snapshot.extend(v.iter().map(|&v| v / bc));
            }
        }
        self.settle(policy, t, planned, sums);
    }

    /// What warm-up step `t`'s own pass must do for the automatic rule
    /// (the fused form of [`Self::observe`], `src/fused.rs`): `None`,
    /// nothing; `Some(compare)`, write `v̂` into the snapshot (sized by the
    /// caller) and, when `compare`, sum its change against the old one.
    pub(crate) fn plan(&self, policy: &FreezePolicy, t: u64) -> Option<bool> {
        let (a, _) = policy.rule()?;
        if self.frozen_at.is_some() || !t.is_multiple_of(a.window) {
            return None;
        }
        Some(self.snapshot_at.is_some() && self.snapshot_at == t.checked_sub(a.window))
    }

    /// After warm-up step `t` whose pass did [`Self::plan`]'s `planned`
    /// (the snapshot then already holds `v̂` of step `t`), with the sums
    /// `(Σ|v̂ − snap|, Σ|v̂|)` it measured: freeze when the change has
    /// settled or at the last allowed step, else keep the new snapshot.
    pub(crate) fn settle(
        &mut self,
        policy: &FreezePolicy,
        t: u64,
        planned: Option<bool>,
        (diff, norm): (f64, f64),
    ) {
        let Some((a, _)) = policy.rule() else {
            return;
        };
        if self.frozen_at.is_some() {
            return;
        }
        if planned == Some(true) {
            let change = diff / norm;
            self.last_change = Some(change);
            // NaN (`‖v̂‖₁ = 0`: no gradient yet) is never "settled".
            if t >= a.min_step && change < a.threshold {
                self.freeze(t);
                return;
            }
        }
        if t >= a.max_step {
            self.freeze(t);
            return;
        }
        if planned.is_some() {
            self.snapshot_at = Some(t);
        }
    }

    fn freeze(&mut self, t: u64) {
        self.frozen_at = Some(t);
        // The snapshot is only needed during the warm-up: give it back.
        self.snapshot = Vec::new();
        self.snapshot_at = None;
    }
}

/// `(‖v̂ − snap‖₁, ‖v̂‖₁)` in f64, elements in order (the same bits on every
/// rank); `v̂ = v / bc` in f32, as the snapshot stores it. Their quotient
/// is the relative change [`FreezeTracker::settle`] judges.
pub(crate) fn change_sums<'a>(
    snap: &[f32],
    vhat: impl Iterator<Item = (&'a [f32], f32)>,
) -> (f64, f64) {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    let mut k = 0;
    for (v, bc) in vhat {
        for (&v, &s) in v.iter().zip(&snap[k..k + v.len()]) {
            let now = f64::from(v / bc);
            diff += Float::abs(now - f64::from(s));
            norm += Float::abs(now);
        }
        k += v.len();
    }
    (diff, norm)
}
