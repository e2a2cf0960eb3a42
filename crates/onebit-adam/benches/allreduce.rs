//! `compressed_allreduce` beside the f32 `all_reduce_sum` on the same
//! in-process communicator (`LocalComm`, P threads), P = 2 and 4, for 1, 16
//! and 64 MiB of f32 per rank, in the same run; the logical bytes each rank
//! sends per call are measured from `CommStats` and printed beside the times.
//!
//! `cargo bench -p basisopt-onebit-adam --bench allreduce -- --warm-up-time 1 --measurement-time 3`
//!
//! Each sample spawns the P rank threads once, runs one untimed call (first
//! allocation of error buffers and scratch), they meet at a barrier, and
//! rank 0 times `iters` back-to-back collectives. Throughput is GB/s of f32
//! input per rank (4 bytes per element).

#![allow(
    clippy::unwrap_used,
    reason = "bench harness: a failure aborts the run"
)]

use core::hint::black_box;
use core::time::Duration;
use std::time::Instant;

use basis_std::local::LocalComm;
use comm_traits::{CommStats, Communicator};
use criterion::{BenchmarkId, Criterion, Throughput};
use onebit_adam::{AllReduceState, compressed_allreduce};

#[derive(Clone, Copy, Debug)]
enum Op {
    Compressed,
    F32,
}

fn input(rank: usize, n: usize) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ rank as u64;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Run `iters` collectives on `p` ranks; rank 0's wall time and per-call stats.
fn run(p: usize, n: usize, op: Op, iters: u64) -> (Duration, CommStats) {
    let out = LocalComm::run(p, |mut c| {
        let mut buf = input(c.rank(), n);
        let mut state = AllReduceState::new();
        // One untimed call: first-touch allocation of the error buffers and
        // scratch is not what we measure.
        match op {
            Op::Compressed => drop(compressed_allreduce(&mut c, &mut buf, &mut state).unwrap()),
            Op::F32 => c.all_reduce_sum(&mut buf).unwrap(),
        }
        c.barrier().unwrap();
        let before = c.stats();
        let start = Instant::now();
        for _ in 0..iters {
            match op {
                Op::Compressed => {
                    compressed_allreduce(&mut c, black_box(&mut buf), &mut state).unwrap();
                }
                Op::F32 => c.all_reduce_sum(black_box(&mut buf)).unwrap(),
            }
        }
        let elapsed = start.elapsed();
        let mut stats = c.stats().since(&before);
        stats.bytes_sent /= iters.max(1);
        stats.bytes_received /= iters.max(1);
        stats.calls /= iters.max(1);
        (elapsed, stats)
    });
    out.into_iter().next().unwrap().unwrap()
}

fn bench(c: &mut Criterion) {
    for p in [2usize, 4] {
        let mut g = c.benchmark_group(format!("allreduce_p{p}"));
        g.sample_size(10);
        for mib in [1usize, 16, 64] {
            let n = mib << 18; // MiB of f32
            g.throughput(Throughput::Bytes(4 * n as u64));
            for op in [Op::F32, Op::Compressed] {
                let (_, stats) = run(p, n, op, 1);
                println!(
                    "bytes/rank/call p={p} {mib} MiB {op:?}: sent {} received {} in {} collectives",
                    stats.bytes_sent, stats.bytes_received, stats.calls
                );
                let id = BenchmarkId::new(format!("{op:?}"), format!("{mib}MiB"));
                g.bench_function(id, |b| b.iter_custom(|iters| run(p, n, op, iters).0));
            }
        }
        g.finish();
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
