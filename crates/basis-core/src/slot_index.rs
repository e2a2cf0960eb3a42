//! [`SlotIndex`]: a compact `u64` id → `u32` slot index for tables of many
//! rows: ≈ 13–14 B per id including its slack (against ≈ 21–36 B for a
//! `hashbrown::HashMap<u64, u32>`), one cache miss per lookup, fallible
//! growth without a 2× transient.
//!
//! # Layout: a quotient table, no key array
//! - **Hash.** An id's hash is `h = mix64(id ^ seed)`, the SplitMix64
//!   finalizer: a *bijection* of `u64`, so `h` determines the id
//!   (`id = unmix64(h) ^ seed`) and the index stores hash bits, not ids.
//! - **Segments.** The top bits of `h` pick a segment through a directory
//!   (extendible hashing). A segment is one Robin Hood linear-probing table
//!   (entries sorted by home position: a lookup stops once it passes the
//!   place its id would be; a removal shifts the entries behind it back, no
//!   tombstones) filled up to 15/16. A full segment is rebuilt alone, 5/4 as
//!   large, or split in two once it would pass [`SEGMENT_MAX`] positions:
//!   growth never copies more than one segment (≤ 192 KiB) at a time.
//! - **Quotienting.** The home position of `h` in its segment is Lemire's
//!   reduction of the 32 hash bits after the segment's prefix. A position
//!   holds one 12-byte record: the **low 56 bits of `h`** and the probe
//!   distance in one `u64`, and the 4-byte slot. The segment's prefix and
//!   the home position fix the bits of `h` the record leaves out (a home
//!   position covers an interval of at most `2^32 / 256` values of those 32
//!   bits, and a segment has at least 256 positions), so `(segment, home,
//!   low 56 bits)` is `h` exactly: a lookup compares one `u64` per probe
//!   (tag and distance at once) and never loads a key. Ids are recovered
//!   from records when a segment is rebuilt, for [`SlotIndex::iter`] and
//!   for removals.
//!
//! Slots are numbered densely `0..len` in insertion order; a removal moves
//! the last slot into the hole (like `Vec::swap_remove`). Without a key
//! array, finding the entry of a given slot is a scan of the table:
//! [`SlotIndex::remove`] and [`SlotIndex::key_of`] cost `O(capacity)`, and
//! evictions go in batches through [`SlotIndex::retain`] (one scan for any
//! number of removals).
//!
//! # Memory: what is reachable
//! `N` distinct arbitrary 64-bit ids in a given slot order carry
//! `log2(2^64 · (2^64 − 1) ⋯ (2^64 − N + 1)) ≈ 64 N` bits: the set
//! (`≈ N (64 − log2 N + 1.44)` bits) plus the slot permutation
//! (`≈ N (log2 N − 1.44)` bits). **8 B per id is the floor** of any
//! id → slot index that can give the ids back, at every `N`. This layout
//! stores `56 + 8 + 32 = 96` bits per position where the floor is 64 per
//! id: the home position already encodes `log2(positions)` bits of `h` that
//! the 56-bit tag stores again, and the slot takes 32 bits where
//! `log2 N` would do. At loads between 4/5 and 15/16 that is 12.8–15 B per
//! position-filled id, ≈ 13.5 B on average (measured below).
//!
//! **≤ 10 B per id** needs ≈ 70 bits per position at a load that never
//! drops below ≈ 0.88. Bit-packed Robin Hood records (`64 −
//! log2(positions)` tag bits, up to one more lost to the non-power-of-two
//! home reduction, a `ceil(log2 N)`-bit slot, a 5–6-bit distance) take
//! ≈ 70–71 bits at 10^7 ids: ≈ 10.4 B per id at this layout's average load
//! (≈ 0.85), under 10 B only above load ≈ 0.89, where linear-probing
//! clusters (`≈ 1/(1 − load)²` long) make an insertion shift about a
//! hundred records. The other layouts, counted on paper (not built), miss
//! it once everything is counted: slots only (4 B per
//! position) compared against an `ids_by_slot` array (8 B per id) is
//! ≥ 12.3 B at load 15/16; a 1-byte control array with separate key and
//! slot arrays (hashbrown's group probing) is 13 B per position, ≥ 13.9 B
//! per id; a key remainder and the slot packed in one `u64` leave no bit
//! for probe metadata (`64 − log2 P + log2 N ≈ 64`). The layout that would
//! reach it, not built: two-choice buckets of 8 records (bucketized
//! cuckoo, load ≈ 0.95, one choice bit and no distance): ≈ 68–69 bits per
//! record, ≈ 9 B per id — with a miss reading both buckets (2–4 cache
//! lines, against one control group for hashbrown).
//!
//! # Measured (`cargo bench -p basisopt-core --bench slot_index`)
//! Bytes per id after growth (deterministic): 14.21 at 10^6 ids, 13.49 at
//! 10^7, against 35.65 and 28.52 for `hashbrown::HashMap<u64, u32>`; the
//! previous layout (keys by slot + 5-byte positions) took 13.91 / 13.70.
//! Interleaved medians of 7 rounds on the shared 2-core machine at load
//! 10–12 (busy: ratios, not times, are the figure), two runs at 10^6:
//! a lookup hit costs 2.25 / 2.65× hashbrown's, a miss 3.69 / 4.27×,
//! building 4.68 / 4.43×; one run at 10^7: hit 3.66×, miss 4.76×. The
//! previous layout measured 3.7–4.0× (hit), 4.8–7.6× (miss) and 5.8–6.3×
//! (build) at 10^6, 6.2–7.3× (hit) at 10^7. Still slower than hashbrown:
//! its misses mostly stop in its 1-byte control array (16 MiB at 10^7,
//! cache-resident), ours read a 12-byte record in a 135 MB table; building
//! pays Robin Hood's shifts at loads up to 15/16 (perf: 38 % of a build in
//! `Segment::insert`) and the segment rebuilds.
//!
//! [`SlotIndex::get_many`] (hash 32 keys and load their home records, then
//! probe) narrows the lookup gap; one interleaved run each, against
//! hashbrown's per-id `get` (per-id `get` in brackets): at 10^6 ids (load
//! 17–18) hits 1.80× (3.02×), misses 3.35× (3.71×), Zipf-skewed hits 1.44×
//! (2.85×); at 10^7 (load 16) hits 2.56× (3.26×), misses 2.85×, Zipf
//! 1.66× (3.24×). Building stays 4.57× (10^6).
//!
//! In the shard table's step (`cargo bench -p basisopt-shard --bench
//! step`, 1.16·10^6 rows, SGD, 8192 ids a step; `IdSlots` over this type
//! with one `get_many` per step, built apart and run in turns with the
//! hashbrown table, three rounds, load 17–19): the step took 1.49–1.88×
//! hashbrown's (uniform ids) and 1.58–2.16× (`STEP_BENCH_ZIPF=1`) — but
//! not for the lookups (`get_many` is 6 % of that step's samples in
//! `perf`): the process takes 660 000 minor page faults against 114 000,
//! ≈ 35 % of its time in the kernel zeroing pages. glibc's `malloc` serves
//! the step's ≈ 1 MB buffers with `mmap` (a fresh, faulted-in mapping each
//! step) until a large block is freed: hashbrown's doubling frees its old
//! 8–16 MB tables and so raises glibc's dynamic mmap threshold as a side
//! effect; this index never frees more than one segment (≤ 192 KiB). With
//! the threshold pinned where hashbrown leaves it
//! (`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=16777216:glibc.malloc.trim_threshold=33554432`
//! for both binaries) the step took 0.79–1.17× hashbrown's (uniform) and
//! 0.75–1.50× (Zipf): parity within this machine's noise, at a process RSS
//! of 155 B/row against 187. So the shard table keeps `hashbrown` for now:
//! this type misses the 10 B/row bar (14.3 B/row in that run) and its step
//! speed depends on the table reusing its per-step buffers.
//!
//! Every allocation is fallible: growing returns [`IndexError::OutOfMemory`]
//! and leaves the index as it was. [`SlotIndex::memory_bytes`] is the exact sum
//! of the allocations' sizes.
//!
//! # Adversarial ids
//! The layout is a pure function of the ids and the seed: sequential,
//! strided and clustered ids spread evenly, and the layout (hence memory)
//! is reproducible. The mixer is not a keyed cryptographic hash: someone
//! who knows the seed can pick ids that share a home position. More than
//! 255 ids on one home, which random ids practically never produce, make
//! an insertion fail with [`IndexError::Clustered`] (nothing changed)
//! instead of degrading; a service facing hostile ids picks a secret seed
//! ([`SlotIndex::with_seed`]).
//!
//! # How a row store uses this
//! A row store keeps row `s` at `rows[s * dim ..]` and asks
//! [`SlotIndex::try_insert`] for the slot of an id (a new id gets slot `len`,
//! so the store appends its row); a lookup is [`SlotIndex::get`]. Evicting
//! ids is [`SlotIndex::retain`]: it returns the removals as a sequence of
//! swap-removes ([`Removed`]) that the store replays on its rows (and its
//! optimizer state) to stay dense. Checkpoints write [`SlotIndex::iter`]'s
//! `(id, slot)` pairs (slot order).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::mem::size_of;

use crate::quant::mix64;

/// Largest segment (positions) before a full one splits in two instead of
/// growing: 16 Ki positions, 192 KiB.
pub const SEGMENT_MAX: usize = 1 << 14;
/// Smallest segment: the quotienting needs at least 256 positions (so that
/// a home position leaves at most 24 of its 32 hash bits unknown). A
/// non-empty index therefore holds at least 3 KiB.
pub const SEGMENT_MIN: usize = 256;
/// Keys [`SlotIndex::get_many`] hashes and loads before probing them: enough
/// independent loads to keep the core's miss buffers busy, few enough that
/// their lines are still in L1 when probed.
pub const BATCH: usize = 32;
/// Longest probe distance a record holds (its low byte).
const MAX_DIST: u64 = 255;
/// Deepest directory: the directory uses the top bits of the hash, the home
/// position the next 32, and the two must fit in 64.
const MAX_DEPTH: u32 = 32;
/// Hash bits a record keeps.
const TAG_BITS: u32 = 56;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

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

/// What [`SlotIndex::remove`] (or one step of [`SlotIndex::retain`]) did to
/// the slots: a swap-remove.
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
/// the directory, the segment list and batch removals' lists).
fn try_room<T>(v: &mut Vec<T>) -> Result<(), IndexError> {
    v.try_reserve(1).map_err(|_| IndexError::OutOfMemory {
        bytes: ((v.len() as u64) + 1).saturating_mul(size_of::<T>() as u64),
    })
}

/// The inverse of [`mix64`]: the id of a hash.
const fn unmix64(mut z: u64) -> u64 {
    z = z ^ (z >> 31) ^ (z >> 62);
    z = z.wrapping_mul(0x3196_42B2_D24D_8EC3);
    z = z ^ (z >> 27) ^ (z >> 54);
    z = z.wrapping_mul(0x96DE_1B17_3F11_9089);
    z ^ (z >> 30) ^ (z >> 60)
}

/// One position: `meta = tag << 8 | dist` split in two words (so the record
/// is 12 bytes, 4-aligned) and the slot. `dist` is 0 for an empty position,
/// else the probe distance + 1 (1 = at its home); `tag` is the low 56 bits
/// of the hash.
#[derive(Clone, Copy, Default)]
struct Rec {
    lo: u32,
    hi: u32,
    slot: u32,
}

impl Rec {
    #[inline]
    fn new(meta: u64, slot: u32) -> Self {
        Self {
            lo: meta as u32,
            hi: (meta >> 32) as u32,
            slot,
        }
    }

    #[inline]
    fn meta(self) -> u64 {
        u64::from(self.hi) << 32 | u64::from(self.lo)
    }

    #[inline]
    fn dist(self) -> u64 {
        u64::from(self.lo & 0xFF)
    }
}

/// One Robin Hood table of records.
#[derive(Clone)]
struct Segment {
    /// Top hash bits this segment owns (extendible hashing's local depth).
    depth: u32,
    /// Their value.
    prefix: u64,
    len: usize,
    recs: Box<[Rec]>,
}

impl Segment {
    fn with_capacity(depth: u32, prefix: u64, cap: usize) -> Result<Self, IndexError> {
        Ok(Self {
            depth,
            prefix,
            len: 0,
            recs: try_boxed(cap, Rec::default())?,
        })
    }

    fn cap(&self) -> usize {
        self.recs.len()
    }

    /// Home position of hash `h`: Lemire's reduction of the 32 bits after
    /// the prefix.
    #[inline]
    fn home(&self, h: u64) -> usize {
        let x = (h << self.depth) >> 32;
        ((x * self.cap() as u64) >> 32) as usize
    }

    #[inline]
    fn next(&self, p: usize) -> usize {
        if p + 1 == self.cap() { 0 } else { p + 1 }
    }

    /// Whether one more entry keeps the load at most 15/16.
    fn has_room(&self) -> bool {
        (self.len + 1) * 16 <= self.cap() * 15
    }

    /// Position of the entry of hash `h`: one `u64` compare per probe.
    #[inline]
    fn find(&self, h: u64) -> Option<usize> {
        self.find_from(h, self.home(h))
    }

    /// [`find`](Self::find) with the home position of `h` already known.
    #[inline]
    fn find_from(&self, h: u64, home: usize) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let want = (h & TAG_MASK) << 8;
        let mut p = home;
        let mut d = 1u64;
        loop {
            let m = self.recs[p].meta();
            if m & 0xFF < d {
                return None;
            }
            if m == want | d {
                return Some(p);
            }
            d += 1;
            if d > MAX_DIST {
                return None;
            }
            p = self.next(p);
        }
    }

    /// The full hash of the entry at `p` (occupied): the prefix, the 32
    /// position bits recovered from the home position and the tag's low
    /// bits of them, then the tag's remaining bits.
    fn hash_at(&self, p: usize) -> u64 {
        let m = self.recs[p].meta();
        let tag = m >> 8;
        let ld = self.depth;
        let top = if ld == 0 { 0 } else { self.prefix << (64 - ld) };
        if ld >= 64 - TAG_BITS {
            return top | (tag & (u64::MAX >> ld));
        }
        let cap = self.cap();
        let home = (p + cap - (m & 0xFF) as usize + 1) % cap;
        // The position bits x occupy h's bits [32 - ld, 64 - ld); the tag
        // holds their low `known` bits, and `home` pins x to an interval of
        // at most 2^32 / cap ≤ 2^known values starting at `base`.
        let known = TAG_BITS - 32 + ld;
        let xmask = (1u64 << known) - 1;
        let xlow = (tag >> (32 - ld)) & xmask;
        let base = ((home as u64) << 32).div_ceil(cap as u64);
        let x = base + (xlow.wrapping_sub(base) & xmask);
        top | (x << (32 - ld)) | (tag & ((1u64 << (32 - ld)) - 1))
    }

    /// Places `slot` (hash `h`, known absent) if it fits: the Robin Hood
    /// insertion, done as "find the place, shift the cluster's tail one on".
    /// `false` (nothing changed) when a probe distance would pass 255.
    fn insert(&mut self, h: u64, slot: u32) -> bool {
        debug_assert!(self.len < self.cap());
        let mut p = self.home(h);
        let mut d = 1u64;
        while self.recs[p].dist() >= d {
            d += 1;
            if d > MAX_DIST {
                return false;
            }
            p = self.next(p);
        }
        // The empty position ending the run from `p`; every entry between
        // moves one on, one further from its home.
        let mut end = p;
        while self.recs[end].dist() != 0 {
            if self.recs[end].dist() == MAX_DIST {
                return false;
            }
            end = self.next(end);
        }
        while end != p {
            let prev = if end == 0 { self.cap() - 1 } else { end - 1 };
            let r = self.recs[prev];
            self.recs[end] = Rec::new(r.meta() + 1, r.slot);
            end = prev;
        }
        self.recs[p] = Rec::new((h & TAG_MASK) << 8 | d, slot);
        self.len += 1;
        true
    }

    /// Removes the entry at `p`, shifting the entries behind it back.
    fn remove_at(&mut self, mut p: usize) {
        loop {
            let q = self.next(p);
            let r = self.recs[q];
            if r.dist() <= 1 {
                self.recs[p] = Rec::default();
                break;
            }
            self.recs[p] = Rec::new(r.meta() - 1, r.slot);
            p = q;
        }
        self.len -= 1;
    }

    /// `(position, record)` of every entry.
    fn entries(&self) -> impl Iterator<Item = (usize, Rec)> + '_ {
        self.recs
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, r)| r.dist() != 0)
    }

    fn bytes(&self) -> usize {
        self.cap() * size_of::<Rec>()
    }
}

/// Positions for `n` entries at load 4/5 (at least [`SEGMENT_MIN`]).
fn capacity_for(n: usize) -> usize {
    (n.saturating_mul(5) / 4 + 1).max(SEGMENT_MIN)
}

/// A compact `u64` id → `u32` slot index; see the [module docs](self) for
/// the layout, the hash and how a row store uses it.
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
            len: 0,
        }
    }

    /// An empty index whose segments split past `segment_max` positions
    /// (at least 16) instead of [`SEGMENT_MAX`]: test and fuzz support, so
    /// that small tables exercise splits and directory doubling (below
    /// [`SEGMENT_MIN`], every growth is a split).
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

    #[inline]
    fn hash(&self, key: u64) -> u64 {
        mix64(key ^ self.seed)
    }

    fn key_of_hash(&self, h: u64) -> u64 {
        unmix64(h) ^ self.seed
    }

    /// Directory entry of hash `h`.
    #[inline]
    fn dir_of(&self, h: u64) -> usize {
        if self.depth == 0 {
            0
        } else {
            (h >> (64 - self.depth)) as usize
        }
    }

    /// `(segment, position)` of hash `h`.
    #[inline]
    fn locate_hash(&self, h: u64) -> Option<(usize, usize)> {
        let seg = *self.dir.get(self.dir_of(h))? as usize;
        let p = self.segments[seg].find(h)?;
        Some((seg, p))
    }

    /// The slot of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        self.locate_hash(self.hash(key))
            .map(|(seg, p)| self.segments[seg].recs[p].slot)
    }

    /// The slot of each of `keys` into `out` (`out[k] = get(keys[k])`, for
    /// the first `min(keys.len(), out.len())` keys): the same answers as
    /// [`get`](Self::get), faster on a large index. Each run of
    /// [`BATCH`] keys is hashed and its home records are loaded first (the
    /// loads are independent, so their cache misses overlap), then probed
    /// while those lines are in cache — the batched lookup of a table
    /// step, in safe code (no prefetch intrinsic: this crate forbids
    /// `unsafe`).
    pub fn get_many(&self, keys: &[u64], out: &mut [Option<u32>]) {
        let n = keys.len().min(out.len());
        let (keys, out) = (&keys[..n], &mut out[..n]);
        if self.len == 0 {
            out.fill(None);
            return;
        }
        let mut at = [(0u64, 0u32, 0u32); BATCH];
        let mut touched = 0u32;
        for (ks, os) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            for (&k, a) in ks.iter().zip(at.iter_mut()) {
                let h = self.hash(k);
                let seg = self.dir[self.dir_of(h)];
                let s = &self.segments[seg as usize];
                let home = s.home(h);
                touched ^= s.recs[home].lo;
                *a = (h, seg, home as u32);
            }
            // Keeps the first pass's loads (their only purpose is to bring
            // the lines in).
            core::hint::black_box(touched);
            for (&(h, seg, home), o) in at.iter().zip(os.iter_mut()) {
                let s = &self.segments[seg as usize];
                *o = s.find_from(h, home as usize).map(|p| s.recs[p].slot);
            }
        }
    }

    /// Whether `key` has a slot.
    pub fn contains_key(&self, key: u64) -> bool {
        self.locate_hash(self.hash(key)).is_some()
    }

    /// `(segment, position)` of the entry holding `slot` (a scan).
    fn find_slot(&self, slot: u32) -> Option<(usize, usize)> {
        self.segments.iter().enumerate().find_map(|(i, seg)| {
            seg.entries()
                .find(|(_, r)| r.slot == slot)
                .map(|(p, _)| (i, p))
        })
    }

    /// The id holding `slot`. Costs a scan of the table (`O(capacity)`):
    /// the index keeps no key per slot; iterate with [`iter`](Self::iter)
    /// to map many slots.
    pub fn key_of(&self, slot: u32) -> Option<u64> {
        if slot as usize >= self.len {
            return None;
        }
        let (seg, p) = self.find_slot(slot)?;
        Some(self.key_of_hash(self.segments[seg].hash_at(p)))
    }

    /// `(id, slot)` of every id, in slot order (deterministic: a function of
    /// the sequence of insertions and removals only). Builds the list of ids
    /// first (`8 B × len`, one scan of the table).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let mut keys = alloc::vec![0u64; self.len];
        for seg in &self.segments {
            for (p, r) in seg.entries() {
                keys[r.slot as usize] = self.key_of_hash(seg.hash_at(p));
            }
        }
        keys.into_iter().zip(0u32..)
    }

    /// The slot of `key`, giving it the next slot (`len`) if it has none.
    /// Returns `(slot, created)`.
    ///
    /// # Errors
    /// [`IndexError::OutOfMemory`] when growing is refused,
    /// [`IndexError::Full`] at `u32::MAX` ids, [`IndexError::Clustered`]
    /// for adversarial ids; the index then holds the same ids and slots.
    pub fn try_insert(&mut self, key: u64) -> Result<(u32, bool), IndexError> {
        let h = self.hash(key);
        if let Some((seg, p)) = self.locate_hash(h) {
            return Ok((self.segments[seg].recs[p].slot, false));
        }
        let slot = u32::try_from(self.len)
            .ok()
            .filter(|&s| s < u32::MAX)
            .ok_or(IndexError::Full)?;
        if self.dir.is_empty() {
            try_room(&mut self.dir)?;
            try_room(&mut self.segments)?;
            self.segments
                .push(Segment::with_capacity(0, 0, SEGMENT_MIN)?);
            self.dir.push(0);
        }
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
        self.len += 1;
        Ok((slot, true))
    }

    /// Rebuilds segment `seg` with room for one more entry: 5/4 as large,
    /// or split in two when that would pass the segment maximum. On error
    /// the index is unchanged (except, harmlessly, a doubled directory).
    fn grow(&mut self, seg: usize) -> Result<(), IndexError> {
        let old = &self.segments[seg];
        let mut hashed: Vec<(u64, u32)> = Vec::new();
        hashed
            .try_reserve_exact(old.len)
            .map_err(|_| IndexError::OutOfMemory {
                bytes: (old.len * size_of::<(u64, u32)>()) as u64,
            })?;
        hashed.extend(old.entries().map(|(p, r)| (old.hash_at(p), r.slot)));
        let (depth, prefix) = (old.depth, old.prefix);
        let clustered = || IndexError::Clustered {
            key: hashed.first().map_or(0, |e| self.key_of_hash(e.0)),
        };
        if capacity_for(hashed.len() + 1) <= self.segment_max || depth >= MAX_DEPTH {
            let mut new = Segment::with_capacity(depth, prefix, capacity_for(hashed.len() + 1))?;
            if !hashed.iter().all(|&(h, s)| new.insert(h, s)) {
                return Err(clustered());
            }
            self.segments[seg] = new;
            return Ok(());
        }
        // Split on hash bit `depth` (counted from the top).
        let bit = 63 - depth;
        let ones = hashed.iter().filter(|e| e.0 >> bit & 1 == 1).count();
        let mut low = Segment::with_capacity(
            depth + 1,
            prefix << 1,
            capacity_for(hashed.len() - ones + 1),
        )?;
        let mut high = Segment::with_capacity(depth + 1, prefix << 1 | 1, capacity_for(ones + 1))?;
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
        let run = 1usize << (self.depth - depth);
        let start = if depth == 0 {
            0
        } else {
            (prefix as usize) << (self.depth - depth)
        };
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
    /// [`Removed`]). `None` when `key` has no slot. Costs a scan of the
    /// table when the key is not the last slot's (the index keeps no key
    /// per slot): remove many ids with one [`retain`](Self::retain).
    pub fn remove(&mut self, key: u64) -> Option<Removed> {
        let (seg, p) = self.locate_hash(self.hash(key))?;
        let slot = self.segments[seg].recs[p].slot;
        self.segments[seg].remove_at(p);
        let last = (self.len - 1) as u32;
        self.len -= 1;
        if slot == last {
            return Some(Removed {
                slot,
                moved_from: None,
            });
        }
        let (mseg, mp) = self.find_slot(last)?;
        self.segments[mseg].recs[mp].slot = slot;
        Some(Removed {
            slot,
            moved_from: Some(last),
        })
    }

    /// Removes every id for which `keep(id, slot)` is false (called once
    /// per id), in one scan of the table, and keeps the slots dense.
    /// Returns the removals as the sequence of swap-removes that does the
    /// same to a slot-indexed array: the removed slots in decreasing order,
    /// each filled by the then-last slot ([`Removed::moved_from`]) — a row
    /// store replays them in order (`rows.swap_remove(slot)`).
    ///
    /// # Errors
    /// [`IndexError::OutOfMemory`] when the lists of removed ids cannot be
    /// allocated (`16 B` per removed id); the index is then unchanged.
    pub fn retain(
        &mut self,
        mut keep: impl FnMut(u64, u32) -> bool,
    ) -> Result<Vec<Removed>, IndexError> {
        // Hashes and slots of the removed ids (no change yet).
        let mut gone: Vec<(u32, u64)> = Vec::new();
        for seg in &self.segments {
            for (p, r) in seg.entries() {
                let h = seg.hash_at(p);
                if !keep(self.key_of_hash(h), r.slot) {
                    try_room(&mut gone)?;
                    gone.push((r.slot, h));
                }
            }
        }
        let k = gone.len();
        if k == 0 {
            return Ok(Vec::new());
        }
        let n = self.len;
        let new_len = n - k;
        let oom = |what: usize| IndexError::OutOfMemory {
            bytes: (what * size_of::<u32>()) as u64,
        };
        let mut steps: Vec<Removed> = Vec::new();
        steps.try_reserve_exact(k).map_err(|_| oom(3 * k))?;
        // Simulate the swap-removes in decreasing slot order. The last
        // position is always in the tail `new_len..n` (every removed slot
        // above the current one is gone already), so the tail's contents
        // (original slots) are all there is to track; `dest` gives the
        // final slot of each original tail slot that survives.
        let mut tail: Vec<u32> = Vec::new();
        tail.try_reserve_exact(k).map_err(|_| oom(k))?;
        tail.extend((new_len..n).map(|s| s as u32));
        let mut dest: Vec<u32> = Vec::new();
        dest.try_reserve_exact(k).map_err(|_| oom(k))?;
        dest.extend((new_len..n).map(|s| s as u32));
        gone.sort_unstable_by_key(|e| core::cmp::Reverse(e.0));
        let mut cur = n;
        for &(e, _) in &gone {
            let last = cur - 1;
            let e = e as usize;
            if e == last {
                steps.push(Removed {
                    slot: e as u32,
                    moved_from: None,
                });
            } else {
                let content = tail[last - new_len];
                if e >= new_len {
                    tail[e - new_len] = content;
                } else {
                    dest[content as usize - new_len] = e as u32;
                }
                steps.push(Removed {
                    slot: e as u32,
                    moved_from: Some(last as u32),
                });
            }
            cur -= 1;
        }
        // Nothing can fail from here on.
        for &(_, h) in &gone {
            if let Some((seg, p)) = self.locate_hash(h) {
                self.segments[seg].remove_at(p);
            }
        }
        for seg in &mut self.segments {
            for r in seg.recs.iter_mut() {
                if r.dist() != 0 && r.slot as usize >= new_len {
                    r.slot = dest[r.slot as usize - new_len];
                }
            }
        }
        self.len = new_len;
        Ok(steps)
    }

    /// Exact heap bytes: the segments' records (12 B per position), the
    /// directory and the segment list's capacity.
    pub fn memory_bytes(&self) -> usize {
        self.segments.iter().map(Segment::bytes).sum::<usize>()
            + self.segments.capacity() * size_of::<Segment>()
            + self.dir.capacity() * size_of::<u32>()
    }

    /// Checks every structural invariant (test and fuzz support): each
    /// entry sits in its segment (by its recovered hash) at its recorded
    /// distance from its home with its tag, Robin Hood order holds, the
    /// directory runs are aligned, slots are a bijection onto `0..len`.
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
            assert!(seg.cap() >= SEGMENT_MIN);
            let run = 1usize << (self.depth - seg.depth);
            let refs: Vec<usize> = (0..self.dir.len())
                .filter(|&d| self.dir[d] as usize == i)
                .collect();
            assert_eq!(refs.len(), run, "segment {i} directory run");
            assert_eq!(refs[0] % run, 0);
            assert_eq!((refs[0] / run) as u64, seg.prefix, "segment {i} prefix");
            assert!(refs.windows(2).all(|w| w[1] == w[0] + 1));
            let mut count = 0;
            for (p, r) in seg.entries() {
                count += 1;
                let d = r.dist() as usize;
                assert!((r.slot as usize) < self.len, "slot {} out of range", r.slot);
                assert!(!seen[r.slot as usize], "slot {} twice", r.slot);
                seen[r.slot as usize] = true;
                let h = seg.hash_at(p);
                assert_eq!(self.hash(self.key_of_hash(h)), h);
                assert_eq!(r.meta() >> 8, h & TAG_MASK, "tag");
                assert_eq!(self.dir[self.dir_of(h)] as usize, i, "wrong segment");
                let home = seg.home(h);
                assert_eq!((home + d - 1) % seg.cap(), p, "distance");
                // Robin Hood: the previous position is empty or no poorer by more than one.
                let prev = if p == 0 { seg.cap() - 1 } else { p - 1 };
                assert!(
                    seg.recs[prev].dist() + 1 >= d as u64,
                    "robin hood order at {p}"
                );
            }
            assert_eq!(count, seg.len);
            total += count;
        }
        assert_eq!(total, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sharing_a_home_fail_typed_and_change_nothing() {
        for x in [0u64, 1, 0xDEAD_BEEF_1234_5678, u64::MAX] {
            assert_eq!(mix64(unmix64(x)), x);
        }
        // Same top 32 bits (segment and home at any depth up to 23), other
        // low bits: one cluster.
        let keys: Vec<u64> = (0..400u64)
            .map(|i| unmix64(0x1234_5678 << 32 | i))
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
    fn hashes_are_recovered_at_every_depth_and_size() {
        // Deep directories (tiny segments) and large single segments both
        // give every id back.
        for max in [16usize, 300, 4096, SEGMENT_MAX] {
            let mut index = SlotIndex::with_segment_max(max as u64, max);
            let ids: Vec<u64> = (0..20_000u64)
                .map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ u64::MAX)
                .collect();
            for &id in &ids {
                index.try_insert(id).expect("fits");
            }
            index.check_invariants();
            let back: Vec<u64> = index.iter().map(|(id, _)| id).collect();
            assert_eq!(back, ids);
        }
    }

    #[test]
    fn sequential_and_strided_ids_split_and_keep_load() {
        for stride in [1u64, 1 << 32, 4096] {
            let mut index = SlotIndex::with_segment_max(0, 1024);
            for i in 0..50_000u64 {
                assert_eq!(index.try_insert(i * stride), Ok((i as u32, true)));
            }
            index.check_invariants();
            assert!(index.segments.len() > 32, "splits happened");
            let positions: usize = index.segments.iter().map(Segment::cap).sum();
            // Loads stay in [4/5 - rounding, 15/16] on average.
            assert!(positions * 10 < 50_000 * 13, "{positions} positions");
        }
    }
}
