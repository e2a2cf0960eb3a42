//! Compressed all-reduce across threads, end to end and copy-ready: four
//! ranks (threads, through `basis-std`'s `LocalComm`) average a 1M-element
//! gradient for ten steps while sending about one bit per element, with
//! error feedback carrying what each step's compression dropped into the
//! next. Prints the bytes sent against an `f32` all-reduce and the error of
//! the running mean against the exact one.
//!
//! `cargo run --release -p basisopt-onebit-adam --example allreduce_threads`

use basis_std::local::LocalComm;
use comm_traits::{CommStats, Communicator};
use onebit_adam::{AllReduceState, compressed_allreduce};

const RANKS: usize = 4;
const LEN: usize = 1 << 20;
const STEPS: usize = 10;

/// Rank `r`'s gradient at step `t` (deterministic, different per rank).
fn gradient(rank: usize, t: usize) -> Vec<f32> {
    (0..LEN)
        .map(|i| (((i * 31 + rank * 7 + t * 3) % 97) as f32 - 48.0) / 48.0)
        .collect()
}

fn main() {
    let results = LocalComm::run(RANKS, |mut comm| {
        let rank = comm.rank();
        // One state per buffer: the worker and server error-feedback buffers.
        let mut state = AllReduceState::new();
        let mut sum_compressed = vec![0.0f64; LEN];
        let mut sum_exact = vec![0.0f64; LEN];
        let mut bytes = 0u64;
        for t in 0..STEPS {
            let mut buf = gradient(rank, t);
            let report = compressed_allreduce(&mut comm, &mut buf, &mut state)?;
            bytes += report.bytes.bytes_sent;
            for (i, v) in buf.iter().enumerate() {
                sum_compressed[i] += f64::from(*v);
            }
            for r in 0..RANKS {
                for (i, v) in gradient(r, t).iter().enumerate() {
                    sum_exact[i] += f64::from(*v) / RANKS as f64;
                }
            }
        }
        // Error feedback: the sum over steps stays close to the exact sum.
        let err = sum_compressed
            .iter()
            .zip(&sum_exact)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f64, f64::max)
            / STEPS as f64;
        Ok::<_, onebit_adam::OneBitError>((bytes, err))
    });
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(Ok((bytes, err))) => {
                let f32_bytes = CommStats::allreduce_f32_bytes(RANKS, LEN) * STEPS as u64;
                println!(
                    "rank {rank}: sent {bytes} bytes ({:.1}x less than f32), \
                     max |mean error| per step {err:.4}",
                    f32_bytes as f64 / bytes as f64
                );
            }
            Ok(Err(e)) => eprintln!("rank {rank}: {e}"),
            Err(_) => eprintln!("rank {rank} panicked"),
        }
    }
}
