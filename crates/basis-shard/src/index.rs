//! The shard's `u64 id → u32 slot` index, behind one small type so the
//! table does not depend on the index's layout: [`IdSlots`] is all the
//! table uses. Two layouts, chosen by [`IndexKind`] in the table's
//! configuration:
//!
//! - [`IndexKind::Fast`] (the default): a `hashbrown::HashMap<u64, u32>`,
//!   ≈ 21–36 B per row with its growth slack.
//! - [`IndexKind::Compact`]: basis-core's `SlotIndex` (two-choice buckets
//!   of bit-packed records under an extendible-hashing directory), ≈ 9–10 B
//!   per row including slack, growing one segment at a time (no 2×
//!   transient). Measured (`benches/step.rs`, 4.16·10^6 rows, BASIS): the
//!   process RSS drops from 167.6 to 145.0 B/row with f32 rows and from
//!   103.7 to 80.9 with bf16, but the table's step took 1.4–2.9× as long on
//!   a busy 2-core machine, and still ≈ 2.2× with tag bytes and a dense
//!   header array (a miss reads 8 tags at once; what remains is mostly
//!   segment growth, see `SlotIndex`'s module docs). Memory for speed: the
//!   user's choice; the default stays hashbrown until the step is as fast.
//!
//! Where the compact index's step loses (2026-12-05; busy
//! machine, load 9–16; details in docs/BENCHMARKS.md, "The compact index in
//! the table's step"):
//! - **Instructions** (callgrind, the step bench at `STEP_BENCH_ROWS=300000`,
//!   whole run: build then 200 timed steps): hashbrown 6.31·10^9, compact
//!   9.24·10^9 before, 8.43·10^9 after rebuilding segments in place (no
//!   list of the old entries, records written into zeroed buckets without
//!   a mask): insertions with their growth went from 2.61 to 1.78·10^9,
//!   batched lookups stay at 0.46·10^9 (hashbrown's 0.09).
//! - **Page faults**, with glibc's default allocator: 368 k against 91 k
//!   for the same run at 1.16·10^6 rows, almost all in the step's 1 MiB
//!   buffers (the answer's rows, `LocalComm`'s receive buffer, the bench's
//!   gradients), not in the index. glibc raises its mmap threshold when a
//!   large mapped block is freed: hashbrown's doublings free tens of MiB,
//!   so its step's buffers come from the heap; this index never frees more
//!   than one segment (≈ 140 KiB), so each step maps and faults its
//!   buffers in again. With the threshold pinned
//!   (`MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824`)
//!   the compact run takes 49.6 k faults against 60.6 k.
//!
//! Session 10 (2026-12-05, busy, load 8.6–14; docs/BENCHMARKS.md, "Session
//! 10"): the step's buffers are kept (`lookup_into`, `LocalComm`'s message
//! buffers): at 3·10^5 rows the compact run takes 48 k faults (was 260 k),
//! hashbrown 31 k (was 61 k). `SlotIndex` reads records as two `u64`
//! bit fields: whole run 7.96·10^9 instructions against hashbrown’s
//! 6.22·10^9 (1.28×; insertions with growth 1.51·10^9, lookups ≈ 192
//! instructions each against ≈ 47); paired whole-process wall time 1.18×.
//! Still short of the bar (≤ 1.05× in instructions), so `Fast` stays the
//! default: what remains is growth (≈ 9.7 re-insertions per new id) and
//! the lookup's decode.
//!
//! Session 20 (2026-12-07, busy; docs/BENCHMARKS.md, "Session 20"):
//! fuller segments (63/64, growth by 1/7), two-move cuckoo kicks, and tag
//! matches not masked by the count. The compact run is 7.23·10^9
//! instructions against hashbrown's 6.23 (1.16×) growing and 6.82 against
//! 6.05 (1.13×) with no new ids, at 9.32 / 9.65 B/row (hashbrown 38.42 /
//! 29.71). `Fast` stays the default; growth is still ≈ 1 800 instructions
//! per new id against ≈ 130, and a lookup ≈ 178 against ≈ 47.
//!
//! Both give the same slots for the same insertions (slots are numbered in
//! insertion order), so a table's results and checkpoints do not depend on
//! the kind (tested). The compact index grows inside an insertion, so every
//! insertion is fallible; its errors map to [`ShardError::OutOfMemory`] (an
//! allocation refused, every `u32` slot taken, or an id that finds no place
//! after its segment grew: ids chosen against the index's hash), and the
//! index is unchanged after any of them.

use basis_core::{IdBuildHasher, SlotIndex};
use hashbrown::HashMap;

use crate::ShardError;

/// The layout of a table's id → slot index (see the module docs of
/// `index.rs` for the measured trade-off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IndexKind {
    /// hashbrown's table: the faster step, ≈ 21–36 B per row (default).
    #[default]
    Fast,
    /// basis-core's `SlotIndex`: ≈ 9–10 B per row, a slower step.
    Compact,
}

/// Id → slot, slots numbered `0..len()` in insertion order.
#[derive(Debug, Clone)]
pub(crate) enum IdSlots {
    Fast(HashMap<u64, u32, IdBuildHasher>),
    Compact(SlotIndex),
}

impl IdSlots {
    /// An empty index of `kind`.
    pub(crate) fn new(kind: IndexKind) -> Self {
        match kind {
            IndexKind::Fast => Self::Fast(HashMap::with_hasher(IdBuildHasher)),
            IndexKind::Compact => Self::Compact(SlotIndex::default()),
        }
    }

    /// The layout.
    pub(crate) fn kind(&self) -> IndexKind {
        match self {
            Self::Fast(_) => IndexKind::Fast,
            Self::Compact(_) => IndexKind::Compact,
        }
    }

    /// Ids held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Fast(m) => m.len(),
            Self::Compact(i) => i.len(),
        }
    }

    /// The slot of `id`, if held.
    pub(crate) fn get(&self, id: u64) -> Option<u32> {
        match self {
            Self::Fast(m) => m.get(&id).copied(),
            Self::Compact(i) => i.get(id),
        }
    }

    /// Appends the slot of every id of `ids` to `out`, `u32::MAX` for an id
    /// not held (a slot is always below `u32::MAX`): one hash lookup per id,
    /// or `SlotIndex`'s batched lookup (hash a run of ids and load their
    /// buckets, then probe).
    pub(crate) fn get_many(&self, ids: &[u64], out: &mut alloc::vec::Vec<u32>) {
        match self {
            Self::Fast(m) => {
                out.extend(ids.iter().map(|id| m.get(id).copied().unwrap_or(u32::MAX)))
            }
            Self::Compact(i) => {
                let start = out.len();
                out.resize(start + ids.len(), u32::MAX);
                i.get_many_slots(ids, &mut out[start..]);
            }
        }
    }

    /// Room for `more` ids: reserved ahead (fast), or only the `u32` slot
    /// range checked (compact: it grows inside each insertion).
    pub(crate) fn try_reserve(&mut self, more: usize) -> Result<(), ShardError> {
        let rows = self.len().saturating_add(more);
        if rows >= u32::MAX as usize {
            return Err(ShardError::OutOfMemory { rows });
        }
        match self {
            Self::Fast(m) => m
                .try_reserve(more)
                .map_err(|_| ShardError::OutOfMemory { rows }),
            Self::Compact(_) => Ok(()),
        }
    }

    /// The slot of `id`, inserting it as slot `len()` when missing; `true`
    /// when it was inserted.
    ///
    /// # Errors
    /// [`ShardError::OutOfMemory`] from the compact index (see the module
    /// docs; the fast one has its room reserved by the caller); the index
    /// is unchanged.
    pub(crate) fn get_or_insert(&mut self, id: u64) -> Result<(u32, bool), ShardError> {
        let rows = self.len().saturating_add(1);
        match self {
            Self::Fast(m) => {
                let next = m.len() as u32;
                let slot = *m.entry(id).or_insert(next);
                Ok((slot, slot == next))
            }
            Self::Compact(i) => i
                .try_insert(id)
                .map_err(|_| ShardError::OutOfMemory { rows }),
        }
    }

    /// Inserts `id`, which the caller knows is not held (it has just
    /// looked it up and inserted nothing since), as slot `len()`: the
    /// compact index then skips its miss lookup (`try_insert_absent`).
    ///
    /// # Errors
    /// As [`get_or_insert`](Self::get_or_insert).
    pub(crate) fn insert_absent(&mut self, id: u64) -> Result<u32, ShardError> {
        let rows = self.len().saturating_add(1);
        match self {
            Self::Fast(m) => {
                let next = m.len() as u32;
                let slot = *m.entry(id).or_insert(next);
                debug_assert_eq!(slot, next, "insert_absent of a held id");
                Ok(slot)
            }
            Self::Compact(i) => i
                .try_insert_absent(id)
                .map_err(|_| ShardError::OutOfMemory { rows }),
        }
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
        let last = self.len();
        match self {
            Self::Fast(m) => match m.get(&id) {
                Some(&s) if s as usize + 1 == last => m.remove(&id).is_some(),
                _ => false,
            },
            Self::Compact(i) => match i.get(id) {
                Some(s) if s as usize + 1 == last => i.remove(id).is_some(),
                _ => false,
            },
        }
    }

    /// Calls `f(id, slot)` for every id held, in no particular order,
    /// allocating nothing (the order-independent checksum's pass).
    pub(crate) fn for_each(&self, mut f: impl FnMut(u64, u32)) {
        match self {
            Self::Fast(m) => m.iter().for_each(|(&id, &s)| f(id, s)),
            Self::Compact(i) => i.for_each_unordered(f),
        }
    }

    /// The id of every slot, in slot order.
    pub(crate) fn ids_by_slot(&self) -> alloc::vec::Vec<u64> {
        match self {
            Self::Fast(m) => {
                let mut ids = alloc::vec![0u64; m.len()];
                for (&id, &s) in m {
                    ids[s as usize] = id;
                }
                ids
            }
            Self::Compact(i) => i.iter().map(|(id, _)| id).collect(),
        }
    }

    /// Removes the ids of `slots` (distinct, decreasing) as successive
    /// swap-removes: each freed slot takes the then-last slot's id. `ids`
    /// is [`ids_by_slot`](Self::ids_by_slot), kept in step (so that the
    /// moved id is found by lookup, not by a scan).
    pub(crate) fn swap_remove_slots(&mut self, ids: &mut alloc::vec::Vec<u64>, slots: &[u32]) {
        for &e in slots {
            match self {
                Self::Fast(m) => {
                    let id = ids.swap_remove(e as usize);
                    m.remove(&id);
                    if let Some(moved) = ids.get(e as usize)
                        && let Some(s) = m.get_mut(moved)
                    {
                        *s = e;
                    }
                }
                Self::Compact(i) => {
                    let (Some(&id), Some(&last)) = (ids.get(e as usize), ids.last()) else {
                        continue;
                    };
                    let removed = i.remove_swap(id, last);
                    debug_assert!(removed.is_some(), "ids is the index's ids by slot");
                    ids.swap_remove(e as usize);
                }
            }
        }
    }

    /// Exact bytes of the index's allocation.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Self::Fast(m) => m.allocation_size(),
            Self::Compact(i) => i.memory_bytes(),
        }
    }
}
