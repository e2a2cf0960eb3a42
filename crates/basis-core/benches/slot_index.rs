//! `SlotIndex` against `hashbrown::HashMap<u64, u32>` (with the same
//! SplitMix64 id hash, `IdBuildHasher`) at 10^6 and 10^7 ids: bytes per id,
//! then an interleaved pass (the two structures take turns, 7 rounds each,
//! medians: robust to a busy machine's load spikes), then criterion groups.
//!
//! Operations: lookup hit (65 536 held ids in random order), lookup miss
//! (65 536 absent ids), Zipf-skewed hits (rank `r` with probability ∝ 1/r),
//! each per id with `get` and batched with `SlotIndex::get_many` (8192 ids a
//! call, a shard step's batch; hashbrown has no batched lookup, so its
//! per-id figure is taken again, interleaved), and insert (building the whole table from empty, ns
//! per id, growth included). Ids are pseudo-random 64-bit values.
//! `SLOT_BENCH_N=1000000` limits the sizes (the default is both).
// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]

use core::hint::black_box;
use std::time::Instant;

use basis_core::{IdBuildHasher, SlotIndex};
use criterion::{Criterion, Throughput, criterion_group};
use hashbrown::HashMap;

const PROBES: usize = 1 << 16;
/// Ids per `get_many` call: the shard step bench's batch.
const STEP_BATCH: usize = 8192;

fn id(i: u64) -> u64 {
    // An odd multiplier is a bijection: distinct, scattered ids.
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555
}

fn sizes() -> Vec<usize> {
    match std::env::var("SLOT_BENCH_N") {
        Ok(n) => vec![n.parse().expect("SLOT_BENCH_N is a number")],
        Err(_) => vec![1_000_000, 10_000_000],
    }
}

fn build_index(n: usize) -> SlotIndex {
    let mut index = SlotIndex::new();
    for i in 0..n as u64 {
        index.try_insert(id(i)).expect("fits");
    }
    index
}

fn build_map(n: usize) -> HashMap<u64, u32, IdBuildHasher> {
    let mut map = HashMap::with_hasher(IdBuildHasher);
    for i in 0..n as u64 {
        let next = map.len() as u32;
        map.entry(id(i)).or_insert(next);
    }
    map
}

/// Held ids in a scattered order, and ids never inserted.
fn probes(n: usize) -> (Vec<u64>, Vec<u64>) {
    let hits = (0..PROBES as u64)
        .map(|i| id(i.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64))
        .collect();
    let misses = (0..PROBES as u64).map(|i| id(n as u64 + 1 + i)).collect();
    (hits, misses)
}

fn sum_index(index: &SlotIndex, ids: &[u64]) -> u64 {
    ids.iter().map(|&k| index.get(k).map_or(1, u64::from)).sum()
}

/// [`SlotIndex::get_many`] over `ids` in runs of a table step's batch.
fn sum_index_many(index: &SlotIndex, ids: &[u64], out: &mut [Option<u32>]) -> u64 {
    let mut sum = 0;
    for (ks, os) in ids.chunks(STEP_BATCH).zip(out.chunks_mut(STEP_BATCH)) {
        index.get_many(ks, os);
        sum += os.iter().map(|s| s.map_or(1, u64::from)).sum::<u64>();
    }
    sum
}

/// Zipf-like ids over the `n` held ones (rank `r` drawn with probability
/// ∝ 1/r: `r = n^u` for uniform `u`), scattered by `id`: a training batch's
/// skew, where hot ids stay in cache for both structures.
fn zipf(n: usize) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..PROBES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let r = (n as f64).powf(u) as u64 - 1;
            id(r.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64)
        })
        .collect()
}

fn sum_map(map: &HashMap<u64, u32, IdBuildHasher>, ids: &[u64]) -> u64 {
    ids.iter()
        .map(|k| map.get(k).map_or(1, |&s| u64::from(s)))
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ns_per(ids: usize, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / ids as f64
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn interleaved(n: usize) {
    let (hits, misses) = probes(n);
    let index = build_index(n);
    let map = build_map(n);
    let bytes = index.memory_bytes() as f64 / n as f64;
    let map_bytes = map.allocation_size() as f64 / n as f64;
    println!(
        "n = {n}: SlotIndex {bytes:.2} B/id, hashbrown {map_bytes:.2} B/id; load {}",
        load()
    );
    let zipf = zipf(n);
    let mut out = vec![None; PROBES];
    // Pairs (SlotIndex, hashbrown) per row of the report; `get_many` rows
    // compare the batched lookup with hashbrown's per-id one.
    let mut t: [Vec<f64>; 12] = Default::default();
    for _ in 0..7 {
        for (row, ids) in [&hits, &misses, &zipf].into_iter().enumerate() {
            t[2 * row].push(ns_per(PROBES, || {
                black_box(sum_index(&index, ids));
            }));
            t[2 * row + 1].push(ns_per(PROBES, || {
                black_box(sum_map(&map, ids));
            }));
            t[6 + 2 * row].push(ns_per(PROBES, || {
                black_box(sum_index_many(&index, ids, &mut out));
            }));
            t[6 + 2 * row + 1].push(ns_per(PROBES, || {
                black_box(sum_map(&map, ids));
            }));
        }
    }
    let mut build: [Vec<f64>; 2] = Default::default();
    if n <= 1_000_000 {
        for _ in 0..7 {
            build[0].push(ns_per(n, || drop(black_box(build_index(n)))));
            build[1].push(ns_per(n, || drop(black_box(build_map(n)))));
        }
    }
    let names = [
        "hit",
        "miss",
        "zipf",
        "hit get_many",
        "miss get_many",
        "zipf get_many",
    ];
    for (i, name) in names.iter().enumerate() {
        let (a, b) = (median(t[2 * i].clone()), median(t[2 * i + 1].clone()));
        println!(
            "  {name:13} SlotIndex {a:7.1} ns/op  hashbrown {b:7.1} ns/op  ratio {:.2}",
            a / b
        );
    }
    if !build[0].is_empty() {
        let (a, b) = (median(build[0].clone()), median(build[1].clone()));
        println!(
            "  {:13} SlotIndex {a:7.1} ns/op  hashbrown {b:7.1} ns/op  ratio {:.2}",
            "insert",
            a / b
        );
    }
    println!("  load after: {}", load());
}

fn lookups(c: &mut Criterion) {
    for n in sizes() {
        let (hits, misses) = probes(n);
        let index = build_index(n);
        let map = build_map(n);
        let mut g = c.benchmark_group(format!("slot_index/{n}"));
        g.throughput(Throughput::Elements(PROBES as u64));
        g.bench_function("hit/SlotIndex", |b| b.iter(|| sum_index(&index, &hits)));
        g.bench_function("hit/hashbrown", |b| b.iter(|| sum_map(&map, &hits)));
        g.bench_function("miss/SlotIndex", |b| b.iter(|| sum_index(&index, &misses)));
        g.bench_function("miss/hashbrown", |b| b.iter(|| sum_map(&map, &misses)));
        let mut out = vec![None; PROBES];
        g.bench_function("hit/SlotIndex::get_many", |b| {
            b.iter(|| sum_index_many(&index, &hits, &mut out))
        });
        g.finish();
    }
}

fn inserts(c: &mut Criterion) {
    let n = 1_000_000;
    let mut g = c.benchmark_group("slot_index/build");
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    g.bench_function("SlotIndex", |b| b.iter(|| build_index(n)));
    g.bench_function("hashbrown", |b| b.iter(|| build_map(n)));
    g.finish();
}

criterion_group!(benches, lookups, inserts);

fn main() {
    for n in sizes() {
        interleaved(n);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
