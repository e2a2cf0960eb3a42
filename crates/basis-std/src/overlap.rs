//! [`Overlapped`]: [`NonBlocking`] collectives for any [`Communicator`], by
//! a communication thread that owns the communicator.
//!
//! Data flow: the caller's thread sends each collective (with its owned
//! buffers) over a channel to one communication thread, which runs the
//! **blocking** collective of the wrapped communicator, in start order, and
//! sends the buffers back. So what overlaps is: the caller's computation
//! (and its starting of further requests) with the communication thread's
//! exchanges, one exchange at a time. Results are those of the wrapped
//! communicator's blocking calls, hence bit-identical to them by
//! construction, and [`Communicator::stats`] is the wrapped communicator's.
//!
//! The communicator is *built on* the communication thread
//! ([`Overlapped::spawn`] takes a constructor), so it need not be `Send`:
//! `MpiComm` (whose MPI handles are not `Send`) is initialised there and
//! never touched by another thread, which is what MPI's
//! `MPI_THREAD_SINGLE` level asks. A `LocalComm` rank is simply moved in.
//!
//! Failure model: a collective's error is returned by `wait` exactly as the
//! blocking call returned it (size errors on every rank, `PeerLost` when a
//! peer left). If the communication thread itself is gone (it panicked),
//! every later call returns [`CommError::PeerLost`] naming this rank.
//! Dropping an `Overlapped` finishes the collectives already started (they
//! are collectives: the peers wait for them), then drops the wrapped
//! communicator on its thread and joins it. Results of requests dropped
//! without `wait` are kept until the `Overlapped` is dropped.

extern crate alloc;

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;

use comm_traits::nonblocking::FOREIGN_REQUEST;
use comm_traits::{CommError, CommStats, Communicator, Completed, NonBlocking, Request};

/// Identities of `Overlapped` objects, so a request cannot be waited on
/// another one.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// One collective for the communication thread, with its owned inputs.
enum Op {
    AllReduce(Vec<f32>),
    AllToAll {
        send: Vec<u8>,
        chunk: usize,
        recv: Vec<u8>,
    },
    AllGather {
        send: Vec<u8>,
        recv: Vec<u8>,
    },
    Counts {
        send: Vec<u64>,
        recv: Vec<u64>,
    },
    Vary {
        send: Vec<u8>,
        send_counts: Vec<usize>,
        recv: Vec<u8>,
        recv_counts: Vec<usize>,
    },
    Barrier,
}

/// What a finished [`Op`] hands back.
enum Done {
    Public(Completed),
    Words(Vec<u64>),
    Vary(Vec<u8>),
    Unit,
}

type Outcome = Result<Done, CommError>;

/// Run one op with the wrapped communicator's blocking call.
fn execute<C: Communicator + ?Sized>(comm: &mut C, op: Op) -> Outcome {
    Ok(match op {
        Op::AllReduce(mut buf) => {
            comm.all_reduce_sum(&mut buf)?;
            Done::Public(Completed::Floats(buf))
        }
        Op::AllToAll {
            send,
            chunk,
            mut recv,
        } => {
            comm.all_to_all(&send, chunk, &mut recv)?;
            Done::Public(Completed::Bytes { send, recv })
        }
        Op::AllGather { send, mut recv } => {
            comm.all_gather(&send, &mut recv)?;
            Done::Public(Completed::Bytes { send, recv })
        }
        Op::Counts { send, mut recv } => {
            comm.all_to_all_counts(&send, &mut recv)?;
            Done::Words(recv)
        }
        Op::Vary {
            send,
            send_counts,
            mut recv,
            recv_counts,
        } => {
            comm.all_to_all_v(&send, &send_counts, &mut recv, &recv_counts)?;
            Done::Vary(recv)
        }
        Op::Barrier => {
            comm.barrier()?;
            Done::Unit
        }
    })
}

/// A communicator run on its own thread, with non-blocking collectives;
/// see the module docs.
///
/// # Example
///
/// ```
/// use basis_std::local::LocalComm;
/// use basis_std::overlap::Overlapped;
/// use comm_traits::{Communicator, NonBlocking};
///
/// let outs = LocalComm::run(2, |rank| {
///     let mut comm = Overlapped::spawn(move || Ok::<_, ()>(rank)).expect("spawned");
///     let me = comm.rank() as u8;
///     // Two exchanges in flight; the caller is free meanwhile.
///     let a = comm.start_all_gather(vec![me], vec![0; 2])?;
///     let b = comm.start_all_reduce_sum(vec![f32::from(me) + 0.5])?;
///     let sum = comm.wait(b)?.into_floats(); // any wait order
///     let gathered = comm.wait(a)?.into_recv();
///     Ok::<_, comm_traits::CommError>((gathered, sum))
/// });
/// for out in outs {
///     let (gathered, sum) = out.expect("no panic")?;
///     assert_eq!(gathered, Some(vec![0, 1]));
///     assert_eq!(sum, Some(vec![2.0]));
/// }
/// # Ok::<(), comm_traits::CommError>(())
/// ```
#[derive(Debug)]
pub struct Overlapped {
    owner: u64,
    rank: usize,
    size: usize,
    /// `None` once dropping (closes the thread's queue).
    jobs: Option<Sender<(u64, Op)>>,
    results: Receiver<(u64, Outcome)>,
    /// Finished requests not yet waited.
    done: HashMap<u64, Outcome>,
    next: u64,
    /// The wrapped communicator's statistics, updated by the thread after
    /// each collective and before its result is sent.
    stats: Arc<Mutex<CommStats>>,
    thread: Option<JoinHandle<()>>,
}

impl core::fmt::Debug for Done {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Public(_) => "Public",
            Self::Words(_) => "Words",
            Self::Vary(_) => "Vary",
            Self::Unit => "Unit",
        })
    }
}

impl Overlapped {
    /// Start the communication thread, build the communicator on it with
    /// `make`, and return the handle this thread uses.
    ///
    /// # Errors
    /// [`SpawnError::Make`] with `make`'s error; [`SpawnError::Thread`] if
    /// the thread could not start or `make` panicked.
    pub fn spawn<C, E, F>(make: F) -> Result<Self, SpawnError<E>>
    where
        C: Communicator,
        E: Send + 'static,
        F: FnOnce() -> Result<C, E> + Send + 'static,
    {
        let (job_tx, job_rx) = channel::<(u64, Op)>();
        let (res_tx, res_rx) = channel::<(u64, Outcome)>();
        let (ready_tx, ready_rx) = channel::<Result<(usize, usize), E>>();
        let stats = Arc::new(Mutex::new(CommStats::default()));
        let thread_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("basis-comm".into())
            .spawn(move || {
                let mut comm = match make() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                *thread_stats.lock().unwrap_or_else(PoisonError::into_inner) = comm.stats();
                if ready_tx.send(Ok((comm.rank(), comm.size()))).is_err() {
                    return;
                }
                for (id, op) in job_rx {
                    let outcome = execute(&mut comm, op);
                    *thread_stats.lock().unwrap_or_else(PoisonError::into_inner) = comm.stats();
                    // The handle may be gone (dropping); keep draining the
                    // queue so every started collective completes.
                    let _ = res_tx.send((id, outcome));
                }
            })
            .map_err(|_| SpawnError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok((rank, size))) => Ok(Self {
                owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
                rank,
                size,
                jobs: Some(job_tx),
                results: res_rx,
                done: HashMap::new(),
                next: 0,
                stats,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(SpawnError::Make(e))
            }
            Err(_) => {
                let _ = thread.join();
                Err(SpawnError::Thread)
            }
        }
    }

    fn lost(&self) -> CommError {
        CommError::PeerLost {
            rank: Some(self.rank),
        }
    }

    fn submit(&mut self, op: Op) -> Result<Request, CommError> {
        let id = self.next;
        let sent = match &self.jobs {
            Some(tx) => tx.send((id, op)).is_ok(),
            None => false,
        };
        if !sent {
            return Err(self.lost());
        }
        self.next += 1;
        Ok(Request::new(self.owner, id))
    }

    fn check_owner(&self, req: &Request) -> Result<(), CommError> {
        if req.owner() == self.owner && req.id() < self.next {
            Ok(())
        } else {
            Err(CommError::BadArgument(FOREIGN_REQUEST))
        }
    }

    /// Block until request `id` has finished and take its outcome.
    fn finish(&mut self, id: u64) -> Outcome {
        loop {
            if let Some(outcome) = self.done.remove(&id) {
                return outcome;
            }
            match self.results.recv() {
                Ok((got, outcome)) => {
                    self.done.insert(got, outcome);
                }
                Err(_) => return Err(self.lost()),
            }
        }
    }

    /// Run `op` and wait for it (the blocking methods, kept in order with
    /// the requests in flight).
    fn blocking(&mut self, op: Op) -> Outcome {
        let req = self.submit(op)?;
        self.finish(req.id())
    }
}

/// Why [`Overlapped::spawn`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnError<E> {
    /// The communicator's constructor returned this error.
    Make(E),
    /// The thread could not be started, or the constructor panicked.
    Thread,
}

impl<E: core::fmt::Display> core::fmt::Display for SpawnError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Make(e) => write!(f, "building the communicator failed: {e}"),
            Self::Thread => write!(f, "the communication thread failed to start"),
        }
    }
}

impl<E: core::fmt::Debug + core::fmt::Display> core::error::Error for SpawnError<E> {}

impl Drop for Overlapped {
    /// Close the queue, let the thread finish the started collectives and
    /// drop the communicator, and join it.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A result of the wrong kind for the op that produced it cannot happen
/// (each op maps to one `Done` kind); reported as a lost backend rather
/// than a panic.
fn unexpected(rank: usize) -> CommError {
    CommError::PeerLost { rank: Some(rank) }
}

impl Communicator for Overlapped {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        match self.blocking(Op::AllReduce(buf.to_vec()))? {
            Done::Public(Completed::Floats(v)) if v.len() == buf.len() => {
                buf.copy_from_slice(&v);
                Ok(())
            }
            _ => Err(unexpected(self.rank)),
        }
    }

    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError> {
        let op = Op::AllToAll {
            send: send.to_vec(),
            chunk,
            recv: vec![0; recv.len()],
        };
        match self.blocking(op)? {
            Done::Public(Completed::Bytes { recv: r, .. }) if r.len() == recv.len() => {
                recv.copy_from_slice(&r);
                Ok(())
            }
            _ => Err(unexpected(self.rank)),
        }
    }

    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        let op = Op::AllGather {
            send: send.to_vec(),
            recv: vec![0; recv.len()],
        };
        match self.blocking(op)? {
            Done::Public(Completed::Bytes { recv: r, .. }) if r.len() == recv.len() => {
                recv.copy_from_slice(&r);
                Ok(())
            }
            _ => Err(unexpected(self.rank)),
        }
    }

    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError> {
        let op = Op::Counts {
            send: send.to_vec(),
            recv: vec![0; recv.len()],
        };
        match self.blocking(op)? {
            Done::Words(r) if r.len() == recv.len() => {
                recv.copy_from_slice(&r);
                Ok(())
            }
            _ => Err(unexpected(self.rank)),
        }
    }

    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        let op = Op::Vary {
            send: send.to_vec(),
            send_counts: send_counts.to_vec(),
            recv: vec![0; recv.len()],
            recv_counts: recv_counts.to_vec(),
        };
        match self.blocking(op)? {
            Done::Vary(r) if r.len() == recv.len() => {
                recv.copy_from_slice(&r);
                Ok(())
            }
            _ => Err(unexpected(self.rank)),
        }
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        match self.blocking(Op::Barrier)? {
            Done::Unit => Ok(()),
            _ => Err(unexpected(self.rank)),
        }
    }

    fn stats(&self) -> CommStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl NonBlocking for Overlapped {
    fn start_all_gather(&mut self, send: Vec<u8>, recv: Vec<u8>) -> Result<Request, CommError> {
        self.submit(Op::AllGather { send, recv })
    }

    fn start_all_to_all(
        &mut self,
        send: Vec<u8>,
        chunk: usize,
        recv: Vec<u8>,
    ) -> Result<Request, CommError> {
        self.submit(Op::AllToAll { send, chunk, recv })
    }

    fn start_all_reduce_sum(&mut self, buf: Vec<f32>) -> Result<Request, CommError> {
        self.submit(Op::AllReduce(buf))
    }

    fn test(&mut self, req: &Request) -> Result<bool, CommError> {
        self.check_owner(req)?;
        loop {
            match self.results.try_recv() {
                Ok((got, outcome)) => {
                    self.done.insert(got, outcome);
                }
                Err(TryRecvError::Empty) => break,
                // Finished results are still in `done`; otherwise the
                // thread is gone and the request can never finish.
                Err(TryRecvError::Disconnected) => {
                    if self.done.contains_key(&req.id()) {
                        return Ok(true);
                    }
                    return Err(self.lost());
                }
            }
        }
        Ok(self.done.contains_key(&req.id()))
    }

    fn wait(&mut self, req: Request) -> Result<Completed, CommError> {
        self.check_owner(&req)?;
        match self.finish(req.id())? {
            Done::Public(c) => Ok(c),
            _ => Err(unexpected(self.rank)),
        }
    }
}
