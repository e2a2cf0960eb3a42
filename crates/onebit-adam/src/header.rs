//! The header exchanged before every collective of this crate:
//! every rank all-gathers `magic, op, dtype, status, n, step, layout` and checks all
//! of them, so a disagreement is an error on every rank instead of a hang or
//! silently mixed buffers.

use alloc::vec;
use comm_traits::{CommError, Communicator};

use crate::OneBitError;

/// Header size on the wire (little-endian fields).
pub(crate) const HEADER_BYTES: usize = 40;
const MAGIC: u32 = u32::from_le_bytes(*b"1BAR");

/// Only element type supported today (tagged so a future f16 path cannot be
/// mixed with it).
pub(crate) const DTYPE_F32: u32 = 1;

/// Which operation the ranks are about to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `compressed_allreduce`.
    CompressedAllReduce = 1,
    /// One step of the 1-bit Adam optimizer (all its collectives).
    OptimizerStep = 2,
    /// One step of the 0/1 Adam optimizer that communicates.
    ZeroOneStep = 3,
    /// One step of the 1-bit LAMB optimizer (all its collectives).
    LambStep = 4,
    /// `graded_allreduce` (the header's layout field carries the grade).
    GradedAllReduce = 5,
}

/// What this rank proposes; `status` is 0 when its input is acceptable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub(crate) op: Op,
    pub(crate) n: u64,
    pub(crate) step: u64,
    /// Fingerprint of anything else the ranks must share (group layout).
    pub(crate) layout: u64,
    pub(crate) status: u32,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(self.op as u32).to_le_bytes());
        b[8..12].copy_from_slice(&DTYPE_F32.to_le_bytes());
        b[12..16].copy_from_slice(&self.status.to_le_bytes());
        b[16..24].copy_from_slice(&self.n.to_le_bytes());
        b[24..32].copy_from_slice(&self.step.to_le_bytes());
        b[32..40].copy_from_slice(&self.layout.to_le_bytes());
        b
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// All-gather the headers and check them in rank order. Returns `Ok(())`
/// only if every rank proposed the same operation, dtype, length and step
/// and every rank's status is 0. When this rank's status is non-zero the
/// caller returns its own local error instead of the `RemoteInput` this
/// function reports for the first failing *other* rank.
pub(crate) fn agree(comm: &mut dyn Communicator, mine: &Header) -> Result<(), OneBitError> {
    let p = comm.size();
    let local = mine.encode();
    let mut all = vec![0u8; p * HEADER_BYTES];
    comm.all_gather(&local, &mut all)?;
    for theirs in all.chunks_exact(HEADER_BYTES) {
        let field = |name: &'static str, at: usize| -> Result<(), OneBitError> {
            let (l, r) = (u32_at(&local, at), u32_at(theirs, at));
            if l == r {
                Ok(())
            } else {
                Err(CommError::HeaderMismatch {
                    field: name,
                    local: l.into(),
                    remote: r.into(),
                }
                .into())
            }
        };
        field("magic", 0)?;
        field("op", 4)?;
        field("dtype", 8)?;
        let (ln, rn) = (u64_at(&local, 16), u64_at(theirs, 16));
        if ln != rn {
            return Err(CommError::LengthMismatch {
                local: ln,
                remote: rn,
            }
            .into());
        }
        let (ls, rs) = (u64_at(&local, 24), u64_at(theirs, 24));
        if ls != rs {
            return Err(CommError::HeaderMismatch {
                field: "step",
                local: ls,
                remote: rs,
            }
            .into());
        }
        let (ll, rl) = (u64_at(&local, 32), u64_at(theirs, 32));
        if ll != rl {
            return Err(CommError::HeaderMismatch {
                field: "layout",
                local: ll,
                remote: rl,
            }
            .into());
        }
    }
    for (rank, theirs) in all.chunks_exact(HEADER_BYTES).enumerate() {
        if u32_at(theirs, 12) != 0 {
            return Err(OneBitError::RemoteInput { rank });
        }
    }
    Ok(())
}

/// Exchange headers with this rank's local verdict folded in as `status`:
/// a rank whose own input was rejected returns its own error, the others
/// return [`OneBitError::RemoteInput`] — after the exchange, so nobody hangs.
pub(crate) fn exchange(
    comm: &mut dyn Communicator,
    op: Op,
    n: usize,
    step: u64,
    layout: u64,
    local: Result<(), OneBitError>,
) -> Result<(), OneBitError> {
    let header = Header {
        op,
        n: n as u64,
        step,
        layout,
        status: u32::from(local.is_err()),
    };
    let agreed = agree(comm, &header);
    local?;
    agreed
}
