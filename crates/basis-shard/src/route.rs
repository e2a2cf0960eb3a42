//! Moving ids and rows between ranks: the `all_to_all_v` exchanges of a step
//! (ids to owners, rows back, gradients to owners) in a fixed order, so every
//! backend delivers the same bytes.

use alloc::vec;
use alloc::vec::Vec;
use comm_traits::{CommError, Communicator};

use crate::OwnerRule;

/// What a rank asked of the owners: its sorted unique ids, and the same ids
/// grouped by owner (rank order, sorted within each).
#[derive(Debug, Default, Clone)]
pub(crate) struct Request {
    /// Sorted unique ids this rank needs.
    pub(crate) uniq: Vec<u64>,
    /// The ids in send order (owner 0's first).
    pub(crate) sent: Vec<u64>,
    /// Ids sent to each owner.
    pub(crate) per_owner: Vec<usize>,
    /// Ids received from each rank (this rank as owner).
    pub(crate) per_rank: Vec<usize>,
    /// The ids received, in rank order.
    pub(crate) received: Vec<u64>,
}

fn to_bytes<T: Copy, const N: usize>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    xs.iter().flat_map(|&x| f(x)).collect()
}

fn scaled(counts: &[usize], unit: usize) -> Vec<usize> {
    counts.iter().map(|&c| c * unit).collect()
}

/// Exchange `f32` payloads of `unit` values per item over `comm`'s
/// `all_to_all_v`: `send` in the order `send_counts` describes (items for
/// rank 0 first), received in the order of `recv_counts`. Little-endian on
/// the wire, so MPI and in-process ranks deliver the same bits.
///
/// # Errors
/// What `all_to_all_v` returns (a lost peer, mismatched counts).
pub fn exchange_f32(
    comm: &mut dyn Communicator,
    send: &[f32],
    send_counts: &[usize],
    recv_counts: &[usize],
    unit: usize,
) -> Result<Vec<f32>, CommError> {
    let bytes = to_bytes(send, f32::to_le_bytes);
    let rc = scaled(recv_counts, 4 * unit);
    let mut recv = vec![0u8; rc.iter().sum()];
    comm.all_to_all_v(&bytes, &scaled(send_counts, 4 * unit), &mut recv, &rc)?;
    Ok(recv
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// Send the unique ids of `wanted` to their owners (counts first, then the
/// ids): after this every rank knows what it must serve and to whom.
pub(crate) fn request(
    comm: &mut dyn Communicator,
    owner: &OwnerRule,
    mut wanted: Vec<u64>,
) -> Result<Request, CommError> {
    let p = comm.size();
    wanted.sort_unstable();
    wanted.dedup();
    let mut groups: Vec<Vec<u64>> = vec![Vec::new(); p];
    for &id in &wanted {
        groups[owner.owner(id) % p].push(id);
    }
    let per_owner: Vec<usize> = groups.iter().map(Vec::len).collect();
    let sent: Vec<u64> = groups.concat();
    let mut counts = vec![0u64; p];
    let mine: Vec<u64> = per_owner.iter().map(|&c| c as u64).collect();
    comm.all_to_all_counts(&mine, &mut counts)?;
    let per_rank: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
    let bytes = to_bytes(&sent, u64::to_le_bytes);
    let rc = scaled(&per_rank, 8);
    let mut recv = vec![0u8; rc.iter().sum()];
    comm.all_to_all_v(&bytes, &scaled(&per_owner, 8), &mut recv, &rc)?;
    let received = recv
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        .collect();
    Ok(Request {
        uniq: wanted,
        sent,
        per_owner,
        per_rank,
        received,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use basis_std::local::LocalComm;

    #[test]
    fn owners_receive_exactly_the_ids_they_own() {
        let p = 3;
        let owner = OwnerRule::hashed(p, 1).unwrap();
        let out = LocalComm::run(p, |mut c| {
            let r = c.rank() as u64;
            let wanted: Vec<u64> = (0..50).map(|k| (k * 7 + r * 3) % 40).collect();
            let req = request(&mut c, &owner, wanted).unwrap();
            (req.uniq, req.received)
        });
        let out: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
        for (me, (_, received)) in out.iter().enumerate() {
            // Reference: every rank's unique ids owned by `me`, in rank order.
            let want: Vec<u64> = out
                .iter()
                .flat_map(|(uniq, _)| uniq.iter().copied().filter(|&id| owner.owner(id) == me))
                .collect();
            assert_eq!(received, &want);
        }
    }
}
