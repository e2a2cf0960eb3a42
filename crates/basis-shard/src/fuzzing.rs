//! Fuzz support (hidden): the checkpoint reader and the restore behind it
//! on arbitrary bytes, called by `fuzz/fuzz_targets/shard_checkpoint.rs`
//! and by this crate's tests on pseudo-random and mutated files.

use basis_core::{AdamConfig, ExactAdam, RowIndex};

use crate::{Admission, Eviction, OwnerRule, ShardedTable, TableConfig};

/// Decode `data` as a shard checkpoint; when it decodes, restore it into a
/// table made to match its identity fields (rank, group, owner rule,
/// admission rule, row precision and rounding seed, a dimension of 1–8),
/// so that the row, counter,
/// last-seen and optimizer checks behind them run too. Any outcome but a
/// panic (or an allocation beyond the input's size) is fine.
///
/// # Panics
/// Never on purpose: a panic is the bug the fuzzer looks for.
pub fn shard_checkpoint(data: &[u8]) {
    let Ok(mut snap) = crate::decode_checkpoint(data) else {
        return;
    };
    let dim = (snap.dim % 8 + 1) as usize;
    let admission = if snap.counters.is_empty() {
        Admission::Always
    } else {
        Admission::MinCount {
            min_count: 2,
            width: snap.counters.len(),
            depth: 1,
            decay_every: 0,
        }
    };
    let Ok(owner) = OwnerRule::hashed(1, 0) else {
        return;
    };
    let mut config = TableConfig::new(dim, owner, 0)
        .with_admission(admission)
        .with_precision(snap.precision, snap.rounding_seed);
    if snap.eviction {
        config = config.with_eviction(Eviction::ttl(3));
    }
    let Ok(adam) = ExactAdam::new(
        AdamConfig::default()
            .with_dim(dim)
            .with_row_index(RowIndex::Dense { rows: 0 }),
    ) else {
        return;
    };
    let Ok(mut table) = ShardedTable::new(config, adam) else {
        return;
    };
    let me = table.snapshot();
    snap.rank = me.rank;
    snap.ranks = me.ranks;
    snap.owner = me.owner;
    snap.admission = me.admission;
    snap.dim = me.dim;
    if table.restore_snapshot(snap).is_ok() {
        // A restored table answers and checkpoints again.
        let _ = table.checksum();
        let _ = table.snapshot();
    }
}
