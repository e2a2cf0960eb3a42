#![doc = include_str!("../README.md")]
// docs.rs (nightly) marks feature-gated items; see `[package.metadata.docs.rs]`.
#![cfg_attr(basis_doc_cfg, feature(doc_cfg))]
#![forbid(unsafe_code)]
// Without the `mpi` feature (a documentation build on a machine without MPI)
// only the MPI-free items exist, and the front page's links to the rest dangle.
#![cfg_attr(not(feature = "mpi"), allow(rustdoc::broken_intra_doc_links))]
#![cfg_attr(
    not(feature = "mpi"),
    doc = "\n\n**This build has no `mpi` feature**: [`MpiComm`] and the \
           re-exported `mpi` crate need it (on by default) and are left out; \
           only the MPI-free types are documented."
)]

#[cfg(feature = "mpi")]
mod agree;
#[cfg(feature = "mpi")]
mod split;

use core::fmt;

#[cfg(feature = "mpi")]
use comm_traits::{Collective, CommError, CommStats, Communicator};
#[cfg(feature = "mpi")]
use mpi::collective::SystemOperation;
#[cfg(feature = "mpi")]
use mpi::datatype::{Partition, PartitionMut};
#[cfg(feature = "mpi")]
use mpi::environment::Universe;
#[cfg(feature = "mpi")]
use mpi::topology::SimpleCommunicator;
// rsmpi's traits are imported anonymously: their names clash with ours.
#[cfg(feature = "mpi")]
use mpi::traits::{Communicator as _, CommunicatorCollectives as _};

pub use comm_traits;
#[cfg(feature = "mpi")]
#[cfg_attr(basis_doc_cfg, doc(cfg(feature = "mpi")))]
/// The `mpi` crate (rsmpi) this backend is built on, for creating
/// sub-communicators and the like without pinning a second version.
pub use mpi;

#[cfg(feature = "mpi")]
use agree::Proposal;

/// How [`Communicator::all_reduce_sum`] is carried out on an [`MpiComm`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllReduceAlgorithm {
    /// Reduce-scatter as an `MPI_Alltoallv` of contiguous chunks, a sum of
    /// each chunk in rank order `((x₀ + x₁) + x₂) + …` on the rank that owns
    /// it, then `MPI_Allgatherv`. Bit-identical to `LocalComm` and the same on
    /// every rank; the bytes are those of a ring all-reduce. The default.
    #[default]
    RankOrder,
    /// `MPI_Allreduce(MPI_SUM)`: whatever Open MPI picks (rings, trees,
    /// recursive doubling). The summation order is implementation-defined,
    /// so results may differ from `LocalComm` and between runs with another
    /// rank count in the last bits. Every rank still gets the same result.
    /// The baseline the benchmarks compare against.
    Native,
}

/// Why [`MpiComm::init`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InitError {
    /// MPI was already initialized in this process (by rsmpi or by another
    /// library); build the communicator with [`MpiComm::new`] instead.
    AlreadyInitialized,
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyInitialized => write!(f, "MPI is already initialized in this process"),
        }
    }
}

impl core::error::Error for InitError {}

#[cfg(feature = "mpi")]
#[cfg_attr(basis_doc_cfg, doc(cfg(feature = "mpi")))]
/// A [`Communicator`] over an MPI communicator; one per process (rank).
///
/// Every collective first all-gathers a 32-byte header per rank (operation,
/// sizes) and checks it on every rank, so ranks that disagree get the same
/// kind of [`CommError`] as on `LocalComm` instead of a hang or an MPI
/// abort; only then does the payload move. Byte accounting
/// ([`Communicator::stats`]) uses [`CommStats::record`] exactly like
/// `LocalComm`; the header traffic is counted separately in
/// [`MpiComm::header_stats`].
///
/// MPI reports transport failures by aborting the job (Open MPI's default
/// error handler), so [`CommError::Transport`], [`CommError::PeerLost`] and
/// [`CommError::Timeout`] are never returned: a dead peer ends the whole
/// `mpirun`, which is what a launcher-managed job wants. Run under a
/// wall-clock limit if a peer can stall without dying.
///
/// # Example
///
/// Compiled here, run under `mpirun -np P` (each process one rank):
///
/// ```no_run
/// use comm_mpi::{AllReduceAlgorithm, MpiComm};
/// use comm_traits::Communicator;
///
/// let mut comm = MpiComm::init()?.with_all_reduce(AllReduceAlgorithm::Native);
/// let mut grad = vec![comm.rank() as f32; 4];
/// comm.all_reduce_sum(&mut grad)?;
/// let p = comm.size() as f32;
/// assert_eq!(grad, vec![p * (p - 1.0) / 2.0; 4]);
/// println!("rank {} of {}: {} bytes sent", comm.rank(), comm.size(), comm.stats().bytes_sent);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MpiComm {
    // Field order matters: the communicator is freed before MPI is finalized.
    comm: SimpleCommunicator,
    universe: Option<Universe>,
    rank: usize,
    size: usize,
    algorithm: AllReduceAlgorithm,
    stats: CommStats,
    headers: CommStats,
    /// Reused between calls: the pieces received by the reduce-scatter (or
    /// the copy of the input for the native all-reduce) …
    pieces: Vec<f32>,
    /// … and the summed chunk this rank owns.
    owned: Vec<f32>,
}

#[cfg(feature = "mpi")]
impl fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("owns_mpi", &self.universe.is_some())
            .field("algorithm", &self.algorithm)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "mpi")]
impl MpiComm {
    /// Initialize MPI and return a communicator over a duplicate of the world
    /// communicator. The returned value owns MPI: dropping it finalizes MPI.
    ///
    /// # Errors
    /// [`InitError::AlreadyInitialized`] if MPI is already initialized.
    pub fn init() -> Result<Self, InitError> {
        let universe = mpi::initialize().ok_or(InitError::AlreadyInitialized)?;
        let mut comm = Self::new(universe.world().duplicate());
        comm.universe = Some(universe);
        Ok(comm)
    }

    /// Wrap an existing MPI communicator (the world, a duplicate, or a
    /// sub-communicator from `split_by_color`). Pass a duplicate
    /// (`world.duplicate()`) if the program also uses the communicator
    /// directly, so the two streams of collectives cannot interleave. The
    /// caller keeps MPI's `Universe` alive longer than this value.
    pub fn new(comm: SimpleCommunicator) -> Self {
        let rank = usize::try_from(comm.rank()).unwrap_or(0);
        let size = usize::try_from(comm.size()).unwrap_or(1).max(1);
        Self {
            comm,
            universe: None,
            rank,
            size,
            algorithm: AllReduceAlgorithm::default(),
            stats: CommStats::default(),
            headers: CommStats::default(),
            pieces: Vec::new(),
            owned: Vec::new(),
        }
    }

    /// Choose how [`Communicator::all_reduce_sum`] runs (default
    /// [`AllReduceAlgorithm::RankOrder`]). All ranks must choose the same.
    pub fn with_all_reduce(mut self, algorithm: AllReduceAlgorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Change the all-reduce algorithm in place (see [`MpiComm::with_all_reduce`]).
    pub fn set_all_reduce(&mut self, algorithm: AllReduceAlgorithm) {
        self.algorithm = algorithm;
    }

    /// The algorithm `all_reduce_sum` uses now.
    pub fn all_reduce_algorithm(&self) -> AllReduceAlgorithm {
        self.algorithm
    }

    /// `MPI_Allreduce(MPI_SUM)` of `buf` whatever the configured algorithm
    /// (header-checked and byte-accounted like `all_reduce_sum`).
    ///
    /// # Errors
    /// As [`Communicator::all_reduce_sum`].
    pub fn all_reduce_sum_native(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.agree(Proposal::new(
            Collective::AllReduceSum,
            buf.len(),
            buf.len(),
            buf.len(),
        ))?;
        fits_mpi_count(buf.len())?;
        if self.size > 1 && !buf.is_empty() {
            self.pieces.clear();
            self.pieces.extend_from_slice(buf);
            self.comm
                .all_reduce_into(&self.pieces[..], buf, SystemOperation::sum());
        }
        self.stats
            .record(Collective::AllReduceSum, self.size, buf.len() * 4);
        Ok(())
    }

    /// Header traffic so far, accounted like payloads (an all-gather of 32
    /// bytes per rank per collective). Not included in
    /// [`Communicator::stats`], which stays identical to `LocalComm`'s.
    pub fn header_stats(&self) -> CommStats {
        self.headers
    }

    /// The underlying MPI communicator (for calls this crate does not wrap).
    pub fn raw(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Release the reusable all-reduce buffers (they grow to the largest
    /// buffer all-reduced so far: about its size again plus `1/P` of it).
    pub fn shrink_buffers(&mut self) {
        self.pieces = Vec::new();
        self.owned = Vec::new();
    }

    /// Exchange this rank's proposal with every rank and check the table.
    fn agree(&mut self, mine: Proposal) -> Result<(), CommError> {
        let words = mine.encode();
        let mut all = vec![0u64; agree::WORDS * self.size];
        self.comm.all_gather_into(&words[..], &mut all[..]);
        self.headers
            .record(Collective::AllGather, self.size, agree::WORDS * 8);
        let table: Vec<Proposal> = Proposal::decode_all(&all).collect();
        agree::validate(self.rank, &table)
    }

    /// The body of `all_to_all_v` once the operation agrees: all-gather
    /// every rank's counts (`2P+1` words: fits flag, send counts, receive
    /// counts), check every pair on every rank, then one `MPI_Alltoallv`.
    /// Returns the off-rank bytes sent and received.
    fn all_to_all_v_checked(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(u64, u64), CommError> {
        let p = self.size;
        let fits = comm_traits::counts_fit(p, send_counts, send.len())
            && comm_traits::counts_fit(p, recv_counts, recv.len());
        let w = 2 * p + 1;
        // A rank whose counts have the wrong length still sends exactly `w`
        // words (padded or cut), so the gather itself cannot go wrong.
        let mut mine = vec![0u64; w];
        mine[0] = u64::from(fits);
        for (dst, &c) in mine[1..=p].iter_mut().zip(send_counts) {
            *dst = c as u64;
        }
        for (dst, &c) in mine[p + 1..].iter_mut().zip(recv_counts) {
            *dst = c as u64;
        }
        let mut all = vec![0u64; w * p];
        self.comm.all_gather_into(&mine[..], &mut all[..]);
        self.headers.record(Collective::AllGather, self.size, w * 8);
        comm_traits::check_all_to_all_v(
            self.rank,
            p,
            &|i| all[i * w] == 1,
            &|i, j| all[i * w + 1 + j],
            &|j, i| all[j * w + 1 + p + i],
        )?;
        // Sizes MPI's `int` counts and displacements cannot describe, from
        // the agreed table so every rank refuses together.
        let total = |r: usize, off: usize| all[r * w + off..r * w + off + p].iter().sum::<u64>();
        if (0..p).any(|r| total(r, 1) > i32::MAX as u64 || total(r, 1 + p) > i32::MAX as u64) {
            return Err(CommError::BadArgument(
                "all_to_all_v buffer exceeds MPI's i32 byte count",
            ));
        }
        let off_rank = |c: &[usize]| (c.iter().sum::<usize>() - c[self.rank]) as u64;
        let sent = (off_rank(send_counts), off_rank(recv_counts));
        if (0..p).all(|r| total(r, 1) == 0) {
            return Ok(sent);
        }
        let (sc, sd) = split::counts_displs(send_counts)?;
        let (rc, rd) = split::counts_displs(recv_counts)?;
        // An empty slice points at address 1, which Open MPI reads as
        // `MPI_IN_PLACE`: lend empty buffers a real address instead.
        let pad = [0u8; 1];
        let mut rpad = [0u8; 1];
        let send = if send.is_empty() { &pad[..0] } else { send };
        let recv = if recv.is_empty() {
            &mut rpad[..0]
        } else {
            recv
        };
        let sp = Partition::new(send, &sc[..], &sd[..]);
        let mut rp = PartitionMut::new(recv, &rc[..], &rd[..]);
        self.comm.all_to_all_varcount_into(&sp, &mut rp);
        Ok(sent)
    }

    /// Reduce-scatter by `MPI_Alltoallv`, rank-order sum, `MPI_Allgatherv`.
    fn all_reduce_rank_order(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        let p = self.size;
        let (counts, displs) = split::chunks(buf.len(), p)?;
        let mine = counts[self.rank];
        let mine_len = usize::try_from(mine).unwrap_or(0);
        let recv_counts = vec![mine; p];
        let recv_displs = (0..p)
            .map(|i| i32::try_from(i * mine_len))
            .collect::<Result<Vec<i32>, _>>()
            .map_err(|_| CommError::BadArgument("buffer exceeds MPI's i32 element count"))?;
        self.pieces.clear();
        self.pieces.resize(p * mine_len, 0.0);
        self.owned.clear();
        self.owned.resize(mine_len, 0.0);
        {
            let send = Partition::new(&*buf, &counts[..], &displs[..]);
            let mut recv = PartitionMut::new(&mut self.pieces[..], recv_counts, recv_displs);
            self.comm.all_to_all_varcount_into(&send, &mut recv);
        }
        split::sum_in_rank_order(&self.pieces, &mut self.owned);
        let mut out = PartitionMut::new(buf, &counts[..], &displs[..]);
        self.comm
            .all_gather_varcount_into(&self.owned[..], &mut out);
        Ok(())
    }
}

/// MPI counts are `int`: refuse buffers it cannot describe (rsmpi would
/// panic). Checked after the header agreement, on sizes all ranks share.
#[cfg(feature = "mpi")]
fn fits_mpi_count(len: usize) -> Result<(), CommError> {
    i32::try_from(len)
        .map(|_| ())
        .map_err(|_| CommError::BadArgument("buffer exceeds MPI's i32 element count"))
}

#[cfg(feature = "mpi")]
impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        match self.algorithm {
            AllReduceAlgorithm::Native => self.all_reduce_sum_native(buf),
            AllReduceAlgorithm::RankOrder => {
                self.agree(Proposal::new(
                    Collective::AllReduceSum,
                    buf.len(),
                    buf.len(),
                    buf.len(),
                ))?;
                fits_mpi_count(buf.len())?;
                if self.size > 1 && !buf.is_empty() {
                    self.all_reduce_rank_order(buf)?;
                }
                self.stats
                    .record(Collective::AllReduceSum, self.size, buf.len() * 4);
                Ok(())
            }
        }
    }

    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError> {
        self.agree(Proposal::new(
            Collective::AllToAll,
            chunk,
            recv.len(),
            send.len(),
        ))?;
        fits_mpi_count(send.len())?;
        // Empty byte slices point at address 1, which Open MPI reads as
        // `MPI_IN_PLACE`; with nothing to move, skip the call.
        if chunk > 0 {
            self.comm.all_to_all_into(send, recv);
        }
        self.stats.record(Collective::AllToAll, self.size, chunk);
        Ok(())
    }

    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        self.agree(Proposal::new(
            Collective::AllGather,
            send.len(),
            recv.len(),
            send.len(),
        ))?;
        fits_mpi_count(recv.len())?;
        // See `all_to_all` for why empty buffers skip the call.
        if !send.is_empty() {
            self.comm.all_gather_into(send, recv);
        }
        self.stats
            .record(Collective::AllGather, self.size, send.len());
        Ok(())
    }

    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError> {
        self.agree(Proposal::new(
            Collective::AllToAllCounts,
            1,
            recv.len(),
            send.len(),
        ))?;
        self.comm.all_to_all_into(send, recv);
        self.stats.record(Collective::AllToAllCounts, self.size, 8);
        Ok(())
    }

    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        self.agree(Proposal::new(
            Collective::AllToAllV,
            0,
            recv.len(),
            send.len(),
        ))?;
        let (sent, received) = self.all_to_all_v_checked(send, send_counts, recv, recv_counts)?;
        self.stats.record_all_to_all_v(sent, received);
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        self.agree(Proposal::new(Collective::Barrier, 0, 0, 0))?;
        self.comm.barrier();
        self.stats.record(Collective::Barrier, self.size, 0);
        Ok(())
    }

    fn stats(&self) -> CommStats {
        self.stats
    }
}
