//! [`SlotIndex`]: a compact `u64` id → `u32` slot index for tables of many
//! rows: ≈ 9–10 B per id including its slack (against ≈ 21–36 B for a
//! `hashbrown::HashMap<u64, u32>`), two bucket reads per lookup at most,
//! fallible growth without a 2× transient.
//!
//! # Layout: two-choice buckets of bit-packed records, no key array
//! - **Hash.** An id's hash is `h = mix64(id ^ seed)`, the SplitMix64
//!   finalizer: a *bijection* of `u64`, so `h` determines the id
//!   (`id = unmix64(h) ^ seed`) and the index stores hash bits, not ids.
//! - **Segments.** The top `depth` bits of `h` pick a segment through a
//!   directory (extendible hashing). A segment is a bucketized cuckoo table
//!   (two choices, buckets of [`BUCKET`] = 8 records; Fan, Andersen,
//!   Kaminsky, Mitzenmacher, "Cuckoo Filter", CoNEXT 2014; Li et al.,
//!   "Algorithmic improvements for fast concurrent cuckoo hashing" (the
//!   breadth-first cuckoo path search of libcuckoo), EuroSys 2014) filled
//!   to between ≈ 0.86 and 63/64. A segment that cannot place an id is
//!   rebuilt alone with 1/7 more buckets, or split in two once it would
//!   pass [`SEGMENT_MAX`] positions: growth never copies more than one
//!   segment (≈ 140 KiB) at a time.
//! - **Quotienting.** The 32 hash bits after the prefix (`x`) pick the
//!   first bucket `b1` by Lemire's reduction; the second bucket is
//!   `b1 + step(rest)` (mod the bucket count), `rest` being the low
//!   `32 − depth` hash bits and `step ∈ 1..buckets` a hash of them only, so
//!   that either bucket and the record give the other (the cuckoo filter's
//!   partial-key trick, made exact). A record keeps `rest`, the offset of
//!   `x` from the first `x` of `b1` (`32 − ⌊log2 buckets⌋` bits: the
//!   bucket number stands for the rest), one choice bit and the slot + 1
//!   in as many bits as the largest slot needs (0 = empty). The
//!   segment's prefix, the bucket and the record give `h` back exactly, so
//!   a lookup never loads a key; ids are recovered from records when a
//!   segment is rebuilt, for [`SlotIndex::iter`] and for removals.
//! - **Tags.** A bucket of 8 records of `w` bits is `w + 1` bytes: a
//!   9-byte header (a count byte, the records' 8 **tags**: 8 hash bits of
//!   each record, taken out of it, one byte each), kept with the other
//!   buckets' headers in one dense array (≈ 1.1 B per id), and the 8
//!   rest-of-records packed back to back in another. A lookup compares its tag with the 8 tags at once (one
//!   8-byte word, SWAR, masked by the count) and reads a record only on a
//!   tag match, so a miss reads two bucket headers and almost never a
//!   record (a false match is 1 in 256 per record), a hit one record more —
//!   hashbrown's control bytes, without its extra byte per entry.
//! - **Slot width** is per segment: a segment is re-encoded (same buckets,
//!   every record where it was, one more slot bit) the first time it must
//!   hold a slot that does not fit, so each segment widens once per
//!   doubling of the index — or earlier, for free, when a growth rebuild
//!   comes within 1/8 of needing the wider field.
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
//! id → slot index that can give the ids back, at every `N`. A record
//! here is `65 − depth − ⌊log2 buckets⌋ + slot bits` bits: the directory
//! and the bucket number stand for `≈ log2(N / 8)` hash bits and the slot
//! takes `≈ log2 N`, so `≈ 68–69` bits at any `N` from 10^5 to 10^9 —
//! 8.6 B per record, ≈ 9.3 B per id at the loads of a growing table
//! (measured below). The previous layout of this type (Robin Hood
//! segments of 12-byte records: 56-bit tag, distance, `u32` slot) took
//! 13.5–14.2 B per id.
//!
//! # Measured
//! `cargo bench -p basisopt-core --bench slot_index -- nomatch` (the
//! interleaved pass only; `SLOT_BENCH_N` = 10^6, then 10^7). Bytes per id
//! after growth (deterministic, exact: [`SlotIndex::memory_bytes`]): 9.24
//! at 10^6 ids, 9.48 at 10^7, against 35.65 and 28.52 for
//! `hashbrown::HashMap<u64, u32>`; the Robin Hood layout before took 14.21
//! / 13.49. Time, interleaved medians of 7 rounds on the shared 2-core
//! machine at load 8–12 (busy: ratios, not times, are the figure), one run
//! each: at 10^6 a hit costs 4.2× hashbrown's `get`, a miss 10×, a
//! Zipf-skewed hit 3.9×, building 5.7×; [`SlotIndex::get_many`] 1.8×
//! (hits), 8.6× (misses), 3.0× (Zipf). At 10^7: hit 3.5×, miss 9.7×,
//! `get_many` 2.5× (hits), 4.9× (misses), 2.7× (Zipf). A miss reads both
//! buckets' 16 records (hashbrown's mostly stops in its 1-byte control
//! group); building re-inserts each id ≈ 8 times over its segment's
//! rebuilds by 1/8 (the price of loads between 7/8 and 31/32).
//!
//! In the shard table's step (`cargo bench -p basisopt-shard --bench
//! step`: 1.16·10^6 rows, SGD, 8192 ids a step of which 10 % new;
//! `IdSlots` over this type with one `get_many_slots` per step, built
//! apart and run in turns with the hashbrown table, three pairs, medians of
//! 5 rounds, load 10–12): the step took 1.4–2.9× hashbrown's (medians
//! 24–52 ms against 13–18) with glibc's defaults and 1.4–1.7× (18–21
//! against 12.6–12.7) with glibc's mmap threshold pinned at 16 MiB (the allocator effect of
//! the step's ≈ 1 MB per-step buffers described in the previous layout's
//! notes: hashbrown's doubling frees large blocks and so raises glibc's
//! dynamic threshold; this index never frees more than ≈ 200 KiB). Its
//! index is 9.64 B/row there (hashbrown 30.63) and, at 4.16·10^6 rows with
//! BASIS state, it brings the process RSS to 145.0 B/row (f32 rows) and
//! 80.9 (bf16) against 167.6 and 103.7 (two runs each, the same figures).
//! The shard table keeps hashbrown until an index is as fast in the step:
//! per new id the step pays a miss, an insertion and ≈ 8 re-insertions.
//!
//! With tags and the dense header run (this layout; same bytes: 9.24 B/id
//! at 10^6), one interleaved run on the shared machine at load 5.5–7.4
//! (busy: noisy ratios, not quiet figures): hit 2.9× hashbrown's `get`,
//! miss 0.46×, Zipf 0.90×, `get_many` 2.8× (hits) / 11.7× (misses) /
//! 1.45× (Zipf), building 9.3×. The table's step (same bench as above,
//! three interleaved pairs, load ≈ 5.5–7): hashbrown 7.9 / 8.2 / 11.5 ms,
//! `SlotIndex` 18.4 / 18.6 / 18.8 ms — still ≈ 2.2×. A profile of a whole
//! step-bench run (its build phase included) puts `get_many_slots` at
//! ≈ 11 % and segment growth (`insert`, `set`, `hash_of`: the ≈ 9
//! re-insertions per new id of growing by 1/8) at ≈ 21 %: growth, not the
//! probe, is what is left to make cheap.
//!
//! Since then (sessions 11–12, same layout and bytes): the less loaded
//! bucket takes a new record, a cuckoo path of one move is tried before
//! the breadth-first search (`kick_one`), and a segment's growth refills
//! in one fused loop (`refill_from`). The step bench at 3·10^5 rows is
//! 1.21× hashbrown's instructions, growth 77 % of the extra, lookups 24 %
//! (`docs/BENCHMARKS.md`, "The compact index in the table's step").
//! Session 19 (same bytes): [`SlotIndex::try_insert_absent`] for ids the
//! caller has just looked up, `kick_one` without per-record calls, tag
//! matches in `get_many`'s first pass, and slot-width rebuilds that
//! re-encode in place (`widen_from`). That is 1.18× growing (7.34 against
//! 6.23·10^9) and 1.14× steady (6.91 against 6.05·10^9), step time
//! ≈ 1.30× / 1.18× on a busy machine.
//! Session 20: counted, 85 % of the re-insertions are growth by 1/8,
//! splits 15 %. Now segments fill to 63/64 and grow by 1/7 (fewer bytes
//! and ≈ 12 % fewer re-insertions), cuckoo paths of two moves skip the
//! breadth-first search (`kick_two`, same layout), lookups no longer mask
//! tags by the bucket's count, and a growth rebuild takes the slot width
//! of 1/8 more slots. That is 1.16× growing (7.23 against 6.23·10^9) and
//! 1.13× steady (6.82 against 6.05·10^9) in instructions, at 9.32 / 9.65
//! B/row in the bench and 9.50 B/id mean over a growth cycle.
//!
//! Every allocation is fallible: growing returns [`IndexError::OutOfMemory`]
//! and leaves the index as it was. [`SlotIndex::memory_bytes`] is the exact sum
//! of the allocations' sizes.
//!
//! # Adversarial ids
//! The layout is a pure function of the ids and the seed: sequential,
//! strided and clustered ids spread evenly, and the layout (hence memory)
//! is reproducible. The mixer is not a keyed cryptographic hash: someone
//! who knows the seed can pick ids that share both buckets. An id that
//! finds no place after its segment grew 12 times (17 ids on
//! the same two buckets, which random ids practically never produce) makes
//! the insertion fail with [`IndexError::Clustered`] (no id or slot
//! changed; the segment stays grown) instead of degrading; a service
//! facing hostile ids picks a secret seed ([`SlotIndex::with_seed`]).
//!
//! # How a row store uses this
//! A row store keeps row `s` at `rows[s * dim ..]` and asks
//! [`SlotIndex::try_insert`] for the slot of an id (a new id gets slot `len`,
//! so the store appends its row); a lookup is [`SlotIndex::get`] or, for a
//! batch, [`SlotIndex::get_many`]. Evicting ids is [`SlotIndex::retain`]:
//! it returns the removals as a sequence of swap-removes ([`Removed`]) that
//! the store replays on its rows (and its optimizer state) to stay dense.
//! Checkpoints write [`SlotIndex::iter`]'s `(id, slot)` pairs (slot order).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::mem::size_of;

use crate::quant::mix64;

/// Largest segment (positions) before a full one splits in two instead of
/// growing: 16 Ki positions (2 Ki buckets of 8), ≈ 140 KiB at 10^6–10^7
/// ids.
pub const SEGMENT_MAX: usize = 1 << 14;
/// Smallest segment: two buckets of [`BUCKET`] records (a record's second
/// choice must be another bucket).
pub const SEGMENT_MIN: usize = 2 * BUCKET;
/// Records per bucket: a bucket of 8 records of `w` bits is exactly `w`
/// bytes.
pub const BUCKET: usize = 8;
/// Keys [`SlotIndex::get_many`] hashes and loads before probing them: enough
/// independent loads to keep the core's miss buffers busy, few enough that
/// their lines are still in L1 when probed.
pub const BATCH: usize = 32;
/// A full segment grows by `1/GROWTH` of its buckets (at least): each
/// rebuild re-inserts the whole segment, so an id is re-inserted
/// ≈ `GROWTH + 1` times over a table's growth, and a segment's load runs
/// from ≈ `LOAD_MAX · GROWTH/(GROWTH + 1)` up to [`LOAD_MAX`] between
/// rebuilds. 7 with `LOAD_MAX` 63/64 (session 20) takes fewer bytes per
/// id than 8 with 31/32 did (mean 9.48 against 9.56 B/id over a growth
/// cycle) and re-inserts ≈ 12 % fewer ids.
pub(crate) const GROWTH: usize = 7;
/// Highest load of a segment, `LOAD_MAX.0 / LOAD_MAX.1`: an insertion
/// past it grows the segment. At 63/64, two-choice buckets of 8 still
/// place nearly every id with a cuckoo path of one or two moves
/// (`kick_one`, `kick_two`).
const LOAD_MAX: (usize, usize) = (63, 64);
/// Deepest directory: the directory uses the top bits of the hash, the
/// bucket choice the next 32, and the two must fit in 64.
const MAX_DEPTH: u32 = 32;
/// Buckets a cuckoo path search visits at most before the segment grows.
const MAX_BFS: usize = 512;
/// Rebuilds one insertion may cause before it gives up as
/// [`IndexError::Clustered`].
const MAX_GROWTHS: u32 = 12;
/// Bytes after the last bucket, so that a 16-byte read at any record start
/// stays inside the allocation.
const PAD: usize = 16;
/// Bytes of a bucket's header: its record count, then its records' tags
/// (one byte each).
const HEAD: usize = 1 + BUCKET;
/// `0x01` in every byte (SWAR byte broadcast and borrow).
const ONES: u64 = 0x0101_0101_0101_0101;
/// `0x80` in every byte (SWAR zero-byte flags).
const HIGHS: u64 = 0x8080_8080_8080_8080;

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
    /// No place for the id after the segment it falls in grew several
    /// times: more than 16 ids share both buckets, which only ids chosen
    /// against the seed do (see the module docs).
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
                "id {key} shares both its buckets with 16 others (adversarial ids? use a secret seed)"
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

/// Bits that hold `v` (0 for 0).
fn bit_len(v: u64) -> u32 {
    64 - v.leading_zeros()
}

/// Slot bits a segment needs to hold slot `slot` (stored as `slot + 1`,
/// so that 0 marks an empty record).
fn slot_bits_for(slot: u32) -> u32 {
    bit_len(u64::from(slot) + 1)
}

/// Buckets for `n` entries at load 7/8 (at least two).
fn buckets_for(n: usize) -> usize {
    n.div_ceil(BUCKET - 1).max(SEGMENT_MIN / BUCKET)
}

/// Why a segment could not be built: an allocation, or an entry that
/// found no place.
enum BuildError {
    Oom(IndexError),
    Stuck,
}

/// Where a hash lives in a segment, for a cuckoo path search: its two
/// buckets and its whole record with the choice bit clear (see
/// [`Segment::probe`]; lookups and direct insertions use [`Lookup`]).
#[derive(Clone, Copy)]
struct Probe {
    b1: usize,
    b2: usize,
    /// The record's key part shifted above the slot bits, choice 0.
    want: u128,
}

/// Where a hash lives in a segment, for a lookup: the two buckets, the
/// tag, and the key part of the record's body in `u64` (a lookup compares
/// that and reads the slot apart, no `u128` record: see
/// [`Segment::find_key`]).
#[derive(Clone, Copy, Default)]
struct Lookup {
    b1: u32,
    b2: u32,
    tag: u8,
    /// The body's bits above the slot, with choice 0: the choice bit, then
    /// the key bits above the tag (at most 56 bits).
    key: u64,
}

/// One table of `nb` buckets of [`BUCKET`] bit-packed records.
///
/// A record is the slot + 1 (`slot_bits` bits, 0 for an empty record)
/// and its key part: the choice bit (0 in the first bucket, 1 in the
/// second), the 32 − `depth` low hash bits (`rest`), and `off_bits` bits
/// that with the first bucket give the hash's 32 bucket bits back (see
/// [`probe`](Self::probe)), from its low bit. A bucket keeps its records
/// first, empties after. It is `width + 1` bytes: a header of [`HEAD`]
/// bytes at the front of `data` (its record count, the 8 records' **tags**: the 8 key
/// bits above the choice bit, one byte each) and `width − 8` bytes in
/// `data` (the 8 records' **bodies**: the rest of each record, slot,
/// choice bit, remaining key bits; `width − 8` bits each, back to back). A
/// lookup compares the 8 tags at once (one 8-byte word, SWAR) and reads a
/// body only on a tag match: a miss reads two bucket headers in the dense
/// header array, a hit one body more (hashbrown's control-byte scheme, with the
/// tag bits taken out of the record rather than added to it: no byte more
/// per id).
#[derive(Clone)]
struct Segment {
    /// Top hash bits this segment owns (extendible hashing's local depth).
    depth: u32,
    /// Their value.
    prefix: u64,
    /// Buckets.
    nb: usize,
    len: usize,
    slot_bits: u32,
    off_bits: u32,
    /// Bits per record: `slot_bits + 1 + (32 - depth) + off_bits`.
    width: u32,
    /// Body bytes per bucket: `width − 8` (8 bodies of `width − 8` bits).
    stride: usize,
    /// [`HEAD`] bytes per bucket (its count, its 8 tags), apart from the
    /// bodies: a miss reads this dense part only (≈ 1.1 B per id, which
    /// stays in cache where the bodies do not); then `nb * stride` bytes
    /// of bodies (from byte `body0`), then [`PAD`] zero bytes. One
    /// allocation.
    data: Box<[u8]>,
    /// `nb * HEAD`: where the bodies start.
    body0: usize,
}

impl Segment {
    fn new(depth: u32, prefix: u64, nb: usize, slot_bits: u32) -> Result<Self, IndexError> {
        debug_assert!(nb >= 2 && depth <= MAX_DEPTH && slot_bits <= 32);
        // A bucket covers at most ceil(2^32 / nb) ≤ 2^(32 - floor(log2 nb))
        // values of the 32 bucket bits.
        let off_bits = 32 - (bit_len(nb as u64) - 1).min(32);
        let width = slot_bits + 1 + (32 - depth) + off_bits;
        let stride = width as usize - 8;
        let body0 = nb
            .checked_mul(HEAD)
            .ok_or(IndexError::OutOfMemory { bytes: u64::MAX })?;
        let bytes = nb
            .checked_mul(stride)
            .and_then(|b| b.checked_add(PAD + body0))
            .ok_or(IndexError::OutOfMemory { bytes: u64::MAX })?;
        // A body's key part: the choice bit and the key bits above the
        // tag, `1 + (32 − depth) + off_bits − 8 ≤ 56` bits (`off_bits ≤ 31`
        // with at least two buckets): with a shift below 8 it fits a `u64`.
        debug_assert!(width - 8 - slot_bits <= 56);
        Ok(Self {
            depth,
            prefix,
            nb,
            len: 0,
            slot_bits,
            off_bits,
            width,
            stride,
            data: try_boxed(bytes, 0u8)?,
            body0,
        })
    }

    fn cap(&self) -> usize {
        self.nb * BUCKET
    }

    /// Whether one more entry keeps the load at most [`LOAD_MAX`].
    fn has_room(&self) -> bool {
        (self.len + 1) * LOAD_MAX.1 <= self.cap() * LOAD_MAX.0
    }

    fn slot_fits(&self, slot: u32) -> bool {
        slot_bits_for(slot) <= self.slot_bits
    }

    /// Mask of the low `32 − depth` hash bits (computed, not stored: a
    /// segment's size is counted in `memory_bytes`).
    #[inline]
    fn rest_mask(&self) -> u64 {
        (1u64 << (32 - self.depth)) - 1
    }

    /// Mask of a body's key part above its slot (choice bit and key bits
    /// above the tag, at most 56).
    #[inline]
    fn key_mask(&self) -> u64 {
        (1u64 << (self.width - 8 - self.slot_bits)) - 1
    }

    /// Mask of the slot field.
    #[inline]
    fn slot_mask(&self) -> u64 {
        (1u64 << self.slot_bits) - 1
    }

    /// The low `32 - depth` hash bits.
    #[inline]
    fn rest_of(&self, h: u64) -> u64 {
        h & self.rest_mask()
    }

    /// Distance of the second bucket from the first, in `1..nb`: a
    /// function of the stored `rest` bits only, so that either bucket
    /// gives the other.
    #[inline]
    fn step(&self, rest: u64) -> usize {
        let r = (rest.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) & 0xFFFF_FFFF;
        1 + ((r * (self.nb as u64 - 1)) >> 32) as usize
    }

    /// [`lookup`](Self::lookup) with the whole record (choice 0, slot 0):
    /// what a cuckoo path search moves.
    fn probe(&self, h: u64) -> Probe {
        let l = self.lookup(h);
        let key = (l.key >> 1) << 8 | u64::from(l.tag);
        Probe {
            b1: l.b1 as usize,
            b2: l.b2 as usize,
            want: u128::from(key) << (self.slot_bits + 1),
        }
    }

    /// The two buckets of hash `h` and its record's key part: the 32 bits
    /// `x` after the prefix pick the first bucket (Lemire's reduction: the
    /// high half of `x · nb`), the record keeps the top `off_bits` bits of
    /// that product's low half (which with the bucket give `x` back, see
    /// [`hash_of`](Self::hash_of)) and the low hash bits. In `u64`: the key
    /// part `off · 2^(32 − depth) + rest` has `off_bits + 32 − depth ≤ 63`
    /// bits. (Bucket numbers fit a `u32`: a segment of 2^32 buckets would
    /// hold 2^35 records.)
    #[inline]
    fn lookup(&self, h: u64) -> Lookup {
        let x = (h << self.depth) >> 32;
        let prod = x * self.nb as u64;
        let b1 = (prod >> 32) as usize;
        let rest = self.rest_of(h);
        let off = (prod & 0xFFFF_FFFF) >> (32 - self.off_bits);
        let mut b2 = b1 + self.step(rest);
        if b2 >= self.nb {
            b2 -= self.nb;
        }
        let key = off << (32 - self.depth) | rest;
        Lookup {
            b1: b1 as u32,
            b2: b2 as u32,
            tag: key as u8,
            key: (key >> 8) << 1,
        }
    }

    /// 8 bytes of `data` from `at`, little-endian (inside: [`PAD`]).
    #[inline]
    fn load8(&self, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.data[at..at + 8]);
        u64::from_le_bytes(w)
    }

    /// The record and slot of the entry with tag `tag` and body key part
    /// `key` (choice bit included) in bucket `b`: the 8 tags are compared
    /// at once (SWAR zero-byte test on `tags ^ broadcast(tag)`; its rare
    /// false flags, in a byte above a true match, are weeded out by the key
    /// compare; so are flags on records past the count, see
    /// [`tag_matches`](Self::tag_matches)), and only flagged records are
    /// read — in `u64`, no record reassembled: a flagged
    /// record's key part (≤ 56 bits at a shift below 8) is one 8-byte
    /// load, its slot (≤ 32 bits) another.
    #[inline]
    fn find_key(&self, b: usize, tag: u8, key: u64) -> Option<(usize, u32)> {
        self.find_in(b, self.tag_matches(b, tag), key)
    }

    /// The records of bucket `b` whose tag may be `tag`: the high bit of
    /// byte `j` set for record `j` (SWAR zero-byte test; see
    /// [`find_key`](Self::find_key)). Not masked by the bucket's count:
    /// records past the count are all zero bits (tag 0, slot field 0), so a
    /// flag on one (a query of tag 0) is weeded out by the key compare, or
    /// ends the bucket's search at its empty slot field
    /// ([`find_in`](Self::find_in)) after every record before it was
    /// compared. The count's load and mask cost ≈ 8 instructions a bucket,
    /// two buckets a lookup.
    #[inline]
    fn tag_matches(&self, b: usize, tag: u8) -> u64 {
        let x = self.load8(b * HEAD + 1) ^ (u64::from(tag) * ONES);
        x.wrapping_sub(ONES) & !x & HIGHS
    }

    /// [`find_key`](Self::find_key) over the flagged records `m` of bucket
    /// `b` ([`tag_matches`](Self::tag_matches)).
    #[inline]
    fn find_in(&self, b: usize, mut m: u64, key: u64) -> Option<(usize, u32)> {
        let bits = self.body_bits() as usize;
        let first = (self.body0 * 8) + b * (self.stride * 8);
        while m != 0 {
            let j = (m.trailing_zeros() / 8) as usize;
            let bit = first + j * bits;
            let kbit = bit + self.slot_bits as usize;
            if (self.load8(kbit / 8) >> (kbit % 8)) & self.key_mask() == key {
                let s = (self.load8(bit / 8) >> (bit % 8)) & self.slot_mask();
                return Some((j, (s as u32).checked_sub(1)?));
            }
            m &= m - 1;
        }
        None
    }

    /// `(bucket, record, slot)` of a computed lookup: the second bucket is
    /// read only when the first does not hold the record.
    #[inline]
    fn find_lookup(&self, p: Lookup) -> Option<(usize, usize, u32)> {
        let (b1, b2) = (p.b1 as usize, p.b2 as usize);
        if let Some((j, s)) = self.find_key(b1, p.tag, p.key) {
            return Some((b1, j, s));
        }
        self.find_key(b2, p.tag, p.key | 1).map(|(j, s)| (b2, j, s))
    }

    /// Bits of a record's body (all but its tag byte): at most 88.
    #[inline]
    fn body_bits(&self) -> u32 {
        self.width - 8
    }

    /// First bit of record `j`'s body in bucket `b`, and its byte and shift.
    #[inline]
    fn body_at(&self, b: usize, j: usize) -> (usize, u32) {
        let bit = (self.body0 + b * self.stride) * 8 + j * self.body_bits() as usize;
        (bit / 8, (bit % 8) as u32)
    }

    #[inline]
    fn load16(&self, at: usize) -> u128 {
        let mut w = [0u8; 16];
        w.copy_from_slice(&self.data[at..at + 16]);
        u128::from_le_bytes(w)
    }

    /// Body of record `j` of bucket `b`: one 16-byte load (a body and its
    /// shift take at most 95 bits; [`PAD`] keeps the last one inside).
    #[inline]
    fn body(&self, b: usize, j: usize) -> u128 {
        let (at, sh) = self.body_at(b, j);
        (self.load16(at) >> sh) & ((1u128 << self.body_bits()) - 1)
    }

    fn set_body(&mut self, b: usize, j: usize, v: u128) {
        let (at, sh) = self.body_at(b, j);
        let mask = ((1u128 << self.body_bits()) - 1) << sh;
        let w = (self.load16(at) & !mask) | (v << sh);
        self.data[at..at + 16].copy_from_slice(&w.to_le_bytes());
    }

    /// Record `j` of bucket `b`: key part above the slot bits (its tag put
    /// back between the choice bit and the body's key bits).
    #[inline]
    fn rec(&self, b: usize, j: usize) -> u128 {
        let low = self.slot_bits + 1;
        let v = self.body(b, j);
        let tag = u128::from(self.data[b * HEAD + 1 + j]);
        (v & ((1u128 << low) - 1)) | tag << low | (v >> low) << (low + 8)
    }

    /// Or-s `v` (at most 57 bits) into the body bits from bit `bit` on.
    #[inline]
    fn or_bits(&mut self, bit: usize, v: u64) {
        let at = bit / 8;
        let w = self.load8(at) | v << (bit % 8);
        self.data[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }

    /// Writes tag `tag`, body key part `key` (choice bit included, as
    /// [`Lookup::key`]) and slot field `s1` (slot + 1) into record `j` of
    /// bucket `b`, which is empty (records past a bucket's count are all
    /// zero bits, see [`remove_at`](Self::remove_at)): or-ed in, no mask,
    /// in `u64` (the slot and the key part are two 8-byte read-modify-
    /// writes).
    #[inline]
    fn put(&mut self, b: usize, j: usize, tag: u8, key: u64, s1: u64) {
        self.data[b * HEAD + 1 + j] = tag;
        let bit = (self.body0 * 8) + b * (self.stride * 8) + j * self.body_bits() as usize;
        self.or_bits(bit, s1);
        self.or_bits(bit + self.slot_bits as usize, key);
    }

    fn set(&mut self, b: usize, j: usize, r: u128) {
        let low = self.slot_bits + 1;
        self.data[b * HEAD + 1 + j] = (r >> low) as u8;
        self.set_body(b, j, (r & ((1u128 << low) - 1)) | (r >> (low + 8)) << low);
    }

    #[inline]
    fn slot_of(&self, r: u128) -> Option<u32> {
        let s = (r & ((1u128 << self.slot_bits) - 1)) as u32;
        s.checked_sub(1)
    }

    /// Records in bucket `b`.
    #[inline]
    fn count(&self, b: usize) -> usize {
        usize::from(self.data[b * HEAD])
    }

    /// Adds `d` (±1) to bucket `b`'s record count.
    fn add_count(&mut self, b: usize, d: i8) {
        let c = &mut self.data[b * HEAD];
        *c = c.wrapping_add_signed(d);
    }

    /// `(bucket, record, slot)` of hash `h`.
    #[inline]
    fn find(&self, h: u64) -> Option<(usize, usize, u32)> {
        self.find_lookup(self.lookup(h))
    }

    /// The other bucket of record `r` held in bucket `b`, and `r` with its
    /// choice bit flipped (the record as it reads there).
    fn other(&self, b: usize, r: u128) -> (usize, u128) {
        let c = 1u128 << self.slot_bits;
        let rest = ((r >> (self.slot_bits + 1)) as u64) & ((1u64 << (32 - self.depth)) - 1);
        let d = self.step(rest);
        let o = if r & c == 0 { b + d } else { b + self.nb - d };
        let o = if o >= self.nb { o - self.nb } else { o };
        (o, r ^ c)
    }

    /// The other bucket of record `j` of bucket `b` (a cuckoo search's
    /// step): [`other`](Self::other) read as `find_key` reads, in `u64`
    /// (the key part's `rest` bits and its choice bit; no record
    /// reassembled).
    #[inline]
    fn other_of(&self, b: usize, j: usize) -> usize {
        let bit = (self.body0 * 8)
            + b * (self.stride * 8)
            + j * self.body_bits() as usize
            + self.slot_bits as usize;
        let kp = (self.load8(bit / 8) >> (bit % 8)) & self.key_mask();
        let key = (kp >> 1) << 8 | u64::from(self.data[b * HEAD + 1 + j]);
        let d = self.step(key & self.rest_mask());
        let o = if kp & 1 == 0 { b + d } else { b + self.nb - d };
        if o >= self.nb { o - self.nb } else { o }
    }

    /// The full hash of record `r` held in bucket `b`.
    fn hash_of(&self, b: usize, r: u128) -> u64 {
        let c = 1u128 << self.slot_bits;
        self.hash_of_key(b, (r >> (self.slot_bits + 1)) as u64, r & c != 0)
    }

    /// The full hash of the record with key part `key` (the record above
    /// its choice bit) and choice bit `second` held in bucket `b`.
    #[inline]
    fn hash_of_key(&self, b: usize, key: u64, second: bool) -> u64 {
        let rest_bits = 32 - self.depth;
        let rest = key & self.rest_mask();
        let b1 = if second {
            // The first bucket is `step(rest)` before the second.
            let d = self.step(rest);
            if b >= d { b - d } else { b + self.nb - d }
        } else {
            b
        };
        let off = (key >> rest_bits) & ((1u64 << self.off_bits) - 1);
        // x · nb lies in [b1 · 2^32 + off · 2^t, + 2^t) with 2^t ≤ nb
        // (t = 32 − off_bits = ⌊log2 nb⌋): one multiple of nb, the first.
        let x = ((b1 as u64) << 32 | off << (32 - self.off_bits)).div_ceil(self.nb as u64);
        let top = if self.depth == 0 {
            0
        } else {
            self.prefix << (64 - self.depth)
        };
        top | x << rest_bits | rest
    }

    /// Calls `f(hash, slot)` for every entry, bucket by bucket, until it
    /// returns `false`; `false` then. Reads each record's tag and body
    /// apart (no record reassembled): the rebuild's pass.
    fn each_hashed(&self, mut f: impl FnMut(u64, u32) -> bool) -> bool {
        let bits = self.body_bits() as usize;
        for b in 0..self.nb {
            let first = (self.body0 * 8) + b * (self.stride * 8);
            for j in 0..self.count(b) {
                // As `find_key` reads a record: key part, then slot.
                let bit = first + j * bits;
                let kbit = bit + self.slot_bits as usize;
                let kp = (self.load8(kbit / 8) >> (kbit % 8)) & self.key_mask();
                let s1 = (self.load8(bit / 8) >> (bit % 8)) & self.slot_mask();
                let tag = u64::from(self.data[b * HEAD + 1 + j]);
                let key = (kp >> 1) << 8 | tag;
                let slot = (s1 as u32).wrapping_sub(1);
                if !f(self.hash_of_key(b, key, kp & 1 == 1), slot) {
                    return false;
                }
            }
        }
        true
    }

    /// Places `slot` (hash `h`, known absent, `slot` fits, room checked):
    /// a free record in either bucket, else a breadth-first search for a
    /// cuckoo path (entries moved to their other bucket) to a free record.
    /// `false` (nothing changed) when no path of [`MAX_BFS`] buckets is
    /// found.
    #[inline]
    fn insert(&mut self, h: u64, slot: u32) -> bool {
        let l = self.lookup(h);
        // The less loaded of the two buckets (the first on a tie): placing
        // first-bucket-first left the first buckets full and sent ≈ 7 % of
        // the step bench's insertions (mostly a rebuild's) to a cuckoo
        // path search of ≈ 1 000 instructions; balanced buckets rarely
        // are both full below 31/32. A hit then reads the second bucket
        // somewhat more often.
        let (b1, b2) = (l.b1 as usize, l.b2 as usize);
        let (n1, n2) = (self.count(b1), self.count(b2));
        let (b, n, key) = if n2 < n1 {
            (b2, n2, l.key | 1)
        } else {
            (b1, n1, l.key)
        };
        if n < BUCKET {
            self.put(b, n, l.tag, key, u64::from(slot) + 1);
            self.add_count(b, 1);
            self.len += 1;
            return true;
        }
        self.insert_cuckoo(h, slot)
    }

    /// [`insert`](Self::insert)'s path when both buckets are full, out of
    /// line: inlined, its node arrays made every insertion (most of them a
    /// rebuild's, into a bucket with room) save and restore a large stack
    /// frame — ≈ 23 instructions a call in the step bench's profile.
    #[cold]
    #[inline(never)]
    fn insert_cuckoo(&mut self, h: u64, slot: u32) -> bool {
        // A path of one move first, in the order the breadth-first search
        // visits records (the first bucket's, then the second's), so the
        // layout is the one the search would make: most searches in the
        // step bench ended there (≈ 2 records looked at per search), yet
        // paid for the node array and the `u128` path shift (≈ 840
        // instructions a search).
        let l = self.lookup(h);
        let s1 = u64::from(slot) + 1;
        if self.kick_one(l.b1 as usize, l.tag, l.key, s1)
            || self.kick_one(l.b2 as usize, l.tag, l.key | 1, s1)
        {
            return true;
        }
        // Then paths of two moves, in the search's order too (the first
        // bucket's children, then the second's).
        if self.kick_two(l.b1 as usize, l.tag, l.key, s1)
            || self.kick_two(l.b2 as usize, l.tag, l.key | 1, s1)
        {
            return true;
        }
        let p = self.probe(h);
        let rec = p.want | u128::from(slot + 1);
        // Most paths are short: a search over a few buckets first (its
        // node array is cheap to set up; 12 KiB for the full one), the
        // full search when it finds none. Both visit buckets in the same
        // order, so the small one finds the path the full one would.
        self.cuckoo::<16>(p, rec) || self.cuckoo::<MAX_BFS>(p, rec)
    }

    /// Moves the first record of full bucket `b` whose other bucket has
    /// room there, and writes the record (tag `tag`, body key part `key`
    /// with its choice bit, slot field `s1`) in its place: a cuckoo path of
    /// one move, read and written in `u64` as [`find_key`](Self::find_key)
    /// and [`put`](Self::put) do. `false` (nothing changed) when every
    /// record's other bucket is full.
    fn kick_one(&mut self, b: usize, tag: u8, key: u64, s1: u64) -> bool {
        // `other_in` for each record, inlined so the segment's constants
        // stay hoisted out of the loop, with the bucket's 8 tags (one load)
        // in a local: `other_of` called out of line per record cost ≈ 66
        // instructions a record in the step bench.
        let tags = self.load8(b * HEAD + 1);
        for j in 0..BUCKET {
            let (o, kp, t) = self.other_in(b, j, tags);
            let n = self.count(o);
            if n < BUCKET {
                let old = self.slot_field(b, j);
                // Its choice bit flips: it is the other bucket's record now.
                self.put(o, n, t, kp ^ 1, old);
                self.add_count(o, 1);
                self.set_body(b, j, 0);
                self.put(b, j, tag, key, s1);
                self.len += 1;
                return true;
            }
        }
        false
    }

    /// The bucket record `j` of bucket `b` reads as its other one (as
    /// [`other_of`](Self::other_of)), with its key part and tag: `kick_one`'s
    /// and `kick_two`'s step. Always inlined: with `#[inline]` alone,
    /// `kick_one`'s unrolled loop kept one call out of line (+10.8·10^6
    /// instructions in the growing step bench).
    #[inline(always)]
    fn other_in(&self, b: usize, j: usize, tags: u64) -> (usize, u64, u8) {
        let kbit = (self.body0 * 8)
            + b * (self.stride * 8)
            + j * self.body_bits() as usize
            + self.slot_bits as usize;
        let kp = (self.load8(kbit / 8) >> (kbit % 8)) & self.key_mask();
        let t = (tags >> (8 * j)) as u8;
        let d = self.step(((kp >> 1) << 8 | u64::from(t)) & self.rest_mask());
        let o = if kp & 1 == 0 { b + d } else { b + self.nb - d };
        let o = if o >= self.nb { o - self.nb } else { o };
        debug_assert_eq!(o, self.other_of(b, j));
        (o, kp, t)
    }

    /// The slot field (slot + 1) of record `j` of bucket `b`.
    #[inline]
    fn slot_field(&self, b: usize, j: usize) -> u64 {
        let bit = (self.body0 * 8) + b * (self.stride * 8) + j * self.body_bits() as usize;
        (self.load8(bit / 8) >> (bit % 8)) & self.slot_mask()
    }

    /// A cuckoo path of two moves from full bucket `b`, whose records'
    /// other buckets are all full (`kick_one` found none with room): for
    /// record `j` of `b` (in order) and record `k` of its other bucket `o`
    /// (in order), the first whose other bucket `o2` has room. `k` moves to
    /// `o2`, `j` into `k`'s place, and the new record (tag `tag`, body key
    /// part `key` with its choice bit, slot field `s1`) into `j`'s: the
    /// path the breadth-first search finds first among its second-level
    /// nodes, so the same layout, without its node array and `u128`
    /// records. `o2` has room, so it is neither `b` nor `o` (both full):
    /// the path is simple, as the search requires. `false` (nothing
    /// changed) when there is no such path.
    fn kick_two(&mut self, b: usize, tag: u8, key: u64, s1: u64) -> bool {
        let tags = self.load8(b * HEAD + 1);
        for j in 0..BUCKET {
            let (o, kp, t) = self.other_in(b, j, tags);
            let otags = self.load8(o * HEAD + 1);
            for k in 0..BUCKET {
                let (o2, kp2, t2) = self.other_in(o, k, otags);
                let n = self.count(o2);
                if n < BUCKET {
                    debug_assert!(o2 != b && o2 != o);
                    // Each moved record's choice bit flips.
                    let s2 = self.slot_field(o, k);
                    self.put(o2, n, t2, kp2 ^ 1, s2);
                    self.add_count(o2, 1);
                    let s = self.slot_field(b, j);
                    self.set_body(o, k, 0);
                    self.put(o, k, t, kp ^ 1, s);
                    self.set_body(b, j, 0);
                    self.put(b, j, tag, key, s1);
                    self.len += 1;
                    return true;
                }
            }
        }
        false
    }

    /// The breadth-first cuckoo path search of [`insert`](Self::insert)
    /// over at most `N` buckets.
    fn cuckoo<const N: usize>(&mut self, p: Probe, rec: u128) -> bool {
        let c = 1u128 << self.slot_bits;
        // Nodes: (bucket, parent node, record of the parent's bucket that
        // would move here).
        let mut nodes = [(0usize, usize::MAX, 0usize); N];
        nodes[0] = (p.b1, usize::MAX, 0);
        nodes[1] = (p.b2, usize::MAX, 0);
        let mut n = 2;
        let mut i = 0;
        while i < n {
            let b = nodes[i].0;
            for j in 0..BUCKET {
                let o = self.other_of(b, j);
                let free = self.count(o);
                if free < BUCKET {
                    if self.path_is_simple(&nodes, i, o) {
                        self.shift_path(&nodes, i, j, o, free);
                        let root = self.root_of(&nodes, i);
                        let hole = self.hole_of(&nodes, i, j);
                        let r = if nodes[root].0 == p.b1 { rec } else { rec | c };
                        self.set(nodes[root].0, hole, r);
                        self.len += 1;
                        return true;
                    }
                } else if n < N {
                    nodes[n] = (o, i, j);
                    n += 1;
                }
            }
            i += 1;
        }
        false
    }

    /// Whether the buckets from node `i` back to its root and `end` are
    /// all different (a path through a bucket twice would move a record
    /// that an earlier move replaced).
    fn path_is_simple(&self, nodes: &[(usize, usize, usize)], mut i: usize, end: usize) -> bool {
        let mut seen = [end; 16];
        let mut k = 1;
        loop {
            let b = nodes[i].0;
            if seen[..k].contains(&b) || k == seen.len() {
                return false;
            }
            seen[k] = b;
            k += 1;
            if nodes[i].1 == usize::MAX {
                return true;
            }
            i = nodes[i].1;
        }
    }

    fn root_of(&self, nodes: &[(usize, usize, usize)], mut i: usize) -> usize {
        while nodes[i].1 != usize::MAX {
            i = nodes[i].1;
        }
        i
    }

    /// The record of the root bucket that the path from node `i` (record
    /// `j` of its bucket moving out) frees.
    fn hole_of(&self, nodes: &[(usize, usize, usize)], mut i: usize, mut j: usize) -> usize {
        while nodes[i].1 != usize::MAX {
            j = nodes[i].2;
            i = nodes[i].1;
        }
        j
    }

    /// Moves record `j` of node `i`'s bucket to record `free` of bucket
    /// `end`, then each record of the path into the place its successor
    /// left, back to the root (whose record is left to be overwritten).
    fn shift_path(
        &mut self,
        nodes: &[(usize, usize, usize)],
        mut i: usize,
        j: usize,
        end: usize,
        free: usize,
    ) {
        let (b, r) = (nodes[i].0, self.rec(nodes[i].0, j));
        let (o, moved) = self.other(b, r);
        debug_assert_eq!(o, end);
        self.set(end, free, moved);
        self.add_count(end, 1);
        let mut hole = j;
        while nodes[i].1 != usize::MAX {
            let (b, parent, pj) = nodes[i];
            let pb = nodes[parent].0;
            let (o, moved) = self.other(pb, self.rec(pb, pj));
            debug_assert_eq!(o, b);
            self.set(b, hole, moved);
            hole = pj;
            i = parent;
        }
    }

    /// Removes record `j` of bucket `b`: the bucket's last record takes its
    /// place.
    fn remove_at(&mut self, b: usize, j: usize) {
        let last = self.count(b) - 1;
        if j != last {
            let r = self.rec(b, last);
            self.set(b, j, r);
        }
        self.set(b, last, 0);
        self.add_count(b, -1);
        self.len -= 1;
    }

    /// Sets the slot of record `j` of bucket `b` (`slot` fits).
    fn set_slot(&mut self, b: usize, j: usize, slot: u32) {
        let m = (1u128 << self.slot_bits) - 1;
        let r = (self.rec(b, j) & !m) | u128::from(slot + 1);
        self.set(b, j, r);
    }

    /// `(bucket, record, value)` of every entry.
    fn entries(&self) -> impl Iterator<Item = (usize, usize, u128)> + '_ {
        (0..self.nb).flat_map(move |b| (0..self.count(b)).map(move |j| (b, j, self.rec(b, j))))
    }

    /// `(hash, slot)` of every entry.
    fn hashed(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.entries().map(|(b, _, r)| {
            let slot = self.slot_of(r).unwrap_or(0);
            (self.hash_of(b, r), slot)
        })
    }

    /// A segment holding the entries of `old` (those whose hash bit `bit`,
    /// counted from the low end, is `half`, when given): `nb` buckets, or
    /// more (by 1/8 at a time, [`MAX_GROWTHS`] times) while an entry finds
    /// no place. Reads `old` in place (no list of its entries: a rebuild's
    /// only allocation is the new segment).
    fn build_from(
        depth: u32,
        prefix: u64,
        mut nb: usize,
        slot_bits: u32,
        old: &Self,
        half: Option<(u32, u64)>,
    ) -> Result<Self, BuildError> {
        for _ in 0..MAX_GROWTHS {
            let mut seg = Self::new(depth, prefix, nb, slot_bits).map_err(BuildError::Oom)?;
            let placed = if half.is_none() && depth == old.depth {
                seg.refill_from(old)
            } else {
                old.each_hashed(|h, s| match half {
                    Some((bit, v)) if h >> bit & 1 != v => true,
                    _ => seg.insert(h, s),
                })
            };
            if placed {
                return Ok(seg);
            }
            nb += nb / 8 + 1;
        }
        Err(BuildError::Stuck)
    }

    /// Inserts every entry of `old` (same depth and prefix, `self` empty,
    /// its slots fit): what [`each_hashed`](Self::each_hashed) feeding
    /// [`insert`](Self::insert) does, entry by entry in the same order and
    /// to the same places, with both segments' constants in locals and the
    /// hash never assembled (the `x` bits of the old record go straight
    /// into the new bucket choice; `rest` and its step hash are shared by
    /// both segments). A segment's growth re-inserts every entry, ≈ 9.7
    /// times per id over a table's growth: this loop is most of the cost
    /// of a new id. `false` when an entry found no place.
    fn refill_from(&mut self, old: &Self) -> bool {
        debug_assert!(self.depth == old.depth && self.len == 0);
        let rest_bits = 32 - old.depth;
        let rest_mask = old.rest_mask();
        let top = if old.depth == 0 {
            0
        } else {
            old.prefix << (64 - old.depth)
        };
        let (obits, oslot) = (old.body_bits() as usize, old.slot_bits as usize);
        let (okey_mask, oslot_mask) = (old.key_mask(), old.slot_mask());
        let (onb, off_mask, off_up) = (old.nb, (1u64 << old.off_bits) - 1, 32 - old.off_bits);
        let (nnb, off_down) = (self.nb, 32 - self.off_bits);
        let (nbits, nslot) = (self.body_bits() as usize, self.slot_bits as usize);
        for b in 0..onb {
            let first = (old.body0 * 8) + b * (old.stride * 8);
            for j in 0..old.count(b) {
                let bit = first + j * obits;
                let kbit = bit + oslot;
                let kp = (old.load8(kbit / 8) >> (kbit % 8)) & okey_mask;
                let s1 = (old.load8(bit / 8) >> (bit % 8)) & oslot_mask;
                let key = (kp >> 1) << 8 | u64::from(old.data[b * HEAD + 1 + j]);
                let rest = key & rest_mask;
                // `step`'s hash of `rest`, for both bucket counts.
                let r = (rest.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) & 0xFFFF_FFFF;
                let b1 = if kp & 1 == 1 {
                    let d = 1 + ((r * (onb as u64 - 1)) >> 32) as usize;
                    if b >= d { b - d } else { b + onb - d }
                } else {
                    b
                };
                let off = (key >> rest_bits) & off_mask;
                // As `hash_of_key`: the one multiple of `nb` in the range.
                let x = ((b1 as u64) << 32 | off << off_up).div_ceil(onb as u64);
                // As `lookup` in the new segment.
                let prod = x * nnb as u64;
                let n1 = (prod >> 32) as usize;
                let mut n2 = n1 + 1 + ((r * (nnb as u64 - 1)) >> 32) as usize;
                if n2 >= nnb {
                    n2 -= nnb;
                }
                let nkey = ((prod & 0xFFFF_FFFF) >> off_down) << rest_bits | rest;
                let (tag, body_key) = (nkey as u8, (nkey >> 8) << 1);
                // As `insert`: the less loaded bucket, the first on a tie.
                let (c1, c2) = (self.count(n1), self.count(n2));
                let (nb_, n, bk) = if c2 < c1 {
                    (n2, c2, body_key | 1)
                } else {
                    (n1, c1, body_key)
                };
                if n < BUCKET {
                    self.data[nb_ * HEAD + 1 + n] = tag;
                    let at = (self.body0 * 8) + nb_ * (self.stride * 8) + n * nbits;
                    self.or_bits(at, s1);
                    self.or_bits(at + nslot, bk);
                    self.data[nb_ * HEAD] += 1;
                    self.len += 1;
                } else if !self
                    .insert_cuckoo(top | x << rest_bits | rest, (s1 as u32).wrapping_sub(1))
                {
                    return false;
                }
            }
        }
        true
    }

    /// `old` with `slot_bits` (more than its own) slot bits: the same
    /// buckets, each record in the same bucket and position, its slot field
    /// widened (headers copied, bodies re-encoded one by one). A segment
    /// must widen once per doubling of the index; re-inserting every entry
    /// for it (as growth does) cost ≈ 150 instructions an entry in the
    /// shard step bench, most of them finding the entry's buckets again,
    /// which a widening keeps.
    fn widen_from(old: &Self, slot_bits: u32) -> Result<Self, IndexError> {
        debug_assert!(slot_bits >= old.slot_bits);
        let mut seg = Self::new(old.depth, old.prefix, old.nb, slot_bits)?;
        // Same bucket count: same `off_bits`, key part and tag; the counts
        // and tags (the headers, `nb * HEAD` bytes first) are the same.
        debug_assert_eq!(seg.body0, old.body0);
        seg.data[..old.body0].copy_from_slice(&old.data[..old.body0]);
        let (obits, oslot) = (old.body_bits() as usize, old.slot_bits as usize);
        let (okey_mask, oslot_mask) = (old.key_mask(), old.slot_mask());
        let (nbits, nslot) = (seg.body_bits() as usize, seg.slot_bits as usize);
        for b in 0..old.nb {
            let ofirst = (old.body0 * 8) + b * (old.stride * 8);
            let nfirst = (seg.body0 * 8) + b * (seg.stride * 8);
            for j in 0..old.count(b) {
                let bit = ofirst + j * obits;
                let kbit = bit + oslot;
                let kp = (old.load8(kbit / 8) >> (kbit % 8)) & okey_mask;
                let s1 = (old.load8(bit / 8) >> (bit % 8)) & oslot_mask;
                let at = nfirst + j * nbits;
                seg.or_bits(at, s1);
                seg.or_bits(at + nslot, kp);
            }
        }
        seg.len = old.len;
        Ok(seg)
    }

    /// The two halves of `old` split on hash bit `bit` (counted from the
    /// low end): segments `(depth, prefix)` and `(depth, prefix | 1)` of
    /// `nbs` buckets, filled in **one** pass over `old` (each entry's hash
    /// recovered once, not once per half). When an entry finds no place in
    /// its half (rare), the halves are built apart by
    /// [`build_from`](Self::build_from), which grows a jammed half.
    fn split_from(
        depth: u32,
        prefix: u64,
        nbs: (usize, usize),
        slot_bits: u32,
        old: &Self,
        bit: u32,
    ) -> Result<(Self, Self), BuildError> {
        let mut low = Self::new(depth, prefix, nbs.0, slot_bits).map_err(BuildError::Oom)?;
        let mut high = Self::new(depth, prefix | 1, nbs.1, slot_bits).map_err(BuildError::Oom)?;
        let placed = old.each_hashed(|h, s| {
            if h >> bit & 1 == 0 {
                low.insert(h, s)
            } else {
                high.insert(h, s)
            }
        });
        if placed {
            return Ok((low, high));
        }
        drop((low, high));
        let low = Self::build_from(depth, prefix, nbs.0, slot_bits, old, Some((bit, 0)))?;
        let high = Self::build_from(depth, prefix | 1, nbs.1, slot_bits, old, Some((bit, 1)))?;
        Ok((low, high))
    }

    fn bytes(&self) -> usize {
        self.data.len()
    }
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
    /// (at least [`SEGMENT_MIN`]) instead of [`SEGMENT_MAX`]: test and fuzz
    /// support, so that small tables exercise splits and directory
    /// doubling.
    #[doc(hidden)]
    pub const fn with_segment_max(seed: u64, segment_max: usize) -> Self {
        let mut index = Self::with_seed(seed);
        index.segment_max = if segment_max < SEGMENT_MIN {
            SEGMENT_MIN
        } else {
            segment_max
        };
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

    /// Directory entry of hash `h`: its top `depth` bits, without a branch
    /// (`h >> 1` has a clear top bit, so depth 0 gives 0).
    #[inline]
    fn dir_of(&self, h: u64) -> usize {
        ((h >> 1) >> (63 - self.depth)) as usize
    }

    /// `(segment, bucket, record, slot)` of hash `h`.
    #[inline]
    fn locate_hash(&self, h: u64) -> Option<(usize, usize, usize, u32)> {
        let seg = *self.dir.get(self.dir_of(h))? as usize;
        let (b, j, s) = self.segments[seg].find(h)?;
        Some((seg, b, j, s))
    }

    /// The slot of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        self.locate_hash(self.hash(key)).map(|(_, _, _, s)| s)
    }

    /// The slot of each of `keys` into `out` (`out[k] = get(keys[k])`, for
    /// the first `min(keys.len(), out.len())` keys): the same answers as
    /// [`get`](Self::get), faster on a large index. Each run of
    /// [`BATCH`] keys is hashed and the first bytes of both its buckets are
    /// loaded first (the loads are independent, so their cache misses
    /// overlap), then probed while those lines are in cache — the batched
    /// lookup of a table step, in safe code (no prefetch intrinsic: this
    /// crate forbids `unsafe`).
    pub fn get_many(&self, keys: &[u64], out: &mut [Option<u32>]) {
        self.get_many_with(keys, out, |s| s);
    }

    /// [`get_many`](Self::get_many) with `u32::MAX` for an absent key (a
    /// slot is always below `u32::MAX`): the form a row store's step keeps
    /// in its `u32` buffers.
    pub fn get_many_slots(&self, keys: &[u64], out: &mut [u32]) {
        self.get_many_with(keys, out, |s| s.unwrap_or(u32::MAX));
    }

    #[inline]
    fn get_many_with<T>(&self, keys: &[u64], out: &mut [T], f: impl Fn(Option<u32>) -> T) {
        let n = keys.len().min(out.len());
        let (keys, out) = (&keys[..n], &mut out[..n]);
        if self.len == 0 {
            out.iter_mut().for_each(|o| *o = f(None));
            return;
        }
        let first = &self.segments[0];
        let mut at = [(first, Lookup::default(), 0u64, 0u64); BATCH];
        let mut touched = 0u8;
        for (ks, os) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            for (&k, a) in ks.iter().zip(at.iter_mut()) {
                let h = self.hash(k);
                let s = &self.segments[self.dir[self.dir_of(h)] as usize];
                let p = s.lookup(h);
                let (b1, b2) = (p.b1 as usize, p.b2 as usize);
                // Both buckets' tag matches (a miss ends here: no flagged
                // record), and a touch of the middle of the first's bodies
                // (where a hit mostly ends). The second pass reads bodies
                // only: the headers were read once, not touched then read.
                let (m1, m2) = (s.tag_matches(b1, p.tag), s.tag_matches(b2, p.tag));
                touched ^= s.data[s.body0 + b1 * s.stride + s.stride / 2];
                *a = (s, p, m1, m2);
            }
            // Keeps the touch (its only purpose is to bring the line in).
            core::hint::black_box(touched);
            for (&(s, p, m1, m2), o) in at.iter().zip(os.iter_mut()) {
                let hit = s
                    .find_in(p.b1 as usize, m1, p.key)
                    .or_else(|| s.find_in(p.b2 as usize, m2, p.key | 1));
                *o = f(hit.map(|(_, s)| s));
            }
        }
    }

    /// Whether `key` has a slot.
    pub fn contains_key(&self, key: u64) -> bool {
        self.locate_hash(self.hash(key)).is_some()
    }

    /// `(segment, bucket, record)` of the entry holding `slot` (a scan).
    fn find_slot(&self, slot: u32) -> Option<(usize, usize, usize)> {
        self.segments.iter().enumerate().find_map(|(i, seg)| {
            seg.entries()
                .find(|&(_, _, r)| seg.slot_of(r) == Some(slot))
                .map(|(b, j, _)| (i, b, j))
        })
    }

    /// The id holding `slot`. Costs a scan of the table (`O(capacity)`):
    /// the index keeps no key per slot; iterate with [`iter`](Self::iter)
    /// to map many slots.
    pub fn key_of(&self, slot: u32) -> Option<u64> {
        if slot as usize >= self.len {
            return None;
        }
        let (seg, b, j) = self.find_slot(slot)?;
        let s = &self.segments[seg];
        Some(self.key_of_hash(s.hash_of(b, s.rec(b, j))))
    }

    /// Calls `f(id, slot)` for every id, in storage order (not slot order:
    /// a function of the index's layout), allocating nothing: for
    /// order-independent passes over a large index (a table checksum) that
    /// cannot afford [`iter`](Self::iter)'s `8 B × len` list.
    pub fn for_each_unordered(&self, mut f: impl FnMut(u64, u32)) {
        for seg in &self.segments {
            seg.each_hashed(|h, s| {
                f(self.key_of_hash(h), s);
                true
            });
        }
    }

    /// `(id, slot)` of every id, in slot order (deterministic: a function of
    /// the sequence of insertions and removals only). Builds the list of ids
    /// first (`8 B × len`, one scan of the table).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let mut keys = alloc::vec![0u64; self.len];
        for seg in &self.segments {
            seg.each_hashed(|h, s| {
                keys[s as usize] = self.key_of_hash(h);
                true
            });
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
        if let Some((_, _, _, s)) = self.locate_hash(h) {
            return Ok((s, false));
        }
        self.insert_hash(h, key).map(|s| (s, true))
    }

    /// [`try_insert`](Self::try_insert) of a `key` the caller knows is not
    /// held (it has just looked it up, e.g. with
    /// [`get_many_slots`](Self::get_many_slots), and inserted nothing
    /// since): gives it slot `len` without looking it up again. A row
    /// store's step looks every id up in one batch first; the miss lookup
    /// inside `try_insert` was ≈ 175 instructions per new id in the shard
    /// step bench (1 % of the run). Giving a held key is a logic error: the
    /// index then holds it twice (debug builds panic), no memory is
    /// unsafe.
    ///
    /// # Errors
    /// As [`try_insert`](Self::try_insert); the index is then unchanged.
    pub fn try_insert_absent(&mut self, key: u64) -> Result<u32, IndexError> {
        debug_assert!(!self.contains_key(key), "try_insert_absent of a held key");
        self.insert_hash(self.hash(key), key)
    }

    /// Gives hash `h` (of `key`, not held) slot `len`.
    fn insert_hash(&mut self, h: u64, key: u64) -> Result<u32, IndexError> {
        let slot = u32::try_from(self.len)
            .ok()
            .filter(|&s| s < u32::MAX)
            .ok_or(IndexError::Full)?;
        if self.dir.is_empty() {
            try_room(&mut self.dir)?;
            try_room(&mut self.segments)?;
            self.segments.push(Segment::new(
                0,
                0,
                SEGMENT_MIN / BUCKET,
                slot_bits_for(slot),
            )?);
            self.dir.push(0);
        }
        let mut growths = 0;
        loop {
            let seg = self.dir[self.dir_of(h)] as usize;
            let s = &mut self.segments[seg];
            let fits = s.slot_fits(slot);
            if fits && s.has_room() && s.insert(h, slot) {
                break;
            }
            if growths == MAX_GROWTHS {
                return Err(IndexError::Clustered { key });
            }
            // Wider slots alone keep the buckets; anything else adds some.
            let more = !s.has_room() || fits;
            self.grow(seg, slot, more, key)?;
            growths += 1;
        }
        self.len += 1;
        Ok(slot)
    }

    /// Rebuilds segment `seg` so that it can take slot `slot`: with slot
    /// bits for it, and (`more`) room for one more entry: 1/7 more buckets
    /// at least, or a split in two when that would pass the segment
    /// maximum. On error the index is unchanged (except, harmlessly, a
    /// doubled directory).
    fn grow(&mut self, seg: usize, slot: u32, more: bool, key: u64) -> Result<(), IndexError> {
        let old = &self.segments[seg];
        let (depth, prefix) = (old.depth, old.prefix);
        // A rebuild that moves every entry anyway takes the slot bits the
        // index will need within 1/8 more slots (about the segment's own
        // growth to its next rebuild, 1/GROWTH): otherwise a separate
        // widening (`widen_from`) re-encodes every entry again soon after.
        // In the step bench this saved 31·10^6 instructions of the build's
        // widenings; 1/4 ahead saved about as much and cost 0.05 B/id more
        // over a growth cycle (1/8: 0.02).
        let need = if more {
            slot.saturating_add(slot / 8)
        } else {
            slot
        };
        let bits = old.slot_bits.max(slot_bits_for(need).min(32));
        let nb = if more {
            buckets_for(old.len + 1).max(old.nb + old.nb / GROWTH + 1)
        } else {
            old.nb
        };
        let err = |e| match e {
            BuildError::Oom(e) => e,
            BuildError::Stuck => IndexError::Clustered { key },
        };
        if !more {
            // Wider slots only: every record stays where it is, re-encoded.
            self.segments[seg] = Segment::widen_from(old, bits)?;
            return Ok(());
        }
        if nb * BUCKET <= self.segment_max || depth >= MAX_DEPTH {
            self.segments[seg] =
                Segment::build_from(depth, prefix, nb, bits, old, None).map_err(err)?;
            return Ok(());
        }
        // Split on hash bit `depth` (counted from the top).
        let bit = 63 - depth;
        let mut ones = 0;
        old.each_hashed(|h, _| {
            ones += (h >> bit & 1) as usize;
            true
        });
        let zeros = old.len - ones;
        let (low, high) = Segment::split_from(
            depth + 1,
            prefix << 1,
            (buckets_for(zeros + 1), buckets_for(ones + 1)),
            bits,
            old,
            bit,
        )
        .map_err(err)?;
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
        let (seg, b, j, slot) = self.locate_hash(self.hash(key))?;
        self.segments[seg].remove_at(b, j);
        let last = (self.len - 1) as u32;
        self.len -= 1;
        if slot == last {
            return Some(Removed {
                slot,
                moved_from: None,
            });
        }
        let (mseg, mb, mj) = self.find_slot(last)?;
        self.segments[mseg].set_slot(mb, mj, slot);
        Some(Removed {
            slot,
            moved_from: Some(last),
        })
    }
    /// [`remove`](Self::remove) for a caller that knows `last_key`, the id
    /// of the last slot (a row store keeping its ids by slot): two lookups,
    /// no scan. `None` (nothing changed) when `key` has no slot or
    /// `last_key` does not hold the last one.
    pub fn remove_swap(&mut self, key: u64, last_key: u64) -> Option<Removed> {
        let last = self.len.checked_sub(1)? as u32;
        let ms = self.get(last_key)?;
        let (seg, b, j, slot) = self.locate_hash(self.hash(key))?;
        if ms != last {
            return None;
        }
        self.segments[seg].remove_at(b, j);
        self.len -= 1;
        if slot == last {
            return Some(Removed {
                slot,
                moved_from: None,
            });
        }
        // The removal moved at most a record of `key`'s bucket: find the
        // last id again.
        let (mseg, mb, mj, _) = self.locate_hash(self.hash(last_key))?;
        self.segments[mseg].set_slot(mb, mj, slot);
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
            for (h, slot) in seg.hashed() {
                if !keep(self.key_of_hash(h), slot) {
                    try_room(&mut gone)?;
                    gone.push((slot, h));
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
            if let Some((seg, b, j, _)) = self.locate_hash(h) {
                self.segments[seg].remove_at(b, j);
            }
        }
        for seg in &mut self.segments {
            for b in 0..seg.nb {
                for j in 0..BUCKET {
                    match seg.slot_of(seg.rec(b, j)) {
                        None => break,
                        Some(s) if s as usize >= new_len => {
                            seg.set_slot(b, j, dest[s as usize - new_len]);
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        self.len = new_len;
        Ok(steps)
    }

    /// Exact heap bytes: the segments' buckets (`width` bytes per bucket
    /// of 8 records, a count byte per bucket, 16 bytes of padding), the
    /// directory and the segment list's capacity.
    pub fn memory_bytes(&self) -> usize {
        self.segments.iter().map(Segment::bytes).sum::<usize>()
            + self.segments.capacity() * size_of::<Segment>()
            + self.dir.capacity() * size_of::<u32>()
    }

    /// Checks every structural invariant (test and fuzz support): each
    /// entry sits in its segment (by its recovered hash), in its first
    /// bucket with choice 0 or its second with choice 1, buckets keep their
    /// records first, slots fit their field, the directory runs are
    /// aligned, slots are a bijection onto `0..len`.
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
            assert!(seg.nb >= 2);
            assert_eq!(seg.stride, seg.width as usize - 8);
            assert_eq!(seg.body0, seg.nb * HEAD);
            assert_eq!(seg.data.len(), seg.body0 + seg.nb * seg.stride + PAD);
            assert!(
                seg.data[seg.body0 + seg.nb * seg.stride..]
                    .iter()
                    .all(|&b| b == 0)
            );
            let run = 1usize << (self.depth - seg.depth);
            let refs: Vec<usize> = (0..self.dir.len())
                .filter(|&d| self.dir[d] as usize == i)
                .collect();
            assert_eq!(refs.len(), run, "segment {i} directory run");
            assert_eq!(refs[0] % run, 0);
            assert_eq!((refs[0] / run) as u64, seg.prefix, "segment {i} prefix");
            assert!(refs.windows(2).all(|w| w[1] == w[0] + 1));
            let mut count = 0;
            for b in 0..seg.nb {
                let n = seg.count(b);
                assert!(n <= BUCKET);
                for j in 0..n {
                    assert!(
                        seg.slot_of(seg.rec(b, j)).is_some(),
                        "empty record {j} in bucket {b}"
                    );
                }
                for j in n..BUCKET {
                    assert_eq!(seg.rec(b, j), 0, "bucket {b} not compact");
                }
                for j in 0..n {
                    count += 1;
                    let r = seg.rec(b, j);
                    let slot = seg.slot_of(r).unwrap_or(u32::MAX);
                    assert!((slot as usize) < self.len, "slot {slot} out of range");
                    assert!(!seen[slot as usize], "slot {slot} twice");
                    seen[slot as usize] = true;
                    let h = seg.hash_of(b, r);
                    assert_eq!(self.hash(self.key_of_hash(h)), h);
                    assert_eq!(self.dir[self.dir_of(h)] as usize, i, "wrong segment");
                    let p = seg.probe(h);
                    let c = 1u128 << seg.slot_bits;
                    let key = r & !((1u128 << seg.slot_bits) - 1);
                    assert!(
                        (b == p.b1 && key == p.want) || (b == p.b2 && key == p.want | c),
                        "entry of slot {slot} misplaced"
                    );
                    // The lookup's `u64` decode finds it where it is.
                    assert_eq!(seg.find(h), Some((b, j, slot)), "lookup of slot {slot}");
                }
            }
            assert_eq!(count, seg.len);
            total += count;
        }
        assert_eq!(total, self.len);
    }
}

/// `n` ids chosen against seed `seed`, as the module docs describe (test
/// support: they make an insertion fail with [`IndexError::Clustered`] on
/// purpose). Their hashes share the top 32 bits (one segment, one first
/// bucket in it while the directory is less than ≈ 15 bits deep) and their
/// low bits give the second bucket right after the first in any segment
/// of up to 64 buckets, within `1 + buckets / 64` of it in larger ones. An
/// empty index places 16 of them; one that holds other ids grows its
/// segment further and places a few hundred (233 after 5–40 other ids):
/// ask for 400 or more to be sure of the failure.
#[doc(hidden)]
pub fn clustered_keys(seed: u64, n: usize) -> Vec<u64> {
    (1u64..)
        .filter(|&rest| (rest.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) < (1 << 26))
        .take(n)
        .map(|rest| unmix64(0x1234_5678 << 32 | rest) ^ seed)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one- and two-move paths of `insert_cuckoo` (`kick_one`,
    /// `kick_two`) leave the bytes the breadth-first search alone leaves:
    /// same layout, so memory and every later rebuild are unchanged by the
    /// shortcuts. Small segments
    /// filled until an insertion fails; each insertion that finds both
    /// buckets full is made both ways.
    #[test]
    fn one_move_kick_lays_out_as_the_path_search() {
        let (mut kicks, mut twos, mut searches) = (0, 0, 0);
        for seed in 0..40u64 {
            let mut seg = Segment::new(0, 0, 64, 20).expect("small");
            for i in 0..(64 * BUCKET) as u64 {
                let h = mix64(i ^ seed << 32);
                let l = seg.lookup(h);
                if seg.count(l.b1 as usize) < BUCKET || seg.count(l.b2 as usize) < BUCKET {
                    assert!(seg.insert(h, i as u32));
                    continue;
                }
                let mut bfs = seg.clone();
                let p = bfs.probe(h);
                let by_search = bfs.cuckoo::<MAX_BFS>(p, p.want | u128::from(i as u32 + 1));
                let mut kicked = seg.clone();
                let by_kick = kicked.kick_one(l.b1 as usize, l.tag, l.key, i + 1)
                    || kicked.kick_one(l.b2 as usize, l.tag, l.key | 1, i + 1);
                let placed = seg.insert_cuckoo(h, i as u32);
                assert_eq!(placed, by_search);
                assert_eq!((&seg.data, seg.len), (&bfs.data, bfs.len));
                if by_kick {
                    assert_eq!((&kicked.data, kicked.len), (&bfs.data, bfs.len));
                    kicks += 1;
                } else {
                    let mut two = seg.clone();
                    // `seg` has the record now: redo from `kicked`, which
                    // is the segment before it (no one-move path changed it).
                    two.clone_from(&kicked);
                    let by_two = two.kick_two(l.b1 as usize, l.tag, l.key, i + 1)
                        || two.kick_two(l.b2 as usize, l.tag, l.key | 1, i + 1);
                    if by_two {
                        assert_eq!((&two.data, two.len), (&bfs.data, bfs.len));
                        twos += 1;
                    } else {
                        searches += 1;
                    }
                }
                if !placed {
                    break;
                }
            }
        }
        // Every path was taken (the one-move kick is the common one).
        assert!(
            kicks > 100 && twos > 10 && searches > 0,
            "{kicks} kicks, {twos} two-move kicks, {searches} searches"
        );
    }

    /// An index of segment maximum `max` holding `keys`, for the rebuild
    /// tests that compare segments laid out two ways.
    fn filled(seed: u64, max: usize, keys: impl Iterator<Item = u64>) -> SlotIndex {
        let mut index = SlotIndex::with_segment_max(seed, max);
        for k in keys {
            index.try_insert(k).expect("fits");
        }
        index
    }

    /// A rebuild's fused loop (`refill_from`) lays out every segment as
    /// re-inserting each recovered hash does: same bytes, for growth by
    /// 1/8, by one bucket, with wider slots, at several depths.
    #[test]
    fn refill_equals_reinserting_each_hash() {
        let mut compared = 0;
        for (n, max) in [
            (3_000u64, SEGMENT_MAX),
            (20_000, 1 << 10),
            (5_000, SEGMENT_MIN),
        ] {
            let index = filled(
                n ^ 7,
                max,
                (0..n).map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D)),
            );
            for old in &index.segments {
                for (nb, bits) in [
                    (old.nb + old.nb / GROWTH + 1, old.slot_bits),
                    (old.nb + 1, old.slot_bits),
                    (old.nb, old.slot_bits + 3),
                ] {
                    let mut fused = Segment::new(old.depth, old.prefix, nb, bits).expect("small");
                    let mut each = fused.clone();
                    let a = fused.refill_from(old);
                    let b = old.each_hashed(|h, s| each.insert(h, s));
                    assert_eq!(a, b);
                    assert_eq!((&fused.data, fused.len), (&each.data, each.len));
                    compared += usize::from(a);
                }
            }
        }
        assert!(compared > 40, "{compared} rebuilds compared");
    }

    /// A slot-width rebuild (`widen_from`) keeps every record in its
    /// bucket and position with its slot: the same finds, the same
    /// headers, wider slot fields that take a larger slot.
    #[test]
    fn widening_keeps_every_record_in_place() {
        let mut widened = 0;
        for (n, max) in [
            (3_000u64, SEGMENT_MAX),
            (20_000, 1 << 10),
            (700, SEGMENT_MIN),
        ] {
            let index = filled(n ^ 5, max, (0..n).map(|i| mix64(i ^ 0x77)));
            for old in &index.segments {
                for more in [1, 3, 32 - old.slot_bits] {
                    let bits = old.slot_bits + more;
                    let mut wide = Segment::widen_from(old, bits).expect("small");
                    assert_eq!((wide.nb, wide.len, wide.slot_bits), (old.nb, old.len, bits));
                    assert_eq!(wide.data[..wide.body0], old.data[..old.body0]);
                    for (h, slot) in old.hashed() {
                        assert_eq!(wide.find(h), old.find(h));
                        assert_eq!(wide.find(h).map(|f| f.2), Some(slot));
                    }
                    assert!(wide.hashed().eq(old.hashed()));
                    // The widened field holds the largest slot it admits.
                    let top = u32::try_from((1u64 << bits) - 2).expect("fits u32");
                    let (b, j) = (0..wide.nb)
                        .find_map(|b| (wide.count(b) > 0).then_some((b, 0)))
                        .expect("an entry");
                    let h = wide.hash_of(b, wide.rec(b, j));
                    wide.set_slot(b, j, top);
                    assert_eq!(wide.find(h), Some((b, j, top)));
                    widened += 1;
                }
            }
        }
        assert!(widened > 20, "{widened} widenings");
    }

    /// Lookups do not mask a bucket's tags by its count (`tag_matches`):
    /// empty records are all zero bits, so queries of tag 0 flag them. Held
    /// and absent ids of tag 0 (the hash's low 8 bits, `rest`'s low byte),
    /// the id of hash 0 (key part all zero, the one an empty record's key
    /// part equals) held and absent, through `get`, `get_many` and
    /// `try_insert`, give the answers of a `HashMap` (the reference).
    #[test]
    fn tag_zero_queries_see_no_empty_record() {
        extern crate std;
        use std::collections::HashMap;
        for (seed, n, max) in [
            (3u64, 5_000u64, SEGMENT_MAX),
            (9, 20_000, 1 << 10),
            (17, 900, 64),
        ] {
            let mut index = SlotIndex::with_segment_max(seed, max);
            let mut model: HashMap<u64, u32> = HashMap::new();
            // Id `seed` has hash mix64(0) = 0: its key part is all zero.
            let zero = seed;
            assert_eq!(index.hash(zero), 0);
            let tag0 = |id: u64| mix64(id ^ seed) & 0xFF == 0;
            let ids = (1..)
                .map(|i: u64| mix64(i ^ seed << 40))
                .filter(|&id| id != zero);
            let mut asked = Vec::new();
            for (i, id) in ids.take(n as usize).enumerate() {
                let want = model.len() as u32;
                model.insert(id, want);
                assert_eq!(index.try_insert(id), Ok((want, true)));
                if i as u64 == n / 2 {
                    // Absent, then held.
                    let mut got = [Some(0)];
                    index.get_many(&[zero], &mut got);
                    assert_eq!((index.get(zero), got[0]), (None, None));
                    let s = model.len() as u32;
                    assert_eq!(index.try_insert(zero), Ok((s, true)));
                    model.insert(zero, s);
                }
            }
            let absent = (0..)
                .map(|i: u64| mix64(i ^ 0xABC << 44))
                .filter(|&id| tag0(id) && !model.contains_key(&id));
            asked.extend(absent.take(2_000));
            asked.extend(model.keys().copied().filter(|&id| tag0(id)));
            asked.push(zero);
            assert!(
                asked.len() > 2_000 + n as usize / 512,
                "{} asked",
                asked.len()
            );
            let mut got = alloc::vec![Some(0u32); asked.len()];
            index.get_many(&asked, &mut got);
            for (&id, &g) in asked.iter().zip(&got) {
                assert_eq!(g, model.get(&id).copied(), "id {id}");
                assert_eq!(index.get(id), g, "id {id}");
            }
            index.check_invariants();
            // An absent id of hash 0 in a fresh index with one held id.
            let mut one = SlotIndex::with_seed(seed);
            assert_eq!(one.try_insert(seed ^ 1), Ok((0, true)));
            assert_eq!((one.get(zero), one.contains_key(zero)), (None, false));
            let mut got = [Some(0), Some(0)];
            one.get_many(&[zero, seed ^ 1], &mut got);
            assert_eq!(got, [None, Some(0)]);
        }
    }

    /// A growth rebuild takes the slot width of 1/8 more slots (`grow`):
    /// below a power of two of slots, the segments rebuilt last are already
    /// wide enough for the slots past it, none wider than that, and every
    /// answer is a `HashMap`'s (the reference).
    #[test]
    fn growth_rebuilds_widen_ahead() {
        extern crate std;
        use std::collections::HashMap;
        let mut index = SlotIndex::with_segment_max(1, 1 << 10);
        let mut model: HashMap<u64, u32> = HashMap::new();
        // Slots 0..2^14 - 1: slot + 1 takes 14 bits.
        let n = (1u32 << 14) - 1;
        for i in 0..n {
            let id = mix64(u64::from(i) ^ 0x5A5A);
            assert_eq!(index.try_insert(id), Ok((i, true)));
            model.insert(id, i);
        }
        index.check_invariants();
        let need = slot_bits_for(n - 1);
        assert_eq!(need, 14);
        let widths: Vec<u32> = index.segments.iter().map(|s| s.slot_bits).collect();
        assert!(
            widths.iter().all(|&w| w == need || w == need + 1),
            "{widths:?}"
        );
        let ahead = widths.iter().filter(|&&w| w > need).count();
        assert!(ahead > 0 && ahead < widths.len(), "{widths:?}");
        assert!(model.iter().all(|(&id, &s)| index.get(id) == Some(s)));
    }

    fn colliding(n: usize) -> Vec<u64> {
        let keys = clustered_keys(0, n);
        // The second bucket is the first's neighbour in segments of up to
        // 64 buckets (the property the helper's docs claim).
        let seg = Segment::new(0, 0, 64, 1).expect("small");
        assert!(keys.iter().all(|&k| seg.step(seg.rest_of(mix64(k))) == 1));
        keys
    }

    #[test]
    fn ids_sharing_both_buckets_fail_typed_and_change_nothing() {
        for x in [0u64, 1, 0xDEAD_BEEF_1234_5678, u64::MAX] {
            assert_eq!(mix64(unmix64(x)), x);
        }
        let keys = colliding(40);
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
        let (k, e) = failed.expect("40 ids on two buckets cannot all fit");
        assert_eq!(e, IndexError::Clustered { key: k });
        assert_eq!(index.len(), 2 * BUCKET);
        assert!(index.get(k).is_none());
        assert!(
            keys[..2 * BUCKET]
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
            // The batched lookup, over held ids and absent ones (slot
            // widths up to 15 bits, deep and shallow directories).
            let asked: Vec<u64> = ids.iter().flat_map(|&id| [id, !id]).collect();
            let mut got = alloc::vec![0u32; asked.len()];
            index.get_many_slots(&asked, &mut got);
            for (k, (&id, &s)) in asked.iter().zip(&got).enumerate() {
                let want = if k % 2 == 0 { (k / 2) as u32 } else { u32::MAX };
                assert_eq!(s, want, "id {id}");
            }
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
            // Loads stay in [≈ 0.86 - rounding, 63/64] on average.
            assert!(positions * 100 < 50_000 * 110, "{positions} positions");
        }
    }

    /// A split's one pass over the old segment builds exactly the halves
    /// that two filtered passes ([`Segment::build_from`], the reference)
    /// build, both when the halves have room and when they are too small
    /// for their entries (the one-pass build jams and falls back).
    #[test]
    fn one_pass_split_equals_two_filtered_passes() {
        let (mut roomy, mut tight) = (0, 0);
        for (n, seed) in [(300u64, 1u64), (2_000, 2), (20_000, 3)] {
            let mut index = SlotIndex::with_seed(seed);
            for i in 0..n {
                index.try_insert(mix64(i ^ 0xABCD)).expect("fits");
            }
            for old in &index.segments {
                let bit = 63 - old.depth;
                let (d, p) = (old.depth + 1, old.prefix << 1);
                let ones = old.hashed().filter(|&(h, _)| h >> bit & 1 == 1).count();
                let zeros = old.len - ones;
                for (nbs, tight_halves) in [
                    ((buckets_for(zeros + 1), buckets_for(ones + 1)), false),
                    (((zeros / 8).max(2), (ones / 8).max(2)), true),
                ] {
                    let one = Segment::split_from(d, p, nbs, old.slot_bits, old, bit);
                    let lo = Segment::build_from(d, p, nbs.0, old.slot_bits, old, Some((bit, 0)));
                    let hi =
                        Segment::build_from(d, p | 1, nbs.1, old.slot_bits, old, Some((bit, 1)));
                    let (Ok((l, h)), Ok(lo), Ok(hi)) = (one, lo, hi) else {
                        panic!("a split of random ids failed");
                    };
                    for (a, b) in [(&l, &lo), (&h, &hi)] {
                        assert_eq!((a.nb, a.len, a.prefix), (b.nb, b.len, b.prefix));
                        assert!(a.data == b.data, "the halves' records differ");
                    }
                    assert_eq!(l.len + h.len, old.len);
                    if tight_halves {
                        tight += usize::from(l.nb > nbs.0 || h.nb > nbs.1);
                    } else {
                        roomy += 1;
                    }
                }
            }
        }
        // Both paths ran: halves with room, and jammed halves that grew.
        assert!(roomy > 0 && tight > 0, "roomy {roomy}, jammed {tight}");
    }

    /// Bytes per id over a growth cycle (the table doubles from 2^18 to
    /// 2^19 ids, sampled every 1024 insertions): the mean stays at most 10,
    /// issue 27's bound for the index "including slack at steady state".
    /// Measured with loads up to 31/32: 9.56 mean, 9.91 worst at
    /// `GROWTH = 8`; 9.69 / 10.26 at 6; 10.06 / 11.00 at 4, which fails
    /// here (coarser growth re-inserts less but leaves more slack). With
    /// [`LOAD_MAX`] 63/64 (session 20): 9.48 / 9.92 at 7 (the setting),
    /// 9.58 / 10.12 at 6, 9.80 / 10.78 at 4.
    #[test]
    fn bytes_per_id_over_a_growth_cycle() {
        let mut index = SlotIndex::new();
        let (mut sum, mut worst, mut samples) = (0.0f64, 0.0f64, 0u32);
        for i in 0..(1u64 << 19) {
            index
                .try_insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
                .expect("fits");
            if i >= 1 << 18 && i % 1024 == 0 {
                let b = index.memory_bytes() as f64 / (i + 1) as f64;
                sum += b;
                worst = worst.max(b);
                samples += 1;
            }
        }
        let mean = sum / f64::from(samples);
        extern crate std;
        std::println!(
            "GROWTH {GROWTH}, load up to {}/{}: mean {mean:.2} B/id, worst {worst:.2}",
            LOAD_MAX.0,
            LOAD_MAX.1
        );
        assert!(mean <= 10.0, "mean {mean:.2} B/id, worst {worst:.2}");
    }
}
