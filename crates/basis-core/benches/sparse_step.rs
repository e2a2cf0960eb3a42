//! Sparse step throughput: d = 64, batches of 4096 rows drawn Zipf(1.05) from
//! 10M ids (512 batches, ~0.5M distinct rows), B = 100k buckets (one-choice). BASIS modes against exact per-row
//! Adam and row-wise AdaGrad on the same batches, beside the machine's read
//! and copy bandwidth and its random 512-byte-block read-modify-write
//! bandwidth, all measured in the same run. Before the criterion groups, an
//! interleaved pass (methods taking turns within the process) prints each
//! method's median step time and ratio to exact Adam: on a shared machine
//! those ratios are robust to load spikes that criterion's one-method-at-a-
//! time windows are not.
//!
//! Ids are remapped to a compact range (a random permutation of the distinct
//! ids seen) so the caller's table and dense row state fit in memory; the
//! bucket hash sees the compact ids (a hash, so the load is the same).
// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]

use core::hint::black_box;

use balanced_hash::OneChoice;
use basis_core::{
    AdagradConfig, AdamConfig, Basis, BasisConfig, DenseTable, Direction, ExactAdam, RowIndex,
    RowwiseAdagrad, ScalarStorage, SparseOptimizer,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use basis_core::workload::{Remap, Rng, scatter, zipf_batch};

const DIM: usize = 64;
const BATCH: usize = 4096;
const IDS: f64 = 10_000_000.0;
const BUCKETS: u32 = 100_000;
/// Id batches cycled through: enough distinct rows (~0.5M) that per-row state
/// (Adam: 512 B/row) outgrows the 32 MiB L3, as it does at real scale.
const BATCHES: usize = 512;
/// Gradient buffers (reused across id batches; their values do not matter).
const GRAD_SETS: usize = 8;

struct Workload {
    batches: Vec<Vec<u64>>,
    grads: Vec<Vec<f32>>,
    rows: usize,
}

fn workload() -> Workload {
    let mut rng = Rng(2026);
    let mut remap = Remap::new();
    let mut batches: Vec<Vec<u64>> = (0..BATCHES)
        .map(|_| zipf_batch(&mut rng, &mut remap, BATCH, IDS))
        .collect();
    let rows = remap.len();
    scatter(&mut rng, rows, batches.iter_mut());
    let grads = (0..GRAD_SETS)
        .map(|_| {
            (0..BATCH * DIM)
                .map(|_| (rng.unit() as f32 - 0.5) * 0.02)
                .collect()
        })
        .collect();
    Workload {
        batches,
        grads,
        rows,
    }
}

/// Bytes a step really touches per row (read + write), d = 64, f32.
fn bytes_per_row(name: &str) -> usize {
    let v = DIM * 4;
    match name {
        "exact-adam" => 2 * v + v + 2 * v + 2 * v, // θ rw, g, m rw, v rw
        "rowwise-adagrad" => 2 * v + v + 8,        // θ rw, g, G rw
        "basis-shared" | "basis-signed" | "basis-own-gradient" => 2 * v + v + 2 * v + 2 * v + 8, // + M, V rw per bucket, s rw
        "basis-own-gradient-frozen" => 2 * v + v + 2 * v, // θ rw, g, V rw
        "basis-row-scaled" => 2 * v + v + 2 * v + 8,      // θ rw, g, C rw, G rw
        "basis-row-scaled-u8" => 2 * v + v + 2 * v + 2,   // 1-byte G
        _ => 0,
    }
}

fn basis(
    direction: Direction,
    storage: ScalarStorage,
    scalar_lr: f32,
    rows: usize,
) -> Box<dyn SparseOptimizer> {
    let c = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(direction)
        .with_scalar_storage(storage)
        .with_scalar_lr(scalar_lr)
        .with_row_index(RowIndex::Dense { rows: rows as u64 });
    Box::new(Basis::new(c, OneChoice::new(BUCKETS, 7).expect("buckets > 0")).expect("valid config"))
}

/// Values per random block: 512 bytes, a BASIS bucket's `[M_b | V_b]` at d = 64.
const BLOCK: usize = 128;
/// Blocks in the random-access buffer: 256 MiB, far over the L3.
const BLOCKS: usize = (256 << 20) / (BLOCK * 4);

/// The honest ceiling for this access pattern, in the same run: read-modify-
/// write of `BATCH` 512-byte blocks at random positions of a 256 MiB buffer
/// per iteration (fresh positions each iteration, so nothing stays cached).
fn random_blocks(c: &mut Criterion) {
    let mut rng = Rng(99);
    let mut buf = vec![0.0f32; BLOCKS * BLOCK];
    let positions: Vec<u32> = (0..BATCHES * BATCH)
        .map(|_| (rng.next_u64() % BLOCKS as u64) as u32)
        .collect();
    let mut g = c.benchmark_group("bandwidth");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((2 * BATCH * BLOCK * 4) as u64));
    let mut k = 0usize;
    g.bench_function("random-block-rmw", |b| {
        b.iter(|| {
            let start = (k % BATCHES) * BATCH;
            k += 1;
            for &p in &positions[start..start + BATCH] {
                let p = p as usize * BLOCK;
                for x in &mut buf[p..p + BLOCK] {
                    *x += 1.0;
                }
            }
            black_box(&buf);
        })
    });
    g.finish();
}

/// Interleaved timing beside criterion's: every method takes `STEPS` steps
/// in turn (starting method rotated), `ROUNDS` times, so load spikes from
/// other processes on a shared machine hit all methods alike. Prints each
/// method's median step time and its ratio to exact Adam's.
fn interleaved(w: &Workload, table: &mut [f32], methods: &[(&str, MakeOptimizer)]) {
    const ROUNDS: usize = 15;
    const STEPS: usize = 8;
    let mut opts: Vec<Box<dyn SparseOptimizer>> = methods.iter().map(|(_, m)| m()).collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); methods.len()];
    let mut k = 0usize;
    // Round 0 warms up (first touches of the state) and is not recorded.
    for round in 0..=ROUNDS {
        for i in 0..opts.len() {
            let i = (i + round) % opts.len();
            let start = std::time::Instant::now();
            for s in 0..STEPS {
                let (ids, grads) = (&w.batches[(k + s) % BATCHES], &w.grads[(k + s) % GRAD_SETS]);
                let mut t = DenseTable::new(table, DIM).expect("dim > 0");
                black_box(opts[i].step(ids, grads, &mut t).expect("valid batch"));
            }
            if round > 0 {
                times[i].push(start.elapsed().as_secs_f64() / STEPS as f64);
            }
        }
        k += STEPS;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians: Vec<f64> = times.iter_mut().map(median).collect();
    for ((name, _), m) in methods.iter().zip(&medians) {
        eprintln!(
            "interleaved {name}: median {:.3} ms/step, {:.2}x exact Adam's rows/s",
            m * 1e3,
            medians[0] / m
        );
    }
}

type MakeOptimizer = Box<dyn Fn() -> Box<dyn SparseOptimizer>>;

fn bench(c: &mut Criterion) {
    let w = workload();
    let mut table = vec![0.0f32; w.rows * DIM];
    let distinct: usize = w
        .batches
        .iter()
        .map(|ids| {
            let mut v = ids.clone();
            v.sort_unstable();
            v.dedup();
            v.len()
        })
        .sum();
    eprintln!(
        "workload: {} distinct rows over {BATCHES} batches of {BATCH}; {:.1} distinct rows per batch on average",
        w.rows,
        distinct as f64 / BATCHES as f64
    );

    // Bandwidth baseline in the same run: 64 MiB buffers.
    let n = 8 << 20;
    let src = vec![1u64; n];
    let mut dst = vec![0u64; n];
    let mut g = c.benchmark_group("bandwidth");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((n * 8) as u64));
    // Integer sum: vectorizes, so it is bound by memory, not by an add chain.
    g.bench_function("read", |b| {
        b.iter(|| black_box(src.iter().fold(0u64, |a, &x| a.wrapping_add(x))))
    });
    g.throughput(Throughput::Bytes((2 * n * 8) as u64));
    g.bench_function("copy", |b| b.iter(|| dst.copy_from_slice(black_box(&src))));
    g.finish();
    drop((src, dst));
    random_blocks(c);

    let rows = w.rows;
    let methods: Vec<(&str, MakeOptimizer)> = vec![
        (
            "exact-adam",
            Box::new(move || {
                let c = AdamConfig::default()
                    .with_dim(DIM)
                    .with_row_index(RowIndex::Dense { rows: rows as u64 });
                Box::new(ExactAdam::new(c).expect("valid")) as Box<dyn SparseOptimizer>
            }),
        ),
        (
            "rowwise-adagrad",
            Box::new(move || {
                let c = AdagradConfig::default()
                    .with_dim(DIM)
                    .with_row_index(RowIndex::Dense { rows: rows as u64 });
                Box::new(RowwiseAdagrad::new(c).expect("valid")) as Box<dyn SparseOptimizer>
            }),
        ),
        (
            "basis-shared",
            Box::new(move || basis(Direction::Shared, ScalarStorage::F32, 0.01, rows)),
        ),
        (
            "basis-signed",
            Box::new(move || basis(Direction::Signed, ScalarStorage::F32, 0.01, rows)),
        ),
        (
            "basis-own-gradient",
            Box::new(move || basis(Direction::OwnGradient, ScalarStorage::F32, 0.01, rows)),
        ),
        (
            "basis-own-gradient-frozen",
            Box::new(move || basis(Direction::OwnGradient, ScalarStorage::F32, 0.0, rows)),
        ),
        (
            "basis-row-scaled",
            Box::new(move || basis(Direction::RowScaled, ScalarStorage::F32, 0.0, rows)),
        ),
        (
            "basis-row-scaled-u8",
            Box::new(move || basis(Direction::RowScaled, ScalarStorage::LogU8, 0.0, rows)),
        ),
    ];
    interleaved(&w, &mut table, &methods);
    let mut g = c.benchmark_group("sparse_step");
    g.sample_size(10);
    g.throughput(Throughput::Elements(BATCH as u64));
    let distinct_per_batch = distinct as f64 / BATCHES as f64;
    for (name, make) in &methods {
        // Per step: every distinct row's traffic, plus the gradient reads of
        // the duplicate rows merged into it.
        let per_step = distinct_per_batch * bytes_per_row(name) as f64
            + (BATCH as f64 - distinct_per_batch) * (DIM * 4) as f64;
        eprintln!(
            "{name}: {} bytes touched per distinct row, {per_step:.0} bytes per step",
            bytes_per_row(name)
        );
        let mut opt = make();
        let mut k = 0usize;
        g.bench_function(*name, |b| {
            b.iter(|| {
                let (ids, grads) = (&w.batches[k % BATCHES], &w.grads[k % GRAD_SETS]);
                k += 1;
                let mut t = DenseTable::new(&mut table, DIM).expect("dim > 0");
                black_box(opt.step(ids, grads, &mut t).expect("valid batch"))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
