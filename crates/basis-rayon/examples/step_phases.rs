//! Where a BASIS step spends its time: planning (on one thread, and with its
//! sorts and per-row work on two through `basis_rayon::Rayon`), the
//! per-bucket kernels, the row updates and `finish`, at the bench's
//! workload; then whole steps, serial against `par_step_dense` on 1 and 2
//! threads, interleaved.
//!
//! `cargo run --release -p basisopt-rayon --example step_phases`

#![allow(
    clippy::unwrap_used,
    reason = "a measurement program: a failure is a bug"
)]

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use balanced_hash::OneChoice;
use basis_core::exec::{Executor, Sequential};
use basis_core::kernel::update_bucket;
use basis_core::{Basis, BasisConfig, DenseTable, Direction, RowAccess, RowIndex, SparseOptimizer};
use basis_rayon::{Rayon, par_step_dense, thread_pool};
use common::{BATCHES, DIM, workload};
use core::cmp::Ordering;

/// An executor that times each call it delegates, in call order (a plan
/// makes five: the merge sort, the batch rows' checks, the duplicate sums,
/// the bucket sort, the gather).
struct Timed<E> {
    inner: E,
    calls: std::sync::Mutex<Vec<f64>>,
}

impl<E: Executor> Timed<E> {
    fn new(inner: E) -> Self {
        Self {
            inner,
            calls: Default::default(),
        }
    }

    fn record(&self, t0: Instant) {
        self.calls.lock().unwrap().push(t0.elapsed().as_secs_f64());
    }
}

impl<E: Executor> Executor for Timed<E> {
    fn sort_by<T, F>(&self, items: &mut [T], cmp: F)
    where
        T: Send,
        F: Fn(&T, &T) -> Ordering + Sync + Send,
    {
        let t0 = Instant::now();
        self.inner.sort_by(items, cmp);
        self.record(t0);
    }

    fn for_each<T, F>(&self, items: Vec<T>, f: F)
    where
        T: Send,
        F: Fn(T) + Sync + Send,
    {
        let t0 = Instant::now();
        self.inner.for_each(items, f);
        self.record(t0);
    }
}

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
        let config = BasisConfig::default()
            .with_dim(DIM)
            .with_direction(direction)
            .with_scalar_lr(scalar_lr)
            .with_row_index(RowIndex::Dense {
                rows: w.rows as u64,
            });
        let mut basis = Basis::new(config, OneChoice::new(100_000, 7).unwrap()).unwrap();
        let pools = [thread_pool(1).unwrap(), thread_pool(2).unwrap()];
        let (mut plan_s, mut kernel_s, mut rows_s, mut finish_s) = (0.0, 0.0, 0.0, 0.0);
        let mut plan_par_s = 0.0;
        let (seq_exec, par_exec) = (Timed::new(Sequential), Timed::new(Rayon));
        let mut inside_s = 0.0;
        let steps = 4 * BATCHES;
        for k in 0..steps + BATCHES {
            let (ids, grads) = &w.batches[k % BATCHES];
            // Odd steps plan on two threads (same bits), even steps on this one.
            let parallel = k % 2 == 1;
            let t0 = Instant::now();
            let mut rows = DenseTable::new(&mut table, DIM).unwrap();
            let mut plan = if parallel {
                pools[1].install(|| {
                    let t0 = Instant::now();
                    let plan = basis.plan_with(&par_exec, ids, grads, &mut rows);
                    inside_s += t0.elapsed().as_secs_f64();
                    plan
                })
            } else {
                basis.plan_with(&seq_exec, ids, grads, &mut rows)
            }
            .unwrap();
            let t1 = Instant::now();
            if k < BATCHES {
                seq_exec.calls.lock().unwrap().clear();
                par_exec.calls.lock().unwrap().clear();
                inside_s = 0.0;
            }
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
                if parallel {
                    plan_par_s += (t1 - t0).as_secs_f64();
                } else {
                    plan_s += (t1 - t0).as_secs_f64();
                }
                kernel_s += (t2 - t1).as_secs_f64();
                rows_s += (t3 - t2).as_secs_f64();
                finish_s += (t4 - t3).as_secs_f64();
            }
        }
        // Whole steps, interleaved so load changes hit all three alike:
        // serial, then `par_step_dense` on 1 and 2 threads; medians.
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
        // Plan times cover half the steps each; the other phases all steps.
        let per_step = |s: f64| s / steps as f64 * 1e3;
        let (plan1, plan2) = (2.0 * per_step(plan_s), 2.0 * per_step(plan_par_s));
        println!(
            "{mode}: per step plan {plan1:.3} ms on 1 thread, {plan2:.3} ms on 2 ({:.2}x), \
             kernels {:.3} ms, rows {:.3} ms, finish (scalars, serial) {:.3} ms",
            plan1 / plan2,
            per_step(kernel_s),
            per_step(rows_s),
            per_step(finish_s),
        );
        // Per plan: the five executor calls, and what remains on the calling thread.
        let pieces = |calls: &[f64], whole: f64| {
            let mut sums = [0.0f64; 5];
            for (i, t) in calls.iter().enumerate() {
                sums[i % 5] += t;
            }
            let plans = (calls.len() / 5) as f64;
            let per = sums.map(|s| s / plans * 1e3);
            let rest = whole - per.iter().sum::<f64>();
            format!(
                "merge sort {:.3}, row checks {:.3}, duplicate sums {:.3}, bucket sort {:.3}, gather {:.3}, \
                 on the calling thread {rest:.3} ms",
                per[0], per[1], per[2], per[3], per[4]
            )
        };
        println!(
            "{mode}: plan on 1 thread: {}",
            pieces(&seq_exec.calls.lock().unwrap(), plan1)
        );
        println!(
            "{mode}: plan on 2 threads: {} (hand-off into the pool {:.3} ms)",
            pieces(&par_exec.calls.lock().unwrap(), 2.0 * per_step(inside_s)),
            plan2 - 2.0 * per_step(inside_s)
        );
    }
}
