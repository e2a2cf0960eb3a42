//! Error types: configuration, step, table and exported-state errors.

use core::fmt;

/// A configuration value is out of its valid range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `dim` is zero.
    ZeroDim,
    /// The learning rate is not finite and positive.
    LearningRate,
    /// A β (β1, β2 or the row-scale EMA β) is outside `[0, 1)`.
    Beta,
    /// ε is not finite and positive.
    Epsilon,
    /// Weight decay is negative or not finite.
    WeightDecay,
    /// The scalar learning rate is negative or not finite.
    ScalarLearningRate,
    /// The scalar clip range is not `0 < s_min ≤ 1 ≤ s_max`, finite.
    ScalarClip,
    /// The per-row gradient clip norm is not finite and positive.
    GradClip,
    /// The frequency exponent is negative or not finite.
    FrequencyPower,
    /// The row-scale log₂ range is not finite with `min < max`.
    RowScaleRange,
    /// The row-scale profile power is outside `[0, 1]` or its `lead` exceeds `dim`.
    Profile,
    /// The bucketer has zero buckets.
    NoBuckets,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = match self {
            Self::ZeroDim => "row dimension must be at least 1",
            Self::LearningRate => "learning rate must be finite and > 0",
            Self::Beta => "beta must be in [0, 1)",
            Self::Epsilon => "epsilon must be finite and > 0",
            Self::WeightDecay => "weight decay must be finite and >= 0",
            Self::ScalarLearningRate => "scalar learning rate must be finite and >= 0",
            Self::ScalarClip => "scalar clip range must satisfy 0 < s_min <= 1 <= s_max (finite)",
            Self::GradClip => "gradient clip norm must be finite and > 0",
            Self::FrequencyPower => "frequency exponent must be finite and >= 0",
            Self::RowScaleRange => "row-scale log2 range must be finite with min < max",
            Self::Profile => "row-scale profile power must be in [0, 1] and lead <= dim",
            Self::NoBuckets => "the bucketer must have at least one bucket",
        };
        f.write_str(msg)
    }
}

impl core::error::Error for ConfigError {}

/// Building a [`DenseTable`](crate::DenseTable) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableError {
    /// `dim` is zero.
    ZeroDim,
    /// The slice length is not a multiple of `dim`.
    Ragged {
        /// Slice length.
        len: usize,
        /// Row dimension.
        dim: usize,
    },
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroDim => f.write_str("row dimension must be at least 1"),
            Self::Ragged { len, dim } => {
                write!(f, "table length {len} is not a multiple of dim {dim}")
            }
        }
    }
}

impl core::error::Error for TableError {}

/// A step was rejected. When a step returns an error, nothing changed: not the
/// optimizer state, not the caller's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepError {
    /// `grads.len() != ids.len() * dim`.
    GradLength {
        /// Expected length (`ids.len() * dim`).
        expected: usize,
        /// Actual length.
        actual: usize,
    },
    /// The table's row dimension differs from the optimizer's.
    DimMismatch {
        /// The optimizer's dimension.
        optimizer: usize,
        /// The table's dimension.
        table: usize,
    },
    /// The caller's table has no row with this id.
    MissingRow {
        /// The row id.
        id: u64,
    },
    /// A dense row-state store was sized for fewer rows than this id needs.
    IdOutOfRange {
        /// The row id.
        id: u64,
        /// Number of rows the store holds (ids `0..rows`).
        rows: u64,
    },
    /// The bucketer mapped this row to a bucket `≥ buckets()` (a broken
    /// [`Bucketer`](balanced_hash::Bucketer) implementation).
    BucketOutOfRange {
        /// The row id.
        id: u64,
        /// The bucket returned.
        bucket: u32,
    },
    /// The (summed) gradient of this row is NaN, infinite, or larger in
    /// magnitude than [`MAX_GRAD_ABS`](crate::MAX_GRAD_ABS) (its square could
    /// overflow a shared second moment), under
    /// [`NonFinitePolicy::Error`](crate::NonFinitePolicy::Error).
    NonFinite {
        /// The row id.
        id: u64,
    },
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GradLength { expected, actual } => {
                write!(
                    f,
                    "gradient buffer has {actual} values, expected {expected}"
                )
            }
            Self::DimMismatch { optimizer, table } => {
                write!(
                    f,
                    "table dim {table} differs from optimizer dim {optimizer}"
                )
            }
            Self::MissingRow { id } => write!(f, "the table has no row {id}"),
            Self::IdOutOfRange { id, rows } => {
                write!(f, "row id {id} is outside the dense state range 0..{rows}")
            }
            Self::BucketOutOfRange { id, bucket } => {
                write!(
                    f,
                    "the bucketer mapped row {id} to bucket {bucket}, out of range"
                )
            }
            Self::NonFinite { id } => write!(
                f,
                "row {id} has a non-finite (or overflowing, > 2^44) gradient"
            ),
        }
    }
}

impl core::error::Error for StepError {}

/// Importing exported optimizer state failed. The optimizer is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// Shorter than the fixed header and trailer.
    Truncated,
    /// The magic bytes are wrong: not an exported optimizer state.
    BadMagic,
    /// A format version this build does not read.
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// The CRC-32 over the blob does not match its trailer.
    Checksum,
    /// The blob was exported by another optimizer kind.
    WrongKind {
        /// Kind tag expected.
        expected: u8,
        /// Kind tag found.
        found: u8,
    },
    /// The blob's configuration (dim, buckets, modes, storage) differs from
    /// the importing optimizer's.
    ConfigMismatch,
    /// The payload length field disagrees with the blob, or the payload is
    /// internally inconsistent (counts, trailing bytes, invalid values).
    Malformed,
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("state blob is truncated"),
            Self::BadMagic => f.write_str("not an exported optimizer state (bad magic)"),
            Self::UnsupportedVersion { found } => {
                write!(f, "unsupported state format version {found}")
            }
            Self::Checksum => f.write_str("state blob checksum mismatch (corrupted)"),
            Self::WrongKind { expected, found } => {
                write!(
                    f,
                    "state blob is of optimizer kind {found}, expected {expected}"
                )
            }
            Self::ConfigMismatch => {
                f.write_str("state blob configuration differs from this optimizer's")
            }
            Self::Malformed => f.write_str("state blob payload is malformed"),
        }
    }
}

impl core::error::Error for StateError {}
