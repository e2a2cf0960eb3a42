//! The sharded table against an obviously correct single-process reference
//! (a `BTreeMap` of rows stepped by id), and every fault of a sharded run:
//! a communicator of another group, a rank that dies, skewed ids, out of
//! memory while growing, stale batches, corrupt and mixed checkpoints.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;
use common::mix;

use basis_core::half::{bf16, f16};
use basis_core::{
    AdagradConfig, AdamConfig, Basis, BasisConfig, ExactAdam, LowPrecisionRows, OneChoice,
    RowAccess, RowFormat, RowIndex, RowwiseAdagrad, Sgd, SparseOptimizer,
};
use basis_shard::{
    BoxedOptimizer as Dyn, OwnerRule, RowInit, RowPrecision, ShardError, ShardedTable, TableConfig,
};
use basis_std::fault::ExitsAt;
use basis_std::local::LocalComm;
use comm_traits::Communicator;
extern crate alloc;
use alloc::collections::BTreeMap;
use core::time::Duration;

const DIM: usize = 4;
const L2: f32 = 0.25;

/// Rank `r`'s ids at `step` (repeats within and across ranks, ids from the
/// whole u64 space) and a gradient per unique id, as a function of
/// `(step, r, id)` only.
fn ids_of(step: u64, r: usize) -> Vec<u64> {
    (0..9)
        .map(|k| mix(mix(step * 31 + r as u64 * 7 + k) % (12 + step)) >> 1)
        .collect()
}

fn grad_of(step: u64, r: usize, id: u64) -> [f32; DIM] {
    common::grad(step, (r as u64) << 40, id)
}

/// The optimizers under test (dense growable state for the table, a sparse
/// index for the by-id reference), BASIS over `part` when given.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Adam,
    Adagrad,
    Sgd,
    Basis,
}

const BUCKETS: u32 = 5;

fn build(
    kind: Kind,
    index: RowIndex,
    part: Option<basis_shard::PartitionedBuckets>,
) -> Box<dyn SparseOptimizer + Send> {
    match kind {
        Kind::Adam => Box::new(
            ExactAdam::new(
                AdamConfig::default()
                    .with_dim(DIM)
                    .with_lr(0.05)
                    .with_row_index(index),
            )
            .unwrap(),
        ),
        Kind::Adagrad => Box::new(
            RowwiseAdagrad::new(
                AdagradConfig::default()
                    .with_dim(DIM)
                    .with_lr(0.05)
                    .with_row_index(index),
            )
            .unwrap(),
        ),
        Kind::Sgd => Box::new(Sgd::new(DIM, 0.5).unwrap()),
        Kind::Basis => {
            let config = BasisConfig::default().with_dim(DIM).with_row_index(index);
            match part {
                Some(p) => Box::new(Basis::new(config, p).unwrap()),
                None => Box::new(Basis::new(config, global()).unwrap()),
            }
        }
    }
}

fn global() -> OneChoice {
    OneChoice::new(BUCKETS, 9).unwrap()
}

fn owner_for(kind: Kind, p: usize) -> OwnerRule {
    match kind {
        Kind::Basis => OwnerRule::buckets(global(), p).unwrap(),
        _ => OwnerRule::hashed(p, 5).unwrap(),
    }
}

fn table(kind: Kind, owner: &OwnerRule, rank: usize) -> ShardedTable<Dyn> {
    table_at(kind, owner, rank, RowPrecision::F32, 0)
}

/// [`table`] with rows stored at `precision`, rounding keyed by `seed`.
fn table_at(
    kind: Kind,
    owner: &OwnerRule,
    rank: usize,
    precision: RowPrecision,
    seed: u64,
) -> ShardedTable<Dyn> {
    let part = owner.partition(rank).unwrap();
    let opt = build(kind, RowIndex::Dense { rows: 0 }, part);
    let config = TableConfig::new(DIM, owner.clone(), rank)
        .with_init(RowInit::uniform(1, 0.1))
        .with_l2(L2)
        .with_precision(precision, seed);
    ShardedTable::new(config, Dyn(opt)).unwrap()
}

/// `steps` steps from `from` on this rank's table.
fn run_steps(
    t: &mut ShardedTable<Dyn>,
    comm: &mut dyn Communicator,
    steps: core::ops::Range<u64>,
) -> Result<(), ShardError> {
    let r = comm.rank();
    for step in steps {
        let batch = t.lookup(comm, &ids_of(step, r))?;
        let grads: Vec<f32> = batch
            .ids
            .iter()
            .flat_map(|&id| grad_of(step, r, id))
            .collect();
        t.apply(comm, &batch, &grads)?;
    }
    Ok(())
}

struct Reference {
    rows: BTreeMap<u64, Vec<f32>>,
}

impl RowAccess for Reference {
    fn dim(&self) -> usize {
        DIM
    }
    fn row_mut(&mut self, id: u64) -> Option<&mut [f32]> {
        self.rows.get_mut(&id).map(Vec::as_mut_slice)
    }
}

/// The single process: every id's gradients summed in rank order, `l2·θ`
/// once per row, one step by id.
fn reference(kind: Kind, p: usize, steps: u64) -> BTreeMap<u64, Vec<f32>> {
    let init = RowInit::uniform(1, 0.1);
    let mut opt = build(kind, RowIndex::Sparse, None);
    let mut table = Reference {
        rows: BTreeMap::new(),
    };
    for step in 0..steps {
        let mut sum: BTreeMap<u64, [f32; DIM]> = BTreeMap::new();
        for r in 0..p {
            let mut uniq = ids_of(step, r);
            uniq.sort_unstable();
            uniq.dedup();
            for id in uniq {
                let g = grad_of(step, r, id);
                match sum.get_mut(&id) {
                    Some(s) => s.iter_mut().zip(g).for_each(|(a, b)| *a += b),
                    None => {
                        sum.insert(id, g);
                    }
                }
            }
        }
        let ids: Vec<u64> = sum.keys().copied().collect();
        let mut grads = Vec::new();
        for (id, g) in &sum {
            let row = table.rows.entry(*id).or_insert_with(|| {
                let mut v = vec![0.0; DIM];
                init.fill(*id, &mut v);
                v
            });
            grads.extend(g.iter().zip(row.iter()).map(|(g, t)| g + L2 * t));
        }
        opt.step(&ids, &grads, &mut table).unwrap();
    }
    table.rows
}

/// The single process with narrow rows: [`reference`]'s steps on
/// `basis_core`'s own [`LowPrecisionRows`] (rows by id, rounded with its
/// step counter), each row created at its `RowInit` value rounded to
/// nearest.
fn reference_narrow<T: RowFormat>(
    kind: Kind,
    p: usize,
    steps: u64,
    seed: u64,
) -> BTreeMap<u64, Vec<f32>> {
    let init = RowInit::uniform(1, 0.1);
    let mut opt = build(kind, RowIndex::Sparse, None);
    let mut table = LowPrecisionRows::<T>::new(DIM, seed).unwrap();
    let mut seen = alloc::collections::BTreeSet::new();
    for step in 0..steps {
        let mut sum: BTreeMap<u64, [f32; DIM]> = BTreeMap::new();
        for r in 0..p {
            let mut uniq = ids_of(step, r);
            uniq.sort_unstable();
            uniq.dedup();
            for id in uniq {
                let g = grad_of(step, r, id);
                match sum.get_mut(&id) {
                    Some(s) => s.iter_mut().zip(g).for_each(|(a, b)| *a += b),
                    None => {
                        sum.insert(id, g);
                    }
                }
            }
        }
        let ids: Vec<u64> = sum.keys().copied().collect();
        let mut grads = Vec::new();
        let mut row = [0.0f32; DIM];
        for (id, g) in &sum {
            if seen.insert(*id) {
                init.fill(*id, &mut row);
                table.try_push(*id, &row).unwrap();
            }
            assert!(table.read(*id, &mut row));
            grads.extend(g.iter().zip(row.iter()).map(|(g, t)| g + L2 * t));
        }
        let mut rows = table.begin_step();
        opt.step(&ids, &grads, &mut rows).unwrap();
    }
    seen.into_iter()
        .map(|id| {
            let mut row = vec![0.0; DIM];
            assert!(table.read(id, &mut row));
            (id, row)
        })
        .collect()
}

fn group(p: usize) -> Vec<LocalComm> {
    LocalComm::group_with_timeout(p, Duration::from_secs(20))
}

/// Every rank's `f(comm)` on its own thread.
fn on_ranks<T: Send>(p: usize, f: impl Fn(LocalComm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = group(p).into_iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn sharded_table_equals_the_single_process_bit_for_bit() {
    let steps = 12;
    for kind in [Kind::Adam, Kind::Adagrad, Kind::Sgd, Kind::Basis] {
        for p in 1..=4 {
            let want = reference(kind, p, steps);
            let owner = owner_for(kind, p);
            let got = on_ranks(p, |mut c| {
                let mut t = table(kind, &owner, c.rank());
                run_steps(&mut t, &mut c, 0..steps).unwrap();
                let rows: Vec<(u64, Vec<f32>)> = t
                    .sorted_rows()
                    .into_iter()
                    .map(|(id, r)| (id, r.to_vec()))
                    .collect();
                // Each id lives on its owner only.
                assert!(rows.iter().all(|(id, _)| owner.owner(*id) == c.rank()));
                rows
            });
            let got: BTreeMap<u64, Vec<f32>> = got.into_iter().flatten().collect();
            assert_eq!(got.len(), want.len(), "{kind:?} P={p}");
            for (id, row) in &want {
                assert_eq!(&got[id], row, "{kind:?} P={p} row {id}");
            }
        }
    }
}

/// Every rank's rows of a `p`-rank run of `steps` steps, merged by id.
fn sharded_rows(
    kind: Kind,
    p: usize,
    steps: u64,
    precision: RowPrecision,
    seed: u64,
) -> BTreeMap<u64, Vec<f32>> {
    let owner = owner_for(kind, p);
    let got = on_ranks(p, |mut c| {
        let mut t = table_at(kind, &owner, c.rank(), precision, seed);
        assert_eq!(t.precision(), precision);
        run_steps(&mut t, &mut c, 0..steps).unwrap();
        let rows = t.sorted_rows();
        assert!(rows.iter().all(|(id, _)| owner.owner(*id) == c.rank()));
        rows
    });
    got.into_iter().flatten().collect()
}

#[test]
fn bf16_and_f16_sharded_tables_equal_the_single_process_bit_for_bit() {
    let steps = 12;
    let seed = 77;
    for kind in [Kind::Adam, Kind::Adagrad, Kind::Sgd, Kind::Basis] {
        let f32_rows = sharded_rows(kind, 2, steps, RowPrecision::F32, seed);
        for p in 1..=4 {
            let want = reference_narrow::<bf16>(kind, p, steps, seed);
            let got = sharded_rows(kind, p, steps, RowPrecision::Bf16, seed);
            assert_eq!(got, want, "bf16 {kind:?} P={p}");
            // Every value is a bf16 (the rows are stored narrow).
            assert!(
                got.values()
                    .flatten()
                    .all(|&x| bf16::from_f32(x).to_f32() == x)
            );
            if p == 2 {
                // Not the f32 run under another name.
                assert_ne!(got, f32_rows, "{kind:?}");
            }
        }
        for p in [1, 3] {
            let want = reference_narrow::<f16>(kind, p, steps, seed);
            let got = sharded_rows(kind, p, steps, RowPrecision::F16, seed);
            assert_eq!(got, want, "f16 {kind:?} P={p}");
        }
    }
    // The seed keys the rounding: another seed, other rows.
    assert_ne!(
        sharded_rows(Kind::Sgd, 2, steps, RowPrecision::Bf16, 1),
        sharded_rows(Kind::Sgd, 2, steps, RowPrecision::Bf16, 2)
    );
}

/// SGD steps a quarter of a representable step long (below 1.0: 2^-8 in
/// bf16, 2^-11 in f16) from 1.0: rounding to nearest would never move a
/// row; stochastic rounding moves the mean by the f32 sum of the updates
/// (`E[stored] = updated`).
#[test]
fn stochastic_rounding_in_the_table_is_unbiased() {
    let (rows, steps, lr) = (1024u64, 200u64, 1.0f32);
    let owner = OwnerRule::hashed(2, 3).unwrap();
    // Per value ≤ `steps` rounding errors of variance ≤ ulp²/4: the mean
    // of 4096 values has sd ≤ 4.3e-4 (bf16), 5.4e-5 (f16); ~5 sd allowed.
    for (precision, g, tol) in [
        (RowPrecision::Bf16, 2f32.powi(-10), 2e-3),
        (RowPrecision::F16, 2f32.powi(-13), 3e-4),
    ] {
        let means = on_ranks(2, |mut c| {
            let config = TableConfig::new(DIM, owner.clone(), c.rank())
                .with_init(RowInit::from_fn(|_, r| r.fill(1.0)))
                .with_precision(precision, 5);
            let mut t = ShardedTable::new(config, Sgd::new(DIM, lr).unwrap()).unwrap();
            // Each rank asks for half of the ids every step.
            let ids: Vec<u64> = (0..rows).filter(|i| i % 2 == c.rank() as u64).collect();
            for _ in 0..steps {
                let b = t.lookup(&mut c, &ids).unwrap();
                t.apply(&mut c, &b, &vec![g; b.rows.len()]).unwrap();
            }
            let rows = t.sorted_rows();
            let n = (rows.len() * DIM) as f64;
            let sum: f64 = rows.iter().flat_map(|r| &r.1).map(|&x| f64::from(x)).sum();
            (sum, n)
        });
        let (sum, n) = means.iter().fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
        assert_eq!(n, (rows as usize * DIM) as f64);
        let mean = sum / n;
        let want = 1.0 - steps as f64 * f64::from(lr * g);
        assert!(
            (mean - want).abs() < tol,
            "{precision}: mean {mean}, want {want}"
        );
    }
}

#[test]
fn evaluation_reads_without_creating_rows() {
    let owner = OwnerRule::hashed(2, 3).unwrap();
    let out = on_ranks(2, |mut c| {
        let mut t = table(Kind::Sgd, &owner, c.rank());
        run_steps(&mut t, &mut c, 0..2).unwrap();
        let held = t.len();
        let unseen = [u64::MAX - 1, 5 << 50];
        let seen = ids_of(1, c.rank());
        let mut ask = seen.clone();
        ask.extend(unseen);
        let b = t.lookup_eval(&mut c, &ask).unwrap();
        assert_eq!(t.len(), held, "evaluation created rows");
        // An unseen id comes back as its initial row.
        for id in unseen {
            let mut want = vec![0.0; DIM];
            RowInit::uniform(1, 0.1).fill(id, &mut want);
            assert_eq!(b.row(b.position(id).unwrap()), &want[..]);
        }
        // An evaluation batch cannot be applied.
        let g = vec![0.0; b.rows.len()];
        assert!(matches!(
            t.apply(&mut c, &b, &g),
            Err(ShardError::StaleBatch)
        ));
        (b, seen)
    });
    // A held id reads the same as a training lookup of it would.
    let owner2 = owner.clone();
    let again = on_ranks(2, |mut c| {
        let mut t = table(Kind::Sgd, &owner2, c.rank());
        run_steps(&mut t, &mut c, 0..2).unwrap();
        let r = c.rank();
        t.lookup(&mut c, &out[r].1).unwrap()
    });
    for (r, (b, seen)) in out.iter().enumerate() {
        for id in seen {
            let a = &again[r];
            assert_eq!(
                b.row(b.position(*id).unwrap()),
                a.row(a.position(*id).unwrap())
            );
        }
    }
}

/// The step keeps its routing between `lookup` and `apply` in buffers it
/// reuses: an evaluation in between (its own routing, other ids) must not
/// disturb the pending step.
#[test]
fn an_evaluation_between_a_lookup_and_its_apply_changes_nothing() {
    let steps = 8;
    for p in [1, 3] {
        let want = reference(Kind::Adam, p, steps);
        let owner = owner_for(Kind::Adam, p);
        let got = on_ranks(p, |mut c| {
            let r = c.rank();
            let mut t = table(Kind::Adam, &owner, r);
            for step in 0..steps {
                let batch = t.lookup(&mut c, &ids_of(step, r)).unwrap();
                let other: Vec<u64> = (0..5).map(|k| mix(step << 8 | k)).collect();
                let seen = t.lookup_eval(&mut c, &other).unwrap();
                assert_eq!(seen.ids.len(), 5);
                let grads: Vec<f32> = batch
                    .ids
                    .iter()
                    .flat_map(|&id| grad_of(step, r, id))
                    .collect();
                t.apply(&mut c, &batch, &grads).unwrap();
            }
            t.sorted_rows()
        });
        let got: BTreeMap<u64, Vec<f32>> = got.into_iter().flatten().collect();
        assert_eq!(got, want, "P={p}");
    }
}

/// A loop that keeps one training `Batch` and one evaluation `Batch` across
/// steps (`lookup_into`, `lookup_eval_into`: buffers reused, sizes going
/// up and down) gets the batches `lookup` / `lookup_eval` return and ends
/// at the single-process reference; a failed `lookup_into` leaves its
/// batch empty and unappliable.
#[test]
fn batches_kept_across_steps_equal_fresh_ones() {
    let steps = 10;
    for p in [1, 3] {
        let want = reference(Kind::Basis, p, steps);
        let owner = owner_for(Kind::Basis, p);
        let got = on_ranks(p, |mut c| {
            let r = c.rank();
            let mut t = table(Kind::Basis, &owner, r);
            let mut twin = table(Kind::Basis, &owner, r);
            let (mut batch, mut seen) =
                (basis_shard::Batch::default(), basis_shard::Batch::default());
            let mut grads = Vec::new();
            for step in 0..steps {
                let ids = ids_of(step, r);
                t.lookup_into(&mut c, &ids, &mut batch).unwrap();
                let fresh = twin.lookup(&mut c, &ids).unwrap();
                assert_eq!(batch, fresh);
                // Evaluation batches of 0..7 ids, in between.
                let other: Vec<u64> = (0..step % 7).map(|k| mix(step << 8 | k)).collect();
                t.lookup_eval_into(&mut c, &other, &mut seen).unwrap();
                assert_eq!(seen, twin.lookup_eval(&mut c, &other).unwrap());
                grads.clear();
                grads.extend(batch.ids.iter().flat_map(|&id| grad_of(step, r, id)));
                t.apply(&mut c, &batch, &grads).unwrap();
                twin.apply(&mut c, &fresh, &grads).unwrap();
            }
            assert_eq!(t.checksum(), twin.checksum());
            t.sorted_rows()
        });
        let got: BTreeMap<u64, Vec<f32>> = got.into_iter().flatten().collect();
        assert_eq!(got, want, "P={p}");
    }
    // A failed lookup empties the batch it was given: it cannot be applied.
    let owner = OwnerRule::hashed(2, 3).unwrap();
    let mut t = table(Kind::Sgd, &owner, 0);
    let mut one = group(1).pop().unwrap();
    let mut mine = table(Kind::Sgd, &OwnerRule::hashed(1, 3).unwrap(), 0);
    let mut batch = mine.lookup(&mut one, &[1, 2]).unwrap();
    assert!(t.lookup_into(&mut one, &[1], &mut batch).is_err());
    assert!(batch.ids.is_empty() && batch.rows.is_empty());
    assert!(matches!(
        mine.apply(&mut one, &batch, &[]),
        Err(ShardError::StaleBatch)
    ));
}

/// `TableConfig::new` takes the library's default index layout (what the
/// CLI's `--row-index` falls back to when unset).
#[test]
fn a_new_config_uses_the_default_index() {
    let config = TableConfig::new(DIM, OwnerRule::hashed(1, 3).unwrap(), 0);
    assert_eq!(config.index, basis_shard::IndexKind::default());
}

#[test]
fn stale_batches_and_wrong_lengths_are_refused_before_any_exchange() {
    let owner = OwnerRule::hashed(1, 3).unwrap();
    let mut c = group(1).pop().unwrap();
    let mut t = table(Kind::Adam, &owner, 0);
    let b = t.lookup(&mut c, &[1, 2]).unwrap();
    let short = vec![0.0; DIM];
    assert!(matches!(
        t.apply(&mut c, &b, &short),
        Err(ShardError::GradLength {
            expected: 8,
            got: 4
        })
    ));
    let g = vec![0.1; 2 * DIM];
    t.apply(&mut c, &b, &g).unwrap();
    assert!(matches!(
        t.apply(&mut c, &b, &g),
        Err(ShardError::StaleBatch)
    ));
}

#[test]
fn a_communicator_of_another_group_is_refused() {
    let owner = OwnerRule::hashed(2, 3).unwrap();
    let mut t = table(Kind::Sgd, &owner, 0);
    let mut c = group(3).into_iter().next().unwrap();
    let e = t.lookup(&mut c, &[1]).unwrap_err();
    assert!(
        matches!(
            e,
            ShardError::GroupMismatch {
                table: (0, 2),
                comm: (0, 3)
            }
        ),
        "{e}"
    );
}

#[test]
fn a_rank_that_dies_fails_every_other_rank_without_a_hang() {
    for die_at in [0u64, 1, 2, 3, 7] {
        let owner = OwnerRule::hashed(3, 3).unwrap();
        let out = on_ranks(3, |c| {
            let rank = c.rank();
            let mut c = ExitsAt::new(c, (rank == 1).then_some(die_at));
            let mut t = table(Kind::Adam, &owner, rank);
            run_steps(&mut t, &mut c, 0..5)
        });
        for (r, o) in out.iter().enumerate() {
            assert!(
                matches!(o, Err(ShardError::Comm(_))),
                "die_at {die_at} rank {r}: {o:?}"
            );
        }
    }
}

#[test]
fn all_ids_on_one_rank_still_train_correctly_and_show_in_the_stats() {
    let p = 3;
    let skewed = OwnerRule::custom(p, 1, |_| 0).unwrap();
    let want = reference(Kind::Adam, p, 6);
    let out = on_ranks(p, |mut c| {
        let mut t = table(Kind::Adam, &skewed, c.rank());
        run_steps(&mut t, &mut c, 0..6).unwrap();
        let rows: Vec<(u64, Vec<f32>)> = t
            .sorted_rows()
            .into_iter()
            .map(|(id, r)| (id, r.to_vec()))
            .collect();
        (rows, t.stats().ids_served)
    });
    assert!(out[1].0.is_empty() && out[2].0.is_empty());
    assert_eq!(out[1].1 + out[2].1, 0);
    assert!(out[0].1 > 0);
    let got: BTreeMap<u64, Vec<f32>> = out[0].0.iter().cloned().collect();
    assert_eq!(got, want);
}

#[test]
fn out_of_memory_while_growing_is_a_typed_error_and_changes_nothing() {
    // Rows of 2^60 values cannot be reserved (the size overflows).
    let dim = 1usize << 60;
    let owner = OwnerRule::hashed(1, 0).unwrap();
    let mut t =
        ShardedTable::new(TableConfig::new(dim, owner, 0), Sgd::new(dim, 0.1).unwrap()).unwrap();
    let mut c = group(1).pop().unwrap();
    let e = t.lookup(&mut c, &[3, 4]).unwrap_err();
    assert!(matches!(e, ShardError::OutOfMemory { rows: 2 }), "{e}");
    assert_eq!(t.len(), 0);
    assert!(e.to_string().contains("out of memory"));
}

#[test]
fn memory_reports_index_rows_and_state_apart() {
    let owner = OwnerRule::hashed(1, 0).unwrap();
    let mut c = group(1).pop().unwrap();
    let mut t = table(Kind::Adam, &owner, 0);
    let ids: Vec<u64> = (0..1000).map(mix).collect();
    let b = t.lookup(&mut c, &ids).unwrap();
    t.apply(&mut c, &b, &vec![0.1; b.rows.len()]).unwrap();
    let m = t.memory();
    assert_eq!(m.rows, 1000);
    // hashbrown: 16-byte (id, slot) entries + 1 control byte each.
    assert!(m.index_bytes >= 17 * 1000, "{m:?}");
    assert!(m.row_bytes >= 1000 * DIM * 4, "{m:?}");
    // Adam: m and v, DIM f32 each, per row.
    assert!(
        m.state_bytes >= 1000 * DIM * 8 && m.state_bytes < 1000 * DIM * 8 * 2,
        "{m:?}"
    );
    // The step's kept buffers: at least the rows served, received and the
    // gradients sent, received and summed (`1000 × DIM` f32 each) ...
    let opt_scratch = t.optimizer().memory().scratch;
    assert!(
        m.scratch_bytes >= opt_scratch + 5 * 1000 * DIM * 4,
        "{m:?}, optimizer scratch {opt_scratch}"
    );
    // ... reused, not grown, by steps no larger.
    for k in 0..3u64 {
        let ids: Vec<u64> = (0..1000).map(|i| mix(i + k * 500)).collect();
        let b = t.lookup(&mut c, &ids).unwrap();
        t.apply(&mut c, &b, &vec![0.1; b.rows.len()]).unwrap();
    }
    assert_eq!(t.memory().scratch_bytes, m.scratch_bytes);
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("basis-shard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn checkpoint_and_restore_continue_bit_for_bit() {
    let dir = temp_dir("resume");
    for kind in [Kind::Adam, Kind::Basis] {
        let p = 3;
        let owner = owner_for(kind, p);
        let base = dir.join(format!("{kind:?}"));
        let straight = on_ranks(p, |mut c| {
            let mut t = table(kind, &owner, c.rank());
            run_steps(&mut t, &mut c, 0..8).unwrap();
            t.checksum()
        });
        on_ranks(p, |mut c| {
            let mut t = table(kind, &owner, c.rank());
            run_steps(&mut t, &mut c, 0..4).unwrap();
            t.checkpoint(&basis_shard::rank_path(&base, c.rank()))
                .unwrap();
        });
        let resumed = on_ranks(p, |mut c| {
            let mut t = table(kind, &owner, c.rank());
            t.restore(&basis_shard::rank_path(&base, c.rank())).unwrap();
            run_steps(&mut t, &mut c, 4..8).unwrap();
            t.checksum()
        });
        assert_eq!(resumed, straight, "{kind:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_and_mixed_checkpoints_are_refused_with_typed_errors() {
    let dir = temp_dir("bad");
    let base = dir.join("t");
    let owner = OwnerRule::hashed(2, 3).unwrap();
    on_ranks(2, |mut c| {
        let mut t = table(Kind::Adam, &owner, c.rank());
        run_steps(&mut t, &mut c, 0..3).unwrap();
        t.checkpoint(&basis_shard::rank_path(&base, c.rank()))
            .unwrap();
    });
    let f0 = basis_shard::rank_path(&base, 0);
    let f1 = basis_shard::rank_path(&base, 1);
    // Rank 1's file offered to rank 0: mixed files.
    let e = table(Kind::Adam, &owner, 0).restore(&f1).unwrap_err();
    assert!(
        matches!(
            e,
            ShardError::Mismatch {
                what: "rank",
                expected: 0,
                found: 1
            }
        ),
        "{e}"
    );
    // Another group size / owner rule / dimension.
    let other = OwnerRule::hashed(2, 4).unwrap();
    let e = table(Kind::Adam, &other, 0).restore(&f0).unwrap_err();
    assert!(
        matches!(
            e,
            ShardError::Mismatch {
                what: "owner rule",
                ..
            }
        ),
        "{e}"
    );
    let three = OwnerRule::hashed(3, 3).unwrap();
    let e = table(Kind::Adam, &three, 0).restore(&f0).unwrap_err();
    assert!(
        matches!(
            e,
            ShardError::Mismatch {
                what: "group size",
                ..
            }
        ),
        "{e}"
    );
    // Another optimizer's state: refused by the optimizer, table empty.
    let mut t = table(Kind::Adagrad, &owner, 0);
    let e = t.restore(&f0).unwrap_err();
    assert!(matches!(e, ShardError::State(_)), "{e}");
    assert!(t.is_empty());
    // A flipped byte anywhere: the container's CRC.
    let bytes = std::fs::read(&f0).unwrap();
    for at in [0, 20, bytes.len() / 2, bytes.len() - 1] {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        let bad = dir.join("flipped");
        std::fs::write(&bad, &b).unwrap();
        let e = table(Kind::Adam, &owner, 0).restore(&bad).unwrap_err();
        assert!(matches!(e, ShardError::Checkpoint(_)), "byte {at}: {e}");
        assert!(basis_shard::decode_checkpoint(&b).is_err());
    }
    // Valid container, malformed sections.
    let good = basis_shard::decode_checkpoint(&bytes).unwrap();
    let mut c = good.to_checkpoint();
    c.remove("shard.ids");
    assert!(matches!(
        basis_shard::decode_checkpoint(&c.encode()),
        Err(ShardError::Corrupt(_))
    ));
    let mut dup = good.clone();
    if dup.ids.len() >= 2 {
        dup.ids[1] = dup.ids[0];
    }
    let e = table(Kind::Adam, &owner, 0)
        .restore_snapshot(dup)
        .unwrap_err();
    assert!(
        matches!(e, ShardError::Corrupt("an id appears twice")),
        "{e}"
    );
    // Restore into a table that holds rows.
    let mut used = table(Kind::Adam, &OwnerRule::hashed(1, 3).unwrap(), 0);
    let mut c1 = group(1).pop().unwrap();
    used.lookup(&mut c1, &[1]).unwrap();
    assert!(matches!(
        used.restore_snapshot(good),
        Err(ShardError::NotEmpty)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bf16_checkpoints_round_trip_at_their_width_and_continue_bit_for_bit() {
    let dir = temp_dir("bf16");
    let p = 2;
    let kind = Kind::Basis;
    let owner = owner_for(kind, p);
    let base = dir.join("t");
    let straight = on_ranks(p, |mut c| {
        let mut t = table_at(kind, &owner, c.rank(), RowPrecision::Bf16, 9);
        run_steps(&mut t, &mut c, 0..8).unwrap();
        t.checksum()
    });
    let snaps = on_ranks(p, |mut c| {
        let mut t = table_at(kind, &owner, c.rank(), RowPrecision::Bf16, 9);
        run_steps(&mut t, &mut c, 0..4).unwrap();
        t.checkpoint(&basis_shard::rank_path(&base, c.rank()))
            .unwrap();
        let snap = t.snapshot();
        // The file holds 2 bytes per value.
        let file = snap.to_checkpoint();
        assert_eq!(
            file.get("shard.rows").unwrap().len(),
            snap.ids.len() * DIM * 2
        );
        assert_eq!(
            basis_shard::decode_checkpoint(&file.encode()).unwrap(),
            snap
        );
        snap
    });
    assert!(snaps.iter().all(|s| s.precision == RowPrecision::Bf16));
    let resumed = on_ranks(p, |mut c| {
        let mut t = table_at(kind, &owner, c.rank(), RowPrecision::Bf16, 9);
        t.restore(&basis_shard::rank_path(&base, c.rank())).unwrap();
        assert_eq!(t.snapshot(), snaps[c.rank()]);
        run_steps(&mut t, &mut c, 4..8).unwrap();
        t.checksum()
    });
    assert_eq!(resumed, straight);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_of_another_precision_or_seed_is_refused_with_a_typed_error() {
    let dir = temp_dir("prec");
    let owner = OwnerRule::hashed(1, 3).unwrap();
    let file = |prec: RowPrecision, seed: u64| {
        let path = dir.join(format!("{prec}-{seed}"));
        let mut c = group(1).pop().unwrap();
        let mut t = table_at(Kind::Adam, &owner, 0, prec, seed);
        run_steps(&mut t, &mut c, 0..3).unwrap();
        t.checkpoint(&path).unwrap();
        path
    };
    let (f32_file, bf16_file) = (file(RowPrecision::F32, 4), file(RowPrecision::Bf16, 4));
    for (prec, path, found) in [
        (RowPrecision::F32, &bf16_file, RowPrecision::Bf16),
        (RowPrecision::Bf16, &f32_file, RowPrecision::F32),
        (RowPrecision::F16, &bf16_file, RowPrecision::Bf16),
    ] {
        let mut t = table_at(Kind::Adam, &owner, 0, prec, 4);
        let e = t.restore(path).unwrap_err();
        assert!(
            matches!(e, ShardError::Precision { table, checkpoint } if table == prec && checkpoint == found),
            "{e}"
        );
        assert!(t.is_empty());
        assert!(e.to_string().contains("row precision"), "{e}");
    }
    // Narrow rows under another rounding seed would not continue the run.
    let e = table_at(Kind::Adam, &owner, 0, RowPrecision::Bf16, 5)
        .restore(&bf16_file)
        .unwrap_err();
    assert!(
        matches!(
            e,
            ShardError::Mismatch {
                what: "rounding seed",
                expected: 5,
                found: 4
            }
        ),
        "{e}"
    );
    // f32 rows ignore the seed.
    table_at(Kind::Adam, &owner, 0, RowPrecision::F32, 5)
        .restore(&f32_file)
        .unwrap();
    // A value bf16 cannot hold exactly is refused, not rounded.
    let good = basis_shard::decode_checkpoint(&std::fs::read(&bf16_file).unwrap()).unwrap();
    let mut bad = good.clone();
    bad.rows[0] = 1.0 + f32::EPSILON;
    let mut t = table_at(Kind::Adam, &owner, 0, RowPrecision::Bf16, 4);
    let e = t.restore_snapshot(bad).unwrap_err();
    assert!(matches!(e, ShardError::Corrupt(_)), "{e}");
    assert!(t.is_empty());
    t.restore_snapshot(good).unwrap();
    // An unknown precision code in the file is corrupt.
    let mut c = basis_shard::decode_checkpoint(&std::fs::read(&bf16_file).unwrap())
        .unwrap()
        .to_checkpoint();
    let mut meta = c.remove("shard.meta").unwrap();
    let at = meta.len() - 16;
    meta[at..at + 8].copy_from_slice(&7u64.to_le_bytes());
    c.insert("shard.meta", meta).unwrap();
    assert!(matches!(
        basis_shard::decode_checkpoint(&c.encode()),
        Err(ShardError::Corrupt("unknown row precision"))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A version-2 file (before row precisions) reads as f32 rows.
#[test]
fn a_version_2_checkpoint_still_reads_as_f32_rows() {
    let owner = OwnerRule::hashed(1, 3).unwrap();
    let mut comm = group(1).pop().unwrap();
    let mut t = table(Kind::Adam, &owner, 0);
    run_steps(&mut t, &mut comm, 0..3).unwrap();
    let snap = t.snapshot();
    let mut c = snap.to_checkpoint();
    let mut meta = c.remove("shard.meta").unwrap();
    // Version 2's meta: the version word, then 9 words (no precision, seed).
    meta.truncate(4 + 9 * 8);
    meta[..4].copy_from_slice(&2u32.to_le_bytes());
    c.insert("shard.meta", meta).unwrap();
    let old = basis_shard::decode_checkpoint(&c.encode()).unwrap();
    assert_eq!(old, snap);
    assert_eq!(old.precision, RowPrecision::F32);
    let mut back = table(Kind::Adam, &owner, 0);
    back.restore_snapshot(old).unwrap();
    assert_eq!(back.checksum(), t.checksum());
}

#[test]
fn bf16_rows_report_half_the_row_bytes() {
    let owner = OwnerRule::hashed(1, 0).unwrap();
    let ids: Vec<u64> = (0..1000).map(mix).collect();
    let mem = |prec| {
        let mut c = group(1).pop().unwrap();
        let mut t = table_at(Kind::Adam, &owner, 0, prec, 0);
        let b = t.lookup(&mut c, &ids).unwrap();
        t.apply(&mut c, &b, &vec![0.1; b.rows.len()]).unwrap();
        t.memory()
    };
    let (wide, narrow, half) = (
        mem(RowPrecision::F32),
        mem(RowPrecision::Bf16),
        mem(RowPrecision::F16),
    );
    assert_eq!(wide.row_bytes, 1000 * DIM * 4, "{wide:?}");
    assert_eq!(narrow.row_bytes, 1000 * DIM * 2, "{narrow:?}");
    assert_eq!(half.row_bytes, 1000 * DIM * 2, "{half:?}");
    assert_eq!(narrow.state_bytes, wide.state_bytes);
    assert_eq!(narrow.index_bytes, wide.index_bytes);
}

/// A rank file with the caller's own sections beside the table's: both
/// read back unchanged, and a caller section named like the table's is
/// refused without touching the container.
#[test]
fn a_snapshot_shares_its_file_with_the_callers_sections() {
    let owner = owner_for(Kind::Basis, 2);
    let snaps = on_ranks(2, |mut c| {
        let mut t = table_at(Kind::Basis, &owner, c.rank(), RowPrecision::Bf16, 9);
        run_steps(&mut t, &mut c, 0..4).unwrap();
        t.snapshot()
    });
    let snap = &snaps[1];
    let mut file = basis_std::checkpoint::Checkpoint::new();
    file.insert("dense", vec![1u8, 2, 3]).unwrap();
    snap.insert_into(&mut file).unwrap();
    let back = basis_std::checkpoint::Checkpoint::decode(&file.encode()).unwrap();
    assert_eq!(back.get("dense"), Some(&[1u8, 2, 3][..]));
    assert_eq!(
        basis_shard::TableSnapshot::from_checkpoint(&back).unwrap(),
        *snap
    );
    // The rows are at their width in the shared file too.
    assert_eq!(back.get("shard.rows").unwrap().len(), snap.rows.len() * 2);
    let mut clash = basis_std::checkpoint::Checkpoint::new();
    clash.insert("shard.ids", vec![9u8]).unwrap();
    let e = snap.insert_into(&mut clash).unwrap_err();
    assert!(matches!(e, ShardError::BadConfig(_)), "{e}");
    assert_eq!(clash.names().collect::<Vec<_>>(), ["shard.ids"]);
    assert_eq!(clash.get("shard.ids"), Some(&[9u8][..]));
}
