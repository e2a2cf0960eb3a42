//! Moving ids and rows between ranks: the `all_to_all_v` exchanges of a step
//! (ids to owners, rows back, gradients to owners) in a fixed order, so every
//! backend delivers the same bytes.

use alloc::vec;
use alloc::vec::Vec;
use comm_traits::{CommError, Communicator};
use core::mem::size_of;

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

/// Byte buffers of the exchanges, kept across steps: a step's exchanges
/// move ~1 MB each way at 8192 ids × 32 floats, and fresh buffers of that
/// size come from a fresh `mmap` (and its page faults) every step. Cleared,
/// never shrunk: their capacity is the largest step's.
#[derive(Debug, Default, Clone)]
pub(crate) struct Wire {
    send: Vec<u8>,
    recv: Vec<u8>,
    send_counts: Vec<usize>,
    recv_counts: Vec<usize>,
    /// Owner of each unique id (`request`'s grouping).
    owners: Vec<usize>,
    /// Write position per owner (`request`'s grouping).
    at: Vec<usize>,
    /// Ids this rank sends to each owner, and receives from each rank.
    mine: Vec<u64>,
    counts: Vec<u64>,
}

impl Wire {
    /// Bytes held (capacity).
    pub(crate) fn bytes(&self) -> usize {
        self.send.capacity()
            + self.recv.capacity()
            + (self.send_counts.capacity()
                + self.recv_counts.capacity()
                + self.owners.capacity()
                + self.at.capacity())
                * size_of::<usize>()
            + (self.mine.capacity() + self.counts.capacity()) * 8
    }
}

impl Request {
    /// Bytes held (capacity).
    pub(crate) fn bytes(&self) -> usize {
        (self.uniq.capacity() + self.sent.capacity() + self.received.capacity()) * 8
            + (self.per_owner.capacity() + self.per_rank.capacity()) * size_of::<usize>()
    }
}

fn scaled_into(out: &mut Vec<usize>, counts: &[usize], unit: usize) {
    out.clear();
    out.extend(counts.iter().map(|&c| c * unit));
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
    let mut out = Vec::new();
    exchange_f32_into(
        comm,
        &mut Wire::default(),
        send,
        send_counts,
        recv_counts,
        unit,
        &mut out,
    )?;
    Ok(out)
}

/// Every rank's `(id, row)` list on every rank, concatenated in rank order
/// into `out_ids` and `out_rows` (cleared first): the sparse exchange of
/// replicated (data-parallel) training, where every rank then steps the
/// same rows. `rows` holds `d` values per id. Two `all_gather`s: the
/// counts, then the lists padded to the longest; little-endian on the
/// wire, so MPI and in-process ranks deliver the same bits.
///
/// # Errors
/// [`CommError::BadArgument`] when `rows` is not `ids.len() × d` values;
/// what `all_gather` returns (a lost peer).
pub fn all_gather_rows(
    comm: &mut dyn Communicator,
    (ids, rows, d): (&[u64], &[f32], usize),
    out_ids: &mut Vec<u64>,
    out_rows: &mut Vec<f32>,
) -> Result<(), CommError> {
    if Some(rows.len()) != ids.len().checked_mul(d) {
        return Err(CommError::BadArgument("rows must hold d values per id"));
    }
    let p = comm.size();
    let mut counts = vec![0u8; 8 * p];
    comm.all_gather(&(ids.len() as u64).to_le_bytes(), &mut counts)?;
    let counts: Vec<usize> = counts
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as usize)
        .collect();
    let max = counts.iter().copied().max().unwrap_or(0);
    let row_bytes = 8 + 4 * d;
    let mut send = vec![0u8; max * row_bytes];
    for ((rec, &id), row) in send
        .chunks_exact_mut(row_bytes)
        .zip(ids)
        .zip(rows.chunks(d.max(1)))
    {
        rec[..8].copy_from_slice(&id.to_le_bytes());
        for (b, g) in rec[8..].chunks_exact_mut(4).zip(row) {
            b.copy_from_slice(&g.to_le_bytes());
        }
    }
    let mut recv = vec![0u8; max * row_bytes * p];
    comm.all_gather(&send, &mut recv)?;
    out_ids.clear();
    out_rows.clear();
    for (r, &c) in counts.iter().enumerate() {
        for rec in recv[r * max * row_bytes..].chunks_exact(row_bytes).take(c) {
            out_ids.push(u64::from_le_bytes(rec[..8].try_into().unwrap_or([0; 8])));
            out_rows.extend(
                rec[8..]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
    }
    Ok(())
}

/// [`exchange_f32`] into `out` (cleared first), through `wire`'s buffers.
pub(crate) fn exchange_f32_into(
    comm: &mut dyn Communicator,
    wire: &mut Wire,
    send: &[f32],
    send_counts: &[usize],
    recv_counts: &[usize],
    unit: usize,
    out: &mut Vec<f32>,
) -> Result<(), CommError> {
    wire.send.clear();
    wire.send.extend(send.iter().flat_map(|x| x.to_le_bytes()));
    scaled_into(&mut wire.send_counts, send_counts, 4 * unit);
    scaled_into(&mut wire.recv_counts, recv_counts, 4 * unit);
    wire.recv.clear();
    wire.recv.resize(wire.recv_counts.iter().sum(), 0);
    comm.all_to_all_v(
        &wire.send,
        &wire.send_counts,
        &mut wire.recv,
        &wire.recv_counts,
    )?;
    out.clear();
    out.extend(
        wire.recv
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    );
    Ok(())
}

/// Send the unique ids of `wanted` to their owners (counts first, then the
/// ids): after this every rank knows what it must serve and to whom.
/// Fills `req` in place (its buffers reused), through `wire`'s buffers.
pub(crate) fn request(
    comm: &mut dyn Communicator,
    owner: &OwnerRule,
    wanted: &[u64],
    wire: &mut Wire,
    req: &mut Request,
) -> Result<(), CommError> {
    let p = comm.size();
    req.uniq.clear();
    req.uniq.extend_from_slice(wanted);
    req.uniq.sort_unstable();
    req.uniq.dedup();
    // Group by owner with a stable counting sort: rank order, and each
    // owner's ids stay sorted.
    wire.owners.clear();
    wire.owners
        .extend(req.uniq.iter().map(|&id| owner.owner(id) % p));
    req.per_owner.clear();
    req.per_owner.resize(p, 0);
    for &o in &wire.owners {
        req.per_owner[o] += 1;
    }
    wire.at.clear();
    let mut acc = 0;
    wire.at.extend(req.per_owner.iter().map(|&c| {
        acc += c;
        acc - c
    }));
    req.sent.clear();
    req.sent.resize(req.uniq.len(), 0);
    for (&id, &o) in req.uniq.iter().zip(&wire.owners) {
        req.sent[wire.at[o]] = id;
        wire.at[o] += 1;
    }
    wire.counts.clear();
    wire.counts.resize(p, 0);
    wire.mine.clear();
    wire.mine.extend(req.per_owner.iter().map(|&c| c as u64));
    comm.all_to_all_counts(&wire.mine, &mut wire.counts)?;
    req.per_rank.clear();
    req.per_rank.extend(wire.counts.iter().map(|&c| c as usize));
    wire.send.clear();
    wire.send
        .extend(req.sent.iter().flat_map(|x| x.to_le_bytes()));
    scaled_into(&mut wire.send_counts, &req.per_owner, 8);
    scaled_into(&mut wire.recv_counts, &req.per_rank, 8);
    wire.recv.clear();
    wire.recv.resize(wire.recv_counts.iter().sum(), 0);
    comm.all_to_all_v(
        &wire.send,
        &wire.send_counts,
        &mut wire.recv,
        &wire.recv_counts,
    )?;
    req.received.clear();
    req.received.extend(
        wire.recv
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use basis_std::local::LocalComm;

    /// Every rank gets the concatenation of every rank's list in rank
    /// order (lists of different lengths, one empty), bit for bit; a
    /// row list of the wrong length is refused.
    #[test]
    fn all_gather_rows_concatenates_every_ranks_list() {
        let (p, d) = (3, 2);
        let list = |r: usize| -> (Vec<u64>, Vec<f32>) {
            let n = [4, 0, 2][r];
            let ids = (0..n).map(|k| (r * 100 + k) as u64).collect();
            let rows = (0..n * d).map(|k| -(k as f32) / 3.0 + r as f32).collect();
            (ids, rows)
        };
        let out = LocalComm::run(p, |mut c| {
            let (ids, rows) = list(c.rank());
            let (mut got_ids, mut got_rows) = (vec![7], vec![7.0]);
            all_gather_rows(&mut c, (&ids, &rows, d), &mut got_ids, &mut got_rows).unwrap();
            (got_ids, got_rows)
        });
        let (want_ids, want_rows): (Vec<u64>, Vec<f32>) =
            (0..p).fold((Vec::new(), Vec::new()), |(mut i, mut r), k| {
                let (a, b) = list(k);
                i.extend(a);
                r.extend(b);
                (i, r)
            });
        assert_eq!(want_ids.len(), 6);
        for got in out {
            let (ids, rows) = got.unwrap();
            assert_eq!(ids, want_ids);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&rows), bits(&want_rows));
        }
        let mut one = comm_traits::SingleRank::default();
        let e = all_gather_rows(&mut one, (&[1, 2], &[0.5; 3], 2), &mut vec![], &mut vec![]);
        assert!(matches!(e, Err(CommError::BadArgument(_))));
    }

    #[test]
    fn owners_receive_exactly_the_ids_they_own() {
        let p = 3;
        let owner = OwnerRule::hashed(p, 1).unwrap();
        let out = LocalComm::run(p, |mut c| {
            let r = c.rank() as u64;
            let wanted: Vec<u64> = (0..50).map(|k| (k * 7 + r * 3) % 40).collect();
            let mut req = Request::default();
            request(&mut c, &owner, &wanted, &mut Wire::default(), &mut req).unwrap();
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
