//! Per-mode builders of [`BasisConfig`]: each offers only the options its
//! direction mode reads, so an option the mode would ignore does not compile.
//!
//! The learned-scalar modes ([`Direction::Shared`], [`Direction::Signed`],
//! [`Direction::OwnGradient`]) read the scalar options (`scalar_lr`,
//! `scalar_clip`, `scalar_rule`, `scalar_lr_schedule`) and the bucket
//! moments' `betas` and `bias_correction`, never the row-scale ones;
//! [`Direction::RowScaled`] is the other way round. What a builder cannot
//! rule out by type (options a frozen scalar, `scalar_lr(0.0)`, leaves
//! unread) `build` refuses with [`ConfigError::Ignored`], as
//! [`BasisConfig::validate`] does for a configuration built by hand.

use crate::basis::Basis;
use crate::config::{
    Accumulate, BasisConfig, Direction, NonFinitePolicy, Profile, RowIndex, ScalarLrSchedule,
    ScalarRule, ScalarStorage, TablePrecision,
};
use crate::error::ConfigError;
use balanced_hash::OneChoice;

/// Builds a [`BasisConfig`] for a learned-scalar mode: [`BasisConfig::shared`],
/// [`BasisConfig::signed`] or [`BasisConfig::own_gradient`].
///
/// ```
/// use basis_core::{BasisConfig, Direction, RowIndex, ScalarRule};
///
/// let config = BasisConfig::shared(8)
///     .lr(0.05)
///     .scalar_lr(0.02)
///     .scalar_rule(ScalarRule::Normalized)
///     .row_index(RowIndex::Dense { rows: 1000 })
///     .build()?;
/// assert_eq!(config.direction, Direction::Shared);
/// assert_eq!(config.scalar_lr, 0.02);
/// # Ok::<(), basis_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use = "a builder does nothing until `build`"]
pub struct LearnedScalarBuilder(BasisConfig);

/// Builds a [`BasisConfig`] for [`Direction::RowScaled`] (the default mode):
/// [`BasisConfig::row_scaled`]. It has no scalar options, because this mode
/// ignores them:
///
/// ```compile_fail,E0599
/// // Does not compile: RowScaled has no learned scalar to give a rate.
/// let config = basis_core::BasisConfig::row_scaled(8).scalar_lr(0.1).build();
/// ```
///
/// ```compile_fail,E0599
/// // Does not compile: RowScaled keeps no Adam moments.
/// let config = basis_core::BasisConfig::row_scaled(8).betas(0.9, 0.99).build();
/// ```
///
/// ```compile_fail,E0599
/// // Does not compile: only RowScaled reads the row-scale options.
/// use basis_core::{Accumulate, BasisConfig};
/// let config = BasisConfig::shared(8).accumulate(Accumulate::Sum).build();
/// ```
///
/// ```
/// use basis_core::{Accumulate, BasisConfig, Direction};
///
/// let config = BasisConfig::row_scaled(8)
///     .lr(0.1)
///     .accumulate(Accumulate::Ema { beta: 0.99 })
///     .build()?;
/// assert_eq!(config.direction, Direction::RowScaled);
/// assert_eq!(config.row_scale.accumulate, Accumulate::Ema { beta: 0.99 });
/// // Values are checked when built.
/// assert!(BasisConfig::row_scaled(0).build().is_err());
/// # Ok::<(), basis_core::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use = "a builder does nothing until `build`"]
pub struct RowScaledBuilder(BasisConfig);

impl BasisConfig {
    /// A [`Direction::Shared`] configuration of row dimension `dim`, every
    /// other option at its mode's measured default
    /// ([`BasisConfig::defaults_for`]: η = 0.003, f32 scalars).
    pub fn shared(dim: usize) -> LearnedScalarBuilder {
        LearnedScalarBuilder::new(dim, Direction::Shared)
    }

    /// A [`Direction::Signed`] configuration (count-sketch momentum), at its
    /// mode's measured default ([`BasisConfig::defaults_for`]).
    pub fn signed(dim: usize) -> LearnedScalarBuilder {
        LearnedScalarBuilder::new(dim, Direction::Signed)
    }

    /// A [`Direction::OwnGradient`] configuration, at its mode's measured
    /// default ([`BasisConfig::defaults_for`]).
    pub fn own_gradient(dim: usize) -> LearnedScalarBuilder {
        LearnedScalarBuilder::new(dim, Direction::OwnGradient)
    }

    /// A [`Direction::RowScaled`] configuration (the default mode): exactly
    /// [`BasisConfig::default`] with row dimension `dim` (1-byte `G_i`, an
    /// EMA with β = 0.99, η = 0.003, `lead` 0; see [Defaults](BasisConfig#defaults)).
    pub fn row_scaled(dim: usize) -> RowScaledBuilder {
        RowScaledBuilder(BasisConfig {
            dim,
            ..BasisConfig::defaults_for(Direction::RowScaled)
        })
    }
}

impl Basis<OneChoice> {
    /// BASIS over a one-choice bucketer sized for a table expected to hold
    /// `expected_rows` rows: [`BasisConfig::buckets_for`] buckets
    /// (1000 rows per bucket for `RowScaled`), hashed under a seed derived
    /// from `config.seed`. The automatic choice of `B`; build the bucketer
    /// yourself ([`Basis::new`]) for another count or a [`DChoice`](crate::DChoice).
    ///
    /// ```
    /// use basis_core::{Basis, BasisConfig, Bucketer, RowIndex};
    ///
    /// let config = BasisConfig::row_scaled(17)
    ///     .lead(1) // rows [w, v_1..v_16] of a factorization machine
    ///     .row_index(RowIndex::Dense { rows: 50_000 })
    ///     .build()?;
    /// let opt = Basis::for_rows(config, 50_000)?;
    /// assert_eq!(opt.bucketer().buckets(), 50);
    /// # Ok::<(), basis_core::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// As [`Basis::new`].
    pub fn for_rows(config: BasisConfig, expected_rows: u64) -> Result<Self, ConfigError> {
        // The bucket hash must not correlate with the sign hash, which is
        // seeded with `config.seed` itself.
        const BUCKET_DOMAIN: u64 = 0xB0C4_E75E_0000_0000;
        let buckets = config.buckets_for(expected_rows);
        let bucketer = OneChoice::new(buckets, config.seed ^ BUCKET_DOMAIN)
            .map_err(|_| ConfigError::NoBuckets)?;
        Basis::new(config, bucketer)
    }
}

impl LearnedScalarBuilder {
    fn new(dim: usize, direction: Direction) -> Self {
        Self(BasisConfig {
            dim,
            ..BasisConfig::defaults_for(direction)
        })
    }

    /// Scalar learning rate η_s (0 freezes every scalar at 1).
    pub fn scalar_lr(mut self, scalar_lr: f32) -> Self {
        self.0.scalar_lr = scalar_lr;
        self
    }

    /// Scalar clip range `[s_min, s_max]` (`s_min ≤ 1 ≤ s_max`).
    pub fn scalar_clip(mut self, min: f32, max: f32) -> Self {
        self.0.scalar_clip = (min, max);
        self
    }

    /// Scalar update rule.
    pub fn scalar_rule(mut self, rule: ScalarRule) -> Self {
        self.0.scalar_rule = rule;
        self
    }

    /// Frequency-aware scalar learning rate.
    pub fn scalar_lr_schedule(mut self, schedule: ScalarLrSchedule) -> Self {
        self.0.scalar_lr_schedule = schedule;
        self
    }

    /// Moment decays β1 and β2 of the bucket tables.
    pub fn betas(mut self, beta1: f32, beta2: f32) -> Self {
        self.0.beta1 = beta1;
        self.0.beta2 = beta2;
        self
    }

    /// Adam bias correction from each bucket's step count.
    pub fn bias_correction(mut self, on: bool) -> Self {
        self.0.bias_correction = on;
        self
    }
}

impl RowScaledBuilder {
    /// Sum (AdaGrad, the default) or EMA of the per-row second moment.
    pub fn accumulate(mut self, accumulate: Accumulate) -> Self {
        self.0.row_scale.accumulate = accumulate;
        self
    }

    /// log₂ of the smallest and largest non-zero `G_i` a 1-byte code holds.
    pub fn log2_range(mut self, min: f32, max: f32) -> Self {
        self.0.row_scale.log2_range = (min, max);
        self
    }

    /// How the bucket profile shapes a row's step across its dimensions.
    pub fn profile(mut self, profile: Profile) -> Self {
        self.0.row_scale.profile = profile;
        self
    }

    /// The first `lead` dimensions of every row form their own profile
    /// group ([`Profile::lead`], default 0). Set it from the model: rows
    /// whose first `lead` values are of another kind than the rest, such as
    /// a factorization machine's `[w, v_1..v_k]` (`lead` 1), keep each
    /// kind at row-wise AdaGrad's overall step. `build` refuses a `lead`
    /// above `dim` ([`ConfigError::Profile`]) or with profile power 0.
    pub fn lead(mut self, lead: usize) -> Self {
        self.0.row_scale.profile.lead = lead;
        self
    }
}

/// The options every mode reads, on both builders.
macro_rules! common_options {
    ($builder:ty) => {
        impl $builder {
            /// Learning rate η.
            pub fn lr(mut self, lr: f32) -> Self {
                self.0.lr = lr;
                self
            }

            /// ε added to `√V̂`.
            pub fn eps(mut self, eps: f32) -> Self {
                self.0.eps = eps;
                self
            }

            /// Decoupled weight decay λ.
            pub fn weight_decay(mut self, weight_decay: f32) -> Self {
                self.0.weight_decay = weight_decay;
                self
            }

            /// Per-row scalar storage.
            pub fn scalar_storage(mut self, storage: ScalarStorage) -> Self {
                self.0.scalar_storage = storage;
                self
            }

            /// Shared-table precision.
            pub fn table_precision(mut self, precision: TablePrecision) -> Self {
                self.0.table_precision = precision;
                self
            }

            /// ε floor with bf16 tables; with f32 tables `build` refuses a
            /// floor other than the default
            /// ([`ConfigOption::Bf16EpsFloor`](crate::ConfigOption::Bf16EpsFloor)).
            pub fn bf16_eps_floor(mut self, floor: f32) -> Self {
                self.0.bf16_eps_floor = floor;
                self
            }

            /// Non-finite gradient policy.
            pub fn nonfinite(mut self, policy: NonFinitePolicy) -> Self {
                self.0.nonfinite = policy;
                self
            }

            /// Per-row L2 gradient clip (`None`: no clip).
            pub fn grad_clip(mut self, clip: Option<f32>) -> Self {
                self.0.grad_clip = clip;
                self
            }

            /// Dense or sparse per-row state.
            pub fn row_index(mut self, row_index: RowIndex) -> Self {
                self.0.row_index = row_index;
                self
            }

            /// Seed of the sign hash and of stochastic rounding.
            pub fn seed(mut self, seed: u64) -> Self {
                self.0.seed = seed;
                self
            }

            /// The configuration, checked by [`BasisConfig::validate`].
            ///
            /// # Errors
            /// The first [`ConfigError`] found.
            pub fn build(self) -> Result<BasisConfig, ConfigError> {
                self.0.validate()?;
                Ok(self.0)
            }
        }
    };
}

common_options!(LearnedScalarBuilder);
common_options!(RowScaledBuilder);
