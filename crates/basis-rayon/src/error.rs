//! The one error type of this crate.

use core::fmt;

/// Why a call into this crate refused its input. Nothing has been changed
/// when one of these is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A table was asked for zero buckets, zero dimensions, or more cells than
    /// fit in memory (`buckets · dim` overflows `usize`).
    BadShape {
        /// Requested number of buckets.
        buckets: usize,
        /// Requested row dimension.
        dim: usize,
    },
    /// A bucket index `>= buckets`.
    BucketOutOfRange {
        /// The index that was passed.
        bucket: usize,
        /// Number of buckets in the table.
        buckets: usize,
    },
    /// A slice whose length is not the one the call needs.
    LengthMismatch {
        /// Length the call needs.
        expected: usize,
        /// Length that was passed.
        got: usize,
    },
    /// A gradient element is NaN, infinite, or above
    /// [`basis_core::MAX_GRAD_ABS`] in magnitude (it would poison a shared bucket).
    NonFinite {
        /// Position of the first non-finite element in the slice.
        index: usize,
    },
    /// A hyper-parameter outside its range (β ∉ [0, 1), ε not finite and > 0,
    /// zero stripes or zero threads).
    InvalidParams,
    /// The rayon thread pool could not be built.
    ThreadPool,
    /// The BASIS step refused the batch (the serial step would have too).
    Step(basis_core::StepError),
    /// The dense table slice is not whole rows of the optimizer's `dim`.
    Table(basis_core::TableError),
    /// The codec refused the input (the serial codec would have too).
    Codec(onebit_codec::CodecError),
}

impl From<basis_core::StepError> for Error {
    fn from(e: basis_core::StepError) -> Self {
        Self::Step(e)
    }
}

impl From<basis_core::TableError> for Error {
    fn from(e: basis_core::TableError) -> Self {
        Self::Table(e)
    }
}

impl From<onebit_codec::CodecError> for Error {
    fn from(e: onebit_codec::CodecError) -> Self {
        Self::Codec(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadShape { buckets, dim } => {
                write!(f, "bad table shape: {buckets} buckets × {dim} dims")
            }
            Self::BucketOutOfRange { bucket, buckets } => {
                write!(f, "bucket {bucket} out of range (table has {buckets})")
            }
            Self::LengthMismatch { expected, got } => {
                write!(f, "slice length {got}, expected {expected}")
            }
            Self::NonFinite { index } => write!(f, "non-finite gradient at element {index}"),
            Self::InvalidParams => f.write_str("hyper-parameter out of range"),
            Self::ThreadPool => f.write_str("cannot build the rayon thread pool"),
            Self::Step(e) => write!(f, "step refused: {e}"),
            Self::Table(e) => write!(f, "bad dense table: {e}"),
            Self::Codec(e) => write!(f, "codec refused: {e}"),
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Step(e) => Some(e),
            Self::Table(e) => Some(e),
            Self::Codec(e) => Some(e),
            _ => None,
        }
    }
}
