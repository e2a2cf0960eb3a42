//! The compressed all-reduce (Tang et al. 2021, DeepSpeed's
//! `compressed_allreduce`): worker error feedback, all-to-all of sign
//! chunks, server error feedback, all-gather of the server signs.
//!
//! Wire layout per rank (besides the 40-byte header all-gather):
//! * all-to-all, chunk `j` = `[signs of p[j·N/P .. (j+1)·N/P] | α_r (f32 LE)]`;
//! * all-gather = `[signs of c_r | β_r (f32 LE)]`.
//!
//! Each scale travels with its signs, so a step costs three collectives
//! (header, all-to-all, all-gather) and the same bytes as separate scale
//! all-gathers.

use alloc::vec;
use alloc::vec::Vec;

use comm_traits::{CommError, CommStats, Communicator, NonBlocking, Request};
use onebit_codec::{CodecError, Compressor};

use crate::OneBitError;
use crate::header::{self, HEADER_BYTES, Op};

/// `N`: `n` rounded up to a multiple of `8·p` (so every rank's chunk is whole
/// bytes of signs). `p = 0` is treated as 1.
pub fn padded_len(n: usize, p: usize) -> usize {
    let unit = 8 * p.max(1);
    n.div_ceil(unit) * unit
}

/// Logical bytes one rank sends (= receives) in one [`compressed_allreduce`]
/// of `n` elements on `p` ranks, as counted by [`CommStats::record`]:
/// `(p−1)·(40 + 2·(N/(8p) + 4))` — the header, the sign chunks with their
/// worker scale, and the server signs with their scale. 0 for `p ≤ 1`.
pub fn compressed_allreduce_bytes(n: usize, p: usize) -> u64 {
    if p <= 1 {
        return 0;
    }
    let chunk = (padded_len(n, p) / (8 * p) + 4) as u64;
    (p as u64 - 1) * (HEADER_BYTES as u64 + 2 * chunk)
}

/// `‖e_w‖₂` and `‖e_s‖₂` of one error-feedback state (monitoring: a
/// healthy run keeps them stable).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ErrorNorms {
    /// Norm of the worker error (this rank's whole padded buffer).
    pub worker: f32,
    /// Norm of the server error (this rank's chunk).
    pub server: f32,
}

/// What one [`compressed_allreduce`] did on this rank.
///
/// ```
/// use basis_std::local::LocalComm;
/// use onebit_adam::comm_traits::Communicator;
/// use onebit_adam::{AllReduceState, compressed_allreduce, compressed_allreduce_bytes};
///
/// // Two ranks average 20 values each.
/// let reports = LocalComm::run(2, |mut comm| {
///     let mut buf = vec![comm.rank() as f32 + 1.0; 20];
///     compressed_allreduce(&mut comm, &mut buf, &mut AllReduceState::new())
/// });
/// for report in reports {
///     let report = report.unwrap()?;
///     // Padded to a multiple of 8·P = 16.
///     assert_eq!((report.len, report.padded_len), (20, 32));
///     assert_eq!(report.bytes.bytes_sent, compressed_allreduce_bytes(20, 2));
///     assert!(report.worker_scale > 0.0);
/// }
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct AllReduceReport {
    /// Elements reduced (`n`).
    pub len: usize,
    /// Padded length `N` (multiple of `8·P`).
    pub padded_len: usize,
    /// This rank's worker scale `α_r`.
    pub worker_scale: f32,
    /// This rank's server scale `β_r`.
    pub server_scale: f32,
    /// Bytes and calls of this reduction on this rank (header included).
    pub bytes: CommStats,
}

/// Shape an error-feedback state is bound to after its first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) len: usize,
    pub(crate) ranks: usize,
    pub(crate) rank: usize,
}

impl Shape {
    pub(crate) fn padded(&self) -> usize {
        padded_len(self.len, self.ranks)
    }
    pub(crate) fn server_len(&self) -> usize {
        self.padded() / self.ranks
    }
}

/// Error-feedback state of one buffer on one rank: the worker error `e_w`
/// (`N` elements), the server error `e_s` (`N/P`, this rank's chunk) and the
/// call counter the header checks. It binds to `(n, P, rank)` on its first
/// call; reuse it only for the same buffer.
///
/// # Example
///
/// ```
/// use comm_traits::SingleRank;
/// use onebit_adam::{AllReduceState, compressed_allreduce};
///
/// let mut state = AllReduceState::new();
/// let mut comm = SingleRank::default();
/// let mut buf = vec![0.5f32, -1.5, 2.0, -0.25];
/// let report = compressed_allreduce(&mut comm, &mut buf, &mut state)?;
/// assert_eq!((state.calls(), report.len), (1, 4));
/// // Signs survive 1-bit compression; what the scale loses is kept as error.
/// assert!(buf[0] > 0.0 && buf[1] < 0.0 && buf[2] > 0.0 && buf[3] < 0.0);
/// assert!(state.error_norms().worker > 0.0);
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct AllReduceState {
    pub(crate) shape: Option<Shape>,
    pub(crate) worker: Option<Compressor>,
    pub(crate) server: Option<Compressor>,
    pub(crate) calls: u64,
    scratch: Scratch,
}

/// Reused buffers (not state: never saved).
#[derive(Debug, Clone, Default)]
struct Scratch {
    padded: Vec<f32>,
    signs: Vec<u8>,
    send: Vec<u8>,
    recv: Vec<u8>,
    sum: Vec<f32>,
    gather_send: Vec<u8>,
    gather_recv: Vec<u8>,
}

impl AllReduceState {
    /// A fresh state (zero errors), bound on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Completed calls (the `step` field of the header).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// `(n, P, rank)` this state is bound to, if it has been used.
    pub fn shape(&self) -> Option<(usize, usize, usize)> {
        self.shape.map(|s| (s.len, s.ranks, s.rank))
    }

    /// A copy of the worker error `e_w` (`N` elements; empty before first use).
    pub fn worker_error(&self) -> Vec<f32> {
        copy_error(self.worker.as_ref())
    }

    /// A copy of the server error `e_s` (`N/P` elements; empty before first use).
    pub fn server_error(&self) -> Vec<f32> {
        copy_error(self.server.as_ref())
    }

    /// Elements in both error buffers (`N + N/P`; 0 before first use).
    pub(crate) fn error_len(&self) -> usize {
        [&self.worker, &self.server]
            .into_iter()
            .flatten()
            .map(Compressor::len)
            .sum()
    }

    /// `‖e_w‖₂`, `‖e_s‖₂`.
    pub fn error_norms(&self) -> ErrorNorms {
        ErrorNorms {
            worker: self.worker.as_ref().map_or(0.0, Compressor::error_norm),
            server: self.server.as_ref().map_or(0.0, Compressor::error_norm),
        }
    }

    /// Zero both error buffers (a periodic reset). All
    /// ranks must do it at the same call for the results to stay identical.
    pub fn reset_errors(&mut self) {
        for c in [&mut self.worker, &mut self.server].into_iter().flatten() {
            c.reset_error();
        }
    }

    /// Whether the state can serve `(n, p, rank)` (unbound, or bound to it).
    pub(crate) fn check(&self, len: usize, ranks: usize, rank: usize) -> Result<(), OneBitError> {
        match self.shape {
            None => Ok(()),
            Some(s) if s == (Shape { len, ranks, rank }) => Ok(()),
            Some(s) if s.len != len => Err(OneBitError::StateShape {
                expected: s.len as u64,
                found: len as u64,
            }),
            Some(s) if s.ranks != ranks => Err(OneBitError::StateShape {
                expected: s.ranks as u64,
                found: ranks as u64,
            }),
            Some(s) => Err(OneBitError::StateShape {
                expected: s.rank as u64,
                found: rank as u64,
            }),
        }
    }

    /// Bind the state to `(n, p, rank)` (fresh) or check that it is bound to it.
    pub(crate) fn bind(
        &mut self,
        len: usize,
        ranks: usize,
        rank: usize,
    ) -> Result<(), OneBitError> {
        self.check(len, ranks, rank)?;
        let want = Shape { len, ranks, rank };
        match self.shape {
            Some(_) => Ok(()),
            None => {
                self.shape = Some(want);
                self.worker = Some(Compressor::new(want.padded()));
                self.server = Some(Compressor::new(want.server_len()));
                Ok(())
            }
        }
    }

    /// Hand over the gathered server chunks of a reduction completed
    /// elsewhere (the split step's non-blocking all-gather), where
    /// [`server_signs`] reads them; returns the buffer they replace, for reuse.
    pub(crate) fn set_gathered(&mut self, recv: Vec<u8>) -> Vec<u8> {
        core::mem::replace(&mut self.scratch.gather_recv, recv)
    }

    /// Replace both error buffers (e.g. from a checkpoint) for shape `(n, P, rank)`.
    pub(crate) fn restore(
        &mut self,
        shape: Shape,
        calls: u64,
        worker: &[f32],
        server: &[f32],
    ) -> Result<(), CodecError> {
        let mut w = Compressor::new(shape.padded());
        let mut s = Compressor::new(shape.server_len());
        w.set_error(worker)?;
        s.set_error(server)?;
        *self = Self {
            shape: Some(shape),
            worker: Some(w),
            server: Some(s),
            calls,
            scratch: Scratch::default(),
        };
        Ok(())
    }
}

fn copy_error(c: Option<&Compressor>) -> Vec<f32> {
    c.map_or_else(Vec::new, |c| {
        let mut out = vec![0.0; c.len()];
        // Lengths match by construction.
        let _ = c.error_into(&mut out);
        out
    })
}

/// A codec failure as the optimizer reports it: a non-finite value at its
/// index, anything else an internal buffer-size slip. (Shared with the
/// non-blocking paths, `overlap.rs` and the split step.)
pub(crate) fn non_finite(e: CodecError) -> OneBitError {
    match e {
        CodecError::NonFinite { index } => OneBitError::NonFinite { index },
        _ => OneBitError::Config("internal buffer size"),
    }
}

/// The little-endian `f32` at byte `at` of a received unit (a scale after
/// its signs).
pub(crate) fn f32_at(b: &[u8], at: usize) -> f32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    f32::from_le_bytes(w)
}

/// The receive buffer of a completed non-blocking byte collective
/// (all-to-all or all-gather): waits for `req`.
pub(crate) fn recv_of(comm: &mut dyn NonBlocking, req: Request) -> Result<Vec<u8>, OneBitError> {
    comm.wait(req)?
        .into_recv()
        .ok_or(OneBitError::Comm(CommError::BadArgument(
            "a byte collective completed without bytes",
        )))
}

/// Average `buf` over all ranks with 1-bit compression and error feedback:
/// every rank ends with the same approximation of the **mean**
/// `(1/P)·Σ_r buf_r` (DeepSpeed's semantics: worker signs are weighted by
/// `α_i/P`). Steps:
///
/// 1. pad to `N` (multiple of `8P`), `p = x ⊕ 0 + e_w`, `α_r = ‖p‖₂/√N`,
///    `e_w ← p − α_r·σ(p)`;
/// 2. all-to-all the `P` sign chunks (each with `α_r`);
/// 3. server for chunk `r`: `c = Σ_{i=0}^{P−1} (α_i/P)·σ_i + e_s` (in rank
///    order, starting from 0), `β_r = ‖c‖₂/√(N/P)`, `e_s ← c − β_r·σ(c)`;
/// 4. all-gather server signs and `β`; every rank decodes the same `x̂`,
///    truncated to `n`, into `buf`;
/// 5. before all that, a header exchange (`n`, dtype, call counter, operation,
///    input verdict) so any disagreement fails on every rank.
///
/// Pass a concrete communicator as `&mut comm` (it coerces to `dyn`).
///
/// # Errors
/// - [`OneBitError::NonFinite`] if `buf` holds a NaN/±Inf (the other ranks get
///   [`OneBitError::RemoteInput`]);
/// - [`OneBitError::StateShape`] if `state` was used with another length,
///   group size or rank (the other ranks get `RemoteInput`);
/// - [`OneBitError::Comm`] with `LengthMismatch` / `HeaderMismatch` on every
///   rank when ranks disagree on `n` or on the call counter; transport errors.
///
/// In all these cases `buf` and `state` are unchanged. (A worker or server
/// sum that overflows `f32` after the header exchange is reported on every
/// rank as `NonFinite` / `RemoteInput`; the error buffers may then have
/// advanced.)
pub fn compressed_allreduce(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    state: &mut AllReduceState,
) -> Result<AllReduceReport, OneBitError> {
    let before = comm.stats();
    let (p, rank, n) = (comm.size(), comm.rank(), buf.len());
    let local = onebit_codec::scale::check_finite(buf)
        .map_err(non_finite)
        .and_then(|()| state.check(n, p, rank));
    header::exchange(comm, Op::CompressedAllReduce, n, state.calls, 0, local)?;
    state.bind(n, p, rank)?;
    let mut report = AllReduceReport {
        len: n,
        padded_len: padded_len(n, p),
        worker_scale: 0.0,
        server_scale: 0.0,
        bytes: CommStats::default(),
    };
    if n > 0 {
        let (alpha, beta) = reduce_bound(comm, buf, None, state)?;
        report.worker_scale = alpha;
        report.server_scale = beta;
    }
    state.calls += 1;
    report.bytes = comm.stats().since(&before);
    Ok(report)
}

/// Binds `state` to `buf` (length, ranks, this rank), runs steps 1–4
/// (nothing to send for an empty buffer) and counts the call, as 1-bit
/// Adam's per-group stage does for every variant. A binding error returns
/// before the call is counted, so the next step's header still agrees.
pub(crate) fn reduce_counted(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    momentum: Option<(f32, &[f32])>,
    state: &mut AllReduceState,
) -> Result<(f32, f32), OneBitError> {
    let r = reduce_counted_signs(comm, buf, momentum, state)?;
    if !buf.is_empty() {
        let n = buf.len();
        server_signs(state, n, comm.size())?.decode(0, buf);
    }
    Ok(r)
}

/// [`reduce_counted`] without step 4's decode: the reduced result stays
/// as the gathered server signs and scales, read with [`server_signs`] by
/// a caller that decodes it in the pass that uses it (1-bit Adam's update),
/// so the decoded buffer is never written out and read back.
pub(crate) fn reduce_counted_signs(
    comm: &mut dyn Communicator,
    buf: &[f32],
    momentum: Option<(f32, &[f32])>,
    state: &mut AllReduceState,
) -> Result<(f32, f32), OneBitError> {
    state.bind(buf.len(), comm.size(), comm.rank())?;
    let r = if buf.is_empty() {
        Ok((0.0, 0.0))
    } else {
        reduce_signs(comm, buf, momentum, state)
    };
    state.calls += 1;
    r
}

/// The reduced result of the last call on `state` (bound to `n` elements
/// over `p` ranks), as the gathered server signs (checked finite scales).
pub(crate) fn server_signs(
    state: &AllReduceState,
    n: usize,
    p: usize,
) -> Result<ServerSigns<'_>, OneBitError> {
    let m = padded_len(n, p) / p;
    let cb = m / 8;
    // An empty buffer sends nothing: nothing to decode either.
    let recv: &[u8] = if n == 0 {
        &[]
    } else {
        &state.scratch.gather_recv
    };
    if n > 0 && recv.len() != p * (cb + 4) {
        return Err(OneBitError::Config("internal buffer size"));
    }
    Ok(ServerSigns {
        recv,
        unit: cb + 4,
        cb,
        m,
        n,
    })
}

/// The all-gathered server chunks `[signs | β]` of one reduction: packed
/// element `j < n` is `±β_c` of chunk `c = j / m`, bit `j mod m` (Msb0) of
/// its signs (bit 1: `+β`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerSigns<'a> {
    recv: &'a [u8],
    unit: usize,
    cb: usize,
    m: usize,
    n: usize,
}

impl ServerSigns<'_> {
    /// Decode elements `start..start + out.len()` (within `n`) into `out`:
    /// the bits [`onebit_codec::unpack_signs`] gives for the whole buffer,
    /// for any start (an unaligned head bit by bit, the rest by bytes).
    pub(crate) fn decode(&self, start: usize, out: &mut [f32]) {
        debug_assert!(start + out.len() <= self.n);
        let (mut at, mut out) = (start, out);
        while !out.is_empty() {
            let c = at / self.m;
            let piece = &self.recv[c * self.unit..(c + 1) * self.unit];
            let beta = f32_at(piece, self.cb);
            let off = at - c * self.m;
            let take = out.len().min(self.m - off);
            let (here, rest) = core::mem::take(&mut out).split_at_mut(take);
            let head = ((8 - off % 8) % 8).min(take);
            for (i, o) in here[..head].iter_mut().enumerate() {
                let bit = (piece[(off + i) / 8] << ((off + i) % 8)) & 0x80 != 0;
                *o = if bit { beta } else { -beta };
            }
            let from = (off + head) / 8;
            let body = &mut here[head..];
            let bytes = body.len().div_ceil(8);
            // Lengths agree by construction (`off + take ≤ m`, `m = 8·cb`).
            let _ = onebit_codec::unpack_signs(&piece[from..from + bytes], beta, body);
            out = rest;
            at += take;
        }
    }
}

/// Steps 1–4 on a state already bound to this buffer (the header has been
/// agreed by the caller); returns `(α_r, β_r)`. With `momentum = Some((β₁,
/// g))` the reduced input is `β₁·buf + (1−β₁)·g` (1-bit Adam's local
/// momentum), formed inside the worker compressor's one pass; `buf` gets the
/// result either way, and only once everything has succeeded.
pub(crate) fn reduce_bound(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    momentum: Option<(f32, &[f32])>,
    state: &mut AllReduceState,
) -> Result<(f32, f32), OneBitError> {
    let r = reduce_signs(comm, buf, momentum, state)?;
    let n = buf.len();
    server_signs(state, n, comm.size())?.decode(0, buf);
    Ok(r)
}

/// Steps 1–4 of [`reduce_bound`] up to the all-gather of the server
/// chunks (scales checked), without decoding them ([`server_signs`]).
fn reduce_signs(
    comm: &mut dyn Communicator,
    buf: &[f32],
    momentum: Option<(f32, &[f32])>,
    state: &mut AllReduceState,
) -> Result<(f32, f32), OneBitError> {
    let p = comm.size();
    let n = buf.len();
    let big_n = padded_len(n, p);
    let m = big_n / p; // elements per server chunk
    let cb = m / 8; // sign bytes per chunk
    let unit = cb + 4; // chunk + its scale
    let AllReduceState {
        worker,
        server,
        scratch: s,
        ..
    } = state;
    let (Some(worker), Some(server)) = (worker.as_mut(), server.as_mut()) else {
        return Err(OneBitError::Config("unbound all-reduce state"));
    };

    // 1. Worker compression of the padded buffer.
    s.signs.resize(big_n / 8, 0);
    // A failure here (x + e overflowing) is still sent, as a NaN scale, so the
    // other ranks finish the exchange and fail too instead of hanging.
    let worker_result = match momentum {
        Some((b1, g)) if n == big_n => {
            worker.compress_blend_into(b1, buf, 1.0 - b1, g, &mut s.signs)
        }
        None if n == big_n => worker.compress_into(buf, &mut s.signs),
        _ => {
            s.padded.clear();
            match momentum {
                Some((b1, g)) => s
                    .padded
                    .extend(buf.iter().zip(g).map(|(&m, &g)| b1 * m + (1.0 - b1) * g)),
                None => s.padded.extend_from_slice(buf),
            }
            s.padded.resize(big_n, 0.0);
            worker.compress_into(&s.padded, &mut s.signs)
        }
    };
    let alpha = *worker_result.as_ref().unwrap_or(&f32::NAN);

    // 2. All-to-all of sign chunks, each followed by α_r.
    s.send.resize(p * unit, 0);
    for (dst, src) in s
        .send
        .chunks_exact_mut(unit)
        .zip(s.signs.chunks_exact(cb.max(1)))
    {
        dst[..cb].copy_from_slice(&src[..cb]);
        dst[cb..].copy_from_slice(&alpha.to_le_bytes());
    }
    s.recv.resize(p * unit, 0);
    comm.all_to_all(&s.send, unit, &mut s.recv)?;

    // 3. Server: rank-order weighted sum of the chunks (one pass over the
    // sum, every rank's signs decoded into it in order), then error
    // feedback; a worker that failed makes the server fail too.
    s.sum.resize(m, 0.0);
    let pf = p as f32;
    let pieces: Vec<&[u8]> = s.recv.chunks_exact(unit).map(|c| &c[..cb]).collect();
    let scales: Vec<f32> = s
        .recv
        .chunks_exact(unit)
        .map(|c| f32_at(c, cb) / pf)
        .collect();
    s.gather_send.resize(unit, 0);
    let beta = if scales.iter().all(|a| a.is_finite()) {
        onebit_codec::unpack_sum(&pieces, &scales, &mut s.sum).map_err(non_finite)?;
        server
            .compress_into(&s.sum, &mut s.gather_send[..cb])
            .unwrap_or(f32::NAN)
    } else {
        f32::NAN
    };
    s.gather_send[cb..].copy_from_slice(&beta.to_le_bytes());

    // 4. All-gather server signs and β; decode, truncated to n.
    s.gather_recv.resize(p * unit, 0);
    comm.all_gather(&s.gather_send, &mut s.gather_recv)?;
    if let Err(e) = worker_result {
        return Err(non_finite(e));
    }
    for (i, piece) in s.gather_recv.chunks_exact(unit).enumerate() {
        if !f32_at(piece, cb).is_finite() {
            return Err(OneBitError::RemoteInput { rank: i });
        }
    }
    Ok((alpha, beta))
}

#[cfg(test)]
mod tests {
    use super::{ServerSigns, padded_len};
    use alloc::vec;
    use alloc::vec::Vec;

    /// Gathered server chunks for `n` elements over `p` ranks: pseudo-random
    /// sign bytes, chunk `c`'s scale `c + 0.5`.
    fn chunks(n: usize, p: usize) -> (Vec<u8>, usize, usize) {
        let m = padded_len(n, p) / p;
        let cb = m / 8;
        let mut recv = Vec::new();
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for c in 0..p {
            for _ in 0..cb {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                recv.push(s as u8);
            }
            recv.extend_from_slice(&(c as f32 + 0.5).to_le_bytes());
        }
        (recv, m, cb)
    }

    /// `decode(start, len)` at every start and length (and long spans over
    /// the codec's vector and table paths) against the obvious per-element
    /// reading: chunk `j / m`, bit `j mod m` Msb0, 1 → `+β`.
    #[test]
    fn decode_any_range_matches_the_per_element_reading() {
        for (n, p) in [(50usize, 3usize), (64, 1), (130, 2), (40_000, 2)] {
            let (recv, m, cb) = chunks(n, p);
            let signs = ServerSigns {
                recv: &recv,
                unit: cb + 4,
                cb,
                m,
                n,
            };
            let want: Vec<f32> = (0..n)
                .map(|j| {
                    let (c, o) = (j / m, j % m);
                    let beta = c as f32 + 0.5;
                    let byte = recv[c * (cb + 4) + o / 8];
                    if (byte >> (7 - o % 8)) & 1 == 1 {
                        beta
                    } else {
                        -beta
                    }
                })
                .collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let step = if n > 1000 { 997 } else { 1 };
            for start in (0..n).step_by(step) {
                for len in (0..=n - start).step_by(step.max(1)) {
                    let mut out = vec![0.0f32; len];
                    signs.decode(start, &mut out);
                    assert_eq!(
                        bits(&out),
                        bits(&want[start..start + len]),
                        "n {n} {start}+{len}"
                    );
                }
            }
            let mut all = vec![0.0f32; n];
            signs.decode(0, &mut all);
            assert_eq!(bits(&all), bits(&want));
        }
    }
}
