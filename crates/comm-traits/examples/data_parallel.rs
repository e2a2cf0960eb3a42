//! A data-parallel step written once against `dyn Communicator`: average the
//! gradients over ranks, all-gather a per-rank count, and read the byte
//! accounting. Run here on [`SingleRank`]; the same function runs unchanged
//! on `basis-std`'s `LocalComm` (threads) or `comm-mpi`'s `MpiComm`.
//!
//! Run with `cargo run -p basisopt-comm-traits --example data_parallel`
//! (`cargo test --examples` runs it as a test too).

use comm_traits::{CommError, Communicator, SingleRank};

/// Replace `grads` by their mean over all ranks; return every rank's number
/// of local examples (gathered as little-endian `u32`s).
fn average(
    comm: &mut dyn Communicator,
    grads: &mut [f32],
    examples: u32,
) -> Result<Vec<u32>, CommError> {
    comm.all_reduce_sum(grads)?;
    let p = comm.size() as f32;
    for g in grads.iter_mut() {
        *g /= p;
    }
    let mut all = vec![0u8; 4 * comm.size()];
    comm.all_gather(&examples.to_le_bytes(), &mut all)?;
    Ok(all
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn run() -> Result<(), CommError> {
    let mut comm = SingleRank::default();
    let mut grads = vec![0.5f32, -1.0, 2.0];
    let counts = average(&mut comm, &mut grads, 32)?;
    assert_eq!((grads, counts), (vec![0.5, -1.0, 2.0], vec![32]));
    // Buffers of the wrong size are typed errors on every implementation.
    let mut short = [0u8; 1];
    assert!(matches!(
        comm.all_gather(&[1, 2], &mut short),
        Err(CommError::BadArgument(_))
    ));
    let stats = comm.stats();
    // Two collectives completed; the refused one is not counted. One rank
    // sends nothing.
    assert_eq!((stats.calls, stats.bytes_sent), (2, 0));
    println!(
        "rank {} of {}: {} collectives, {} bytes sent",
        comm.rank(),
        comm.size(),
        stats.calls,
        stats.bytes_sent
    );
    Ok(())
}

fn main() -> Result<(), CommError> {
    run()
}

#[test]
fn example_runs() {
    run().unwrap();
}
