//! The shard's `u64 id → u32 slot` index, behind one small type so another
//! index (a compact one) can replace hashbrown here without touching the
//! table: [`IdSlots`] is all the table uses. Why hashbrown stays for now:
//! basis-core's `SlotIndex` (two-choice buckets of bit-packed records)
//! takes 9.6 B/row against hashbrown's 30.6–34.3 and brings the process
//! RSS of `benches/step.rs` at 4.16·10^6 rows to 145.0 (f32) / 80.9 (bf16)
//! B/row, under the goals, but the table's step took 1.4–2.9× as
//! long with it (see `SlotIndex`'s module docs, "Measured"; the swap was
//! built, every table test green with it, and kept out for that).

use basis_core::IdBuildHasher;
use hashbrown::HashMap;

use crate::ShardError;

/// Id → slot, slots numbered `0..len()` in insertion order.
#[derive(Debug, Clone, Default)]
pub(crate) struct IdSlots {
    map: HashMap<u64, u32, IdBuildHasher>,
}

impl IdSlots {
    /// Ids held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The slot of `id`, if held.
    pub(crate) fn get(&self, id: u64) -> Option<u32> {
        self.map.get(&id).copied()
    }

    /// Appends the slot of every id of `ids` to `out`, `u32::MAX` for an id
    /// not held: one hash lookup per id (a step's batched lookup; a slot
    /// is always below `u32::MAX`).
    pub(crate) fn get_many(&self, ids: &[u64], out: &mut alloc::vec::Vec<u32>) {
        out.extend(
            ids.iter()
                .map(|id| self.map.get(id).copied().unwrap_or(u32::MAX)),
        );
    }

    /// Room for `more` ids without reallocating (fallible).
    pub(crate) fn try_reserve(&mut self, more: usize) -> Result<(), ShardError> {
        let rows = self.len().saturating_add(more);
        self.map
            .try_reserve(more)
            .map_err(|_| ShardError::OutOfMemory { rows })
    }

    /// The slot of `id`, inserting it as slot `len()` when missing; `true`
    /// when it was inserted. Slots must stay below `u32::MAX` (checked by
    /// the caller's reservation).
    pub(crate) fn get_or_insert(&mut self, id: u64) -> (u32, bool) {
        let next = self.map.len() as u32;
        let slot = *self.map.entry(id).or_insert(next);
        (slot, slot == next)
    }

    /// Insert `id` as the next slot; `false` when it was already held.
    pub(crate) fn insert_new(&mut self, id: u64) -> bool {
        let next = self.map.len() as u32;
        match self.map.entry(id) {
            hashbrown::hash_map::Entry::Occupied(_) => false,
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(next);
                true
            }
        }
    }

    /// The id of every slot, in slot order.
    pub(crate) fn ids_by_slot(&self) -> alloc::vec::Vec<u64> {
        let mut ids = alloc::vec![0u64; self.len()];
        for (&id, &s) in &self.map {
            ids[s as usize] = id;
        }
        ids
    }

    /// Removes the ids of `slots` (distinct, decreasing) as successive
    /// swap-removes: each freed slot takes the then-last slot's id. `ids`
    /// is [`ids_by_slot`](Self::ids_by_slot), kept in step.
    pub(crate) fn swap_remove_slots(&mut self, ids: &mut alloc::vec::Vec<u64>, slots: &[u32]) {
        for &e in slots {
            let id = ids.swap_remove(e as usize);
            self.map.remove(&id);
            if let Some(moved) = ids.get(e as usize)
                && let Some(s) = self.map.get_mut(moved)
            {
                *s = e;
            }
        }
    }

    /// Exact bytes of the index's allocation.
    pub(crate) fn bytes(&self) -> usize {
        self.map.allocation_size()
    }
}
