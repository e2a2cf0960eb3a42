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
    /// Saved bucketer state ([`Bucketer::load_state`](crate::Bucketer::load_state))
    /// was written by a bucketer set up differently: loading it would place
    /// keys elsewhere than the bucketer that saved it did.
    StateMismatch {
        /// The first setting that differs.
        setting: SavedSetting,
    },
    /// Saved bucketer state is truncated, has trailing bytes, or holds values
    /// no bucketer could have written (a choice `≥ d`, unsorted keys, counts
    /// that disagree).
    MalformedState,
}

/// A setting recorded in saved bucketer state, named by
/// [`HashError::StateMismatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SavedSetting {
    /// The state format (another strategy, or a newer format version).
    Format,
    /// The number of choices `d`.
    Choices,
    /// The bucket count `B`.
    Buckets,
    /// The hash seed.
    Seed,
    /// What the loads count ([`Weighting`](crate::Weighting)).
    Weighting,
    /// Dense ids `0..n_keys` (and `n_keys`) or sparse ids.
    KeyStore,
}

impl fmt::Display for SavedSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Format => "state format",
            Self::Choices => "number of choices",
            Self::Buckets => "bucket count",
            Self::Seed => "seed",
            Self::Weighting => "load weighting",
            Self::KeyStore => "key store (dense id range or sparse)",
        })
    }
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
            Self::StateMismatch { setting } => write!(
                f,
                "saved bucketer state was written with another {setting} than this bucketer's"
            ),
            Self::MalformedState => f.write_str("saved bucketer state is truncated or corrupted"),
        }
    }
}

impl core::error::Error for HashError {}
