//! Per-row state of the baseline optimizers ([`PartialRowwiseAdam`],
//! [`RowStepAdam`], [`Ftrl`], [`Adam8bit`]): an id → slot index, arrays
//! ("lanes") of a fixed number of values per slot that grow together, and
//! the state-blob layout they share (header, then the rows in id order).
//!
//! [`PartialRowwiseAdam`]: crate::PartialRowwiseAdam
//! [`RowStepAdam`]: crate::RowStepAdam
//! [`Ftrl`]: crate::Ftrl
//! [`Adam8bit`]: crate::Adam8bit

use alloc::vec::Vec;
use core::mem::size_of;

use crate::config::RowIndex;
use crate::error::{ConfigError, GrowError, StateError, StateField};
use crate::state::{Reader, Writer};
use crate::store::{Slots, try_filled};

/// `width` values per slot, row-major.
#[derive(Debug, Clone)]
pub(crate) struct Lane<T> {
    width: usize,
    data: Vec<T>,
}

impl<T: Copy> Lane<T> {
    /// `rows` slots of `fill` (the dense range; 0 for a sparse index).
    pub(crate) fn new(width: usize, rows: u64, fill: T) -> Result<Self, ConfigError> {
        Ok(Self {
            width,
            data: try_filled(rows, width, fill)?,
        })
    }

    /// A lane holding `data` (read from a blob; `data.len()` is a multiple of `width`).
    pub(crate) fn from_vec(width: usize, data: Vec<T>) -> Self {
        Self { width, data }
    }

    /// Slot `s`'s values.
    pub(crate) fn row(&self, s: usize) -> &[T] {
        &self.data[s * self.width..(s + 1) * self.width]
    }

    /// Slot `s`'s values, mutable.
    pub(crate) fn row_mut(&mut self, s: usize) -> &mut [T] {
        &mut self.data[s * self.width..(s + 1) * self.width]
    }

    /// Makes room for `slots` slots, new ones filled with `fill`.
    pub(crate) fn ensure(&mut self, slots: usize, fill: T) {
        if self.data.len() < slots * self.width {
            self.data.resize(slots * self.width, fill);
        }
    }

    /// Reserves `slots` slots fallibly (nothing changes on error).
    pub(crate) fn try_reserve(&mut self, slots: usize, rows: u64) -> Result<(), GrowError> {
        let len = slots
            .checked_mul(self.width)
            .ok_or(GrowError::OutOfMemory { rows })?;
        self.data
            .try_reserve_exact(len.saturating_sub(self.data.len()))
            .map_err(|_| GrowError::OutOfMemory { rows })
    }

    /// Allocated bytes (capacity, not length: what the allocator handed out).
    pub(crate) fn bytes(&self) -> usize {
        self.data.capacity() * size_of::<T>()
    }
}

/// Which slot holds each row's state, and how many slots there are.
#[derive(Debug, Clone)]
pub(crate) struct RowSlots {
    pub(crate) index: Slots,
    pub(crate) slots: usize,
}

impl RowSlots {
    /// Empty (sparse) or the whole dense range.
    pub(crate) fn new(row_index: RowIndex) -> Self {
        let index = Slots::new(row_index);
        let slots = index.dense_rows();
        Self { index, slots }
    }

    /// `id`'s slot, created (sparse) on first sight; `true` when created, so
    /// the caller extends its lanes to [`Self::slots`].
    pub(crate) fn slot(&mut self, id: u64) -> (usize, bool) {
        let (slot, created) = self.index.get_or_insert(id, self.slots);
        if created {
            self.slots += 1;
        }
        (slot, created)
    }

    /// The checked new slot count of a dense range growing to `rows`.
    pub(crate) fn check_grow(&self, rows: u64) -> Result<usize, GrowError> {
        self.index.check_grow(rows)
    }

    /// Commits a grow checked by [`Self::check_grow`] (lanes already extended).
    pub(crate) fn set_rows(&mut self, rows: u64, slots: usize) {
        self.index.set_dense_rows(rows);
        self.slots = slots;
    }

    /// The dense range, or `u64::MAX` for a sparse index (as blobs record it).
    fn range_tag(&self) -> u64 {
        if self.index.is_dense() {
            self.index.dense_rows() as u64
        } else {
            u64::MAX
        }
    }

    /// Writes the shared header (`dim`, range, `steps`, `nonfinite`, slots)
    /// and every slot in id order (its id first when sparse), the slot's
    /// values written by `put`.
    pub(crate) fn write(
        &self,
        w: &mut Writer,
        dim: usize,
        steps: u64,
        nonfinite: u64,
        mut put: impl FnMut(&mut Writer, usize),
    ) {
        w.u64(dim as u64);
        w.u64(self.range_tag());
        w.u64(steps);
        w.u64(nonfinite);
        w.u64(self.slots as u64);
        match self.index.sorted_pairs() {
            None => (0..self.slots).for_each(|s| put(w, s)),
            Some(pairs) => pairs.into_iter().for_each(|(id, s)| {
                w.u64(id);
                put(w, s as usize);
            }),
        }
    }

    /// Reads what [`Self::write`] wrote into fresh slots for this optimizer
    /// (`dim`, the current index): checks dim and range, then `get` reads
    /// each slot's values (`per_slot` bytes, checked against the blob's
    /// length before anything is allocated). Returns the slots and
    /// `(steps, nonfinite)`.
    pub(crate) fn read(
        &self,
        r: &mut Reader<'_>,
        dim: usize,
        per_slot: usize,
        mut get: impl FnMut(&mut Reader<'_>) -> Result<(), StateError>,
    ) -> Result<(Self, u64, u64), StateError> {
        if r.u64()? != dim as u64 {
            return Err(StateError::ConfigMismatch {
                field: StateField::Dim,
            });
        }
        if r.u64()? != self.range_tag() {
            return Err(StateError::ConfigMismatch {
                field: StateField::Rows,
            });
        }
        let steps = r.u64()?;
        let nonfinite = r.u64()?;
        let slots = usize::try_from(r.u64()?).map_err(|_| StateError::Malformed)?;
        let dense = self.index.is_dense();
        if dense && slots != self.index.dense_rows() {
            return Err(StateError::ConfigMismatch {
                field: StateField::Rows,
            });
        }
        r.ensure(slots, per_slot + if dense { 0 } else { 8 })?;
        // A grown dense range keeps its current rows (checked equal above).
        let mut index = match &self.index {
            Slots::Dense { rows } => Slots::Dense { rows: *rows },
            Slots::Sparse { .. } => Slots::new(RowIndex::Sparse),
        };
        let mut last = None;
        for s in 0..slots {
            if !dense {
                let id = r.u64()?;
                if last.is_some_and(|l| l >= id) {
                    return Err(StateError::Malformed);
                }
                last = Some(id);
                index.get_or_insert(id, s);
            }
            get(r)?;
        }
        Ok((Self { index, slots }, steps, nonfinite))
    }
}

/// `n` raw bytes (the length is checked before allocating).
pub(crate) fn read_u8s(r: &mut Reader<'_>, n: usize) -> Result<Vec<u8>, StateError> {
    r.ensure(n, 1)?;
    (0..n).map(|_| r.u8()).collect()
}

/// `n` finite, non-negative f32 values (second moments, absmax scales).
pub(crate) fn read_nonneg(r: &mut Reader<'_>, n: usize) -> Result<Vec<f32>, StateError> {
    let v = r.f32s(n)?;
    if v.iter().any(|&x| x < 0.0) {
        return Err(StateError::Malformed);
    }
    Ok(v)
}
