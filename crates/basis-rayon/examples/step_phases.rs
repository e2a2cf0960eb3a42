//! Where a BASIS step spends its time: the serial planning, the per-bucket
//! kernels (the part `par_step` runs in parallel) and `finish`, at the
//! bench's workload. Bounds the speed-up two threads can give (Amdahl).
//!
//! `cargo run --release -p basis-rayon --example step_phases`

#![allow(
    clippy::unwrap_used,
    reason = "a measurement program: a failure is a bug"
)]

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use balanced_hash::OneChoice;
use basis_core::kernel::update_bucket;
use basis_core::{Basis, BasisConfig, DenseTable, Direction, RowAccess, RowIndex, SparseOptimizer};
use basis_rayon::{par_step_dense, thread_pool};
use common::{BATCHES, DIM, workload};

/// A table with no rows: `finish` then only stores scalars (as in `par_step_dense`).
struct NoRows;

impl RowAccess for NoRows {
    fn dim(&self) -> usize {
        DIM
    }

    fn row_mut(&mut self, _id: u64) -> Option<&mut [f32]> {
        None
    }
}

fn main() {
    let w = workload();
    let mut table = vec![0.0f32; w.rows * DIM];
    for (mode, direction, scalar_lr) in [
        ("row-scaled", Direction::RowScaled, 0.0),
        ("shared", Direction::Shared, 0.01),
    ] {
        let config = BasisConfig {
            dim: DIM,
            direction,
            scalar_lr,
            row_index: RowIndex::Dense {
                rows: w.rows as u64,
            },
            ..BasisConfig::default()
        };
        let mut basis = Basis::new(config, OneChoice::new(100_000, 7).unwrap()).unwrap();
        let (mut plan_s, mut kernel_s, mut rows_s, mut finish_s) = (0.0, 0.0, 0.0, 0.0);
        let steps = 4 * BATCHES;
        for k in 0..steps + BATCHES {
            let (ids, grads) = &w.batches[k % BATCHES];
            let t0 = Instant::now();
            let mut plan = basis
                .plan(ids, grads, &mut DenseTable::new(&mut table, DIM).unwrap())
                .unwrap();
            let t1 = Instant::now();
            basis.run_plan(&mut plan, |p, jobs| {
                jobs.into_iter().for_each(|j| update_bucket(p, j))
            });
            let t2 = Instant::now();
            // Rows (parallel in `par_step_dense`): decay is 0 here.
            for (k, &id) in plan.ids().iter().enumerate() {
                let row = &mut table[id as usize * DIM..(id as usize + 1) * DIM];
                for (x, u) in row.iter_mut().zip(&plan.updates()[k * DIM..(k + 1) * DIM]) {
                    *x -= u;
                }
            }
            let t3 = Instant::now();
            basis.finish(plan, &mut NoRows);
            let t4 = Instant::now();
            // The first round through the batches warms up.
            if k >= BATCHES {
                plan_s += (t1 - t0).as_secs_f64();
                kernel_s += (t2 - t1).as_secs_f64();
                rows_s += (t3 - t2).as_secs_f64();
                finish_s += (t4 - t3).as_secs_f64();
            }
        }
        // Whole steps, interleaved so load changes hit all three alike:
        // serial, then `par_step_dense` on 1 and 2 threads; medians.
        let pools = [thread_pool(1).unwrap(), thread_pool(2).unwrap()];
        let mut runs = [basis.clone(), basis.clone(), basis.clone()];
        let mut times: [Vec<f64>; 3] = Default::default();
        for k in 0..steps {
            let (ids, grads) = &w.batches[k % BATCHES];
            for (r, (b, t)) in runs.iter_mut().zip(times.iter_mut()).enumerate() {
                let t0 = Instant::now();
                match r {
                    0 => {
                        b.step(ids, grads, &mut DenseTable::new(&mut table, DIM).unwrap())
                            .unwrap();
                    }
                    _ => {
                        pools[r - 1]
                            .install(|| par_step_dense(b, ids, grads, &mut table))
                            .unwrap();
                    }
                }
                t.push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let [s, p1, p2] = times.each_mut().map(median);
        println!(
            "{mode}: median step serial {s:.3} ms, par_step_dense 1 thread {p1:.3} ms, 2 threads {p2:.3} ms \
             (speed-up {:.2}x vs serial, {:.2}x vs 1 thread)",
            s / p2,
            p1 / p2
        );
        let total = plan_s + kernel_s + rows_s + finish_s;
        let per_step = |s: f64| s / steps as f64 * 1e3;
        let serial = (plan_s + finish_s) / total;
        println!(
            "{mode}: per step plan {:.3} ms, kernels {:.3} ms, rows {:.3} ms, finish (scalars) {:.3} ms; \
             serial share {:.0} %, 2-thread Amdahl bound {:.2}x",
            per_step(plan_s),
            per_step(kernel_s),
            per_step(rows_s),
            per_step(finish_s),
            serial * 100.0,
            1.0 / (serial + (1.0 - serial) / 2.0),
        );
    }
}
