//! `Accumulate::EmaAnnealed` (issue 26, session 11: the EMA while a row is
//! rare, annealed once it is frequent) against a slow f64 reference written
//! from its definition: `G_i ← β_n·G_i + (1 − β)·mean_j g_ij²` with `β_n =
//! max(β, 1 − n_i^(−c))`, `n_i` the row's updates including this one, `G_i =
//! x` at a row's first update; the bucket profile `C_b ← max(β, 1 −
//! t_b^(−c))·C_b + (1 − β)·Σ_rows g²` from 0; the step `η·g_ij / (√(G_i·C_bj
//! / mean_j C_b) + ε)`. Also: it is the EMA bit for bit below the switch, it
//! anneals a frequent row beyond it, the counter's bytes in `memory()`, its
//! export/import, and the typed errors.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]
// The reference walks rows and dimensions by index, as the rule is written.
#![allow(clippy::needless_range_loop)]

extern crate alloc;

mod common;

use alloc::collections::BTreeMap;

use basis_core::{
    Accumulate, Basis, BasisConfig, ConfigError, DenseTable, RowIndex, RowScaleConfig,
    ScalarStorage, SparseOptimizer, StateError, StateField,
};
use common::{Identity, Rng};
use proptest::prelude::*;

fn ema_annealed(beta: f32, power: f32) -> Accumulate {
    Accumulate::EmaAnnealed { beta, power }
}

/// `RowScaled` with f32 `G_i` (so the reference compares values, not
/// stochastically rounded codes) over a dense range of `rows`.
fn config(dim: usize, rows: u64, accumulate: Accumulate) -> BasisConfig {
    BasisConfig::default()
        .with_dim(dim)
        .with_row_index(RowIndex::Dense { rows })
        .with_scalar_storage(ScalarStorage::F32)
        .with_row_scale(RowScaleConfig::default().with_accumulate(accumulate))
}

/// The rule in f64, one map entry per row and per bucket.
struct Reference {
    dim: usize,
    buckets: u32,
    beta: f64,
    power: f64,
    lr: f64,
    eps: f64,
    g: BTreeMap<u64, (f64, u32)>,
    c: BTreeMap<u32, (Vec<f64>, u32)>,
}

impl Reference {
    fn beta_n(&self, n: u32) -> f64 {
        (1.0 - f64::from(n).powf(-self.power)).max(self.beta)
    }

    /// One step over `table` (row-major, `dim` per row).
    fn step(&mut self, ids: &[u64], grads: &[f32], table: &mut [f64]) {
        let d = self.dim;
        // Duplicates sum.
        let mut merged: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for (k, &id) in ids.iter().enumerate() {
            let row = merged.entry(id).or_insert_with(|| vec![0.0; d]);
            for j in 0..d {
                row[j] += f64::from(grads[k * d + j]);
            }
        }
        for (&id, g) in &merged {
            let x = g.iter().map(|v| v * v).sum::<f64>() / d as f64;
            let (old, n) = self.g.get(&id).copied().unwrap_or((0.0, 0));
            let n = n + 1;
            let new = if old == 0.0 {
                x
            } else {
                self.beta_n(n) * old + (1.0 - self.beta) * x
            };
            self.g.insert(id, (new, n));
        }
        let mut add: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (&id, g) in &merged {
            let b = (id % u64::from(self.buckets)) as u32;
            let a = add.entry(b).or_insert_with(|| vec![0.0; d]);
            for j in 0..d {
                a[j] += g[j] * g[j];
            }
        }
        for (&b, a) in &add {
            let (mut c, t) = self.c.get(&b).cloned().unwrap_or((vec![0.0; d], 0));
            let t = t + 1;
            let beta = self.beta_n(t);
            for j in 0..d {
                c[j] = beta * c[j] + (1.0 - self.beta) * a[j];
            }
            self.c.insert(b, (c, t));
        }
        for (&id, g) in &merged {
            let b = (id % u64::from(self.buckets)) as u32;
            let c = &self.c[&b].0;
            let mean = c.iter().sum::<f64>() / d as f64;
            let big_g = self.g[&id].0;
            for j in 0..d {
                let f = if mean > 0.0 { c[j] / mean } else { 1.0 };
                let v_hat = big_g * f;
                table[id as usize * d + j] -= self.lr * g[j] / (v_hat.sqrt() + self.eps);
            }
        }
    }
}

fn close(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + abs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Every row's `G_i`, every touched bucket's profile and every table
    /// value follow the f64 reference (to f32 rounding), for floors β whose
    /// switch `(1 − β)^(−1/c)` falls inside the run and beyond it, with a
    /// hot row, duplicate ids and rows shared by buckets.
    #[test]
    fn matches_the_f64_reference(
        seed in any::<u64>(),
        beta in 0.0f32..0.95,
        power in 0.0f32..2.0,
        dim in 1usize..9,
        steps in 1usize..30,
    ) {
        let (rows, buckets) = (24u64, 5u32);
        let c = config(dim, rows, ema_annealed(beta, power));
        let mut opt = Basis::new(c, Identity(buckets)).unwrap();
        let mut reference = Reference {
            dim,
            buckets,
            beta: f64::from(beta),
            power: f64::from(power),
            lr: f64::from(c.lr),
            eps: f64::from(c.effective_eps()),
            g: BTreeMap::new(),
            c: BTreeMap::new(),
        };
        let mut rng = Rng(seed);
        let init: Vec<f32> = (0..rows as usize * dim).map(|_| rng.normal() as f32).collect();
        let mut w = init.clone();
        let mut w_ref: Vec<f64> = init.iter().map(|&x| f64::from(x)).collect();
        for step in 0..steps {
            // A hot row (id 0) in every batch: its count passes the switch.
            let mut ids: Vec<u64> = (0..6).map(|_| rng.below(rows)).collect();
            ids.push(0);
            let scale = 0.5 / (1.0 + step as f32);
            let grads = common::grads(&mut rng, ids.len(), dim, scale);
            opt.step(&ids, &grads, &mut DenseTable::new(&mut w, dim).unwrap()).unwrap();
            reference.step(&ids, &grads, &mut w_ref);
        }
        for (&id, &(g, _)) in &reference.g {
            let got = f64::from(opt.scalar(id));
            prop_assert!(close(got, g, 2e-5, 1e-30), "G_{} = {} vs reference {}", id, got, g);
        }
        for (&b, (c_ref, t)) in &reference.c {
            let view = opt.bucket_view(b).unwrap();
            prop_assert_eq!(view.steps, *t);
            for j in 0..dim {
                let got = f64::from(view.v[j]);
                prop_assert!(close(got, c_ref[j], 2e-5, 1e-30), "C_{}[{}] = {} vs {}", b, j, got, c_ref[j]);
            }
        }
        for (k, (&a, &b)) in w.iter().zip(&w_ref).enumerate() {
            prop_assert!(close(f64::from(a), b, 1e-5, 1e-6), "w[{}] = {} vs reference {}", k, a, b);
        }
    }
}

/// Below the switch (`n < (1 − β)^(−1/c)`, 100 for β 0.99 and c 1) the
/// rule is `Ema { beta }` bit for bit, on the default 1-byte storage too;
/// beyond it the two part (the annealing itself: the next tests).
#[test]
fn is_the_ema_below_the_switch() {
    let dim = 4;
    for storage in [ScalarStorage::F32, ScalarStorage::LogU8] {
        let mk = |a| config(dim, 8, a).with_scalar_storage(storage);
        let mut ema = Basis::new(mk(Accumulate::Ema { beta: 0.99 }), Identity(2)).unwrap();
        let mut ann = Basis::new(mk(ema_annealed(0.99, 1.0)), Identity(2)).unwrap();
        let (mut we, mut wa) = (vec![0.0f32; 8 * dim], vec![0.0f32; 8 * dim]);
        let mut rng = Rng(7);
        // Row 0 every step (n = 1..=99 stays below the switch at 100).
        for _ in 0..99 {
            let mut ids: Vec<u64> = (0..3).map(|_| rng.below(8)).collect();
            ids.push(0);
            let grads = common::grads(&mut rng, ids.len(), dim, 0.3);
            ema.step(&ids, &grads, &mut DenseTable::new(&mut we, dim).unwrap())
                .unwrap();
            ann.step(&ids, &grads, &mut DenseTable::new(&mut wa, dim).unwrap())
                .unwrap();
        }
        let bits = |w: &[f32]| w.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&we), bits(&wa), "{storage:?}");
        // Beyond the switch they part (on f32 storage, where G is exact).
        if storage == ScalarStorage::F32 {
            for _ in 0..60 {
                let grads = common::grads(&mut rng, 1, dim, 0.3);
                ema.step(&[0], &grads, &mut DenseTable::new(&mut we, dim).unwrap())
                    .unwrap();
                ann.step(&[0], &grads, &mut DenseTable::new(&mut wa, dim).unwrap())
                    .unwrap();
            }
            assert_ne!(ema.scalar(0).to_bits(), ann.scalar(0).to_bits());
        }
    }
}

/// The annealing beyond the switch: a row seen every step with a constant
/// gradient (`x` = 0.25) and β 0.5, c 1 (switch at n = 2). The closed form
/// of `G_n = (1 − 1/n)·G_{n−1} + x/2` from `G_1 = x` is `G_n = ((n + 1)/4 +
/// 1/(2n))·x` (n ≥ 1), a sum's growth: the row's step shrinks about as
/// `√(4/(n + 1))`, where the EMA's stays `η`.
#[test]
fn a_frequent_row_anneals_as_the_closed_form() {
    let dim = 4;
    let grad = [0.5f32, -0.5, 0.5, -0.5];
    let mut opt = Basis::new(config(dim, 2, ema_annealed(0.5, 1.0)), Identity(1)).unwrap();
    let mut w = vec![0.0f32; 2 * dim];
    let mut last = 0.0f32;
    for n in 1..=200u32 {
        let before = w[dim];
        opt.step(&[1], &grad, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
        let n = f64::from(n);
        let want = ((n + 1.0) / 4.0 + 1.0 / (2.0 * n)) * 0.25;
        let g = f64::from(opt.scalar(1));
        assert!(
            close(g, want, 1e-5, 0.0),
            "n {n}: G = {g}, closed form {want}"
        );
        last = before - w[dim];
    }
    let lr = 0.003f64;
    let want = lr * 0.5 / (((201.0 / 4.0 + 1.0 / 400.0) * 0.25f64).sqrt() + 1e-8);
    assert!(close(f64::from(last), want, 1e-4, 0.0), "{last} vs {want}");
    assert!(f64::from(last) < 0.15 * lr, "{last}");
}

/// The counter is per row: a row seen once keeps the EMA's step (`η` at its
/// first update) while a row seen 400 times with the same gradient has
/// annealed (β 0.99, c 1: `G = x` up to n = 99, then `G_n = 0.005·(n + 1) +
/// 49.5/n` ≈ 2.13·x at n = 400, so its step is ≈ 0.69 of the EMA's).
#[test]
fn a_rare_row_keeps_the_ema_step_and_a_frequent_one_anneals() {
    let dim = 2;
    let mut opt = Basis::new(config(dim, 4, ema_annealed(0.99, 1.0)), Identity(4)).unwrap();
    let mut w = vec![0.0f32; 4 * dim];
    let g = [1.0f32, 1.0];
    for _ in 0..399 {
        opt.step(&[0], &g, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
    }
    let before = (w[0], w[2]);
    opt.step(
        &[0, 1],
        &[1.0, 1.0, 1.0, 1.0],
        &mut DenseTable::new(&mut w, dim).unwrap(),
    )
    .unwrap();
    let (frequent, rare) = (before.0 - w[0], before.1 - w[2]);
    assert!(close(f64::from(rare), 0.003, 1e-4, 0.0), "{rare}");
    let ratio = f64::from(frequent / rare);
    assert!((0.6..0.85).contains(&ratio), "frequent/rare step {ratio}");
    assert!(opt.scalar(0) > 1.5, "{}", opt.scalar(0));
}

/// `memory()` counts the counter exactly: 2 bytes per row of a dense range
/// beside the 1-byte `G_i`.
#[test]
fn memory_counts_the_counter() {
    let with = BasisConfig::default()
        .with_dim(8)
        .with_row_index(RowIndex::Dense { rows: 1000 })
        .with_row_scale(RowScaleConfig::default().with_accumulate(ema_annealed(0.99, 1.0)));
    let m = Basis::new(with, Identity(2)).unwrap().memory();
    assert_eq!((m.scalars, m.row_counters), (1000, 2000));
}

/// The counter travels in the state (a restored optimizer continues bit for
/// bit); states of the EMA (every state made before this rule), of
/// `CountAnnealed` and of another β or exponent are refused with a typed
/// error naming what differs.
#[test]
fn state_round_trips_and_other_states_are_refused() {
    let dim = 3;
    let c = BasisConfig::default().with_dim(dim);
    let with = |a: Accumulate| c.with_row_scale(c.row_scale.with_accumulate(a));
    let mut a = Basis::new(with(ema_annealed(0.9, 1.0)), Identity(3)).unwrap();
    let mut rng = Rng(5);
    let mut w = vec![0.0f32; 10 * dim];
    let batch = |rng: &mut Rng| {
        let mut ids: Vec<u64> = (0..4).map(|_| rng.below(10)).collect();
        ids.push(0);
        let grads = common::grads(rng, ids.len(), dim, 0.3);
        (ids, grads)
    };
    for _ in 0..30 {
        let (ids, grads) = batch(&mut rng);
        a.step(&ids, &grads, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
    }
    let blob = a.export_state();
    let mut b = Basis::new(with(ema_annealed(0.9, 1.0)), Identity(3)).unwrap();
    b.import_state(&blob).unwrap();
    let mut wb = w.clone();
    for _ in 0..10 {
        let (ids, grads) = batch(&mut rng);
        a.step(&ids, &grads, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
        b.step(&ids, &grads, &mut DenseTable::new(&mut wb, dim).unwrap())
            .unwrap();
    }
    let bits = |w: &[f32]| w.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&w), bits(&wb));
    assert_eq!(a.export_state(), b.export_state());

    let old = Basis::new(c, Identity(3)).unwrap().export_state();
    assert_eq!(
        b.import_state(&old),
        Err(StateError::ConfigMismatch {
            field: StateField::RowCounters
        })
    );
    for other in [
        Accumulate::CountAnnealed { power: 1.0 },
        ema_annealed(0.99, 1.0),
        ema_annealed(0.9, 0.5),
    ] {
        let blob = Basis::new(with(other), Identity(3)).unwrap().export_state();
        assert_eq!(
            b.import_state(&blob),
            Err(StateError::ConfigMismatch {
                field: StateField::Accumulate
            }),
            "{other:?}"
        );
    }
    let mut ema = Basis::new(c, Identity(3)).unwrap();
    assert_eq!(
        ema.import_state(&a.export_state()),
        Err(StateError::ConfigMismatch {
            field: StateField::RowCounters
        })
    );
}

#[test]
fn bad_floors_and_exponents_are_refused() {
    let c = BasisConfig::default().with_dim(4);
    let with = |a: Accumulate| c.with_row_scale(c.row_scale.with_accumulate(a));
    for bad in [-0.1f32, 1.0, f32::NAN] {
        assert_eq!(
            with(ema_annealed(bad, 1.0)).validate(),
            Err(ConfigError::Beta),
            "{bad}"
        );
    }
    for bad in [-0.1f32, f32::NAN, f32::INFINITY] {
        let config = with(ema_annealed(0.99, bad));
        assert_eq!(config.validate(), Err(ConfigError::AnnealPower), "{bad}");
        assert!(Basis::new(config, Identity(1)).is_err());
    }
    assert_eq!(with(ema_annealed(0.0, 0.0)).validate(), Ok(()));
    assert!(ema_annealed(0.99, 1.0).counts_rows());
}
