//! [`SlotIndex`]: a compact `u64` id → `u32` slot index for tables of many
//! rows (≈ 14 B per id including its slack, against ≈ 19–39 B for a
//! `hashbrown::HashMap<u64, u32>`), with fallible growth and no 2× transient.
//!
//! # Layout
//! - **Keys by slot.** Slots are numbered densely `0..len` in insertion order
//!   (a removal moves the last slot into the hole, like `Vec::swap_remove`),
//!   and the index keeps each slot's id in fixed-size chunks of
//!   [`KEY_CHUNK`] ids: 8 B per id plus at most two chunks of slack, never a
//!   reallocation of the whole array.
//! - **Slots by hash.** The hash table stores only the 4-byte slot and a 1-byte
//!   probe distance per position (5 B), not the key: a candidate is confirmed
//!   against the keys by slot. Positions are Robin Hood linear probing
//!   (entries sorted by home position, so a lookup stops as soon as it passes
//!   the place its id would be, and a removal shifts the entries behind it
//!   back: no tombstones), filled up to 15/16.
//! - **Segments.** The table is a directory of segments (extendible hashing:
//!   the top bits of an id's hash pick the segment). A full segment is rebuilt
//!   alone, 4/3 as large (loads stay between 3/4 and 15/16), or split in two
//!   once it would exceed [`SEGMENT_MAX`] positions; growth never copies more
//!   than one segment (≤ 80 KiB) at a time, so memory grows without the 2×
//!   transient of a rehash of the whole table.
//!
//! # Measured (`cargo bench -p basisopt-core --bench slot_index`)
//! Bytes per id after growth: 13.91 at 10^6 ids (table 5.88 + keys 8.03),
//! 13.70 at 10^7 (5.69 + 8.01), against 35.65 and 28.52 for
//! `hashbrown::HashMap<u64, u32>` (deterministic: same in both runs).
//! Speed is the price today: in interleaved medians (2 runs, a shared
//! 2-core machine at load 7–13) a lookup hit costs 3.7–4.0× hashbrown's
//! at 10^6 ids and 6.2–7.3× at 10^7, a miss 4.8–7.6×, building 10^6 ids
//! 5.8–6.3× (segment rebuilds re-read each id's key). perf puts the time on
//! the three dependent loads of a probe (distance byte, slot, key by slot);
//! a fingerprint byte per position or distance and slot in one record are
//! the next things to try. Until then the optimizers' sparse state keeps
//! its `hashbrown` map.
//!
//! Every allocation is fallible: growing returns [`IndexError::OutOfMemory`]
//! and leaves the index as it was. [`SlotIndex::memory_bytes`] is the exact sum
//! of the allocations' sizes.
//!
//! # Hash, and adversarial ids
//! The position of an id is a pure function of `mix64(id ^ seed)`, the
//! SplitMix64 finalizer (a bijection, the same mixer as
//! [`IdHasher`](crate::IdHasher)): sequential, strided and clustered ids
//! spread evenly, and the layout (hence iteration order and memory) is
//! reproducible. It is not a keyed cryptographic hash: someone who knows the
//! seed can pick ids that share a home position. More than 255 ids on one
//! home, which random ids practically never produce, make an insertion fail
//! with [`IndexError::Clustered`] (nothing changed) instead of degrading;
//! a service facing hostile ids picks a secret seed
//! ([`SlotIndex::with_seed`]).
//!
//! # How the shard table uses this
//! A shard's row store keeps row `s` at `rows[s * dim ..]` and asks
//! [`SlotIndex::try_insert`] for the slot of an id (a new id gets slot `len`,
//! so the store appends its row); a lookup is [`SlotIndex::get`]. Evicting an
//! id is [`SlotIndex::remove`]: when it reports `moved_from = Some(last)`, the
//! store copies row `last` into the freed slot and truncates, keeping its rows
//! dense. Checkpoints write [`SlotIndex::iter`]'s `(id, slot)` pairs (slot
//! order) or sort them by id; [`SlotIndex::key_of`] gives a slot's id, so
//! the store needs no id array of its own.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::mem::size_of;

use crate::quant::mix64;

/// Ids per chunk of the key array (32 KiB of ids).
pub const KEY_CHUNK: usize = 4096;
/// Largest segment (positions) before a full one splits in two instead of
/// growing: 16 Ki positions, 80 KiB.
pub const SEGMENT_MAX: usize = 1 << 14;
/// Smallest non-empty segment.
const SEGMENT_MIN: usize = 8;
/// Longest probe distance a position records (its byte).
const MAX_DIST: u32 = 255;
/// Deepest directory: the directory uses the top bits of the hash, the home
/// position the low 32, and the two must not overlap.
const MAX_DEPTH: u32 = 32;

/// Why an insertion into a [`SlotIndex`] failed; the index is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexError {
    /// An allocation of `bytes` was refused (or its size overflowed).
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// Every `u32` slot is taken (`u32::MAX` ids).
    Full,
    /// More than 255 ids of the same home position: only ids chosen against
    /// the seed do that (see the module docs).
    Clustered {
        /// The id that could not be placed.
        key: u64,
    },
    /// A row of the wrong length given to
    /// [`LowPrecisionRows::try_push`](crate::LowPrecisionRows::try_push).
    RowLength {
        /// The table's `dim`.
        expected: usize,
        /// The row's length.
        got: usize,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfMemory { bytes } => {
                write!(f, "out of memory growing the slot index ({bytes} bytes)")
            }
            Self::Full => write!(f, "the slot index holds u32::MAX ids"),
            Self::RowLength { expected, got } => {
                write!(f, "a row of {got} values for a table of dim {expected}")
            }
            Self::Clustered { key } => write!(
                f,
                "id {key} shares its home position with 255 others (adversarial ids? use a secret seed)"
            ),
        }
    }
}

impl core::error::Error for IndexError {}

/// What [`SlotIndex::remove`] did to the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// The removed id's slot.
    pub slot: u32,
    /// `Some(last)` when the id that had the last slot `last` now has
    /// `slot` (the caller moves that row); `None` when the removed id had
    /// the last slot.
    pub moved_from: Option<u32>,
}

/// `n` copies of `value` in an exactly sized, fallibly allocated box.
fn try_boxed<T: Copy>(n: usize, value: T) -> Result<Box<[T]>, IndexError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| IndexError::OutOfMemory {
            bytes: (n as u64).saturating_mul(size_of::<T>() as u64),
        })?;
    v.resize(n, value);
    Ok(v.into_boxed_slice())
}

/// One more element of room in `v`, fallibly (amortized doubling: used for
/// the directory and the segment list, both tiny next to the table).
fn try_room<T>(v: &mut Vec<T>) -> Result<(), IndexError> {
    v.try_reserve(1).map_err(|_| IndexError::OutOfMemory {
        bytes: ((v.len() as u64) + 1).saturating_mul(size_of::<T>() as u64),
    })
}

/// One Robin Hood table. `dist[p]` is 0 for an empty position, else the
/// entry's probe distance + 1 (1 = at its home).
#[derive(Clone)]
struct Segment {
    /// Top hash bits this segment owns (extendible hashing's local depth).
    depth: u32,
    len: usize,
    dist: Box<[u8]>,
    slots: Box<[u32]>,
}

impl Segment {
    fn with_capacity(depth: u32, cap: usize) -> Result<Self, IndexError> {
        Ok(Self {
            depth,
            len: 0,
            dist: try_boxed(cap, 0u8)?,
            slots: try_boxed(cap, 0u32)?,
        })
    }

    fn cap(&self) -> usize {
        self.dist.len()
    }

    /// Home position of hash `h` (Lemire's reduction of its low 32 bits).
    fn home(&self, h: u64) -> usize {
        (((h & 0xFFFF_FFFF) * self.cap() as u64) >> 32) as usize
    }

    fn next(&self, p: usize) -> usize {
        if p + 1 == self.cap() { 0 } else { p + 1 }
    }

    /// Whether one more entry keeps the load at most 15/16.
    fn has_room(&self) -> bool {
        (self.len + 1) * 16 <= self.cap() * 15
    }

    /// Position of the entry with hash `h` whose slot satisfies `is_key`.
    fn find(&self, h: u64, mut is_key: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mut p = self.home(h);
        let mut d = 1u32;
        loop {
            let e = u32::from(self.dist[p]);
            if e < d {
                return None;
            }
            if e == d && is_key(self.slots[p]) {
                return Some(p);
            }
            d += 1;
            if d > MAX_DIST {
                return None;
            }
            p = self.next(p);
        }
    }

    /// Places `slot` (hash `h`, known absent) if it fits: the Robin Hood
    /// insertion, done as "find the place, shift the cluster's tail one on".
    /// `false` (nothing changed) when a probe distance would pass 255.
    fn insert(&mut self, h: u64, slot: u32) -> bool {
        debug_assert!(self.len < self.cap());
        let mut p = self.home(h);
        let mut d = 1u32;
        while u32::from(self.dist[p]) >= d {
            d += 1;
            if d > MAX_DIST {
                return false;
            }
            p = self.next(p);
        }
        // The empty position ending the run from `p`; every entry between
        // moves one on, one further from its home.
        let mut end = p;
        while self.dist[end] != 0 {
            if u32::from(self.dist[end]) == MAX_DIST {
                return false;
            }
            end = self.next(end);
        }
        while end != p {
            let prev = if end == 0 { self.cap() - 1 } else { end - 1 };
            self.dist[end] = self.dist[prev] + 1;
            self.slots[end] = self.slots[prev];
            end = prev;
        }
        self.dist[p] = d as u8;
        self.slots[p] = slot;
        self.len += 1;
        true
    }

    /// Removes the entry at `p`, shifting the entries behind it back.
    fn remove_at(&mut self, mut p: usize) {
        loop {
            let q = self.next(p);
            if self.dist[q] <= 1 {
                self.dist[p] = 0;
                break;
            }
            self.dist[p] = self.dist[q] - 1;
            self.slots[p] = self.slots[q];
            p = q;
        }
        self.len -= 1;
    }

    fn bytes(&self) -> usize {
        self.cap() * (size_of::<u8>() + size_of::<u32>())
    }
}

/// Positions for `n` entries at load 3/4 (at least [`SEGMENT_MIN`]).
fn capacity_for(n: usize) -> usize {
    (n.saturating_mul(4) / 3 + 1).max(SEGMENT_MIN)
}

/// A compact `u64` id → `u32` slot index; see the [module docs](self) for
/// the layout, the hash and how a shard table uses it.
///
/// ```
/// use basis_core::SlotIndex;
///
/// let mut index = SlotIndex::new();
/// assert_eq!(index.try_insert(1 << 40)?, (0, true)); // new: slot 0
/// assert_eq!(index.try_insert(7)?, (1, true));
/// assert_eq!(index.try_insert(1 << 40)?, (0, false)); // known
/// assert_eq!(index.get(7), Some(1));
/// // Removing slot 0 moves the last id (7, slot 1) into it.
/// let removed = index.remove(1 << 40).expect("held");
/// assert_eq!((removed.slot, removed.moved_from), (0, Some(1)));
/// assert_eq!((index.get(7), index.key_of(0)), (Some(0), Some(7)));
/// assert_eq!(index.iter().collect::<Vec<_>>(), [(7, 0)]);
/// # Ok::<(), basis_core::IndexError>(())
/// ```
#[derive(Clone)]
pub struct SlotIndex {
    seed: u64,
    /// [`SEGMENT_MAX`] (smaller in tests, to exercise splits).
    segment_max: usize,
    /// Global depth: the directory has `2^depth` entries.
    depth: u32,
    /// Segment of each top-`depth`-bit hash prefix.
    dir: Vec<u32>,
    segments: Vec<Segment>,
    /// Id of each slot, in chunks of `KEY_CHUNK`.
    chunks: Vec<Box<[u64]>>,
    len: usize,
}

impl fmt::Debug for SlotIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotIndex")
            .field("len", &self.len)
            .field("segments", &self.segments.len())
            .field("memory_bytes", &self.memory_bytes())
            .finish_non_exhaustive()
    }
}

impl Default for SlotIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl SlotIndex {
    /// An empty index (no allocation) with seed 0.
    pub const fn new() -> Self {
        Self::with_seed(0)
    }

    /// An empty index whose positions are derived from `mix64(id ^ seed)`.
    /// The seed changes only the layout, never a slot number or an answer.
    pub const fn with_seed(seed: u64) -> Self {
        Self {
            seed,
            segment_max: SEGMENT_MAX,
            depth: 0,
            dir: Vec::new(),
            segments: Vec::new(),
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// An empty index whose segments split past `segment_max` positions
    /// (at least 16) instead of [`SEGMENT_MAX`]: test and fuzz support, so
    /// that small tables exercise splits and directory doubling.
    #[doc(hidden)]
    pub const fn with_segment_max(seed: u64, segment_max: usize) -> Self {
        let mut index = Self::with_seed(seed);
        index.segment_max = if segment_max < 16 { 16 } else { segment_max };
        index
    }

    /// Number of ids (= slots in use).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no id.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn hash(&self, key: u64) -> u64 {
        mix64(key ^ self.seed)
    }

    /// Directory entry of hash `h`.
    fn dir_of(&self, h: u64) -> usize {
        if self.depth == 0 {
            0
        } else {
            (h >> (64 - self.depth)) as usize
        }
    }

    fn key_at(&self, slot: u32) -> u64 {
        let s = slot as usize;
        self.chunks[s / KEY_CHUNK][s % KEY_CHUNK]
    }

    /// `(segment, position)` of `key`.
    fn locate(&self, key: u64) -> Option<(usize, usize)> {
        let h = self.hash(key);
        let seg = *self.dir.get(self.dir_of(h))? as usize;
        let p = self.segments[seg].find(h, |s| self.key_at(s) == key)?;
        Some((seg, p))
    }

    /// The slot of `key`.
    pub fn get(&self, key: u64) -> Option<u32> {
        self.locate(key).map(|(seg, p)| self.segments[seg].slots[p])
    }

    /// Whether `key` has a slot.
    pub fn contains_key(&self, key: u64) -> bool {
        self.locate(key).is_some()
    }

    /// The id holding `slot`.
    pub fn key_of(&self, slot: u32) -> Option<u64> {
        ((slot as usize) < self.len).then(|| self.key_at(slot))
    }

    /// `(id, slot)` of every id, in slot order (deterministic: a function of
    /// the sequence of insertions and removals only).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.iter().copied())
            .take(self.len)
            .zip(0u32..)
    }

    /// The slot of `key`, giving it the next slot (`len`) if it has none.
    /// Returns `(slot, created)`.
    ///
    /// # Errors
    /// [`IndexError::OutOfMemory`] when growing is refused,
    /// [`IndexError::Full`] at `u32::MAX` ids, [`IndexError::Clustered`]
    /// for adversarial ids; the index is then unchanged.
    pub fn try_insert(&mut self, key: u64) -> Result<(u32, bool), IndexError> {
        if let Some(slot) = self.get(key) {
            return Ok((slot, false));
        }
        let slot = u32::try_from(self.len)
            .ok()
            .filter(|&s| s < u32::MAX)
            .ok_or(IndexError::Full)?;
        // Room for the key first: a failure below then changes nothing.
        if self.len == self.chunks.len() * KEY_CHUNK {
            try_room(&mut self.chunks)?;
            let chunk = try_boxed(KEY_CHUNK, 0u64)?;
            self.chunks.push(chunk);
        }
        if self.dir.is_empty() {
            try_room(&mut self.dir)?;
            try_room(&mut self.segments)?;
            self.segments.push(Segment::with_capacity(0, 0)?);
            self.dir.push(0);
        }
        let h = self.hash(key);
        let mut grown = false;
        loop {
            let seg = self.dir[self.dir_of(h)] as usize;
            if self.segments[seg].has_room() && self.segments[seg].insert(h, slot) {
                break;
            }
            if grown && self.segments[seg].has_room() {
                // Grown once and still over 255 probes: hostile ids.
                return Err(IndexError::Clustered { key });
            }
            self.grow(seg)?;
            grown = true;
        }
        let s = slot as usize;
        self.chunks[s / KEY_CHUNK][s % KEY_CHUNK] = key;
        self.len += 1;
        Ok((slot, true))
    }

    /// Rebuilds segment `seg` with room for one more entry: 4/3 as large,
    /// or split in two when that would pass [`SEGMENT_MAX`]. On error the
    /// index is unchanged (except, harmlessly, a doubled directory).
    fn grow(&mut self, seg: usize) -> Result<(), IndexError> {
        let old = &self.segments[seg];
        let mut hashed: Vec<(u64, u32)> = Vec::new();
        hashed
            .try_reserve_exact(old.len)
            .map_err(|_| IndexError::OutOfMemory {
                bytes: (old.len * size_of::<(u64, u32)>()) as u64,
            })?;
        for (&d, &slot) in old.dist.iter().zip(old.slots.iter()) {
            if d != 0 {
                hashed.push((self.hash(self.key_at(slot)), slot));
            }
        }
        let depth = old.depth;
        let clustered = || IndexError::Clustered {
            key: hashed.first().map_or(0, |e| self.key_at(e.1)),
        };
        if capacity_for(hashed.len() + 1) <= self.segment_max || depth >= MAX_DEPTH {
            let mut new = Segment::with_capacity(depth, capacity_for(hashed.len() + 1))?;
            if !hashed.iter().all(|&(h, s)| new.insert(h, s)) {
                return Err(clustered());
            }
            self.segments[seg] = new;
            return Ok(());
        }
        // Split on hash bit `depth` (counted from the top).
        let bit = 63 - depth;
        let ones = hashed.iter().filter(|e| e.0 >> bit & 1 == 1).count();
        let mut low = Segment::with_capacity(depth + 1, capacity_for(hashed.len() - ones + 1))?;
        let mut high = Segment::with_capacity(depth + 1, capacity_for(ones + 1))?;
        for &(h, s) in &hashed {
            let half = if h >> bit & 1 == 1 {
                &mut high
            } else {
                &mut low
            };
            if !half.insert(h, s) {
                return Err(clustered());
            }
        }
        try_room(&mut self.segments)?;
        if depth == self.depth {
            self.double_dir()?;
        }
        // The directory entries of `seg` are one aligned run of
        // 2^(global - local) entries; its upper half goes to `high`.
        // (`hashed` is not empty: a segment of 0 entries never splits.)
        let prefix = hashed.first().map_or(0, |e| self.dir_of(e.0));
        let run = 1usize << (self.depth - depth);
        let start = prefix & !(run - 1);
        let high_index = self.segments.len() as u32;
        for d in &mut self.dir[start + run / 2..start + run] {
            *d = high_index;
        }
        self.segments[seg] = low;
        self.segments.push(high);
        Ok(())
    }

    /// Doubles the directory: entry `i` becomes entries `2i` and `2i + 1`.
    fn double_dir(&mut self) -> Result<(), IndexError> {
        let n = self.dir.len();
        let mut dir = Vec::new();
        dir.try_reserve_exact(2 * n)
            .map_err(|_| IndexError::OutOfMemory {
                bytes: (2 * n * size_of::<u32>()) as u64,
            })?;
        dir.extend(self.dir.iter().flat_map(|&s| [s, s]));
        self.dir = dir;
        self.depth += 1;
        Ok(())
    }

    /// Removes `key`; the last slot's id moves into the freed slot (see
    /// [`Removed`]). `None` when `key` has no slot.
    pub fn remove(&mut self, key: u64) -> Option<Removed> {
        let (seg, p) = self.locate(key)?;
        let slot = self.segments[seg].slots[p];
        self.segments[seg].remove_at(p);
        let last = (self.len - 1) as u32;
        let moved_from = if slot == last {
            None
        } else {
            let moved = self.key_at(last);
            let (mseg, mp) = self.locate(moved)?;
            self.segments[mseg].slots[mp] = slot;
            let s = slot as usize;
            self.chunks[s / KEY_CHUNK][s % KEY_CHUNK] = moved;
            Some(last)
        };
        self.len -= 1;
        // Keep one spare chunk: an id added and removed at a chunk boundary
        // must not allocate and free 32 KiB each time.
        while self.chunks.len() * KEY_CHUNK >= self.len + 2 * KEY_CHUNK {
            self.chunks.pop();
        }
        Some(Removed { slot, moved_from })
    }

    /// Exact heap bytes: the table's segments (5 B per position), the keys'
    /// chunks, the directory and the two lists' capacities.
    pub fn memory_bytes(&self) -> usize {
        self.segments.iter().map(Segment::bytes).sum::<usize>()
            + self.segments.capacity() * size_of::<Segment>()
            + self.dir.capacity() * size_of::<u32>()
            + self.chunks.len() * KEY_CHUNK * size_of::<u64>()
            + self.chunks.capacity() * size_of::<Box<[u64]>>()
    }

    /// Bytes of the hash table alone (segments, directory, segment list):
    /// [`memory_bytes`](Self::memory_bytes) without the keys by slot.
    pub fn table_bytes(&self) -> usize {
        self.segments.iter().map(Segment::bytes).sum::<usize>()
            + self.segments.capacity() * size_of::<Segment>()
            + self.dir.capacity() * size_of::<u32>()
    }

    /// Checks every structural invariant (test and fuzz support): each
    /// entry sits in its segment at its recorded distance from its home,
    /// Robin Hood order holds, the directory runs are aligned, slots and
    /// keys are a bijection onto `0..len`.
    ///
    /// # Panics
    /// On the first broken invariant.
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        assert_eq!(
            self.dir.len(),
            if self.segments.is_empty() {
                0
            } else {
                1 << self.depth
            }
        );
        let mut seen = alloc::vec![false; self.len];
        let mut total = 0;
        for (i, seg) in self.segments.iter().enumerate() {
            let run = 1usize << (self.depth - seg.depth);
            let refs: Vec<usize> = (0..self.dir.len())
                .filter(|&d| self.dir[d] as usize == i)
                .collect();
            assert_eq!(refs.len(), run, "segment {i} directory run");
            assert_eq!(refs[0] % run, 0);
            assert!(refs.windows(2).all(|w| w[1] == w[0] + 1));
            let mut count = 0;
            for p in 0..seg.cap() {
                let d = seg.dist[p];
                if d == 0 {
                    continue;
                }
                count += 1;
                let slot = seg.slots[p];
                assert!((slot as usize) < self.len, "slot {slot} out of range");
                assert!(!seen[slot as usize], "slot {slot} twice");
                seen[slot as usize] = true;
                let h = self.hash(self.key_at(slot));
                assert_eq!(self.dir[self.dir_of(h)] as usize, i, "wrong segment");
                let home = seg.home(h);
                assert_eq!((home + usize::from(d) - 1) % seg.cap(), p, "distance");
                // Robin Hood: the previous position is empty or no poorer by more than one.
                let prev = if p == 0 { seg.cap() - 1 } else { p - 1 };
                assert!(
                    u16::from(seg.dist[prev]) + 1 >= u16::from(d),
                    "robin hood order at {p}"
                );
            }
            assert_eq!(count, seg.len);
            total += count;
        }
        assert_eq!(total, self.len);
        assert!(self.chunks.len() * KEY_CHUNK >= self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of [`mix64`] (to build ids with chosen hashes).
    fn unmix64(mut z: u64) -> u64 {
        z = z ^ (z >> 31) ^ (z >> 62);
        z = z.wrapping_mul(0x3196_42B2_D24D_8EC3);
        z = z ^ (z >> 27) ^ (z >> 54);
        z = z.wrapping_mul(0x96DE_1B17_3F11_9089);
        z ^ (z >> 30) ^ (z >> 60)
    }

    #[test]
    fn ids_sharing_a_home_fail_typed_and_change_nothing() {
        for x in [0u64, 1, 0xDEAD_BEEF_1234_5678, u64::MAX] {
            assert_eq!(mix64(unmix64(x)), x);
        }
        // Same low 32 bits (home) and same top bits (segment): one cluster.
        let keys: Vec<u64> = (0..400u64)
            .map(|i| unmix64((i << 32) | 0x1234_5678))
            .collect();
        let mut index = SlotIndex::new();
        let mut failed = None;
        for &k in &keys {
            match index.try_insert(k) {
                Ok(_) => {}
                Err(e) => {
                    failed = Some((k, e));
                    break;
                }
            }
        }
        let (k, e) = failed.expect("400 ids on one home cannot all fit");
        assert_eq!(e, IndexError::Clustered { key: k });
        assert_eq!(index.len(), 255);
        assert!(index.get(k).is_none());
        assert!(
            keys[..255]
                .iter()
                .enumerate()
                .all(|(s, &k)| index.get(k) == Some(s as u32))
        );
        index.check_invariants();
        // A different seed spreads the same ids.
        let mut seeded = SlotIndex::with_seed(0x5EED);
        assert!(keys.iter().all(|&k| seeded.try_insert(k).is_ok()));
        seeded.check_invariants();
    }

    #[test]
    fn sequential_and_strided_ids_split_and_keep_load() {
        for stride in [1u64, 1 << 32, 4096] {
            let mut index = SlotIndex::with_segment_max(0, 64);
            for i in 0..5000u64 {
                assert_eq!(index.try_insert(i * stride), Ok((i as u32, true)));
            }
            index.check_invariants();
            assert!(index.segments.len() > 64, "splits happened");
            let positions: usize = index.segments.iter().map(Segment::cap).sum();
            // Loads stay in [3/4 - rounding, 15/16] on average.
            assert!(positions * 10 < 5000 * 14, "{positions} positions");
        }
    }
}
