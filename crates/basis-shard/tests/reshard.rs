//! Resharding: `P` ranks' checkpoints restored into `P' ≠ P` ranks. Every
//! row's values and optimizer state are equal after the move, and the run
//! continues bit for bit as a `P'`-rank run of the same steps (a sharded
//! table equals the single process at every group size). With admission
//! and eviction on, the sketches and last-seen steps move too.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;
use common::mix;

extern crate alloc;
use alloc::collections::BTreeMap;
use core::time::Duration;

use basis_core::{AdamConfig, Basis, BasisConfig, ExactAdam, OneChoice, RowIndex};
use basis_shard::{
    Admission, BoxedOptimizer as Dyn, Eviction, OwnerRule, RowInit, RowPrecision, ShardError,
    ShardedTable, TableConfig,
};
use basis_std::local::LocalComm;
use comm_traits::Communicator;

const DIM: usize = 4;

/// The ids of logical worker `w` at `step`: the batch of a step is split
/// over the ranks of the group, so any group size sees the same steps.
fn batch(step: u64) -> Vec<u64> {
    (0..24)
        .map(|k| mix(mix(step * 97 + k) % (30 + 3 * step)) >> 2)
        .collect()
}

fn grad_of(step: u64, id: u64) -> [f32; DIM] {
    common::grad(step, 0, id)
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Adam,
    Basis,
}

fn owner(kind: Kind, p: usize) -> OwnerRule {
    match kind {
        Kind::Adam => OwnerRule::hashed(p, 11).unwrap(),
        Kind::Basis => OwnerRule::buckets(OneChoice::new(7, 3).unwrap(), p).unwrap(),
    }
}

fn optimizer(kind: Kind, owner: &OwnerRule, rank: usize) -> Dyn {
    let dense = RowIndex::Dense { rows: 0 };
    Dyn(match kind {
        Kind::Adam => Box::new(
            ExactAdam::new(
                AdamConfig::default()
                    .with_dim(DIM)
                    .with_lr(0.05)
                    .with_row_index(dense),
            )
            .unwrap(),
        ),
        Kind::Basis => {
            let part = owner.partition(rank).unwrap().unwrap();
            Box::new(
                Basis::new(
                    BasisConfig::default()
                        .with_dim(DIM)
                        .with_lr(0.05)
                        .with_row_index(dense),
                    part,
                )
                .unwrap(),
            )
        }
    })
}

#[derive(Clone, Copy)]
struct Setup {
    kind: Kind,
    admission: Admission,
    eviction: Option<Eviction>,
    precision: RowPrecision,
}

fn table(s: Setup, p: usize, rank: usize) -> ShardedTable<Dyn> {
    let owner = owner(s.kind, p);
    let mut config = TableConfig::new(DIM, owner.clone(), rank)
        .with_init(RowInit::uniform(3, 0.1))
        .with_l2(0.01)
        .with_admission(s.admission)
        .with_precision(s.precision, 21);
    if let Some(e) = s.eviction {
        config = config.with_eviction(e);
    }
    ShardedTable::new(config, optimizer(s.kind, &owner, rank)).unwrap()
}

fn run(t: &mut ShardedTable<Dyn>, comm: &mut dyn Communicator, steps: core::ops::Range<u64>) {
    let (r, p) = (comm.rank(), comm.size());
    for step in steps {
        let all = batch(step);
        // Rank r takes every p-th id of the step's batch.
        let ids: Vec<u64> = all.iter().skip(r).step_by(p).copied().collect();
        let b = t.lookup(comm, &ids).unwrap();
        // The gradient of an id is a function of (step, id) and the number
        // of times the whole batch holds it, so every split sums the same.
        let grads: Vec<f32> = b
            .ids
            .iter()
            .flat_map(|&id| {
                let mine = ids.iter().filter(|&&x| x == id).count() as f32;
                grad_of(step, id).map(|g| g * mine)
            })
            .collect();
        t.apply(comm, &b, &grads).unwrap();
    }
}

fn on_ranks<T: Send>(p: usize, f: impl Fn(LocalComm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = LocalComm::group_with_timeout(p, Duration::from_secs(20))
            .into_iter()
            .map(|c| s.spawn(|| f(c)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

type Rows = BTreeMap<u64, (Vec<f32>, Option<Vec<u8>>)>;

/// Every rank's rows (and, for `state`, each row's exported state), merged.
fn merged(parts: Vec<Rows>) -> Rows {
    let mut all = BTreeMap::new();
    for part in parts {
        for (id, v) in part {
            assert!(all.insert(id, v).is_none(), "id {id} on two ranks");
        }
    }
    all
}

fn rows(t: &ShardedTable<Dyn>, state: bool) -> Rows {
    t.sorted_rows()
        .into_iter()
        .map(|(id, r)| {
            let s = state.then(|| t.row_state(id).unwrap().unwrap());
            (id, (r.to_vec(), s))
        })
        .collect()
}

/// `P` ranks for `k` steps, checkpoint, reshard into `P'`, `n − k` more
/// steps; against `P'` ranks for `n` steps straight.
fn reshard_round_trip(name: &str, s: Setup, p: usize, q: usize, k: u64, n: u64, state: bool) {
    let dir = std::env::temp_dir().join(format!(
        "basis-reshard-{name}-{p}-{q}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("ckpt");
    let before = merged(on_ranks(p, |mut c| {
        let mut t = table(s, p, c.rank());
        run(&mut t, &mut c, 0..k);
        t.checkpoint(&basis_shard::rank_path(&base, c.rank()))
            .unwrap();
        rows(&t, state)
    }));
    let old = owner(s.kind, p);
    let (moved, resumed): (Vec<Rows>, Vec<Rows>) = on_ranks(q, |mut c| {
        let mut t = table(s, q, c.rank());
        t.restore_resharded_files(&base, &old, |r| Ok(optimizer(s.kind, &old, r)))
            .unwrap();
        assert_eq!(t.steps(), k);
        let moved = rows(&t, state);
        run(&mut t, &mut c, k..n);
        (moved, rows(&t, false))
    })
    .into_iter()
    .unzip();
    let straight = merged(on_ranks(q, |mut c| {
        let mut t = table(s, q, c.rank());
        run(&mut t, &mut c, 0..n);
        rows(&t, false)
    }));
    assert!(!before.is_empty());
    assert_eq!(merged(moved), before, "{p} -> {q}: rows after the move");
    assert_eq!(merged(resumed), straight, "{p} -> {q}: continued");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn adam_rows_and_state_move_from_2_to_3_ranks_and_back() {
    let s = Setup {
        kind: Kind::Adam,
        admission: Admission::Always,
        eviction: None,
        precision: RowPrecision::F32,
    };
    reshard_round_trip("adam", s, 2, 3, 5, 10, true);
    reshard_round_trip("adam", s, 3, 2, 5, 10, true);
}

#[test]
fn admission_counters_and_last_seen_steps_move_too() {
    let s = Setup {
        kind: Kind::Adam,
        // A sketch much wider than the ids: exact counts, so the summed
        // sketches of the old ranks decide as a P' run's would.
        admission: Admission::min_count(2, 1 << 14, 3).unwrap(),
        eviction: Some(Eviction::ttl(3).with_capacity(30)),
        precision: RowPrecision::F32,
    };
    reshard_round_trip("stream", s, 2, 3, 6, 12, true);
    reshard_round_trip("stream", s, 3, 2, 6, 12, true);
}

#[test]
fn basis_bucket_partitions_move_with_their_rows() {
    let s = Setup {
        kind: Kind::Basis,
        admission: Admission::Always,
        eviction: None,
        precision: RowPrecision::F32,
    };
    reshard_round_trip("basis", s, 2, 3, 5, 10, false);
    reshard_round_trip("basis", s, 3, 2, 5, 10, false);
}

#[test]
fn bad_reshards_are_refused_with_typed_errors() {
    let s = Setup {
        kind: Kind::Adam,
        admission: Admission::Always,
        eviction: None,
        precision: RowPrecision::F32,
    };
    let p = 2;
    let snaps: Vec<_> = on_ranks(p, |mut c| {
        let mut t = table(s, p, c.rank());
        run(&mut t, &mut c, 0..3);
        t.snapshot()
    });
    let old = owner(Kind::Adam, p);
    let make = |r: usize| Ok(optimizer(Kind::Adam, &old, r));
    // A missing rank.
    let mut t = table(s, 3, 0);
    let e = t.restore_resharded(&old, snaps[..1].iter().cloned().map(Ok), make);
    assert!(
        matches!(
            e,
            Err(ShardError::Mismatch {
                what: "snapshots (one per old rank)",
                ..
            })
        ),
        "{e:?}"
    );
    // Ranks out of order.
    let mut t = table(s, 3, 0);
    let e = t.restore_resharded(&old, snaps.iter().rev().cloned().map(Ok), make);
    assert!(
        matches!(e, Err(ShardError::Mismatch { what: "rank", .. })),
        "{e:?}"
    );
    // Another owner rule than the snapshots'.
    let mut t = table(s, 3, 0);
    let wrong = OwnerRule::hashed(p, 12).unwrap();
    let e = t.restore_resharded(&wrong, snaps.iter().cloned().map(Ok), make);
    assert!(
        matches!(
            e,
            Err(ShardError::Mismatch {
                what: "owner rule",
                ..
            })
        ),
        "{e:?}"
    );
    // Into a table that holds rows.
    on_ranks(1, |mut c| {
        let mut u = table(s, 1, 0);
        run(&mut u, &mut c, 0..1);
        assert!(matches!(
            u.restore_resharded(&old, snaps.iter().cloned().map(Ok), make),
            Err(ShardError::NotEmpty)
        ));
    });
    // An id held by two old ranks.
    let mut twice = snaps.clone();
    twice[1].ids[0] = twice[0].ids[0];
    let one = OwnerRule::hashed(1, 11).unwrap();
    let mut t1 = ShardedTable::new(
        TableConfig::new(DIM, one.clone(), 0),
        optimizer(Kind::Adam, &one, 0),
    )
    .unwrap();
    let e = t1.restore_resharded(&old, twice.into_iter().map(Ok), make);
    assert!(matches!(e, Err(ShardError::Corrupt(_))), "{e:?}");
}

#[test]
fn bf16_rows_move_unchanged_and_continue_bit_for_bit() {
    for s in [
        Setup {
            kind: Kind::Basis,
            admission: Admission::Always,
            eviction: None,
            precision: RowPrecision::Bf16,
        },
        Setup {
            kind: Kind::Adam,
            admission: Admission::min_count(2, 1 << 14, 3).unwrap(),
            eviction: Some(Eviction::ttl(3).with_capacity(30)),
            precision: RowPrecision::F16,
        },
    ] {
        reshard_round_trip("narrow", s, 2, 3, 5, 10, matches!(s.kind, Kind::Adam));
        reshard_round_trip("narrow", s, 3, 2, 5, 10, false);
    }
    // Rows of another precision are refused, typed.
    let dir = std::env::temp_dir().join(format!("basis-reshard-prec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("ckpt");
    let narrow = Setup {
        kind: Kind::Adam,
        admission: Admission::Always,
        eviction: None,
        precision: RowPrecision::Bf16,
    };
    on_ranks(2, |mut c| {
        let mut t = table(narrow, 2, c.rank());
        run(&mut t, &mut c, 0..3);
        t.checkpoint(&basis_shard::rank_path(&base, c.rank()))
            .unwrap();
    });
    let wide = Setup {
        precision: RowPrecision::F32,
        ..narrow
    };
    let old = owner(Kind::Adam, 2);
    let e = table(wide, 3, 0)
        .restore_resharded_files(&base, &old, |r| Ok(optimizer(Kind::Adam, &old, r)))
        .unwrap_err();
    assert!(
        matches!(
            e,
            ShardError::Precision {
                table: RowPrecision::F32,
                checkpoint: RowPrecision::Bf16
            }
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
