//! [`Eager`]: a blocking [`Communicator`] seen as a [`NonBlocking`] one,
//! so the trainers hold one kind of communicator whether `--dense-overlap`
//! is on (a `basis_std::overlap::Overlapped` thread) or off (this).
//!
//! Each `start_*` runs the blocking collective at once and keeps its
//! outcome until `wait`; blocking calls are forwarded untouched, so with
//! overlap off the trainers' collectives are exactly today's calls (no
//! thread, no copies). Size errors are returned by `wait`, as the
//! `NonBlocking` contract asks; a request of another communicator is
//! refused with [`FOREIGN_REQUEST`].

use comm_traits::nonblocking::FOREIGN_REQUEST;
use comm_traits::{CommError, CommStats, Communicator, Completed, NonBlocking, Request};
use core::sync::atomic::{AtomicU64, Ordering};
use std::collections::HashMap;

/// Identities of `Eager` objects; the top bit keeps them apart from
/// `Overlapped`'s (which count up from 1).
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1 << 63);

/// A blocking communicator with eager "non-blocking" collectives (module
/// docs).
pub(crate) struct Eager<'a> {
    comm: &'a mut dyn Communicator,
    owner: u64,
    next: u64,
    /// Outcomes of started requests not yet waited.
    done: HashMap<u64, Result<Completed, CommError>>,
}

impl<'a> Eager<'a> {
    /// Wrap `comm`.
    pub(crate) fn new(comm: &'a mut dyn Communicator) -> Self {
        Self {
            comm,
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            next: 0,
            done: HashMap::new(),
        }
    }

    /// Keep `outcome` as a new request's.
    fn keep(&mut self, outcome: Result<Completed, CommError>) -> Request {
        let id = self.next;
        self.next += 1;
        self.done.insert(id, outcome);
        Request::new(self.owner, id)
    }

    /// `req`'s kept outcome, if this communicator started it.
    fn take(&mut self, req: &Request) -> Result<Result<Completed, CommError>, CommError> {
        if req.owner() != self.owner {
            return Err(CommError::BadArgument(FOREIGN_REQUEST));
        }
        self.done
            .remove(&req.id())
            .ok_or(CommError::BadArgument(FOREIGN_REQUEST))
    }
}

impl Communicator for Eager<'_> {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.size()
    }

    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.comm.all_reduce_sum(buf)
    }

    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError> {
        self.comm.all_to_all(send, chunk, recv)
    }

    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        self.comm.all_gather(send, recv)
    }

    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError> {
        self.comm.all_to_all_counts(send, recv)
    }

    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        self.comm.all_to_all_v(send, send_counts, recv, recv_counts)
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        self.comm.barrier()
    }

    fn stats(&self) -> CommStats {
        self.comm.stats()
    }
}

impl NonBlocking for Eager<'_> {
    fn start_all_gather(&mut self, send: Vec<u8>, mut recv: Vec<u8>) -> Result<Request, CommError> {
        let out = self.comm.all_gather(&send, &mut recv);
        Ok(self.keep(out.map(|()| Completed::Bytes { send, recv })))
    }

    fn start_all_to_all(
        &mut self,
        send: Vec<u8>,
        chunk: usize,
        mut recv: Vec<u8>,
    ) -> Result<Request, CommError> {
        let out = self.comm.all_to_all(&send, chunk, &mut recv);
        Ok(self.keep(out.map(|()| Completed::Bytes { send, recv })))
    }

    fn start_all_reduce_sum(&mut self, mut buf: Vec<f32>) -> Result<Request, CommError> {
        let out = self.comm.all_reduce_sum(&mut buf);
        Ok(self.keep(out.map(|()| Completed::Floats(buf))))
    }

    fn test(&mut self, req: &Request) -> Result<bool, CommError> {
        if req.owner() != self.owner || !self.done.contains_key(&req.id()) {
            return Err(CommError::BadArgument(FOREIGN_REQUEST));
        }
        Ok(true)
    }

    fn wait(&mut self, req: Request) -> Result<Completed, CommError> {
        self.take(&req)?
    }
}

#[cfg(test)]
mod tests {
    use super::Eager;
    use basis_std::local::LocalComm;
    use comm_traits::{CommError, Communicator, NonBlocking};

    /// Started collectives equal the blocking calls, waited in any order;
    /// a size error comes back at `wait` and the group stays usable; a
    /// request of another `Eager` is refused.
    #[test]
    fn eager_requests_are_the_blocking_calls() {
        let outs = LocalComm::run(3, |rank| {
            let mut comm = rank;
            let mut e = Eager::new(&mut comm);
            let me = e.rank() as u8;
            let a = e.start_all_gather(vec![me, me + 10], vec![0; 6])?;
            let b = e.start_all_reduce_sum(vec![f32::from(me) + 0.25])?;
            let c = e.start_all_to_all(vec![me; 3], 1, vec![0; 3])?;
            let sum = e.wait(b)?.into_floats();
            let a2a = e.wait(c)?.into_recv();
            let gathered = e.wait(a)?.into_recv();
            let bad = e.start_all_gather(vec![0; 2], vec![0; 5])?;
            let bad = e.wait(bad).is_err();
            let mut x = [1.0f32];
            e.all_reduce_sum(&mut x)?;
            let mut other_comm = LocalComm::group(1).remove(0);
            let mut other = Eager::new(&mut other_comm);
            let foreign = other.start_all_reduce_sum(vec![1.0])?;
            let refused = e.wait(foreign).is_err();
            Ok::<_, CommError>((gathered, sum, a2a, bad, x[0], refused))
        });
        for out in outs {
            let (gathered, sum, a2a, bad, x, refused) = out.expect("no panic").expect("ok");
            assert_eq!(gathered, Some(vec![0, 10, 1, 11, 2, 12]));
            assert_eq!(sum, Some(vec![3.75]));
            assert_eq!(a2a, Some(vec![0, 1, 2]));
            assert!(bad && refused);
            assert_eq!(x, 3.0);
        }
    }
}
