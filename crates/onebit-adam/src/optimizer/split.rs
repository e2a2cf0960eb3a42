//! The split step: [`OneBitAdam::begin_group`] starts one group's
//! collectives as soon as its gradient exists (a backward pass hands the
//! tower's layers over last first), [`OneBitAdam::finish`] completes them
//! and runs the update. The result is bit-identical to
//! [`OneBitAdam::step_with_grad_scaled`] on the whole gradient
//! (`tests/split_step.rs` checks it at P = 1..4 across the freeze).
//!
//! Data flow per group, over a [`NonBlocking`] communicator:
//! * full precision (warm-up, [`Policy::FullPrecision`], the final stage):
//!   the copy `f·g + 0.0` goes out in one non-blocking all-reduce; `finish`
//!   runs the fused Adam pass on the sum, as the blocking step does;
//! * 1-bit ([`Policy::OneBit`], [`Variant::Momentum`] or
//!   [`Variant::PreconditionedMomentum`]): `begin_group` forms the buffer
//!   the blocking step would compress, compresses it with the worker error
//!   feedback and starts its all-to-all; the *next* `begin_group` (or
//!   `finish`) waits for that all-to-all, runs the server stage and starts
//!   the all-gather; `finish` decodes in the update's pass. Every rank runs
//!   this same schedule, so the requests start in the same order;
//! * anything else (a [`Policy::Graded`] group or
//!   [`Variant::DecayedGradient`] in the compressed stage): the copy is
//!   kept and `finish` runs the blocking group step on it.
//!
//! The header exchange (step, length, layout, every group's input verdict)
//! comes last, in `finish`, after every request has completed: only then
//! is every rank's gradient known. So a NaN/±Inf gradient (unless
//! [`crate::Config::finite_check`] is [`crate::FiniteCheck::Off`]), a wrong length
//! or a missing group fails on every rank (`NonFinite` / `Length` /
//! `Config` here, `RemoteInput` elsewhere) with the optimizer state as it
//! was: the worker and server error buffers a group's compression advanced
//! are restored from copies taken in `begin_group` (the cost of that
//! guarantee: one copy of each compressing group's error buffers per step,
//! `4(N + N/P)` bytes read and written).
//!
//! Contract: every rank begins every group exactly once per step, in the
//! same order (any order: bits do not depend on it), then calls `finish`;
//! nothing else may use the communicator in between. A [`SplitStep`] is
//! one step: begin and finish must pair (a dropped one leaves its
//! collectives to complete in the background and the optimizer unchanged;
//! there is no state export of a half-done step).

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use comm_traits::{Collective, CommError, CommStats, Communicator, NonBlocking, Request};
use onebit_codec::CodecError;

use super::{
    FiniteCheck, Frozen, GroupTelemetry, OneBitAdam, Stage, StepReport, Variant, check_products,
    fill_checked, for_runs, for_runs_at, lend_snapshot,
};
use crate::OneBitError;
use crate::allreduce::{f32_at, non_finite, padded_len, recv_of};
use crate::header::{self, Op};
use crate::policy::{Policy, WarmupReduce};

/// One step in progress: what [`OneBitAdam::begin_group`] started, handed
/// to [`OneBitAdam::finish`]. Build it with [`SplitStep::default`].
#[derive(Debug, Default)]
pub struct SplitStep {
    /// Set by the first `begin_group`.
    started: Option<Started>,
    /// Per group, what was started (`None`: not begun).
    slots: Vec<Option<Slot>>,
    /// The compressing group whose all-to-all awaits its server stage.
    awaiting_server: Option<usize>,
    /// This rank's first input error (sent as the header's verdict).
    verdict: Option<OneBitError>,
    /// The first communication error met while starting or waiting.
    comm_error: Option<OneBitError>,
}

#[derive(Debug, Clone, Copy)]
struct Started {
    /// Statistics before the first request.
    before: CommStats,
    /// The step's number and stage, fixed at the first `begin_group`.
    t: u64,
    stage: Stage,
    /// The blocking step's `direct` (a full-precision group of one rank
    /// skips its all-reduce).
    direct: bool,
}

/// One group's part of the step.
#[derive(Debug)]
enum Slot {
    /// Full precision: the copy in flight (`req`), back in `buf` once done.
    Full {
        req: Option<Request>,
        buf: Vec<f32>,
        bytes: CommStats,
        /// A warm-up under [`crate::WarmupReduce::Bf16`]: `buf` is the mean
        /// copy, reduced blocking by `commit` (no request started).
        reduce_in_commit: bool,
    },
    /// 1-bit, pipelined.
    OneBit(Box<Flight>),
    /// Run blocking by `finish` on the copy.
    Later(Vec<f32>),
}

/// A compressing group between its phases.
#[derive(Debug)]
struct Flight {
    /// Elements per server chunk, sign bytes per chunk, bytes per unit.
    m: usize,
    cb: usize,
    unit: usize,
    /// `α` or why the worker stage failed (sent as a NaN scale).
    worker: Result<f32, CodecError>,
    beta: f32,
    a: Option<Request>,
    g: Option<Request>,
    gathered: Option<Vec<u8>>,
    backup: Backup,
    bytes: CommStats,
    /// Live coordinates (the buffer compressed).
    count: usize,
}

/// The error-feedback state as `begin_group` found it.
#[derive(Debug)]
enum Backup {
    Unbound,
    Bound {
        calls: u64,
        worker: Vec<f32>,
        server: Vec<f32>,
    },
}

impl OneBitAdam {
    /// The flat range of every group, in order (what
    /// [`Self::begin_group`] takes a gradient for).
    pub fn group_ranges(&self) -> Vec<core::ops::Range<usize>> {
        self.groups.iter().map(|g| g.range.clone()).collect()
    }

    /// Start group `gi`'s part of a step: `factor · grad` is this rank's
    /// gradient of the group (`grad.len()` = the group's length), its
    /// collectives start now (see the module docs of `split`); the update
    /// happens in [`Self::finish`]. The same bits as
    /// [`Self::step_with_grad_scaled`] on the whole gradient.
    ///
    /// # Errors
    /// Returned now, with nothing started (the step stays usable only if
    /// every rank makes the same mistake): `gi` out of range or begun
    /// twice, an accumulated gradient ([`Self::accumulate`]) waiting
    /// ([`OneBitError::Config`]). A transport failure starting a request
    /// ([`OneBitError::Comm`]): the group is broken, as after a failed
    /// collective of the blocking step (the group's error feedback may
    /// have advanced). A bad gradient (wrong length, NaN/±Inf, a
    /// non-finite `factor`) is **not** an error here: the group's requests
    /// start anyway (so no rank waits forever) and `finish` fails on every
    /// rank.
    pub fn begin_group(
        &mut self,
        comm: &mut dyn NonBlocking,
        split: &mut SplitStep,
        gi: usize,
        grad: &[f32],
        factor: f32,
    ) -> Result<(), OneBitError> {
        if gi >= self.groups.len() {
            return Err(OneBitError::Config("begin_group: no such group"));
        }
        if self.grad_count > 0 {
            return Err(OneBitError::Config(
                "begin_group: a gradient was accumulated; step() it first",
            ));
        }
        if split.slots.is_empty() {
            split.slots = (0..self.groups.len()).map(|_| None).collect();
        }
        if split.slots.len() != self.groups.len() || split.slots[gi].is_some() {
            return Err(OneBitError::Config(
                "begin_group: group already begun (or a split step of another optimizer)",
            ));
        }
        let started = *split.started.get_or_insert_with(|| {
            let t = self.step + 1;
            Started {
                before: comm.stats(),
                t,
                stage: self.stage_of(t),
                direct: self.direct(&*comm, Some((&[], factor))),
            }
        });
        let range = self.groups[gi].range.clone();
        let n = range.len();
        let mut local = if grad.len() != n {
            Err(OneBitError::Length {
                expected: n,
                found: grad.len(),
            })
        } else if !factor.is_finite() {
            Err(OneBitError::Config("gradient factor is not finite"))
        } else {
            Ok(())
        };
        let policy = self.groups[gi].spec.policy;
        let compressed = started.stage == Stage::Compressed && policy.compresses();
        let pipelined = compressed
            && policy == Policy::OneBit
            && matches!(
                self.config.variant,
                Variant::Momentum | Variant::PreconditionedMomentum
            );
        let check = self.config.finite_check;
        // A non-finite product at `index` of the group, as the whole step says it.
        let at = |index: usize| OneBitError::NonFinite {
            index: index + range.start,
        };
        // The mean copy `f·g + 0.0` (zeros for a gradient of the wrong
        // length), checked in its own pass: no read of `g` of its own.
        let copy = |g: &[f32], local: &mut Result<(), OneBitError>| -> Vec<f32> {
            let mut buf = vec![0.0; n];
            if g.len() == n
                && fill_checked(&mut buf, g.iter().map(|&g| g * factor + 0.0))
                && check == FiniteCheck::On
                && local.is_ok()
            {
                *local = Err(at(buf.iter().position(|v| !v.is_finite()).unwrap_or(0)));
            }
            buf
        };
        let slot = if pipelined {
            // The worker stage reads `g` in passes that write no copy: the
            // check is a pass of its own here, before any of them.
            if local.is_ok() {
                local = check_products(check, grad, factor).map_err(|e| match e {
                    OneBitError::NonFinite { index } => at(index),
                    e => e,
                });
            }
            if let Err(e) = &local {
                split.verdict.get_or_insert(e.clone());
            }
            let input = local.is_ok().then_some((grad, factor));
            let flight = self.start_one_bit(comm, gi, input)?;
            Slot::OneBit(Box::new(flight))
        } else if compressed {
            Slot::Later(copy(grad, &mut local))
        } else {
            let buf = copy(grad, &mut local);
            if let Err(e) = &local {
                split.verdict.get_or_insert(e.clone());
            }
            let mut bytes = CommStats::default();
            // The bf16 warm-up reduce has no non-blocking form: `commit`
            // runs the blocking step's.
            let reduce_in_commit = !started.direct
                && comm.size() > 1
                && started.stage == Stage::Warmup
                && self.config.warmup_reduce == WarmupReduce::Bf16;
            // One rank in the direct case: the blocking step skips the
            // all-reduce (the identity) and so does this.
            let (req, buf) = if started.direct || reduce_in_commit {
                (None, buf)
            } else {
                bytes.record(Collective::AllReduceSum, comm.size(), 4 * n);
                (Some(comm.start_all_reduce_sum(buf)?), Vec::new())
            };
            Slot::Full {
                req,
                buf,
                bytes,
                reduce_in_commit,
            }
        };
        if let Err(e) = local {
            split.verdict.get_or_insert(e);
        }
        let is_one_bit = matches!(slot, Slot::OneBit(_));
        split.slots[gi] = Some(slot);
        // The previous compressing group's all-to-all had this group's
        // backward to travel: its server stage now, then its all-gather.
        if let Some(j) = split.awaiting_server.take() {
            self.server_stage(comm, split, j);
        }
        if is_one_bit {
            split.awaiting_server = Some(gi);
        }
        Ok(())
    }

    /// The worker stage of a pipelined 1-bit group: the buffer the blocking
    /// step compresses, its compression with the worker error feedback
    /// (after a copy of the error buffers), and the all-to-all started.
    /// `input = None`: this rank's gradient is bad; it sends a NaN scale
    /// and compresses nothing.
    fn start_one_bit(
        &mut self,
        comm: &mut dyn NonBlocking,
        gi: usize,
        input: Option<(&[f32], f32)>,
    ) -> Result<Flight, OneBitError> {
        let (p, rank) = (comm.size(), comm.rank());
        let b1 = self.config.beta1;
        let range = self.groups[gi].range.clone();
        let frozen: Frozen = match self.groups[gi].frozen.take() {
            Some(f) if f.v_updates == self.groups[gi].v_updates => f,
            _ => self.freeze(gi),
        };
        let count = frozen.count;
        let state = &mut self.groups[gi].allreduce;
        let bind = state.check(count, p, rank);
        let backup = match (&state.shape, &state.worker, &state.server) {
            (Some(_), Some(w), Some(s)) => {
                let (mut we, mut se) = (vec![0.0; w.len()], vec![0.0; s.len()]);
                let _ = w.error_into(&mut we);
                let _ = s.error_into(&mut se);
                Backup::Bound {
                    calls: state.calls,
                    worker: we,
                    server: se,
                }
            }
            _ => Backup::Unbound,
        };
        let big_n = padded_len(count, p);
        let m = big_n / p;
        let cb = m / 8;
        let unit = cb + 4;
        let mut flight = Flight {
            m,
            cb,
            unit,
            worker: Err(CodecError::NonFinite { index: 0 }),
            beta: f32::NAN,
            a: None,
            g: None,
            gathered: None,
            backup,
            bytes: CommStats::default(),
            count,
        };
        // A state bound to another shape is this rank's input error (the
        // blocking step's header reports it); send a NaN scale instead.
        let input = match bind {
            Ok(()) => input,
            Err(_) => None,
        };
        if count == 0 {
            // Nothing live: the blocking step sends nothing either.
            let _ = self.groups[gi].allreduce.bind(count, p, rank);
            self.groups[gi].frozen = Some(frozen);
            return Ok(flight);
        }
        let mut signs = vec![0u8; big_n / 8];
        if let Some((g, f)) = input {
            let _ = self.groups[gi].allreduce.bind(count, p, rank);
            let mut packed = core::mem::take(&mut self.scratch_packed);
            let m_all = &self.m[range];
            let all_live = count == m_all.len();
            // The buffer compressed, formed with the blocking step's
            // arithmetic for each variant (`one_bit_group`, `reduce_signs`).
            let blend = match self.config.variant {
                Variant::Momentum if all_live && count == big_n => {
                    // `compress_blend_into(β₁, m, 1−β₁, ḡ)`, ḡ the mean copy.
                    packed.clear();
                    packed.extend(g.iter().map(|&g| g * f + 0.0));
                    true
                }
                Variant::Momentum => {
                    packed.resize(count, 0.0);
                    for_runs(&frozen.live, &mut packed, |r, out| {
                        for ((o, &m), &g) in out.iter_mut().zip(&m_all[r.clone()]).zip(&g[r]) {
                            *o = b1 * m + (1.0 - b1) * (g * f + 0.0);
                        }
                    });
                    false
                }
                _ => {
                    let (d, cap) = (&frozen.denom, frozen.cap);
                    packed.resize(count, 0.0);
                    for_runs_at(&frozen.live, &mut packed, |r, k, out| {
                        let d = &d[k..k + out.len()];
                        let (m, g) = (&m_all[r.clone()], &g[r]);
                        for (((o, &m), &g), &d) in out.iter_mut().zip(m).zip(g).zip(d) {
                            *o = ((b1 * m + (1.0 - b1) * (g * f + 0.0)) / d).clamp(-cap, cap);
                        }
                    });
                    false
                }
            };
            let state = &mut self.groups[gi].allreduce;
            if let Some(worker) = state.worker.as_mut() {
                flight.worker = if blend {
                    worker.compress_blend_into(b1, m_all, 1.0 - b1, &packed, &mut signs)
                } else if count == big_n {
                    worker.compress_into(&packed, &mut signs)
                } else {
                    packed.resize(big_n, 0.0);
                    worker.compress_into(&packed, &mut signs)
                };
            }
            self.scratch_packed = packed;
        }
        self.groups[gi].frozen = Some(frozen);
        let alpha = *flight.worker.as_ref().unwrap_or(&f32::NAN);
        let mut send = vec![0u8; p * unit];
        for (dst, src) in send
            .chunks_exact_mut(unit)
            .zip(signs.chunks_exact(cb.max(1)))
        {
            dst[..cb].copy_from_slice(&src[..cb]);
            dst[cb..].copy_from_slice(&alpha.to_le_bytes());
        }
        flight.bytes.record(Collective::AllToAll, p, unit);
        flight.a = Some(comm.start_all_to_all(send, unit, vec![0; p * unit])?);
        Ok(flight)
    }

    /// Group `j`'s server stage: wait for its all-to-all, sum this rank's
    /// chunk in rank order, compress it with the server error feedback
    /// (a NaN worker scale anywhere: a NaN `β`, nothing compressed), start
    /// the all-gather. Errors are kept for `finish`.
    fn server_stage(&mut self, comm: &mut dyn NonBlocking, split: &mut SplitStep, j: usize) {
        let p = comm.size();
        let Some(Some(Slot::OneBit(f))) = split.slots.get_mut(j) else {
            return;
        };
        let Some(req) = f.a.take() else {
            return;
        };
        let recv = match recv_of(comm, req) {
            Ok(r) => r,
            Err(e) => {
                split.comm_error.get_or_insert(e);
                return;
            }
        };
        let (m, cb, unit) = (f.m, f.cb, f.unit);
        let pf = p as f32;
        let scales: Vec<f32> = recv
            .chunks_exact(unit)
            .map(|c| f32_at(c, cb) / pf)
            .collect();
        let mut gather_send = vec![0u8; unit];
        let server = self.groups[j].allreduce.server.as_mut();
        let beta = match server {
            Some(server) if scales.iter().all(|a| a.is_finite()) => {
                let pieces: Vec<&[u8]> = recv.chunks_exact(unit).map(|c| &c[..cb]).collect();
                let mut sum = vec![0.0f32; m];
                match onebit_codec::unpack_sum(&pieces, &scales, &mut sum) {
                    Ok(()) => server
                        .compress_into(&sum, &mut gather_send[..cb])
                        .unwrap_or(f32::NAN),
                    Err(_) => f32::NAN,
                }
            }
            _ => f32::NAN,
        };
        gather_send[cb..].copy_from_slice(&beta.to_le_bytes());
        f.beta = beta;
        f.bytes.record(Collective::AllGather, p, unit);
        match comm.start_all_gather(gather_send, vec![0; p * unit]) {
            Ok(r) => f.g = Some(r),
            Err(e) => {
                split.comm_error.get_or_insert(e.into());
            }
        }
    }

    /// Complete the step [`Self::begin_group`] started: wait for every
    /// request, agree on the header (step, length, layout, every rank's
    /// verdict), then update `params` group by group as
    /// [`Self::step_with_grad_scaled`] does.
    ///
    /// # Errors
    /// As [`Self::step`], on every rank, with the optimizer state unchanged:
    /// a bad gradient or length ([`OneBitError::NonFinite`],
    /// [`OneBitError::Length`]; [`OneBitError::RemoteInput`] on the other
    /// ranks), a group not begun ([`OneBitError::Config`]), disagreeing
    /// ranks or a failed collective ([`OneBitError::Comm`]). As in the
    /// blocking step, a worker or server sum overflowing `f32` is reported
    /// on every rank (`NonFinite`/`RemoteInput`), state restored.
    pub fn finish(
        &mut self,
        comm: &mut dyn NonBlocking,
        mut split: SplitStep,
        params: &mut [f32],
    ) -> Result<StepReport, OneBitError> {
        if let Some(j) = split.awaiting_server.take() {
            self.server_stage(comm, &mut split, j);
        }
        // Drain: every request completes before anything is decided.
        for slot in split.slots.iter_mut().flatten() {
            let done = match slot {
                Slot::Full { req, buf, .. } => req.take().map(|r| {
                    comm.wait(r).and_then(|c| {
                        *buf = c.into_floats().ok_or(CommError::BadArgument(
                            "an all-reduce completed without floats",
                        ))?;
                        Ok(())
                    })
                }),
                Slot::OneBit(f) => {
                    let mut r = None;
                    if let Some(a) = f.a.take() {
                        r = Some(comm.wait(a).map(|_| ()));
                    }
                    if let Some(g) = f.g.take() {
                        r = Some(recv_of(comm, g).map(|b| f.gathered = Some(b)).map_err(
                            |e| match e {
                                OneBitError::Comm(c) => c,
                                _ => CommError::BadArgument("gather"),
                            },
                        ));
                    }
                    r
                }
                Slot::Later(_) => None,
            };
            if let Some(Err(e)) = done {
                split.comm_error.get_or_insert(e.into());
            }
        }
        let Some(started) = split.started else {
            return Err(OneBitError::Config("finish: no group was begun"));
        };
        let mut local = match split.verdict.take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        if local.is_ok() && params.len() != self.len {
            local = Err(OneBitError::Length {
                expected: self.len,
                found: params.len(),
            });
        }
        if local.is_ok() && split.slots.iter().any(Option::is_none) {
            local = Err(OneBitError::Config("finish: a group was not begun"));
        }
        if local.is_ok()
            && let Some((rank, size)) = self.bound
            && (rank, size) != (comm.rank(), comm.size())
        {
            local = Err(OneBitError::StateShape {
                expected: size as u64,
                found: comm.size() as u64,
            });
        }
        for (gi, slot) in split.slots.iter().enumerate() {
            if local.is_ok()
                && let Some(Slot::OneBit(f)) = slot
                && let Err(e) = self.groups[gi]
                    .allreduce
                    .check(f.count, comm.size(), comm.rank())
            {
                local = Err(e);
            }
        }
        let agreed = header::exchange(
            comm,
            Op::OptimizerStep,
            self.len,
            self.step,
            self.layout(),
            local,
        );
        let outcome = agreed.and_then(|()| match split.comm_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        });
        let outcome = outcome.and_then(|()| check_scales(&split));
        if let Err(e) = outcome {
            self.restore(&mut split);
            return Err(e);
        }
        self.commit(comm, split, started, params)
    }

    /// Put every pipelined group's error feedback back as `begin_group`
    /// found it.
    fn restore(&mut self, split: &mut SplitStep) {
        for (gi, slot) in split.slots.iter_mut().enumerate() {
            let Some(Slot::OneBit(f)) = slot else {
                continue;
            };
            let state = &mut self.groups[gi].allreduce;
            match core::mem::replace(&mut f.backup, Backup::Unbound) {
                Backup::Unbound => {
                    state.shape = None;
                    state.worker = None;
                    state.server = None;
                }
                Backup::Bound {
                    calls,
                    worker,
                    server,
                } => {
                    state.calls = calls;
                    if let Some(w) = state.worker.as_mut() {
                        let _ = w.set_error(&worker);
                    }
                    if let Some(s) = state.server.as_mut() {
                        let _ = s.set_error(&server);
                    }
                }
            }
        }
    }

    /// The agreed step: `step_inner`'s bookkeeping around each group's
    /// update, in group order (`run_groups`), from the completed requests.
    fn commit(
        &mut self,
        comm: &mut dyn NonBlocking,
        split: SplitStep,
        started: Started,
        params: &mut [f32],
    ) -> Result<StepReport, OneBitError> {
        let Started {
            before, t, stage, ..
        } = started;
        self.bound = Some((comm.rank(), comm.size()));
        self.grad_count = 0;
        let (planned, mut snapshot) = self.plan_measure(t, stage);
        let mut sums = (0.0f64, 0.0f64);
        let mut measure = planned.map(|c| (&mut snapshot[..], c, &mut sums));
        let mut at_snapshot = 0;
        let mut groups = Vec::with_capacity(self.groups.len());
        let mut result = Ok(());
        for (gi, slot) in split.slots.into_iter().enumerate() {
            let policy = self.groups[gi].spec.policy;
            let compressed = stage == Stage::Compressed && policy.compresses();
            let range = self.groups[gi].range.clone();
            let mut scales = (0.0, 0.0);
            let mut bytes = CommStats::default();
            let step = match slot {
                Some(Slot::OneBit(f)) => {
                    bytes = f.bytes;
                    scales = (*f.worker.as_ref().unwrap_or(&f32::NAN), f.beta);
                    if f.count == 0 {
                        scales = (0.0, 0.0);
                    }
                    self.finish_pipelined(gi, t, &mut params[range], *f)
                }
                Some(Slot::Later(copy)) => {
                    let at = comm.stats();
                    let r = self.blocking_group(comm, gi, t, &copy, &mut params[range]);
                    bytes = comm.stats().since(&at);
                    r.map(|s| scales = s)
                }
                Some(Slot::Full {
                    mut buf,
                    bytes: b,
                    reduce_in_commit,
                    ..
                }) => {
                    let warmup = stage == Stage::Warmup;
                    let lent = lend_snapshot(&mut measure, &mut at_snapshot, policy, range.len());
                    let comm: &mut dyn Communicator = &mut *comm;
                    let at = comm.stats();
                    let grad = if reduce_in_commit {
                        super::Grad::Mean(&mut buf)
                    } else {
                        super::Grad::Reduced(&buf)
                    };
                    let r = self.full_group(comm, gi, t, grad, &mut params[range], warmup, lent);
                    bytes = b;
                    bytes += comm.stats().since(&at);
                    r
                }
                None => Err(OneBitError::Config("finish: a group was not begun")),
            };
            if let Err(e) = step {
                result = Err(e);
                break;
            }
            let watch = self.config.telemetry;
            groups.push(GroupTelemetry {
                policy,
                compressed,
                bytes,
                worker_scale: scales.0,
                server_scale: scales.1,
                error_norms: watch.then(|| self.group_error_norms(gi)),
                sign_flips: if watch { self.sign_flips(gi) } else { None },
            });
        }
        self.sum_finite = true;
        self.freeze.snapshot = snapshot;
        result?;
        Ok(self.conclude(
            t,
            stage,
            (planned, sums),
            comm.stats().since(&before),
            groups,
        ))
    }

    /// A pipelined group's update from its gathered server chunks, as
    /// `one_bit_group` + `finish_one_bit` leave it.
    fn finish_pipelined(
        &mut self,
        gi: usize,
        t: u64,
        x: &mut [f32],
        f: Flight,
    ) -> Result<(), OneBitError> {
        let packed_momentum = matches!(self.config.variant, Variant::Momentum)
            && f.count != self.groups[gi].range.len();
        let state = &mut self.groups[gi].allreduce;
        state.calls += 1;
        if let Some(g) = f.gathered {
            let _ = state.set_gathered(g);
        }
        if packed_momentum && f.count > 0 {
            let p = state.shape.map_or(1, |s| s.ranks);
            let mut packed = core::mem::take(&mut self.scratch_packed);
            packed.resize(f.count, 0.0);
            crate::allreduce::server_signs(state, f.count, p)?.decode(0, &mut packed);
            let range = self.groups[gi].range.clone();
            let m = &mut self.m[range];
            if let Some(frozen) = &self.groups[gi].frozen {
                for_runs(&frozen.live, &mut packed, |r, out| {
                    m[r].copy_from_slice(out)
                });
            }
            self.scratch_packed = packed;
        }
        self.finish_one_bit(gi, t, x)
    }

    /// A compressed group the pipeline does not run (graded, the
    /// decayed-gradient variant), on the mean copy: `run_groups`' blocking
    /// branch; returns the scales.
    fn blocking_group(
        &mut self,
        comm: &mut dyn NonBlocking,
        gi: usize,
        t: u64,
        copy: &[f32],
        x: &mut [f32],
    ) -> Result<(f32, f32), OneBitError> {
        let comm: &mut dyn Communicator = &mut *comm;
        if let Policy::Graded(grade) = self.groups[gi].spec.policy {
            let s = self.graded_group(comm, gi, copy, grade)?;
            self.update(gi, t, x)?;
            Ok(s)
        } else {
            let s = self.one_bit_group(comm, gi, copy, None)?;
            self.finish_one_bit(gi, t, x)?;
            Ok(s)
        }
    }
}

/// The failures the blocking step finds after its all-gather: this rank's
/// worker stage failed (`NonFinite`), or some rank's server scale is not
/// finite (`RemoteInput`).
fn check_scales(split: &SplitStep) -> Result<(), OneBitError> {
    for slot in split.slots.iter().flatten() {
        let Slot::OneBit(f) = slot else { continue };
        if f.count == 0 {
            continue;
        }
        f.worker.map_err(non_finite)?;
        let recv = f
            .gathered
            .as_deref()
            .ok_or(OneBitError::Config("internal: no gathered chunks"))?;
        for (i, piece) in recv.chunks_exact(f.unit).enumerate() {
            if !f32_at(piece, f.cb).is_finite() {
                return Err(OneBitError::RemoteInput { rank: i });
            }
        }
    }
    Ok(())
}
