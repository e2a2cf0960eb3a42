//! The arithmetic of the rank-order all-reduce: how `n` elements are split
//! into `P` contiguous chunks, and the fixed-order sum of one chunk.
//!
//! Rank `j` owns chunk `j`; chunk sizes differ by at most one (the first
//! `n mod P` chunks get the extra element), so the work and the wire bytes
//! are balanced and the layout is a pure function of `(n, P)` that every rank
//! computes identically.

use comm_traits::CommError;

/// Counts and displacements (in elements) of the `p` chunks of `n` elements,
/// as MPI's `int` arrays.
///
/// # Errors
/// [`CommError::BadArgument`] if a count or displacement exceeds `i32::MAX`
/// (MPI's count type). Every rank computes the same layout from the agreed
/// `n`, so all ranks fail together.
pub(crate) fn chunks(n: usize, p: usize) -> Result<(Vec<i32>, Vec<i32>), CommError> {
    let p = p.max(1);
    let (base, extra) = (n / p, n % p);
    let counts: Vec<usize> = (0..p).map(|j| base + usize::from(j < extra)).collect();
    counts_displs(&counts)
}

/// MPI's `int` counts and displacements of chunks laid out back to back.
///
/// # Errors
/// [`CommError::BadArgument`] if a count or displacement exceeds `i32::MAX`.
pub(crate) fn counts_displs(counts: &[usize]) -> Result<(Vec<i32>, Vec<i32>), CommError> {
    let too_big = || CommError::BadArgument("buffer exceeds MPI's i32 element count");
    let mut out = Vec::with_capacity(counts.len());
    let mut displs = Vec::with_capacity(counts.len());
    let mut at = 0usize;
    for &c in counts {
        out.push(i32::try_from(c).map_err(|_| too_big())?);
        displs.push(i32::try_from(at).map_err(|_| too_big())?);
        at = at.checked_add(c).ok_or_else(too_big)?;
    }
    Ok((out, displs))
}

/// Sum `p` equal pieces laid out back to back in `pieces` (piece `i` came
/// from rank `i`) into `out`, in rank order: `((x₀ + x₁) + x₂) + …` — the
/// same order and the same first term as `LocalComm`, so the bits agree.
pub(crate) fn sum_in_rank_order(pieces: &[f32], out: &mut [f32]) {
    let len = out.len();
    if len == 0 {
        return;
    }
    let mut rows = pieces.chunks_exact(len);
    if let Some(first) = rows.next() {
        out.copy_from_slice(first);
    }
    for row in rows {
        for (acc, x) in out.iter_mut().zip(row) {
            *acc += *x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_buffer_once() {
        for n in [0usize, 1, 7, 8, 9, 100, 1001] {
            for p in 1..=8 {
                let (counts, displs) = chunks(n, p).unwrap();
                assert_eq!(counts.len(), p);
                let total: i64 = counts.iter().map(|&c| i64::from(c)).sum();
                assert_eq!(total as usize, n);
                for j in 1..p {
                    assert_eq!(displs[j], displs[j - 1] + counts[j - 1]);
                }
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(hi - lo <= 1);
            }
        }
    }

    #[test]
    fn huge_counts_are_an_error() {
        assert!(chunks(usize::MAX, 1).is_err());
    }

    #[test]
    fn rank_order_sum_matches_a_left_fold_bit_for_bit() {
        // Values chosen so that the association order changes the result.
        let pieces = [1.0e8f32, -1.0, 1.0, -1.0e8, 0.5, 3.0, -0.0, 2.0, 1.0];
        let mut out = [0.0f32; 3];
        sum_in_rank_order(&pieces, &mut out);
        for (k, got) in out.iter().enumerate() {
            let want = (pieces[k] + pieces[3 + k]) + pieces[6 + k];
            assert_eq!(got.to_bits(), want.to_bits());
        }
        // A single −0.0 piece stays −0.0 (no `0.0 +` in front).
        let mut one = [1.0f32];
        sum_in_rank_order(&[-0.0], &mut one);
        assert_eq!(one[0].to_bits(), (-0.0f32).to_bits());
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The rank-order sum equals a plain left fold over the ranks, bit
        /// for bit, for any values (NaN payloads aside, compared by bits).
        #[test]
        fn rank_order_sum_is_a_left_fold(
            p in 1usize..6,
            len in 0usize..20,
            seed in prop::collection::vec(any::<f32>(), 120),
        ) {
            let pieces: Vec<f32> = seed.iter().copied().cycle().take(p * len).collect();
            let mut got = vec![0.0f32; len];
            sum_in_rank_order(&pieces, &mut got);
            for k in 0..len {
                let mut want = pieces[k];
                for r in 1..p {
                    want += pieces[r * len + k];
                }
                prop_assert!(got[k].to_bits() == want.to_bits() || (got[k].is_nan() && want.is_nan()));
            }
        }

        /// Element `i` belongs to exactly one chunk, and chunk owners are in
        /// index order (the layout every rank derives from `(n, P)`).
        #[test]
        fn chunks_partition_in_order(n in 0usize..5000, p in 1usize..9) {
            let (counts, displs) = chunks(n, p).unwrap();
            let mut owner = vec![usize::MAX; n];
            for j in 0..p {
                let range = displs[j] as usize..(displs[j] + counts[j]) as usize;
                for slot in &mut owner[range] {
                    prop_assert_eq!(*slot, usize::MAX);
                    *slot = j;
                }
            }
            prop_assert!(owner.windows(2).all(|w| w[0] <= w[1]));
            prop_assert!(owner.iter().all(|&o| o < p));
        }
    }
}
