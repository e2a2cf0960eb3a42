//! In-process ranks: [`LocalComm`], a [`Communicator`] whose P ranks are
//! threads of one process.
//!
//! Every collective is a rendezvous on one shared, generation-counted slot
//! table (`Mutex` + `Condvar`): each rank deposits a copy of its input, the
//! last rank to arrive seals the round (validates the arguments of all ranks
//! and, for `all_reduce_sum`, adds the buffers in rank order once), and every
//! rank then copies its own output from the sealed round outside the lock.
//!
//! Failure model (why nothing ever hangs):
//! * argument and size disagreements are found by every rank from the sealed
//!   round, so all ranks return an error ([`CommError::LengthMismatch`],
//!   [`CommError::HeaderMismatch`] or, on the offending rank,
//!   [`CommError::BadArgument`]) and the group stays usable;
//! * a rank that panics or drops its communicator poisons the group (drop
//!   guard): ranks waiting now, and every later call, get
//!   [`CommError::PeerLost`];
//! * with a timeout configured, a rank that waits longer gets
//!   [`CommError::Timeout`] and poisons the group, so the others get
//!   `PeerLost` instead of waiting for it.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use comm_traits::{Collective, CommError, CommStats, Communicator};

extern crate alloc;

/// One rank's input to a round.
#[derive(Debug)]
enum Payload {
    Floats(Vec<f32>),
    Bytes(Vec<u8>),
    Words(Vec<u64>),
    /// An `all_to_all_v` input: the bytes, both count vectors, and whether
    /// they fit the rank's buffers (checked before depositing).
    Vary {
        bytes: Vec<u8>,
        send_counts: Vec<usize>,
        recv_counts: Vec<usize>,
        fits: bool,
    },
    None,
}

/// One rank's deposit: which collective, its input, and its size arguments.
#[derive(Debug)]
struct Deposit {
    op: Collective,
    payload: Payload,
    /// `chunk` for all-to-all, `send.len()` otherwise.
    unit: usize,
    /// Length of the rank's output buffer (elements or bytes).
    recv_len: usize,
}

/// A sealed round: all deposits plus the reduced sum (all-reduce only).
#[derive(Debug)]
struct Sealed {
    deposits: Vec<Deposit>,
    sum: Option<Vec<f32>>,
}

#[derive(Debug)]
struct Rendezvous {
    /// Index of the round being collected; advances when a round seals.
    generation: u64,
    arrived: usize,
    slots: Vec<Option<Deposit>>,
    /// The last sealed round (generation − 1).
    sealed: Option<Arc<Sealed>>,
    /// Set when a rank left: `Some(rank)`.
    lost: Option<usize>,
    /// Each rank's byte buffer from a round that every rank has left,
    /// handed back to that rank at its next deposit: a rank copies its
    /// input into a buffer it owns, and a fresh ~1 MB `Vec` per collective
    /// is a fresh `mmap` and its page faults with glibc's allocator.
    spare: Vec<Option<Vec<u8>>>,
}

#[derive(Debug)]
struct Group {
    size: usize,
    timeout: Option<Duration>,
    state: Mutex<Rendezvous>,
    wake: Condvar,
}

impl Group {
    /// Lock, ignoring poisoning: the rendezvous is updated only in short
    /// sections that cannot panic halfway, and a lost peer is tracked
    /// explicitly in `lost`.
    fn lock(&self) -> MutexGuard<'_, Rendezvous> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn poison(&self, rank: usize) {
        let mut st = self.lock();
        if st.lost.is_none() {
            st.lost = Some(rank);
        }
        drop(st);
        self.wake.notify_all();
    }
}

/// One rank of an in-process group; see the module docs.
///
/// A rank keeps up to three byte buffers of its largest message (the one it
/// fills, the one in the sealed round, one handed back): collectives over
/// bytes allocate nothing per call once these have grown.
///
/// Create the ranks with [`LocalComm::group`] (or [`LocalComm::run`]) and move
/// each into its own thread. Collectives follow MPI semantics: every rank calls
/// the same collectives in the same order; `all_reduce_sum` adds the buffers
/// in rank order `((x₀ + x₁) + x₂) + …`, so every rank gets bit-identical
/// results. Byte accounting uses [`CommStats::record`] (logical ring/all-to-all
/// bytes, the same formulas as the MPI backend). After a `PeerLost` or
/// `Timeout` the group is dead: every later call fails with `PeerLost`.
///
/// # Example
///
/// ```
/// use basis_std::local::LocalComm;
/// use comm_traits::Communicator;
///
/// // Four ranks, one thread each; every rank gets the same bits back.
/// let sums = LocalComm::run(4, |mut comm| {
///     let mut x = [comm.rank() as f32, 1.0];
///     comm.all_reduce_sum(&mut x).map(|()| x)
/// });
/// for s in sums {
///     assert_eq!(s.expect("no rank panicked")?, [6.0, 4.0]);
/// }
/// # Ok::<(), comm_traits::CommError>(())
/// ```
#[derive(Debug)]
pub struct LocalComm {
    rank: usize,
    group: Arc<Group>,
    stats: CommStats,
    /// A byte buffer for the next deposit (see `Rendezvous::spare`).
    spare: Vec<u8>,
}

impl LocalComm {
    /// `p` connected ranks (index = rank) with no timeout. `p == 0` gives an
    /// empty vector.
    pub fn group(p: usize) -> Vec<LocalComm> {
        Self::build(p, None)
    }

    /// Like [`LocalComm::group`], but a rank that waits longer than `timeout`
    /// in one collective returns [`CommError::Timeout`] (and poisons the group).
    pub fn group_with_timeout(p: usize, timeout: Duration) -> Vec<LocalComm> {
        Self::build(p, Some(timeout))
    }

    fn build(p: usize, timeout: Option<Duration>) -> Vec<LocalComm> {
        let group = Arc::new(Group {
            size: p,
            timeout,
            state: Mutex::new(Rendezvous {
                generation: 0,
                arrived: 0,
                slots: (0..p).map(|_| None).collect(),
                sealed: None,
                lost: None,
                spare: (0..p).map(|_| None).collect(),
            }),
            wake: Condvar::new(),
        });
        (0..p)
            .map(|rank| LocalComm {
                rank,
                group: Arc::clone(&group),
                stats: CommStats::default(),
                spare: Vec::new(),
            })
            .collect()
    }

    /// Run `f` on `p` ranks, one scoped thread each, and return each rank's
    /// outcome in rank order (`Err` holds the panic payload of a rank that
    /// panicked; the other ranks then see [`CommError::PeerLost`]).
    pub fn run<T, F>(p: usize, f: F) -> Vec<std::thread::Result<T>>
    where
        T: Send,
        F: Fn(LocalComm) -> T + Sync,
    {
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = Self::group(p)
                .into_iter()
                .map(|c| s.spawn(move || f(c)))
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        })
    }

    /// A byte buffer holding a copy of `data`, reusing this rank's spare.
    fn copied(&mut self, data: &[u8]) -> Vec<u8> {
        let mut buf = core::mem::take(&mut self.spare);
        buf.clear();
        buf.extend_from_slice(data);
        buf
    }

    /// Deposit this rank's input, wait for the round to seal, return it.
    fn rendezvous(&mut self, deposit: Deposit) -> Result<Arc<Sealed>, CommError> {
        let g = &*self.group;
        let mut st = g.lock();
        if let Some(rank) = st.lost {
            return Err(CommError::PeerLost { rank: Some(rank) });
        }
        let my_generation = st.generation;
        st.slots[self.rank] = Some(deposit);
        st.arrived += 1;
        if let Some(buf) = st.spare[self.rank].take() {
            self.spare = buf;
        }
        if st.arrived == g.size {
            let deposits: Vec<Deposit> = st.slots.iter_mut().filter_map(Option::take).collect();
            let sum = reduce_if_consistent(&deposits);
            let sealed = Arc::new(Sealed { deposits, sum });
            // Every rank has left the previous round (each is in this
            // one), so the rendezvous holds its only reference: its byte
            // buffers go back to their ranks.
            if let Some(old) = st.sealed.replace(Arc::clone(&sealed))
                && let Ok(old) = Arc::try_unwrap(old)
            {
                for (spare, d) in st.spare.iter_mut().zip(old.deposits) {
                    if let Payload::Bytes(buf) | Payload::Vary { bytes: buf, .. } = d.payload {
                        *spare = Some(buf);
                    }
                }
            }
            st.arrived = 0;
            st.generation += 1;
            drop(st);
            g.wake.notify_all();
            return Ok(sealed);
        }
        let deadline = g.timeout.map(|t| Instant::now() + t);
        loop {
            // A round sealed with us in it can only be ours: the next one
            // cannot seal before we arrive.
            if st.generation > my_generation {
                return st.sealed.clone().ok_or(CommError::PeerLost { rank: None });
            }
            if let Some(rank) = st.lost {
                return Err(CommError::PeerLost { rank: Some(rank) });
            }
            st = match deadline {
                None => g
                    .wake
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        if st.lost.is_none() {
                            st.lost = Some(self.rank);
                        }
                        drop(st);
                        g.wake.notify_all();
                        return Err(CommError::Timeout);
                    }
                    g.wake
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Check that every rank called `op` with the same `unit` and a valid
    /// output length, own arguments first (so the offending rank reports
    /// `BadArgument` and the others a mismatch).
    fn validate(&self, sealed: &Sealed, op: Collective) -> Result<(), CommError> {
        let mine = &sealed.deposits[self.rank];
        let p = self.group.size;
        let own_ok = |d: &Deposit| match d.op {
            Collective::AllReduceSum => d.recv_len == d.unit,
            Collective::AllToAll => {
                let want = d.unit.checked_mul(p);
                want == Some(d.recv_len) && want == Some(payload_len(&d.payload))
            }
            Collective::AllGather => d.unit.checked_mul(p) == Some(d.recv_len),
            Collective::AllToAllCounts => d.recv_len == p && payload_len(&d.payload) == p,
            // Checked pair by pair in `all_to_all_v`, after the op agrees.
            Collective::AllToAllV | Collective::Barrier => true,
        };
        if !own_ok(mine) {
            return Err(CommError::BadArgument(match op {
                Collective::AllToAll => "all_to_all buffers must be size()*chunk bytes",
                Collective::AllToAllCounts => comm_traits::COUNTS_LEN,
                _ => "all_gather recv must be size()*send.len() bytes",
            }));
        }
        for other in &sealed.deposits {
            if other.op != op {
                return Err(CommError::HeaderMismatch {
                    field: "collective",
                    local: op_code(op),
                    remote: op_code(other.op),
                });
            }
            if other.unit != mine.unit {
                return Err(CommError::LengthMismatch {
                    local: mine.unit as u64,
                    remote: other.unit as u64,
                });
            }
            if !own_ok(other) {
                return Err(CommError::LengthMismatch {
                    local: payload_len(&mine.payload) as u64,
                    remote: payload_len(&other.payload) as u64,
                });
            }
        }
        Ok(())
    }
}

impl Drop for LocalComm {
    /// A rank that leaves (normally or by panicking) poisons the group, so a
    /// peer still waiting for it gets `PeerLost` instead of hanging.
    fn drop(&mut self) {
        self.group.poison(self.rank);
    }
}

fn payload_len(p: &Payload) -> usize {
    match p {
        Payload::Floats(v) => v.len(),
        Payload::Bytes(v) => v.len(),
        Payload::Words(v) => v.len(),
        Payload::Vary { bytes, .. } => bytes.len(),
        Payload::None => 0,
    }
}

fn op_code(op: Collective) -> u64 {
    match op {
        Collective::AllReduceSum => 1,
        Collective::AllToAll => 2,
        Collective::AllGather => 3,
        Collective::Barrier => 4,
        Collective::AllToAllV => 5,
        Collective::AllToAllCounts => 6,
    }
}

/// The count vectors of a sealed `all_to_all_v` deposit (empty for a
/// deposit of another kind, which `validate` has already refused).
fn vary_counts(d: &Deposit) -> (&[usize], &[usize], bool) {
    match &d.payload {
        Payload::Vary {
            send_counts,
            recv_counts,
            fits,
            ..
        } => (send_counts, recv_counts, *fits),
        _ => (&[], &[], false),
    }
}

/// Entry `j` of a counts vector as the `u64` the verdict compares (a
/// missing entry of a vector that does not fit reads as 0).
fn count_at(v: &[usize], j: usize) -> u64 {
    v.get(j).map_or(0, |&c| c as u64)
}

/// Rank-order sum, computed once by the sealing rank when all ranks passed
/// all-reduce buffers of one length.
fn reduce_if_consistent(deposits: &[Deposit]) -> Option<Vec<f32>> {
    let mut bufs = deposits.iter().map(|d| match (&d.op, &d.payload) {
        (Collective::AllReduceSum, Payload::Floats(v)) => Some(v),
        _ => None,
    });
    let mut sum = bufs.next()??.clone();
    for b in bufs {
        let b = b?;
        if b.len() != sum.len() {
            return None;
        }
        for (s, x) in sum.iter_mut().zip(b) {
            *s += *x;
        }
    }
    Some(sum)
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.size
    }

    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        let op = Collective::AllReduceSum;
        let sealed = self.rendezvous(Deposit {
            op,
            payload: Payload::Floats(buf.to_vec()),
            unit: buf.len(),
            recv_len: buf.len(),
        })?;
        self.validate(&sealed, op)?;
        let sum = sealed.sum.as_ref().ok_or(CommError::LengthMismatch {
            local: buf.len() as u64,
            remote: buf.len() as u64,
        })?;
        buf.copy_from_slice(sum);
        self.stats.record(op, self.group.size, buf.len() * 4);
        Ok(())
    }

    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError> {
        let op = Collective::AllToAll;
        let bytes = self.copied(send);
        let sealed = self.rendezvous(Deposit {
            op,
            payload: Payload::Bytes(bytes),
            unit: chunk,
            recv_len: recv.len(),
        })?;
        self.validate(&sealed, op)?;
        let me = self.rank;
        for (d, out) in sealed
            .deposits
            .iter()
            .zip(recv.chunks_exact_mut(chunk.max(1)))
        {
            if let Payload::Bytes(src) = &d.payload {
                out.copy_from_slice(&src[me * chunk..(me + 1) * chunk]);
            }
        }
        self.stats.record(op, self.group.size, chunk);
        Ok(())
    }

    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        let op = Collective::AllGather;
        let bytes = self.copied(send);
        let sealed = self.rendezvous(Deposit {
            op,
            payload: Payload::Bytes(bytes),
            unit: send.len(),
            recv_len: recv.len(),
        })?;
        self.validate(&sealed, op)?;
        if !send.is_empty() {
            for (d, out) in sealed
                .deposits
                .iter()
                .zip(recv.chunks_exact_mut(send.len()))
            {
                if let Payload::Bytes(src) = &d.payload {
                    out.copy_from_slice(src);
                }
            }
        }
        self.stats.record(op, self.group.size, send.len());
        Ok(())
    }

    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError> {
        let op = Collective::AllToAllCounts;
        let sealed = self.rendezvous(Deposit {
            op,
            payload: Payload::Words(send.to_vec()),
            unit: 1,
            recv_len: recv.len(),
        })?;
        self.validate(&sealed, op)?;
        let me = self.rank;
        for (d, out) in sealed.deposits.iter().zip(recv.iter_mut()) {
            if let Payload::Words(src) = &d.payload {
                *out = src[me];
            }
        }
        self.stats.record(op, self.group.size, 8);
        Ok(())
    }

    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        let op = Collective::AllToAllV;
        let p = self.group.size;
        let fits = comm_traits::counts_fit(p, send_counts, send.len())
            && comm_traits::counts_fit(p, recv_counts, recv.len());
        let bytes = self.copied(send);
        let sealed = self.rendezvous(Deposit {
            op,
            payload: Payload::Vary {
                bytes,
                send_counts: send_counts.to_vec(),
                recv_counts: recv_counts.to_vec(),
                fits,
            },
            unit: 0,
            recv_len: recv.len(),
        })?;
        self.validate(&sealed, op)?;
        let ds = &sealed.deposits;
        comm_traits::check_all_to_all_v(
            self.rank,
            p,
            &|i| vary_counts(&ds[i]).2,
            &|i, j| count_at(vary_counts(&ds[i]).0, j),
            &|j, i| count_at(vary_counts(&ds[j]).1, i),
        )?;
        // Every pair agrees, so rank i's chunk for us has recv_counts[i] bytes.
        let me = self.rank;
        let mut at = 0usize;
        for (i, d) in ds.iter().enumerate() {
            if let Payload::Vary {
                bytes, send_counts, ..
            } = &d.payload
            {
                let start: usize = send_counts[..me].iter().sum();
                let len = recv_counts[i];
                recv[at..at + len].copy_from_slice(&bytes[start..start + len]);
                at += len;
            }
        }
        let off_rank = |c: &[usize]| (c.iter().sum::<usize>() - c[me]) as u64;
        self.stats
            .record_all_to_all_v(off_rank(send_counts), off_rank(recv_counts));
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        let op = Collective::Barrier;
        let sealed = self.rendezvous(Deposit {
            op,
            payload: Payload::None,
            unit: 0,
            recv_len: 0,
        })?;
        self.validate(&sealed, op)?;
        self.stats.record(op, self.group.size, 0);
        Ok(())
    }

    fn stats(&self) -> CommStats {
        self.stats
    }
}
