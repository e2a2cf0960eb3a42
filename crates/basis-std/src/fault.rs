//! Fault injection for distributed training loops: [`ExitsAt`] wraps a
//! communicator and makes its rank leave the group at a chosen collective
//! call, as a crashed or returning rank does — so a test can check that
//! every other rank ends with an error instead of hanging.

use comm_traits::{CommError, CommStats, Communicator};

/// A rank that "exits" — drops its inner communicator, as a crashed or
/// returning thread does — when it reaches its `die_at`-th collective call
/// (counting from 0). Until then every call goes to the inner communicator;
/// from then on every call fails with [`CommError::PeerLost`] naming this
/// rank. With `LocalComm`, dropping the inner communicator poisons the
/// group, so the other ranks' next collective fails too.
///
/// ```
/// use basis_std::fault::ExitsAt;
/// use basis_std::local::LocalComm;
/// use comm_traits::Communicator;
///
/// let results = LocalComm::run(2, |comm| {
///     // Rank 1 leaves at its first call; rank 0's barrier must then fail.
///     let die_at = (comm.rank() == 1).then_some(0);
///     let mut comm = ExitsAt::new(comm, die_at);
///     comm.barrier().is_err()
/// });
/// assert!(results.into_iter().all(|r| r.unwrap()));
/// ```
#[derive(Debug)]
pub struct ExitsAt<C> {
    inner: Option<C>,
    rank: usize,
    size: usize,
    die_at: Option<u64>,
    calls: u64,
}

impl<C: Communicator> ExitsAt<C> {
    /// Wrap `inner`; `die_at = None` never exits.
    pub fn new(inner: C, die_at: Option<u64>) -> Self {
        Self {
            rank: inner.rank(),
            size: inner.size(),
            inner: Some(inner),
            die_at,
            calls: 0,
        }
    }

    /// Collective calls made so far (including the failing ones).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The live communicator, or the exit: drop it and fail this call.
    fn live(&mut self) -> Result<&mut C, CommError> {
        if self.die_at == Some(self.calls) {
            self.inner = None;
        }
        self.calls += 1;
        self.inner.as_mut().ok_or(CommError::PeerLost {
            rank: Some(self.rank),
        })
    }
}

impl<C: Communicator> Communicator for ExitsAt<C> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.live()?.all_reduce_sum(buf)
    }
    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError> {
        self.live()?.all_to_all(send, chunk, recv)
    }
    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        self.live()?.all_gather(send, recv)
    }
    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError> {
        self.live()?.all_to_all_counts(send, recv)
    }
    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        self.live()?
            .all_to_all_v(send, send_counts, recv, recv_counts)
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        self.live()?.barrier()
    }
    fn stats(&self) -> CommStats {
        self.inner.as_ref().map(|c| c.stats()).unwrap_or_default()
    }
}
