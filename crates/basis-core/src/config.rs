//! Hyper-parameters of BASIS ([`BasisConfig`]) and the mode enums.

pub use crate::config_option::{ConfigOption, Direction};
pub use crate::counter::RowCounter;
use crate::error::ConfigError;

/// How the learned scalar `s_i` moves (Shared, Signed, OwnGradient modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum ScalarRule {
    /// `s_i ← clip(s_i + η_s·η·⟨g_i, u_b⟩)`: gradient descent on `s_i`
    /// (`∂L/∂s_i = −η⟨g_i, u⟩`). Its raw scale is tiny (~1e-6 per step), so
    /// `η_s` must be large (1e3–1e5).
    Hypergradient,
    /// `s_i ← clip(s_i·exp(η_s·cos(g_i, u_b)))`: scale-free in the gradient.
    Normalized,
}

/// How the scalar learning rate depends on a row's update count `n_i`
/// (a frequency-aware scalar learning rate: rare rows adapt faster).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum ScalarLrSchedule {
    /// The same `η_s` for every row.
    Constant,
    /// `η_s,i = η_s · n_i^(−power)` (rare rows adapt faster). Costs a 2-byte
    /// saturating update counter per row.
    InverseFrequency {
        /// The exponent (≥ 0; 0.5 is a good start, 1 is "inversely proportional").
        power: f32,
    },
}

/// How the per-row scalar is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum ScalarStorage {
    /// 4 bytes per row, exact.
    F32,
    /// 2 bytes per row, bfloat16 with stochastic rounding.
    Bf16,
    /// 1 byte per row: a logarithmic code with stochastic rounding, unbiased
    /// in value. For learned scalars the code spans the clip range; for
    /// `RowScaled` it spans [`RowScaleConfig::log2_range`].
    LogU8,
}

impl ScalarStorage {
    /// Bytes per stored row scalar.
    pub const fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::Bf16 => 2,
            Self::LogU8 => 1,
        }
    }
}

/// Precision of the shared bucket tables (`M`, `V`, or the `RowScaled` profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum TablePrecision {
    /// f32.
    F32,
    /// bfloat16 with stochastic rounding; ε is raised to at least
    /// [`BasisConfig::bf16_eps_floor`] as bf16 tables need.
    Bf16,
}

impl TablePrecision {
    /// Bytes per stored value.
    pub const fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::Bf16 => 2,
        }
    }
}

/// What happens to a row whose (summed) gradient holds a NaN or an infinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum NonFinitePolicy {
    /// Skip the row (it and its bucket are untouched) and count it.
    Skip,
    /// Reject the whole step with [`StepError::NonFinite`](crate::StepError::NonFinite).
    Error,
}

/// Where per-row optimizer state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum RowIndex {
    /// Ids `0..rows` in a flat array (fastest, memory for every row).
    Dense {
        /// Number of rows.
        rows: u64,
    },
    /// Arbitrary u64 ids in a hash map (memory only for rows seen).
    Sparse,
}

/// How `RowScaled` accumulates the per-row magnitude `G_i` and the bucket profile.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Accumulate {
    /// AdaGrad: running sums (matches FBGEMM's row-wise AdaGrad; the
    /// default before issue 26's quality benchmark).
    Sum,
    /// Exponential moving average with this β (a row's first value seeds it;
    /// the default, with β = 0.99).
    Ema {
        /// Decay in `[0, 1)`.
        beta: f32,
    },
    /// AdaGrad's sum with forgetting, `G ← β·G + x` (from 0, no seeding):
    /// for a row's first ≪ 1/(1−β) updates it is the sum (steps shrink as
    /// AdaGrad's), later it is 1/(1−β) times an EMA of `x` (steps follow the
    /// current gradient scale). An EMA started at 0 without bias correction,
    /// up to that constant factor (which the learning rate absorbs).
    Decayed {
        /// Decay in `[0, 1)`.
        beta: f32,
    },
    /// A decayed sum whose memory grows with the row's own update count
    /// (issue 26: "keep the step of a rare row, anneal a frequent one"):
    /// `G ← (1 − n^(−power))·G + x`, `n` = the row's updates including this
    /// one, kept in a 2-byte saturating counter per row (so `G = x` at a
    /// row's first update, as the EMA seeds it). Adafactor's `β_t = 1 −
    /// t^(−c)`, with the row's `t` and without Adafactor's `(1 − β)` on `x`:
    /// for gradients of one scale `G ≈ n^power·x`, so a row's step shrinks as
    /// `n^(−power/2)` (AdaGrad's sum: `n^(−1/2)`; the EMA: not at all), while
    /// `G` forgets updates older than about the last `n^power` (it follows
    /// the current gradient scale, which the sum never does). The bucket
    /// profile accumulates alike with the bucket's step count `t_b`.
    ///
    /// Costs 2 B/row beyond the 1-byte `G_i` (the counter saturates at
    /// 65 535 updates, after which β stays `1 − 65535^(−power)`).
    CountAnnealed {
        /// The exponent `c` (finite, ≥ 0; 0 keeps only the last update,
        /// larger values approach the sum).
        power: f32,
    },
    /// The EMA while a row is rare, annealed once it is frequent (issue 26,
    /// 2026-12-06): `G ← β_n·G + (1 − β)·x` with `β_n = max(β, 1 −
    /// n^(−power))`, `n` the row's updates including this one (kept by
    /// [`RowScaleConfig::counter`]: by default a 3-bit log-scale counter,
    /// [`RowCounter::Log3Wide`]; exact with [`RowCounter::Exact`]), and `G = x`
    /// at a row's first update (the EMA's seeding).
    ///
    /// While `n < (1 − β)^(−1/power)` (100 for β 0.99, `power` 1) this is
    /// [`Ema { beta }`](Self::Ema) exactly. Beyond it the weight on `G` grows
    /// but the weight on `x` stays `1 − β`, so for gradients of one scale
    /// `G ≈ (1 − β)·n^power·x` (`power` < 1; half that at 1): a frequent
    /// row's step shrinks as `n^(−power/2)`, continuously from the EMA's at
    /// the switch. (Weighting `x` by `1 − β_n` instead, Adafactor's form,
    /// would make `G` a running *mean*: a longer memory but no annealing.)
    /// The bucket profile accumulates alike with the bucket's step count.
    ///
    /// Costs 3 bits per row beyond the 1-byte `G_i` with the default
    /// counter (1.45 B/row in all at N/B = 1000), 2 B/row with the exact one.
    EmaAnnealed {
        /// The EMA's decay β in `[0, 1)` (the floor of `β_n`).
        beta: f32,
        /// The annealing exponent `c` (finite, ≥ 0; 0 is the EMA).
        power: f32,
    },
}

impl Accumulate {
    /// The β of an `Ema` or `Decayed` accumulation when none is named
    /// (0.99: the default [`Accumulate::Ema`]'s, and what the CLI's
    /// `accumulate=ema|decay` without `beta` means).
    pub const DEFAULT_BETA: f32 = 0.99;

    /// The exponent of a [`CountAnnealed`](Self::CountAnnealed) accumulation
    /// when none is named (0.5: steps shrink as `n^(−1/4)`, half way, in the
    /// exponent, between the EMA's `n^0` and AdaGrad's `n^(−1/2)`; what the
    /// CLI's `accumulate=anneal` without `power` means).
    pub const DEFAULT_POWER: f32 = 0.5;

    /// The exponent of an [`EmaAnnealed`](Self::EmaAnnealed) accumulation
    /// when none is named (1: beyond the switch at `n = 1/(1 − β)` a
    /// frequent row's `G` grows as the sum's, half of `(1 − β)·n·x`; what the
    /// CLI's `accumulate=ema-anneal` without `power` means).
    pub const DEFAULT_EMA_ANNEAL_POWER: f32 = 1.0;

    /// The default accumulation (issue 26, 2026-12-06):
    /// [`Accumulate::EmaAnnealed`] with β [`DEFAULT_BETA`](Self::DEFAULT_BETA)
    /// (0.99) and power
    /// [`DEFAULT_EMA_ANNEAL_POWER`](Self::DEFAULT_EMA_ANNEAL_POWER) (1): the
    /// EMA while a row has had at most 100 updates, annealed past that (see
    /// [`RowScaleConfig::accumulate`]). Its row count is kept by
    /// [`RowScaleConfig::counter`] (default [`RowCounter::Log3Wide`]).
    pub const DEFAULT: Self = Self::EmaAnnealed {
        beta: Self::DEFAULT_BETA,
        power: Self::DEFAULT_EMA_ANNEAL_POWER,
    };

    /// Whether this accumulation keeps a per-row update counter
    /// ([`CountAnnealed`](Self::CountAnnealed),
    /// [`EmaAnnealed`](Self::EmaAnnealed)).
    pub const fn counts_rows(self) -> bool {
        matches!(self, Self::CountAnnealed { .. } | Self::EmaAnnealed { .. })
    }
}

impl Default for Accumulate {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Options of the `RowScaled` direction (`#[non_exhaustive]`: build it from
/// [`Default`] with the `with_*` setters).
///
/// ```
/// use basis_core::{Accumulate, BasisConfig, Profile, RowScaleConfig};
///
/// let row_scale = RowScaleConfig::default()
///     .with_accumulate(Accumulate::Ema { beta: 0.99 })
///     .with_profile(Profile::default().with_power(0.5));
/// let config = BasisConfig::default().with_dim(8).with_row_scale(row_scale);
/// assert_eq!(config.validate(), Ok(()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct RowScaleConfig {
    /// Sum (AdaGrad), EMA, decayed sum, count-annealed sum, or the EMA
    /// annealed once a row is frequent (default [`Accumulate::DEFAULT`]:
    /// [`Accumulate::EmaAnnealed`] with β = 0.99, power 1). Measured on the
    /// 8 sets of the short quality benchmark and the 10^6-example stream,
    /// every rate tuned on validation averaged over 3 seeds (docs/RESULTS.md,
    /// "`ema-anneal` on every set, and a compact counter"): it meets
    /// max(Adam, row-wise AdaGrad) − 0.001 test AUC on every set of ≥ 10^4
    /// rows, including the 10^6 stream where the plain EMA (β 0.99, the
    /// previous default) misses AdaGrad by 0.002; it misses only
    /// MovieLens-100k (5 756 rows, by 0.0026; the EMA by 0.0053). Other
    /// candidates: docs/BASIS.md, "Accumulation candidates for one default".
    pub accumulate: Accumulate,
    /// log₂ of the smallest and largest non-zero `G_i` a 1-byte code holds
    /// (values below the smallest round stochastically to 0 or it; above the
    /// largest saturate; default `(−48, 24)`).
    pub log2_range: (f32, f32),
    /// How the bucket profile shapes a row's step across its dimensions
    /// (default [`Profile::DEFAULT`]).
    pub profile: Profile,
    /// How a row's update count is kept when the accumulation reads one
    /// ([`Accumulate::counts_rows`]; default [`RowCounter::Log3Wide`], 3 bits,
    /// 0.38 B/row, which met the same cells as the exact count:
    /// docs/RESULTS.md; [`RowCounter::Log4`] 0.5 B/row; [`RowCounter::Exact`]
    /// 2 B/row). A value other than the default under an accumulation
    /// without a counter is [`ConfigError::Ignored`].
    pub counter: RowCounter,
}

with_setters!(RowScaleConfig {
    with_accumulate => accumulate: Accumulate,
    with_log2_range => log2_range: (f32, f32),
    with_profile => profile: Profile,
    with_counter => counter: RowCounter,
});

impl RowScaleConfig {
    /// The default: [`Accumulate::DEFAULT`] (the EMA with β = 0.99,
    /// annealed past 100 updates of a row), log₂ range `(−48, 24)`,
    /// [`Profile::DEFAULT`], the 3-bit [`RowCounter::Log3Wide`].
    pub const DEFAULT: Self = Self {
        accumulate: Accumulate::DEFAULT,
        log2_range: (-48.0, 24.0),
        profile: Profile::DEFAULT,
        counter: RowCounter::Log3Wide,
    };

    /// The measured configuration for **one pass over a stream**: [`DEFAULT`](Self::DEFAULT)
    /// with [`Accumulate::Sum`], AdaGrad's sum of a row's `g²` (no row
    /// counter). Why, and the figures: [`BasisConfig::one_pass`].
    pub const ONE_PASS: Self = Self {
        accumulate: Accumulate::Sum,
        ..Self::DEFAULT
    };
}

impl Default for RowScaleConfig {
    /// [`RowScaleConfig::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// How `RowScaled` spreads a row's magnitude `G_i` over its dimensions:
/// `V̂_ij = G_i·f_bj` with `f_bj = (C_bj / mean_{j'∈grp(j)} C_bj')^power`.
///
/// Row-wise AdaGrad is `power = 0` (every dimension steps alike). The
/// dimensions of one row can be of different kinds whose gradients differ by
/// orders of magnitude (a factorization machine's row is `[w, v_1..v_k]`);
/// one profile over all of them then gives the small-gradient kind a much
/// larger step than AdaGrad would. `lead` splits off the first dimensions as
/// their own group, so each group keeps AdaGrad's overall step and the
/// profile only shapes dimensions within a group.
///
/// `#[non_exhaustive]`: build it from [`Default`] with the `with_*` setters,
/// e.g. a factorization machine's row `[w, v_1..v_k]`:
///
/// ```
/// let fm = basis_core::Profile::default().with_lead(1);
/// assert_eq!((fm.power, fm.lead), (1.0, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Profile {
    /// Exponent of the normalised profile: 1 = the full profile, 0 = none
    /// (row-wise AdaGrad with the row's `G_i`), between = shrunk toward 1
    /// (default 1).
    pub power: f32,
    /// The first `lead` dimensions form their own profile group (default 0
    /// = one group, right for a plain embedding row; 1 = a factorization
    /// machine's linear weight apart, what the CLI's models use).
    pub lead: usize,
    /// `√(V̂+ε²)` instead of `√V̂+ε` (ε inside the root; default false,
    /// measured the same).
    pub eps_inside: bool,
}

with_setters!(Profile {
    with_power => power: f32,
    with_lead => lead: usize,
    with_eps_inside => eps_inside: bool,
});

impl Profile {
    /// The default: power 1, `lead` 0 (one group: a row of one kind), ε
    /// outside the root.
    pub const DEFAULT: Self = Self {
        power: 1.0,
        lead: 0,
        eps_inside: false,
    };
}

impl Default for Profile {
    /// [`Profile::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Hyper-parameters of [`Basis`](crate::Basis).
///
/// # Defaults
///
/// [`Default`] is the measured default (docs/BASIS.md, docs/RESULTS.md):
/// [`Direction::RowScaled`] with a 1-byte row scalar
/// ([`ScalarStorage::LogU8`]), η = 0.003, an EMA of `g²` (β = 0.99)
/// annealed once a row has had 100 updates ([`Accumulate::EmaAnnealed`],
/// power 1, a 3-bit log-scale row counter), profile power 1,
/// `lead` 0, f32 tables, sparse row index. With
/// [`ROW_SCALED_ROWS_PER_BUCKET`] = 1000 rows per bucket
/// ([`buckets_for`](Self::buckets_for)) its state is about 1.45 B/row
/// (1 B `G_i`, 0.38 B counter, 0.07 B buckets) plus the row index, against row-wise AdaGrad's 4 B/row. Each field's
/// documentation names its default. The per-mode builders
/// ([`BasisConfig::row_scaled`], [`BasisConfig::shared`],
/// [`BasisConfig::signed`], [`BasisConfig::own_gradient`]) start from
/// [`BasisConfig::defaults_for`] their mode, which differs from
/// [`Default`] only where the mode was measured apart (the learned-scalar
/// modes: f32 scalars, 100 rows per bucket; they share η = 0.003).
/// [`with_direction`](Self::with_direction) changes the direction alone.
///
/// **`lead` is the one default that depends on the model**, not on data:
/// it says how many leading dimensions of a row are of another kind than
/// the rest. A plain embedding row is of one kind (`lead` 0, the default);
/// a factorization machine's row `[w, v_1..v_k]` (the CLI's FM, DeepFM and
/// DLRM rows) keeps its linear weight `w` apart: set
/// [`RowScaledBuilder::lead`](crate::RowScaledBuilder::lead)`(1)`. One
/// profile over `w` and `v` cost 0.007 test AUC on the synthetic FM data
/// (docs/BASIS.md, issue 15 ablation).
///
/// **Choosing `B`** (the bucketer's bucket count, not a field here):
/// `B = ⌈N / N_per_bucket⌉` from the expected row count `N`,
/// [`buckets_for`](Self::buckets_for); [`Basis::for_rows`](crate::Basis::for_rows)
/// builds the one-choice bucketer from it (and the CLI's `basis` spec
/// calls it with the table's row count). The bucket tables cost
/// `4·d / N_per_bucket` B/row (`RowScaled`, f32: 0.07 B/row at d = 17).
/// For `RowScaled`, `B` is not a quality knob: test AUC was the same within
/// 0.0005 from one bucket for the whole table to a private profile per row
/// (MovieLens-100k, 5 756 rows, every accumulation), within 0.0003 from
/// `B` = 1 to N/B = 30 on the synthetic FM sets, and within one seed sd
/// on DeepFM from `B` = 1 to N/B = 100 (0.0005 with an EMA, 0.0011 with
/// sums) and on the sharded one-pass streams at N/B 100 vs 1000 (≤ 0.0013;
/// docs/RESULTS.md, "Choosing B, and MovieLens under 4 B/row").
/// So `B` is chosen for bytes and for sharding: N/B = 1000 keeps the
/// tables at ≤ 0.07 B/row and lets `B` grow with `N`, which a row-sharded
/// run needs (one-choice BASIS assigns a row to rank `bucket mod P`, so
/// fewer buckets than ranks leave ranks idle). Small tables get no other
/// rule: a smaller N/B bought nothing on the one small set measured.
///
/// The struct is `#[non_exhaustive]` (options will be added): build it with
/// a per-mode builder ([`BasisConfig::row_scaled`], [`BasisConfig::shared`],
/// [`BasisConfig::signed`], [`BasisConfig::own_gradient`]), which offers only
/// the options its mode reads, or from [`Default`] with the `with_*`
/// setters, checked by [`BasisConfig::validate`] (which refuses an option
/// the mode ignores, [`ConfigError::Ignored`]).
///
/// ```
/// use basis_core::{BasisConfig, ConfigError, ConfigOption, Direction, RowIndex};
///
/// let config = BasisConfig::default()
///     .with_dim(4)
///     .with_direction(Direction::Shared)
///     .with_scalar_lr(0.05)
///     .with_row_index(RowIndex::Dense { rows: 100 });
/// assert_eq!(config.validate(), Ok(()));
///
/// // RowScaled has no learned scalar: a rate for it is refused by name.
/// let ignored = config.with_direction(Direction::RowScaled).validate();
/// assert!(matches!(
///     ignored,
///     Err(ConfigError::Ignored { option: ConfigOption::ScalarLr, .. })
/// ));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct BasisConfig {
    /// Row dimension `d` (default 16; every builder takes it).
    pub dim: usize,
    /// Learning rate η (default 0.003 in every mode). For `RowScaled` it is
    /// the rate the EMA accumulation tuned to on validation on the synthetic
    /// FM sets and the DeepFM stream (0.0017–0.0055 on six of the eight
    /// benchmark sets, docs/BASIS.md "The EMA as the library default"); with
    /// AdaGrad sums the FM rate was 0.03, because a sum grows with a row's
    /// updates and so shrinks its steps, an EMA does not. For the
    /// learned-scalar modes it is the CLI's rate chosen on validation
    /// ([`defaults_for`](Self::defaults_for)).
    pub lr: f32,
    /// First-moment decay β1 (default 0.9; unread by `RowScaled`).
    pub beta1: f32,
    /// Second-moment decay β2 (default 0.999; unread by `RowScaled`).
    pub beta2: f32,
    /// ε added to `√V̂` (default 1e-8).
    pub eps: f32,
    /// Decoupled weight decay λ (`θ −= η·λ·θ`, AdamW style; default 0).
    pub weight_decay: f32,
    /// Adam bias correction from each bucket's step count `t_b` (default
    /// on; unread by `RowScaled`).
    pub bias_correction: bool,
    /// What rows move along (default [`Direction::RowScaled`]).
    pub direction: Direction,
    /// Scalar learning rate η_s (0 freezes every scalar at 1; default 0.01;
    /// unread by `RowScaled`).
    pub scalar_lr: f32,
    /// Scalar clip range `[s_min, s_max]` (default `(0.1, 10)`).
    pub scalar_clip: (f32, f32),
    /// Scalar update rule (default [`ScalarRule::Normalized`]).
    pub scalar_rule: ScalarRule,
    /// Frequency-aware scalar learning rate (default [`ScalarLrSchedule::Constant`]).
    pub scalar_lr_schedule: ScalarLrSchedule,
    /// Per-row scalar storage (default [`ScalarStorage::LogU8`], 1 byte:
    /// f32 `G_i` measured no better, docs/BASIS.md; [`ScalarStorage::F32`]
    /// for the learned-scalar modes).
    pub scalar_storage: ScalarStorage,
    /// Shared-table precision (default [`TablePrecision::F32`]).
    pub table_precision: TablePrecision,
    /// ε used with bf16 tables is `max(eps, bf16_eps_floor)` (default
    /// 1e-6); unread (and refused by [`validate`](Self::validate) if
    /// changed) with f32 tables.
    pub bf16_eps_floor: f32,
    /// Non-finite gradient policy (default [`NonFinitePolicy::Skip`]).
    pub nonfinite: NonFinitePolicy,
    /// Optional per-row L2 gradient clip, applied to the summed gradient
    /// (default `None`).
    pub grad_clip: Option<f32>,
    /// Options of the `RowScaled` direction (default
    /// [`RowScaleConfig::default`]: sums, log₂ range `(−48, 24)`, profile
    /// power 1, `lead` 0, ε outside the root).
    pub row_scale: RowScaleConfig,
    /// Dense or sparse per-row state (default [`RowIndex::Sparse`]: any u64
    /// id, but the hash map costs about 38 B per row seen, more than the
    /// state itself; ids `0..rows` should use [`RowIndex::Dense`], which
    /// costs nothing beyond the state).
    pub row_index: RowIndex,
    /// Seed of the sign hash and of stochastic rounding (default
    /// `0x5EED_BA51_5000_0001`).
    pub seed: u64,
}

adam_setters!(BasisConfig);
with_setters!(BasisConfig {
    with_direction => direction: Direction,
    with_scalar_lr => scalar_lr: f32,
    with_scalar_clip => scalar_clip: (f32, f32),
    with_scalar_rule => scalar_rule: ScalarRule,
    with_scalar_lr_schedule => scalar_lr_schedule: ScalarLrSchedule,
    with_scalar_storage => scalar_storage: ScalarStorage,
    with_table_precision => table_precision: TablePrecision,
    with_bf16_eps_floor => bf16_eps_floor: f32,
    with_nonfinite => nonfinite: NonFinitePolicy,
    with_grad_clip => grad_clip: Option<f32>,
    with_row_scale => row_scale: RowScaleConfig,
    with_row_index => row_index: RowIndex,
    with_seed => seed: u64,
});

/// Rows per bucket `N/B` of the default `RowScaled` configuration
/// ([`BasisConfig::buckets_for`]): the CLI's measured default, 1.08 B/row
/// with 1-byte `G_i` at d = 17 (docs/BASIS.md). Quality was flat in N/B
/// on every set measured (on MovieLens-100k from N/B 1 to one bucket for
/// the whole table), so the value is set by
/// bytes (bucket tables ≤ 0.07 B/row at d = 17) and by sharding (`B` grows
/// with the row count); see [Choosing `B`](BasisConfig#defaults).
pub const ROW_SCALED_ROWS_PER_BUCKET: u64 = 1000;

/// Rows per bucket of the learned-scalar modes (`Shared`, `Signed`,
/// `OwnGradient`), whose bucket moments steer every row's direction and
/// so are shared by fewer rows (docs/BASIS.md: `Shared` at N/B = 50 already
/// loses to row-wise AdaGrad).
pub const LEARNED_SCALAR_ROWS_PER_BUCKET: u64 = 100;

impl Default for BasisConfig {
    /// [`BasisConfig::defaults_for`]`(Direction::RowScaled)`: the measured
    /// default (see [Defaults](BasisConfig#defaults)).
    fn default() -> Self {
        Self::defaults_for(Direction::RowScaled)
    }
}

impl BasisConfig {
    /// The measured default configuration of `direction` (row dimension 16):
    /// `RowScaled` is [`Default`]; the learned-scalar modes differ in the
    /// row scalar's storage (f32, the learned scalar's measured setting).
    /// Every mode's η is 0.003.
    pub const fn defaults_for(direction: Direction) -> Self {
        let learned = !matches!(direction, Direction::RowScaled);
        Self {
            dim: 16,
            lr: 3e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            bias_correction: true,
            direction,
            scalar_lr: 1e-2,
            scalar_clip: (0.1, 10.0),
            scalar_rule: ScalarRule::Normalized,
            scalar_lr_schedule: ScalarLrSchedule::Constant,
            scalar_storage: if learned {
                ScalarStorage::F32
            } else {
                ScalarStorage::LogU8
            },
            table_precision: TablePrecision::F32,
            bf16_eps_floor: 1e-6,
            nonfinite: NonFinitePolicy::Skip,
            grad_clip: None,
            row_scale: RowScaleConfig::DEFAULT,
            row_index: RowIndex::Sparse,
            seed: 0x5EED_BA51_5000_0001,
        }
    }

    /// The measured configuration for training in **one pass over a stream**
    /// (each example seen once, the production CTR setting): [`Default`]
    /// with [`RowScaleConfig::ONE_PASS`] (AdaGrad's sum of `g²` in the
    /// 1-byte `G_i`, no row counter: 1.09 B/row at N/B = 1000, d = 17) and
    /// η = 0.01.
    ///
    /// Measured (docs/RESULTS.md, session 17): on the sharded DeepFM stream
    /// it meets max(Adam, row-wise AdaGrad) − 0.001 test AUC at 5·10^4,
    /// 10^6 and 10^7 examples, and also on the DLRM stream at 5·10^4. At
    /// 10^7 it is above AdaGrad on seeds 1–3 (+0.0018, +0.0005, +0.0014);
    /// on seed 2, where [`Default`] was tuned, that default is at best 0.8295
    /// (0.8380 with a bf16 `G_i`) against AdaGrad's 0.8428. η = 0.01
    /// is the rate validation chose at 5·10^4 and 10^6. At 10^7 the rate
    /// was 0.03, AdaGrad's best there too: tune it as you would AdaGrad's.
    ///
    /// On the sharded DLRM stream (session 18, seed 1) it meets the bar at
    /// 10^6 (0.8267 at η = 0.055, Adam 0.8271) but **not at 10^7**: 0.8402
    /// against Adam's 0.8480. It lands on row-wise AdaGrad's AUC (0.8400),
    /// so it meets the bar where AdaGrad is the better optimizer and trails
    /// by Adam's lead where Adam is. There, a sum that forgets past ≈ 100
    /// updates, [`Accumulate::Decayed`]` { beta: 0.99 }` at η = 0.055, meets
    /// Adam (session 20: +0.0003 and −0.0006 on seeds 1–2, 1.09 B/row), as
    /// does [`Accumulate::Ema`]` { beta: 0.99 }` at η = 5.48e-3 (+0.0005);
    /// on the DeepFM stream at 10^7 the EMA at its own best rate, 5.48e-4,
    /// misses AdaGrad by 0.0027 (session 21; not through the rows' linear
    /// weight, which was tested and ruled out). So no single rule meets
    /// both 10^7 cells, and the sum's rate carries between the models where
    /// the EMA's does not (10× apart): keep this for an untuned run, and
    /// for a model whose hot rows want steps that do not shrink, measure
    /// the EMA over a rate grid (docs/RESULTS.md, session 21).
    ///
    /// [`defaults_for_epochs`](Self::defaults_for_epochs) picks it from a
    /// run's epoch count. Trained for several epochs, [`Default`] is the
    /// one to use. This sum
    /// misses Adam on DeepFM by 0.010, and the synthetic hard FM set by
    /// 0.0017.
    ///
    /// ```
    /// use basis_core::{Accumulate, BasisConfig};
    /// let c = BasisConfig::one_pass().with_dim(17);
    /// assert_eq!(c.row_scale.accumulate, Accumulate::Sum);
    /// assert_eq!(c.lr, 0.01);
    /// assert_eq!(c.validate(), Ok(()));
    /// ```
    pub const fn one_pass() -> Self {
        Self {
            lr: 0.01,
            row_scale: RowScaleConfig::ONE_PASS,
            ..Self::defaults_for(Direction::RowScaled)
        }
    }

    /// The measured configuration of `direction` for a run of `epochs`
    /// passes over its training data: the rule the library applies itself
    /// when a caller knows how it will train. `RowScaled` over one pass
    /// (`epochs` ≤ 1, a stream seen once) is [`one_pass`](Self::one_pass);
    /// every other case is [`defaults_for`](Self::defaults_for)`(direction)`
    /// (the multi-epoch default; the learned-scalar modes were not measured
    /// apart in one pass). The CLI's `basis` spec resolves its unset
    /// accumulation and rate through this with the run's `--epochs`.
    ///
    /// ```
    /// use basis_core::{BasisConfig, Direction};
    /// assert_eq!(BasisConfig::defaults_for_epochs(Direction::RowScaled, 1), BasisConfig::one_pass());
    /// assert_eq!(BasisConfig::defaults_for_epochs(Direction::RowScaled, 3), BasisConfig::default());
    /// assert_eq!(
    ///     BasisConfig::defaults_for_epochs(Direction::OwnGradient, 1),
    ///     BasisConfig::defaults_for(Direction::OwnGradient)
    /// );
    /// ```
    pub const fn defaults_for_epochs(direction: Direction, epochs: u32) -> Self {
        match direction {
            Direction::RowScaled if epochs <= 1 => Self::one_pass(),
            _ => Self::defaults_for(direction),
        }
    }

    /// Rows per bucket this configuration's direction was measured at:
    /// [`ROW_SCALED_ROWS_PER_BUCKET`] (1000) for `RowScaled`,
    /// [`LEARNED_SCALAR_ROWS_PER_BUCKET`] (100) for the others.
    pub const fn rows_per_bucket(&self) -> u64 {
        match self.direction {
            Direction::RowScaled => ROW_SCALED_ROWS_PER_BUCKET,
            _ => LEARNED_SCALAR_ROWS_PER_BUCKET,
        }
    }

    /// The bucket count `B` for a table expected to hold `expected_rows`
    /// rows: `⌈expected_rows / rows_per_bucket()⌉`, at least 1 (a table of
    /// fewer rows than one bucket's share still needs a bucket; the CLI's
    /// MovieLens-100k table of 5 756 rows gets 6, as measured), at most
    /// `u32::MAX`.
    ///
    /// ```
    /// use basis_core::BasisConfig;
    /// let config = BasisConfig::default();
    /// assert_eq!(config.buckets_for(10_000_000), 10_000);
    /// assert_eq!(config.buckets_for(5_756), 6);
    /// assert_eq!(config.buckets_for(999), 1);
    /// assert_eq!(config.buckets_for(0), 1);
    /// ```
    pub const fn buckets_for(&self, expected_rows: u64) -> u32 {
        let b = expected_rows.div_ceil(self.rows_per_bucket());
        if b == 0 {
            1
        } else if b > u32::MAX as u64 {
            u32::MAX
        } else {
            b as u32
        }
    }
}

fn finite_pos(x: f32) -> bool {
    x.is_finite() && x > 0.0
}

fn finite_nonneg(x: f32) -> bool {
    x.is_finite() && x >= 0.0
}

fn beta_ok(b: f32) -> bool {
    (0.0..1.0).contains(&b)
}

impl BasisConfig {
    /// Checks every value.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.dim == 0 {
            return Err(ConfigError::ZeroDim);
        }
        if !finite_pos(self.lr) {
            return Err(ConfigError::LearningRate);
        }
        if !beta_ok(self.beta1) || !beta_ok(self.beta2) {
            return Err(ConfigError::Beta);
        }
        if !finite_pos(self.eps) || !finite_pos(self.bf16_eps_floor) {
            return Err(ConfigError::Epsilon);
        }
        if !finite_nonneg(self.weight_decay) {
            return Err(ConfigError::WeightDecay);
        }
        if !finite_nonneg(self.scalar_lr) {
            return Err(ConfigError::ScalarLearningRate);
        }
        let (lo, hi) = self.scalar_clip;
        if !(finite_pos(lo) && hi.is_finite() && lo <= 1.0 && hi >= 1.0) {
            return Err(ConfigError::ScalarClip);
        }
        if let Some(c) = self.grad_clip
            && !finite_pos(c)
        {
            return Err(ConfigError::GradClip);
        }
        if let ScalarLrSchedule::InverseFrequency { power } = self.scalar_lr_schedule
            && !finite_nonneg(power)
        {
            return Err(ConfigError::FrequencyPower);
        }
        if let Accumulate::Ema { beta }
        | Accumulate::Decayed { beta }
        | Accumulate::EmaAnnealed { beta, .. } = self.row_scale.accumulate
            && !beta_ok(beta)
        {
            return Err(ConfigError::Beta);
        }
        if let Accumulate::CountAnnealed { power } | Accumulate::EmaAnnealed { power, .. } =
            self.row_scale.accumulate
            && !finite_nonneg(power)
        {
            return Err(ConfigError::AnnealPower);
        }
        let pr = self.row_scale.profile;
        if !(pr.power.is_finite() && (0.0..=1.0).contains(&pr.power)) || pr.lead > self.dim {
            return Err(ConfigError::Profile);
        }
        let (a, b) = self.row_scale.log2_range;
        if !(a.is_finite() && b.is_finite() && a < b && a > -126.0 && b < 127.0) {
            return Err(ConfigError::RowScaleRange);
        }
        match self.ignored_option() {
            Some(option) => Err(ConfigError::Ignored {
                option,
                direction: self.direction,
            }),
            None => Ok(()),
        }
    }

    /// The first option that differs from its [`Default`] value although
    /// this configuration never reads it (see [`ConfigError::Ignored`]).
    fn ignored_option(&self) -> Option<ConfigOption> {
        use ConfigOption as O;
        let d = Self::default();
        // The floor raises ε only for bf16 tables (`effective_eps`), in
        // every direction.
        if self.table_precision == TablePrecision::F32 && self.bf16_eps_floor != d.bf16_eps_floor {
            return Some(O::Bf16EpsFloor);
        }
        let scalar = [
            // 0 ("no scalar learning") states what RowScaled does anyway.
            (
                O::ScalarLr,
                self.scalar_lr == d.scalar_lr || self.scalar_lr == 0.0,
            ),
            (O::ScalarClip, self.scalar_clip == d.scalar_clip),
            (O::ScalarRule, self.scalar_rule == d.scalar_rule),
            (
                O::ScalarLrSchedule,
                self.scalar_lr_schedule == d.scalar_lr_schedule,
            ),
        ];
        let first_set = |opts: &[(ConfigOption, bool)]| {
            opts.iter()
                .find(|&&(_, unchanged)| !unchanged)
                .map(|&(o, _)| o)
        };
        if self.direction == Direction::RowScaled {
            let moments = [
                (O::Beta1, self.beta1 == d.beta1),
                (O::Beta2, self.beta2 == d.beta2),
                (O::BiasCorrection, self.bias_correction == d.bias_correction),
            ];
            let lead = [(
                O::ProfileLead,
                self.row_scale.profile.power != 0.0 || self.row_scale.profile.lead == 0,
            )];
            let counter = [(
                O::RowCounter,
                self.row_scale.accumulate.counts_rows()
                    || self.row_scale.counter == d.row_scale.counter,
            )];
            return first_set(&scalar)
                .or_else(|| first_set(&moments))
                .or_else(|| first_set(&lead))
                .or_else(|| first_set(&counter));
        }
        let r = self.row_scale;
        let dr = d.row_scale;
        let row_scale = [
            (O::Accumulate, r.accumulate == dr.accumulate),
            (O::Log2Range, r.log2_range == dr.log2_range),
            (O::Profile, r.profile == dr.profile),
            (O::RowCounter, r.counter == dr.counter),
        ];
        if let Some(o) = first_set(&row_scale) {
            return Some(o);
        }
        if self.scalar_lr == 0.0 {
            // Frozen scalars: every s_i stays 1 and none is stored.
            let frozen = [
                (O::ScalarClip, self.scalar_clip == d.scalar_clip),
                (O::ScalarRule, self.scalar_rule == d.scalar_rule),
                (
                    O::ScalarLrSchedule,
                    self.scalar_lr_schedule == d.scalar_lr_schedule,
                ),
                // Either default counts as unset: `Default` (1 byte) and
                // the learned-scalar modes' own (f32).
                (
                    O::ScalarStorage,
                    self.scalar_storage == d.scalar_storage
                        || self.scalar_storage == Self::defaults_for(self.direction).scalar_storage,
                ),
                // OwnGradient keeps a bucket M only as a learning scalar's
                // reference direction.
                (
                    O::Beta1,
                    self.direction != Direction::OwnGradient || self.beta1 == d.beta1,
                ),
            ];
            return first_set(&frozen);
        }
        None
    }

    /// The ε in use: raised to `bf16_eps_floor` for bf16 tables.
    pub fn effective_eps(&self) -> f32 {
        match self.table_precision {
            TablePrecision::F32 => self.eps,
            TablePrecision::Bf16 => self.eps.max(self.bf16_eps_floor),
        }
    }

    /// Whether the learned scalar `s_i` is updated at all.
    pub fn scalar_learns(&self) -> bool {
        self.scalar_lr > 0.0 && self.direction != Direction::RowScaled
    }
}
