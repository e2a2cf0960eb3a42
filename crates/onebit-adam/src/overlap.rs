//! [`overlapped_allreduce`]: the compressed all-reduce of several buckets
//! over a [`NonBlocking`] communicator, with each bucket's exchanges in
//! flight while the next bucket is compressed.
//!
//! Data flow and what overlaps with what, for buckets `0..K`:
//!
//! ```text
//! headers 0..K (blocking, nothing in flight yet)
//! W0 → start A0 │ W1 → start A1 │ wait A0, S0 → start G0 │ W2 → start A2 │ wait A1, S1 → start G1 │ …
//!                               then wait G0, D0 │ wait G1, D1 │ …
//! ```
//!
//! `Wk` compresses bucket `k` (worker error feedback, sign packing), `Ak`
//! is its all-to-all of sign chunks, `Sk` the server sum and compression of
//! the chunk this rank owns, `Gk` the all-gather of server signs and `Dk`
//! the decode into the bucket. So the worker compression of bucket `k+1`
//! runs while `Ak` travels, and the server step of `k` while `Ak+1`
//! travels. Every rank starts the requests in this same order.
//!
//! The arithmetic is step for step that of [`compressed_allreduce`] on each
//! bucket with its own [`AllReduceState`], so buffers, error-feedback
//! states, scales and byte counts are bit-identical to calling it once per
//! bucket (`tests/overlap.rs` checks this on `LocalComm`). Only the order
//! of the messages differs: the `K` header exchanges come first.
//!
//! Cost not yet removed: each call allocates its message buffers (about
//! `N/8` bytes per bucket and direction, plus the `N/P` server sum and, for
//! a length that is not a multiple of `8P`, a padded copy), where
//! `compressed_allreduce` reuses the state's scratch; a caller-held scratch
//! is the obvious next step once the pipeline is measured.
//!
//! [`compressed_allreduce`]: crate::compressed_allreduce

use alloc::vec;
use alloc::vec::Vec;

use comm_traits::{Collective, CommStats, NonBlocking, Request};
use onebit_codec::CodecError;

use crate::OneBitError;
use crate::allreduce::{AllReduceReport, AllReduceState, f32_at, non_finite, padded_len, recv_of};
use crate::header::{self, HEADER_BYTES, Op};

/// One bucket between its phases.
struct Flight {
    /// Elements per server chunk, sign bytes per chunk, bytes per message
    /// unit (chunk + scale).
    m: usize,
    cb: usize,
    unit: usize,
    /// The worker compression's outcome (`α` or why it failed; a failure
    /// is still exchanged, as a NaN scale, so every rank finishes).
    worker: Result<f32, CodecError>,
    beta: f32,
}

/// Average every bucket over all ranks with 1-bit compression and error
/// feedback, as [`compressed_allreduce`](crate::compressed_allreduce) does
/// for one buffer, with the exchanges of one bucket overlapped with the
/// compression of the next (see the module docs). `states[k]` is bucket
/// `k`'s error-feedback state (bound to it on first use, like
/// `compressed_allreduce`'s). Returns one report per bucket; its `bytes`
/// are that bucket's share (header, all-to-all, all-gather), the same as
/// `compressed_allreduce` reports.
///
/// # Errors
/// [`OneBitError::Config`] if `states.len() != buckets.len()` (before any
/// communication); otherwise those of `compressed_allreduce`, for the first
/// bucket that fails. A bucket that fails its header check (non-finite
/// input, state bound to another shape, ranks disagreeing) fails on every
/// rank before any payload moves, with every bucket and state unchanged.
pub fn overlapped_allreduce(
    comm: &mut dyn NonBlocking,
    buckets: &mut [&mut [f32]],
    states: &mut [AllReduceState],
) -> Result<Vec<AllReduceReport>, OneBitError> {
    if states.len() != buckets.len() {
        return Err(OneBitError::Config(
            "overlapped_allreduce needs one state per bucket",
        ));
    }
    let (p, rank) = (comm.size(), comm.rank());
    // Headers first, for every bucket: all ranks agree (or all fail) before
    // anything is in flight, and nothing is left half-done on an error.
    let mut first_err = None;
    for (buf, state) in buckets.iter().zip(states.iter()) {
        let n = buf.len();
        let local = onebit_codec::scale::check_finite(buf)
            .map_err(non_finite)
            .and_then(|()| state.check(n, p, rank));
        if let Err(e) = header::exchange(comm, Op::CompressedAllReduce, n, state.calls, 0, local) {
            first_err.get_or_insert(e);
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    for (buf, state) in buckets.iter().zip(states.iter_mut()) {
        state.bind(buf.len(), p, rank)?;
    }

    let k = buckets.len();
    let mut flights: Vec<Option<Flight>> = (0..k).map(|_| None).collect();
    let mut a_reqs: Vec<Option<Request>> = (0..k).map(|_| None).collect();
    let mut g_reqs: Vec<Option<Request>> = (0..k).map(|_| None).collect();
    // Pipeline: W(i) + start A(i), then S(i−1) + start G(i−1).
    for i in 0..=k {
        if i < k && !buckets[i].is_empty() {
            let (f, send) = worker_phase(buckets[i], &mut states[i], p)?;
            a_reqs[i] = Some(comm.start_all_to_all(send, f.unit, vec![0; p * f.unit])?);
            flights[i] = Some(f);
        }
        if i >= 1 {
            let j = i - 1;
            if let (Some(req), Some(f)) = (a_reqs[j].take(), flights[j].as_mut()) {
                let recv = recv_of(comm, req)?;
                let gather_send = server_phase(&recv, f, &mut states[j], p)?;
                g_reqs[j] = Some(comm.start_all_gather(gather_send, vec![0; p * f.unit])?);
            }
        }
    }
    let mut reports = Vec::with_capacity(k);
    for j in 0..k {
        let n = buckets[j].len();
        let mut report = AllReduceReport {
            len: n,
            padded_len: padded_len(n, p),
            worker_scale: 0.0,
            server_scale: 0.0,
            bytes: CommStats::default(),
        };
        report.bytes.record(Collective::AllGather, p, HEADER_BYTES);
        if let (Some(req), Some(f)) = (g_reqs[j].take(), flights[j].take()) {
            let recv = recv_of(comm, req)?;
            report.worker_scale = decode_phase(&recv, &f, buckets[j])?;
            report.server_scale = f.beta;
            report.bytes.record(Collective::AllToAll, p, f.unit);
            report.bytes.record(Collective::AllGather, p, f.unit);
        }
        states[j].calls += 1;
        reports.push(report);
    }
    Ok(reports)
}

/// `W`: pad and compress the bucket with the worker error feedback; the
/// all-to-all message (`P` sign chunks, each followed by `α`).
fn worker_phase(
    buf: &[f32],
    state: &mut AllReduceState,
    p: usize,
) -> Result<(Flight, Vec<u8>), OneBitError> {
    let n = buf.len();
    let big_n = padded_len(n, p);
    let m = big_n / p;
    let cb = m / 8;
    let unit = cb + 4;
    let worker = state
        .worker
        .as_mut()
        .ok_or(OneBitError::Config("unbound all-reduce state"))?;
    let mut signs = vec![0u8; big_n / 8];
    let result = if n == big_n {
        worker.compress_into(buf, &mut signs)
    } else {
        let mut padded = buf.to_vec();
        padded.resize(big_n, 0.0);
        worker.compress_into(&padded, &mut signs)
    };
    let alpha = *result.as_ref().unwrap_or(&f32::NAN);
    let mut send = vec![0u8; p * unit];
    for (dst, src) in send
        .chunks_exact_mut(unit)
        .zip(signs.chunks_exact(cb.max(1)))
    {
        dst[..cb].copy_from_slice(&src[..cb]);
        dst[cb..].copy_from_slice(&alpha.to_le_bytes());
    }
    let f = Flight {
        m,
        cb,
        unit,
        worker: result,
        beta: f32::NAN,
    };
    Ok((f, send))
}

/// `S`: the rank-order weighted sum of this rank's chunk from every rank,
/// compressed with the server error feedback; the all-gather message
/// (signs, then `β`). A failed worker anywhere makes `β` NaN.
fn server_phase(
    recv: &[u8],
    f: &mut Flight,
    state: &mut AllReduceState,
    p: usize,
) -> Result<Vec<u8>, OneBitError> {
    let (m, cb, unit) = (f.m, f.cb, f.unit);
    let server = state
        .server
        .as_mut()
        .ok_or(OneBitError::Config("unbound all-reduce state"))?;
    let pf = p as f32;
    let pieces: Vec<&[u8]> = recv.chunks_exact(unit).map(|c| &c[..cb]).collect();
    let scales: Vec<f32> = recv
        .chunks_exact(unit)
        .map(|c| f32_at(c, cb) / pf)
        .collect();
    let mut gather_send = vec![0u8; unit];
    let beta = if scales.iter().all(|a| a.is_finite()) {
        let mut sum = vec![0.0f32; m];
        onebit_codec::unpack_sum(&pieces, &scales, &mut sum).map_err(non_finite)?;
        server
            .compress_into(&sum, &mut gather_send[..cb])
            .unwrap_or(f32::NAN)
    } else {
        f32::NAN
    };
    gather_send[cb..].copy_from_slice(&beta.to_le_bytes());
    f.beta = beta;
    Ok(gather_send)
}

/// `D`: every rank's server signs and `β`, decoded into the bucket
/// (truncated to its length); returns `α`.
fn decode_phase(recv: &[u8], f: &Flight, buf: &mut [f32]) -> Result<f32, OneBitError> {
    let alpha = f.worker.map_err(non_finite)?;
    let (m, cb, unit) = (f.m, f.cb, f.unit);
    for (i, piece) in recv.chunks_exact(unit).enumerate() {
        if !f32_at(piece, cb).is_finite() {
            return Err(OneBitError::RemoteInput { rank: i });
        }
    }
    let n = buf.len();
    for (i, piece) in recv.chunks_exact(unit).enumerate() {
        let b = f32_at(piece, cb);
        let start = (i * m).min(n);
        let end = ((i + 1) * m).min(n);
        let out = &mut buf[start..end];
        let bytes = out.len().div_ceil(8);
        onebit_codec::unpack_signs(&piece[..bytes], b, out).map_err(non_finite)?;
    }
    Ok(alpha)
}
