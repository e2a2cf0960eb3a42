//! The shard's `u64 id → u32 slot` index, behind one small type so that the
//! table does not depend on the index's layout: [`IdSlots`] is all the
//! table uses. It wraps `basis_core::SlotIndex` (two-choice buckets of
//! bit-packed records, ≈ 9–10 B per row including slack, against ≈ 21–36
//! for the `hashbrown::HashMap<u64, u32>` it replaced; layout, memory and
//! measurements in `SlotIndex`'s module docs).
//!
//! `SlotIndex` grows one segment at a time inside an insertion, so it
//! cannot reserve room ahead: every insertion is fallible, and
//! [`IdSlots::try_reserve`] only checks the slot count. Its errors map to
//! [`ShardError::OutOfMemory`]: an allocation refused, every `u32` slot
//! taken, or an id that finds no place after its segment grew
//! (`IndexError::Clustered`: ids chosen against the index's hash; the
//! table's capacity for that id is exhausted). The index is unchanged
//! after any of them.

use basis_core::{IndexError, SlotIndex};

use crate::ShardError;

/// Id → slot, slots numbered `0..len()` in insertion order.
#[derive(Debug, Clone, Default)]
pub(crate) struct IdSlots {
    index: SlotIndex,
}

impl IdSlots {
    /// Ids held.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot of `id`, if held.
    pub(crate) fn get(&self, id: u64) -> Option<u32> {
        self.index.get(id)
    }

    /// Appends the slot of every id of `ids` to `out`, `u32::MAX` for an id
    /// not held: `SlotIndex`'s batched lookup (hash a run of ids and load
    /// their buckets, then probe; a slot is always below `u32::MAX`).
    pub(crate) fn get_many(&self, ids: &[u64], out: &mut alloc::vec::Vec<u32>) {
        let start = out.len();
        out.resize(start + ids.len(), u32::MAX);
        self.index.get_many_slots(ids, &mut out[start..]);
    }

    /// Checks that `more` ids still get a `u32` slot below `u32::MAX`. The
    /// index itself grows inside each insertion (fallibly, a segment at a
    /// time): there is nothing to reserve ahead.
    pub(crate) fn try_reserve(&mut self, more: usize) -> Result<(), ShardError> {
        let rows = self.len().saturating_add(more);
        if rows >= u32::MAX as usize {
            return Err(ShardError::OutOfMemory { rows });
        }
        Ok(())
    }

    /// The slot of `id`, inserting it as slot `len()` when missing; `true`
    /// when it was inserted.
    ///
    /// # Errors
    /// [`ShardError::OutOfMemory`] (see the module docs); the index is
    /// unchanged.
    pub(crate) fn get_or_insert(&mut self, id: u64) -> Result<(u32, bool), ShardError> {
        self.index.try_insert(id).map_err(|e| self.error(e))
    }

    /// Insert `id` as the next slot; `false` when it was already held.
    ///
    /// # Errors
    /// As [`get_or_insert`](Self::get_or_insert).
    pub(crate) fn insert_new(&mut self, id: u64) -> Result<bool, ShardError> {
        Ok(self.get_or_insert(id)?.1)
    }

    /// Removes `id` when it holds the last slot (undoing an insertion);
    /// `false` (nothing changed) otherwise.
    pub(crate) fn remove_last(&mut self, id: u64) -> bool {
        match self.index.get(id) {
            Some(s) if s as usize + 1 == self.len() => self.index.remove(id).is_some(),
            _ => false,
        }
    }

    /// Every index error is the table running out of room for one more
    /// row (see the module docs).
    fn error(&self, _: IndexError) -> ShardError {
        ShardError::OutOfMemory {
            rows: self.len().saturating_add(1),
        }
    }

    /// The id of every slot, in slot order.
    pub(crate) fn ids_by_slot(&self) -> alloc::vec::Vec<u64> {
        self.index.iter().map(|(id, _)| id).collect()
    }

    /// Removes the ids of `slots` (distinct, decreasing) as successive
    /// swap-removes: each freed slot takes the then-last slot's id. `ids`
    /// is [`ids_by_slot`](Self::ids_by_slot), kept in step (so that the
    /// index finds the moved id by lookup, not by a scan).
    pub(crate) fn swap_remove_slots(&mut self, ids: &mut alloc::vec::Vec<u64>, slots: &[u32]) {
        for &e in slots {
            let (Some(&id), Some(&last)) = (ids.get(e as usize), ids.last()) else {
                continue;
            };
            let removed = self.index.remove_swap(id, last);
            debug_assert!(removed.is_some(), "ids is the index's ids by slot");
            ids.swap_remove(e as usize);
        }
    }

    /// Exact bytes of the index's allocation.
    pub(crate) fn bytes(&self) -> usize {
        self.index.memory_bytes()
    }
}
