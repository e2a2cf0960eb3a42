//! The undo path of a training step whose insertions fail part-way: the
//! compact index refuses ids chosen against its hash
//! (`basis_core::slot_index::clustered_keys`: hundreds of ids on the same
//! few buckets), after the step has already inserted other new ids, grown
//! the optimizer and counted admissions. The table must be as before the
//! step (its snapshot equal: ids, rows, optimizer state and rows, counters,
//! last-seen steps), restorable, and the run must go on exactly as a twin
//! table's that never saw the failed step.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;
use common::mix;

use basis_core::slot_index::clustered_keys;

use basis_shard::{
    Admission, BoxedOptimizer as Dyn, Eviction, IndexKind, OwnerRule, RowInit, ShardError,
    ShardedTable, TableConfig,
};
use basis_std::local::LocalComm;
use comm_traits::Communicator;

const DIM: usize = 4;

fn adam() -> Dyn {
    common::adam(DIM)
}

/// A one-rank table with the compact index.
fn table(admission: Admission, eviction: Option<Eviction>) -> ShardedTable<Dyn> {
    let mut config = TableConfig::new(DIM, OwnerRule::hashed(1, 3).unwrap(), 0)
        .with_init(RowInit::uniform(7, 0.1))
        .with_admission(admission)
        .with_index(IndexKind::Compact);
    if let Some(e) = eviction {
        config = config.with_eviction(e);
    }
    ShardedTable::new(config, adam()).unwrap()
}

fn step(t: &mut ShardedTable<Dyn>, comm: &mut dyn Communicator, ids: &[u64], k: u64) {
    let batch = t.lookup(comm, ids).unwrap();
    let grads: Vec<f32> = (0..batch.ids.len() * DIM)
        .map(|i| ((mix(k ^ (i as u64) << 20) >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2)
        .collect();
    t.apply(comm, &batch, &grads).unwrap();
}

/// Ordinary ids of step `k`: repeats of 20 ids, and 3 ids new in step
/// `2m`, seen again in step `2m + 1` (so min-count admission admits them).
/// Few rows: the index stays one small segment, where the clustered ids
/// share their two buckets however it grows (see `clustered_keys`).
fn ids_of(k: u64) -> Vec<u64> {
    (0..20)
        .map(|i| mix(k * 7 + i) % 20 + 1)
        .chain((0..3).map(|i| 10_000 * (k / 2 + 1) + i))
        .collect()
}

#[test]
fn a_step_whose_insertion_fails_leaves_the_table_as_before() {
    let bad = clustered_keys(0, 400);
    let configs = [
        (Admission::Always, None),
        (Admission::Always, Some(Eviction::ttl(1000))),
        (Admission::min_count(2, 1 << 10, 3).unwrap(), None),
    ];
    for (admission, eviction) in configs {
        let mut comm = LocalComm::group(1).pop().unwrap();
        let mut t = table(admission, eviction);
        let mut twin = table(admission, eviction);
        for k in 0..4 {
            step(&mut t, &mut comm, &ids_of(k), k);
            step(&mut twin, &mut comm, &ids_of(k), k);
        }
        if admission != Admission::Always {
            // Seen once: the next sighting admits them (both tables).
            step(&mut t, &mut comm, &bad, 100);
            step(&mut twin, &mut comm, &bad, 100);
        }
        let before = t.snapshot();
        assert_eq!(before, twin.snapshot());
        // Held ids, new ordinary ids (one of them twice), then the
        // clustered ids: the step inserts rows before one fails.
        let mut ids: Vec<u64> = ids_of(0)[..5].to_vec();
        ids.extend((0..10).map(|i| 1_000_000 + i));
        ids.push(1_000_003);
        ids.extend(&bad);
        ids.push(2_000_000);
        let err = t.lookup(&mut comm, &ids).unwrap_err();
        assert!(
            matches!(err, ShardError::OutOfMemory { .. }),
            "{err:?} ({admission:?}, {eviction:?})"
        );
        let after = t.snapshot();
        assert_eq!(after.ids, before.ids, "{admission:?}, {eviction:?}");
        assert_eq!(after, before, "{admission:?}, {eviction:?}");
        assert_eq!(t.len(), before.ids.len());
        // The snapshot restores, and the run goes on as the twin's.
        let mut restored = table(admission, eviction);
        restored.restore_snapshot(after).unwrap();
        for k in 4..8 {
            step(&mut t, &mut comm, &ids_of(k), k);
            step(&mut twin, &mut comm, &ids_of(k), k);
            step(&mut restored, &mut comm, &ids_of(k), k);
            assert_eq!(t.snapshot(), twin.snapshot(), "step {k}");
            assert_eq!(restored.snapshot(), twin.snapshot(), "step {k}");
        }
        assert!(t.len() > before.ids.len(), "the run went on inserting");
    }
}
