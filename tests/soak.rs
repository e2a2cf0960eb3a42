//! Soak: millions of updates through the Hogwild bucket table (`basis-rayon`)
//! and the batched BASIS step (`basis-core`), with poisoned gradients (NaN,
//! ±Inf, finite values whose square would overflow) mixed in. Asserts that
//! resident memory stays flat after warm-up, that no NaN or infinity ever
//! reaches a bucket or a row, and that every poisoned update is rejected and
//! counted.
//!
//! `BASIS_SOAK_UPDATES` sets the number of row updates per phase (default
//! 1 000 000, a few seconds in CI); e.g. `BASIS_SOAK_UPDATES=200000000 cargo
//! test --release -p basisopt-workspace-tests --test soak -- --nocapture`
//! for a long run. One `#[test]`
//! only, so no other test in this binary allocates while RSS is sampled.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use std::collections::HashSet;

use basis::core::{
    Basis, BasisConfig, DenseTable, Direction, MAX_GRAD_ABS, RowIndex, ScalarStorage,
    SparseOptimizer, TablePrecision,
};
use basis::hash::OneChoice;
use basis_rayon::{AtomicMomentTable, MomentParams, MomentTable};

const DEFAULT_UPDATES: u64 = 1_000_000;
/// Checkpoints (RSS samples and finiteness scans) per phase.
const SAMPLES: u64 = 20;
/// Allowed RSS growth after warm-up (the first quarter of a phase): at the
/// default size this catches a leak of ≥ 3 bytes per row update (≈ 1.4 KiB
/// per 512-row batched step); longer runs catch proportionally less. The
/// slack covers allocator caching of per-step buffers (growth measured so
/// far: 0).
const RSS_SLACK: u64 = 2 << 20;

fn updates() -> u64 {
    std::env::var("BASIS_SOAK_UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_UPDATES)
}

/// Resident set size in bytes, from `/proc/self/statm` (pages × 4 KiB).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// RSS samples of one phase; the first quarter is warm-up.
struct RssTrace {
    name: &'static str,
    samples: Vec<u64>,
}

impl RssTrace {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            samples: Vec::new(),
        }
    }

    fn sample(&mut self) {
        self.samples.push(rss_bytes());
    }

    fn assert_flat(&self) {
        let warm = self.samples.len() / 4;
        let base = self.samples[warm];
        let peak = *self.samples[warm..].iter().max().unwrap();
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        println!(
            "{}: RSS after warm-up {:.1} MiB, peak {:.1} MiB, end {:.1} MiB ({} samples)",
            self.name,
            mib(base),
            mib(peak),
            mib(*self.samples.last().unwrap()),
            self.samples.len()
        );
        assert!(
            peak <= base + RSS_SLACK,
            "{}: RSS grew from {base} to {peak} bytes after warm-up: {:?}",
            self.name,
            self.samples
        );
    }
}

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A skewed id in `0..n` (density ∝ x^(-2/3): a few hot rows, a long tail).
    fn skewed(&mut self, n: u64) -> u64 {
        let u = self.unit();
        ((u * u * u) * n as f32) as u64 % n
    }

    /// A gradient value spanning several orders of magnitude, or (rarely)
    /// a poison value: NaN, ±Inf, or a finite value above `MAX_GRAD_ABS`.
    fn grad(&mut self, poison_one_in: u64) -> f32 {
        if self.next().is_multiple_of(poison_one_in) {
            match self.next() % 4 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => f32::NEG_INFINITY,
                // Finite, but its square would overflow a bucket's moment.
                _ => -3e19,
            }
        } else {
            let scale = [1e-4, 1e-2, 1.0, 1e2][(self.next() % 4) as usize];
            (self.unit() - 0.5) * scale
        }
    }
}

fn hogwild_phase(total: u64) {
    const BUCKETS: usize = 4096;
    const DIM: usize = 16;
    const THREADS: u64 = 4;
    let table = AtomicMomentTable::new(BUCKETS, DIM).unwrap();
    let params = MomentParams::default();
    let mut trace = RssTrace::new("hogwild table");
    let per_round = total / SAMPLES;
    let (mut applied, mut rejected) = (0u64, 0u64);
    for round in 0..SAMPLES {
        let results: Vec<(u64, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let table = &table;
                    s.spawn(move || {
                        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (round << 8 | t));
                        let (mut ok, mut bad) = (0, 0);
                        let (mut g, mut dir) = ([0.0f32; DIM], [0.0f32; DIM]);
                        for _ in 0..per_round / THREADS {
                            g.iter_mut().for_each(|x| *x = rng.grad(50_000));
                            let b = rng.skewed(BUCKETS as u64) as usize;
                            match table.adam_update(b, &g, &params, &mut dir) {
                                Ok(_) => {
                                    assert!(dir.iter().all(|d| d.is_finite()), "{dir:?}");
                                    ok += 1;
                                }
                                Err(basis_rayon::Error::NonFinite { .. }) => bad += 1,
                                Err(e) => panic!("{e}"),
                            }
                        }
                        (ok, bad)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (ok, bad) in results {
            applied += ok;
            rejected += bad;
        }
        trace.sample();
    }
    // No lost update, nothing non-finite in any bucket.
    let (mut m, mut v) = ([0.0f32; DIM], [0.0f32; DIM]);
    let mut steps = 0;
    for b in 0..BUCKETS {
        steps += table.snapshot(b, &mut m, &mut v).unwrap();
        assert!(m.iter().chain(&v).all(|x| x.is_finite()), "bucket {b}");
    }
    assert_eq!(steps, applied, "updates lost or double-counted");
    assert!(
        rejected > 0,
        "the poison rate should have produced rejections"
    );
    println!("hogwild table: {applied} updates applied, {rejected} poisoned ones rejected");
    trace.assert_flat();
}

fn batched_phase(
    total: u64,
    direction: Direction,
    storage: ScalarStorage,
    precision: TablePrecision,
) {
    const ROWS: u64 = 200_000;
    const DIM: usize = 16;
    const BATCH: usize = 512;
    let config = BasisConfig::default()
        .with_dim(DIM)
        .with_direction(direction)
        .with_scalar_storage(storage)
        .with_table_precision(precision)
        .with_row_index(RowIndex::Dense { rows: ROWS });
    let buckets = 2000;
    let mut opt = Basis::new(config, OneChoice::new(buckets, 7).unwrap()).unwrap();
    let mut weights = vec![0.01f32; ROWS as usize * DIM];
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut trace = RssTrace::new(match direction {
        Direction::Shared => "batched step (Shared, bf16 table)",
        _ => "batched step (RowScaled, 1-byte scalars)",
    });
    let steps = total / BATCH as u64;
    let check_every = (steps / SAMPLES).max(1);
    let (mut ids, mut grads) = (Vec::with_capacity(BATCH), Vec::with_capacity(BATCH * DIM));
    let mut poisoned = HashSet::new();
    let (mut expected_skips, mut skipped) = (0u64, 0u64);
    for step in 0..steps {
        ids.clear();
        grads.clear();
        poisoned.clear();
        for _ in 0..BATCH {
            let id = rng.skewed(ROWS);
            ids.push(id);
            for _ in 0..DIM {
                let g = rng.grad(200_000);
                if g.is_nan() || g.abs() > MAX_GRAD_ABS {
                    poisoned.insert(id);
                }
                grads.push(g);
            }
        }
        expected_skips += poisoned.len() as u64;
        let mut table = DenseTable::new(&mut weights, DIM).unwrap();
        let report = opt.step(&ids, &grads, &mut table).unwrap();
        skipped += report.rows_skipped_nonfinite as u64;
        if step % check_every == 0 || step + 1 == steps {
            for b in 0..buckets {
                let view = opt.bucket_view(b).unwrap();
                let m = view.m.iter().flatten();
                assert!(
                    m.chain(&view.v).all(|x| x.is_finite()),
                    "step {step} bucket {b}: {view:?}"
                );
            }
            assert!(
                weights.iter().all(|w| w.is_finite()),
                "step {step}: a row went non-finite"
            );
            trace.sample();
        }
    }
    assert_eq!(
        skipped, expected_skips,
        "every poisoned row skipped, no other"
    );
    assert!(
        expected_skips > 0,
        "the poison rate should have produced skips"
    );
    assert_eq!(opt.diagnostics().nonfinite_rows, expected_skips);
    println!(
        "{}: {} steps × {BATCH} rows, {skipped} poisoned rows skipped, state {} bytes",
        trace.name,
        steps,
        opt.memory_bytes()
    );
    trace.assert_flat();
}

#[test]
fn soak_memory_stays_flat_and_no_nan_reaches_a_bucket() {
    let total = updates();
    hogwild_phase(total);
    batched_phase(
        total,
        Direction::RowScaled,
        ScalarStorage::LogU8,
        TablePrecision::F32,
    );
    batched_phase(
        total,
        Direction::Shared,
        ScalarStorage::F32,
        TablePrecision::Bf16,
    );
}
