//! Error types: configuration, step, table and exported-state errors.

use alloc::vec::Vec;
use core::fmt;
use core::mem::size_of;

use crate::config_option::{ConfigOption, Direction};

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
    /// The exponent of [`Accumulate::CountAnnealed`](crate::Accumulate::CountAnnealed)
    /// is negative or not finite.
    AnnealPower,
    /// The row-scale log₂ range is not finite with `min < max`.
    RowScaleRange,
    /// The row-scale profile power is outside `[0, 1]` or its `lead` exceeds `dim`.
    Profile,
    /// The bucketer has zero buckets.
    NoBuckets,
    /// `option` differs from its [`Default`](crate::BasisConfig::default)
    /// value (for `scalar_lr` under `RowScaled`: is neither the default nor
    /// 0), but this configuration never reads it: the `RowScaled`
    /// direction has no learned scalar and no Adam moments; the
    /// learned-scalar directions have no row-scale options; `scalar_lr = 0`
    /// freezes (and stores no) row scalars; a profile of power 0 has no
    /// `lead` group. Refused so a setting cannot silently do nothing.
    Ignored {
        /// The option set in vain.
        option: ConfigOption,
        /// The configuration's direction.
        direction: Direction,
    },
    /// The state this configuration needs up front (dense per-row state,
    /// bucket tables) does not fit: its size overflows the address space or
    /// the allocator refused it. Nothing was allocated.
    AllocationFailed {
        /// Bytes the failed allocation asked for (exact, wider than `usize`
        /// so an overflowing size is still reported).
        bytes: u128,
    },
    /// FTRL's β is not finite and > 0, or λ1 / λ2 is negative or not finite.
    Ftrl,
    /// A quantization block size of 0.
    BlockSize,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = match self {
            Self::AllocationFailed { bytes } => {
                return write!(f, "cannot allocate {bytes} bytes of optimizer state");
            }
            Self::Ignored { option, direction } => {
                let why = ignored_because(*option, *direction);
                return write!(f, "`{}` does nothing here: {why}", option.name());
            }
            Self::ZeroDim => "row dimension must be at least 1",
            Self::LearningRate => "learning rate must be finite and > 0",
            Self::Beta => "beta must be in [0, 1)",
            Self::Epsilon => "epsilon must be finite and > 0",
            Self::WeightDecay => "weight decay must be finite and >= 0",
            Self::ScalarLearningRate => "scalar learning rate must be finite and >= 0",
            Self::ScalarClip => "scalar clip range must satisfy 0 < s_min <= 1 <= s_max (finite)",
            Self::GradClip => "gradient clip norm must be finite and > 0",
            Self::FrequencyPower => "frequency exponent must be finite and >= 0",
            Self::AnnealPower => "count-annealed accumulation power must be finite and >= 0",
            Self::RowScaleRange => "row-scale log2 range must be finite with min < max",
            Self::Profile => "row-scale profile power must be in [0, 1] and lead <= dim",
            Self::NoBuckets => "the bucketer must have at least one bucket",
            Self::Ftrl => "FTRL needs beta finite and > 0, l1 and l2 finite and >= 0",
            Self::BlockSize => "the quantization block size must be at least 1",
        };
        f.write_str(msg)
    }
}

/// Why `option` is not read under `direction` (see [`ConfigError::Ignored`]).
fn ignored_because(option: ConfigOption, direction: Direction) -> &'static str {
    use ConfigOption as O;
    match (direction, option) {
        (_, O::Bf16EpsFloor) => "the floor raises epsilon only for bf16 tables",
        (Direction::RowScaled, O::ProfileLead) => "a profile of power 0 has no groups",
        (Direction::RowScaled, O::RowCounter) => {
            "only an accumulation that counts rows (anneal, ema-anneal) reads it"
        }
        (Direction::RowScaled, O::Beta1 | O::Beta2 | O::BiasCorrection) => {
            "the RowScaled direction keeps no Adam moments"
        }
        (Direction::RowScaled, _) => "the RowScaled direction has no learned row scalar",
        (_, O::Accumulate | O::Log2Range | O::Profile | O::ProfileLead | O::RowCounter) => {
            "only the RowScaled direction reads it"
        }
        (_, O::Beta1) => {
            "OwnGradient keeps a first moment only for a learning scalar (scalar_lr > 0)"
        }
        _ => "scalar_lr = 0 freezes (and stores no) row scalars",
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
    /// A keyed step ([`SparseOptimizer::step_keyed`](crate::SparseOptimizer::step_keyed))
    /// got another number of keys than of slots.
    KeyLength {
        /// Keys given.
        keys: usize,
        /// Slots given.
        slots: usize,
    },
    /// In a keyed step, keys and slots are not one-to-one within the batch:
    /// this slot came with two keys, or this key with two slots.
    KeyConflict {
        /// The key (row id hashed).
        key: u64,
        /// The slot (row stored).
        slot: u64,
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
            Self::KeyLength { keys, slots } => {
                write!(f, "keyed step got {keys} keys for {slots} slots")
            }
            Self::KeyConflict { key, slot } => write!(
                f,
                "keyed step: key {key} and slot {slot} are not one-to-one in the batch"
            ),
        }
    }
}

impl core::error::Error for StepError {}

/// Importing exported optimizer state failed. The optimizer is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// The blob ends before the state does: `found` bytes of the `needed`
    /// its header announces (or, when even the header is cut, of the
    /// smallest possible blob: header and trailer). Checked before the
    /// checksum, so a cut blob is named as such; a corrupted length field
    /// that announces more than the blob holds is reported here too.
    Truncated {
        /// Bytes the blob needs.
        needed: u64,
        /// Bytes present.
        found: u64,
    },
    /// The magic bytes are wrong: not an exported optimizer state.
    BadMagic,
    /// A format version this build does not read.
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// The CRC-32 over the blob does not match its trailer.
    Checksum,
    /// The blob was exported by another optimizer kind (the message names
    /// both: BASIS 1, exact Adam 2, row-wise AdaGrad 3, SGD 4).
    WrongKind {
        /// Kind tag expected.
        expected: u8,
        /// Kind tag found.
        found: u8,
    },
    /// The blob was exported under another configuration than the
    /// importing optimizer's: its state would mean something else here.
    ConfigMismatch {
        /// The first setting that differs.
        field: StateField,
    },
    /// The payload length field disagrees with the blob, or the payload is
    /// internally inconsistent (counts, trailing bytes, invalid values).
    Malformed,
    /// The blob predates saved bucketer state (format version 2), and this
    /// optimizer's bucketer has state of its own (a d-choice bucketer's
    /// remembered choices, see
    /// [`Bucketer::has_state`](balanced_hash::Bucketer::has_state)): the
    /// restored run would place rows elsewhere than the exported one.
    MissingBucketerState,
    /// The bucketer refused the state saved in the blob: it was set up
    /// differently ([`HashError::StateMismatch`](balanced_hash::HashError::StateMismatch)
    /// names the setting) or the bytes are damaged.
    Bucketer(balanced_hash::HashError),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, found } => write!(
                f,
                "state blob is truncated: {found} bytes present, {needed} needed"
            ),
            Self::BadMagic => f.write_str("not an exported optimizer state (bad magic)"),
            Self::UnsupportedVersion { found } => {
                write!(f, "unsupported state format version {found}")
            }
            Self::Checksum => f.write_str("state blob checksum mismatch (corrupted)"),
            Self::WrongKind { expected, found } => write!(
                f,
                "state blob is {} (kind {found}), expected {} (kind {expected})",
                kind_name(*found),
                kind_name(*expected)
            ),
            Self::ConfigMismatch { field } => write!(
                f,
                "state blob was exported with another {field} than this optimizer's"
            ),
            Self::Malformed => f.write_str("state blob payload is malformed"),
            Self::MissingBucketerState => f.write_str(
                "state blob (format version 2) lacks the bucketer's remembered choices, \
                 which this optimizer's d-choice bucketer needs to continue exactly",
            ),
            Self::Bucketer(e) => write!(f, "state blob's bucketer state refused: {e}"),
        }
    }
}

impl core::error::Error for StateError {}

/// What a state blob's optimizer kind tag means, for messages.
fn kind_name(tag: u8) -> &'static str {
    use crate::kind;
    match tag {
        kind::BASIS => "a BASIS state",
        kind::ADAM => "an exact Adam state",
        kind::ADAGRAD => "a row-wise AdaGrad state",
        kind::SGD => "an SGD state",
        kind::PARTIAL_ROWWISE_ADAM => "a partial row-wise Adam state",
        kind::ROWSTEP_ADAM => "a row-step Adam state",
        kind::FTRL => "an FTRL state",
        kind::ADAM8BIT => "an 8-bit Adam state",
        t if t & kind::ROWS != 0 && t & kind::BUCKETS == 0 => "a row state (export_rows)",
        t if t & kind::BUCKETS != 0 && t & kind::ROWS == 0 => "a bucket state (export_buckets)",
        _ => "of an unknown optimizer kind",
    }
}

/// A setting recorded in exported state, named by
/// [`StateError::ConfigMismatch`] when the importer's differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateField {
    /// The row dimension `d`.
    Dim,
    /// The dense row range (or dense vs sparse row state).
    Rows,
    /// The number of buckets `B`.
    Buckets,
    /// The direction mode.
    Direction,
    /// The per-row scalar storage.
    ScalarStorage,
    /// The shared-table precision.
    TablePrecision,
    /// Whether a first moment is kept.
    FirstMoment,
    /// Whether per-row update counters are kept.
    RowCounters,
    /// The sign-hash / stochastic-rounding seed.
    Seed,
    /// β1 or β2 (what the moments average over).
    Betas,
    /// The scalar clip range (the 1-byte code of learned scalars spans it).
    ScalarClip,
    /// Whether the row scalars learn (`scalar_lr > 0` outside `RowScaled`):
    /// it decides whether they are state at all.
    LearnedScalars,
    /// `RowScaled` accumulation (sum or EMA, and its β).
    Accumulate,
    /// The `RowScaled` log₂ range (the 1-byte code of `G_i` spans it).
    RowScaleRange,
    /// The bucketer's strategy (one-choice, d-choice, custom).
    BucketerKind,
    /// The bucketer's number of hash choices.
    BucketerChoices,
    /// The bucketer's hash seed.
    BucketerSeed,
    /// The quantization block size (values per absmax).
    BlockSize,
}

impl fmt::Display for StateField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Dim => "row dimension",
            Self::Rows => "dense row range",
            Self::Buckets => "bucket count",
            Self::Direction => "direction mode",
            Self::ScalarStorage => "scalar storage",
            Self::TablePrecision => "table precision",
            Self::FirstMoment => "first-moment table",
            Self::RowCounters => "row update counters",
            Self::Seed => "seed",
            Self::Betas => "beta1/beta2",
            Self::ScalarClip => "scalar clip range",
            Self::LearnedScalars => "setting of learned row scalars (scalar lr 0 or not)",
            Self::Accumulate => "row-scale accumulation",
            Self::RowScaleRange => "row-scale log2 range",
            Self::BucketerKind => "bucketer kind",
            Self::BucketerChoices => "number of bucketer choices",
            Self::BucketerSeed => "bucketer seed",
            Self::BlockSize => "quantization block size",
        })
    }
}

/// Growing a dense row range ([`SparseOptimizer::grow_rows`](crate::SparseOptimizer::grow_rows)) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrowError {
    /// The optimizer keeps its rows in a sparse index (or cannot grow).
    NotDense,
    /// The new row count is below the current one (rows never shrink).
    Shrink {
        /// Rows asked for.
        rows: u64,
        /// Rows held now.
        current: u64,
    },
    /// The allocation failed (or the size overflows `usize`); nothing changed.
    OutOfMemory {
        /// Rows asked for.
        rows: u64,
    },
}

impl fmt::Display for GrowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotDense => write!(f, "only a dense row index can grow"),
            Self::Shrink { rows, current } => {
                write!(
                    f,
                    "cannot shrink the row range from {current} to {rows} rows"
                )
            }
            Self::OutOfMemory { rows } => {
                write!(f, "out of memory growing the state to {rows} rows")
            }
        }
    }
}

impl core::error::Error for GrowError {}

/// `rows × per_row` copies of `value`, allocated fallibly.
///
/// Dense state is sized by the caller's row count, which can be anything up
/// to `u64::MAX`: an overflowing size or a refused allocation must come back
/// as an error, not as the allocator's abort (`vec!` would abort).
///
/// # Errors
/// [`ConfigError::AllocationFailed`] with the bytes asked for.
pub(crate) fn try_filled<T: Clone>(
    rows: u64,
    per_row: usize,
    value: T,
) -> Result<Vec<T>, ConfigError> {
    let count = u128::from(rows) * per_row as u128;
    let fail = ConfigError::AllocationFailed {
        bytes: count * size_of::<T>() as u128,
    };
    let n = usize::try_from(count).map_err(|_| fail)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| fail)?;
    v.resize(n, value);
    Ok(v)
}

/// `v.len()` grows to `len` with `fill`, fallibly: nothing changes on error.
pub(crate) fn try_grow<T: Clone>(
    v: &mut alloc::vec::Vec<T>,
    len: usize,
    fill: T,
    rows: u64,
) -> Result<(), GrowError> {
    let extra = len.saturating_sub(v.len());
    v.try_reserve_exact(extra)
        .map_err(|_| GrowError::OutOfMemory { rows })?;
    v.resize(len, fill);
    Ok(())
}

/// Moving single rows' (or buckets') state between optimizers
/// ([`SparseOptimizer::export_rows`](crate::SparseOptimizer::export_rows)
/// and its siblings) was refused. On error nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RowStateError {
    /// This optimizer cannot move that state exactly (the reason).
    Unsupported(RowStateUnsupported),
    /// A slot outside the optimizer's dense row range.
    SlotOutOfRange {
        /// The slot named.
        slot: u64,
        /// The dense row range (slots `0..rows`).
        rows: u64,
    },
    /// A bucket outside the optimizer's buckets.
    BucketOutOfRange {
        /// The bucket named.
        bucket: u32,
        /// The optimizer's bucket count.
        buckets: u32,
    },
    /// The same slot (or bucket) named twice in one call: the result
    /// would depend on the order of the copies.
    Duplicate {
        /// The slot (or bucket) named twice.
        slot: u64,
    },
    /// The blob holds state for another number of rows (buckets) than the
    /// call names.
    CountMismatch {
        /// Rows (buckets) named by the call.
        expected: u64,
        /// Rows (buckets) in the blob.
        found: u64,
    },
    /// The blob was exported at another global step count than this
    /// optimizer's, and this optimizer has already stepped (a fresh one
    /// takes the blob's count): the moved rows would continue with another
    /// bias correction or other rounding bits than they had.
    StepMismatch {
        /// The exporter's step count.
        exported: u64,
        /// This optimizer's step count.
        here: u64,
    },
    /// The blob itself was refused: truncated, corrupted, of another
    /// optimizer kind, or exported under another configuration.
    State(StateError),
    /// Allocating room for the imported rows failed.
    OutOfMemory,
}

/// Why an optimizer cannot move row or bucket state
/// ([`RowStateError::Unsupported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RowStateUnsupported {
    /// This optimizer does not implement per-row state moves (the trait's
    /// default for optimizers outside this crate).
    NotImplemented,
    /// Its row state is keyed by id in a sparse index
    /// ([`RowIndex::Sparse`](crate::RowIndex::Sparse)), which has no slot
    /// to swap into: removal needs [`RowIndex::Dense`](crate::RowIndex::Dense).
    SparseIndex,
    /// The bucketer remembers a choice per key (d-choice): a moved row's
    /// bucket would be chosen anew on the importer, not carried. Move the
    /// whole state ([`export_state`](crate::SparseOptimizer::export_state))
    /// or use a one-choice bucketer.
    BucketerState,
    /// The optimizer has no shared bucket state to move (only BASIS has).
    NoBuckets,
}

impl fmt::Display for RowStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported(why) => write!(f, "cannot move row state: {why}"),
            Self::SlotOutOfRange { slot, rows } => {
                write!(f, "slot {slot} is outside the dense row range 0..{rows}")
            }
            Self::BucketOutOfRange { bucket, buckets } => {
                write!(f, "bucket {bucket} is outside the {buckets} buckets")
            }
            Self::Duplicate { slot } => write!(f, "slot or bucket {slot} is named twice"),
            Self::CountMismatch { expected, found } => write!(
                f,
                "the blob holds {found} rows or buckets, the call names {expected}"
            ),
            Self::StepMismatch { exported, here } => write!(
                f,
                "the blob was exported at step {exported}, this optimizer is at step {here}"
            ),
            Self::State(e) => write!(f, "row state blob refused: {e}"),
            Self::OutOfMemory => f.write_str("out of memory importing rows"),
        }
    }
}

impl core::error::Error for RowStateError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::State(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StateError> for RowStateError {
    fn from(e: StateError) -> Self {
        Self::State(e)
    }
}

impl fmt::Display for RowStateUnsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotImplemented => "this optimizer does not implement per-row state moves",
            Self::SparseIndex => "a sparse row index has no slots to swap (use RowIndex::Dense)",
            Self::BucketerState => {
                "the bucketer remembers per-key choices (d-choice), which a row move would lose"
            }
            Self::NoBuckets => "this optimizer has no bucket state",
        })
    }
}
