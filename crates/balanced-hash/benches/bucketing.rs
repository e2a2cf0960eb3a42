//! Keys per second for each bucketing strategy, with a plain `ahash + %`
//! baseline in the same run.
//!
//! `cargo bench -p basisopt-balanced-hash -- --warm-up-time 1 --measurement-time 3`
//!
//! N = 10^6 keys into B = 10^4 buckets (α = 100). Dense ids are `0..N` in
//! order; sparse ids are the same count of scattered u64s (`fmix64(i)`).
//! "assign" starts from an empty bucketer each iteration (choose-and-remember
//! on first sight, construction excluded); "lookup" re-reads remembered keys.
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use balanced_hash::murmur3::{fmix64, x64_128};
use balanced_hash::{Bucketer, DChoice, OneChoice, reduce};
use criterion::{BatchSize, Criterion, Throughput, black_box, criterion_group, criterion_main};

const N: u64 = 1_000_000;
const B: u32 = 10_000;
const SEED: u64 = 0x5eed;

/// (name, keys, constructor of an empty bucketer).
type Case<'a> = (&'a str, &'a [u64], fn() -> DChoice);

fn bucketing(c: &mut Criterion) {
    let dense: Vec<u64> = (0..N).collect();
    let sparse: Vec<u64> = (0..N).map(fmix64).collect();

    let mut group = c.benchmark_group("bucketing");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);

    let ahash = ahash::RandomState::with_seeds(1, 2, 3, 4);
    group.bench_function("baseline ahash % B", |bench| {
        bench.iter(|| {
            let mut acc = 0u64;
            for &k in &dense {
                acc = acc.wrapping_add(ahash.hash_one(k) % u64::from(B));
            }
            black_box(acc)
        });
    });

    group.bench_function("murmur3 x64_128(8 B) + reduce", |bench| {
        bench.iter(|| {
            let mut acc = 0u64;
            for &k in &dense {
                acc = acc.wrapping_add(u64::from(reduce(x64_128(&k.to_le_bytes(), 7)[0], B)));
            }
            black_box(acc)
        });
    });

    let one = OneChoice::new(B, SEED).unwrap_or_else(|e| panic!("{e}"));
    group.bench_function("one-choice", |bench| {
        bench.iter(|| {
            let mut acc = 0u64;
            for &k in &dense {
                acc = acc.wrapping_add(u64::from(one.bucket(k)));
            }
            black_box(acc)
        });
    });

    let cases: [Case<'_>; 2] = [
        ("two-choice dense", &dense, || {
            DChoice::dense(N, B, 2, SEED).unwrap_or_else(|e| panic!("{e}"))
        }),
        ("two-choice sparse", &sparse, || {
            DChoice::sparse(B, 2, SEED).unwrap_or_else(|e| panic!("{e}"))
        }),
    ];
    for (name, keys, make) in cases {
        group.bench_function(format!("{name} assign"), |bench| {
            bench.iter_batched(
                make,
                |mut h| {
                    let mut acc = 0u64;
                    for &k in keys {
                        acc = acc.wrapping_add(u64::from(h.assign(k)));
                    }
                    black_box((acc, h))
                },
                BatchSize::LargeInput,
            );
        });
        let mut filled = make();
        for &k in keys {
            filled.assign(k);
        }
        group.bench_function(format!("{name} lookup"), |bench| {
            bench.iter(|| {
                let mut acc = 0u64;
                for &k in keys {
                    acc = acc.wrapping_add(u64::from(filled.bucket(k)));
                }
                black_box(acc)
            });
        });
    }
    // Skewed traffic: 10^6 look-ups that hit only 10^4 distinct sparse keys
    // (cache-resident), as hot embedding rows do.
    let hot: Vec<u64> = (0..N)
        .map(|i| sparse[(fmix64(i) % 10_000) as usize])
        .collect();
    let mut filled = DChoice::sparse(B, 2, SEED).unwrap_or_else(|e| panic!("{e}"));
    for &k in &sparse {
        filled.assign(k);
    }
    group.bench_function("two-choice sparse lookup (10^4 hot keys)", |bench| {
        bench.iter(|| {
            let mut acc = 0u64;
            for &k in &hot {
                acc = acc.wrapping_add(u64::from(filled.bucket(k)));
            }
            black_box(acc)
        });
    });
    group.finish();
}

criterion_group!(benches, bucketing);
criterion_main!(benches);
