//! Optimizer specifications: `NAME[:key=value,key=value...]` on the command line.
//!
//! | name | keys |
//! |---|---|
//! | `adam` | `lr`, `beta1` (momentum β1, default 0.9; 0 = no momentum, for ablations) |
//! | `rowwise-adagrad` | `lr` |
//! | `sgd` | `lr` |
//! | `basis` | `lr`, `mode`, `buckets` or `ratio`, `rule`, `storage`, `choices`, `scalar-lr`, `accumulate`, `beta`, `power`, `counter`, `profile`, `lead`, `eps` |
//! | `countsketch` | as `basis`, with `mode=signed` fixed |
//! | `partial-rowwise-adam` (`pra`) | `lr`, `beta1` |
//! | `rowstep-adam` (`adam-rowstep`) | `lr`, `beta1` |
//! | `ftrl` | `lr` (α), `beta` (β), `l1`, `l2` (defaults: `basis-core`'s `FtrlConfig`) |
//! | `adam8bit` (`adam-8bit`) | `lr`, `beta1`, `block` (values per absmax, default 256) |
//!
//! Every `basis` default is `basis-core`'s
//! ([`BasisConfig::defaults_for_epochs`] the mode and the run's `--epochs`:
//! plain `basis` on one pass is [`BasisConfig::one_pass`]; a spec naming
//! the accumulation builds over the several-epoch default on every run),
//! except `lead`, which the CLI sets from its models' rows.
//!
//! `mode` is `rowscaled` (default), `shared`, `signed` or `own`; `ratio` is
//! rows per bucket `N/B` (default: basis-core's automatic `B` from the
//! table's row count, [`BasisConfig::buckets_for`], 1000 rows per bucket
//! for `rowscaled`, 100 otherwise: [`BasisConfig::rows_per_bucket`]);
//! `rule` is `normalized` (default) or `hypergradient`; `storage` is `f32`,
//! `bf16` or `u8` (default `u8` for `rowscaled`, `f32` otherwise); `choices`
//! is 1 (default) to 4 hash choices; `accumulate` is `sum`, `ema`,
//! `decay` (AdaGrad's sum with forgetting; both with `beta`, default 0.99)
//! or `anneal` (a decayed sum whose memory grows with the row's update
//! count, `Accumulate::CountAnnealed`, with `power`, default 0.5) or
//! `ema-anneal` (default over several epochs, `sum` on one pass;
//! basis-core's `Accumulate::DEFAULT`: the EMA while
//! a row is rare, annealed once it is frequent, `Accumulate::EmaAnnealed`,
//! with `beta`, default 0.99, and `power`, default 1) for `rowscaled`; a
//! `beta` or `power` alone keeps the default's kind when it reads that key
//! (`ema-anneal` reads both), else means `ema` (`beta`) or `anneal`
//! (`power`); `counter` (`log3-wide`, basis-core's default: 3 bits,
//! 0.38 B/row, up to 65 535 updates; `log3`, the same bits up to 4 096, the
//! default before; `log4`, 0.5 B/row; `exact`, 2 B/row: `RowCounter`)
//! keeps the row counts of
//! `anneal` and `ema-anneal`; `profile` (exponent in
//! `[0, 1]`, default 1), `lead` (leading profile group, default 1: the FM's
//! linear weight) and `eps` (`outside`, default, or `inside`) shape the
//! `rowscaled` profile. A key the chosen mode never reads is an error
//! ([`inert_keys`]: a typo in an experiment cannot pass for a result).

use basis_core::{Accumulate, BasisConfig, Direction, Profile, RowCounter, ScalarStorage};
use core::fmt;
use serde::Serialize;

/// The optimizer family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// Exact per-row Adam (`m`, `v` per coordinate).
    Adam,
    /// BASIS (hash-bucketed state).
    Basis,
    /// FBGEMM's exact row-wise AdaGrad.
    RowwiseAdagrad,
    /// BASIS in `Signed` (count-sketch momentum) mode.
    Countsketch,
    /// Plain SGD (no state).
    Sgd,
    /// FBGEMM's `PARTIAL_ROWWISE_ADAM` (per-coordinate `m`, row-wise `v`).
    PartialRowwiseAdam,
    /// Adam with a per-row step counter for bias correction.
    RowStepAdam,
    /// Per-coordinate FTRL-Proximal.
    Ftrl,
    /// Adam with 8-bit block-wise quantized moments (bitsandbytes' scheme).
    Adam8bit,
}

/// BASIS direction mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mode {
    /// Per-row magnitude × bucket profile.
    RowScaled,
    /// The source document's shared bucket direction.
    Shared,
    /// Count-sketch momentum.
    Signed,
    /// Own gradient over a shared second moment.
    Own,
}

impl Mode {
    /// The `basis-core` direction of this mode.
    pub(crate) const fn direction(self) -> Direction {
        match self {
            Self::RowScaled => Direction::RowScaled,
            Self::Shared => Direction::Shared,
            Self::Signed => Direction::Signed,
            Self::Own => Direction::OwnGradient,
        }
    }
}

/// Row-scalar storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Storage {
    /// 4 bytes.
    F32,
    /// 2 bytes.
    Bf16,
    /// 1 byte, log-scale with stochastic rounding.
    U8,
}

/// A parsed optimizer specification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct OptSpec {
    /// The text as given (the label in tables).
    pub(crate) label: String,
    /// Family.
    pub(crate) kind: Kind,
    /// Learning rate (`None` = the family default).
    pub(crate) lr: Option<f32>,
    /// BASIS mode.
    pub(crate) mode: Mode,
    /// Explicit bucket count.
    pub(crate) buckets: Option<u32>,
    /// Rows per bucket (used when `buckets` is not given).
    pub(crate) ratio: Option<f64>,
    /// Hypergradient (true) or normalized (false) scalar rule.
    pub(crate) hypergradient: bool,
    /// Row-scalar storage (`None` = mode default).
    pub(crate) storage: Option<Storage>,
    /// Hash choices (1 = one-choice).
    pub(crate) choices: u8,
    /// Scalar learning rate (`None` = core default).
    pub(crate) scalar_lr: Option<f32>,
    /// `RowScaled` accumulation named by `accumulate` (`None` = the core
    /// default's kind).
    pub(crate) accumulate: Option<AccumulateKind>,
    /// `RowScaled` accumulation β (`None` = the core default's β, else
    /// `Accumulate::DEFAULT_BETA`, 0.99).
    pub(crate) beta: Option<f32>,
    /// `RowScaled` count-annealed exponent (`None` = the core default's, else
    /// `Accumulate::DEFAULT_POWER`, 0.5).
    pub(crate) power: Option<f32>,
    /// `RowScaled` row counter of `anneal`/`ema-anneal` (`None` = the core
    /// default's).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "counter_name"
    )]
    pub(crate) counter: Option<RowCounter>,
    /// `RowScaled` profile exponent (`None` = the CLI default).
    pub(crate) profile: Option<f32>,
    /// `RowScaled` leading profile group (`None` = the CLI default).
    pub(crate) lead: Option<usize>,
    /// `RowScaled`: ε inside the square root.
    pub(crate) eps_inside: bool,
    /// FTRL's β (`None` = the core default).
    pub(crate) ftrl_beta: Option<f32>,
    /// FTRL's λ1 (`None` = the core default).
    pub(crate) l1: Option<f32>,
    /// FTRL's λ2 (`None` = the core default).
    pub(crate) l2: Option<f32>,
    /// 8-bit Adam's values per absmax (`None` = the core default).
    pub(crate) block: Option<usize>,
    /// The Adam family's β1 (`None` = `AdamConfig`'s default, 0.9).
    pub(crate) beta1: Option<f32>,
    /// The run trains one pass over its data (`--epochs 1`): set from the
    /// run, not the text ([`OptSpec::for_epochs`]).
    pub(crate) one_pass: bool,
}

/// A bad specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpecError(pub(crate) String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad optimizer spec: {}", self.0)
    }
}

impl core::error::Error for SpecError {}

/// The `accumulate` key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AccumulateKind {
    /// `sum`: [`Accumulate::Sum`].
    Sum,
    /// `ema`: [`Accumulate::Ema`].
    Ema,
    /// `decay`: [`Accumulate::Decayed`].
    Decayed,
    /// `anneal`: [`Accumulate::CountAnnealed`].
    Annealed,
    /// `ema-anneal`: [`Accumulate::EmaAnnealed`].
    #[serde(rename = "ema-anneal")]
    EmaAnnealed,
}

impl OptSpec {
    /// The `RowScaled` accumulation: the keys over `default` (basis-core's).
    /// `beta` alone keeps the default's kind if it has a β, else means `ema`;
    /// `power` alone keeps the default's kind if it has a power (`anneal`,
    /// `ema-anneal`: basis-core's default), else means `anneal`.
    pub(crate) fn accumulate_over(&self, default: Accumulate) -> Accumulate {
        let default_beta = match default {
            Accumulate::Ema { beta }
            | Accumulate::Decayed { beta }
            | Accumulate::EmaAnnealed { beta, .. } => Some(beta),
            _ => None,
        };
        let beta = self
            .beta
            .or(default_beta)
            .unwrap_or(Accumulate::DEFAULT_BETA);
        let default_power = match default {
            Accumulate::CountAnnealed { power } | Accumulate::EmaAnnealed { power, .. } => {
                Some(power)
            }
            _ => None,
        };
        let kind = self.accumulate.unwrap_or(match default {
            Accumulate::EmaAnnealed { .. } => AccumulateKind::EmaAnnealed,
            _ if self.power.is_some() => AccumulateKind::Annealed,
            Accumulate::Decayed { .. } => AccumulateKind::Decayed,
            Accumulate::CountAnnealed { .. } if self.beta.is_none() => AccumulateKind::Annealed,
            Accumulate::Sum if self.beta.is_none() => AccumulateKind::Sum,
            _ => AccumulateKind::Ema,
        });
        let power = self.power.or(default_power).unwrap_or(match kind {
            AccumulateKind::EmaAnnealed => Accumulate::DEFAULT_EMA_ANNEAL_POWER,
            _ => Accumulate::DEFAULT_POWER,
        });
        match kind {
            AccumulateKind::Sum => Accumulate::Sum,
            AccumulateKind::Ema => Accumulate::Ema { beta },
            AccumulateKind::Decayed => Accumulate::Decayed { beta },
            AccumulateKind::Annealed => Accumulate::CountAnnealed { power },
            AccumulateKind::EmaAnnealed => Accumulate::EmaAnnealed { beta, power },
        }
    }
}

impl OptSpec {
    /// This spec on a run of `epochs` passes over its training data.
    pub(crate) fn for_epochs(&self, epochs: u32) -> Self {
        Self {
            one_pass: epochs <= 1,
            ..self.clone()
        }
    }

    /// Whether the text names the `RowScaled` accumulation (`accumulate`,
    /// `beta`, `power` or `counter`).
    fn names_accumulation(&self) -> bool {
        self.accumulate.is_some()
            || self.beta.is_some()
            || self.power.is_some()
            || self.counter.is_some()
    }

    /// `basis-core`'s measured configuration the keys build over:
    /// [`BasisConfig::defaults_for_epochs`] the mode and the run's passes
    /// (so plain `basis` on an `--epochs 1` run is
    /// [`BasisConfig::one_pass`]) unless the text names the accumulation;
    /// then the mode's multi-epoch default, so that `beta`, `power` and
    /// `counter` mean the same on every run.
    pub(crate) fn core_defaults(&self) -> BasisConfig {
        let epochs = if self.one_pass && !self.names_accumulation() {
            1
        } else {
            u32::MAX
        };
        BasisConfig::defaults_for_epochs(self.mode.direction(), epochs)
    }

    /// Whether the run's passes choose this spec's configuration: BASIS
    /// `rowscaled` with no accumulation named (what a resumed run must
    /// not change).
    pub(crate) fn passes_choose_defaults(&self) -> bool {
        self.kind == Kind::Basis && self.mode == Mode::RowScaled && !self.names_accumulation()
    }

    /// Whether this spec builds over [`BasisConfig::one_pass`] because
    /// its run is one pass.
    pub(crate) fn takes_one_pass_defaults(&self) -> bool {
        self.one_pass && self.passes_choose_defaults()
    }
}

impl OptSpec {
    /// The `RowScaled` row counter: the `counter` key over `default`
    /// (basis-core's).
    pub(crate) fn counter_over(&self, default: RowCounter) -> RowCounter {
        self.counter.unwrap_or(default)
    }
}

/// `counter`'s spec value (`exact`, `log4`, `log3`, `log3-wide`) in the JSON output.
fn counter_name<S: serde::Serializer>(c: &Option<RowCounter>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match c {
        Some(RowCounter::Log4) => "log4",
        Some(RowCounter::Log3) => "log3",
        Some(RowCounter::Log3Wide) => "log3-wide",
        _ => "exact",
    })
}

impl OptSpec {
    /// Default learning rate of the family (chosen on the synthetic data's
    /// validation split; see docs/RESULTS.md).
    pub(crate) fn default_lr(&self) -> f32 {
        match self.kind {
            Kind::Adam | Kind::Adam8bit => 0.001,
            // Their best validation rate on the synthetic FM was 0.003
            // (docs/RESULTS.md, "Baselines").
            Kind::PartialRowwiseAdam | Kind::RowStepAdam => 0.003,
            Kind::Ftrl => basis_core::FtrlConfig::default().alpha,
            Kind::RowwiseAdagrad => 0.03,
            Kind::Sgd => 3.0,
            Kind::Basis | Kind::Countsketch => match self.mode {
                // One profile over the FM row's `w` and `v` steps larger on `v`.
                Mode::RowScaled if self.lead == Some(0) => ONE_PROFILE_FM_LR,
                _ => self.core_defaults().lr,
            },
        }
    }

    /// The learning rate in use.
    pub(crate) fn lr(&self) -> f32 {
        self.lr.unwrap_or_else(|| self.default_lr())
    }

    /// Row-scalar storage in use.
    pub(crate) fn storage(&self) -> Storage {
        self.storage
            .unwrap_or(match self.core_defaults().scalar_storage {
                ScalarStorage::LogU8 => Storage::U8,
                ScalarStorage::Bf16 => Storage::Bf16,
                // F32, and any storage basis-core adds later.
                _ => Storage::F32,
            })
    }

    /// Bucket count for `rows` rows: `buckets`, else `⌈rows / ratio⌉` (at
    /// least 1), else basis-core's automatic choice from the row count,
    /// [`BasisConfig::buckets_for`] (so a new core rule reaches the CLI).
    pub(crate) fn buckets_for(&self, rows: usize) -> u32 {
        match (self.buckets, self.ratio) {
            (Some(b), _) => b,
            (None, Some(r)) => ((rows as f64 / r).ceil() as u32).max(1),
            (None, None) => self.core_defaults().buckets_for(rows as u64),
        }
    }

    /// A copy with another learning rate and a label saying so.
    pub(crate) fn with_lr(&self, lr: f32) -> Self {
        Self {
            lr: Some(lr),
            ..self.clone()
        }
    }
}

fn num<T: core::str::FromStr>(key: &str, v: &str) -> Result<T, SpecError> {
    v.parse()
        .map_err(|_| SpecError(format!("`{key}={v}`: not a valid number")))
}

impl core::str::FromStr for OptSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Self, SpecError> {
        let (name, rest) = text.split_once(':').unwrap_or((text, ""));
        let kind = match name {
            "adam" => Kind::Adam,
            "basis" => Kind::Basis,
            "rowwise-adagrad" | "adagrad" => Kind::RowwiseAdagrad,
            "countsketch" => Kind::Countsketch,
            "sgd" => Kind::Sgd,
            "partial-rowwise-adam" | "pra" => Kind::PartialRowwiseAdam,
            "rowstep-adam" | "adam-rowstep" => Kind::RowStepAdam,
            "ftrl" => Kind::Ftrl,
            "adam8bit" | "adam-8bit" => Kind::Adam8bit,
            other => {
                return Err(SpecError(format!(
                    "unknown optimizer `{other}` (adam, basis, rowwise-adagrad, countsketch, sgd, partial-rowwise-adam, rowstep-adam, ftrl, adam8bit)"
                )));
            }
        };
        let mut spec = Self {
            label: text.to_string(),
            kind,
            lr: None,
            mode: if kind == Kind::Countsketch {
                Mode::Signed
            } else {
                Mode::RowScaled
            },
            buckets: None,
            ratio: None,
            hypergradient: false,
            storage: None,
            choices: 1,
            scalar_lr: None,
            accumulate: None,
            beta: None,
            power: None,
            counter: None,
            profile: None,
            lead: None,
            eps_inside: false,
            ftrl_beta: None,
            l1: None,
            l2: None,
            block: None,
            beta1: None,
            one_pass: false,
        };
        let mut keys: Vec<&str> = Vec::new();
        let bucketed = matches!(kind, Kind::Basis | Kind::Countsketch);
        // The keys a baseline reads besides `lr`.
        let own: &[&str] = match kind {
            Kind::Ftrl => &["beta", "l1", "l2"],
            Kind::Adam8bit => &["block", "beta1"],
            Kind::Adam | Kind::PartialRowwiseAdam | Kind::RowStepAdam => &["beta1"],
            _ => &[],
        };
        let mut seen: Vec<&str> = Vec::new();
        for kv in rest.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| SpecError(format!("`{kv}` is not key=value")))?;
            // The last value silently winning hides a typo (`lr=0.1,lr=0.2`).
            if seen.contains(&k) {
                return Err(SpecError(format!("`{k}` is given twice")));
            }
            seen.push(k);
            if k != "lr" && !bucketed && !own.contains(&k) {
                let takes = if own.is_empty() {
                    "only `lr`".to_string()
                } else {
                    format!("`lr`, `{}`", own.join("`, `"))
                };
                return Err(SpecError(format!("`{name}` takes {takes}, not `{k}`")));
            }
            keys.push(k);
            match k {
                "lr" => {
                    let lr: f32 = num(k, v)?;
                    if !(lr.is_finite() && lr > 0.0) {
                        return Err(SpecError(format!("lr must be > 0, got {v}")));
                    }
                    spec.lr = Some(lr);
                }
                "beta" if kind == Kind::Ftrl => {
                    let b: f32 = num(k, v)?;
                    if !(b.is_finite() && b > 0.0) {
                        return Err(SpecError("ftrl beta must be > 0".into()));
                    }
                    spec.ftrl_beta = Some(b);
                }
                "l1" | "l2" => {
                    let x: f32 = num(k, v)?;
                    if !(x.is_finite() && x >= 0.0) {
                        return Err(SpecError(format!("{k} must be >= 0")));
                    }
                    *(if k == "l1" {
                        &mut spec.l1
                    } else {
                        &mut spec.l2
                    }) = Some(x);
                }
                "beta1" if !bucketed => {
                    let b: f32 = num(k, v)?;
                    if !(0.0..1.0).contains(&b) {
                        return Err(SpecError(format!("beta1 must be in [0, 1), got {v}")));
                    }
                    spec.beta1 = Some(b);
                }
                "block" => {
                    let b: usize = num(k, v)?;
                    if b == 0 {
                        return Err(SpecError("block must be >= 1".into()));
                    }
                    spec.block = Some(b);
                }
                "mode" if kind == Kind::Basis => {
                    spec.mode = match v {
                        "rowscaled" | "row-scaled" => Mode::RowScaled,
                        "shared" => Mode::Shared,
                        "signed" => Mode::Signed,
                        "own" | "own-gradient" => Mode::Own,
                        _ => {
                            return Err(SpecError(format!(
                                "mode `{v}` (rowscaled, shared, signed, own)"
                            )));
                        }
                    }
                }
                "buckets" => {
                    let b: u32 = num(k, v)?;
                    if b == 0 {
                        return Err(SpecError("buckets must be >= 1".into()));
                    }
                    spec.buckets = Some(b);
                }
                "ratio" => {
                    let r: f64 = num(k, v)?;
                    if !(r.is_finite() && r >= 1.0) {
                        return Err(SpecError("ratio (rows per bucket) must be >= 1".into()));
                    }
                    spec.ratio = Some(r);
                }
                "rule" => {
                    spec.hypergradient = match v {
                        "normalized" => false,
                        "hypergradient" => true,
                        _ => {
                            return Err(SpecError(format!(
                                "rule `{v}` (normalized, hypergradient)"
                            )));
                        }
                    }
                }
                "storage" => {
                    spec.storage = Some(match v {
                        "f32" => Storage::F32,
                        "bf16" => Storage::Bf16,
                        "u8" => Storage::U8,
                        _ => return Err(SpecError(format!("storage `{v}` (f32, bf16, u8)"))),
                    })
                }
                "choices" => {
                    let c: u8 = num(k, v)?;
                    if !(1..=4).contains(&c) {
                        return Err(SpecError("choices must be 1 to 4".into()));
                    }
                    spec.choices = c;
                }
                "scalar-lr" => {
                    let s: f32 = num(k, v)?;
                    if !(s.is_finite() && s >= 0.0) {
                        return Err(SpecError("scalar-lr must be >= 0".into()));
                    }
                    spec.scalar_lr = Some(s);
                }
                "accumulate" => {
                    spec.accumulate = Some(match v {
                        "sum" => AccumulateKind::Sum,
                        "ema" => AccumulateKind::Ema,
                        "decay" => AccumulateKind::Decayed,
                        "anneal" => AccumulateKind::Annealed,
                        "ema-anneal" => AccumulateKind::EmaAnnealed,
                        _ => {
                            return Err(SpecError(format!(
                                "accumulate `{v}` (sum, ema, decay, anneal, ema-anneal)"
                            )));
                        }
                    });
                }
                "beta" => {
                    let b: f32 = num(k, v)?;
                    if !(0.0..1.0).contains(&b) {
                        return Err(SpecError("beta must be in [0, 1)".into()));
                    }
                    spec.beta = Some(b);
                }
                "power" => {
                    let c: f32 = num(k, v)?;
                    if !(c.is_finite() && c >= 0.0) {
                        return Err(SpecError("power must be finite and >= 0".into()));
                    }
                    spec.power = Some(c);
                }
                "counter" => {
                    spec.counter = Some(match v {
                        "exact" => RowCounter::Exact,
                        "log4" => RowCounter::Log4,
                        "log3" => RowCounter::Log3,
                        "log3-wide" => RowCounter::Log3Wide,
                        _ => {
                            return Err(SpecError(format!(
                                "counter `{v}` (exact, log4, log3, log3-wide)"
                            )));
                        }
                    });
                }
                "profile" => {
                    let x: f32 = num(k, v)?;
                    if !(0.0..=1.0).contains(&x) {
                        return Err(SpecError("profile (exponent) must be in [0, 1]".into()));
                    }
                    spec.profile = Some(x);
                }
                "lead" => spec.lead = Some(num(k, v)?),
                "eps" => {
                    spec.eps_inside = match v {
                        "inside" => true,
                        "outside" => false,
                        _ => return Err(SpecError(format!("eps `{v}` (inside, outside)"))),
                    }
                }
                _ => {
                    return Err(SpecError(format!(
                        "unknown key `{k}` for `{name}` (lr, mode, buckets, ratio, rule, storage, choices, scalar-lr, accumulate, beta, power, counter, profile, lead, eps)"
                    )));
                }
            }
        }
        // The baselines take only their own keys (checked above).
        if bucketed {
            inert_keys(&spec, &keys)?;
        }
        if spec.buckets.is_some() && spec.ratio.is_some() {
            return Err(SpecError("give `buckets` or `ratio`, not both".into()));
        }
        Ok(spec)
    }
}

/// `rowscaled`'s profile exponent when `profile` is not given: basis-core's.
pub(crate) const DEFAULT_PROFILE: f32 = Profile::DEFAULT.power;
/// `rowscaled`'s leading profile group when `lead` is not given, set from
/// the CLI's models (not a basis-core default, whose `lead` 0 is right for
/// rows of one kind): every model's row is `[w, v_1..v_k]` (FM, and the
/// DeepFM/DLRM tables built on it), and the linear weight `w` is its own
/// group, because one profile over `w` and `v` gives the (much smaller)
/// embedding gradients a much larger step than row-wise AdaGrad does, and
/// that cost 0.007 test AUC on the synthetic data (docs/BASIS.md, ablation).
pub(crate) const DEFAULT_LEAD: usize = 1;
/// The rate of `basis:lead=0` on the CLI's `[w, v]` rows: one profile over
/// both kinds tolerates only 0.01 (docs/BASIS.md, issue 15 ablation).
pub(crate) const ONE_PROFILE_FM_LR: f32 = 0.01;

/// The optimizers `basis compare` runs when none is named.
pub(crate) const DEFAULT_COMPARE: &[&str] = &[
    "adam",
    "rowwise-adagrad",
    "sgd",
    "basis",
    "basis:mode=own",
    "basis:mode=shared",
    "countsketch",
];

// Options that would do nothing are errors: a key that the chosen mode
// never reads (`rule=hypergradient` with `rowscaled` was once accepted and
// silently ignored) is refused with the reason.

/// Keys read only by the learned-scalar modes (`shared`, `signed`, `own`).
const SCALAR_KEYS: &[&str] = &["rule", "scalar-lr"];
/// Keys read only by `rowscaled`.
const ROW_SCALED_KEYS: &[&str] = &[
    "accumulate",
    "beta",
    "power",
    "counter",
    "profile",
    "lead",
    "eps",
];

/// Refuses the keys of `given` that `spec` (fully parsed) never reads.
fn inert_keys(spec: &OptSpec, given: &[&str]) -> Result<(), SpecError> {
    let inert = |k: &str, why: &str| SpecError(format!("`{k}` does nothing here: {why}"));
    for &k in given {
        if spec.mode == Mode::RowScaled && SCALAR_KEYS.contains(&k) {
            return Err(inert(k, "mode=rowscaled has no learned row scalar"));
        }
        if spec.mode != Mode::RowScaled && ROW_SCALED_KEYS.contains(&k) {
            return Err(inert(k, "only mode=rowscaled reads it"));
        }
        let frozen = spec.mode != Mode::RowScaled && spec.scalar_lr == Some(0.0);
        if frozen && (k == "rule" || k == "storage") {
            return Err(inert(k, "scalar-lr=0 freezes (and stores no) row scalars"));
        }
        // What the keys build over basis-core's default (so a new default
        // changes what an unset `accumulate` means here too).
        let effective = spec.accumulate_over(spec.core_defaults().row_scale.accumulate);
        if k == "beta" && effective == Accumulate::Sum {
            return Err(inert(k, "accumulate=sum has no β"));
        }
        if k == "beta" && matches!(effective, Accumulate::CountAnnealed { .. }) {
            return Err(inert(
                k,
                "accumulate=anneal has no β (its memory is set by `power`)",
            ));
        }
        let counts = effective.counts_rows();
        if k == "power" && !counts {
            return Err(inert(k, "only accumulate=anneal|ema-anneal read it"));
        }
        if k == "counter" && !counts {
            return Err(inert(
                k,
                "only accumulate=anneal|ema-anneal keep a row count",
            ));
        }
    }
    if spec.mode == Mode::RowScaled && spec.profile == Some(0.0) && spec.lead.is_some() {
        return Err(inert("lead", "profile=0 has no profile groups"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One source of truth: the plain `basis` spec builds basis-core's
    /// `BasisConfig::default()` (the EMA with β = 0.99 annealed past 100
    /// updates of a row, a 3-bit row counter, η = 0.003, 1-byte `G_i`,
    /// docs/BASIS.md) except for what the CLI sets from its model: the FM's
    /// `lead` 1 and the run's seed mixed into the core's.
    #[test]
    fn the_basis_spec_is_the_core_default() {
        use basis_core::RowIndex;
        let core = BasisConfig::default();
        assert_eq!(
            core.row_scale.accumulate,
            Accumulate::EmaAnnealed {
                beta: 0.99,
                power: 1.0
            }
        );
        assert_eq!(core.row_scale.counter, RowCounter::Log3Wide);
        assert_eq!(core.lr, 0.003);
        assert_spec_builds("basis", 3, core);
        // `accumulate=ema` without `beta` is the default's β too.
        let ema: OptSpec = "basis:accumulate=ema".parse().unwrap();
        assert_eq!(
            ema.accumulate_over(Accumulate::Sum),
            Accumulate::Ema {
                beta: Accumulate::DEFAULT_BETA
            }
        );
        // `beta` or `power` alone keep the default rule and set its key;
        // `ema-anneal` with `counter` alone keeps the default's counter.
        for (text, accumulate) in [
            (
                "basis:beta=0.9",
                Accumulate::EmaAnnealed {
                    beta: 0.9,
                    power: 1.0,
                },
            ),
            (
                "basis:power=2",
                Accumulate::EmaAnnealed {
                    beta: 0.99,
                    power: 2.0,
                },
            ),
            (
                "basis:beta=0.9,power=0.5",
                Accumulate::EmaAnnealed {
                    beta: 0.9,
                    power: 0.5,
                },
            ),
        ] {
            let spec: OptSpec = text.parse().unwrap();
            let built = crate::optim::basis_config(&spec, RowIndex::Sparse, core.dim, 0);
            assert_eq!(built.row_scale.accumulate, accumulate, "{text}");
            assert_eq!(built.row_scale.counter, RowCounter::Log3Wide, "{text}");
        }
        let exact: OptSpec = "basis:counter=exact".parse().unwrap();
        let built = crate::optim::basis_config(&exact, RowIndex::Sparse, core.dim, 0);
        assert_eq!(built.row_scale.counter, RowCounter::Exact);
        assert_eq!(built.validate(), Ok(()));
    }

    /// The one-pass configuration basis-core names is one spec away:
    /// `basis:accumulate=sum,lr=0.01` builds `BasisConfig::one_pass()` with
    /// the model's `lead` (docs/CLI.md).
    #[test]
    fn the_one_pass_spec_is_the_core_one_pass() {
        assert_spec_builds("basis:accumulate=sum,lr=0.01", 3, BasisConfig::one_pass());
    }

    /// The run's passes choose what plain `basis` means, through
    /// basis-core's rule (`BasisConfig::defaults_for_epochs`): one pass is
    /// `one_pass()`, several are `Default`. A named accumulation key builds
    /// over `Default` on every run (so `beta`, `power` and `counter` keep
    /// their meaning); keys that are not the accumulation's keep one pass.
    #[test]
    fn the_run_s_passes_choose_the_plain_basis_configuration() {
        let one = BasisConfig::one_pass();
        let default = BasisConfig::default();
        assert_spec_builds("basis", 1, one);
        assert_spec_builds("basis", 0, one);
        assert_spec_builds("basis", 2, default);
        assert_spec_builds(
            "basis:storage=bf16",
            1,
            one.with_scalar_storage(ScalarStorage::Bf16),
        );
        assert_spec_builds("basis:lr=0.03", 1, one.with_lr(0.03));
        let beta = Accumulate::EmaAnnealed {
            beta: 0.9,
            power: 1.0,
        };
        let ema = default.with_row_scale(default.row_scale.with_accumulate(beta));
        assert_spec_builds("basis:beta=0.9", 1, ema);
        assert_spec_builds("basis:accumulate=ema-anneal", 1, default);
        // Only plain BASIS `rowscaled` is chosen by the passes.
        for text in [
            "basis:mode=own",
            "countsketch",
            "rowwise-adagrad",
            "basis:power=1",
        ] {
            let spec: OptSpec = text.parse().unwrap();
            assert!(!spec.for_epochs(1).takes_one_pass_defaults(), "{text}");
            assert_eq!(spec.for_epochs(1).lr(), spec.for_epochs(3).lr(), "{text}");
        }
        let plain: OptSpec = "basis".parse().unwrap();
        assert!(plain.for_epochs(1).takes_one_pass_defaults());
        assert!(!plain.for_epochs(3).takes_one_pass_defaults());
    }

    /// `text` on a run of `epochs` builds `core` with the CLI's model
    /// `lead`, at `core`'s rate.
    fn assert_spec_builds(text: &str, epochs: u32, core: BasisConfig) {
        let spec: OptSpec = text.parse::<OptSpec>().unwrap().for_epochs(epochs);
        let built = crate::optim::basis_config(&spec, basis_core::RowIndex::Sparse, core.dim, 0);
        let lead1 = core
            .row_scale
            .with_profile(core.row_scale.profile.with_lead(DEFAULT_LEAD));
        assert_eq!(built, core.with_row_scale(lead1), "{text}");
        assert_eq!(spec.lr(), core.lr, "{text}");
    }

    /// `accumulate`/`beta` over basis-core's default: an unset key keeps the
    /// default (so a new core default reaches the CLI), `beta` alone keeps a
    /// kind that has one and otherwise means `ema`.
    #[test]
    fn accumulate_keys_over_the_core_default() {
        let sum = Accumulate::Sum;
        let decayed = Accumulate::Decayed { beta: 0.95 };
        let ema = Accumulate::Ema { beta: 0.95 };
        for (text, over_sum, over_decayed) in [
            ("basis", sum, decayed),
            ("basis:accumulate=sum", sum, sum),
            ("basis:accumulate=ema", Accumulate::Ema { beta: 0.99 }, ema),
            (
                "basis:accumulate=decay,beta=0.999",
                Accumulate::Decayed { beta: 0.999 },
                Accumulate::Decayed { beta: 0.999 },
            ),
            (
                "basis:beta=0.9",
                Accumulate::Ema { beta: 0.9 },
                Accumulate::Decayed { beta: 0.9 },
            ),
        ] {
            let spec: OptSpec = text.parse().unwrap();
            assert_eq!(spec.accumulate_over(sum), over_sum, "{text} over sum");
            assert_eq!(
                spec.accumulate_over(decayed),
                over_decayed,
                "{text} over decay"
            );
        }
        let e = "basis:accumulate=adam".parse::<OptSpec>().unwrap_err();
        assert!(e.0.contains("(sum, ema, decay, anneal, ema-anneal)"), "{e}");
    }

    /// `counter` (basis-core's `RowCounter`) reaches the configuration the
    /// CLI builds; an unset key keeps the core default's; a counter that
    /// nothing reads (an accumulation without a count, a learned-scalar
    /// mode) or an unknown one is refused with the reason.
    #[test]
    fn counter_key_reaches_the_row_scale() {
        use basis_core::RowIndex;
        for (text, counter) in [
            ("basis:accumulate=ema-anneal,counter=log4", RowCounter::Log4),
            ("basis:accumulate=ema-anneal,counter=log3", RowCounter::Log3),
            (
                "basis:accumulate=ema-anneal,counter=log3-wide",
                RowCounter::Log3Wide,
            ),
            ("basis:accumulate=anneal,counter=log4", RowCounter::Log4),
            (
                "basis:accumulate=ema-anneal,counter=exact",
                RowCounter::Exact,
            ),
            (
                "basis:accumulate=ema-anneal",
                BasisConfig::default().row_scale.counter,
            ),
        ] {
            let spec: OptSpec = text.parse().unwrap();
            let c = crate::optim::basis_config(&spec, RowIndex::Dense { rows: 5000 }, 17, 3);
            assert_eq!(c.row_scale.counter, counter, "{text}");
            assert_eq!(c.validate(), Ok(()), "{text}");
        }
        let unset: OptSpec = "basis:accumulate=ema-anneal".parse().unwrap();
        assert_eq!(unset.counter_over(RowCounter::Log3), RowCounter::Log3);
        for (text, why) in [
            ("basis:accumulate=ema,counter=log4", "keep a row count"),
            ("basis:accumulate=sum,counter=exact", "keep a row count"),
            ("basis:mode=own,counter=log4", "only mode=rowscaled"),
            (
                "basis:accumulate=ema-anneal,counter=log5",
                "(exact, log4, log3, log3-wide)",
            ),
        ] {
            let e = text.parse::<OptSpec>().unwrap_err();
            assert!(e.0.contains(why), "{text}: {e}");
        }
    }

    /// `accumulate=anneal` / `power` (basis-core's `CountAnnealed`): the
    /// kind and exponent over any core default, and the keys refused where
    /// they would do nothing.
    #[test]
    fn anneal_keys_over_the_core_default() {
        let annealed = |power| Accumulate::CountAnnealed { power };
        let ema = Accumulate::Ema { beta: 0.95 };
        let core_annealed = annealed(0.7);
        for (text, over_ema, over_annealed) in [
            ("basis", ema, core_annealed),
            ("basis:accumulate=anneal", annealed(0.5), core_annealed),
            ("basis:power=0.8", annealed(0.8), annealed(0.8)),
            (
                "basis:accumulate=anneal,power=1",
                annealed(1.0),
                annealed(1.0),
            ),
            ("basis:accumulate=ema", ema, Accumulate::Ema { beta: 0.99 }),
            (
                "basis:beta=0.9",
                Accumulate::Ema { beta: 0.9 },
                Accumulate::Ema { beta: 0.9 },
            ),
        ] {
            let spec: OptSpec = text.parse().unwrap();
            assert_eq!(spec.accumulate_over(ema), over_ema, "{text} over ema");
            assert_eq!(
                spec.accumulate_over(core_annealed),
                over_annealed,
                "{text} over anneal"
            );
        }
        for (bad, why) in [
            ("basis:accumulate=anneal,beta=0.9", "has no β"),
            ("basis:accumulate=ema,power=0.5", "only accumulate=anneal"),
            ("basis:accumulate=sum,power=0.5", "only accumulate=anneal"),
            ("basis:power=-1", "power must be finite"),
            ("basis:power=nan", "power must be finite"),
            ("basis:mode=shared,power=0.5", "only mode=rowscaled"),
            ("adam:power=0.5", "takes"),
        ] {
            let e = bad.parse::<OptSpec>().unwrap_err();
            assert!(e.0.contains(why), "{bad}: {e}");
        }
    }

    /// `accumulate=ema-anneal` (basis-core's `EmaAnnealed`): `beta` and
    /// `power` both read, defaults 0.99 and 1, over the EMA default and over
    /// a core default of this kind (whose values the bare keys keep).
    #[test]
    fn ema_anneal_keys_over_the_core_default() {
        let ea = |beta, power| Accumulate::EmaAnnealed { beta, power };
        let ema = Accumulate::Ema { beta: 0.95 };
        let core = ea(0.98, 0.7);
        for (text, over_ema, over_core) in [
            ("basis", ema, core),
            (
                "basis:accumulate=ema-anneal",
                ea(0.95, Accumulate::DEFAULT_EMA_ANNEAL_POWER),
                core,
            ),
            (
                "basis:accumulate=ema-anneal,beta=0.9,power=0.5",
                ea(0.9, 0.5),
                ea(0.9, 0.5),
            ),
            (
                "basis:power=0.8",
                Accumulate::CountAnnealed { power: 0.8 },
                ea(0.98, 0.8),
            ),
            (
                "basis:beta=0.9",
                Accumulate::Ema { beta: 0.9 },
                ea(0.9, 0.7),
            ),
        ] {
            let spec: OptSpec = text.parse().unwrap();
            assert_eq!(spec.accumulate_over(ema), over_ema, "{text} over ema");
            assert_eq!(spec.accumulate_over(core), over_core, "{text} over core");
        }
        assert_eq!(Accumulate::DEFAULT_EMA_ANNEAL_POWER, 1.0);
        let e = "basis:accumulate=ema-anneal,beta=1"
            .parse::<OptSpec>()
            .unwrap_err();
        assert!(e.0.contains("beta must be in [0, 1)"), "{e}");
        let e = "basis:mode=own,accumulate=ema-anneal"
            .parse::<OptSpec>()
            .unwrap_err();
        assert!(e.0.contains("only mode=rowscaled"), "{e}");
    }

    #[test]
    fn parses_every_default_and_rejects_nonsense() {
        for s in DEFAULT_COMPARE {
            let spec: OptSpec = s.parse().unwrap();
            assert_eq!(spec.label, *s);
        }
        let s: OptSpec = "basis:mode=shared,ratio=50,storage=bf16,choices=2,lr=0.1"
            .parse()
            .unwrap();
        assert_eq!(
            (s.mode, s.ratio, s.storage(), s.choices, s.lr),
            (Mode::Shared, Some(50.0), Storage::Bf16, 2, Some(0.1))
        );
        assert_eq!(s.buckets_for(1000), 20);
        // The default `basis` keeps the FM's linear weight apart, at its own rate.
        let b: OptSpec = "basis".parse().unwrap();
        assert_eq!((b.lead.unwrap_or(DEFAULT_LEAD), b.lr()), (1, 0.003));
        let f: OptSpec = "ftrl:beta=0.5,l1=0.01,l2=0.1,lr=0.2".parse().unwrap();
        assert_eq!(
            (f.kind, f.ftrl_beta, f.l1, f.l2, f.lr()),
            (Kind::Ftrl, Some(0.5), Some(0.01), Some(0.1), 0.2)
        );
        for (alias, kind) in [
            ("pra", Kind::PartialRowwiseAdam),
            ("adam-rowstep", Kind::RowStepAdam),
            ("adam-8bit:block=64", Kind::Adam8bit),
        ] {
            assert_eq!(alias.parse::<OptSpec>().unwrap().kind, kind);
        }
        for (text, beta1) in [
            ("adam:beta1=0", 0.0),
            ("pra:beta1=0.5", 0.5),
            ("adam8bit:beta1=0,block=8", 0.0),
        ] {
            assert_eq!(
                text.parse::<OptSpec>().unwrap().beta1,
                Some(beta1),
                "{text}"
            );
        }
        let one: OptSpec = "basis:lead=0".parse().unwrap();
        assert_eq!(one.lr(), 0.01);
        for bad in [
            "nope",
            "adam:mode=shared",
            "basis:ratio=0.5",
            "basis:buckets=3,ratio=2",
            "basis:lr=-1",
            "basis:x",
            "pra:beta=0.5",
            "ftrl:l1=-1",
            "ftrl:mode=own",
            "adam8bit:block=0",
            "rowstep-adam:block=4",
            "adam:beta1=1",
            "adam:beta1=-0.1",
            "basis:beta1=0",
            "ftrl:beta1=0",
        ] {
            assert!(bad.parse::<OptSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_the_mode_ignores_are_refused_and_read_keys_pass() {
        for bad in [
            "basis:rule=hypergradient",
            "basis:mode=rowscaled,scalar-lr=0.1",
            "basis:scalar-lr=0.1,mode=rowscaled",
            "basis:mode=own,accumulate=ema",
            "basis:mode=shared,profile=0.5",
            "basis:lead=1,mode=own",
            "countsketch:eps=inside",
            "basis:mode=own,scalar-lr=0,rule=hypergradient",
            "basis:mode=own,scalar-lr=0,storage=u8",
            "basis:profile=0,lead=1",
            "basis:accumulate=sum,beta=0.9",
        ] {
            let e = bad.parse::<super::OptSpec>().unwrap_err();
            assert!(e.0.contains("does nothing"), "{bad}: {e}");
        }
        for good in [
            "basis:mode=own,rule=hypergradient,scalar-lr=1000",
            "basis:accumulate=ema,beta=0.9",
            "basis:accumulate=decay,beta=0.999",
            "basis:beta=0.9,accumulate=decay",
            "basis:profile=0.5,lead=1,eps=inside",
            "basis:mode=own,scalar-lr=0",
            "countsketch:rule=hypergradient",
        ] {
            assert!(good.parse::<super::OptSpec>().is_ok(), "{good}");
        }
    }
}
