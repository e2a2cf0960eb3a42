//! An unbounded id stream on a sharded table (two ranks over `LocalComm`):
//! every step brings ids never seen before next to a hot set. Min-count
//! admission keeps one-off ids out of the table (their gradients are
//! dropped), and eviction (a TTL plus a capacity bound) frees rows and
//! their Adam state, so the memory of each rank stops growing. Prints, every
//! 100 steps, the rows held, rows evicted, gradients dropped and the bytes
//! per part. `cargo run --release -p basisopt-shard --example
//! streaming_local`.

use basis_core::{AdamConfig, ExactAdam, RowIndex};
use basis_shard::{Admission, Eviction, OwnerRule, RowInit, ShardError, ShardedTable, TableConfig};
use basis_std::local::LocalComm;
use comm_traits::Communicator;
use std::process::ExitCode;

const DIM: usize = 16;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Rank `r`'s ids at `step`: 200 fresh ids, 100 drawn from a slowly
/// drifting window of recent ones (seen again: admitted), 50 hot ids.
fn ids(step: u64, r: usize) -> Vec<u64> {
    let fresh = (0..200).map(|k| mix(step << 24 | (r as u64) << 16 | k));
    let recent = (0..100).map(|k| {
        let back = mix(step ^ k << 8 ^ (r as u64) << 40) % 20;
        let s = step.saturating_sub(back);
        mix(s << 24 | (r as u64) << 16 | (k % 200))
    });
    fresh.chain(recent).chain(0..50).collect()
}

fn run(comm: &mut dyn Communicator, steps: u64) -> Result<String, ShardError> {
    let rank = comm.rank();
    let owner = OwnerRule::hashed(comm.size(), 1)?;
    let adam = ExactAdam::new(
        AdamConfig::default()
            .with_dim(DIM)
            .with_row_index(RowIndex::Dense { rows: 0 }),
    )
    .map_err(|_| ShardError::BadConfig("Adam configuration"))?;
    let config = TableConfig::new(DIM, owner, rank)
        .with_init(RowInit::uniform(1, 0.05))
        // Halving the sketch every 50 steps keeps its false admissions
        // from growing with the stream.
        .with_admission(Admission::MinCount {
            min_count: 2,
            width: 1 << 16,
            depth: 3,
            decay_every: 50,
        })
        .with_eviction(Eviction::ttl(20).with_capacity(20_000).with_sweep_every(10));
    let mut table = ShardedTable::new(config, adam)?;
    let mut out = String::new();
    for step in 0..steps {
        let batch = table.lookup(comm, &ids(step, rank))?;
        let grads = vec![0.01f32; batch.rows.len()];
        table.apply(comm, &batch, &grads)?;
        if (step + 1) % 100 == 0 && rank == 0 {
            let m = table.memory();
            let s = table.stats();
            out.push_str(&format!(
                "step {:4}: rows {:6}, evicted {:7}, dropped {:7} | index {:7} B, rows {:8} B, Adam state {:8} B, bookkeeping {:6} B\n",
                step + 1,
                table.len(),
                s.rows_evicted,
                s.grads_dropped,
                m.index_bytes,
                m.row_bytes,
                m.state_bytes,
                m.bookkeeping_bytes
            ));
        }
    }
    Ok(out)
}

fn main() -> ExitCode {
    let results = LocalComm::run(2, |mut comm| run(&mut comm, 1000));
    for r in results {
        match r {
            Ok(Ok(text)) => print!("{text}"),
            Ok(Err(e)) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{e:?}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
