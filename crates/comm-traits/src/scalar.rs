//! Exact scalar reductions over any [`Communicator`]: an `f64` summed over
//! the ranks in rank order.
//!
//! Why not [`Communicator::all_reduce_sum`]: it sums `f32`, so a training
//! loop that reports a loss accumulated in `f64` (as a single process does)
//! would round it to 24 bits on the ranks, and a one-rank run would no longer
//! equal the single process bit for bit. Here every rank all-gathers the
//! other ranks' 8-byte values and adds them in rank order itself: the result
//! is the same on every rank and on every backend, and at one rank it is the
//! value itself.

use crate::{CommError, Communicator};
use alloc::vec;

/// `Σ x` over the ranks as `f64`, added in rank order (rank 0's value
/// first) on every rank, so every rank (and every backend) gets the same
/// bits; at one rank the result is `x` exactly. Costs one
/// [`Communicator::all_gather`] of 8 bytes per rank.
///
/// ```
/// use comm_traits::{sum_f64_in_rank_order, CommError, SingleRank};
///
/// let loss = 0.1_f64 + 0.2; // not representable as f32
/// assert_eq!(sum_f64_in_rank_order(&mut SingleRank::default(), loss)?, loss);
/// # Ok::<(), CommError>(())
/// ```
///
/// # Errors
/// Whatever the all-gather returns (a lost peer, a timeout, ranks that
/// called different collectives).
pub fn sum_f64_in_rank_order<C: Communicator + ?Sized>(
    comm: &mut C,
    x: f64,
) -> Result<f64, CommError> {
    let mut all = vec![0u8; 8 * comm.size()];
    comm.all_gather(&x.to_le_bytes(), &mut all)?;
    let mut values = all
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]));
    // The first value starts the sum (not 0.0): one rank returns `x` itself,
    // even -0.0.
    let first = values.next().unwrap_or(0.0);
    Ok(values.fold(first, |acc, v| acc + v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CommStats, SingleRank};
    use alloc::vec::Vec;

    /// Rank `me` of a group whose ranks hold `values`: the all-gather
    /// returns them all (the only collective the sum calls).
    struct Peers {
        me: usize,
        values: Vec<f64>,
    }

    impl Communicator for Peers {
        fn rank(&self) -> usize {
            self.me
        }
        fn size(&self) -> usize {
            self.values.len()
        }
        fn all_reduce_sum(&mut self, _: &mut [f32]) -> Result<(), CommError> {
            Err(CommError::BadArgument("not used by the sum"))
        }
        fn all_to_all(&mut self, _: &[u8], _: usize, _: &mut [u8]) -> Result<(), CommError> {
            Err(CommError::BadArgument("not used by the sum"))
        }
        fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
            assert_eq!(send, self.values[self.me].to_le_bytes());
            for (chunk, v) in recv.chunks_exact_mut(8).zip(&self.values) {
                chunk.copy_from_slice(&v.to_le_bytes());
            }
            Ok(())
        }
        fn all_to_all_counts(&mut self, _: &[u64], _: &mut [u64]) -> Result<(), CommError> {
            Err(CommError::BadArgument("not used by the sum"))
        }
        fn all_to_all_v(
            &mut self,
            _: &[u8],
            _: &[usize],
            _: &mut [u8],
            _: &[usize],
        ) -> Result<(), CommError> {
            Err(CommError::BadArgument("not used by the sum"))
        }
        fn barrier(&mut self) -> Result<(), CommError> {
            Err(CommError::BadArgument("not used by the sum"))
        }
        fn stats(&self) -> CommStats {
            CommStats::default()
        }
    }

    #[test]
    fn one_rank_returns_the_value_bit_for_bit() {
        for x in [0.1 + 0.2, -0.0, 1e-310, f64::MAX, 123_456.789_012_345_67] {
            let got = sum_f64_in_rank_order(&mut SingleRank::default(), x).unwrap();
            assert_eq!(got.to_bits(), x.to_bits());
        }
        let got = sum_f64_in_rank_order(&mut SingleRank::default(), f64::NAN).unwrap();
        assert!(got.is_nan());
    }

    #[test]
    fn every_rank_adds_in_rank_order_in_f64() {
        // Values whose f32 sum and whose reordered f64 sums differ.
        let values: Vec<f64> = vec![1e16, 1.0, -1e16, 0.1 + 0.2];
        let want: f64 = ((1e16 + 1.0) + -1e16) + (0.1 + 0.2);
        for me in 0..values.len() {
            let mut comm = Peers {
                me,
                values: values.clone(),
            };
            let got = sum_f64_in_rank_order(&mut comm, values[me]).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "rank {me}");
        }
        let f32_sum: f32 = values.iter().map(|&v| v as f32).sum();
        assert_ne!(f64::from(f32_sum).to_bits(), want.to_bits());
    }
}
