//! Per-row state of the baseline optimizers ([`PartialRowwiseAdam`],
//! [`RowStepAdam`], [`Ftrl`], [`Adam8bit`]) and the plumbing they share,
//! written once: an id → slot index, arrays ("lanes") of a fixed number of
//! values per slot that grow together, and [`RowDriver`], which runs the
//! `SparseOptimizer` calls around each optimizer's own per-row update
//! (validation and merging, the non-finite policy, creating slots, growing,
//! the state-blob layout, single-row moves and swap-removal).
//!
//! A baseline is then its configuration, its lanes (a tuple of [`Lane`]s)
//! and the update of one row.
//!
//! [`PartialRowwiseAdam`]: crate::PartialRowwiseAdam
//! [`RowStepAdam`]: crate::RowStepAdam
//! [`Ftrl`]: crate::Ftrl
//! [`Adam8bit`]: crate::Adam8bit

use alloc::vec::Vec;
use core::mem::size_of;

use crate::batch::{Merged, merge};
use crate::config::{NonFinitePolicy, RowIndex};
use crate::error::try_filled;
use crate::error::{ConfigError, GrowError, RowStateError, StateError, StateField, StepError};
use crate::report::{MemoryReport, StepReport};
use crate::row_move;
use crate::state::{Reader, Writer};
use crate::store::Slots;
use crate::table::RowAccess;

/// A value a lane holds, with its blob encoding.
pub(crate) trait Value: Copy {
    /// Bytes in a blob.
    const BYTES: usize;
    /// Appends `self`.
    fn put(self, w: &mut Writer);
    /// Reads one value; `nonneg` refuses a negative one (second moments,
    /// absmax scales).
    fn get(r: &mut Reader<'_>, nonneg: bool) -> Result<Self, StateError>;
}

impl Value for f32 {
    const BYTES: usize = 4;
    fn put(self, w: &mut Writer) {
        w.f32(self);
    }
    fn get(r: &mut Reader<'_>, nonneg: bool) -> Result<Self, StateError> {
        let x = r.f32()?;
        if nonneg && x < 0.0 {
            return Err(StateError::Malformed);
        }
        Ok(x)
    }
}

impl Value for u8 {
    const BYTES: usize = 1;
    fn put(self, w: &mut Writer) {
        w.u8(self);
    }
    fn get(r: &mut Reader<'_>, _: bool) -> Result<Self, StateError> {
        r.u8()
    }
}

impl Value for u32 {
    const BYTES: usize = 4;
    fn put(self, w: &mut Writer) {
        w.u32(self);
    }
    fn get(r: &mut Reader<'_>, _: bool) -> Result<Self, StateError> {
        r.u32()
    }
}

/// `width` values per slot, row-major; a new or reset slot holds `fill`.
#[derive(Debug, Clone)]
pub(crate) struct Lane<T> {
    width: usize,
    data: Vec<T>,
    fill: T,
    /// Imported values must be `≥ 0` (checked in blobs).
    nonneg: bool,
}

impl<T: Value> Lane<T> {
    /// `rows` slots of `fill` (the dense range; 0 for a sparse index).
    pub(crate) fn new(width: usize, rows: u64, fill: T) -> Result<Self, ConfigError> {
        Ok(Self {
            width,
            data: try_filled(rows, width, fill)?,
            fill,
            nonneg: false,
        })
    }

    /// The same lane, its imported values checked `≥ 0`.
    pub(crate) fn nonneg(mut self) -> Self {
        self.nonneg = true;
        self
    }

    /// Slot `s`'s values.
    pub(crate) fn row(&self, s: usize) -> &[T] {
        &self.data[s * self.width..(s + 1) * self.width]
    }

    /// Slot `s`'s values, mutable.
    pub(crate) fn row_mut(&mut self, s: usize) -> &mut [T] {
        &mut self.data[s * self.width..(s + 1) * self.width]
    }

    /// Allocated bytes (capacity, not length: what the allocator handed out).
    pub(crate) fn bytes(&self) -> usize {
        self.data.capacity() * size_of::<T>()
    }

    fn slot_bytes(&self) -> usize {
        self.width * T::BYTES
    }
    fn write(&self, w: &mut Writer, s: usize) {
        self.row(s).iter().for_each(|&x| x.put(w));
    }
    fn read_push(&mut self, r: &mut Reader<'_>) -> Result<(), StateError> {
        for _ in 0..self.width {
            self.data.push(T::get(r, self.nonneg)?);
        }
        Ok(())
    }
    fn empty(&self) -> Self {
        Self {
            data: Vec::new(),
            ..*self
        }
    }
    /// Grows (amortized, like `Vec::push`) or truncates to `slots` slots.
    fn resize(&mut self, slots: usize) {
        self.data.resize(slots * self.width, self.fill);
    }
    fn try_reserve(&mut self, slots: usize, rows: u64) -> Result<(), GrowError> {
        let len = slots
            .checked_mul(self.width)
            .ok_or(GrowError::OutOfMemory { rows })?;
        self.data
            .try_reserve_exact(len.saturating_sub(self.data.len()))
            .map_err(|_| GrowError::OutOfMemory { rows })
    }
    fn copy_from(&mut self, dst: usize, src: &Self, s: usize) {
        self.row_mut(dst).copy_from_slice(src.row(s));
    }
    fn reset(&mut self, s: usize) {
        let fill = self.fill;
        self.row_mut(s).fill(fill);
    }
    fn swap_remove(&mut self, s: usize, last: usize) {
        row_move::swap_remove_slot(&mut self.data, self.width, s, last);
    }
}

/// A baseline's lanes, handled together: implemented for tuples of
/// [`Lane`]s (a slot's blob layout is each lane's values in tuple order).
pub(crate) trait Lanes: Sized {
    /// Bytes one slot takes in a blob.
    fn slot_bytes(&self) -> usize;
    /// Appends slot `s`'s values.
    fn write(&self, w: &mut Writer, s: usize);
    /// Reads one slot's values and appends them as a new slot.
    fn read_push(&mut self, r: &mut Reader<'_>) -> Result<(), StateError>;
    /// The same lanes with no slot.
    fn empty(&self) -> Self;
    /// Grows (new slots initial) or truncates to `slots` slots.
    fn resize(&mut self, slots: usize);
    /// Reserves room for `slots` slots, fallibly (nothing changes on error).
    fn try_reserve(&mut self, slots: usize, rows: u64) -> Result<(), GrowError>;
    /// Slot `dst` takes `src`'s slot `s`.
    fn copy_from(&mut self, dst: usize, src: &Self, s: usize);
    /// Slot `s` back to its initial values.
    fn reset(&mut self, s: usize);
    /// Slot `last`'s values move into `s`, and slot `last` is dropped.
    fn swap_remove(&mut self, s: usize, last: usize);
}

macro_rules! tuple_lanes {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Value),+> Lanes for ($(Lane<$t>,)+) {
            fn slot_bytes(&self) -> usize {
                0 $(+ self.$i.slot_bytes())+
            }
            fn write(&self, w: &mut Writer, s: usize) {
                $(self.$i.write(w, s);)+
            }
            fn read_push(&mut self, r: &mut Reader<'_>) -> Result<(), StateError> {
                $(self.$i.read_push(r)?;)+
                Ok(())
            }
            fn empty(&self) -> Self {
                ($(self.$i.empty(),)+)
            }
            fn resize(&mut self, slots: usize) {
                $(self.$i.resize(slots);)+
            }
            fn try_reserve(&mut self, slots: usize, rows: u64) -> Result<(), GrowError> {
                $(self.$i.try_reserve(slots, rows)?;)+
                Ok(())
            }
            fn copy_from(&mut self, dst: usize, src: &Self, s: usize) {
                $(self.$i.copy_from(dst, &src.$i, s);)+
            }
            fn reset(&mut self, s: usize) {
                $(self.$i.reset(s);)+
            }
            fn swap_remove(&mut self, s: usize, last: usize) {
                $(self.$i.swap_remove(s, last);)+
            }
        }
    };
}

tuple_lanes!(A 0, B 1);
tuple_lanes!(A 0, B 1, C 2);

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

    /// The dense range, or `u64::MAX` for a sparse index (as blobs record it).
    fn range_tag(&self) -> u64 {
        if self.index.is_dense() {
            self.index.dense_rows() as u64
        } else {
            u64::MAX
        }
    }
}

/// What the driver needs to know of a baseline besides its lanes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plumbing {
    /// Row dimension.
    pub(crate) dim: usize,
    /// Non-finite gradient policy.
    pub(crate) nonfinite: NonFinitePolicy,
    /// Optional per-row L2 gradient clip.
    pub(crate) grad_clip: Option<f32>,
    /// The state blob's optimizer kind tag.
    pub(crate) kind: u8,
    /// The largest step count the optimizer keeps (`u32::MAX` for those
    /// that count in a saturating `u32`); a blob with more is malformed.
    pub(crate) max_steps: u64,
}

/// One baseline's rows, lanes and counters, and the `SparseOptimizer`
/// plumbing around its per-row update.
#[derive(Debug, Clone)]
pub(crate) struct RowDriver<L> {
    pub(crate) plumbing: Plumbing,
    pub(crate) rows: RowSlots,
    pub(crate) lanes: L,
    /// Steps taken (saturating at `plumbing.max_steps`).
    pub(crate) steps: u64,
    nonfinite: u64,
    scratch: Merged,
}

impl<L: Lanes> RowDriver<L> {
    /// Empty state over `row_index`; `lanes` builds the lanes for a number
    /// of slots (the dense range, 0 when sparse).
    pub(crate) fn new(
        plumbing: Plumbing,
        row_index: RowIndex,
        lanes: impl FnOnce(u64) -> Result<L, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let rows = RowSlots::new(row_index);
        Ok(Self {
            lanes: lanes(rows.slots as u64)?,
            plumbing,
            rows,
            steps: 0,
            nonfinite: 0,
            scratch: Merged::default(),
        })
    }

    /// Row `id`'s slot, if it has state.
    pub(crate) fn slot_of(&self, id: u64) -> Option<usize> {
        self.rows.index.get(id)
    }

    /// One step: checks and merges the batch (on error nothing changed),
    /// counts the step, then calls `update(lanes, slot, gradient, table
    /// row, steps)` for each merged row in id order (its slot created
    /// first when new; the table row is `None` when the table lacks it).
    pub(crate) fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
        mut update: impl FnMut(&mut L, usize, &[f32], Option<&mut [f32]>, u64),
    ) -> Result<StepReport, StepError> {
        let p = self.plumbing;
        let d = p.dim;
        let index = &self.rows.index;
        let merged = merge(
            &mut self.scratch,
            ids,
            grads,
            d,
            p.nonfinite,
            p.grad_clip,
            table,
            |id| index.check(id),
        )?;
        self.steps = (self.steps + 1).min(p.max_steps);
        for (k, &id) in merged.ids.iter().enumerate() {
            let (slot, created) = self.rows.slot(id);
            if created {
                self.lanes.resize(self.rows.slots);
            }
            let g = &merged.grads[k * d..(k + 1) * d];
            update(&mut self.lanes, slot, g, table.row_mut(id), self.steps);
        }
        self.nonfinite += merged.skipped as u64;
        let report = merged.row_report();
        self.scratch = merged;
        Ok(report)
    }

    /// [`SparseOptimizer::grow_rows`](crate::SparseOptimizer::grow_rows).
    pub(crate) fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        let n = self.rows.index.check_grow(rows)?;
        // Reserve every lane before touching any, so a failure changes nothing.
        self.lanes.try_reserve(n, rows)?;
        self.lanes.resize(n);
        self.rows.index.set_dense_rows(rows);
        self.rows.slots = n;
        Ok(())
    }

    /// The index, scratch and row count of a memory report; the caller
    /// adds its lanes' bytes and its own scratch.
    pub(crate) fn memory(&self) -> MemoryReport {
        MemoryReport {
            row_index: self.rows.index.bytes(),
            scratch: self.scratch.capacity_bytes(),
            rows_with_state: self.rows.slots as u64,
            ..MemoryReport::default()
        }
    }

    /// The state blob: `prefix` (settings of the optimizer's own), then
    /// `dim`, the dense range (or `u64::MAX`), steps, the non-finite count,
    /// the slot count and every slot in id order (its id first when
    /// sparse).
    pub(crate) fn export_state(&self, prefix: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::default();
        prefix(&mut w);
        w.u64(self.plumbing.dim as u64);
        w.u64(self.rows.range_tag());
        w.u64(self.steps);
        w.u64(self.nonfinite);
        w.u64(self.rows.slots as u64);
        match self.rows.index.sorted_pairs() {
            None => (0..self.rows.slots).for_each(|s| self.lanes.write(&mut w, s)),
            Some(pairs) => pairs.into_iter().for_each(|(id, s)| {
                w.u64(id);
                self.lanes.write(&mut w, s as usize);
            }),
        }
        w.finish(self.plumbing.kind)
    }

    /// Reads what [`Self::export_state`] wrote (`prefix` checks the
    /// optimizer's own settings). On error nothing changed.
    pub(crate) fn import_state(
        &mut self,
        bytes: &[u8],
        prefix: impl FnOnce(&mut Reader<'_>) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let p = self.plumbing;
        let mut r = Reader::open(bytes, p.kind)?;
        prefix(&mut r)?;
        if r.u64()? != p.dim as u64 {
            return Err(StateError::ConfigMismatch {
                field: StateField::Dim,
            });
        }
        if r.u64()? != self.rows.range_tag() {
            return Err(StateError::ConfigMismatch {
                field: StateField::Rows,
            });
        }
        let steps = r.u64()?;
        let nonfinite = r.u64()?;
        let slots = usize::try_from(r.u64()?).map_err(|_| StateError::Malformed)?;
        let dense = self.rows.index.is_dense();
        if dense && slots != self.rows.index.dense_rows() {
            return Err(StateError::ConfigMismatch {
                field: StateField::Rows,
            });
        }
        r.ensure(slots, self.lanes.slot_bytes() + if dense { 0 } else { 8 })?;
        // A grown dense range keeps its current rows (checked equal above).
        let mut index = match &self.rows.index {
            Slots::Dense { rows } => Slots::Dense { rows: *rows },
            Slots::Sparse { .. } => Slots::new(RowIndex::Sparse),
        };
        let mut lanes = self.lanes.empty();
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
            lanes.read_push(&mut r)?;
        }
        r.end()?;
        if steps > p.max_steps {
            return Err(StateError::Malformed);
        }
        self.rows = RowSlots { index, slots };
        self.lanes = lanes;
        self.steps = steps;
        self.nonfinite = nonfinite;
        Ok(())
    }

    /// [`SparseOptimizer::export_rows`](crate::SparseOptimizer::export_rows);
    /// `fingerprint` names what the rows' values mean.
    pub(crate) fn export_rows(
        &self,
        slots: &[u64],
        fingerprint: &[(StateField, u64)],
    ) -> Result<Vec<u8>, RowStateError> {
        self.rows.index.check_slots(slots)?;
        let mut w = Writer::default();
        row_move::write_header(&mut w, fingerprint, self.steps, slots.len());
        for &id in slots {
            match self.rows.index.get(id) {
                Some(s) => {
                    w.u8(1);
                    self.lanes.write(&mut w, s);
                }
                None => w.u8(0),
            }
        }
        Ok(w.finish(row_move::rows_tag(self.plumbing.kind)))
    }

    /// [`SparseOptimizer::import_rows`](crate::SparseOptimizer::import_rows).
    pub(crate) fn import_rows(
        &mut self,
        slots: &[u64],
        bytes: &[u8],
        fingerprint: &[(StateField, u64)],
    ) -> Result<(), RowStateError> {
        self.rows.index.check_slots(slots)?;
        let tag = row_move::rows_tag(self.plumbing.kind);
        let (mut r, steps) = row_move::open(bytes, tag, fingerprint, self.steps, slots.len())?;
        if steps > self.plumbing.max_steps {
            return Err(StateError::Malformed.into());
        }
        // Everything is read and checked (into staging lanes) first.
        let mut staged = self.lanes.empty();
        let mut from = Vec::with_capacity(slots.len());
        let mut count = 0;
        for _ in slots {
            if row_move::present(&mut r)? {
                from.push(Some(count));
                count += 1;
                staged.read_push(&mut r)?;
            } else {
                from.push(None);
            }
        }
        r.end()?;
        let created = slots
            .iter()
            .zip(&from)
            .filter(|&(&id, f)| f.is_some() && self.rows.index.get(id).is_none())
            .count();
        self.lanes
            .try_reserve(self.rows.slots + created, u64::MAX)
            .map_err(|_| RowStateError::OutOfMemory)?;
        for (&id, f) in slots.iter().zip(from) {
            match (f, self.rows.index.get(id)) {
                (Some(k), Some(s)) => self.lanes.copy_from(s, &staged, k),
                (Some(k), None) => {
                    let (s, _) = self.rows.slot(id);
                    self.lanes.resize(self.rows.slots);
                    self.lanes.copy_from(s, &staged, k);
                }
                (None, Some(s)) => self.lanes.reset(s),
                // No state here and none to take: stays without.
                (None, None) => {}
            }
        }
        self.steps = steps;
        Ok(())
    }

    /// [`SparseOptimizer::swap_remove_row`](crate::SparseOptimizer::swap_remove_row).
    pub(crate) fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        let last = self.rows.index.check_remove(slot)?;
        self.lanes.swap_remove(slot as usize, last as usize);
        self.rows.index.set_dense_rows(last);
        self.rows.slots = last as usize;
        Ok(row_move::moved(slot, last))
    }
}

/// The `SparseOptimizer` methods a baseline hands to its [`RowDriver`]
/// unchanged (inside `impl SparseOptimizer`): growing, single-row moves and
/// swap-removal. Expects the driver in `self.state` and the rows'
/// fingerprint from `self.fingerprint()`.
macro_rules! driver_methods {
    () => {
        fn grow_rows(&mut self, rows: u64) -> Result<(), crate::error::GrowError> {
            self.state.grow_rows(rows)
        }

        fn export_rows(
            &self,
            slots: &[u64],
        ) -> Result<alloc::vec::Vec<u8>, crate::error::RowStateError> {
            self.state.export_rows(slots, &self.fingerprint())
        }

        fn import_rows(
            &mut self,
            slots: &[u64],
            bytes: &[u8],
        ) -> Result<(), crate::error::RowStateError> {
            let fp = self.fingerprint();
            self.state.import_rows(slots, bytes, &fp)
        }

        fn swap_remove_row(
            &mut self,
            slot: u64,
        ) -> Result<Option<u64>, crate::error::RowStateError> {
            self.state.swap_remove_row(slot)
        }
    };
}
pub(crate) use driver_methods;

/// What moved Adam-family rows mean: the dimension and the averages.
pub(crate) fn adam_fingerprint(dim: usize, beta1: f32, beta2: f32) -> [(StateField, u64); 2] {
    let betas = (u64::from(beta1.to_bits()) << 32) | u64::from(beta2.to_bits());
    [(StateField::Dim, dim as u64), (StateField::Betas, betas)]
}
