//! The names a configuration speaks in, apart from the configuration
//! itself: BASIS's update [`Direction`] and the [`ConfigOption`]s that
//! [`ConfigError`](crate::ConfigError) names. Both `config.rs` (which
//! re-exports them) and `error.rs` import this file, so neither imports the
//! other.

/// What row `i` moves along.
///
/// Every mode keeps optimizer memory at `O(B·d + N·bytes(row scalar))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Direction {
    /// The original BASIS rule: every row of bucket `b` moves along the
    /// bucket's shared `M̂_b/(√V̂_b+ε)`, times its learned scalar `s_i`.
    Shared,
    /// Count-sketch momentum (Spring et al. 2019): `M_b` accumulates the sum of
    /// `σ(i)·g_i` with an independent sign hash and row `i` reads
    /// `σ(i)·M̂_b` — an unbiased estimate of its own momentum. `V` is unsigned.
    Signed,
    /// No shared first moment for the update: row `i` moves along its own
    /// `g_i/(√V̂_b+ε)` (Adam with β1 = 0 on a shared second moment), times `s_i`.
    /// A bucket `M` is kept only when the scalar learns (`scalar_lr > 0`), as
    /// the scalar's reference direction.
    OwnGradient,
    /// Per-row second-moment magnitude `G_i` (the row scalar) times a bucket
    /// per-dimension profile `C_b`: `V̂_ij = G_i·C_bj/mean_j(C_bj)`,
    /// `θ_ij −= η·g_ij/(√V̂_ij+ε)`. A row-wise AdaGrad that separates
    /// dimensions whose scales differ.
    RowScaled,
}

/// A [`BasisConfig`](crate::BasisConfig) option, as named by
/// [`ConfigError::Ignored`](crate::ConfigError::Ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum ConfigOption {
    /// [`BasisConfig::beta1`](crate::BasisConfig::beta1).
    Beta1,
    /// [`BasisConfig::beta2`](crate::BasisConfig::beta2).
    Beta2,
    /// [`BasisConfig::bias_correction`](crate::BasisConfig::bias_correction).
    BiasCorrection,
    /// [`BasisConfig::scalar_lr`](crate::BasisConfig::scalar_lr).
    ScalarLr,
    /// [`BasisConfig::scalar_clip`](crate::BasisConfig::scalar_clip).
    ScalarClip,
    /// [`BasisConfig::scalar_rule`](crate::BasisConfig::scalar_rule).
    ScalarRule,
    /// [`BasisConfig::scalar_lr_schedule`](crate::BasisConfig::scalar_lr_schedule).
    ScalarLrSchedule,
    /// [`BasisConfig::scalar_storage`](crate::BasisConfig::scalar_storage).
    ScalarStorage,
    /// [`RowScaleConfig::accumulate`](crate::config::RowScaleConfig::accumulate).
    Accumulate,
    /// [`RowScaleConfig::log2_range`](crate::config::RowScaleConfig::log2_range).
    Log2Range,
    /// [`RowScaleConfig::profile`](crate::config::RowScaleConfig::profile).
    Profile,
    /// [`RowScaleConfig::counter`](crate::config::RowScaleConfig::counter).
    RowCounter,
    /// [`Profile::lead`](crate::config::Profile::lead).
    ProfileLead,
    /// [`BasisConfig::bf16_eps_floor`](crate::BasisConfig::bf16_eps_floor) (read only with
    /// [`TablePrecision::Bf16`](crate::config::TablePrecision::Bf16) tables).
    Bf16EpsFloor,
}

impl ConfigOption {
    /// The option's path in [`BasisConfig`](crate::BasisConfig), e.g. `"row_scale.profile.lead"`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Beta1 => "beta1",
            Self::Beta2 => "beta2",
            Self::BiasCorrection => "bias_correction",
            Self::ScalarLr => "scalar_lr",
            Self::ScalarClip => "scalar_clip",
            Self::ScalarRule => "scalar_rule",
            Self::ScalarLrSchedule => "scalar_lr_schedule",
            Self::ScalarStorage => "scalar_storage",
            Self::Accumulate => "row_scale.accumulate",
            Self::Log2Range => "row_scale.log2_range",
            Self::RowCounter => "row_scale.counter",
            Self::Profile => "row_scale.profile",
            Self::ProfileLead => "row_scale.profile.lead",
            Self::Bf16EpsFloor => "bf16_eps_floor",
        }
    }
}
