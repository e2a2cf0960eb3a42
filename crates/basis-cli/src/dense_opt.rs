//! The data-parallel dense optimizer of `--workers P` runs
//! (`--dense-opt`), over the three optimizers of `onebit-adam`: f32 Adam
//! and 1-bit Adam ([`OneBitAdam`]; `adam` is its all-full-precision
//! group), 0/1 Adam ([`ZeroOneAdam`]) and 1-bit LAMB ([`OneBitLamb`]).
//! The training loops (replicated and row-sharded) and the sharded
//! checkpoint see only [`DenseOptimizer`]: one step, the freeze step,
//! the state record, the rank unbinding.
//!
//! How the CLI sets the new optimizers' knobs (a run of `T` steps,
//! `--dense-warmup` giving `W` steps, see [`zero_one_config`]):
//! * 0/1 Adam: `var_freeze_step = W` (`auto`: [`AUTO_MAX_FRACTION`] of
//!   `T`, since 0/1 Adam has no settled-`v` criterion; its `v` is refreshed
//!   on the thinning schedule `T_v` anyway), `κ = 8`
//!   ([`VAR_UPDATE_SCALER`]; DeepSpeed's 16 spends most of a short run's
//!   bytes on variance steps, 4 costs DLRM AUC), the local-step interval doubling every
//!   [`LOCAL_STEP_SCALER`] steps after the freeze (a fixed count, as
//!   DeepSpeed's 32 678: a short job synchronises every step, where local
//!   steps cost it AUC, and a long one still takes them) up to `H = 4`
//!   ([`LOCAL_STEP_CLIPPER`]; DeepSpeed's 16 lost 0.0013 test AUC on
//!   DeepFM), the
//!   preconditioned, clamped variant (the paper's diverges on DeepFM), and
//!   `--dense-warmup-reduce` ([`DenseWarmupReduce`], `bf16` by default) as
//!   the all-reduce of its variance steps, as of 1-bit Adam's warm-up: the
//!   flag governs the full-precision steps of both (f32 variance steps made
//!   0/1 Adam send more dense bytes than 1-bit Adam on the harness's DeepFM
//!   tower, 265 MB against 231 MB per rank).
//! * 1-bit LAMB: one LAMB group per tower layer (`Tower::dense_layers`;
//!   the whole dense vector for the FM), the warm-up as 1-bit Adam's
//!   ([`onebit_adam::FreezePolicy`] from `--dense-warmup`).
//! * f32 Adam (`adam`): no freeze at all ([`PLAIN_ADAM_FREEZE`]), so its
//!   state carries no decided step and nothing derived from the run's
//!   length: it resumes with another `--epochs` (to train longer) exactly.
//!
//! The 1-bit optimizers' schedules (the automatic warm-up's cap, a fixed
//! fraction, 0/1 Adam's `var_freeze_step` and local-step scaler) are
//! derived from the run's length `T` = batches per epoch × `--epochs`, and
//! their state records store them: a checkpoint resumed with another
//! `--epochs` would continue on another schedule than the saved run's, so
//! its import is refused ([`ImportError::Epochs`], naming both runs'
//! `--epochs`) instead of approximated.

use crate::deep::{AUTO_MAX_FRACTION, DenseOpt, DensePolicy, DenseWarmup, LayerRole};
use comm_traits::{Communicator, NonBlocking};
use onebit_adam::{
    FreezePolicy, GroupSpec, LambConfig, LambGroup, OneBitAdam, OneBitLamb, SplitStep, StateError,
    StepReport, WarmupReduce, ZeroOneAdam, ZeroOneConfig, ZeroOneStage,
};

/// `--dense-groups`: how 1-bit Adam (`adam`, `onebit-adam`) splits the
/// dense parameters into groups, each with its own compression scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum DenseGroups {
    /// One group for the tower (adjacent layers of one `--dense-policy`
    /// merged): the results of the runs before the option. The default.
    #[default]
    Tower,
    /// One group per tower layer (one scale per layer: different bits
    /// from `tower` once compressed; with `--dense-overlap on` each
    /// layer's exchange starts as soon as the backward pass has finished
    /// that layer, [`Hook`]).
    Layer,
}

/// `--dense-warmup-reduce`: how 1-bit Adam's warm-up and 0/1 Adam's
/// variance steps all-reduce the gradients ([`WarmupReduce`]:
/// `Config::warmup_reduce`, `ZeroOneConfig::variance_reduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum DenseWarmupReduce {
    /// `f32` sums: DeepSpeed's full-precision stage exactly.
    F32,
    /// bfloat16 gradients, `f32` sums, bfloat16 means: half the bytes.
    #[default]
    Bf16,
}

impl DenseWarmupReduce {
    /// `onebit-adam`'s value.
    pub(crate) fn library(self) -> WarmupReduce {
        match self {
            Self::F32 => WarmupReduce::F32,
            Self::Bf16 => WarmupReduce::Bf16,
        }
    }
}

/// `--dense-overlap`: whether the dense step of a `--workers P` run starts
/// its collectives inside the backward pass ([`Hook`]) and completes them
/// after the sparse work of the step (1-bit Adam's split step on a
/// communication thread), or waits for them where it stands (the blocking
/// step). The bits are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum DenseOverlap {
    /// The split step on a communication thread (`basis_std::overlap`).
    On,
    /// The blocking step, no communication thread. The default: the
    /// split step was not measured faster (docs/DISTRIBUTED.md).
    #[default]
    Off,
}

/// A dense step begun by [`Hook::begun`]: 1-bit Adam's split
/// step in flight, or nothing (the blocking step runs in
/// [`DenseOptimizer::complete`]).
#[derive(Debug, Default)]
pub(crate) struct Begun(Option<SplitStep>);

/// A dense step being begun group by group from inside the backward pass
/// ([`DenseOptimizer::hook`]): each group starts as soon as a finished
/// range covering it is offered, so its compression and exchange run while
/// the rest of the backward pass does. Every rank runs the same model, so
/// every rank offers the same ranges in the same order and begins the
/// groups in the same order (the split step's contract; bits do not
/// depend on the order).
pub(crate) struct Hook<'a> {
    /// The optimizer whose groups are begun.
    opt: &'a mut Opt,
    /// The communicator the groups' requests go to.
    comm: &'a mut dyn NonBlocking,
    /// The step in flight.
    split: SplitStep,
    /// Each group's range in the dense vector (empty: not 1-bit Adam).
    ranges: Vec<core::ops::Range<usize>>,
    /// Whether each group has been begun.
    started: Vec<bool>,
    /// The gradient multiplier (as [`DenseOptimizer::step`]'s).
    factor: f32,
    /// The first begin failure (a transport error): later offers begin
    /// nothing and [`Hook::begun`] reports it.
    failed: Option<String>,
}

impl Hook<'_> {
    /// `grad` is the finished gradient over `range` of the dense vector
    /// (the caller never writes it again): begin every group not yet begun
    /// that lies inside `range`, highest first (the order the backward
    /// pass produces them).
    pub(crate) fn offer(&mut self, range: core::ops::Range<usize>, grad: &[f32]) {
        let Opt::OneBit(o) = &mut *self.opt else {
            return;
        };
        for gi in (0..self.ranges.len()).rev() {
            let r = &self.ranges[gi];
            if self.failed.is_some()
                || self.started[gi]
                || r.start < range.start
                || r.end > range.end
            {
                continue;
            }
            let g = grad
                .get(r.start - range.start..r.end - range.start)
                .unwrap_or(&[]);
            self.started[gi] = true;
            if let Err(e) = o.begin_group(self.comm, &mut self.split, gi, g, self.factor) {
                self.failed = Some(e.to_string());
            }
        }
    }

    /// Begin the groups no offer covered, from the whole gradient `grad`,
    /// and hand the step to [`DenseOptimizer::complete`].
    ///
    /// Fails (on every rank) on a group the optimizer refuses to begin, or
    /// a transport failure; a bad gradient fails in
    /// [`DenseOptimizer::complete`].
    pub(crate) fn begun(mut self, grad: &[f32]) -> Result<Begun, String> {
        if !matches!(self.opt, Opt::OneBit(_)) {
            return Ok(Begun(None));
        }
        self.offer(0..grad.len(), grad);
        // Groups beyond a short gradient: an empty slice, so `finish`
        // reports the length on every rank.
        let Opt::OneBit(o) = &mut *self.opt else {
            return Ok(Begun(None));
        };
        for gi in (0..self.ranges.len()).rev() {
            if self.failed.is_none() && !self.started[gi] {
                self.started[gi] = true;
                if let Err(e) = o.begin_group(self.comm, &mut self.split, gi, &[], self.factor) {
                    self.failed = Some(e.to_string());
                }
            }
        }
        match self.failed {
            Some(e) => Err(e),
            None => Ok(Begun(Some(self.split))),
        }
    }
}

/// `--dense-warmup`'s default: the variant of `onebit-adam`'s own default
/// ([`FreezePolicy::default`], the share rule since issue 28 item 5), so
/// the CLI keeps no second copy of it: `share` for
/// [`FreezePolicy::Share`], `auto` for [`FreezePolicy::Auto`]. Both take
/// their parameters from the library ([`DenseWarmup::policy`]: the same
/// rule, capped at a quarter of the run), so for a run long enough for the
/// cap not to bind the CLI's default policy *is* the library's (the test
/// `the_default_warmup_is_the_library_default`).
pub(crate) fn default_warmup() -> DenseWarmup {
    match FreezePolicy::default() {
        FreezePolicy::Share(_) => DenseWarmup::Share,
        // `Auto`, and a fixed step (or a future rule), which `--dense-warmup`
        // can only say as a fraction of the run: the `v̂` rule then, and
        // `the_default_warmup_is_the_library_default` fails on the
        // difference.
        _ => DenseWarmup::Auto,
    }
}

/// The freeze policy of `--dense-opt adam` (one full-precision group:
/// nothing ever compresses): a fixed step no run reaches, the same for
/// every run length. Built through [`DenseOpt::build`] it would get
/// `--dense-warmup`'s policy, whose cap (a quarter of the run) and decided
/// step would be stored in the state, tie plain Adam's checkpoints to
/// `--epochs` and mean nothing.
pub(crate) const PLAIN_ADAM_FREEZE: FreezePolicy = FreezePolicy::Fixed(u64::MAX);

/// A run's length as the 1-bit schedules see it: `T` = batches per epoch
/// × `--epochs` steps (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunLength {
    /// Steps (batches) of one epoch.
    pub(crate) batches_per_epoch: u64,
    /// `--epochs`.
    pub(crate) epochs: u32,
}

impl RunLength {
    /// `T`, the run's steps.
    pub(crate) fn steps(self) -> u64 {
        self.batches_per_epoch
            .saturating_mul(u64::from(self.epochs))
    }
}

/// Why [`DenseOptimizer::import_state`] refused a record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ImportError {
    /// The library's refusal (a damaged record, another optimizer or
    /// layout).
    State(StateError),
    /// A 1-bit optimizer's record of a run of another length: its schedule
    /// (`field` = `saved` steps, this run's `here`) is derived from
    /// `--epochs` (module docs), which the resume fingerprint leaves out so
    /// that `--dense-opt adam` can train longer. `saved_epochs` is the one
    /// `--epochs` whose schedule gives `saved` at this run's batches per
    /// epoch (`None`: none or several do).
    Epochs {
        /// The schedule's field (`onebit_adam::StateError::Schedule`).
        field: &'static str,
        /// Its value in the record.
        saved: u64,
        /// Its value in this run.
        here: u64,
        /// The saved run's `--epochs`, when one gives `saved`.
        saved_epochs: Option<u32>,
        /// This run's `--epochs`.
        epochs: u32,
    },
}

impl core::fmt::Display for ImportError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::State(e) => write!(f, "{e}"),
            Self::Epochs {
                field,
                saved,
                here,
                saved_epochs,
                epochs,
            } => {
                let theirs = match saved_epochs {
                    Some(e) => format!("--epochs {e}"),
                    None => "another --epochs".to_string(),
                };
                write!(
                    f,
                    "the saved run's 1-bit schedule ({field} {saved}) is that of {theirs}, this run has --epochs {epochs} ({field} {here}): the warm-up/freeze steps are derived from the run's length (batches per epoch × --epochs) and a 1-bit schedule cannot be stretched exactly; resume with {theirs} (`--dense-opt adam` can be resumed to train longer)"
                )
            }
        }
    }
}

impl core::error::Error for ImportError {}

/// The plain-Adam optimizer of `built`'s groups (all full precision) with
/// [`PLAIN_ADAM_FREEZE`].
fn without_freeze(built: &OneBitAdam) -> Result<OneBitAdam, String> {
    let groups: Vec<GroupSpec> = built
        .group_ranges()
        .into_iter()
        .map(|r| GroupSpec::full_precision(r.len()))
        .collect();
    // f32 Adam's gradients are all-reduced in f32 at every step (its steps
    // all count as warm-up under the never-reached freeze).
    let config = built
        .config()
        .with_freeze(PLAIN_ADAM_FREEZE)
        .with_warmup_reduce(WarmupReduce::F32);
    OneBitAdam::with_groups(&groups, config).map_err(|e| format!("--dense-opt: {e}"))
}

/// 0/1 Adam's variance steps per doubling of their interval, `κ` (module
/// docs). On the harness's jobs (`cargo xtask mpi --train-bench`: 200
/// steps of 1 024, 4 ranks, the freeze at step 50), seeds 1–3, syncing
/// every step, mean test AUC minus f32 Adam's and dense bytes against
/// 1-bit Adam's: DeepFM `κ = 16` (DeepSpeed's) +0.0001 at 1.40× fewer,
/// `κ = 8` +0.0001 at 1.79×, `κ = 4` −0.0000 at 2.23×; DLRM `κ = 16`
/// +0.0002 at 0.91×, `κ = 8` −0.0001 at 1.17×, `κ = 4` −0.0007 at 1.46×
/// (every seed below 1-bit Adam's, one by 0.0015). The bytes are almost
/// all variance steps; DLRM's tower wants more of them than DeepFM's
/// (docs/DISTRIBUTED.md, "0/1 Adam and 1-bit LAMB").
const VAR_UPDATE_SCALER: u64 = 8;

/// Steps after the freeze per doubling of 0/1 Adam's local-step interval
/// (module docs). On the harness's DeepFM job above (`κ = 16`, seeds
/// 1–3), doubling every `T/20` = 10 steps (the CLI's rule before) reached
/// `H = 4` at step 70 and cost 0.0013 mean test AUC against syncing every
/// step (`H = 2`: 0.0005); 1 000 keeps any job shorter than the freeze
/// plus 1 000 steps free of local steps, and on the 39 063-step DeepFM
/// stream of docs/RESULTS.md (`κ = 4`) 0/1 Adam stayed 0.0005 below f32
/// Adam's test AUC (0.0007 with `T/20`).
const LOCAL_STEP_SCALER: u64 = 1_000;

/// 0/1 Adam's largest local-step interval `H` (module docs): one
/// pass of 10^5 `criteo-synth` examples, DeepFM, 3 seeds, test AUC minus
/// 1-bit Adam's: `H = 16` (DeepSpeed's) −0.0006/−0.0013/−0.0018 at 2.25×
/// fewer bytes, `H = 4` −0.0009/−0.0008/−0.0006 at 2.19×, `H = 2`
/// −0.0002/−0.0007/−0.0005 at 2.10×, `H = 1` (no local steps) ±0.0002 at
/// 1.94× (docs/DISTRIBUTED.md, "0/1 Adam and 1-bit LAMB"): the bytes are
/// the variance steps', so the syncs cost little.
const LOCAL_STEP_CLIPPER: u64 = 4;

/// One of the dense optimizers (module docs), with what its schedule was
/// derived from.
#[derive(Debug, Clone)]
pub(crate) struct DenseOptimizer {
    /// The optimizer.
    opt: Opt,
    /// How [`DenseOptimizer::build`] derived the 1-bit schedule (`None`:
    /// built from a ready optimizer, [`DenseOptimizer::from`]), to name the
    /// saved run's `--epochs` when a record's schedule differs.
    schedule: Option<(DenseOpt, RunLength, DenseWarmup, f32)>,
}

impl From<OneBitAdam> for DenseOptimizer {
    /// `opt` as it is (the single process's plain Adam): no run length.
    fn from(opt: OneBitAdam) -> Self {
        Self {
            opt: Opt::OneBit(opt),
            schedule: None,
        }
    }
}

/// The optimizers of [`DenseOptimizer`].
#[derive(Debug, Clone)]
enum Opt {
    /// `adam` (one full-precision group) or `onebit-adam`.
    OneBit(OneBitAdam),
    /// `zero-one-adam`, with `--dense-lr` (the base of its bias-corrected
    /// learning rate, [`bias_corrected_lr`]).
    ZeroOne(ZeroOneAdam, f32),
    /// `onebit-lamb`, with the scaled-gradient copy it steps on (LAMB has
    /// no scaled step; reused across steps). Boxed: twice the others' size.
    Lamb(Box<OneBitLamb>, Vec<f32>),
}

/// What one [`DenseOptimizer::step`] did on this rank.
#[derive(Debug, Clone)]
pub(crate) struct DenseStep {
    /// Bytes this rank sent in the step's collectives (header included).
    pub(crate) bytes_sent: u64,
    /// 1-bit Adam's per-group report (`None` for the other optimizers).
    pub(crate) report: Option<StepReport>,
    /// The stage, for the progress line: `warmup`/`compressed` (1-bit Adam,
    /// 1-bit LAMB) or `variance`/`1bit-grad`/`local`/`sync` (0/1 Adam).
    pub(crate) stage: &'static str,
}

impl DenseStep {
    /// The progress-line field: 1-bit Adam's per-group telemetry, the
    /// stage and bytes otherwise.
    pub(crate) fn progress_field(&self) -> String {
        match &self.report {
            Some(r) => crate::dense_telemetry::progress_field(r),
            None => format!("{} {}B", self.stage, self.bytes_sent),
        }
    }
}

/// 1-bit Adam's [`DenseStep`] from its report.
fn one_bit_step(r: StepReport) -> DenseStep {
    DenseStep {
        bytes_sent: r.bytes.bytes_sent,
        stage: if r.stage == onebit_adam::Stage::Warmup {
            "warmup"
        } else {
            "compressed"
        },
        report: Some(r),
    }
}

/// 0/1 Adam's hyper-parameters for a run of `steps_total` steps, its
/// variance steps reduced by `reduce` (module docs).
pub(crate) fn zero_one_config(
    lr: f32,
    steps_total: u64,
    warmup: DenseWarmup,
    reduce: WarmupReduce,
) -> ZeroOneConfig {
    let fraction = match warmup {
        DenseWarmup::Auto | DenseWarmup::Share => AUTO_MAX_FRACTION,
        DenseWarmup::Fraction(f) => f,
    };
    // Truncation, as `DenseWarmup::policy` does.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let freeze = ((steps_total as f64 * fraction) as u64).max(1);
    ZeroOneConfig::default()
        .with_lr(lr)
        .with_var_freeze_step(freeze)
        .with_var_update_scaler(VAR_UPDATE_SCALER)
        .with_local_step_scaler(LOCAL_STEP_SCALER)
        .with_local_step_clipper(LOCAL_STEP_CLIPPER)
        // The paper's stages divide 1-bit values by `d`: the DeepFM tower
        // diverged at step 215 of 391 (NaN loss, seed 1), 118 steps after
        // the freeze. The preconditioned, clamped variant keeps each step
        // Adam-sized (`onebit_adam::ZeroOneConfig::preconditioned`).
        .with_preconditioned(true)
        .with_variance_reduce(reduce)
}

/// The learning rate of 0/1 Adam's step `t` (1-based) for `--dense-lr`
/// `lr`: `lr·√(1−β₂^k)/(1−β₁^t)`, `k` the variance steps up to `t`
/// (`v`'s updates; frozen after `var_freeze_step`) — Adam's bias
/// correction, as the CLI's 1-bit Adam has it, folded into the learning
/// rate (0/1 Adam has none: its synchronisation divides by the sum of the
/// rates actually used, so a schedule is exact). Without it the first
/// steps are up to 6× `lr`, and DeepFM ended 0.003 below 1-bit Adam's test
/// AUC (seed 1; with `--dense-lr` halved it matched).
pub(crate) fn bias_corrected_lr(c: &ZeroOneConfig, t: u64, lr: f32) -> f32 {
    // T_v: `κ` steps at each spacing 1, 2, 4, …, each the next multiple of
    // the spacing after the previous one (the reference's closed form).
    let (mut k, mut prev, mut spacing) = (0u64, 0u64, 1u64);
    let last = t.min(c.var_freeze_step);
    'outer: loop {
        for _ in 0..c.var_update_scaler {
            let next = (prev / spacing + 1) * spacing;
            if next > last {
                break 'outer;
            }
            (k, prev) = (k + 1, next);
        }
        spacing = spacing.saturating_mul(2);
    }
    #[allow(clippy::cast_precision_loss, reason = "exponents up to 2^20: exact")]
    let pow = |b: f32, n: u64| f64::from(b).powf(n.min(1 << 20) as f64);
    let bc1 = 1.0 - pow(c.beta1, t);
    let bc2 = 1.0 - pow(c.beta2, k);
    #[allow(clippy::cast_possible_truncation, reason = "a rate near `lr`")]
    let eta = (f64::from(lr) * bc2.sqrt() / bc1) as f32;
    eta
}

impl DenseOptimizer {
    /// `kind`'s optimizer over `layers` (flat order, adding up to the dense
    /// length) for a run of length `run` (its schedule's `T`); `policy` splits 1-bit
    /// Adam's and 0/1 Adam's groups (`--dense-policy`).
    ///
    /// Fails when `onebit-adam` refuses the configuration (0/1 Adam takes
    /// `1bit` and `full` groups only) or `--dense-policy` is set for an
    /// optimizer without groups of policies (`adam`, `onebit-lamb`).
    pub(crate) fn build(
        kind: DenseOpt,
        layers: &[(usize, LayerRole)],
        groups: (DensePolicy, DenseGroups, DenseWarmupReduce),
        (lr, run, warmup): (f32, RunLength, DenseWarmup),
    ) -> Result<Self, String> {
        build_opt(kind, layers, groups, (lr, run.steps(), warmup)).map(|opt| Self {
            opt,
            schedule: Some((kind, run, warmup, lr)),
        })
    }
}

/// Epochs [`epochs_of_schedule`] tries at most.
const EPOCHS_SEARCHED: u32 = 1 << 20;

/// The `--epochs` whose schedule, at `run`'s batches per epoch, gives the
/// record's `field` = `value` for `kind` under `warmup` (the inverse of
/// [`build_opt`]'s derivation, by trying each epoch count in turn: every
/// field grows with the run's length); `None` when no or several epoch
/// counts give it (a bound such as `AutoFreeze`'s `max_step` of 10 000
/// makes every longer run's equal).
fn epochs_of_schedule(
    kind: DenseOpt,
    (field, value): (&str, u64),
    run: RunLength,
    warmup: DenseWarmup,
    lr: f32,
) -> Option<u32> {
    let field_at = |epochs: u32| -> Option<u64> {
        let t = RunLength { epochs, ..run }.steps();
        if kind == DenseOpt::ZeroOneAdam {
            // The reduce sets none of the schedule's fields.
            let c = zero_one_config(lr, t, warmup, WarmupReduce::F32);
            // `local_step_scaler` is a constant ([`LOCAL_STEP_SCALER`]).
            return (field == "var_freeze_step").then_some(c.var_freeze_step);
        }
        match (field, warmup.policy(t)) {
            ("freeze_step", FreezePolicy::Fixed(n)) => Some(n),
            ("max_step", FreezePolicy::Auto(a) | FreezePolicy::Share(a)) => Some(a.max_step),
            _ => None,
        }
    };
    let mut found = None;
    for epochs in 1..=EPOCHS_SEARCHED {
        let v = field_at(epochs)?;
        if v > value {
            break;
        }
        if v == value {
            if found.is_some() {
                return None;
            }
            found = Some(epochs);
        }
    }
    found
}

/// [`DenseOptimizer::build`]'s optimizer for a run of `steps_total` steps.
fn build_opt(
    kind: DenseOpt,
    layers: &[(usize, LayerRole)],
    (policy, grouping, reduce): (DensePolicy, DenseGroups, DenseWarmupReduce),
    (lr, steps_total, warmup): (f32, u64, DenseWarmup),
) -> Result<Opt, String> {
    let reduce = reduce.library();
    let len = layers.iter().map(|l| l.0).sum();
    let layered = policy != DensePolicy::default();
    if grouping == DenseGroups::Layer
        && matches!(kind, DenseOpt::ZeroOneAdam | DenseOpt::OnebitLamb)
    {
        return Err(format!(
            "--dense-groups layer: for adam and onebit-adam (--dense-opt {kind:?} has its own groups)"
        ));
    }
    match kind {
        DenseOpt::Adam | DenseOpt::OnebitAdam if grouping == DenseGroups::Layer => {
            let base = kind.build(len, lr, (steps_total, warmup), reduce)?;
            // Unmerged: one group per non-empty layer, its policy's
            // (`adam`: full precision everywhere).
            let groups: Vec<GroupSpec> = policy
                .groups_per_layer(layers)
                .into_iter()
                .map(|g| {
                    if kind == DenseOpt::Adam {
                        GroupSpec::full_precision(g.len)
                    } else {
                        g
                    }
                })
                .collect();
            let opt = OneBitAdam::with_groups(&groups, *base.config())
                .map_err(|e| format!("--dense-groups: {e}"))?;
            if kind == DenseOpt::Adam {
                return without_freeze(&opt).map(Opt::OneBit);
            }
            Ok(Opt::OneBit(opt))
        }
        DenseOpt::Adam | DenseOpt::OnebitAdam => {
            let opt = if layered {
                kind.build_layered(layers, policy, lr, (steps_total, warmup), reduce)?
            } else {
                kind.build(len, lr, (steps_total, warmup), reduce)?
            };
            if kind == DenseOpt::Adam {
                return without_freeze(&opt).map(Opt::OneBit);
            }
            Ok(Opt::OneBit(opt))
        }
        DenseOpt::ZeroOneAdam => {
            let config = zero_one_config(lr, steps_total, warmup, reduce);
            let groups = if layered {
                policy.groups(layers)
            } else {
                vec![GroupSpec::one_bit(len)]
            };
            let flag = if layered {
                "--dense-policy"
            } else {
                "--dense-opt"
            };
            ZeroOneAdam::with_groups(&groups, config)
                .map(|o| Opt::ZeroOne(o, lr))
                .map_err(|e| format!("{flag}: {e}"))
        }
        DenseOpt::OnebitLamb => {
            if layered {
                return Err("--dense-policy: 1-bit LAMB compresses all its layers in one 1-bit buffer (a policy per layer is for onebit-adam and zero-one-adam)".into());
            }
            let config = LambConfig::default()
                .with_lr(lr)
                .with_freeze(warmup.policy(steps_total));
            let groups: Vec<LambGroup> = layers
                .iter()
                .filter(|l| l.0 > 0)
                .map(|l| LambGroup::new(l.0))
                .collect();
            OneBitLamb::new(&groups, config)
                .map(|o| Opt::Lamb(Box::new(o), Vec::new()))
                .map_err(|e| format!("--dense-opt: {e}"))
        }
    }
}

impl DenseOptimizer {
    /// One step of `params` with this rank's gradient `grad` times `factor`
    /// (a data-parallel rank's share of the batch gradient times `P`).
    ///
    /// Fails (on every rank, nothing changed, for a step that communicates)
    /// on a non-finite gradient, a length mismatch or a broken group.
    pub(crate) fn step(
        &mut self,
        comm: &mut dyn Communicator,
        params: &mut [f32],
        grad: &[f32],
        factor: f32,
    ) -> Result<DenseStep, String> {
        match &mut self.opt {
            Opt::OneBit(o) => {
                let r = o
                    .step_with_grad_scaled(comm, params, grad, factor)
                    .map_err(|e| e.to_string())?;
                Ok(one_bit_step(r))
            }
            Opt::ZeroOne(o, base_lr) => {
                let lr = bias_corrected_lr(o.config(), o.steps() + 1, *base_lr);
                o.set_lr(lr).map_err(|e| e.to_string())?;
                let r = o
                    .step_with_grad_scaled(comm, params, grad, factor)
                    .map_err(|e| e.to_string())?;
                Ok(DenseStep {
                    bytes_sent: r.bytes.bytes_sent,
                    report: None,
                    stage: match r.stage {
                        ZeroOneStage::Variance => "variance",
                        ZeroOneStage::OneBitGradient => "1bit-grad",
                        ZeroOneStage::Local => "local",
                        _ => "sync",
                    },
                })
            }
            Opt::Lamb(o, scaled) => {
                // The product `OneBitAdam`'s scaled step forms in its pass.
                scaled.clear();
                scaled.extend(grad.iter().map(|g| g * factor));
                let r = o
                    .step_with_grad(comm, params, scaled)
                    .map_err(|e| e.to_string())?;
                Ok(DenseStep {
                    bytes_sent: r.bytes.bytes_sent,
                    report: None,
                    stage: if r.stage == onebit_adam::Stage::Warmup {
                        "warmup"
                    } else {
                        "compressed"
                    },
                })
            }
        }
    }

    /// A [`Hook`] that begins this optimizer's groups on `comm` as the
    /// backward pass hands their gradients over ([`Hook::offer`]); 1-bit
    /// Adam only (the other optimizers' hook begins nothing, and
    /// [`Hook::begun`] then leaves the blocking step to [`Self::complete`]).
    pub(crate) fn hook<'a>(&'a mut self, comm: &'a mut dyn NonBlocking, factor: f32) -> Hook<'a> {
        let ranges = match &self.opt {
            Opt::OneBit(o) => o.group_ranges(),
            _ => Vec::new(),
        };
        Hook {
            started: vec![false; ranges.len()],
            ranges,
            opt: &mut self.opt,
            comm,
            split: SplitStep::default(),
            factor,
            failed: None,
        }
    }

    /// Complete the step [`Hook::begun`] started (`begun`), or run the
    /// blocking [`Self::step`] when it started nothing; `grad` and `factor`
    /// must be the hook's. Every rank must make the same calls on `comm`
    /// in between (on a FIFO communicator they run after the dense
    /// requests begun).
    ///
    /// Fails as [`Self::step`].
    pub(crate) fn complete(
        &mut self,
        comm: &mut dyn NonBlocking,
        begun: Begun,
        params: &mut [f32],
        (grad, factor): (&[f32], f32),
    ) -> Result<DenseStep, String> {
        if let (Opt::OneBit(o), Some(split)) = (&mut self.opt, begun.0) {
            let r = o.finish(comm, split, params).map_err(|e| e.to_string())?;
            return Ok(one_bit_step(r));
        }
        self.step(comm, params, grad, factor)
    }

    /// The last full-precision (1-bit Adam, 1-bit LAMB) or `v`-updating
    /// (0/1 Adam) step, once the run has reached it; `None` for `adam`,
    /// whose group never compresses.
    pub(crate) fn freeze_step_reached(&self, kind: DenseOpt) -> Option<u64> {
        let (t, steps) = match &self.opt {
            Opt::OneBit(o) => (o.frozen_at()?, o.steps()),
            Opt::ZeroOne(o, _) => (o.config().var_freeze_step, o.steps()),
            Opt::Lamb(o, _) => (o.frozen_at()?, o.steps()),
        };
        (kind != DenseOpt::Adam && t <= steps).then_some(t)
    }

    /// The optimizer's versioned, checksummed state record.
    pub(crate) fn export_state(&self) -> Vec<u8> {
        match &self.opt {
            Opt::OneBit(o) => o.export_state(),
            Opt::ZeroOne(o, _) => o.export_state(),
            Opt::Lamb(o, _) => o.export_state(),
        }
    }

    /// Restore a record of [`Self::export_state`].
    ///
    /// Fails, with nothing changed, on a damaged record, one of another
    /// optimizer or layout ([`ImportError::State`]), and on a 1-bit
    /// optimizer's record whose schedule is another run length's
    /// ([`ImportError::Epochs`]: resumed with another `--epochs`).
    pub(crate) fn import_state(&mut self, bytes: &[u8]) -> Result<(), ImportError> {
        let r = match &mut self.opt {
            Opt::OneBit(o) => o.import_state(bytes),
            Opt::ZeroOne(o, _) => o.import_state(bytes),
            Opt::Lamb(o, _) => o.import_state(bytes),
        };
        r.map_err(|e| match (e, self.schedule) {
            (StateError::Schedule { field, saved, here }, Some((kind, run, warmup, lr))) => {
                ImportError::Epochs {
                    field,
                    saved,
                    here,
                    saved_epochs: epochs_of_schedule(kind, (field, saved), run, warmup, lr),
                    epochs: run.epochs,
                }
            }
            (e, _) => ImportError::State(e),
        })
    }

    /// Release the state's rank binding so it can continue on another group
    /// size (resharding).
    ///
    /// Fails when the state holds per-rank parts: 1-bit Adam's error
    /// feedback once compression has begun; 0/1 Adam and 1-bit LAMB are
    /// always refused (their error feedback starts early, and 0/1 Adam's
    /// local steps make each rank's parameters its own).
    pub(crate) fn unbind(&mut self) -> Result<(), String> {
        match &mut self.opt {
            Opt::OneBit(o) => o.unbind().map_err(|e| {
                format!("{e}: 1-bit Adam's error-feedback buffers are per rank and cannot move to another group size exactly")
            }),
            Opt::ZeroOne(..) => Err("0/1 Adam's state is per rank (error feedback, and parameters that differ between synchronisations) and cannot move to another group size exactly".into()),
            Opt::Lamb(..) => Err("1-bit LAMB's state (error feedback once compression has begun) is per rank and cannot move to another group size exactly".into()),
        }
    }
}

impl DenseOptimizer {
    /// Whether the ranks' dense parameters may differ (0/1 Adam's local
    /// steps), so that evaluation must use one rank's ([`rank0_dense`]).
    pub(crate) fn params_per_rank(&self) -> bool {
        matches!(self.opt, Opt::ZeroOne(..))
    }
}

/// Replace `dense` with rank 0's copy (an all-gather) and return this
/// rank's own, so a sharded evaluation scores one model — rank 0's, the
/// one the run reports — on every rank's share of the examples.
///
/// Fails when the all-gather does.
pub(crate) fn rank0_dense(
    comm: &mut dyn Communicator,
    dense: &mut Vec<f32>,
) -> Result<Vec<f32>, String> {
    let mine: Vec<u8> = dense.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut all = vec![0u8; mine.len() * comm.size()];
    comm.all_gather(&mine, &mut all)
        .map_err(|e| format!("rank {}: dense parameters of rank 0: {e}", comm.rank()))?;
    let first: Vec<f32> = all[..mine.len()]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(core::mem::replace(dense, first))
}

#[cfg(test)]
mod tests {
    use super::{DenseOptimizer, Opt, RunLength, bias_corrected_lr, zero_one_config};
    use crate::deep::{DenseOpt, DensePolicy, DenseWarmup, LayerRole};
    use onebit_adam::ZeroOneStage;
    use onebit_adam::reference_zero_one::ZeroOneSim;

    /// A run of `steps` steps in one epoch.
    fn one_epoch(steps: u64) -> RunLength {
        RunLength {
            batches_per_epoch: steps,
            epochs: 1,
        }
    }

    /// `--dense-warmup-reduce`: `bf16` by default and as parsed, `f32` when
    /// named; `onebit-adam` gets it in its config, in every grouping, and
    /// `zero-one-adam` as its variance steps' reduce; `adam` (the f32
    /// baseline) reduces in f32 whatever it says.
    #[test]
    fn the_warmup_reduce_reaches_one_bit_and_zero_one_adam() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        use onebit_adam::WarmupReduce;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["basis", "train", "--model", "deepfm", "--workers", "2"];
            argv.extend_from_slice(extra);
            match Cli::try_parse_from(argv).map(|c| c.command) {
                Ok(Command::Train(a)) => Ok(a.model.dense_warmup_reduce),
                Ok(_) => unreachable!("a train command"),
                Err(e) => Err(e.to_string()),
            }
        };
        assert_eq!(parse(&[]), Ok(super::DenseWarmupReduce::Bf16));
        assert_eq!(
            parse(&["--dense-warmup-reduce", "f32"]),
            Ok(super::DenseWarmupReduce::F32)
        );
        assert!(parse(&["--dense-warmup-reduce", "fp16"]).is_err());
        let layers = [(30, LayerRole::First), (10, LayerRole::Last)];
        for (reduce, want) in [
            (super::DenseWarmupReduce::Bf16, WarmupReduce::Bf16),
            (super::DenseWarmupReduce::F32, WarmupReduce::F32),
        ] {
            for grouping in [super::DenseGroups::Tower, super::DenseGroups::Layer] {
                for (kind, expect) in [
                    (DenseOpt::OnebitAdam, want),
                    (DenseOpt::Adam, WarmupReduce::F32),
                ] {
                    let built = DenseOptimizer::build(
                        kind,
                        &layers,
                        (DensePolicy::default(), grouping, reduce),
                        (1e-3, one_epoch(100), DenseWarmup::Auto),
                    )
                    .unwrap();
                    let Opt::OneBit(opt) = built.opt else {
                        panic!("{kind:?}: not 1-bit Adam's optimizer")
                    };
                    assert_eq!(
                        opt.config().warmup_reduce,
                        expect,
                        "{kind:?} {grouping:?} {reduce:?}"
                    );
                }
            }
            // 0/1 Adam has its own groups (`--dense-groups tower` only).
            for policy in [
                DensePolicy::default(),
                DensePolicy::parse("last=full").unwrap(),
            ] {
                let built = DenseOptimizer::build(
                    DenseOpt::ZeroOneAdam,
                    &layers,
                    (policy, super::DenseGroups::Tower, reduce),
                    (1e-3, one_epoch(100), DenseWarmup::Auto),
                )
                .unwrap();
                let Opt::ZeroOne(opt, _) = built.opt else {
                    panic!("zero-one-adam: not 0/1 Adam's optimizer")
                };
                assert_eq!(opt.config().variance_reduce, want, "{policy:?} {reduce:?}");
            }
        }
    }

    /// `--dense-warmup`'s default is `onebit-adam`'s: an argv without the
    /// option parses to [`super::default_warmup`], and the optimizers it
    /// builds (1-bit Adam and 1-bit LAMB) carry exactly
    /// [`onebit_adam::FreezePolicy::default`] once the run is long enough
    /// for the quarter-of-the-run cap not to bind, and that rule with the
    /// cap below it.
    #[test]
    fn the_default_warmup_is_the_library_default() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        use onebit_adam::FreezePolicy;
        let argv = ["basis", "train", "--model", "deepfm", "--workers", "2"];
        let parsed = match Cli::try_parse_from(argv).unwrap().command {
            Command::Train(a) => a.model.dense_warmup,
            _ => unreachable!("a train command"),
        };
        assert_eq!(parsed, super::default_warmup());
        let library = FreezePolicy::default();
        let rule = match library {
            FreezePolicy::Auto(a) | FreezePolicy::Share(a) => a,
            other => panic!("{other:?}: not a rule --dense-warmup can name"),
        };
        let built = |steps: u64| {
            let layers = [(30, LayerRole::First), (10, LayerRole::Last)];
            let groups = (
                DensePolicy::default(),
                super::DenseGroups::Tower,
                super::DenseWarmupReduce::default(),
            );
            let warm = (1e-3, one_epoch(steps), parsed);
            let adam = DenseOptimizer::build(DenseOpt::OnebitAdam, &layers, groups, warm);
            let lamb = DenseOptimizer::build(DenseOpt::OnebitLamb, &layers, groups, warm);
            match (adam.unwrap().opt, lamb.unwrap().opt) {
                (Opt::OneBit(a), Opt::Lamb(l, _)) => (a.config().freeze, l.config().freeze),
                _ => unreachable!("1-bit Adam and 1-bit LAMB"),
            }
        };
        // The cap (a quarter of the run) reaches `max_step` at 4·max_step.
        for steps in [4 * rule.max_step, 4 * rule.max_step + 3, 10_000_000] {
            assert_eq!(built(steps), (library, library), "{steps} steps");
        }
        // Shorter runs: the same rule, its bounds capped at a quarter.
        for steps in [40, 200, 4 * rule.max_step - 4] {
            let (adam, lamb) = built(steps);
            assert_eq!(adam, lamb);
            assert_eq!(adam, parsed.policy(steps));
            assert_eq!(
                core::mem::discriminant(&adam),
                core::mem::discriminant(&library),
                "{steps} steps"
            );
            assert_ne!(adam, library, "{steps} steps: the cap binds");
        }
    }

    /// The rate against its definition: `k` counted from the reference's
    /// stages, Adam's corrections in f64; step 1 is Adam's first step
    /// (`η·m/√v = lr·sign(g)`); the rate tends to `lr·√(1−β₂^k)` with `k`
    /// frozen after the freeze.
    #[test]
    fn the_zero_one_rate_is_adams_bias_correction() {
        let c = zero_one_config(
            1e-3,
            400,
            DenseWarmup::Fraction(0.25),
            onebit_adam::WarmupReduce::Bf16,
        );
        assert_eq!(
            (c.var_freeze_step, c.local_step_scaler, c.local_step_clipper),
            (100, super::LOCAL_STEP_SCALER, 4)
        );
        assert_eq!(c.var_update_scaler, 8);
        assert!(c.preconditioned);
        assert_eq!(c.variance_reduce, onebit_adam::WarmupReduce::Bf16);
        let sim = ZeroOneSim::new(c, &[onebit_adam::GroupSpec::one_bit(1)], &[0.0], 1);
        let mut k = 0;
        for t in 1..=400u64 {
            k += u64::from(sim.stage(t) == ZeroOneStage::Variance);
            let (b1, b2) = (f64::from(0.9f32), f64::from(0.999f32));
            let want = 1e-3 * (1.0 - b2.powi(k as i32)).sqrt() / (1.0 - b1.powi(t as i32));
            let got = f64::from(bias_corrected_lr(&c, t, 1e-3));
            assert!((got - want).abs() <= 1e-6 * want, "t={t}: {got} vs {want}");
        }
        // 8 + 8 + 8 + 5 variance steps up to step 100 (1..8, 10..24 by 2,
        // 28..56 by 4, 64..96 by 8).
        assert_eq!(k, 29);
        // Step 1: m = 0.1·g, v = 0.001·g² (zero start).
        let g = 0.5f64;
        let first = f64::from(bias_corrected_lr(&c, 1, 1e-3)) * (0.1 * g) / (0.001 * g * g).sqrt();
        assert!((first - 1e-3).abs() < 1e-8, "{first}");
    }

    /// The backward pass's hand-overs against the finished gradient: every
    /// range handed over already has its final bits (nothing written after),
    /// every dense element is handed over, and with `--dense-groups layer`
    /// every group is one hand-over (so it begins inside the pass; for
    /// DeepFM also the `tower` group, with the whole range before the row
    /// pass). Compares with the unhooked pass's bits.
    #[test]
    fn the_backward_hands_over_each_layer_final_and_whole() {
        use crate::deep::{DeepFm, DeepGrads, Dlrm, LocalBatch, Tower, Workspace};
        let mut rng = crate::rng::Rng::new(5);
        let (n_rows, k) = (40u64, 4usize);
        let mut b = LocalBatch::default();
        b.clear();
        b.dense_width = 3;
        for id in 0..n_rows {
            b.push_row(id);
        }
        #[allow(clippy::cast_possible_truncation)]
        let rows: Vec<f32> = (0..n_rows as usize * (k + 1))
            .map(|_| 0.3 * rng.normal() as f32)
            .collect();
        #[allow(clippy::cast_possible_truncation)]
        for _ in 0..24 {
            for f in 0..3u8 {
                b.push_feature(
                    rng.below(n_rows as usize) as u32,
                    rng.uniform() as f32 + 0.5,
                    f,
                );
            }
            let dense: Vec<f32> = (0..3).map(|_| rng.normal() as f32).collect();
            b.end_example_with_dense(rng.below(2) as f32, &dense);
        }
        let towers = [
            Tower::DeepFm(DeepFm::new(k, 3, &[8, 6, 1]).unwrap()),
            Tower::Dlrm(Dlrm::new(k, 3, 3, &[5], &[7, 1]).unwrap()),
        ];
        for tower in &towers {
            let dense = tower.init_dense(2).unwrap();
            let (mut ws, mut plain) = (Workspace::default(), DeepGrads::default());
            tower
                .forward_backward(&dense, &rows, &b, 0.1, &mut ws, &mut plain)
                .unwrap();
            let mut seen: Vec<(core::ops::Range<usize>, Vec<f32>)> = Vec::new();
            let mut hooked = DeepGrads::default();
            tower
                .forward_backward_hooked(
                    &dense,
                    &rows,
                    &b,
                    0.1,
                    &mut ws,
                    &mut hooked,
                    &mut |r, g| {
                        seen.push((r, g.to_vec()));
                    },
                )
                .unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&hooked.dense), bits(&plain.dense), "{tower:?}");
            assert_eq!(bits(&hooked.rows), bits(&plain.rows), "{tower:?}");
            let mut covered = vec![false; dense.len()];
            for (r, g) in &seen {
                assert_eq!(bits(g), bits(&plain.dense[r.clone()]), "{tower:?} {r:?}");
                covered[r.clone()].iter_mut().for_each(|c| *c = true);
            }
            assert!(covered.iter().all(|&c| c), "{tower:?}");
            let layered = DenseOptimizer::build(
                DenseOpt::OnebitAdam,
                &tower.dense_layers(),
                (
                    DensePolicy::default(),
                    super::DenseGroups::Layer,
                    super::DenseWarmupReduce::default(),
                ),
                (1e-3, one_epoch(10), DenseWarmup::Auto),
            )
            .unwrap();
            let Opt::OneBit(o) = &layered.opt else {
                panic!("1-bit Adam")
            };
            let ranges = o.group_ranges();
            assert!(ranges.len() > 2, "{ranges:?}");
            for r in &ranges {
                assert!(
                    seen.iter().any(|s| s.0 == *r),
                    "{tower:?}: group {r:?} not one hand-over"
                );
            }
            if let Tower::DeepFm(_) = tower {
                assert_eq!(seen.last().unwrap().0, 0..dense.len());
            }
        }
    }

    /// `--dense-opt adam` carries no freeze decision and nothing from the
    /// run's length: its state moves between runs of other lengths and
    /// warm-up options, also past a quarter of the shorter run (where
    /// `--dense-warmup`'s cap would have decided a step), and continues
    /// with the same bits.
    #[test]
    fn plain_adam_resumes_with_another_run_length() {
        use comm_traits::SingleRank;
        let layers = [(6, LayerRole::First), (3, LayerRole::Last)];
        let build = |steps: u64, warmup, groups| {
            DenseOptimizer::build(
                DenseOpt::Adam,
                &layers,
                (
                    DensePolicy::default(),
                    groups,
                    super::DenseWarmupReduce::default(),
                ),
                (1e-2, one_epoch(steps), warmup),
            )
            .unwrap()
        };
        let grad = |t: u64| -> Vec<f32> {
            (0..9)
                .map(|i| ((t * 7 + i) % 5) as f32 * 0.1 - 0.2)
                .collect()
        };
        for groups in [super::DenseGroups::Tower, super::DenseGroups::Layer] {
            let mut comm = SingleRank::default();
            let mut a = build(40, DenseWarmup::Share, groups);
            let mut x = vec![0.5f32; 9];
            for t in 0..30 {
                a.step(&mut comm, &mut x, &grad(t), 1.0).unwrap();
            }
            let Opt::OneBit(o) = &a.opt else {
                panic!("adam is OneBitAdam's full-precision group")
            };
            assert_eq!(o.config().freeze, super::PLAIN_ADAM_FREEZE);
            assert_eq!(a.freeze_step_reached(DenseOpt::Adam), None);
            let saved = a.export_state();
            for (steps, warmup) in [
                (40, DenseWarmup::Auto),
                (4000, DenseWarmup::Share),
                (7, DenseWarmup::Fraction(0.2)),
            ] {
                let mut b = build(steps, warmup, groups);
                b.import_state(&saved).unwrap();
                let (mut xa, mut xb) = (x.clone(), x.clone());
                let mut c = a.clone();
                for t in 30..45 {
                    c.step(&mut comm, &mut xa, &grad(t), 1.0).unwrap();
                    b.step(&mut comm, &mut xb, &grad(t), 1.0).unwrap();
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&xa), bits(&xb), "{steps} steps, {warmup}");
                assert_eq!(c.export_state(), b.export_state());
            }
        }
    }

    /// A 1-bit optimizer's record resumed into a run with another
    /// `--epochs` (its schedule derived from the run's length) is refused
    /// with [`super::ImportError::Epochs`] naming both epoch counts (the
    /// saved one found from the record's schedule), nothing changed; the
    /// same length imports. Every 1-bit optimizer and warm-up kind.
    #[test]
    fn a_one_bit_schedule_of_other_epochs_is_refused_naming_both() {
        use comm_traits::SingleRank;
        let layers = [(6, LayerRole::First), (3, LayerRole::Last)];
        let run = |epochs| RunLength {
            batches_per_epoch: 100,
            epochs,
        };
        let build = |kind, epochs, warmup| {
            DenseOptimizer::build(
                kind,
                &layers,
                (
                    DensePolicy::default(),
                    super::DenseGroups::Tower,
                    super::DenseWarmupReduce::default(),
                ),
                (1e-2, run(epochs), warmup),
            )
            .unwrap()
        };
        for kind in [
            DenseOpt::OnebitAdam,
            DenseOpt::ZeroOneAdam,
            DenseOpt::OnebitLamb,
        ] {
            for warmup in [
                DenseWarmup::Auto,
                DenseWarmup::Share,
                DenseWarmup::Fraction(0.2),
            ] {
                let mut a = build(kind, 4, warmup);
                let mut x = vec![0.5f32; 9];
                let g: Vec<f32> = (0..9).map(|i| i as f32 * 0.01 - 0.04).collect();
                for _ in 0..3 {
                    a.step(&mut SingleRank::default(), &mut x, &g, 1.0).unwrap();
                }
                let saved = a.export_state();
                build(kind, 4, warmup).import_state(&saved).unwrap();
                for epochs in [2, 3, 8] {
                    let mut b = build(kind, epochs, warmup);
                    let before = b.export_state();
                    let e = b.import_state(&saved).unwrap_err();
                    let super::ImportError::Epochs {
                        saved_epochs,
                        epochs: here,
                        ..
                    } = e
                    else {
                        panic!("{kind:?} {warmup}: {e:?}")
                    };
                    assert_eq!((saved_epochs, here), (Some(4), epochs), "{kind:?} {warmup}");
                    let text = e.to_string();
                    assert!(
                        text.contains("is that of --epochs 4,")
                            && text.contains(&format!("this run has --epochs {epochs} (")),
                        "{text}"
                    );
                    assert_eq!(b.export_state(), before, "{kind:?} {warmup}");
                }
            }
        }
    }

    /// The saved run's `--epochs` against the forward derivation: every
    /// field of every 1-bit kind, epochs 1..=40 at several batches per
    /// epoch, is found back when one epoch count gives it; a value no
    /// epoch count gives, and one many give (the `max_step` bound of
    /// 10 000), give `None`.
    #[test]
    fn the_saved_epochs_are_the_schedules_inverse() {
        use onebit_adam::FreezePolicy;
        let kinds = [
            (DenseOpt::OnebitAdam, DenseWarmup::Auto, "max_step"),
            (DenseOpt::OnebitLamb, DenseWarmup::Share, "max_step"),
            (
                DenseOpt::OnebitAdam,
                DenseWarmup::Fraction(0.15),
                "freeze_step",
            ),
            (DenseOpt::ZeroOneAdam, DenseWarmup::Auto, "var_freeze_step"),
            (
                DenseOpt::ZeroOneAdam,
                DenseWarmup::Fraction(0.1),
                "var_freeze_step",
            ),
            // A constant ([`LOCAL_STEP_SCALER`]): many epoch counts give it.
            (
                DenseOpt::ZeroOneAdam,
                DenseWarmup::Auto,
                "local_step_scaler",
            ),
        ];
        for (kind, warmup, field) in kinds {
            for b in [1u64, 7, 100, 391] {
                let forward = |e: u32| -> u64 {
                    let t = b * u64::from(e);
                    match (kind, warmup.policy(t)) {
                        (DenseOpt::ZeroOneAdam, _) => {
                            let reduce = onebit_adam::WarmupReduce::F32;
                            let c = zero_one_config(1e-3, t, warmup, reduce);
                            if field == "var_freeze_step" {
                                c.var_freeze_step
                            } else {
                                c.local_step_scaler
                            }
                        }
                        (_, FreezePolicy::Fixed(n)) => n,
                        (_, FreezePolicy::Auto(a) | FreezePolicy::Share(a)) => a.max_step,
                        _ => unreachable!(),
                    }
                };
                let run = RunLength {
                    batches_per_epoch: b,
                    epochs: 3,
                };
                for e in 1..=40u32 {
                    let v = forward(e);
                    let givers = (1..=200u32).filter(|&x| forward(x) == v).count();
                    let want = (givers == 1).then_some(e);
                    let got = super::epochs_of_schedule(kind, (field, v), run, warmup, 1e-3);
                    assert_eq!(got, want, "{kind:?} {warmup} {field} b={b} e={e}");
                }
            }
        }
        // The bound: every run of 40 000 steps or more has max_step 10 000.
        let big = RunLength {
            batches_per_epoch: 100_000,
            epochs: 2,
        };
        let f = ("max_step", 10_000);
        assert_eq!(
            super::epochs_of_schedule(DenseOpt::OnebitAdam, f, big, DenseWarmup::Auto, 1e-3),
            None
        );
        // No epoch count gives 101 at 100 batches per epoch (25, 50, ...).
        let r = RunLength {
            batches_per_epoch: 100,
            epochs: 2,
        };
        let f = ("max_step", 101);
        assert_eq!(
            super::epochs_of_schedule(DenseOpt::OnebitAdam, f, r, DenseWarmup::Auto, 1e-3),
            None
        );
    }

    /// `--dense-policy` graded groups are 1-bit Adam's: 0/1 Adam's crate
    /// refusal reaches the user, and 1-bit LAMB refuses any policy; `full`
    /// layers are fine for 0/1 Adam.
    #[test]
    fn policies_the_optimizers_cannot_run_are_refused() {
        let layers = [
            (8, LayerRole::First),
            (4, LayerRole::Rest),
            (2, LayerRole::Last),
        ];
        let run = (1e-3, one_epoch(100), DenseWarmup::Auto);
        let build = |kind, p: &str| {
            DenseOptimizer::build(
                kind,
                &layers,
                (
                    DensePolicy::parse(p).unwrap(),
                    super::DenseGroups::Tower,
                    super::DenseWarmupReduce::default(),
                ),
                run,
            )
        };
        let e = build(DenseOpt::ZeroOneAdam, "first=2bit").unwrap_err();
        assert!(
            e.starts_with("--dense-policy: ") && e.contains("Policy::Graded"),
            "{e}"
        );
        let e = build(DenseOpt::OnebitLamb, "last=full").unwrap_err();
        assert!(e.starts_with("--dense-policy: "), "{e}");
        assert!(build(DenseOpt::ZeroOneAdam, "last=full").is_ok());
        assert!(build(DenseOpt::OnebitLamb, "1bit").is_ok());
        for kind in [DenseOpt::Adam, DenseOpt::OnebitAdam] {
            assert!(build(kind, "first=2bit").is_ok());
        }
    }
}
