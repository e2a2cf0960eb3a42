//! [`TableSnapshot`], one rank's table detached from it, and its encoding
//! in a `basis-std` checkpoint container (CRC-32 over the whole file). A
//! leaf: the table builds and reads snapshots, `checkpoint` writes them.
//!
//! Sections: `shard.meta` (format version `u32`, then `u64`s: rank, group
//! size, row dimension, owner-rule identity, rows; from version 2 also:
//! training steps done, admission-rule identity, optimizer rows, eviction
//! on (1) or off (0); from version 3 also: row precision (0 f32, 1 bf16,
//! 2 f16), rounding seed), `shard.ids` (`u64` per slot), `shard.rows`
//! (one value per row element, slot-major, at the row precision: `f32`,
//! or the `u16` bits of a bf16 / f16), `shard.optimizer` (the optimizer's
//! own versioned, checksummed export); from version 2 `shard.admission`
//! (the admission sketch's `u8` counters) and `shard.last_seen` (`u32`
//! per slot with eviction on, else empty). All little-endian. Version 1
//! files (no admission or eviction) and version 2 files still read, as
//! f32 rows.

use alloc::vec::Vec;
use basis_std::checkpoint::Checkpoint;

use crate::{RowPrecision, ShardError};
use basis_core::half::{bf16, f16};

/// The format version of `shard.meta` (this crate reads 1, 2 and 3).
pub const SHARD_FORMAT: u32 = 3;

/// One rank's table, detached: what a checkpoint holds. The default is
/// an empty table of rank 0 of 0 (a base for `..Default::default()`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableSnapshot {
    /// The rank it was taken on.
    pub rank: u64,
    /// The group size.
    pub ranks: u64,
    /// Values per row.
    pub dim: u64,
    /// [`OwnerRule::identity`](crate::OwnerRule::identity) of the table.
    pub owner: u64,
    /// Id of every slot, slot order.
    pub ids: Vec<u64>,
    /// Row values, slot-major (`ids.len() × dim`), widened to f32: each
    /// one exactly representable at [`precision`](Self::precision).
    pub rows: Vec<f32>,
    /// How the table stores its rows (what the file's `shard.rows` holds).
    pub precision: RowPrecision,
    /// The seed of the rows' stochastic rounding (bf16 / f16 rows).
    pub rounding_seed: u64,
    /// The sparse optimizer's exported state.
    pub optimizer: Vec<u8>,
    /// Training lookups done (admission and eviction count steps).
    pub step: u64,
    /// The admission rule's identity.
    pub admission: u64,
    /// The admission sketch's counters (empty unless min-count admission).
    pub counters: Vec<u8>,
    /// With eviction on: each slot's last training step.
    pub last_seen: Vec<u32>,
    /// Rows the optimizer's dense state was grown to.
    pub opt_rows: u64,
    /// Whether the table evicts rows.
    pub eviction: bool,
}

const META: &str = "shard.meta";
const IDS: &str = "shard.ids";
const ROWS: &str = "shard.rows";
const OPT: &str = "shard.optimizer";
const ADMISSION: &str = "shard.admission";
const LAST_SEEN: &str = "shard.last_seen";
/// `shard.meta`'s length in versions 1, 2 and 3.
const META_V1: usize = 4 + 5 * 8;
const META_V2: usize = 4 + 9 * 8;
const META_V3: usize = 4 + 11 * 8;

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl TableSnapshot {
    /// The snapshot as a checkpoint container.
    pub fn to_checkpoint(&self) -> Checkpoint {
        let mut meta = Vec::with_capacity(META_V3);
        meta.extend_from_slice(&SHARD_FORMAT.to_le_bytes());
        for x in [
            self.rank,
            self.ranks,
            self.dim,
            self.owner,
            self.ids.len() as u64,
            self.step,
            self.admission,
            self.opt_rows,
            u64::from(self.eviction),
            self.precision.code(),
            self.rounding_seed,
        ] {
            meta.extend_from_slice(&x.to_le_bytes());
        }
        let ids: Vec<u8> = self.ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        // Narrow values are exact in their width (the table holds them so),
        // so the file holds them at it, bit for bit.
        let rows: Vec<u8> = match self.precision {
            RowPrecision::F32 => self.rows.iter().flat_map(|x| x.to_le_bytes()).collect(),
            RowPrecision::Bf16 => self
                .rows
                .iter()
                .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
                .collect(),
            RowPrecision::F16 => self
                .rows
                .iter()
                .flat_map(|&x| f16::from_f32(x).to_bits().to_le_bytes())
                .collect(),
        };
        let mut c = Checkpoint::new();
        // Fixed, distinct, short names: `insert` cannot fail on them.
        for (name, data) in [
            (META, meta),
            (IDS, ids),
            (ROWS, rows),
            (ADMISSION, self.counters.clone()),
            (LAST_SEEN, u32s(&self.last_seen)),
        ] {
            let _ = c.insert(name, data);
        }
        let _ = c.insert(OPT, self.optimizer.clone());
        c
    }

    /// Add the snapshot's sections (all named `shard.*`) to `c`, a
    /// container that also holds the caller's own sections (a training
    /// runtime's dense parameters, data order, history …), so one file per
    /// rank carries the table at its row width and everything else.
    /// [`from_checkpoint`](Self::from_checkpoint) reads the table back and
    /// ignores the other sections.
    ///
    /// # Errors
    /// [`ShardError::BadConfig`] when `c` already holds a section of the
    /// same name (`c` is then unchanged).
    pub fn insert_into(&self, c: &mut Checkpoint) -> Result<(), ShardError> {
        let mut own = self.to_checkpoint();
        let names: Vec<alloc::string::String> = own.names().map(Into::into).collect();
        if names.iter().any(|n| c.get(n).is_some()) {
            return Err(ShardError::BadConfig(
                "the container already holds a section named like the table's (shard.*)",
            ));
        }
        for name in names {
            // Moved, not copied; the names are the table's short constants.
            let data = own.remove(&name).unwrap_or_default();
            let _ = c.insert(&name, data);
        }
        Ok(())
    }

    /// A snapshot from a checkpoint container.
    ///
    /// # Errors
    /// [`ShardError::Corrupt`] for a missing or malformed section or a
    /// format version this crate does not read.
    pub fn from_checkpoint(c: &Checkpoint) -> Result<Self, ShardError> {
        let meta = c
            .get(META)
            .ok_or(ShardError::Corrupt("no shard.meta section"))?;
        let version = u32::from_le_bytes(
            meta.get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or(ShardError::Corrupt("shard.meta has no version"))?,
        );
        let expect = match version {
            1 => META_V1,
            2 => META_V2,
            3 => META_V3,
            _ => return Err(ShardError::Corrupt("unknown shard.meta format version")),
        };
        if meta.len() != expect {
            return Err(ShardError::Corrupt(
                "shard.meta is not the length of its version",
            ));
        }
        let word = |k: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&meta[4 + 8 * k..12 + 8 * k]);
            u64::from_le_bytes(b)
        };
        let ids = c
            .get(IDS)
            .ok_or(ShardError::Corrupt("no shard.ids section"))?;
        let rows = c
            .get(ROWS)
            .ok_or(ShardError::Corrupt("no shard.rows section"))?;
        let optimizer = c
            .get(OPT)
            .ok_or(ShardError::Corrupt("no shard.optimizer section"))?;
        let (precision, rounding_seed) = if version >= 3 {
            (
                RowPrecision::from_code(word(9))
                    .ok_or(ShardError::Corrupt("unknown row precision"))?,
                word(10),
            )
        } else {
            (RowPrecision::F32, 0)
        };
        let width = precision.bytes();
        if ids.len() % 8 != 0 || rows.len() % width != 0 {
            return Err(ShardError::Corrupt("a section is not whole values"));
        }
        if (ids.len() / 8) as u64 != word(4) {
            return Err(ShardError::Corrupt(
                "shard.ids does not hold the rows counted",
            ));
        }
        if Some((rows.len() / width) as u64) != word(4).checked_mul(word(2)) {
            return Err(ShardError::Corrupt("shard.rows is not rows × dim values"));
        }
        let rows_n = word(4);
        let (step, admission, opt_rows, eviction) = if version == 1 {
            (0, 0, rows_n, false)
        } else {
            if word(8) > 1 {
                return Err(ShardError::Corrupt("eviction flag is not 0 or 1"));
            }
            (word(5), word(6), word(7), word(8) == 1)
        };
        let section = |name: &'static str, what: &'static str| {
            if version == 1 {
                Ok(&[][..])
            } else {
                c.get(name).ok_or(ShardError::Corrupt(what))
            }
        };
        let counters = section(ADMISSION, "no shard.admission section")?.to_vec();
        let read_u32s = |b: &[u8]| -> Result<Vec<u32>, ShardError> {
            if !b.len().is_multiple_of(4) {
                return Err(ShardError::Corrupt("a section is not whole values"));
            }
            Ok(b.chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect())
        };
        let last_seen = read_u32s(section(LAST_SEEN, "no shard.last_seen section")?)?;
        let per_row = if eviction { rows_n } else { 0 };
        if last_seen.len() as u64 != per_row {
            return Err(ShardError::Corrupt(
                "shard.last_seen does not hold one value per row",
            ));
        }
        Ok(Self {
            step,
            admission,
            counters,
            last_seen,
            opt_rows,
            eviction,
            rank: word(0),
            ranks: word(1),
            dim: word(2),
            owner: word(3),
            ids: ids
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                .collect(),
            rows: match precision {
                RowPrecision::F32 => rows
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                RowPrecision::Bf16 => rows
                    .chunks_exact(2)
                    .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                    .collect(),
                RowPrecision::F16 => rows
                    .chunks_exact(2)
                    .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                    .collect(),
            },
            precision,
            rounding_seed,
            optimizer: optimizer.to_vec(),
        })
    }
}

/// Decode a checkpoint file's bytes into a snapshot (the reader the fuzz
/// target drives): container checks (magic, version, length, CRC), then the
/// sections.
///
/// # Errors
/// [`ShardError::Corrupt`] for anything that is not a valid shard checkpoint.
pub fn decode(bytes: &[u8]) -> Result<TableSnapshot, ShardError> {
    let c = Checkpoint::decode(bytes).map_err(|_| ShardError::Corrupt("not a checkpoint file"))?;
    TableSnapshot::from_checkpoint(&c)
}
