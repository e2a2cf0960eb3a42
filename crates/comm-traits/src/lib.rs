#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![no_std]
#![forbid(unsafe_code)]

// `Vec` for the owned buffers of non-blocking requests ([`nonblocking`])
// and the gathered values of [`sum_f64_in_rank_order`].
extern crate alloc;

use core::fmt;

pub mod nonblocking;
pub use nonblocking::{Completed, NonBlocking, Request};
mod scalar;
pub use scalar::sum_f64_in_rank_order;

/// Why a collective failed. Every variant is reported on every rank that can
/// observe it; none of them leaves a rank waiting forever.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommError {
    /// Ranks disagree on a size (buffer length, chunk size, element count).
    LengthMismatch {
        /// What this rank passed.
        local: u64,
        /// What another rank passed (or what the operation requires).
        remote: u64,
    },
    /// Ranks disagree on protocol metadata (step, dtype, operation kind, magic).
    HeaderMismatch {
        /// Which field disagreed.
        field: &'static str,
        /// This rank's value.
        local: u64,
        /// Another rank's value.
        remote: u64,
    },
    /// A buffer passed by this rank has the wrong size for the call
    /// (e.g. `recv.len() != size()·send.len()`); detected before any exchange.
    BadArgument(&'static str),
    /// Another rank failed, panicked, exited or dropped its communicator.
    PeerLost {
        /// The rank that went away, if known.
        rank: Option<usize>,
    },
    /// No progress within the backend's timeout.
    Timeout,
    /// The transport (e.g. MPI) reported an error; the code is backend-specific.
    Transport {
        /// Backend error code.
        code: i32,
    },
}

impl fmt::Display for CommError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LengthMismatch { local, remote } => {
                write!(
                    f,
                    "ranks disagree on a length: this rank {local}, another {remote}"
                )
            }
            Self::HeaderMismatch {
                field,
                local,
                remote,
            } => {
                write!(
                    f,
                    "ranks disagree on {field}: this rank {local}, another {remote}"
                )
            }
            Self::BadArgument(what) => write!(f, "bad collective argument: {what}"),
            Self::PeerLost { rank: Some(r) } => write!(f, "rank {r} failed or left the group"),
            Self::PeerLost { rank: None } => write!(f, "a peer rank failed or left the group"),
            Self::Timeout => write!(f, "collective timed out"),
            Self::Transport { code } => write!(f, "transport error (code {code})"),
        }
    }
}

impl core::error::Error for CommError {}

/// The collective operations, for byte accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Collective {
    /// Element-wise f32 sum (ring model).
    AllReduceSum,
    /// Personalised exchange of equal chunks.
    AllToAll,
    /// Every rank's buffer to every rank.
    AllGather,
    /// Synchronisation only.
    Barrier,
    /// One `u64` per rank pair ([`Communicator::all_to_all_counts`]).
    AllToAllCounts,
    /// Personalised exchange of variable-size chunks
    /// ([`Communicator::all_to_all_v`]); accounted with
    /// [`CommStats::record_all_to_all_v`], since sent ≠ received.
    AllToAllV,
}

/// Cumulative logical bytes this rank sent and received, and calls made.
/// See the crate docs for the per-collective formulas.
///
/// ```
/// use comm_traits::{Collective, CommStats};
///
/// let mut stats = CommStats::default();
/// // An all-reduce of 1000 f32 on 4 ranks: a ring's 2·3·⌈4000/4⌉ bytes.
/// stats.record(Collective::AllReduceSum, 4, 4000);
/// assert_eq!(stats.bytes_sent, 6000);
/// assert_eq!(stats.bytes_sent, CommStats::allreduce_f32_bytes(4, 1000));
/// let before = stats;
/// stats.record(Collective::AllGather, 4, 10); // 10 bytes to 3 others
/// assert_eq!(stats.since(&before).bytes_sent, 30);
/// assert_eq!(stats.calls, 2);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CommStats {
    /// Bytes this rank put on the wire.
    pub bytes_sent: u64,
    /// Bytes this rank took off the wire.
    pub bytes_received: u64,
    /// Number of collective calls that completed.
    pub calls: u64,
}

impl CommStats {
    /// Bytes per rank of a ring all-reduce of `n` f32 on `p` ranks:
    /// `2·(p−1)·⌈4n/p⌉` (reduce-scatter then all-gather).
    pub fn allreduce_f32_bytes(p: usize, n: usize) -> u64 {
        if p <= 1 {
            return 0;
        }
        let per_chunk = (4 * n as u64).div_ceil(p as u64);
        2 * (p as u64 - 1) * per_chunk
    }

    /// Account one completed collective on `p` ranks whose per-rank payload
    /// is `bytes` (f32 count × 4 for all-reduce, chunk for all-to-all, send
    /// length for all-gather).
    pub fn record(&mut self, op: Collective, p: usize, bytes: usize) {
        let others = p.saturating_sub(1) as u64;
        let b = match op {
            Collective::AllReduceSum => Self::allreduce_f32_bytes(p, bytes / 4),
            Collective::AllToAll | Collective::AllGather => others * bytes as u64,
            Collective::AllToAllCounts => others * 8,
            // Symmetric approximation; backends use `record_all_to_all_v`.
            Collective::AllToAllV => bytes as u64,
            Collective::Barrier => 0,
        };
        self.bytes_sent += b;
        self.bytes_received += b;
        self.calls += 1;
    }

    /// Account one completed [`Communicator::all_to_all_v`] on this rank:
    /// `sent` = bytes of the chunks for other ranks, `received` = bytes of
    /// the chunks from other ranks (the chunk a rank keeps crosses no wire).
    pub fn record_all_to_all_v(&mut self, sent: u64, received: u64) {
        self.bytes_sent += sent;
        self.bytes_received += received;
        self.calls += 1;
    }

    /// Difference `self − earlier` (bytes of the calls made in between).
    pub fn since(&self, earlier: &CommStats) -> CommStats {
        CommStats {
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            bytes_received: self.bytes_received - earlier.bytes_received,
            calls: self.calls - earlier.calls,
        }
    }
}

/// Totals over several ranks or runs: `a + b` adds each counter.
///
/// ```
/// use comm_traits::{Collective, CommStats};
///
/// let mut per_rank = [CommStats::default(); 3];
/// for s in &mut per_rank {
///     s.record(Collective::AllGather, 3, 10); // 10 bytes to 2 others
/// }
/// let total: CommStats = per_rank.iter().sum();
/// assert_eq!((total.bytes_sent, total.calls), (60, 3));
/// let mut acc = per_rank[0];
/// acc += per_rank[1];
/// assert_eq!(acc, per_rank[0] + per_rank[1]);
/// ```
impl core::ops::Add for CommStats {
    type Output = CommStats;
    fn add(self, other: CommStats) -> CommStats {
        CommStats {
            bytes_sent: self.bytes_sent + other.bytes_sent,
            bytes_received: self.bytes_received + other.bytes_received,
            calls: self.calls + other.calls,
        }
    }
}

impl core::ops::AddAssign for CommStats {
    fn add_assign(&mut self, other: CommStats) {
        *self = *self + other;
    }
}

impl core::iter::Sum for CommStats {
    fn sum<I: Iterator<Item = CommStats>>(iter: I) -> CommStats {
        iter.fold(CommStats::default(), |a, b| a + b)
    }
}

impl<'a> core::iter::Sum<&'a CommStats> for CommStats {
    fn sum<I: Iterator<Item = &'a CommStats>>(iter: I) -> CommStats {
        iter.copied().sum()
    }
}

/// Collective communication among `size()` ranks. Object-safe: algorithms take
/// `&mut dyn Communicator` (or a generic `C: Communicator + ?Sized`).
///
/// All methods are collective: every rank must call them in the same order.
///
/// # Example
///
/// Code written against `&mut dyn Communicator` runs on any backend: threads
/// in one process, MPI, or the one-rank [`SingleRank`] used here.
///
/// ```
/// use comm_traits::{CommError, Communicator, SingleRank};
///
/// /// Averages a gradient over the ranks (data parallelism).
/// fn average(comm: &mut dyn Communicator, grad: &mut [f32]) -> Result<(), CommError> {
///     comm.all_reduce_sum(grad)?;
///     let p = comm.size() as f32;
///     grad.iter_mut().for_each(|g| *g /= p);
///     Ok(())
/// }
///
/// let mut comm = SingleRank::default();
/// let mut grad = [1.0f32, 2.0, 3.0];
/// average(&mut comm, &mut grad)?;
/// assert_eq!(grad, [1.0, 2.0, 3.0]);
/// assert_eq!(comm.stats().calls, 1);
/// # Ok::<(), CommError>(())
/// ```
pub trait Communicator {
    /// This rank's index in `0..size()`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// Element-wise sum of `buf` over all ranks, in rank order, result on every rank.
    ///
    /// # Errors
    /// [`CommError::LengthMismatch`] if ranks pass different lengths; transport errors.
    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError>;

    /// Personalised exchange: `send` is `size()` chunks of `chunk` bytes, chunk
    /// `j` goes to rank `j`; `recv` (same size) receives chunk `i` from rank `i`.
    ///
    /// # Errors
    /// [`CommError::BadArgument`] if `send`/`recv` are not `size()·chunk` bytes;
    /// [`CommError::LengthMismatch`] if ranks disagree on `chunk`.
    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError>;

    /// Gather every rank's `send` (equal lengths) into `recv` in rank order.
    ///
    /// # Errors
    /// [`CommError::BadArgument`] if `recv.len() != size()·send.len()`;
    /// [`CommError::LengthMismatch`] if ranks disagree on the length.
    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError>;

    /// Exchange one `u64` per rank pair: `send[j]` goes to rank `j`,
    /// `recv[i]` arrives from rank `i` (`MPI_Alltoall` of one `u64`). The
    /// usual first half of an [`all_to_all_v`](Communicator::all_to_all_v):
    /// ranks tell each other how much they will send.
    ///
    /// # Errors
    /// [`CommError::BadArgument`] if `send` or `recv` does not hold `size()`
    /// values; [`CommError::LengthMismatch`] on the others then.
    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError>;

    /// Personalised exchange of variable-size chunks (`MPI_Alltoallv`):
    /// `send` is the concatenation of `size()` chunks, chunk `j`
    /// (`send_counts[j]` bytes) goes to rank `j`; `recv` receives chunk `i`
    /// from rank `i` at offset `sum(recv_counts[..i])`.
    ///
    /// Every rank checks every rank pair before any payload moves, so a
    /// disagreement is an error on every rank, never garbage or a hang.
    ///
    /// # Errors
    /// [`CommError::BadArgument`] on this rank if a counts slice does not
    /// have `size()` entries or its sum is not the matching buffer's length
    /// (the other ranks get [`CommError::LengthMismatch`]);
    /// [`CommError::LengthMismatch`] on every rank if some rank `j`
    /// expects `recv_counts[i]` bytes from rank `i` but rank `i` sends it
    /// another number.
    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError>;

    /// Wait until every rank arrives.
    ///
    /// # Errors
    /// [`CommError::PeerLost`] / [`CommError::Timeout`] / transport errors.
    fn barrier(&mut self) -> Result<(), CommError>;

    /// Bytes sent and received by this rank so far (see the crate docs).
    fn stats(&self) -> CommStats;
}

/// A group of one rank: every collective is the identity. Useful for
/// single-process training with the same code path as distributed runs.
///
/// ```
/// use comm_traits::{CommError, Communicator, SingleRank};
///
/// let mut comm = SingleRank::default();
/// let mut grad = [1.5f32, -2.0];
/// comm.all_reduce_sum(&mut grad)?; // the sum over one rank
/// assert_eq!((comm.rank(), comm.size(), grad), (0, 1, [1.5, -2.0]));
/// // Sizes are still checked, as on every implementation.
/// let mut recv = [0u8; 3];
/// assert!(matches!(comm.all_gather(&[1, 2], &mut recv), Err(CommError::BadArgument(_))));
/// # Ok::<(), CommError>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct SingleRank {
    stats: CommStats,
}

impl Communicator for SingleRank {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.stats
            .record(Collective::AllReduceSum, 1, buf.len() * 4);
        Ok(())
    }
    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError> {
        if send.len() != chunk || recv.len() != chunk {
            return Err(CommError::BadArgument(
                "all_to_all buffers must be size()*chunk bytes",
            ));
        }
        recv.copy_from_slice(send);
        self.stats.record(Collective::AllToAll, 1, chunk);
        Ok(())
    }
    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        if recv.len() != send.len() {
            return Err(CommError::BadArgument(
                "all_gather recv must be size()*send.len() bytes",
            ));
        }
        recv.copy_from_slice(send);
        self.stats.record(Collective::AllGather, 1, send.len());
        Ok(())
    }
    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError> {
        if send.len() != 1 || recv.len() != 1 {
            return Err(CommError::BadArgument(COUNTS_LEN));
        }
        recv.copy_from_slice(send);
        self.stats.record(Collective::AllToAllCounts, 1, 8);
        Ok(())
    }
    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        if !counts_fit(1, send_counts, send.len()) || !counts_fit(1, recv_counts, recv.len()) {
            return Err(CommError::BadArgument(V_COUNTS));
        }
        if send_counts != recv_counts {
            return Err(CommError::LengthMismatch {
                local: recv_counts[0] as u64,
                remote: send_counts[0] as u64,
            });
        }
        recv.copy_from_slice(send);
        self.stats.record_all_to_all_v(0, 0);
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        self.stats.record(Collective::Barrier, 1, 0);
        Ok(())
    }
    fn stats(&self) -> CommStats {
        self.stats
    }
}

/// The [`CommError::BadArgument`] text of a wrong-length
/// [`Communicator::all_to_all_counts`] buffer (the same on every backend).
pub const COUNTS_LEN: &str = "all_to_all_counts buffers must hold size() values";

/// The [`CommError::BadArgument`] text of inconsistent
/// [`Communicator::all_to_all_v`] counts (the same on every backend).
pub const V_COUNTS: &str =
    "all_to_all_v counts must have size() entries summing to the buffer length";

/// Whether `counts` has `p` entries whose sum is `len` (without overflow).
pub fn counts_fit(p: usize, counts: &[usize], len: usize) -> bool {
    counts.len() == p && counts.iter().try_fold(0usize, |acc, &c| acc.checked_add(c)) == Some(len)
}

/// The verdict every backend reaches on an [`Communicator::all_to_all_v`]
/// call, from rank `me`'s point of view, given every rank's arguments:
/// `fits(i)` whether rank `i`'s counts fit its buffers ([`counts_fit`]),
/// `sends(i, j)` what rank `i` sends to rank `j`, `expects(j, i)` what rank
/// `j` expects from rank `i`. All ranks see the same table, so they all
/// accept or all refuse.
///
/// # Errors
/// [`CommError::BadArgument`] ([`V_COUNTS`]) if `me` itself does not fit;
/// [`CommError::LengthMismatch`] if another rank does not fit (its two
/// buffer sums as `local`/`remote` is meaningless, so both are that rank's
/// send count to `me`) or any pair disagrees (`local` = what the receiver
/// expects, `remote` = what the sender sends; the first such pair in
/// receiver-major order).
pub fn check_all_to_all_v(
    me: usize,
    p: usize,
    fits: &dyn Fn(usize) -> bool,
    sends: &dyn Fn(usize, usize) -> u64,
    expects: &dyn Fn(usize, usize) -> u64,
) -> Result<(), CommError> {
    if !fits(me) {
        return Err(CommError::BadArgument(V_COUNTS));
    }
    for i in 0..p {
        if !fits(i) {
            let c = sends(i, me);
            return Err(CommError::LengthMismatch {
                local: expects(me, i),
                remote: c,
            });
        }
    }
    // This rank's own pairs first, so its message names what it was sent.
    for i in 0..p {
        if sends(i, me) != expects(me, i) {
            return Err(CommError::LengthMismatch {
                local: expects(me, i),
                remote: sends(i, me),
            });
        }
    }
    for j in 0..p {
        for i in 0..p {
            if sends(i, j) != expects(j, i) {
                return Err(CommError::LengthMismatch {
                    local: expects(j, i),
                    remote: sends(i, j),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_allreduce_bytes() {
        assert_eq!(CommStats::allreduce_f32_bytes(1, 1000), 0);
        assert_eq!(CommStats::allreduce_f32_bytes(2, 1000), 4000);
        // 4·10 = 40 bytes over 3 ranks → chunks of 14 bytes, 2·2·14.
        assert_eq!(CommStats::allreduce_f32_bytes(3, 10), 56);
    }

    #[test]
    fn stats_add_sum_and_add_assign_agree_with_field_sums() {
        let parts = [
            CommStats {
                bytes_sent: 1,
                bytes_received: 20,
                calls: 300,
            },
            CommStats {
                bytes_sent: 4000,
                bytes_received: 50_000,
                calls: 6,
            },
            CommStats {
                bytes_sent: 70,
                bytes_received: 8,
                calls: 90_000,
            },
        ];
        let want = CommStats {
            bytes_sent: 4071,
            bytes_received: 50_028,
            calls: 90_306,
        };
        assert_eq!(parts[0] + parts[1] + parts[2], want);
        assert_eq!(parts.iter().sum::<CommStats>(), want);
        assert_eq!(parts.into_iter().sum::<CommStats>(), want);
        let mut acc = CommStats::default();
        for p in parts {
            acc += p;
        }
        assert_eq!(acc, want);
        // `since` undoes `+`, and the empty sum is zero.
        assert_eq!((want + parts[1]).since(&parts[1]), want);
        assert_eq!(
            core::iter::empty::<CommStats>().sum::<CommStats>(),
            CommStats::default()
        );
    }

    #[test]
    fn single_rank_is_identity_and_checks_sizes() {
        let mut c = SingleRank::default();
        let dyn_c: &mut dyn Communicator = &mut c;
        let mut buf = [1.0f32, 2.0];
        dyn_c.all_reduce_sum(&mut buf).unwrap();
        assert_eq!(buf, [1.0, 2.0]);
        let mut out = [0u8; 3];
        dyn_c.all_gather(&[1, 2, 3], &mut out).unwrap();
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(
            dyn_c.all_to_all(&[1, 2], 1, &mut [0u8; 2]),
            Err(CommError::BadArgument(
                "all_to_all buffers must be size()*chunk bytes"
            ))
        );
        assert_eq!(dyn_c.stats().calls, 2);
    }
}
