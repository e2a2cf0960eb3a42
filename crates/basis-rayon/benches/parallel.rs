//! Parallel kernels at 1 and 2 threads in the same run, with their serial
//! peers and a memory-bandwidth baseline.
//!
//! `cargo bench -p basisopt-rayon --bench parallel -- --warm-up-time 1 --measurement-time 3`
//!
//! - `bandwidth`: `a[i] = b[i] + c[i]` over 3 × 64 MiB (12 B/element moved),
//!   the machine's streaming bandwidth at 1 and 2 threads.
//! - `sparse_step`: one BASIS step at basis-core's bench shape: d = 64,
//!   batches of 4096 ids drawn Zipf(1.05) from 10M (remapped to a compact,
//!   scattered range), B = 100k one-choice buckets, dense row state; the
//!   RowScaled (default) and Shared (+ learned scalars) modes. Serial
//!   `Basis::step` vs `par_step_dense` on 1 and 2 threads.
//! - `compressor`: 1-bit error-feedback compression of 4M f32, one scale
//!   (the sequential scale sum stays serial) and 64K-element chunks (scales
//!   in parallel); serial `Compressor` vs `ParCompressor` at 1 and 2 threads.
//! - `hogwild`: 4096 Adam-mode row updates (d = 64, same Zipf rows → buckets)
//!   into the lock-free and the striped table at 1 and 2 threads (moments and
//!   each row's direction; no row writes), beside the batched Shared step
//!   (scalars frozen) over the same 4096 rows, serial and `par_step_dense` at
//!   1 and 2 threads (this one also writes the rows).
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]
#![allow(
    clippy::unwrap_used,
    reason = "bench setup; a failure is a broken bench"
)]

use core::num::NonZeroUsize;

use balanced_hash::{Bucketer, OneChoice};
use basis_core::{Basis, BasisConfig, DenseTable, Direction, RowIndex, SparseOptimizer};
use basis_rayon::{
    AtomicMomentTable, MomentParams, MomentTable, ParCompressor, StripedMomentTable,
    par_step_dense, thread_pool,
};
use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use onebit_codec::{Compressor, CompressorConfig, packed_len};
use rayon::prelude::*;

mod common;

use common::{BATCH, BATCHES, DIM, Rng, workload};

const BUCKETS: u32 = 100_000;
const THREADS: [usize; 2] = [1, 2];

fn basis(direction: Direction, scalar_lr: f32, rows: usize) -> Basis<OneChoice> {
    let config = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(direction)
        .with_scalar_lr(scalar_lr)
        .with_row_index(RowIndex::Dense { rows: rows as u64 });
    Basis::new(config, OneChoice::new(BUCKETS, 7).unwrap()).unwrap()
}

fn bandwidth(c: &mut Criterion) {
    let n = 16 << 20; // 64 MiB per array
    let (b, cc) = (vec![1.0f32; n], vec![2.0f32; n]);
    let mut a = vec![0.0f32; n];
    let mut group = c.benchmark_group("bandwidth");
    group.sample_size(10);
    group.throughput(Throughput::Bytes((n * 12) as u64));
    for threads in THREADS {
        let pool = thread_pool(threads).unwrap();
        group.bench_function(format!("a=b+c {threads} thread(s)"), |bench| {
            bench.iter(|| {
                pool.install(|| {
                    a.par_chunks_mut(1 << 16)
                        .zip(b.par_chunks(1 << 16))
                        .zip(cc.par_chunks(1 << 16))
                        .for_each(|((a, b), c)| {
                            a.iter_mut()
                                .zip(b)
                                .zip(c)
                                .for_each(|((a, b), c)| *a = b + c)
                        });
                });
                black_box(&a);
            });
        });
    }
    group.finish();
}

fn sparse_step(c: &mut Criterion) {
    let w = workload();
    let mut table = vec![0.0f32; w.rows * DIM];
    let mut group = c.benchmark_group("sparse_step");
    group.sample_size(10);
    group.throughput(Throughput::Elements(BATCH as u64));
    let modes = [
        ("row-scaled", Direction::RowScaled, 0.0),
        ("shared", Direction::Shared, 0.01),
    ];
    for (mode, direction, scalar_lr) in modes {
        let mut serial = basis(direction, scalar_lr, w.rows);
        let mut k = 0;
        group.bench_function(format!("{mode}: serial Basis::step"), |bench| {
            bench.iter(|| {
                let (ids, grads) = &w.batches[k % BATCHES];
                k += 1;
                serial
                    .step(ids, grads, &mut DenseTable::new(&mut table, DIM).unwrap())
                    .unwrap()
            });
        });
        for threads in THREADS {
            let pool = thread_pool(threads).unwrap();
            let mut par = basis(direction, scalar_lr, w.rows);
            group.bench_function(
                format!("{mode}: par_step_dense {threads} thread(s)"),
                |bench| {
                    bench.iter(|| {
                        let (ids, grads) = &w.batches[k % BATCHES];
                        k += 1;
                        pool.install(|| par_step_dense(&mut par, ids, grads, &mut table))
                            .unwrap()
                    });
                },
            );
        }
    }
    group.finish();
}

fn compressor(c: &mut Criterion) {
    let n = 4 << 20;
    let mut rng = Rng(42);
    let x: Vec<f32> = (0..n).map(|_| rng.unit() as f32 - 0.5).collect();
    let mut signs = vec![0u8; packed_len(n)];
    let mut group = c.benchmark_group("compressor");
    group.sample_size(10);
    group.throughput(Throughput::Bytes((n * 4) as u64));
    for (label, chunk) in [
        ("one scale", None),
        ("64K chunks", NonZeroUsize::new(1 << 16)),
    ] {
        let config = CompressorConfig::default().with_chunk(chunk);
        let mut scales = vec![0.0f32; n.div_ceil(chunk.map_or(n, NonZeroUsize::get))];
        let mut serial = Compressor::with_config(n, config).unwrap();
        group.bench_function(format!("{label}: serial Compressor"), |bench| {
            bench.iter(|| {
                serial
                    .compress_chunks_into(&x, &mut signs, &mut scales)
                    .unwrap()
            });
        });
        for threads in THREADS {
            let pool = thread_pool(threads).unwrap();
            let mut par = ParCompressor::with_config(n, config).unwrap();
            group.bench_function(
                format!("{label}: ParCompressor {threads} thread(s)"),
                |bench| {
                    bench.iter(|| {
                        pool.install(|| par.compress_chunks_into(&x, &mut signs, &mut scales))
                            .unwrap()
                    });
                },
            );
        }
    }
    group.finish();
}

fn hogwild(c: &mut Criterion) {
    let w = workload();
    let batch = &w.batches[0];
    let bucketer = OneChoice::new(BUCKETS, 7).unwrap();
    let rows: Vec<(usize, &[f32])> = batch
        .0
        .iter()
        .zip(batch.1.chunks(DIM))
        .map(|(&id, g)| (bucketer.bucket(id) as usize, g))
        .collect();
    let params = MomentParams::default();
    let mut group = c.benchmark_group("hogwild");
    group.sample_size(10);
    group.throughput(Throughput::Elements(BATCH as u64));
    let atomic = AtomicMomentTable::new(BUCKETS as usize, DIM).unwrap();
    let striped = StripedMomentTable::new(BUCKETS as usize, DIM).unwrap();
    let tables: [(&str, &dyn MomentTable); 2] =
        [("atomic (CAS)", &atomic), ("striped lock", &striped)];
    for threads in THREADS {
        let pool = thread_pool(threads).unwrap();
        for (name, table) in tables {
            group.bench_function(format!("{name} {threads} thread(s)"), |bench| {
                bench.iter(|| {
                    pool.install(|| {
                        rows.par_chunks(256).for_each(|chunk| {
                            let mut dir = [0.0f32; DIM];
                            for &(b, g) in chunk {
                                table.adam_update(b, g, &params, &mut dir).unwrap();
                                black_box(&dir);
                            }
                        });
                    });
                });
            });
        }
    }
    // The batched step over the same rows (duplicates kept apart: row k is
    // remapped to id k, bucket of its original id), with a small row table.
    let ids: Vec<u64> = (0..BATCH as u64).collect();
    let remap = OneChoiceBy(rows.iter().map(|&(b, _)| b as u32).collect());
    let config = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(Direction::Shared)
        .with_scalar_lr(0.0);
    let mut table = vec![0.0f32; BATCH * DIM];
    let mut serial = Basis::new(config, remap.clone()).unwrap();
    group.bench_function("batched Basis::step (Shared), serial", |bench| {
        bench.iter(|| {
            serial
                .step(
                    &ids,
                    &batch.1,
                    &mut DenseTable::new(&mut table, DIM).unwrap(),
                )
                .unwrap()
        });
    });
    for threads in THREADS {
        let pool = thread_pool(threads).unwrap();
        let mut par = Basis::new(config, remap.clone()).unwrap();
        group.bench_function(
            format!("batched par_step_dense (Shared) {threads} thread(s)"),
            |bench| {
                bench.iter(|| {
                    pool.install(|| par_step_dense(&mut par, &ids, &batch.1, &mut table))
                        .unwrap()
                });
            },
        );
    }
    group.finish();
}

/// Row `k` of the remapped batch → the bucket its original id hashed to.
#[derive(Debug, Clone)]
struct OneChoiceBy(Vec<u32>);

impl Bucketer for OneChoiceBy {
    fn buckets(&self) -> u32 {
        BUCKETS
    }

    fn bucket(&self, key: u64) -> u32 {
        self.0.get(key as usize).copied().unwrap_or(0)
    }
}

criterion_group!(benches, bandwidth, sparse_step, compressor, hogwild);
criterion_main!(benches);
