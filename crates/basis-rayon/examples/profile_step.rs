//! Temporary: phase timings of one BASIS step (deleted before handing in).
#![allow(missing_docs, clippy::unwrap_used)]
use balanced_hash::OneChoice;
use basis_core::kernel::update_bucket;
use basis_core::{Basis, BasisConfig, DenseTable};
use std::time::Instant;
const DIM: usize = 64;
fn main() {
    let rows = 10_000_000u64;
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut unit = || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    };
    let batches: Vec<(Vec<u64>, Vec<f32>)> = (0..8)
        .map(|_| {
            let ids = (0..4096)
                .map(|_| ((rows as f64).powf(unit()) as u64 - 1).min(rows - 1))
                .collect();
            let g = (0..4096 * DIM).map(|_| unit() as f32 * 2.0 - 1.0).collect();
            (ids, g)
        })
        .collect();
    let mut table = vec![0.0f32; rows as usize * DIM];
    let mut b = Basis::new(
        BasisConfig {
            dim: DIM,
            ..BasisConfig::default()
        },
        OneChoice::new(100_000, 7).unwrap(),
    )
    .unwrap();
    let (mut tp, mut tk, mut tf) = (0.0, 0.0, 0.0);
    let mut distinct = 0;
    let mut groups = 0;
    for it in 0..80 {
        let (ids, g) = &batches[it % 8];
        let t0 = Instant::now();
        let mut plan = b
            .plan(ids, g, &mut DenseTable::new(&mut table, DIM).unwrap())
            .unwrap();
        let t1 = Instant::now();
        b.run_plan(&mut plan, |p, jobs| {
            jobs.into_iter().for_each(|j| update_bucket(p, j))
        });
        let t2 = Instant::now();
        distinct += plan.rows();
        groups += plan.groups().len();
        b.finish(plan, &mut DenseTable::new(&mut table, DIM).unwrap());
        let t3 = Instant::now();
        if it >= 8 {
            tp += (t1 - t0).as_secs_f64();
            tk += (t2 - t1).as_secs_f64();
            tf += (t3 - t2).as_secs_f64();
        }
    }
    println!(
        "per step ms: plan {:.3} kernel {:.3} finish {:.3}; rows {} groups {}",
        tp / 72e-3,
        tk / 72e-3,
        tf / 72e-3,
        distinct / 80,
        groups / 80
    );
}
