//! The crate's error type.

use core::fmt;

/// What can go wrong when building a bucketer or computing load statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HashError {
    /// The bucket count was 0; every strategy needs `B ≥ 1`.
    ZeroBuckets,
    /// The number of choices `d` was outside `2..=4`.
    InvalidChoices {
        /// The `d` that was asked for.
        d: u8,
    },
    /// A dense bucketer was asked to remember a key `≥ n_keys`.
    KeyOutOfRange {
        /// The offending key.
        key: u64,
        /// The dense id space `0..n_keys` the bucketer was built for.
        n_keys: u64,
    },
    /// A restored choice index was `≥ d`.
    InvalidChoice {
        /// The offending choice index.
        choice: u8,
        /// The bucketer's number of choices.
        d: u8,
    },
    /// A [`Bucketer`](crate::Bucketer) returned a bucket `≥ buckets()`.
    BucketOutOfRange {
        /// The bucket returned.
        bucket: u32,
        /// The bucketer's bucket count.
        buckets: u32,
    },
    /// The requested table does not fit in memory (size overflow or the
    /// allocator refused it).
    AllocationFailed,
}

impl fmt::Display for HashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroBuckets => f.write_str("bucket count must be at least 1"),
            Self::InvalidChoices { d } => {
                write!(f, "number of choices must be 2, 3 or 4, got {d}")
            }
            Self::KeyOutOfRange { key, n_keys } => {
                write!(f, "key {key} is outside the dense id range 0..{n_keys}")
            }
            Self::InvalidChoice { choice, d } => {
                write!(f, "choice index {choice} is not below d = {d}")
            }
            Self::BucketOutOfRange { bucket, buckets } => {
                write!(f, "bucketer returned bucket {bucket}, not below {buckets}")
            }
            Self::AllocationFailed => f.write_str("table allocation failed or overflowed"),
        }
    }
}

impl core::error::Error for HashError {}
