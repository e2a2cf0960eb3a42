//! Blobs of single rows' (and buckets') state, for rows that move between
//! optimizers ([`SparseOptimizer::export_rows`] and its siblings): the
//! framing every optimizer shares and the step-count rule (the slot checks
//! are `store::Slots`' methods, the scalar rows `store::ScalarStore`'s).
//!
//! Payload (inside the usual [`crate::state`] envelope, kind tag = the
//! optimizer's | [`kind::ROWS`] or [`kind::BUCKETS`]): the optimizer's
//! row fingerprint (one `u64` per setting the rows' meaning depends on),
//! the global step count, the number of rows, then per row a presence byte
//! (1: state follows in the optimizer's per-row layout, 0: no state yet).
//!
//! [`SparseOptimizer::export_rows`]: crate::SparseOptimizer::export_rows

use alloc::vec::Vec;

use crate::error::{RowStateError, StateError, StateField};
use crate::state::{Reader, Writer, kind};

/// Fails on the smallest value named twice.
pub(crate) fn check_distinct(slots: &[u64]) -> Result<(), RowStateError> {
    let mut sorted = slots.to_vec();
    sorted.sort_unstable();
    match sorted.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(RowStateError::Duplicate { slot: w[0] }),
        None => Ok(()),
    }
}

/// Writes the header of a row (bucket) blob; the caller writes the rows
/// (each with [`Writer::u8`] presence first) and finishes with
/// `finish(tag)`.
pub(crate) fn write_header(
    w: &mut Writer,
    fingerprint: &[(StateField, u64)],
    steps: u64,
    count: usize,
) {
    fingerprint.iter().for_each(|&(_, v)| w.u64(v));
    w.u64(steps);
    w.u64(count as u64);
}

/// The tag of a row blob of optimizer kind `tag`.
pub(crate) const fn rows_tag(tag: u8) -> u8 {
    tag | kind::ROWS
}

/// The tag of a bucket blob of optimizer kind `tag`.
pub(crate) const fn buckets_tag(tag: u8) -> u8 {
    tag | kind::BUCKETS
}

/// Opens a row (bucket) blob: envelope, fingerprint, step rule, count.
/// Returns the reader at the first row and the step count the importer
/// has afterwards.
pub(crate) fn open<'a>(
    bytes: &'a [u8],
    tag: u8,
    fingerprint: &[(StateField, u64)],
    steps_here: u64,
    count: usize,
) -> Result<(Reader<'a>, u64), RowStateError> {
    let mut r = Reader::open(bytes, tag)?;
    for &(field, value) in fingerprint {
        if r.u64()? != value {
            return Err(StateError::ConfigMismatch { field }.into());
        }
    }
    let exported = r.u64()?;
    let found = r.u64()?;
    if found != count as u64 {
        return Err(RowStateError::CountMismatch {
            expected: count as u64,
            found,
        });
    }
    Ok((r, adopt_steps(steps_here, exported)?))
}

/// The step rule of [`SparseOptimizer::import_rows`](crate::SparseOptimizer::import_rows):
/// a fresh importer (0 steps) takes the exporter's count; otherwise they
/// must agree.
pub(crate) fn adopt_steps(here: u64, exported: u64) -> Result<u64, RowStateError> {
    if here == 0 || here == exported {
        Ok(exported)
    } else {
        Err(RowStateError::StepMismatch { exported, here })
    }
}

/// Reads a presence byte (0 or 1).
pub(crate) fn present(r: &mut Reader<'_>) -> Result<bool, StateError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(StateError::Malformed),
    }
}

/// Moves the `width` values of slot `last` into slot `slot` and drops the
/// last slot (`data` holds `last + 1` slots).
pub(crate) fn swap_remove_slot<T: Copy>(data: &mut Vec<T>, width: usize, slot: usize, last: usize) {
    if slot != last {
        data.copy_within(last * width..(last + 1) * width, slot * width);
    }
    data.truncate(last * width);
}

/// `Some(last)` when a row moved into `slot`.
pub(crate) fn moved(slot: u64, last: u64) -> Option<u64> {
    (slot != last).then_some(last)
}
