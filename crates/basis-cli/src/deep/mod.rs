//! Models with a dense tower: DeepFM (`--model deepfm`), the FM plus a ReLU
//! MLP over the concatenated per-field embeddings, and DLRM (`--model
//! dlrm`), a bottom MLP on the dense features, pairwise dot interactions
//! and a top MLP.
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
//! 3. calls [`Tower::forward_backward`] (or [`DeepFm::forward_backward`]) with the dense parameters, the
//!    gathered rows and the batch. It returns ([`DeepGrads`]) the gradient
//!    of `scale · Σ_examples log-loss` for every **gathered row** (same
//!    layout and order as the buffer, so row `i` goes back to the owner of
//!    `ids[i]`), the gradient of the dense parameters, and the batch loss.
//!
//! DLRM also reads each example's dense features from the batch
//! ([`LocalBatch::end_example_with_dense`]).
//!
//! [`Tower::forward`] is the same without the backward pass (evaluation).
//! Nothing in the model depends on which rank a row came from, so a
//! sharded run computes exactly what a single process computes on the same
//! rows.
//!
//! Layout: a table row is `[w, v_1..v_k]` (shared with the FM part, as in
//! DeepFM; DLRM leaves `w` unused); the dense parameters are `[b, MLP…]`
//! for DeepFM (the FM's global bias, then the tower, [`mlp`]) and
//! `[Bottom…, Top…]` for DLRM.

pub(crate) mod batch;
pub(crate) mod by_row;
pub(crate) mod chunks;
pub(crate) mod deepfm;
pub(crate) mod dlrm;
pub(crate) mod gemm;
pub(crate) mod mlp;
pub(crate) mod par;

use onebit_adam::{
    AutoFreeze, Config, FreezePolicy, Grade, GroupSpec, OneBitAdam, Policy, Variant,
};

pub(crate) use batch::{LocalBatch, gather_rows};
pub(crate) use by_row::ByRow;
pub(crate) use deepfm::{DeepFm, DeepGrads};
pub(crate) use dlrm::Dlrm;

/// `--model`: which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModelKind {
    /// Factorization machine (linear terms + pairwise interactions).
    Fm,
    /// DeepFM: the FM plus an MLP over the concatenated field embeddings.
    Deepfm,
    /// DLRM: bottom MLP on dense features, pairwise dots, top MLP.
    Dlrm,
}

/// A model with a dense tower.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tower {
    /// DeepFM.
    DeepFm(DeepFm),
    /// DLRM.
    Dlrm(Dlrm),
}

/// Buffers of either tower, reused across batches.
#[derive(Debug, Clone, Default)]
pub(crate) struct Workspace {
    deepfm: deepfm::Workspace,
    dlrm: dlrm::Workspace,
}

/// Where a tower layer sits, for `--dense-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LayerRole {
    /// The layer whose input is the embeddings (DeepFM: the tower's first
    /// layer; DLRM: the top tower's first, over the embedding interactions).
    First,
    /// The output layer (the logit).
    Last,
    /// Every other dense parameter (DeepFM's global bias, DLRM's bottom
    /// tower, hidden layers).
    Rest,
}

impl Tower {
    /// The dense parameters as layers in their flat order: `(length, role)`
    /// (a layer's weights then biases; lengths add up to the dense length).
    pub(crate) fn dense_layers(&self) -> Vec<(usize, LayerRole)> {
        let roles = |lens: Vec<usize>| {
            let k = lens.len();
            lens.into_iter()
                .enumerate()
                .map(move |(i, len)| {
                    let role = if i + 1 == k {
                        LayerRole::Last
                    } else if i == 0 {
                        LayerRole::First
                    } else {
                        LayerRole::Rest
                    };
                    (len, role)
                })
                .collect::<Vec<_>>()
        };
        match self {
            Self::DeepFm(m) => {
                let mut out = vec![(1, LayerRole::Rest)];
                out.extend(roles(m.tower_layers()));
                out
            }
            Self::Dlrm(m) => {
                let (bottom, top) = m.tower_layers();
                let mut out: Vec<_> = bottom
                    .into_iter()
                    .map(|len| (len, LayerRole::Rest))
                    .collect();
                out.extend(roles(top));
                out
            }
        }
    }

    /// Fresh dense parameters, deterministic in `seed`.
    ///
    /// Fails when they cannot be allocated.
    pub(crate) fn init_dense(&self, seed: u64) -> Result<Vec<f32>, String> {
        match self {
            Self::DeepFm(m) => m.init_dense(seed),
            Self::Dlrm(m) => m.init_dense(seed),
        }
    }

    /// Logits of `batch` (see the module interface).
    ///
    /// Fails when `rows` or `batch` do not fit the model.
    pub(crate) fn forward<'w>(
        &self,
        dense: &[f32],
        rows: &[f32],
        batch: &LocalBatch,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], String> {
        match self {
            Self::DeepFm(m) => m.forward(dense, rows, batch, &mut ws.deepfm),
            Self::Dlrm(m) => m.forward(dense, rows, batch, &mut ws.dlrm),
        }
    }

    /// Gradients of `scale · Σ log-loss` for the gathered rows and the dense
    /// parameters (see the module interface).
    ///
    /// Fails when `rows` or `batch` do not fit the model.
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "the trainers run the hooked pass")
    )]
    pub(crate) fn forward_backward(
        &self,
        dense: &[f32],
        rows: &[f32],
        batch: &LocalBatch,
        scale: f32,
        ws: &mut Workspace,
        out: &mut DeepGrads,
    ) -> Result<(), String> {
        match self {
            Self::DeepFm(m) => m.forward_backward(dense, rows, batch, scale, &mut ws.deepfm, out),
            Self::Dlrm(m) => m.forward_backward(dense, rows, batch, scale, &mut ws.dlrm, out),
        }
    }

    /// [`Self::forward_backward`], handing each finished piece of the dense
    /// gradient (its range in `out.dense`, the values) to `on_dense` as soon
    /// as it is written (`DeepFm::forward_backward_hooked`,
    /// `Dlrm::forward_backward_hooked`): every dense element at least once
    /// (ranges may overlap), never written again afterwards.
    ///
    /// Fails as [`Self::forward_backward`], before any hand-over.
    #[allow(
        clippy::too_many_arguments,
        reason = "forward_backward's, plus the hook"
    )]
    pub(crate) fn forward_backward_hooked(
        &self,
        dense: &[f32],
        rows: &[f32],
        batch: &LocalBatch,
        scale: f32,
        ws: &mut Workspace,
        out: &mut DeepGrads,
        on_dense: &mut dyn FnMut(core::ops::Range<usize>, &[f32]),
    ) -> Result<(), String> {
        match self {
            Self::DeepFm(m) => {
                m.forward_backward_hooked(dense, rows, batch, scale, &mut ws.deepfm, out, on_dense)
            }
            Self::Dlrm(m) => {
                m.forward_backward_hooked(dense, rows, batch, scale, &mut ws.dlrm, out, on_dense)
            }
        }
    }
}

/// `--dense-opt`: how data-parallel ranks train the dense parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DenseOpt {
    /// f32 Adam on the all-reduced (mean) gradient at every step.
    Adam,
    /// 1-bit Adam: full-precision warm-up, then compressed (preconditioned)
    /// momentum all-reduce with error feedback.
    OnebitAdam,
    /// 0/1 Adam: `v` refreshed on a thinning schedule, 1-bit gradients
    /// between, then local steps and 1-bit synchronisations of the
    /// accumulated update (`dense_opt.rs`).
    ZeroOneAdam,
    /// 1-bit LAMB: full-precision LAMB warm-up, then 1-bit momentum with
    /// frozen, adapted per-layer trust ratios (`dense_opt.rs`).
    OnebitLamb,
}

/// `--dense-policy`: the communication policy of each tower layer under
/// `--dense-opt onebit-adam` (after the warm-up): `1bit`, `2bit`, `bf16`
/// or `full`, one for all layers or `first=…,last=…,rest=…` by
/// [`LayerRole`] (unnamed roles: `1bit`). Default `1bit` for all: one group,
/// as before the option existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DensePolicy {
    first: Policy,
    last: Policy,
    rest: Policy,
}

impl Default for DensePolicy {
    fn default() -> Self {
        Self {
            first: Policy::OneBit,
            last: Policy::OneBit,
            rest: Policy::OneBit,
        }
    }
}

impl DensePolicy {
    /// `NAME` or `ROLE=NAME,…` (see the type's docs).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let name = |n: &str| match n {
            "1bit" => Ok(Policy::OneBit),
            "2bit" => Ok(Policy::Graded(Grade::TwoBit)),
            "bf16" => Ok(Policy::Graded(Grade::Bf16)),
            "full" => Ok(Policy::FullPrecision),
            _ => Err(format!("unknown policy `{n}` (1bit, 2bit, bf16 or full)")),
        };
        if !text.contains('=') {
            let p = name(text)?;
            return Ok(Self {
                first: p,
                last: p,
                rest: p,
            });
        }
        let mut out = Self::default();
        for part in text.split(',') {
            let (role, n) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected ROLE=POLICY"))?;
            let slot = match role {
                "first" => &mut out.first,
                "last" => &mut out.last,
                "rest" => &mut out.rest,
                _ => return Err(format!("unknown layer `{role}` (first, last or rest)")),
            };
            *slot = name(n)?;
        }
        Ok(out)
    }

    /// The policy of a layer in `role`.
    fn of(self, role: LayerRole) -> Policy {
        match role {
            LayerRole::First => self.first,
            LayerRole::Last => self.last,
            LayerRole::Rest => self.rest,
        }
    }

    /// A `u64` the ranks compare to agree on the option.
    pub(crate) fn to_bits(self) -> u64 {
        // The names are distinct: their first bytes tell them apart.
        let b = |p: Policy| u64::from(p.name().as_bytes()[0]) << 8 | p.name().len() as u64;
        b(self.first) | b(self.last) << 16 | b(self.rest) << 32
    }

    /// Groups over `layers` (flat order), adjacent layers of one policy
    /// merged: the default gives one group, as before the option.
    pub(crate) fn groups(self, layers: &[(usize, LayerRole)]) -> Vec<GroupSpec> {
        let mut out: Vec<GroupSpec> = Vec::new();
        for &(len, role) in layers {
            let policy = self.of(role);
            match out.last_mut() {
                Some(g) if g.policy == policy => g.len += len,
                _ => out.push(GroupSpec::one_bit(len).with_policy(policy)),
            }
        }
        out
    }

    /// One group per non-empty layer of `layers` (flat order), unmerged
    /// (`--dense-groups layer`).
    pub(crate) fn groups_per_layer(self, layers: &[(usize, LayerRole)]) -> Vec<GroupSpec> {
        layers
            .iter()
            .filter(|l| l.0 > 0)
            .map(|&(len, role)| GroupSpec::one_bit(len).with_policy(self.of(role)))
            .collect()
    }
}

impl core::fmt::Display for DensePolicy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "first={},last={},rest={}",
            self.first.name(),
            self.last.name(),
            self.rest.name()
        )
    }
}

/// `--dense-warmup`: how long 1-bit Adam's full-precision warm-up lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum DenseWarmup {
    /// Until the second moment has settled ([`FreezePolicy::Auto`] with
    /// the library's rule), at the latest after [`AUTO_MAX_FRACTION`] of
    /// the run. The default until issue 28 item 5.
    Auto,
    /// Until the early burst of gradient energy is over
    /// ([`FreezePolicy::Share`] with [`AutoFreeze::share`]), at the latest
    /// after [`AUTO_MAX_FRACTION`] of the run. The default, as the
    /// library's (`crate::dense_opt::default_warmup`).
    Share,
    /// This fraction of the run's steps (at least one step).
    Fraction(f64),
}

/// The latest end of an automatic warm-up, as a fraction of the run: the
/// top of DeepSpeed's 15–25 % guidance, so a run whose `v` never settles
/// still compresses three quarters of its steps.
pub(crate) const AUTO_MAX_FRACTION: f64 = 0.25;

impl DenseWarmup {
    /// `auto`, `share` or a fraction in `[0, 1)`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        match text {
            "auto" => return Ok(Self::Auto),
            "share" => return Ok(Self::Share),
            _ => {}
        }
        crate::validate::fraction(text)
            .map(Self::Fraction)
            .map_err(|e| format!("{e} (or `auto`, `share`)"))
    }

    /// A `u64` the ranks compare to agree on the option (a fraction's
    /// bits; `auto` and `share` are NaN patterns no fraction has).
    pub(crate) fn to_bits(self) -> u64 {
        match self {
            Self::Auto => u64::MAX,
            Self::Share => u64::MAX - 1,
            Self::Fraction(f) => f.to_bits(),
        }
    }

    /// The warm-up whose [`DenseWarmup::to_bits`] is `bits`.
    pub(crate) fn from_bits(bits: u64) -> Self {
        match bits {
            u64::MAX => Self::Auto,
            b if b == u64::MAX - 1 => Self::Share,
            b => Self::Fraction(f64::from_bits(b)),
        }
    }

    /// The freeze policy for a run of `steps_total` steps.
    pub(crate) fn policy(self, steps_total: u64) -> FreezePolicy {
        // Truncation, so 0.2 reproduces the former `steps_total / 5`.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let steps = |f: f64| ((steps_total as f64 * f) as u64).max(1);
        match self {
            Self::Fraction(f) => FreezePolicy::Fixed(steps(f)),
            Self::Auto | Self::Share => {
                let share = self == Self::Share;
                let rule = if share {
                    AutoFreeze::share()
                } else {
                    AutoFreeze::default()
                };
                let max_step = rule.max_step.min(steps(AUTO_MAX_FRACTION));
                let rule = rule
                    .with_max_step(max_step)
                    .with_min_step(rule.min_step.min(max_step));
                if share {
                    FreezePolicy::Share(rule)
                } else {
                    FreezePolicy::Auto(rule)
                }
            }
        }
    }
}

impl core::fmt::Display for DenseWarmup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Share => f.write_str("share"),
            Self::Fraction(x) => write!(f, "{x}"),
        }
    }
}

impl DenseOpt {
    /// The optimizer of `len` dense parameters for a run of `steps_total`
    /// steps (`--dense-lr` = `lr`, bias-corrected; 1-bit Adam's warm-up as
    /// `warmup` says): `adam` and `onebit-adam` only.
    ///
    /// Fails when `onebit-adam` refuses the configuration, and for
    /// `zero-one-adam` and `onebit-lamb` (`dense_opt.rs` builds those).
    pub(crate) fn build(
        self,
        len: usize,
        lr: f32,
        (steps_total, warmup): (u64, DenseWarmup),
        reduce: onebit_adam::WarmupReduce,
    ) -> Result<OneBitAdam, String> {
        // Plain `Momentum` gives every coordinate ±(scale of the raw
        // momentum); this tower's √v̂ spans 10⁻⁹..10⁻², so that step is
        // lr·10⁵ on some coordinates and the run diverges within three
        // 1-bit steps. Compressing m/(√v̂+ε) keeps each step ≈ lr; the
        // library clamps it to Adam's own bound on |m/√v|, without which
        // units waking after the freeze (√v̂ ≈ ε) made DLRM diverge.
        let config = Config::default()
            .with_lr(lr)
            .with_freeze(warmup.policy(steps_total))
            .with_bias_correction(true)
            .with_variant(Variant::PreconditionedMomentum)
            // Per-group error norms and sign flips for `--json`: one read of
            // the error buffers and of `m` per step.
            .with_telemetry(true)
            .with_warmup_reduce(reduce);
        let group = match self {
            // Full precision at every step: Adam on the mean gradient.
            Self::Adam => GroupSpec::full_precision(len),
            Self::OnebitAdam => GroupSpec::one_bit(len),
            Self::ZeroOneAdam | Self::OnebitLamb => {
                return Err(format!(
                    "--dense-opt: {self:?} is not 1-bit Adam (dense_opt.rs builds it)"
                ));
            }
        };
        OneBitAdam::with_groups(&[group], config).map_err(|e| format!("--dense-opt: {e}"))
    }

    /// [`Self::build`] with a policy per layer (`--dense-policy`) for
    /// `onebit-adam`; `layers` in flat order add up to the dense length.
    pub(crate) fn build_layered(
        self,
        layers: &[(usize, LayerRole)],
        policy: DensePolicy,
        lr: f32,
        schedule: (u64, DenseWarmup),
        reduce: onebit_adam::WarmupReduce,
    ) -> Result<OneBitAdam, String> {
        let len = layers.iter().map(|l| l.0).sum();
        let mut opt = self.build(len, lr, schedule, reduce)?;
        if self == Self::OnebitAdam && policy != DensePolicy::default() {
            opt = OneBitAdam::with_groups(&policy.groups(layers), *opt.config())
                .map_err(|e| format!("--dense-policy: {e}"))?;
        }
        Ok(opt)
    }
}

/// Test helper: `g` (from a forward/backward at `scale`) against the slow
/// f64 reference `loss(dense, rows, scale)` = `scale · Σ log-loss`: the
/// summed loss equals `loss(…, 1)`, and the gradient of every row float
/// and dense parameter equals a central finite difference (`h = 1e-6`).
#[cfg(test)]
pub(crate) fn assert_matches_finite_differences(
    loss: impl Fn(&[f64], &[f64], f64) -> f64,
    dense: &[f32],
    rows: &[f32],
    scale: f32,
    g: &DeepGrads,
) {
    let to64 = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let (d64, r64) = (to64(dense), to64(rows));
    let r = loss(&d64, &r64, 1.0);
    assert!(
        (g.loss - r).abs() < 1e-4 * r.abs().max(1.0),
        "loss {} vs {r}",
        g.loss
    );
    let h = 1e-6;
    let s = f64::from(scale);
    let close = |num: f64, ana: f32, what: &str| {
        let ana = f64::from(ana);
        assert!(
            (num - ana).abs() < 2e-4 * (1.0 + num.abs()),
            "{what}: numeric {num} vs analytic {ana}"
        );
    };
    let bump = |v: &[f64], i: usize, by: f64| {
        let mut v = v.to_vec();
        v[i] += by;
        v
    };
    for i in 0..r64.len() {
        let num =
            (loss(&d64, &bump(&r64, i, h), s) - loss(&d64, &bump(&r64, i, -h), s)) / (2.0 * h);
        close(num, g.rows[i], &format!("row float {i}"));
    }
    for i in 0..d64.len() {
        let num =
            (loss(&bump(&d64, i, h), &r64, s) - loss(&bump(&d64, i, -h), &r64, s)) / (2.0 * h);
        close(num, g.dense[i], &format!("dense {i}"));
    }
}

/// Test helper: a random batch of `examples` examples over `fields`
/// fields of `n_rows` gathered rows (`k + 1` floats each, all rows listed
/// in `ids`), zero to two features per field (so rows repeat, also within
/// an example), `dense_width` dense features each.
#[cfg(test)]
pub(crate) fn random_batch(
    rng: &mut crate::rng::Rng,
    (examples, n_rows, fields, k, dense_width): (usize, usize, usize, usize, usize),
) -> (Vec<f32>, LocalBatch) {
    let mut b = LocalBatch::default();
    b.clear();
    b.dense_width = dense_width;
    for id in 0..n_rows as u64 {
        b.push_row(1000 + id);
    }
    let rows = (0..n_rows * (k + 1))
        .map(|_| 0.3 * rng.normal() as f32)
        .collect();
    for _ in 0..examples {
        for f in 0..fields {
            for _ in 0..rng.below(3) {
                b.push_feature(
                    rng.below(n_rows) as u32,
                    rng.uniform() as f32 + 0.5,
                    f as u8,
                );
            }
        }
        let dense: Vec<f32> = (0..dense_width).map(|_| rng.normal() as f32).collect();
        b.end_example_with_dense(rng.below(2) as f32, &dense);
    }
    (rows, b)
}

/// Test helper: a rayon pool of `threads` threads.
#[cfg(test)]
pub(crate) fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// `n` zeros, or an error naming `what` when they cannot be allocated.
pub(crate) fn zeros(n: usize, what: &str) -> Result<Vec<f32>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| format!("{what}: cannot allocate {n} floats"))?;
    v.resize(n, 0.0);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command};

    /// `--dense-policy`: names, roles, errors; groups follow the layers in
    /// flat order with adjacent equal policies merged.
    #[test]
    fn dense_policy_parses_and_groups_the_layers() {
        use super::{DensePolicy, LayerRole};
        use onebit_adam::{Grade, Policy};
        let p = DensePolicy::parse("first=2bit,last=full,rest=1bit").unwrap();
        assert_eq!(p.to_string(), "first=2bit,last=full,rest=1bit");
        assert_eq!(DensePolicy::parse("1bit").unwrap(), DensePolicy::default());
        assert!(DensePolicy::parse("first=3bit").is_err());
        assert!(DensePolicy::parse("middle=2bit").is_err());
        assert!(DensePolicy::parse("first").is_err());
        assert_ne!(
            DensePolicy::parse("bf16").unwrap().to_bits(),
            DensePolicy::parse("2bit").unwrap().to_bits()
        );
        // DeepFM 512-256-1 over 8 fields × 4: bias, three layers.
        let layers = [
            (1, LayerRole::Rest),
            (32 * 512 + 512, LayerRole::First),
            (512 * 256 + 256, LayerRole::Rest),
            (256 + 1, LayerRole::Last),
        ];
        let g = p.groups(&layers);
        let got: Vec<_> = g.iter().map(|g| (g.len, g.policy)).collect();
        assert_eq!(
            got,
            [
                (1, Policy::OneBit),
                (32 * 512 + 512, Policy::Graded(Grade::TwoBit)),
                (512 * 256 + 256, Policy::OneBit),
                (257, Policy::FullPrecision),
            ]
        );
        let one = DensePolicy::default().groups(&layers);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].len, layers.iter().map(|l| l.0).sum::<usize>());
    }

    /// The layers cover the dense parameters, roles in place.
    #[test]
    fn tower_layers_cover_the_dense_parameters() {
        use super::{LayerRole, Tower, deepfm::DeepFm, dlrm::Dlrm};
        let d = DeepFm::new(4, 8, &[16, 8, 1]).unwrap();
        let len = d.dense_len();
        let layers = Tower::DeepFm(d).dense_layers();
        assert_eq!(layers.iter().map(|l| l.0).sum::<usize>(), len);
        let roles: Vec<_> = layers.iter().map(|l| l.1).collect();
        assert_eq!(
            roles,
            [
                LayerRole::Rest,
                LayerRole::First,
                LayerRole::Rest,
                LayerRole::Last
            ]
        );
        assert_eq!(layers[1].0, 32 * 16 + 16);
        let m = Dlrm::new(4, 8, 13, &[16], &[32, 1]).unwrap();
        let len = m.dense_len();
        let layers = Tower::Dlrm(m).dense_layers();
        assert_eq!(layers.iter().map(|l| l.0).sum::<usize>(), len);
        let roles: Vec<_> = layers.iter().map(|l| l.1).collect();
        assert_eq!(
            roles,
            [
                LayerRole::Rest,
                LayerRole::Rest,
                LayerRole::First,
                LayerRole::Last
            ]
        );
    }
    use clap::Parser;

    #[test]
    fn onebit_adam_trains_deepfm_at_the_default_dense_lr() {
        // The default `--dense-lr` with a tower, sharded over 2 ranks: at
        // the old default (0.01) this stopped with a non-finite value right
        // after the warm-up.
        let argv = [
            "basis",
            "train",
            "--opt",
            "adam",
            "--model",
            "deepfm",
            "--mlp",
            "32,16,1",
            "--synthetic-examples",
            "40000",
            "--epochs",
            "2",
            "--workers",
            "2",
            "--shard",
            "rows",
            "--dense-opt",
            "onebit-adam",
        ];
        let Command::Train(a) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!("a train command")
        };
        assert_eq!(a.model.dense_lr, 0.001);
        let ds = crate::data::load(&a.data.options(false)).unwrap();
        let run = crate::run::Run {
            spec: &a.opt,
            model: &a.model,
            checkpoint: None,
            resume: false,
            progress: false,
        };
        let r = crate::shard::train(&ds, &run).unwrap();
        let auc = r.final_metrics.test_auc;
        assert!(auc > 0.6, "test AUC {auc}");
    }

    #[test]
    fn dense_warmup_sets_the_full_precision_steps() {
        use super::{AUTO_MAX_FRACTION, DenseWarmup};
        use onebit_adam::{AutoFreeze, FreezePolicy};
        let parse = |extra: &[&str]| {
            let argv = [&["basis", "train", "--model", "deepfm"][..], extra].concat();
            match Cli::try_parse_from(argv).map(|c| c.command) {
                Ok(Command::Train(a)) => Ok(a.model.dense_warmup),
                Ok(_) => unreachable!("a train command"),
                Err(e) => Err(e),
            }
        };
        // The default is the library's (`dense_opt::default_warmup`).
        assert_eq!(parse(&[]).unwrap(), DenseWarmup::Share);
        assert_eq!(
            parse(&["--dense-warmup", "auto"]).unwrap(),
            DenseWarmup::Auto
        );
        assert_eq!(
            parse(&["--dense-warmup", "0.05"]).unwrap(),
            DenseWarmup::Fraction(0.05)
        );
        for bad in ["1", "-0.1", "nan", "x", "Auto"] {
            assert!(parse(&["--dense-warmup", bad]).is_err(), "{bad} accepted");
        }
        let policy = |steps, warmup| {
            let opt = super::DenseOpt::OnebitAdam
                .build(10, 1e-3, (steps, warmup), onebit_adam::WarmupReduce::F32)
                .unwrap();
            opt.config().freeze
        };
        let fixed = |steps, f| {
            policy(steps, DenseWarmup::Fraction(f))
                .fixed_step()
                .unwrap()
        };
        // 0.2 keeps the former `steps / 5`; a zero warm-up still runs one step.
        for steps in [1, 7, 200, 1001] {
            assert_eq!(fixed(steps, 0.2), (steps / 5).max(1));
        }
        assert_eq!((fixed(200, 0.05), fixed(200, 0.0)), (10, 1));
        // Auto: the library's rule, ending at a quarter of the run at the
        // latest (and never asking for a minimum beyond that).
        let rule = AutoFreeze::default();
        for steps in [1, 40, 1000, 10_000_000] {
            let FreezePolicy::Auto(a) = policy(steps, DenseWarmup::Auto) else {
                panic!("auto is an automatic policy")
            };
            let cap = ((steps as f64 * AUTO_MAX_FRACTION) as u64).max(1);
            assert_eq!(a.max_step, rule.max_step.min(cap));
            assert_eq!(a.min_step, rule.min_step.min(a.max_step));
            assert_eq!((a.window, a.threshold), (rule.window, rule.threshold));
        }
        // Share: the library's share rule under the same cap.
        assert_eq!(
            parse(&["--dense-warmup", "share"]).unwrap(),
            DenseWarmup::Share
        );
        let share = AutoFreeze::share();
        for steps in [1, 40, 200, 10_000_000] {
            let FreezePolicy::Share(a) = policy(steps, DenseWarmup::Share) else {
                panic!("share is the share policy")
            };
            let cap = ((steps as f64 * AUTO_MAX_FRACTION) as u64).max(1);
            assert_eq!(a.max_step, share.max_step.min(cap));
            assert_eq!(a.min_step, share.min_step.min(a.max_step));
            assert_eq!((a.window, a.threshold), (share.window, share.threshold));
        }
        // The ranks' agreement table tells them apart.
        let bits = [
            DenseWarmup::Auto.to_bits(),
            DenseWarmup::Share.to_bits(),
            DenseWarmup::Fraction(0.2).to_bits(),
        ];
        assert!(bits[0] != bits[1] && bits[1] != bits[2] && bits[0] != bits[2]);
    }
}
