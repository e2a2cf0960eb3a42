//! The graded all-reduce: [`crate::compressed_allreduce`]'s two-phase
//! scheme (worker error feedback, all-to-all, server error feedback,
//! all-gather; Tang et al. 2021) with a [`Grade`] codec instead of 1-bit
//! signs, for the parameter groups where 1 bit hurts.
//!
//! Per call on `P` ranks, `N` = `n` padded to a multiple of `8P`, `m = N/P`:
//! 1. worker: `p = x ⊕ 0 + e_w`; chunk `j` (`p[jm..(j+1)m]`) is encoded as
//!    its own frame (so a 2-bit chunk has its **own scale**), and
//!    `e_w ← p − Q(p)`;
//! 2. all-to-all of the `P` frames (`F = Grade::frame_len(m)` bytes each);
//! 3. server of chunk `r`: `c = (Σ_{i=0}^{P−1} Q_i) / P + e_s` (sum in rank
//!    order from `0.0`), encoded as one frame, `e_s ← c − Q(c)`;
//! 4. all-gather of the server frames; every rank decodes the same `x̂`,
//!    truncated to `n`.
//!
//! Bytes one rank sends (= receives): `(P−1)·2F`, plus the 40-byte header
//! `(P−1)·40` when called through [`graded_allreduce`] (1-bit Adam's step
//! has one header for all its groups). The error buffers change only when
//! the whole call succeeds.

use alloc::vec;
use alloc::vec::Vec;

use comm_traits::Communicator;
use onebit_codec::Grade;
use onebit_codec::graded::{decode, encode_residual};

use crate::OneBitError;
use crate::allreduce::{AllReduceReport, Shape, padded_len};
use crate::header::{self, HEADER_BYTES, Op};

/// Bytes one rank sends (= receives) in one [`graded_allreduce`] of `n`
/// elements on `p` ranks with `grade`: `(p−1)·(40 + 2·F)` with
/// `F = grade.frame_len(N/P)`; 0 for `p ≤ 1`.
///
/// ```
/// use onebit_adam::graded_allreduce_bytes;
/// use onebit_adam::Grade;
///
/// // 1000 elements on 4 ranks: N = 1024, 256 per chunk.
/// assert_eq!(graded_allreduce_bytes(Grade::TwoBit, 1000, 4), 3 * (40 + 2 * (64 + 4)));
/// assert_eq!(graded_allreduce_bytes(Grade::Bf16, 1000, 4), 3 * (40 + 2 * 512));
/// ```
pub fn graded_allreduce_bytes(grade: Grade, n: usize, p: usize) -> u64 {
    if p <= 1 {
        return 0;
    }
    (p as u64 - 1) * (HEADER_BYTES as u64 + graded_payload_bytes(grade, n, p))
}

/// Bytes of steps 2 and 4 only (no header): `2·F` per other rank's frame.
pub(crate) fn graded_payload_bytes(grade: Grade, n: usize, p: usize) -> u64 {
    let m = padded_len(n, p) / p.max(1);
    2 * grade.frame_len(m) as u64
}

/// Error-feedback state of one buffer on one rank for [`graded_allreduce`]:
/// worker error `e_w` (`N`), server error `e_s` (`N/P`), the grade and the
/// call counter. Binds to `(n, P, rank, grade)` on first use.
#[derive(Debug, Clone, Default)]
pub struct GradedState {
    pub(crate) shape: Option<Shape>,
    pub(crate) grade: Option<Grade>,
    pub(crate) worker: Vec<f32>,
    pub(crate) server: Vec<f32>,
    pub(crate) calls: u64,
    scratch: Scratch,
}

/// Reused buffers (not state: never saved).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scratch {
    p: Vec<f32>,
    c: Vec<f32>,
    send: Vec<u8>,
    recv: Vec<u8>,
    gather_send: Vec<u8>,
    gather_recv: Vec<u8>,
    out: Vec<f32>,
}

impl Scratch {
    /// Bytes of the buffers' lengths.
    pub(crate) fn bytes(&self) -> usize {
        let f = core::mem::size_of::<f32>();
        (self.p.len() + self.c.len() + self.out.len()) * f
            + self.send.len()
            + self.recv.len()
            + self.gather_send.len()
            + self.gather_recv.len()
    }
}

impl GradedState {
    /// A fresh state (zero errors), bound on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Completed calls.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The worker error `e_w` (`N` elements; empty before first use).
    pub fn worker_error(&self) -> &[f32] {
        &self.worker
    }

    /// The server error `e_s` (`N/P` elements; empty before first use).
    pub fn server_error(&self) -> &[f32] {
        &self.server
    }

    /// `‖e_w‖₂`, `‖e_s‖₂` (sums of squares in `f64`, in index order).
    pub fn error_norms(&self) -> crate::ErrorNorms {
        crate::ErrorNorms {
            worker: norm(&self.worker),
            server: norm(&self.server),
        }
    }

    /// Zero both error buffers (all ranks at the same call).
    pub fn reset_errors(&mut self) {
        self.worker.fill(0.0);
        self.server.fill(0.0);
    }

    /// Bind to `(len, ranks, rank, grade)` (fresh) or check that it is bound to it.
    pub(crate) fn bind(
        &mut self,
        len: usize,
        ranks: usize,
        rank: usize,
        grade: Grade,
    ) -> Result<(), OneBitError> {
        let want = Shape { len, ranks, rank };
        match (self.shape, self.grade) {
            (None, _) => {
                self.shape = Some(want);
                self.grade = Some(grade);
                self.worker = vec![0.0; want.padded()];
                self.server = vec![0.0; want.server_len()];
                Ok(())
            }
            (Some(s), Some(g)) if s == want && g == grade => Ok(()),
            (Some(s), _) if s.len != len => Err(OneBitError::StateShape {
                expected: s.len as u64,
                found: len as u64,
            }),
            (Some(s), _) if s.ranks != ranks => Err(OneBitError::StateShape {
                expected: s.ranks as u64,
                found: ranks as u64,
            }),
            (Some(s), _) if s.rank != rank => Err(OneBitError::StateShape {
                expected: s.rank as u64,
                found: rank as u64,
            }),
            _ => Err(OneBitError::Config("graded state bound to another grade")),
        }
    }

    /// Elements in both error buffers (`N + N/P`; 0 before first use).
    pub(crate) fn error_len(&self) -> usize {
        self.worker.len() + self.server.len()
    }
}

pub(crate) fn norm(v: &[f32]) -> f32 {
    let ss: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    num_traits::Float::sqrt(ss) as f32
}

/// Average `buf` over all ranks with `grade` and error feedback: every rank
/// ends with the same approximation of the mean (module docs for the steps;
/// a header exchange first, like [`crate::compressed_allreduce`]).
///
/// `worker_scale` in the report is the mean of this rank's `P` chunk
/// scales, `server_scale` the scale of its server chunk (both `1.0` for
/// [`Grade::Bf16`], which has none).
///
/// ```
/// use basis_std::local::LocalComm;
/// use onebit_adam::comm_traits::Communicator;
/// use onebit_adam::Grade;
/// use onebit_adam::{GradedState, graded_allreduce, graded_allreduce_bytes};
///
/// let out = LocalComm::run(2, |mut comm| {
///     let mut buf = vec![comm.rank() as f32 + 1.0; 20];
///     let r = graded_allreduce(&mut comm, &mut buf, Grade::Bf16, &mut GradedState::new())?;
///     assert_eq!(r.bytes.bytes_sent, graded_allreduce_bytes(Grade::Bf16, 20, 2));
///     Ok::<_, onebit_adam::OneBitError>(buf)
/// });
/// for buf in out {
///     // 1.5 is exact in bf16.
///     assert!(buf.unwrap()?.iter().all(|&x| x == 1.5));
/// }
/// # Ok::<(), onebit_adam::OneBitError>(())
/// ```
///
/// # Errors
/// As [`crate::compressed_allreduce`]: [`OneBitError::NonFinite`] /
/// [`OneBitError::RemoteInput`] for a NaN/±Inf input or an overflow,
/// [`OneBitError::StateShape`] for a state bound to another length, group
/// size or rank, [`OneBitError::Config`] for one bound to another grade,
/// [`OneBitError::Comm`] when ranks disagree (on `n`, the call counter or
/// the grade) or the transport fails. `buf` and `state` are unchanged then.
pub fn graded_allreduce(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    grade: Grade,
    state: &mut GradedState,
) -> Result<AllReduceReport, OneBitError> {
    let before = comm.stats();
    let (p, rank, n) = (comm.size(), comm.rank(), buf.len());
    let local = onebit_codec::check_finite(buf)
        .map_err(|_| OneBitError::NonFinite {
            index: buf.iter().position(|x| !x.is_finite()).unwrap_or(0),
        })
        .and_then(|()| state.clone_shape_check(n, p, rank, grade));
    let layout = u64::from(grade.bits());
    header::exchange(comm, Op::GradedAllReduce, n, state.calls, layout, local)?;
    let (alpha, beta) = reduce_counted(comm, buf, grade, state)?;
    Ok(AllReduceReport {
        len: n,
        padded_len: padded_len(n, p),
        worker_scale: alpha,
        server_scale: beta,
        bytes: comm.stats().since(&before),
    })
}

impl GradedState {
    /// [`Self::bind`]'s verdict without binding.
    fn clone_shape_check(
        &self,
        len: usize,
        ranks: usize,
        rank: usize,
        grade: Grade,
    ) -> Result<(), OneBitError> {
        let mut probe = Self {
            shape: self.shape,
            grade: self.grade,
            ..Self::default()
        };
        probe.bind(len, ranks, rank, grade)
    }
}

/// Bind, run steps 1–4 (nothing for an empty buffer) and count the call;
/// `buf` gets the reduced mean. Returns the scales (see [`graded_allreduce`]).
pub(crate) fn reduce_counted(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    grade: Grade,
    state: &mut GradedState,
) -> Result<(f32, f32), OneBitError> {
    state.bind(buf.len(), comm.size(), comm.rank(), grade)?;
    let r = if buf.is_empty() {
        Ok((0.0, 0.0))
    } else {
        reduce(comm, buf, grade, state)
    };
    state.calls += 1;
    r
}

/// A frame that fails every receiver's decode (a NaN scale, or a NaN bf16
/// element), sent by a rank whose own encode failed so the others fail at
/// the same step instead of waiting.
fn poison(grade: Grade, frame: &mut [u8]) {
    match grade {
        Grade::TwoBit => {
            let at = frame.len() - 4;
            frame[at..].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        _ => frame[..2].copy_from_slice(&0x7fc0u16.to_le_bytes()),
    }
}

fn reduce(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    grade: Grade,
    state: &mut GradedState,
) -> Result<(f32, f32), OneBitError> {
    let GradedState {
        worker,
        server,
        scratch,
        ..
    } = state;
    reduce_with(comm, buf, grade, Some((worker, server)), scratch)
}

/// The mean of `buf` over all ranks through `grade`'s codec **without**
/// error feedback (steps 1–4 with `e_w = e_s = 0`, nothing kept between
/// calls): `buf` gets every rank's same decoded mean, or is unchanged on an
/// error. 1-bit Adam's warm-up reduces its gradients this way under
/// [`crate::WarmupReduce::Bf16`]: a gradient's rounding error is not
/// carried into the next step, so no error buffers are kept or saved.
/// No header: the caller's step has one. `scratch` is only reused memory.
pub(crate) fn mean_without_feedback(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    grade: Grade,
    scratch: &mut Scratch,
) -> Result<(), OneBitError> {
    if buf.is_empty() {
        return Ok(());
    }
    reduce_with(comm, buf, grade, None, scratch).map(|_| ())
}

/// Steps 1–4 on `buf`, with the worker and server error buffers when
/// `errors` is given (updated only when the call succeeds), without error
/// feedback otherwise.
fn reduce_with(
    comm: &mut dyn Communicator,
    buf: &mut [f32],
    grade: Grade,
    mut errors: Option<(&mut [f32], &mut [f32])>,
    s: &mut Scratch,
) -> Result<(f32, f32), OneBitError> {
    let p = comm.size();
    let n = buf.len();
    let big_n = padded_len(n, p);
    let m = big_n / p;
    let f = grade.frame_len(m);

    // 1. Worker: p = x ⊕ 0 + e_w, one frame per destination chunk; the
    // residual stays in `s.p` until the call has succeeded.
    s.p.clear();
    match &errors {
        Some((worker, _)) => {
            s.p.extend(buf.iter().zip(worker.iter()).map(|(&x, &e)| x + e));
            // The padding's `x` is `0.0`: `0.0 + e` (so a `−0.0` error reads `+0.0`).
            s.p.extend(worker[n..].iter().map(|&e| 0.0 + e));
        }
        None => {
            s.p.extend_from_slice(buf);
            s.p.resize(big_n, 0.0);
        }
    }
    s.send.resize(p * f, 0);
    let mut failed = None;
    let mut scale_sum = 0.0f64;
    for (j, (chunk, frame)) in
        s.p.chunks_exact_mut(m)
            .zip(s.send.chunks_exact_mut(f))
            .enumerate()
    {
        match encode_residual(grade, chunk, frame) {
            Ok(a) => scale_sum += f64::from(a),
            Err(_) => {
                failed.get_or_insert(OneBitError::NonFinite { index: j * m });
                poison(grade, frame);
            }
        }
    }
    let alpha = (scale_sum / p as f64) as f32;

    // 2. All-to-all.
    s.recv.resize(p * f, 0);
    comm.all_to_all(&s.send, f, &mut s.recv)?;

    // 3. Server: rank-order sum of the decoded chunks, / P, + e_s.
    s.c.clear();
    s.c.resize(m, 0.0);
    let mut remote = None;
    for (i, frame) in s.recv.chunks_exact(f).enumerate() {
        if decode(grade, frame, &mut s.c, true).is_err() && remote.is_none() {
            remote = Some(i);
        }
    }
    let pf = p as f32;
    match &errors {
        Some((_, server)) => {
            for (c, &e) in s.c.iter_mut().zip(server.iter()) {
                *c = *c / pf + e;
            }
        }
        None => s.c.iter_mut().for_each(|c| *c /= pf),
    }
    s.gather_send.resize(f, 0);
    let beta = match remote {
        None => match encode_residual(grade, &mut s.c, &mut s.gather_send) {
            Ok(b) => b,
            Err(_) => {
                failed.get_or_insert(OneBitError::NonFinite {
                    index: rank_offset(comm, m),
                });
                poison(grade, &mut s.gather_send);
                f32::NAN
            }
        },
        Some(_) => {
            poison(grade, &mut s.gather_send);
            f32::NAN
        }
    };

    // 4. All-gather; decode every chunk (truncated to n) only once all
    // frames are known good.
    s.gather_recv.resize(p * f, 0);
    comm.all_gather(&s.gather_send, &mut s.gather_recv)?;
    if let Some(e) = failed {
        return Err(e);
    }
    if let Some(rank) = remote {
        return Err(OneBitError::RemoteInput { rank });
    }
    s.out.resize(big_n, 0.0);
    let out = &mut s.out;
    for (i, (frame, o)) in s
        .gather_recv
        .chunks_exact(f)
        .zip(out.chunks_exact_mut(m))
        .enumerate()
    {
        decode(grade, frame, o, false).map_err(|_| OneBitError::RemoteInput { rank: i })?;
    }
    buf.copy_from_slice(&out[..n]);
    if let Some((worker, server)) = errors.as_mut() {
        worker.copy_from_slice(&s.p);
        server.copy_from_slice(&s.c);
    }
    Ok((alpha, beta))
}

fn rank_offset(comm: &dyn Communicator, m: usize) -> usize {
    comm.rank() * m
}
