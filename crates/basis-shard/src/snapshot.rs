//! [`TableSnapshot`], one rank's table detached from it, and its encoding
//! in a `basis-std` checkpoint container (CRC-32 over the whole file). A
//! leaf: the table builds and reads snapshots, `checkpoint` writes them.
//!
//! Sections: `shard.meta` (format version `u32`, then `u64`s: rank, group
//! size, row dimension, owner-rule identity, rows), `shard.ids` (`u64` per
//! slot), `shard.rows` (`f32` per value, slot-major), `shard.optimizer`
//! (the optimizer's own versioned, checksummed export). All little-endian.

use alloc::vec::Vec;
use basis_std::checkpoint::Checkpoint;

use crate::ShardError;

/// The format version of `shard.meta`.
pub const SHARD_FORMAT: u32 = 1;

/// One rank's table, detached: what a checkpoint holds.
#[derive(Debug, Clone, PartialEq)]
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
    /// Row values, slot-major (`ids.len() × dim`).
    pub rows: Vec<f32>,
    /// The sparse optimizer's exported state.
    pub optimizer: Vec<u8>,
}

const META: &str = "shard.meta";
const IDS: &str = "shard.ids";
const ROWS: &str = "shard.rows";
const OPT: &str = "shard.optimizer";

impl TableSnapshot {
    /// The snapshot as a checkpoint container.
    pub fn to_checkpoint(&self) -> Checkpoint {
        let mut meta = Vec::with_capacity(44);
        meta.extend_from_slice(&SHARD_FORMAT.to_le_bytes());
        for x in [
            self.rank,
            self.ranks,
            self.dim,
            self.owner,
            self.ids.len() as u64,
        ] {
            meta.extend_from_slice(&x.to_le_bytes());
        }
        let ids: Vec<u8> = self.ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        let rows: Vec<u8> = self.rows.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut c = Checkpoint::new();
        // Fixed, distinct, short names: `insert` cannot fail on them.
        for (name, data) in [(META, meta), (IDS, ids), (ROWS, rows)] {
            let _ = c.insert(name, data);
        }
        let _ = c.insert(OPT, self.optimizer.clone());
        c
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
        if meta.len() != 44 {
            return Err(ShardError::Corrupt("shard.meta is not 44 bytes"));
        }
        let version = u32::from_le_bytes([meta[0], meta[1], meta[2], meta[3]]);
        if version != SHARD_FORMAT {
            return Err(ShardError::Corrupt("unknown shard.meta format version"));
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
        if ids.len() % 8 != 0 || rows.len() % 4 != 0 {
            return Err(ShardError::Corrupt("a section is not whole values"));
        }
        if (ids.len() / 8) as u64 != word(4) {
            return Err(ShardError::Corrupt(
                "shard.ids does not hold the rows counted",
            ));
        }
        if Some((rows.len() / 4) as u64) != word(4).checked_mul(word(2)) {
            return Err(ShardError::Corrupt("shard.rows is not rows × dim values"));
        }
        Ok(Self {
            rank: word(0),
            ranks: word(1),
            dim: word(2),
            owner: word(3),
            ids: ids
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                .collect(),
            rows: rows
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
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
