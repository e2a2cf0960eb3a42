//! The two `RowScaled` accumulations that keep a per-row update count `n_i`
//! (issue 26), against one slow f64 reference written from their
//! definitions:
//!
//! - `Accumulate::CountAnnealed { power: c }`: `G_i ← (1 − n_i^(−c))·G_i +
//!   x_i`, a memory that grows with the row's own count;
//! - `Accumulate::EmaAnnealed { beta: β, power: c }` (2026-12-06): the EMA
//!   while a row is rare, annealed once it is frequent, `G_i ← max(β, 1 −
//!   n_i^(−c))·G_i + (1 − β)·x_i`;
//!
//! both with `G_i = x_i = mean_j g_ij²` at a row's first update, the bucket
//! profile `C_b ← β_t·C_b + w·Σ_rows g²` from 0 under the same rule with the
//! bucket's count `t_b`, and the step `η·g_ij / (√(G_i·C_bj / mean_j C_b) +
//! ε)`. Also: closed forms, rare against frequent rows, the counter's bytes
//! in `memory()`, its export/import, and the typed errors.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]
// The reference walks rows and dimensions by index, as the rule is written.
#![allow(clippy::needless_range_loop)]

extern crate alloc;

mod common;

use alloc::collections::BTreeMap;

use basis_core::{
    Accumulate, Basis, BasisConfig, ConfigError, ConfigOption, DenseTable, Direction, RowCounter,
    RowIndex, RowScaleConfig, ScalarStorage, SparseOptimizer, StateError, StateField,
};
use common::{Identity, Rng};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn annealed(power: f32) -> Accumulate {
    Accumulate::CountAnnealed { power }
}

fn ema_annealed(beta: f32, power: f32) -> Accumulate {
    Accumulate::EmaAnnealed { beta, power }
}

/// `a` with the exact 2-byte counter when it keeps one: this file's
/// subject (the compact counters, the default since 2026-12-06, are
/// `tests/compact_counter.rs`'s).
fn exact(a: Accumulate) -> RowScaleConfig {
    let r = RowScaleConfig::default().with_accumulate(a);
    if a.counts_rows() {
        r.with_counter(RowCounter::Exact)
    } else {
        r
    }
}

/// The plain EMA (β 0.99, the default before 2026-12-06), which keeps no
/// counter: every state made before these rules.
fn ema_scale() -> RowScaleConfig {
    exact(Accumulate::Ema { beta: 0.99 })
}

/// `RowScaled` with f32 `G_i` (so the reference compares values, not
/// stochastically rounded codes) over a dense range of `rows`.
fn config(dim: usize, rows: u64, accumulate: Accumulate) -> BasisConfig {
    BasisConfig::default()
        .with_dim(dim)
        .with_row_index(RowIndex::Dense { rows })
        .with_scalar_storage(ScalarStorage::F32)
        .with_row_scale(exact(accumulate))
}

/// Both rules in f64, one map entry per row and per bucket: the memory
/// `β_n = max(floor, 1 − n^(−c))` and the weight `w` on the new square
/// (`CountAnnealed`: floor 0, `w` 1; `EmaAnnealed`: floor β, `w` 1 − β).
struct Reference {
    dim: usize,
    buckets: u32,
    floor: f64,
    weight: f64,
    power: f64,
    lr: f64,
    eps: f64,
    g: BTreeMap<u64, (f64, u32)>,
    c: BTreeMap<u32, (Vec<f64>, u32)>,
}

impl Reference {
    fn new(rule: Accumulate, config: &BasisConfig, dim: usize, buckets: u32) -> Self {
        let (floor, weight, power) = match rule {
            Accumulate::CountAnnealed { power } => (0.0, 1.0, power),
            Accumulate::EmaAnnealed { beta, power } => {
                (f64::from(beta), 1.0 - f64::from(beta), power)
            }
            other => panic!("no counting rule: {other:?}"),
        };
        Self {
            dim,
            buckets,
            floor,
            weight,
            power: f64::from(power),
            lr: f64::from(config.lr),
            eps: f64::from(config.effective_eps()),
            g: BTreeMap::new(),
            c: BTreeMap::new(),
        }
    }

    fn beta_n(&self, n: u32) -> f64 {
        (1.0 - f64::from(n).powf(-self.power)).max(self.floor)
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
            // `G = x` at the first update (for `CountAnnealed` the rule
            // gives it anyway: `β_1 = 0`, `w = 1`).
            let new = if old == 0.0 {
                x
            } else {
                self.beta_n(n) * old + self.weight * x
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
                c[j] = beta * c[j] + self.weight * a[j];
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

/// `steps` batches of `rule` against the reference: every row's `G_i`, every
/// touched bucket's profile and every table value (to f32 rounding), with a
/// hot row (id 0, in every batch: its count grows every step), duplicate
/// ids, rows shared by buckets and gradients that shrink over the run.
fn follows_the_reference(
    rule: Accumulate,
    seed: u64,
    dim: usize,
    steps: usize,
) -> Result<(), TestCaseError> {
    let (rows, buckets) = (24u64, 5u32);
    let c = config(dim, rows, rule);
    let mut opt = Basis::new(c, Identity(buckets)).unwrap();
    let mut reference = Reference::new(rule, &c, dim, buckets);
    let mut rng = Rng(seed);
    let init: Vec<f32> = (0..rows as usize * dim)
        .map(|_| rng.normal() as f32)
        .collect();
    let mut w = init.clone();
    let mut w_ref: Vec<f64> = init.iter().map(|&x| f64::from(x)).collect();
    for step in 0..steps {
        let mut ids: Vec<u64> = (0..6).map(|_| rng.below(rows)).collect();
        ids.push(0);
        let scale = 0.5 / (1.0 + step as f32);
        let grads = common::grads(&mut rng, ids.len(), dim, scale);
        opt.step(&ids, &grads, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
        reference.step(&ids, &grads, &mut w_ref);
    }
    for (&id, &(g, _)) in &reference.g {
        let got = f64::from(opt.scalar(id));
        prop_assert!(
            close(got, g, 2e-5, 1e-30),
            "G_{} = {} vs reference {}",
            id,
            got,
            g
        );
    }
    for (&b, (c_ref, t)) in &reference.c {
        let view = opt.bucket_view(b).unwrap();
        prop_assert_eq!(view.steps, *t);
        for j in 0..dim {
            let got = f64::from(view.v[j]);
            prop_assert!(
                close(got, c_ref[j], 2e-5, 1e-30),
                "C_{}[{}] = {} vs {}",
                b,
                j,
                got,
                c_ref[j]
            );
        }
    }
    for (k, (&a, &b)) in w.iter().zip(&w_ref).enumerate() {
        prop_assert!(
            close(f64::from(a), b, 1e-5, 1e-6),
            "w[{}] = {} vs reference {}",
            k,
            a,
            b
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// `CountAnnealed`, for exponents from "last update only" (0) past the
    /// linear-weight sum (1).
    #[test]
    fn count_annealed_matches_the_f64_reference(seed in any::<u64>(), power in 0.0f32..2.0, dim in 1usize..9, steps in 1usize..25) {
        follows_the_reference(annealed(power), seed, dim, steps)?;
    }

    /// `EmaAnnealed`, for floors β whose switch `(1 − β)^(−1/c)` falls
    /// inside the run and beyond it.
    #[test]
    fn ema_annealed_matches_the_f64_reference(
        seed in any::<u64>(),
        beta in 0.0f32..0.95,
        power in 0.0f32..2.0,
        dim in 1usize..9,
        steps in 1usize..30,
    ) {
        follows_the_reference(ema_annealed(beta, power), seed, dim, steps)?;
    }
}

/// Trains `c` 30 batches (a hot row 0 in each: under `EmaAnnealed` its
/// count passes the switch), exports, imports into a fresh optimizer and
/// runs both 10 more batches: the same bits and the same state (a lost
/// counter would restart every row's memory at `n = 1`). Returns both.
fn round_trip(c: BasisConfig) -> (Basis<Identity>, Basis<Identity>) {
    let hot = |rng: &mut Rng| {
        let mut ids: Vec<u64> = (0..4).map(|_| rng.below(10)).collect();
        ids.push(0);
        ids
    };
    common::continues_after_round_trip(c, 10, (30, 10), Rng(5), hot)
}

/// One row with the same gradient every step: the closed forms of the rule.
/// With `c = 1`, `G_n = Σ_s (s/n)·x = (n + 1)/2·x`; with `c = 0`, `G_n = x`
/// (no memory); and a row's step shrinks as `√(2/(n+1))` under `c = 1`
/// (AdaGrad-like annealing), where the EMA's stays put.
#[test]
fn count_annealed_closed_forms_for_a_constant_gradient() {
    let dim = 4;
    let grad = [0.5f32, -0.5, 0.5, -0.5]; // x = mean g² = 0.25
    for (power, expect) in [
        (1.0f32, (|n: f64| (n + 1.0) / 2.0 * 0.25) as fn(f64) -> f64),
        (0.0, (|_| 0.25) as fn(f64) -> f64),
    ] {
        let mut opt = Basis::new(config(dim, 2, annealed(power)), Identity(1)).unwrap();
        let mut w = vec![0.0f32; 2 * dim];
        let mut last = 0.0f32;
        for n in 1..=50u32 {
            let before = w[dim];
            opt.step(&[1], &grad, &mut DenseTable::new(&mut w, dim).unwrap())
                .unwrap();
            let g = f64::from(opt.scalar(1));
            assert!(
                close(g, expect(f64::from(n)), 1e-5, 0.0),
                "power {power}, n {n}: G = {g}, closed form {}",
                expect(f64::from(n))
            );
            // One row in its bucket: the profile is flat, the step is
            // η·g/(√G + ε).
            last = before - w[dim];
        }
        let step_at_50 = f64::from(last);
        let lr = 0.003f64;
        let want = lr * 0.5 / (expect(50.0).sqrt() + 1e-8);
        assert!(close(step_at_50, want, 1e-4, 0.0), "{step_at_50} vs {want}");
        if power == 1.0 {
            // Annealed: about √(2/51) of the first step's η.
            assert!(step_at_50 < 0.21 * lr, "{step_at_50}");
        } else {
            assert!(close(step_at_50, lr, 1e-4, 0.0), "{step_at_50}");
        }
    }
}

/// The counter is per row: a row seen rarely keeps a short memory (and a
/// large step) while a row seen every step anneals.
#[test]
fn a_rare_row_keeps_its_step_and_a_frequent_one_anneals() {
    // G_100 ≈ 100^0.5 = 10 (× x = 1): the frequent row's step is about η/√10.
    let (_, ratio) = frequent_and_rare_steps(annealed(0.5), 99);
    assert!((0.25..0.4).contains(&ratio), "frequent/rare step {ratio}");
}

/// Row 0 updated `before` times with `g = (1, 1)`, then once more beside
/// row 1's first update with the same gradient: checks the rare row took
/// the full step `η` and returns the optimizer and the frequent/rare step
/// ratio.
fn frequent_and_rare_steps(rule: Accumulate, before: usize) -> (Basis<Identity>, f64) {
    let dim = 2;
    let mut opt = Basis::new(config(dim, 4, rule), Identity(4)).unwrap();
    let mut w = vec![0.0f32; 4 * dim];
    let g = [1.0f32, 1.0];
    for _ in 0..before {
        opt.step(&[0], &g, &mut DenseTable::new(&mut w, dim).unwrap())
            .unwrap();
    }
    let was = (w[0], w[2]);
    opt.step(
        &[0, 1],
        &[1.0, 1.0, 1.0, 1.0],
        &mut DenseTable::new(&mut w, dim).unwrap(),
    )
    .unwrap();
    let (frequent, rare) = (was.0 - w[0], was.1 - w[2]);
    assert!(close(f64::from(rare), 0.003, 1e-4, 0.0), "{rare}");
    (opt, f64::from(frequent / rare))
}

/// `memory()` counts the counter exactly: 2 bytes per row of a dense range
/// beside the 1-byte `G_i`, and nothing for the rules without one.
#[test]
fn memory_counts_the_counter() {
    let rows = 1000u64;
    let with = BasisConfig::default()
        .with_dim(8)
        .with_row_index(RowIndex::Dense { rows })
        .with_row_scale(exact(annealed(0.5)));
    let m = Basis::new(with, Identity(2)).unwrap().memory();
    assert_eq!((m.scalars, m.row_counters), (1000, 2000));
    let without = with.with_row_scale(ema_scale());
    let m = Basis::new(without, Identity(2)).unwrap().memory();
    assert_eq!((m.scalars, m.row_counters), (1000, 0));
    // Sparse: the counters grow with the rows seen, and are counted.
    let sparse = with.with_row_index(RowIndex::Sparse);
    let mut opt = Basis::new(sparse, Identity(2)).unwrap();
    let mut w = vec![0.0f32; 100 * 8];
    let ids: Vec<u64> = (0..100).collect();
    let grads = vec![0.1f32; 100 * 8];
    opt.step(&ids, &grads, &mut DenseTable::new(&mut w, 8).unwrap())
        .unwrap();
    let m = opt.memory();
    assert_eq!(m.rows_with_state, 100);
    // (capacity: at least one u16 per row, at most the doubling growth's 2x.)
    assert!((200..=512).contains(&m.row_counters), "{m:?}");
}

/// `CountAnnealed`'s counter travels in the state; the blob is one counter
/// (2 bytes) per row longer than the same state without counters: the
/// counts are really in it.
#[test]
fn the_counter_is_exported_and_imported() {
    let dim = 3;
    let c = BasisConfig::default()
        .with_dim(dim)
        .with_row_scale(exact(annealed(0.8)));
    round_trip(c);
    let ema = c.with_row_scale(ema_scale());
    let mut e = Basis::new(ema, Identity(3)).unwrap();
    let mut we = vec![0.0f32; 10 * dim];
    let ids: Vec<u64> = (0..10).collect();
    let grads = vec![0.1f32; 10 * dim];
    e.step(&ids, &grads, &mut DenseTable::new(&mut we, dim).unwrap())
        .unwrap();
    let mut n = Basis::new(c, Identity(3)).unwrap();
    n.step(&ids, &grads, &mut DenseTable::new(&mut we, dim).unwrap())
        .unwrap();
    assert_eq!(n.export_state().len(), e.export_state().len() + 2 * 10);
}

/// States of the other rules (every state made before this rule) are
/// refused with a typed error naming what differs, and so is another
/// exponent's; a state of this rule is refused by the other rules.
#[test]
fn other_states_are_refused_with_a_typed_error() {
    let c = BasisConfig::default()
        .with_dim(4)
        .with_row_scale(ema_scale());
    let with = |a: Accumulate| c.with_row_scale(exact(a));
    let old = Basis::new(c, Identity(2)).unwrap().export_state();
    let mut new = Basis::new(with(annealed(0.5)), Identity(2)).unwrap();
    assert_eq!(
        new.import_state(&old),
        Err(StateError::ConfigMismatch {
            field: StateField::RowCounters
        })
    );
    let other_power = Basis::new(with(annealed(0.8)), Identity(2))
        .unwrap()
        .export_state();
    assert_eq!(
        new.import_state(&other_power),
        Err(StateError::ConfigMismatch {
            field: StateField::Accumulate
        })
    );
    let mut ema = Basis::new(c, Identity(2)).unwrap();
    assert_eq!(
        ema.import_state(&new.export_state()),
        Err(StateError::ConfigMismatch {
            field: StateField::RowCounters
        })
    );
    // Its own blob reads.
    let own = new.export_state();
    assert_eq!(new.import_state(&own), Ok(()));
}

#[test]
fn bad_exponents_and_other_directions_are_refused() {
    let c = BasisConfig::default()
        .with_dim(4)
        .with_row_scale(ema_scale());
    for bad in [-0.1f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let config = c.with_row_scale(exact(annealed(bad)));
        assert_eq!(config.validate(), Err(ConfigError::AnnealPower), "{bad}");
        assert!(Basis::new(config, Identity(1)).is_err());
    }
    for ok in [0.0f32, 0.5, 1.0, 3.0] {
        let config = c.with_row_scale(exact(annealed(ok)));
        assert_eq!(config.validate(), Ok(()), "{ok}");
    }
    // Only RowScaled accumulates `G_i`.
    let shared = c
        .with_direction(Direction::Shared)
        .with_row_scale(exact(annealed(0.5)));
    assert!(matches!(
        shared.validate(),
        Err(ConfigError::Ignored {
            option: ConfigOption::Accumulate,
            ..
        })
    ));
    assert!(annealed(0.5).counts_rows() && !Accumulate::Ema { beta: 0.99 }.counts_rows());
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
    let (opt, ratio) = frequent_and_rare_steps(ema_annealed(0.99, 1.0), 399);
    assert!((0.6..0.85).contains(&ratio), "frequent/rare step {ratio}");
    assert!(opt.scalar(0) > 1.5, "{}", opt.scalar(0));
}

/// `EmaAnnealed`'s `memory()` counts its counter as `CountAnnealed`'s.
#[test]
fn ema_annealed_memory_counts_the_counter() {
    let with = BasisConfig::default()
        .with_dim(8)
        .with_row_index(RowIndex::Dense { rows: 1000 })
        .with_row_scale(exact(ema_annealed(0.99, 1.0)));
    let m = Basis::new(with, Identity(2)).unwrap().memory();
    assert_eq!((m.scalars, m.row_counters), (1000, 2000));
}

/// `EmaAnnealed`'s counter travels in the state; states of the EMA (every
/// state made before this rule), of `CountAnnealed` and of another β or
/// exponent are refused with a typed error naming what differs.
#[test]
fn ema_annealed_state_round_trips_and_other_states_are_refused() {
    let c = BasisConfig::default()
        .with_dim(3)
        .with_row_scale(ema_scale());
    let with = |a: Accumulate| c.with_row_scale(exact(a));
    let (a, mut b) = round_trip(with(ema_annealed(0.9, 1.0)));
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
    let c = BasisConfig::default()
        .with_dim(4)
        .with_row_scale(ema_scale());
    let with = |a: Accumulate| c.with_row_scale(exact(a));
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
