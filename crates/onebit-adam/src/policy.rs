//! How a parameter group communicates after the freeze ([`Policy`]), in a
//! file of its own: the optimizers and their state errors (`error.rs`)
//! both name it, and `error.rs` must not import `optimizer.rs`, which
//! imports it.

use onebit_codec::Grade;

/// How a parameter group communicates after the freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Policy {
    /// Compressed momentum (1 bit per element) after the freeze. The default.
    #[default]
    OneBit,
    /// Full-precision mean all-reduce of gradients and plain Adam at every
    /// step (DeepSpeed's `non_freeze` groups; e.g. a small output layer).
    FullPrecision,
    /// Graded compression after the freeze: the same compressed-momentum
    /// stage as [`Policy::OneBit`] (`v` frozen, worker and server error
    /// feedback, the variant's buffer), through [`crate::graded_allreduce`]'s
    /// codec — [`Grade::TwoBit`] (sign + magnitude bit, a scale per chunk)
    /// or [`Grade::Bf16`] (bfloat16 momentum with error feedback) — for the
    /// layers where 1 bit hurts (the seed's layered setting: 2 bits for the
    /// embedding-adjacent layer). Not with
    /// [`Variant::DecayedGradient`](crate::Variant::DecayedGradient).
    ///
    /// The half-precision grade compresses the **momentum**, not the
    /// gradient: the group then differs from a 1-bit group only in its
    /// codec (one code path, one state layout, `v` frozen alike), and the
    /// momentum is what 1-bit Adam's error feedback is proven for; a bf16
    /// gradient all-reduce would keep `v` moving but send the gradient's
    /// noise at 16 bits every step for a difference error feedback already
    /// removes.
    Graded(Grade),
}

impl Policy {
    /// Whether the group compresses after the freeze (every policy but
    /// [`Policy::FullPrecision`]).
    pub fn compresses(self) -> bool {
        !matches!(self, Self::FullPrecision)
    }

    /// A short name: `1bit`, `2bit`, `bf16`, `full` (what the CLI parses).
    pub fn name(self) -> &'static str {
        match self {
            Self::OneBit => "1bit",
            Self::FullPrecision => "full",
            Self::Graded(Grade::TwoBit) => "2bit",
            Self::Graded(_) => "bf16",
        }
    }
}

/// How the warm-up (the full-precision stage before the freeze) averages
/// gradients over the ranks ([`crate::Config::warmup_reduce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum WarmupReduce {
    /// An `f32` sum all-reduce, then `/P`: DeepSpeed's full-precision stage
    /// exactly (its reference tests run this way). The default.
    #[default]
    F32,
    /// Each rank's gradient rounded to bfloat16 (round to nearest even),
    /// reduce-scattered, summed in `f32` in rank order, `/P`, rounded to
    /// bfloat16 again and all-gathered: half the warm-up's bytes, every rank
    /// the same mean, a relative error of at most `2⁻⁸` per rounding and no
    /// error feedback (nothing is kept between steps). DeepSpeed's warm-up
    /// runs in the model's precision, fp16 in its published runs. Only the
    /// warm-up steps of every group and not the full-precision policy's
    /// steps after the freeze; one rank skips the reduce either way.
    Bf16,
}

impl WarmupReduce {
    /// A short name: `f32`, `bf16` (what the CLI parses).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        }
    }
}
