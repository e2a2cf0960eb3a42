//! Error types: [`OneBitError`] for collectives and optimizer steps,
//! [`StateError`] for importing saved optimizer state.

use comm_traits::CommError;
use core::fmt;

/// Why a compressed all-reduce or an optimizer step failed. In every case
/// nothing was changed (buffers, error-feedback state, optimizer state),
/// except for [`OneBitError::Comm`] raised by the transport after the header
/// exchange (then the group is broken anyway).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OneBitError {
    /// The communicator failed, or the ranks disagree on the header
    /// (length, step, operation, dtype): reported on every rank.
    Comm(CommError),
    /// This rank's input holds a NaN or ±Inf at `index`.
    NonFinite {
        /// First offending element.
        index: usize,
    },
    /// Another rank rejected its own input for this call (e.g. a NaN
    /// gradient); this rank changed nothing either.
    RemoteInput {
        /// The first rank that rejected its input.
        rank: usize,
    },
    /// Error-feedback state sized for another buffer or group size.
    StateShape {
        /// Length (or group size) the state was built for.
        expected: u64,
        /// Length (or group size) of this call.
        found: u64,
    },
    /// A gradient or parameter slice has the wrong length.
    Length {
        /// Length the optimizer was built for.
        expected: usize,
        /// Length passed.
        found: usize,
    },
    /// `step` was called with no gradient accumulated since the last step.
    NoGradient,
    /// A hyper-parameter or group layout is invalid (names the field).
    Config(&'static str),
}

impl fmt::Display for OneBitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Comm(e) => write!(f, "communication failed: {e}"),
            Self::NonFinite { index } => write!(f, "non-finite value at index {index}"),
            Self::RemoteInput { rank } => write!(f, "rank {rank} rejected its input"),
            Self::StateShape { expected, found } => write!(
                f,
                "error-feedback state built for {expected}, called with {found}"
            ),
            Self::Length { expected, found } => {
                write!(f, "expected {expected} elements, got {found}")
            }
            Self::NoGradient => write!(f, "no gradient accumulated before step"),
            Self::Config(what) => write!(f, "invalid configuration: {what}"),
        }
    }
}

impl core::error::Error for OneBitError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Comm(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CommError> for OneBitError {
    fn from(e: CommError) -> Self {
        Self::Comm(e)
    }
}

/// Why [`crate::OneBitAdam::import_state`] (or
/// [`crate::ZeroOneAdam::import_state`], [`crate::OneBitLamb::import_state`])
/// rejected a saved state. The
/// optimizer is unchanged on error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// The bytes end before the record does: `found` bytes of the `needed`
    /// that the record's own length fields announce (a lower bound when the
    /// cut falls inside the fields that size it). Checked before the
    /// checksum, so a cut record is named as such; a corrupted length
    /// field that announces more than is there is reported here too.
    Truncated {
        /// Bytes the record needs (at least).
        needed: u64,
        /// Bytes present.
        found: u64,
    },
    /// Not a state record of the optimizer importing it (1-bit Adam's, 0/1
    /// Adam's and 1-bit LAMB's have different magics; the message names the
    /// family).
    BadMagic,
    /// A format version this build cannot read.
    UnsupportedVersion(u32),
    /// The CRC-32 over the record does not match.
    Checksum {
        /// Stored checksum.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
    /// The record was saved by an optimizer with another shape (parameter
    /// count, groups, group size or rank); names the field.
    Shape(&'static str),
    /// Group `group` was saved under another communication policy (e.g. a
    /// 1-bit group's record imported into a 2-bit group): its error
    /// buffers mean something else there, so it is refused.
    Policy {
        /// Index of the group.
        group: usize,
        /// The policy of the record.
        saved: crate::Policy,
        /// The policy of this optimizer's group.
        here: crate::Policy,
    },
    /// The record was saved under the same kind of schedule with another
    /// step: `field` (`"freeze_step"` of a fixed freeze, `"max_step"` of an
    /// automatic one, 0/1 Adam's `"var_freeze_step"` or
    /// `"local_step_scaler"`) is `saved` in the record and `here` in this
    /// optimizer's configuration. Continuing would follow another schedule
    /// than the saved run's, so it is refused; a caller that derives the
    /// step from its run's length can name the lengths (the values are
    /// given for that).
    Schedule {
        /// The configuration field that differs.
        field: &'static str,
        /// Its value in the record.
        saved: u64,
        /// Its value in this optimizer's configuration.
        here: u64,
    },
    /// A stored float is NaN or ±Inf.
    NonFinite,
    /// Bytes follow the end of the record its length fields announce.
    TrailingBytes,
    /// The record was saved by another optimizer of this crate (names
    /// it: `"1-bit Adam"` or `"0/1 Adam"`).
    OtherOptimizer(&'static str),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, found } => write!(
                f,
                "state record is truncated: {found} bytes present, {needed} needed"
            ),
            Self::BadMagic => write!(f, "not a 1-bit Adam state record"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported state version {v}"),
            Self::Checksum { stored, computed } => write!(
                f,
                "state checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            Self::Shape(what) => write!(f, "state does not match this optimizer: {what}"),
            Self::Policy { group, saved, here } => write!(
                f,
                "group {group} was saved as a {} group, this one is {}",
                saved.name(),
                here.name()
            ),
            Self::Schedule { field, saved, here } => write!(
                f,
                "state was saved under another schedule: {field} {saved}, this optimizer's is {here}"
            ),
            Self::NonFinite => write!(f, "state holds a non-finite value"),
            Self::TrailingBytes => write!(
                f,
                "trailing bytes after the state record (longer than its length fields announce)"
            ),
            Self::OtherOptimizer(kind) => {
                write!(
                    f,
                    "the state record was saved by another optimizer ({kind})"
                )
            }
        }
    }
}

impl core::error::Error for StateError {}
