//! One rank's training step (`lookup` + `apply`, `P = 1` over `LocalComm`,
//! SGD so that the optimizer does not hide the table's own costs) on a
//! table of `STEP_BENCH_ROWS` rows (default 10^6, `dim = 32`): batches of
//! 8192 ids, 90 % held rows in random order and 10 % new ids. With
//! `STEP_BENCH_ZIPF=1` the held rows are drawn Zipf-skewed instead of
//! uniformly (rank `r` with probability ∝ 1/r, `r = n^u` for uniform `u`,
//! ranks scattered over the rows): a training stream's skew, where hot rows
//! stay in cache. Prints the
//! median time per step of each round (5 rounds of 40 steps), the rows, the
//! index / row / state bytes per row, the step's kept buffers (scratch)
//! and the process's RSS per row, with
//! the load average. `STEP_BENCH_PRECISION=f32|bf16|f16` sets the row
//! precision (default f32), `STEP_BENCH_OPT=sgd|basis` the optimizer
//! (default SGD; `basis`: BASIS over 4096 one-choice buckets, for its
//! per-row state), `STEP_BENCH_INDEX=fast|compact` the id → slot index
//! (`IndexKind`, default fast). `STEP_BENCH_NEW=0` makes every id of
//! the timed steps a held one (the steady state of a table that has all its
//! ids: lookups only, no growth); the default is one new id in ten.
//!
//! This is the step-level figure the id index is judged by: build it once
//! per index variant and run the binaries in turns (interleaved A/B; the
//! machine is shared).
// A benchmark binary: a failed unwrap is a failed run.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Instant;

use basis_core::{Basis, BasisConfig, OneChoice, RowIndex, Sgd, SparseOptimizer};
use basis_shard::{
    Batch, BoxedOptimizer, IndexKind, OwnerRule, RowInit, RowPrecision, ShardedTable, TableConfig,
};
use basis_std::local::LocalComm;
use comm_traits::Communicator;

const DIM: usize = 32;
const BATCH: usize = 8192;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The process's resident set, bytes (`/proc/self/statm`, Linux).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// A training loop's buffers, kept across steps (as a loop over
/// `lookup_into` keeps them: no per-step allocation of ~1 MB blocks).
#[derive(Default)]
struct Buffers {
    batch: Batch,
    grads: Vec<f32>,
}

fn step(
    t: &mut ShardedTable<BoxedOptimizer>,
    comm: &mut dyn Communicator,
    ids: &[u64],
    b: &mut Buffers,
) {
    t.lookup_into(comm, ids, &mut b.batch).unwrap();
    b.grads.clear();
    b.grads.resize(b.batch.ids.len() * DIM, 0.001);
    t.apply(comm, &b.batch, &b.grads).unwrap();
}

fn main() {
    let rows: u64 = std::env::var("STEP_BENCH_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let precision: RowPrecision = std::env::var("STEP_BENCH_PRECISION")
        .map_or(Ok(RowPrecision::F32), |s| s.parse())
        .unwrap();
    let opt: Box<dyn SparseOptimizer + Send> =
        match std::env::var("STEP_BENCH_OPT").as_deref().unwrap_or("sgd") {
            "sgd" => Box::new(Sgd::new(DIM, 0.01).unwrap()),
            "basis" => Box::new(
                Basis::new(
                    BasisConfig::default()
                        .with_dim(DIM)
                        .with_row_index(RowIndex::Dense { rows: 0 }),
                    OneChoice::new(4096, 1).unwrap(),
                )
                .unwrap(),
            ),
            other => panic!("STEP_BENCH_OPT={other}: sgd or basis"),
        };
    let mut comm = LocalComm::group(1).pop().unwrap();
    let config = TableConfig::new(DIM, OwnerRule::hashed(1, 1).unwrap(), 0)
        .with_init(RowInit::uniform(1, 0.01))
        .with_precision(precision, 1)
        .with_index(
            match std::env::var("STEP_BENCH_INDEX")
                .as_deref()
                .unwrap_or("fast")
            {
                "fast" => IndexKind::Fast,
                "compact" => IndexKind::Compact,
                other => panic!("STEP_BENCH_INDEX={other}: fast or compact"),
            },
        );
    let mut t = ShardedTable::new(config, BoxedOptimizer(opt)).unwrap();
    let id = |i: u64| mix(i ^ 0xBEEF);
    let mut next = 0u64;
    let mut bufs = Buffers::default();
    while next < rows {
        let ids: Vec<u64> = (next..(next + BATCH as u64).min(rows)).map(id).collect();
        next += ids.len() as u64;
        step(&mut t, &mut comm, &ids, &mut bufs);
    }
    let zipf = std::env::var("STEP_BENCH_ZIPF").is_ok_and(|v| v == "1");
    let growing = std::env::var("STEP_BENCH_NEW").map_or(true, |v| v != "0");
    let mut r = 12345u64;
    let mut medians = Vec::new();
    for _ in 0..5 {
        let mut times = Vec::new();
        for _ in 0..40 {
            let ids: Vec<u64> = (0..BATCH)
                .map(|k| {
                    r = mix(r);
                    if growing && k % 10 == 0 {
                        next += 1;
                        id(next - 1)
                    } else if zipf {
                        let u = (r >> 11) as f64 / (1u64 << 53) as f64;
                        let rank = (next as f64).powf(u) as u64 - 1;
                        id(rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % next)
                    } else {
                        id(r % next)
                    }
                })
                .collect();
            let t0 = Instant::now();
            step(&mut t, &mut comm, &ids, &mut bufs);
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        medians.push(times[times.len() / 2]);
    }
    let m = t.memory();
    let n = m.rows as f64;
    println!(
        "{precision} rows {}{}{} | step ms (median per round) {:?} | index {:.2} B/row, rows {:.1} B/row, state {:.2} B/row, scratch {:.0} KiB, process RSS {:.1} B/row | load {}",
        m.rows,
        if zipf { " (zipf)" } else { "" },
        if growing { "" } else { " (no new ids)" },
        medians
            .iter()
            .map(|x| (x * 100.0).round() / 100.0)
            .collect::<Vec<_>>(),
        m.index_bytes as f64 / n,
        m.row_bytes as f64 / n,
        m.state_bytes as f64 / n,
        m.scratch_bytes as f64 / 1024.0,
        rss() as f64 / n,
        load()
    );
}
