//! What a user calls, `OneBitAdam::step_with_grad`, on one thread at
//! `STEP_N` parameters (default 2²⁶ = 64 Mi), beside the bare dense kernel
//! (`AdamW::step_scaled`, the memory-bandwidth floor of the warm-up step) in
//! the same run:
//!
//! * `kernel`: `AdamW::step_scaled(detect, x, m, v, g, 1, zero)` alone;
//! * `warmup_p1`: a warm-up step on `SingleRank` (P = 1);
//! * `onebit_p1`: a 1-bit (compressed, `Variant::Momentum`) step on
//!   `SingleRank`: the local work of the 1-bit stage (compression, server
//!   step, decode, update) without transport;
//! * `onebit_pre_p1`: the same with `Variant::PreconditionedMomentum` and
//!   bias correction (the CLI's DeepFM/DLRM tower configuration).
//!
//! `nice -n 5 cargo bench -p basisopt-onebit-adam --bench step -- --warm-up-time 2 --measurement-time 10`
//!
//! Memory: about 7 f32 vectors of `STEP_N` (1.9 GB at 64 Mi).

#![allow(
    clippy::unwrap_used,
    reason = "bench harness: a failure aborts the run"
)]

use core::hint::black_box;

use comm_traits::SingleRank;
use criterion::{Criterion, Throughput};
use onebit_adam::{AdamW, Config, Kernel, OneBitAdam, Variant};

fn input(seed: u64, n: usize) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1e-2
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let n: usize = std::env::var("STEP_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 26);
    let g = input(1, n);
    let mut x = input(2, n);
    let mut group = c.benchmark_group(format!("onebit_step_{n}"));
    group.sample_size(10);
    group.throughput(Throughput::Elements(n as u64));

    {
        let (mut m, mut v, mut z) = (vec![0.0f32; n], vec![0.0f32; n], vec![true; n]);
        let adam = AdamW::default();
        group.bench_function("kernel", |b| {
            b.iter(|| {
                adam.step_scaled(
                    Kernel::detect(),
                    black_box(&mut x),
                    &mut m,
                    &mut v,
                    &g,
                    1.0,
                    Some(&mut z),
                )
                .unwrap();
            });
        });
    }
    {
        // A freeze step no bench run reaches: every step is warm-up.
        let config = Config::default().with_freeze_step(u64::MAX / 2);
        let mut opt = OneBitAdam::new(n, config).unwrap();
        let mut comm = SingleRank::default();
        opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
        group.bench_function("warmup_p1", |b| {
            b.iter(|| {
                opt.step_with_grad(&mut comm, black_box(&mut x), &g)
                    .unwrap()
            });
        });
    }
    let pre = Config::default()
        .with_variant(Variant::PreconditionedMomentum)
        .with_bias_correction(true);
    for (name, config) in [("onebit_p1", Config::default()), ("onebit_pre_p1", pre)] {
        let mut opt = OneBitAdam::new(n, config.with_freeze_step(1)).unwrap();
        let mut comm = SingleRank::default();
        // Warm-up, then the first 1-bit step (builds the frozen values and
        // touches the error buffers) untimed.
        opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
        opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                opt.step_with_grad(&mut comm, black_box(&mut x), &g)
                    .unwrap()
            });
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
