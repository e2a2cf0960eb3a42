//! Per-row state stores: dense (a flat array by id) or sparse (a hashbrown
//! map from u64 id to a slot), and the compact row-scalar store.

use alloc::vec::Vec;
use core::hash::{BuildHasher, Hasher};
use core::mem::size_of;

use half::bf16;
use hashbrown::HashMap;

use crate::config::{RowIndex, ScalarStorage};
use crate::counter::{Counts, RowCounter};
use crate::error::{
    ConfigError, GrowError, RowStateError, RowStateUnsupported, StepError, try_filled, try_grow,
};
use crate::quant::{LogCode, bf16_stochastic};
use crate::row_move;

/// A fast, deterministic [`Hasher`] for `u64` row ids: the SplitMix64
/// finalizer of the id. Ids need no DoS-resistant hash (they are the
/// caller's keys, and a fixed hash keeps map layouts, hence exported state
/// and memory figures, reproducible); the finalizer spreads sequential and
/// strided ids over a map's buckets.
///
/// Public so that a caller's own id map (a shard store's `id → slot`) uses
/// the same hash as the optimizers' sparse indexes.
///
/// ```
/// use basis_core::IdBuildHasher;
/// use core::hash::BuildHasher;
/// let h = IdBuildHasher;
/// assert_eq!(h.hash_one(7u64), h.hash_one(7u64));
/// assert_ne!(h.hash_one(7u64), h.hash_one(8u64));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        crate::quant::mix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        // Not used for `u64` keys; FNV-1a keeps other key types working.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 ^= i;
    }
}

/// Builds [`IdHasher`]s (a `hashbrown`/`std` map's `S` parameter).
#[derive(Debug, Clone, Copy, Default)]
pub struct IdBuildHasher;

impl BuildHasher for IdBuildHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// Exact bytes a hashbrown map holds (its one allocation).
pub(crate) fn map_bytes(map: &HashMap<u64, u32, IdBuildHasher>) -> usize {
    map.allocation_size()
}

/// Id → slot.
#[derive(Debug, Clone)]
pub(crate) enum Slots {
    Dense {
        rows: u64,
    },
    Sparse {
        map: HashMap<u64, u32, IdBuildHasher>,
    },
}

impl Slots {
    /// Fails unless every slot of a row blob is distinct and, for a dense
    /// index, in range ([`crate::row_move`]).
    pub(crate) fn check_slots(&self, slots: &[u64]) -> Result<(), RowStateError> {
        if self.is_dense() {
            let rows = self.dense_rows() as u64;
            if let Some(&slot) = slots.iter().find(|&&s| s >= rows) {
                return Err(RowStateError::SlotOutOfRange { slot, rows });
            }
        }
        row_move::check_distinct(slots)
    }

    /// Checks a dense swap-remove of `slot` and returns the last slot.
    pub(crate) fn check_remove(&self, slot: u64) -> Result<u64, RowStateError> {
        if !self.is_dense() {
            return Err(RowStateError::Unsupported(RowStateUnsupported::SparseIndex));
        }
        let rows = self.dense_rows() as u64;
        if slot >= rows {
            return Err(RowStateError::SlotOutOfRange { slot, rows });
        }
        Ok(rows - 1)
    }

    pub(crate) fn new(index: RowIndex) -> Self {
        match index {
            RowIndex::Dense { rows } => Self::Dense { rows },
            RowIndex::Sparse => Self::Sparse {
                map: HashMap::with_hasher(IdBuildHasher),
            },
        }
    }

    /// Dense: the id must be in range. Sparse: always fine.
    pub(crate) fn check(&self, id: u64) -> Result<(), StepError> {
        match self {
            Self::Dense { rows } if id >= *rows => Err(StepError::IdOutOfRange { id, rows: *rows }),
            _ => Ok(()),
        }
    }

    /// The slot of `id` if it has one.
    pub(crate) fn get(&self, id: u64) -> Option<usize> {
        match self {
            Self::Dense { rows } => (id < *rows).then_some(id as usize),
            Self::Sparse { map } => map.get(&id).map(|&s| s as usize),
        }
    }

    /// The slot of `id`, creating slot `next` (sparse) on first sight.
    /// Returns `(slot, created)`.
    pub(crate) fn get_or_insert(&mut self, id: u64, next: usize) -> (usize, bool) {
        match self {
            Self::Dense { .. } => (id as usize, false),
            Self::Sparse { map } => {
                let mut created = false;
                let slot = *map.entry(id).or_insert_with(|| {
                    created = true;
                    next as u32
                });
                (slot as usize, created)
            }
        }
    }

    /// Number of slots a dense store preallocates (0 when sparse).
    pub(crate) fn dense_rows(&self) -> usize {
        match self {
            Self::Dense { rows } => *rows as usize,
            Self::Sparse { .. } => 0,
        }
    }

    /// A dense index grows to `rows` (the caller grows the arrays first).
    pub(crate) fn check_grow(&self, rows: u64) -> Result<usize, GrowError> {
        match self {
            Self::Sparse { .. } => Err(GrowError::NotDense),
            Self::Dense { rows: current } if rows < *current => Err(GrowError::Shrink {
                rows,
                current: *current,
            }),
            Self::Dense { .. } => {
                usize::try_from(rows).map_err(|_| GrowError::OutOfMemory { rows })
            }
        }
    }

    /// Sets a dense index's rows (after [`check_grow`](Self::check_grow)).
    pub(crate) fn set_dense_rows(&mut self, rows: u64) {
        if let Self::Dense { rows: r } = self {
            *r = rows;
        }
    }

    pub(crate) fn is_dense(&self) -> bool {
        matches!(self, Self::Dense { .. })
    }

    /// Bytes of the index itself.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Self::Dense { .. } => 0,
            Self::Sparse { map } => map_bytes(map),
        }
    }

    /// `(id, slot)` pairs sorted by id (sparse), or `None` (dense).
    pub(crate) fn sorted_pairs(&self) -> Option<Vec<(u64, u32)>> {
        match self {
            Self::Dense { .. } => None,
            Self::Sparse { map } => {
                let mut v: Vec<(u64, u32)> = map.iter().map(|(&k, &s)| (k, s)).collect();
                v.sort_unstable();
                Some(v)
            }
        }
    }

    /// Every id with a slot, with its slot, in id order.
    pub(crate) fn for_each_id(&self, mut f: impl FnMut(u64, usize)) {
        match self {
            Self::Dense { rows } => (0..*rows).for_each(|id| f(id, id as usize)),
            Self::Sparse { .. } => {
                if let Some(pairs) = self.sorted_pairs() {
                    for (id, slot) in pairs {
                        f(id, slot as usize);
                    }
                }
            }
        }
    }
}

/// Compact values, one per slot.
#[derive(Debug, Clone)]
pub(crate) enum Codes {
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
    LogU8(Vec<u8>, LogCode),
}

/// The per-row scalar store (BASIS `s_i` or `G_i`, AdaGrad `G_i`), with an
/// optional per-row saturating update counter.
#[derive(Debug, Clone)]
pub(crate) struct ScalarStore {
    pub(crate) index: Slots,
    pub(crate) codes: Codes,
    pub(crate) counts: Option<Counts>,
    /// The value of a row never written.
    pub(crate) initial: f32,
    len: usize,
}

impl ScalarStore {
    /// `code` is the 1-byte code used with [`ScalarStorage::LogU8`].
    pub(crate) fn new(
        index: RowIndex,
        storage: ScalarStorage,
        initial: f32,
        code: LogCode,
        counter: Option<RowCounter>,
    ) -> Result<Self, ConfigError> {
        let rows = match index {
            RowIndex::Dense { rows } => rows,
            RowIndex::Sparse => 0,
        };
        let codes = match storage {
            ScalarStorage::F32 => Codes::F32(try_filled(rows, 1, initial)?),
            ScalarStorage::Bf16 => Codes::Bf16(try_filled(rows, 1, bf16::from_f32(initial))?),
            ScalarStorage::LogU8 => Codes::LogU8(try_filled(rows, 1, 0u8)?, code),
        };
        let counts = match counter {
            Some(kind) => Some(Counts::new(kind, rows)?),
            None => None,
        };
        let index = Slots::new(index);
        // The allocations above succeeded, so `rows` fits a usize.
        let n = index.dense_rows();
        Ok(Self {
            index,
            codes,
            counts,
            initial,
            len: n,
        })
    }

    /// Slots in use.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn value_at(&self, slot: usize) -> f32 {
        match &self.codes {
            Codes::F32(v) => v[slot],
            Codes::Bf16(v) => v[slot].to_f32(),
            Codes::LogU8(v, code) => code.decode(v[slot]),
        }
    }

    /// `(value, update count)` of `id` (initial value and 0 when unseen).
    pub(crate) fn get(&self, id: u64) -> (f32, u16) {
        match self.index.get(id) {
            Some(slot) => (
                self.value_at(slot),
                self.counts.as_ref().map_or(0, |c| c.get(slot)),
            ),
            None => (self.initial, 0),
        }
    }

    /// Grows a dense store to `rows` slots of the initial value.
    pub(crate) fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        let n = self.index.check_grow(rows)?;
        match &mut self.codes {
            Codes::F32(v) => try_grow(v, n, self.initial, rows)?,
            Codes::Bf16(v) => try_grow(v, n, bf16::from_f32(self.initial), rows)?,
            Codes::LogU8(v, _) => try_grow(v, n, 0, rows)?,
        }
        if let Some(c) = &mut self.counts {
            c.grow(n, rows)?;
        }
        self.index.set_dense_rows(rows);
        self.len = n;
        Ok(())
    }

    /// Whether [`set`](Self::set) reads its random bits (compact formats round
    /// stochastically; f32 stores exactly).
    pub(crate) fn rounds(&self) -> bool {
        !matches!(self.codes, Codes::F32(_))
    }

    /// Whether [`set`](Self::set) reads its counter bits (a compact counter
    /// rounds stochastically; the exact one stores the count).
    pub(crate) fn counter_rounds(&self) -> bool {
        self.counts.as_ref().is_some_and(Counts::rounds)
    }

    /// Stores `value` (rounded with `bits` when compact) and `count`
    /// (rounded with `count_bits` when the counter is compact) for `id`.
    pub(crate) fn set(&mut self, id: u64, value: f32, count: u16, bits: u64, count_bits: u64) {
        let (slot, created) = self.index.get_or_insert(id, self.len);
        if created {
            self.len += 1;
            match &mut self.codes {
                Codes::F32(v) => v.push(self.initial),
                Codes::Bf16(v) => v.push(bf16::from_f32(self.initial)),
                Codes::LogU8(v, _) => v.push(0),
            }
            if let Some(c) = &mut self.counts {
                c.push_zero();
            }
        }
        match &mut self.codes {
            Codes::F32(v) => v[slot] = value,
            Codes::Bf16(v) => v[slot] = bf16_stochastic(value, bits),
            Codes::LogU8(v, code) => v[slot] = code.encode(value, bits),
        }
        if let Some(c) = &mut self.counts {
            c.store(slot, count, count_bits);
        }
    }

    /// Bytes of the stored values (capacity): per-row state.
    pub(crate) fn value_bytes(&self) -> usize {
        match &self.codes {
            Codes::F32(v) => v.capacity() * size_of::<f32>(),
            Codes::Bf16(v) => v.capacity() * size_of::<bf16>(),
            Codes::LogU8(v, _) => v.capacity(),
        }
    }

    /// Heap bytes of a 1-byte code's own decode table (0 with the shared
    /// `static` tables): fixed, not per row.
    pub(crate) fn code_bytes(&self) -> usize {
        match &self.codes {
            Codes::LogU8(_, code) => code.owned_bytes(),
            _ => 0,
        }
    }

    /// Bytes of the update counters.
    pub(crate) fn count_bytes(&self) -> usize {
        self.counts.as_ref().map_or(0, Counts::bytes)
    }

    /// Calls `f(id, value)` for every row with a slot, in id order.
    pub(crate) fn for_each(&self, mut f: impl FnMut(u64, f32)) {
        self.index
            .for_each_id(|id, slot| f(id, self.value_at(slot)));
    }
}

impl ScalarStore {
    fn write_slot(&self, w: &mut crate::state::Writer, slot: usize) {
        match &self.codes {
            Codes::F32(v) => w.f32(v[slot]),
            Codes::Bf16(v) => w.u16(v[slot].to_bits()),
            Codes::LogU8(v, _) => w.u8(v[slot]),
        }
        if let Some(c) = &self.counts {
            c.write(w, slot);
        }
    }

    /// Serializes every slot (sparse: `(id, value)` pairs in id order).
    pub(crate) fn write(&self, w: &mut crate::state::Writer) {
        w.u64(self.len as u64);
        match self.index.sorted_pairs() {
            None => (0..self.len).for_each(|slot| self.write_slot(w, slot)),
            Some(pairs) => {
                for (id, slot) in pairs {
                    w.u64(id);
                    self.write_slot(w, slot as usize);
                }
            }
        }
    }

    /// Reads a store shaped like `self` (same index kind, storage, counters).
    pub(crate) fn read(
        &self,
        r: &mut crate::state::Reader<'_>,
    ) -> Result<Self, crate::error::StateError> {
        use crate::error::StateError;
        let n = usize::try_from(r.u64()?).map_err(|_| StateError::Malformed)?;
        let value_size = match &self.codes {
            Codes::F32(_) => 4,
            Codes::Bf16(_) => 2,
            Codes::LogU8(..) => 1,
        } + self.counts.as_ref().map_or(0, Counts::blob_bytes);
        let dense = self.index.is_dense();
        if dense && n != self.index.dense_rows() {
            return Err(StateError::ConfigMismatch {
                field: crate::error::StateField::Rows,
            });
        }
        r.ensure(n, value_size + if dense { 0 } else { 8 })?;
        let mut out = Self {
            index: match &self.index {
                Slots::Dense { rows } => Slots::Dense { rows: *rows },
                Slots::Sparse { .. } => {
                    let mut map = HashMap::with_hasher(IdBuildHasher);
                    map.reserve(n);
                    Slots::Sparse { map }
                }
            },
            codes: match &self.codes {
                Codes::F32(_) => Codes::F32(Vec::with_capacity(n)),
                Codes::Bf16(_) => Codes::Bf16(Vec::with_capacity(n)),
                Codes::LogU8(_, code) => Codes::LogU8(Vec::with_capacity(n), code.clone()),
            },
            counts: self.counts.as_ref().map(|c| c.empty_like(n)),
            initial: self.initial,
            len: n,
        };
        let mut last: Option<u64> = None;
        for slot in 0..n {
            if let Slots::Sparse { map } = &mut out.index {
                let id = r.u64()?;
                if last.is_some_and(|l| l >= id) {
                    return Err(StateError::Malformed);
                }
                last = Some(id);
                map.insert(id, slot as u32);
            }
            match &mut out.codes {
                Codes::F32(v) => v.push(r.f32()?),
                Codes::Bf16(v) => {
                    let x = bf16::from_bits(r.u16()?);
                    if !x.is_finite() {
                        return Err(StateError::Malformed);
                    }
                    v.push(x);
                }
                Codes::LogU8(v, _) => v.push(r.u8()?),
            }
            if let Some(c) = &mut out.counts {
                let raw = c.read(r)?;
                c.push_zero();
                c.set_raw(slot, raw);
            }
        }
        Ok(out)
    }
}

/// One row's stored scalar as read from a row blob: the raw code (f32 or
/// bf16 bits, or the 1-byte code) and its update count (a compact
/// counter's level).
pub(crate) type RawScalar = (u32, u16);

impl ScalarStore {
    /// Reads the rows of a row blob for `slots` (AdaGrad, BASIS), then
    /// checks the blob is used up; nothing changes here.
    pub(crate) fn read_rows(
        &self,
        mut r: crate::state::Reader<'_>,
        slots: &[u64],
    ) -> Result<Vec<(u64, Option<RawScalar>)>, RowStateError> {
        let rows = slots
            .iter()
            .map(|&id| Ok((id, self.read_row(&mut r)?)))
            .collect::<Result<Vec<_>, crate::error::StateError>>()?;
        r.end()?;
        Ok(rows)
    }

    /// Puts rows read by [`Self::read_rows`] into the store (reserving
    /// first: on error nothing changed).
    pub(crate) fn put_rows(
        &mut self,
        rows: Vec<(u64, Option<RawScalar>)>,
    ) -> Result<(), RowStateError> {
        let extra = self.new_slots(&rows);
        self.try_reserve(extra)
            .map_err(|()| RowStateError::OutOfMemory)?;
        rows.into_iter().for_each(|(id, row)| self.put_row(id, row));
        Ok(())
    }

    /// Appends `id`'s state to a row blob ([`crate::row_move`]): presence,
    /// then its value (and count) in the layout of [`Self::write`].
    pub(crate) fn write_row(&self, w: &mut crate::state::Writer, id: u64) {
        match self.index.get(id) {
            Some(slot) => {
                w.u8(1);
                self.write_slot(w, slot);
            }
            None => w.u8(0),
        }
    }

    /// Reads one row written by [`Self::write_row`] (`None`: no state).
    pub(crate) fn read_row(
        &self,
        r: &mut crate::state::Reader<'_>,
    ) -> Result<Option<RawScalar>, crate::error::StateError> {
        use crate::error::StateError;
        if !row_move::present(r)? {
            return Ok(None);
        }
        let raw = match &self.codes {
            Codes::F32(_) => r.f32()?.to_bits(),
            Codes::Bf16(_) => {
                let bits = r.u16()?;
                if !bf16::from_bits(bits).is_finite() {
                    return Err(StateError::Malformed);
                }
                u32::from(bits)
            }
            Codes::LogU8(..) => u32::from(r.u8()?),
        };
        let count = match &self.counts {
            Some(c) => c.read(r)?,
            None => 0,
        };
        Ok(Some((raw, count)))
    }

    /// Extra slots [`Self::put_row`] will create for `rows` (to reserve first).
    pub(crate) fn new_slots(&self, rows: &[(u64, Option<RawScalar>)]) -> usize {
        rows.iter()
            .filter(|(id, row)| row.is_some() && self.index.get(*id).is_none())
            .count()
    }

    /// Reserves room for `extra` more slots, fallibly.
    pub(crate) fn try_reserve(&mut self, extra: usize) -> Result<(), ()> {
        match &mut self.codes {
            Codes::F32(v) => v.try_reserve(extra).map_err(|_| ())?,
            Codes::Bf16(v) => v.try_reserve(extra).map_err(|_| ())?,
            Codes::LogU8(v, _) => v.try_reserve(extra).map_err(|_| ())?,
        }
        if let Some(c) = &mut self.counts {
            c.try_reserve(extra)?;
        }
        Ok(())
    }

    /// Gives `id` the state `row` read by [`Self::read_row`]: its exact
    /// code and count; `None` resets a row with a slot to the initial value
    /// (a row without one stays without).
    pub(crate) fn put_row(&mut self, id: u64, row: Option<RawScalar>) {
        let slot = match (row, self.index.get(id)) {
            (None, None) => return,
            (_, Some(slot)) => slot,
            (Some(_), None) => {
                // Creates the slot with the initial value.
                let (slot, _) = self.index.get_or_insert(id, self.len);
                self.len += 1;
                match &mut self.codes {
                    Codes::F32(v) => v.push(self.initial),
                    Codes::Bf16(v) => v.push(bf16::from_f32(self.initial)),
                    Codes::LogU8(v, _) => v.push(0),
                }
                if let Some(c) = &mut self.counts {
                    c.push_zero();
                }
                slot
            }
        };
        let (raw, count) = row.unwrap_or(match &self.codes {
            Codes::F32(_) => (self.initial.to_bits(), 0),
            Codes::Bf16(_) => (u32::from(bf16::from_f32(self.initial).to_bits()), 0),
            Codes::LogU8(..) => (0, 0),
        });
        match &mut self.codes {
            Codes::F32(v) => v[slot] = f32::from_bits(raw),
            // Read from 16 (8) bits: the casts are exact.
            Codes::Bf16(v) => v[slot] = bf16::from_bits(raw as u16),
            Codes::LogU8(v, _) => v[slot] = raw as u8,
        }
        if let Some(c) = &mut self.counts {
            c.set_raw(slot, count);
        }
    }

    /// A dense store's swap-removal (see
    /// [`SparseOptimizer::swap_remove_row`](crate::SparseOptimizer::swap_remove_row)).
    pub(crate) fn swap_remove(
        &mut self,
        slot: u64,
    ) -> Result<Option<u64>, crate::error::RowStateError> {
        use crate::row_move::{moved, swap_remove_slot};
        let last = self.index.check_remove(slot)?;
        let (s, l) = (slot as usize, last as usize);
        match &mut self.codes {
            Codes::F32(v) => swap_remove_slot(v, 1, s, l),
            Codes::Bf16(v) => swap_remove_slot(v, 1, s, l),
            Codes::LogU8(v, _) => swap_remove_slot(v, 1, s, l),
        }
        if let Some(c) = &mut self.counts {
            c.swap_remove(s, l);
        }
        self.index.set_dense_rows(last);
        self.len = l;
        Ok(moved(slot, last))
    }
}
