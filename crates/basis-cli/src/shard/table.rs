//! The sparse-id table store of one shard: the table owns the only
//! `u64 id → slot` map; the rows and every optimizer's per-row state are
//! dense arrays parallel to the slots (the optimizer is built with a growable
//! `RowIndex::Dense`, stores by slot and hashes by global id through
//! `step_keyed`). So the index is paid once
//! per row, not once per optimizer, and it is reported apart from the state.

use crate::optim::Optimizer;
use crate::rng::Rng;
use basis_core::{IdBuildHasher, RowAccess};
use hashbrown::HashMap;

/// One shard's rows: id → slot and `slots × dim` values (no slot → id:
/// the rare id-order walks iterate the map).
#[derive(Debug)]
pub(crate) struct ShardTable {
    dim: usize,
    init_std: f32,
    seed: u64,
    slots: HashMap<u64, u32, IdBuildHasher>,
    rows: Vec<f32>,
}

/// Why a shard could not take new rows.
pub(crate) fn out_of_memory(rows: usize) -> String {
    format!("out of memory growing the shard to {rows} rows")
}

impl ShardTable {
    /// An empty shard of `dim`-value rows; a new row `id` starts as
    /// `[0, N(0, init_std²) …]` drawn from `(seed, id)` alone, so its value
    /// does not depend on which rank owns it or when it was first seen: the
    /// values `Fm::new` gives row `id` (its stream, skipped to the row).
    pub(crate) fn new(dim: usize, init_std: f32, seed: u64) -> Self {
        Self {
            dim,
            init_std,
            seed,
            slots: HashMap::with_hasher(IdBuildHasher),
            rows: Vec::new(),
        }
    }

    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The slot of every id in `ids`, creating the missing ones in the
    /// order given (so slot numbers are a function of the id sequence) and
    /// growing `opt`'s dense state with them. Fallible allocation: on error
    /// the table is unchanged except for reserved capacity.
    pub(crate) fn slots_for(
        &mut self,
        ids: &[u64],
        opt: &mut Optimizer,
    ) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        out.try_reserve_exact(ids.len())
            .map_err(|_| out_of_memory(self.len() + ids.len()))?;
        let want = self.len() + ids.len();
        self.slots
            .try_reserve(ids.len())
            .map_err(|_| out_of_memory(want))?;
        self.rows
            .try_reserve(ids.len() * self.dim)
            .map_err(|_| out_of_memory(want))?;
        let before = self.len();
        for &id in ids {
            let next = self.slots.len();
            let slot = *self.slots.entry(id).or_insert_with(|| next as u32);
            if slot as usize == next {
                let (dim, std, seed) = (self.dim, self.init_std, self.seed);
                push_init_row(&mut self.rows, dim, std, seed, id);
            }
            out.push(slot);
        }
        if self.len() > before {
            opt.grow_rows(self.len() as u64)?;
        }
        Ok(out)
    }

    /// The rows of `ids` appended to `out`, read only: a held row, or the
    /// row an unseen id would start as (as the single-process model holds
    /// every row from its start), without inserting it — evaluating unseen
    /// ids must not grow the shard.
    pub(crate) fn lookup(&self, ids: &[u64], out: &mut Vec<f32>) -> Result<(), String> {
        out.try_reserve_exact(ids.len() * self.dim)
            .map_err(|_| out_of_memory(ids.len()))?;
        for id in ids {
            match self.slots.get(id) {
                Some(&s) => out.extend_from_slice(self.row(s)),
                None => push_init_row(out, self.dim, self.init_std, self.seed, *id),
            }
        }
        Ok(())
    }

    /// The id of every slot (slot order) and the rows (slot order): what a
    /// checkpoint stores; [`from_parts`](Self::from_parts) rebuilds the
    /// same slots.
    pub(crate) fn parts(&self) -> (Vec<u64>, &[f32]) {
        let mut ids = vec![0u64; self.len()];
        for (&id, &s) in &self.slots {
            ids[s as usize] = id;
        }
        (ids, &self.rows)
    }

    /// A shard holding `rows` (slot order) for `ids` (slot order), as
    /// [`parts`](Self::parts) gave them.
    ///
    /// Fails on a length that is not `ids.len() × dim` or a repeated id.
    pub(crate) fn from_parts(
        dim: usize,
        init_std: f32,
        seed: u64,
        ids: &[u64],
        rows: Vec<f32>,
    ) -> Result<Self, String> {
        if rows.len() != ids.len() * dim {
            return Err(format!(
                "{} row values for {} ids of {dim}",
                rows.len(),
                ids.len()
            ));
        }
        let mut t = Self::new(dim, init_std, seed);
        t.slots
            .try_reserve(ids.len())
            .map_err(|_| out_of_memory(ids.len()))?;
        for (s, &id) in ids.iter().enumerate() {
            if t.slots.insert(id, s as u32).is_some() {
                return Err(format!("id {id} appears twice"));
            }
        }
        t.rows = rows;
        Ok(t)
    }

    /// Row of `slot`.
    pub(crate) fn row(&self, slot: u32) -> &[f32] {
        let s = slot as usize * self.dim;
        &self.rows[s..s + self.dim]
    }

    /// Exact bytes of the id index (the map's one allocation).
    pub(crate) fn index_bytes(&self) -> usize {
        self.slots.allocation_size()
    }

    /// `(id, row)` of every row, in id order.
    pub(crate) fn sorted(&self) -> Vec<(u64, &[f32])> {
        let mut v: Vec<(u64, &[f32])> = self
            .slots
            .iter()
            .map(|(&id, &s)| (id, self.row(s)))
            .collect();
        v.sort_unstable_by_key(|p| p.0);
        v
    }

    /// CRC-32 of the rows in id order (ids and values), for bit-identity checks.
    pub(crate) fn crc(&self) -> u32 {
        let mut h = crc32fast::Hasher::new();
        for (id, row) in self.sorted() {
            h.update(&id.to_le_bytes());
            for x in row {
                h.update(&x.to_le_bytes());
            }
        }
        h.finalize()
    }
}

/// Append row `id`'s initial value `[0, N(0, std²) …]`, drawn from
/// `(seed, id)` alone: Box–Muller draws two numbers per value (see `Fm::new`).
fn push_init_row(out: &mut Vec<f32>, dim: usize, std: f32, seed: u64, id: u64) {
    let mut rng = Rng::derive(seed, 0x1417);
    rng.skip(id.wrapping_mul(2 * (dim as u64 - 1)));
    out.push(0.0);
    for _ in 1..dim {
        out.push(std * rng.normal() as f32);
    }
}

impl RowAccess for ShardTable {
    fn dim(&self) -> usize {
        self.dim
    }

    /// Row of slot `id` (the optimizer steps by slot).
    fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
        let s = usize::try_from(id).ok()?.checked_mul(self.dim)?;
        self.rows.get_mut(s..s.checked_add(self.dim)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::mix64;
    use crate::spec::OptSpec;
    use alloc::collections::BTreeMap;
    use basis_core::RowIndex;

    /// The obviously correct reference: a `BTreeMap` table by id and the
    /// same optimizer with its own sparse id index, stepped by id.
    struct Reference {
        rows: BTreeMap<u64, Vec<f32>>,
        dim: usize,
    }

    impl RowAccess for Reference {
        fn dim(&self) -> usize {
            self.dim
        }
        fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
            self.rows.get_mut(&id).map(Vec::as_mut_slice)
        }
    }

    #[test]
    fn stepping_through_slots_equals_stepping_by_id() {
        let dim = 5;
        // BASIS hashes the id it is given: the shard's keyed step must give
        // it the global id, not the slot, to match stepping by id.
        for spec in [
            "adam",
            "adagrad",
            "sgd",
            "basis",
            "basis:mode=rowscaled",
            "basis:storage=u8,choices=2",
        ] {
            let spec: OptSpec = spec.parse().unwrap();
            let mut opt =
                crate::optim::build_indexed(&spec, 100, RowIndex::Dense { rows: 0 }, dim, 3)
                    .unwrap();
            let mut reference =
                crate::optim::build_indexed(&spec, 100, RowIndex::Sparse, dim, 3).unwrap();
            let mut table = ShardTable::new(dim, 0.1, 9);
            let mut by_id = Reference {
                rows: BTreeMap::new(),
                dim,
            };
            let mut rng = Rng::new(5);
            for step in 0..40 {
                // Ids from a huge space, with repeats and duplicates in a batch.
                let ids: Vec<u64> = (0..12)
                    .map(|_| mix64(rng.below(30 + step) as u64) >> 3)
                    .collect();
                let grads: Vec<f32> = (0..ids.len() * dim)
                    .map(|_| rng.normal() as f32 * 0.1)
                    .collect();
                let slots = table.slots_for(&ids, &mut opt).unwrap();
                for (&id, &slot) in ids.iter().zip(&slots) {
                    by_id
                        .rows
                        .entry(id)
                        .or_insert_with(|| table.row(slot).to_vec());
                }
                let slot_ids: Vec<u64> = slots.iter().map(|&s| u64::from(s)).collect();
                opt.step_rows_keyed(&ids, &slot_ids, &grads, &mut table)
                    .unwrap();
                // Keys == ids: stepping by id (basis-core tests/keyed.rs).
                reference
                    .step_rows_keyed(&ids, &ids, &grads, &mut by_id)
                    .unwrap();
            }
            assert_eq!(table.len(), by_id.rows.len());
            for (id, row) in table.sorted() {
                assert_eq!(row, by_id.rows[&id].as_slice(), "{} row {id}", spec.label);
            }
            let (state, index) = (opt.memory(), table.index_bytes());
            assert_eq!(state.row_index, 0, "no id map inside the optimizer");
            // hashbrown: 16-byte (id, slot) entries + 1 control byte each.
            assert!(
                index >= table.len() * 17,
                "{index} for {} rows",
                table.len()
            );
        }
    }

    #[test]
    fn parts_rebuild_the_same_slots() {
        let spec: OptSpec = "sgd".parse().unwrap();
        let mut opt =
            crate::optim::build_indexed(&spec, 1, RowIndex::Dense { rows: 0 }, 3, 1).unwrap();
        let mut a = ShardTable::new(3, 0.1, 7);
        a.slots_for(&[50, 3, u64::MAX, 3], &mut opt).unwrap();
        let (ids, rows) = a.parts();
        assert_eq!(ids, vec![50, 3, u64::MAX]);
        let b = ShardTable::from_parts(3, 0.1, 7, &ids, rows.to_vec()).unwrap();
        assert_eq!(b.crc(), a.crc());
        assert_eq!(b.slots, a.slots);
        assert!(ShardTable::from_parts(3, 0.1, 7, &[1, 1], vec![0.0; 6]).is_err());
        assert!(ShardTable::from_parts(3, 0.1, 7, &[1], vec![0.0; 2]).is_err());
    }

    #[test]
    fn rows_start_as_the_single_process_model_does() {
        let spec: OptSpec = "sgd".parse().unwrap();
        let mut opt =
            crate::optim::build_indexed(&spec, 1, RowIndex::Dense { rows: 0 }, 5, 1).unwrap();
        let fm = crate::model::Fm::new(50, 4, 0.1, 3).unwrap();
        let mut t = ShardTable::new(5, 0.1, 3);
        let ids = [49u64, 0, 17];
        let slots = t.slots_for(&ids, &mut opt).unwrap();
        for (&id, &s) in ids.iter().zip(&slots) {
            assert_eq!(t.row(s), &fm.table[id as usize * 5..(id as usize + 1) * 5]);
        }
    }

    #[test]
    fn lookup_reads_held_and_unseen_rows_without_inserting() {
        let spec: OptSpec = "sgd".parse().unwrap();
        let mut opt =
            crate::optim::build_indexed(&spec, 1, RowIndex::Dense { rows: 0 }, 4, 1).unwrap();
        let mut t = ShardTable::new(4, 0.1, 7);
        let s = t.slots_for(&[8], &mut opt).unwrap();
        t.row_mut(u64::from(s[0])).unwrap()[1] = 42.0;
        let mut got = Vec::new();
        t.lookup(&[8, 3, 8], &mut got).unwrap();
        assert_eq!(t.len(), 1, "lookup inserted a row");
        // The reference: a second table that does insert id 3.
        let mut fresh = ShardTable::new(4, 0.1, 7);
        let s3 = fresh.slots_for(&[3], &mut opt).unwrap();
        assert_eq!(&got[0..4], t.row(s[0]));
        assert_eq!(&got[4..8], fresh.row(s3[0]));
        assert_eq!(&got[8..12], t.row(s[0]));
    }

    #[test]
    fn row_init_depends_on_the_id_only() {
        let spec: OptSpec = "sgd".parse().unwrap();
        let mut opt =
            crate::optim::build_indexed(&spec, 1, RowIndex::Dense { rows: 0 }, 3, 1).unwrap();
        let (mut a, mut b) = (ShardTable::new(3, 0.1, 7), ShardTable::new(3, 0.1, 7));
        let sa = a.slots_for(&[5, 9, 5], &mut opt).unwrap();
        let sb = b.slots_for(&[9, 1, 5], &mut opt).unwrap();
        assert_eq!(sa, vec![0, 1, 0]);
        assert_eq!(a.row(sa[0]), b.row(sb[2]));
        assert_eq!(a.row(sa[1]), b.row(sb[0]));
        assert_ne!(a.row(sa[0]), a.row(sa[1]));
    }
}
