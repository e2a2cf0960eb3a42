//! [`NonBlocking`]: collectives that are started now and completed later,
//! so computation can run while the bytes travel.
//!
//! Data flow: `start_*` takes **owned** buffers (`Vec<u8>` / `Vec<f32>`)
//! and returns a [`Request`]; the buffers belong to the backend while the
//! collective is in flight (no borrow of the caller's memory outlives the
//! call, so no lifetime or `unsafe` is involved). [`NonBlocking::wait`]
//! consumes the request and hands the buffers back as [`Completed`] (the
//! send buffer too, for reuse). Between `start` and `wait` the caller may
//! compute, start more requests, or test for completion.
//!
//! Semantics every implementation keeps:
//! - requests are collectives: every rank starts the same requests in the
//!   same order (blocking calls on the same communicator count in that
//!   order too); they may be **waited in any order**;
//! - a completed request is bit-identical to the blocking call with the
//!   same inputs, and [`Communicator::stats`] counts the same bytes;
//! - size errors are reported at `wait` on every rank, as the blocking call
//!   would report them ([`CommError::BadArgument`] on the offending rank,
//!   [`CommError::LengthMismatch`] on the others), and the group stays
//!   usable;
//! - waiting twice cannot be written: [`Request`] is neither `Clone` nor
//!   `Copy` and `wait` consumes it; a request waited on a communicator that
//!   did not start it is [`CommError::BadArgument`] ([`FOREIGN_REQUEST`]).
//!
//! ```compile_fail,E0382
//! use comm_traits::{CommError, NonBlocking};
//! fn twice(comm: &mut dyn NonBlocking) -> Result<(), CommError> {
//!     let req = comm.start_all_gather(vec![1, 2], vec![0; 2 * comm.size()])?;
//!     comm.wait(req)?;
//!     comm.wait(req)?; // error[E0382]: use of moved value: `req`
//!     Ok(())
//! }
//! ```

use alloc::vec::Vec;

use crate::{CommError, Communicator};

/// The [`CommError::BadArgument`] text of a [`Request`] waited on (or
/// tested by) a communicator that did not start it.
pub const FOREIGN_REQUEST: &str = "request was started on another communicator";

/// A collective in flight, returned by a `start_*` method of
/// [`NonBlocking`] and consumed by [`NonBlocking::wait`].
///
/// Deliberately neither `Clone` nor `Copy`: a request can be waited once.
/// Dropping it without waiting leaves the collective to complete in the
/// background (the other ranks are not affected); its buffers are then
/// released by the backend (see the implementation's docs for when).
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a started collective must be waited for its result"]
pub struct Request {
    owner: u64,
    id: u64,
}

impl Request {
    /// A request with the backend's identity `owner` (unique per
    /// communicator object) and sequence number `id`. For implementations
    /// of [`NonBlocking`]; users only receive requests.
    pub fn new(owner: u64, id: u64) -> Self {
        Self { owner, id }
    }

    /// The identity of the communicator that started this request.
    pub fn owner(&self) -> u64 {
        self.owner
    }

    /// The request's sequence number on its communicator (0, 1, 2, … in
    /// start order).
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// The buffers of a completed request, handed back by
/// [`NonBlocking::wait`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Completed {
    /// A byte collective (`all_gather`, `all_to_all`): the send buffer,
    /// unchanged, and the filled receive buffer.
    Bytes {
        /// The caller's send buffer, returned for reuse.
        send: Vec<u8>,
        /// The result, as the blocking call would have written it.
        recv: Vec<u8>,
    },
    /// An `all_reduce_sum`: the buffer, now holding the rank-order sum.
    Floats(Vec<f32>),
}

impl Completed {
    /// The receive buffer of a byte collective (`None` for an all-reduce).
    pub fn into_recv(self) -> Option<Vec<u8>> {
        match self {
            Self::Bytes { recv, .. } => Some(recv),
            Self::Floats(_) => None,
        }
    }

    /// The summed buffer of an all-reduce (`None` for a byte collective).
    pub fn into_floats(self) -> Option<Vec<f32>> {
        match self {
            Self::Floats(v) => Some(v),
            Self::Bytes { .. } => None,
        }
    }
}

/// Non-blocking collectives on top of [`Communicator`]: start now, wait
/// later (see the module docs for the data flow and the rules). Object
/// safe.
pub trait NonBlocking: Communicator {
    /// Start an [`all_gather`](Communicator::all_gather) of `send` into
    /// `recv` (which must be `size()·send.len()` bytes; its contents are
    /// overwritten).
    ///
    /// # Errors
    /// Only if the backend can no longer start anything (e.g.
    /// [`CommError::PeerLost`]); argument errors are reported by `wait`.
    fn start_all_gather(&mut self, send: Vec<u8>, recv: Vec<u8>) -> Result<Request, CommError>;

    /// Start an [`all_to_all`](Communicator::all_to_all) of `send` in
    /// chunks of `chunk` bytes into `recv` (both `size()·chunk` bytes).
    ///
    /// # Errors
    /// As [`NonBlocking::start_all_gather`].
    fn start_all_to_all(
        &mut self,
        send: Vec<u8>,
        chunk: usize,
        recv: Vec<u8>,
    ) -> Result<Request, CommError>;

    /// Start an [`all_reduce_sum`](Communicator::all_reduce_sum) of `buf`
    /// (rank-order sum, bit-identical to the blocking call).
    ///
    /// # Errors
    /// As [`NonBlocking::start_all_gather`].
    fn start_all_reduce_sum(&mut self, buf: Vec<f32>) -> Result<Request, CommError>;

    /// Whether `req` has completed (`wait` would return without blocking).
    /// Never blocks.
    ///
    /// # Errors
    /// [`CommError::BadArgument`] ([`FOREIGN_REQUEST`]) if `req` was started
    /// on another communicator; [`CommError::PeerLost`] if the backend died.
    fn test(&mut self, req: &Request) -> Result<bool, CommError>;

    /// Block until `req` completes and return its buffers.
    ///
    /// # Errors
    /// What the blocking collective would return for the same inputs
    /// (size errors, [`CommError::PeerLost`], [`CommError::Timeout`], …);
    /// [`CommError::BadArgument`] ([`FOREIGN_REQUEST`]) if `req` was started
    /// on another communicator.
    fn wait(&mut self, req: Request) -> Result<Completed, CommError>;
}
