//! Properties of BASIS: order-freedom, poisoned rows, scalar clipping and
//! scale invariance, count-sketch unbiasedness, phase-3 schedule freedom,
//! error atomicity, exact memory accounting.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use balanced_hash::{Bucketer, OneChoice};
use basis_core::kernel::update_bucket;
use basis_core::{
    Basis, BasisConfig, DenseTable, Direction, NonFinitePolicy, RowIndex, ScalarLrSchedule,
    ScalarRule, ScalarStorage, SparseOptimizer, StepError, TablePrecision, sign_of,
};
use common::{Identity, Rng, grads};
use proptest::prelude::*;

const DIRECTIONS: [Direction; 4] = [
    Direction::Shared,
    Direction::Signed,
    Direction::OwnGradient,
    Direction::RowScaled,
];

fn config(dim: usize, rows: u64, direction: Direction) -> BasisConfig {
    // The defaults these properties were written for (before issue 26 made
    // `Default` the measured 1-byte, η = 0.03 configuration): f32 scalars,
    // η = 0.01. Cases that test another storage set it.
    BasisConfig::default()
        .with_scalar_storage(ScalarStorage::F32)
        .with_lr(0.01)
        .with_dim(dim)
        .with_direction(direction)
        .with_row_index(RowIndex::Dense { rows })
        // RowScaled has no learned scalar (a rate there is refused).
        .with_scalar_lr(if direction == Direction::RowScaled {
            0.0
        } else {
            0.05
        })
}

/// A batch with duplicates: `len` ids from `0..rows`.
fn batch(rng: &mut Rng, len: usize, rows: u64, dim: usize) -> (Vec<u64>, Vec<f32>) {
    let ids: Vec<u64> = (0..len).map(|_| rng.below(rows)).collect();
    (ids, grads(rng, len, dim, 1.0))
}

fn permuted(ids: &[u64], g: &[f32], dim: usize, rng: &mut Rng) -> (Vec<u64>, Vec<f32>) {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    rng.shuffle(&mut order);
    let pids = order.iter().map(|&k| ids[k]).collect();
    let pg = order
        .iter()
        .flat_map(|&k| g[k * dim..(k + 1) * dim].iter().copied())
        .collect();
    (pids, pg)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// Permuting the rows of every batch gives bit-identical tables and state.
    #[test]
    fn permutation_is_bit_identical(seed in any::<u64>(), which in 0usize..4, storage in 0usize..3, bf16 in any::<bool>()) {
        let (dim, rows, buckets) = (5, 40u64, 7u32);
        let mut c = config(dim, rows, DIRECTIONS[which]);
        c.scalar_storage = [ScalarStorage::F32, ScalarStorage::Bf16, ScalarStorage::LogU8][storage];
        c.table_precision = if bf16 { TablePrecision::Bf16 } else { TablePrecision::F32 };
        let mut a = Basis::new(c, OneChoice::new(buckets, 3).unwrap()).unwrap();
        let mut b = Basis::new(c, OneChoice::new(buckets, 3).unwrap()).unwrap();
        let mut ta = vec![0.25f32; rows as usize * dim];
        let mut tb = ta.clone();
        let mut rng = Rng(seed);
        for _ in 0..6 {
            let (ids, g) = batch(&mut rng, 30, rows, dim);
            let (pids, pg) = permuted(&ids, &g, dim, &mut rng);
            a.step(&ids, &g, &mut DenseTable::new(&mut ta, dim).unwrap()).unwrap();
            b.step(&pids, &pg, &mut DenseTable::new(&mut tb, dim).unwrap()).unwrap();
        }
        prop_assert!(ta.iter().zip(&tb).all(|(x, y)| x.to_bits() == y.to_bits()));
        prop_assert_eq!(a.export_state(), b.export_state());
    }

    /// A scalar never leaves its clip range, whatever the rule and gradients.
    #[test]
    fn scalars_stay_in_clip_range(seed in any::<u64>(), which in 0usize..3, hyper in any::<bool>(), log_scale in -4i32..4, storage in 0usize..2) {
        let (dim, rows) = (4, 30u64);
        let mut c = config(dim, rows, DIRECTIONS[which]);
        c.scalar_rule = if hyper { ScalarRule::Hypergradient } else { ScalarRule::Normalized };
        c.scalar_lr = if hyper { 1e5 } else { 2.0 };
        // 0.1 and 10 are not powers of two: the 1-byte code must still hold them exactly.
        c.scalar_clip = if seed % 3 == 0 { (0.5, 2.0) } else { (0.1, 10.0) };
        let (lo, hi) = c.scalar_clip;
        c.scalar_storage = [ScalarStorage::F32, ScalarStorage::LogU8][storage];
        c.scalar_lr_schedule = if seed % 2 == 0 { ScalarLrSchedule::Constant } else { ScalarLrSchedule::InverseFrequency { power: 0.5 } };
        let mut opt = Basis::new(c, OneChoice::new(3, 1).unwrap()).unwrap();
        let mut t = vec![0.0f32; rows as usize * dim];
        let mut rng = Rng(seed);
        for _ in 0..20 {
            let (ids, mut g) = batch(&mut rng, 20, rows, dim);
            g.iter_mut().for_each(|x| *x *= 10f32.powi(log_scale));
            opt.step(&ids, &g, &mut DenseTable::new(&mut t, dim).unwrap()).unwrap();
        }
        for id in 0..rows {
            let s = opt.scalar(id);
            prop_assert!((lo..=hi).contains(&s), "scalar {} = {}", id, s);
        }
        let d = opt.diagnostics();
        prop_assert_eq!(d.rows, rows);
        prop_assert_eq!(d.scalar_histogram.iter().sum::<u64>(), rows);
    }

    /// The normalized rule sees only cos(g, u): scaling every gradient by a
    /// power of two leaves the scalars unchanged (to ε's influence).
    #[test]
    fn normalized_rule_is_scale_invariant(seed in any::<u64>(), which in 0usize..3, k in -6i32..7) {
        let (dim, rows) = (6, 25u64);
        let mut c = config(dim, rows, DIRECTIONS[which]);
        c.scalar_lr = 0.3;
        c.eps = 1e-30;
        let mut a = Basis::new(c, OneChoice::new(4, 2).unwrap()).unwrap();
        let mut b = Basis::new(c, OneChoice::new(4, 2).unwrap()).unwrap();
        let mut ta = vec![0.0f32; rows as usize * dim];
        let mut tb = ta.clone();
        let mut rng = Rng(seed);
        let factor = 2f32.powi(k);
        for _ in 0..15 {
            let (ids, g) = batch(&mut rng, 20, rows, dim);
            let gs: Vec<f32> = g.iter().map(|x| x * factor).collect();
            a.step(&ids, &g, &mut DenseTable::new(&mut ta, dim).unwrap()).unwrap();
            b.step(&ids, &gs, &mut DenseTable::new(&mut tb, dim).unwrap()).unwrap();
        }
        let moved = (0..rows).filter(|&id| a.scalar(id) != 1.0).count();
        prop_assert!(moved > 0);
        for id in 0..rows {
            let (x, y) = (a.scalar(id), b.scalar(id));
            prop_assert!((x - y).abs() <= 1e-4 * x.abs(), "row {}: {} vs {}", id, x, y);
        }
    }
}

/// A NaN row is skipped and counted; every other row, every bucket and every
/// scalar end exactly as if the row had not been in the batch.
#[test]
fn poisoned_row_leaves_everything_else_untouched() {
    let (dim, rows) = (4, 20u64);
    for direction in DIRECTIONS {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let c = config(dim, rows, direction);
            let mut clean = Basis::new(c, OneChoice::new(3, 9).unwrap()).unwrap();
            let mut dirty = Basis::new(c, OneChoice::new(3, 9).unwrap()).unwrap();
            let mut tc = vec![0.5f32; rows as usize * dim];
            let mut td = tc.clone();
            let mut rng = Rng(5);
            for step in 0..8 {
                let (ids, g) = batch(&mut rng, 12, rows, dim);
                // Row 19 (never in `ids` otherwise? make sure) gets a poisoned gradient.
                let keep: Vec<usize> = (0..ids.len()).filter(|&k| ids[k] != 19).collect();
                let ids_c: Vec<u64> = keep.iter().map(|&k| ids[k]).collect();
                let g_c: Vec<f32> = keep
                    .iter()
                    .flat_map(|&k| g[k * dim..(k + 1) * dim].to_vec())
                    .collect();
                let mut ids_d = ids_c.clone();
                let mut g_d = g_c.clone();
                ids_d.push(19);
                let mut poison = vec![0.1f32; dim];
                poison[step % dim] = bad;
                g_d.extend_from_slice(&poison);
                clean
                    .step(&ids_c, &g_c, &mut DenseTable::new(&mut tc, dim).unwrap())
                    .unwrap();
                let r = dirty
                    .step(&ids_d, &g_d, &mut DenseTable::new(&mut td, dim).unwrap())
                    .unwrap();
                assert_eq!(r.rows_skipped_nonfinite, 1);
            }
            assert_eq!(tc, td, "{direction:?}");
            for b in 0..3 {
                assert_eq!(clean.bucket_view(b), dirty.bucket_view(b));
            }
            for id in 0..rows {
                assert_eq!(clean.scalar(id).to_bits(), dirty.scalar(id).to_bits());
            }
            assert_eq!(dirty.diagnostics().nonfinite_rows, 8);
            assert!(td[19 * dim..20 * dim].iter().all(|&x| x == 0.5));
        }
    }
}

/// Under the `Error` policy, and for every other step error, nothing changes.
#[test]
fn a_failed_step_changes_nothing() {
    let (dim, rows) = (3, 10u64);
    let mut c = config(dim, rows, Direction::Shared);
    c.nonfinite = NonFinitePolicy::Error;
    let mut opt = Basis::new(c, OneChoice::new(4, 1).unwrap()).unwrap();
    let mut t = vec![1.0f32; rows as usize * dim];
    opt.step(
        &[1, 2],
        &[0.1; 6],
        &mut DenseTable::new(&mut t, dim).unwrap(),
    )
    .unwrap();
    let before_state = opt.export_state();
    let before_table = t.clone();
    let cases: [(&[u64], Vec<f32>, StepError); 4] = [
        (
            &[1, 3],
            vec![0.1, 0.2, f32::NAN, 0.0, 0.0, 0.0],
            StepError::NonFinite { id: 1 },
        ),
        (
            &[1, 3],
            vec![0.1; 5],
            StepError::GradLength {
                expected: 6,
                actual: 5,
            },
        ),
        (
            &[1, 10],
            vec![0.1; 6],
            StepError::IdOutOfRange { id: 10, rows: 10 },
        ),
        (
            &[1, 2],
            vec![0.1; 6],
            StepError::DimMismatch {
                optimizer: 3,
                table: 2,
            },
        ),
    ];
    for (k, (ids, g, expected)) in cases.into_iter().enumerate() {
        let dim_t = if k == 3 { 2 } else { dim };
        let mut table = DenseTable::new(&mut t[..(rows as usize - 1) * dim_t], dim_t).unwrap();
        assert_eq!(opt.step(ids, &g, &mut table), Err(expected));
        assert_eq!(opt.export_state(), before_state);
        assert_eq!(t, before_table);
    }
    // A row the table lacks (dense state has room for it).
    let mut short = vec![1.0f32; 5 * dim];
    assert_eq!(
        opt.step(
            &[1, 7],
            &[0.1; 6],
            &mut DenseTable::new(&mut short, dim).unwrap()
        ),
        Err(StepError::MissingRow { id: 7 })
    );
    assert_eq!(opt.export_state(), before_state);
}

/// Phase 3 in any job order (here: reversed) gives the same bits as the
/// sequential step: what a parallel adapter relies on.
#[test]
fn bucket_jobs_are_schedule_free() {
    let (dim, rows) = (8, 200u64);
    for direction in DIRECTIONS {
        for precision in [TablePrecision::F32, TablePrecision::Bf16] {
            let mut c = config(dim, rows, direction);
            c.table_precision = precision;
            c.scalar_storage = ScalarStorage::LogU8;
            let mut a = Basis::new(c, OneChoice::new(16, 4).unwrap()).unwrap();
            let mut b = Basis::new(c, OneChoice::new(16, 4).unwrap()).unwrap();
            let mut ta = vec![0.0f32; rows as usize * dim];
            let mut tb = ta.clone();
            let mut rng = Rng(77);
            for _ in 0..10 {
                let (ids, g) = batch(&mut rng, 64, rows, dim);
                a.step(&ids, &g, &mut DenseTable::new(&mut ta, dim).unwrap())
                    .unwrap();
                let mut table = DenseTable::new(&mut tb, dim).unwrap();
                let mut plan = b.plan(&ids, &g, &mut table).unwrap();
                b.run_plan(&mut plan, |p, jobs| {
                    jobs.into_iter().rev().for_each(|j| update_bucket(p, j))
                });
                b.finish(plan, &mut table);
            }
            assert_eq!(ta, tb);
            assert_eq!(a.export_state(), b.export_state());
        }
    }
}

/// Own momentum of each row in one bucket: `Σ_t (1−β1)·β1^(T−t)·g_i,t` (f64)
/// over the steps that touched the bucket (a bucket's EMA only moves then).
fn own_momentum(history: &[Vec<(u64, Vec<f32>)>], id: u64, dim: usize, beta1: f64) -> Vec<f64> {
    let mut m = vec![0.0f64; dim];
    for batch in history.iter().filter(|b| !b.is_empty()) {
        let g = batch.iter().find(|(i, _)| *i == id);
        for j in 0..dim {
            let gj = g.map_or(0.0, |(_, g)| f64::from(g[j]));
            m[j] = beta1 * m[j] + (1.0 - beta1) * gj;
        }
    }
    m
}

/// Runs `Signed` with one bucket under sign `seed`; returns `σ(i)·M` per row.
fn signed_readout(
    seed: u64,
    history: &[Vec<(u64, Vec<f32>)>],
    rows: u64,
    dim: usize,
) -> Vec<Vec<f64>> {
    let c = config(dim, rows, Direction::Signed)
        .with_seed(seed)
        .with_scalar_lr(0.0);
    let mut opt = Basis::new(c, Identity(1)).unwrap();
    let mut t = vec![0.0f32; rows as usize * dim];
    for batch in history {
        let ids: Vec<u64> = batch.iter().map(|(i, _)| *i).collect();
        let g: Vec<f32> = batch.iter().flat_map(|(_, g)| g.clone()).collect();
        opt.step(&ids, &g, &mut DenseTable::new(&mut t, dim).unwrap())
            .unwrap();
    }
    let m = opt.bucket_view(0).unwrap().m.unwrap();
    (0..rows)
        .map(|id| {
            m.iter()
                .map(|&x| f64::from(sign_of(seed, id) * x))
                .collect()
        })
        .collect()
}

fn history(rng: &mut Rng, steps: usize, rows: u64, dim: usize) -> Vec<Vec<(u64, Vec<f32>)>> {
    (0..steps)
        .map(|_| {
            let mut batch = Vec::new();
            for id in 0..rows {
                if rng.unit() < 0.7 {
                    batch.push((id, grads(rng, 1, dim, 1.0)));
                }
            }
            batch
        })
        .collect()
}

/// Exact enumeration: over the 2^3 sign patterns of three rows sharing one
/// bucket, the mean of `σ(i)·M` is each row's own momentum.
#[test]
fn count_sketch_is_unbiased_exact_enumeration() {
    let (rows, dim, beta1) = (3u64, 4, 0.9);
    let mut rng = Rng(2024);
    let hist = history(&mut rng, 12, rows, dim);
    // Find one sign seed per pattern (the sign hash is a fixed function of the seed).
    let mut seeds = [None; 8];
    let mut seed = 0u64;
    while seeds.iter().any(Option::is_none) {
        let pattern = (0..rows).fold(0usize, |acc, id| {
            acc * 2 + usize::from(sign_of(seed, id) < 0.0)
        });
        seeds[pattern].get_or_insert(seed);
        seed += 1;
    }
    let mut mean = vec![vec![0.0f64; dim]; rows as usize];
    for s in seeds.iter().flatten() {
        for (acc, r) in mean.iter_mut().zip(signed_readout(*s, &hist, rows, dim)) {
            acc.iter_mut().zip(r).for_each(|(a, x)| *a += x / 8.0);
        }
    }
    for id in 0..rows {
        let own = own_momentum(&hist, id, dim, beta1);
        for j in 0..dim {
            assert!(
                (mean[id as usize][j] - own[j]).abs() < 1e-5,
                "row {id} dim {j}: {} vs {}",
                mean[id as usize][j],
                own[j]
            );
        }
    }
}

/// Monte-Carlo: over 3000 sign seeds, the mean of `σ(i)·M` is within 4.5
/// standard errors of the own momentum, for 8 rows sharing one bucket.
#[test]
fn count_sketch_is_unbiased_monte_carlo() {
    let (rows, dim, beta1, trials) = (8u64, 3, 0.9, 3000u64);
    let mut rng = Rng(99);
    let hist = history(&mut rng, 10, rows, dim);
    let mut sum = vec![vec![0.0f64; dim]; rows as usize];
    let mut sum_sq = sum.clone();
    for seed in 0..trials {
        for (id, r) in signed_readout(seed.wrapping_mul(0x9E37_79B9), &hist, rows, dim)
            .into_iter()
            .enumerate()
        {
            for j in 0..dim {
                sum[id][j] += r[j];
                sum_sq[id][j] += r[j] * r[j];
            }
        }
    }
    let n = trials as f64;
    for id in 0..rows as usize {
        let own = own_momentum(&hist, id as u64, dim, beta1);
        for j in 0..dim {
            let mean = sum[id][j] / n;
            let var = (sum_sq[id][j] / n - mean * mean).max(0.0);
            let se = (var / n).sqrt();
            assert!(
                (mean - own[j]).abs() <= 4.5 * se + 1e-6,
                "row {id} dim {j}: mean {mean}, own {}, se {se}",
                own[j]
            );
        }
    }
}

/// The memory report is exact: it matches the closed form for dense state.
#[test]
fn memory_report_matches_closed_form() {
    let (dim, rows, b) = (64usize, 1000u64, 10u32);
    let cases = [
        (Direction::Shared, ScalarStorage::F32, 2 * 4, 4),
        (Direction::Shared, ScalarStorage::LogU8, 2 * 4, 1),
        (Direction::RowScaled, ScalarStorage::LogU8, 4, 1),
        (Direction::RowScaled, ScalarStorage::F32, 4, 4),
        (Direction::OwnGradient, ScalarStorage::Bf16, 2 * 4, 2),
    ];
    for (direction, storage, table_bytes_per_value, scalar_bytes) in cases {
        let c = config(dim, rows, direction).with_scalar_storage(storage);
        let opt = Basis::new(c, OneChoice::new(b, 1).unwrap()).unwrap();
        let m = opt.memory();
        assert_eq!(m.shared_tables, b as usize * dim * table_bytes_per_value);
        assert_eq!(m.step_counts, b as usize * 4);
        // The default ranges' decode tables are shared statics: nothing per instance.
        assert_eq!(m.code_tables, 0);
        assert_eq!(m.scalars, rows as usize * scalar_bytes);
        assert_eq!(m.row_index, 0);
        // RowScaled's default accumulation keeps a 3-bit row count, 21 to
        // an 8-byte word (since 2026-12-06); the learned-scalar modes none.
        let counters = if direction == Direction::RowScaled {
            (rows as usize).div_ceil(21) * 8
        } else {
            0
        };
        assert_eq!(m.row_counters, counters);
        assert_eq!(
            m.total_bytes,
            m.shared_tables + m.step_counts + m.scalars + counters
        );
        assert_eq!(m.fixed_bytes(), m.shared_tables + m.step_counts);
        assert_eq!(m.per_row_bytes(), m.scalars + counters);
        assert_eq!(
            m.fixed_bytes() + m.per_row_bytes() + m.scratch,
            m.total_bytes
        );
    }
    // A non-default code range owns its 1 KiB table, reported as fixed.
    let c = config(dim, rows, Direction::Shared)
        .with_scalar_storage(ScalarStorage::LogU8)
        .with_scalar_clip((0.5, 2.0));
    let m = Basis::new(c, OneChoice::new(b, 1).unwrap())
        .unwrap()
        .memory();
    assert_eq!((m.code_tables, m.scalars), (1024, rows as usize));
    assert_eq!(m.fixed_bytes(), m.shared_tables + m.step_counts + 1024);
    // Sparse state grows with rows seen.
    let c = config(4, 0, Direction::Shared).with_row_index(RowIndex::Sparse);
    let mut opt = Basis::new(c, OneChoice::new(2, 1).unwrap()).unwrap();
    let empty = opt.memory();
    let mut t = vec![0.0f32; 100 * 4];
    let ids: Vec<u64> = (0..100).collect();
    opt.step(
        &ids,
        &vec![0.1; 400],
        &mut DenseTable::new(&mut t, 4).unwrap(),
    )
    .unwrap();
    let full = opt.memory();
    assert_eq!(full.rows_with_state, 100);
    assert!(full.scalars >= 400 && full.row_index > empty.row_index);
    assert_eq!(opt.bucketer().buckets(), 2);
}
