//! The MPI check of non-blocking collectives, run by `cargo xtask mpi` under
//! `mpirun -np N` (N = 2, 3, 4): `MpiComm` is built on `basis-std`'s
//! `Overlapped` communication thread (MPI initialised and used only there),
//! every rank starts all-gathers, all-to-alls and all-reduces of awkward
//! lengths before waiting any of them, waits them in a rank-dependent
//! order, and checks the results bit for bit, and the byte statistics,
//! against (a) the same collectives run blocking through the same MPI
//! communicator and (b) `LocalComm`'s blocking calls in-process. Then a
//! size error on one rank must be an error on every rank, with the
//! requests around it intact. Finally `onebit-adam`'s
//! `overlapped_allreduce` (buckets pipelined over these requests) must
//! equal `compressed_allreduce` once per bucket on `LocalComm`, bit for
//! bit, over three calls, and `OneBitAdam`'s split step (`begin_group` per
//! group, last first, then `finish`) over MPI must equal its blocking
//! `step_with_grad_scaled` over MPI and on `LocalComm`, bit for bit
//! (parameters, state record, reports), across the freeze.

use std::process::ExitCode;

use basis_std::local::LocalComm;
use basis_std::overlap::Overlapped;
use comm_mpi::MpiComm;
use comm_mpi::comm_traits::{CommError, CommStats, Communicator, Completed, NonBlocking};
use onebit_adam::{
    AllReduceState, Config, GroupSpec, OneBitAdam, SplitStep, Variant, compressed_allreduce,
    overlapped_allreduce,
};

/// SplitMix64, so every process can rebuild every rank's inputs.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Floats over many magnitudes with signed zeros: the summation order
/// shows in the bits.
fn floats(seed: u64, rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let u = mix(seed ^ ((rank as u64) << 40) ^ ((i as u64) << 1));
            let m = match u % 13 {
                0 => -0.0,
                _ => ((u >> 8) % 2_000_000) as f32 / 1e6 - 1.0,
            };
            m * 2f32.powi(((u >> 40) % 40) as i32 - 20)
        })
        .collect()
}

fn bytes(seed: u64, rank: usize, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| mix(seed.rotate_left(9) ^ ((rank as u64) << 36) ^ i as u64) as u8)
        .collect()
}

/// Operation `k` of the plan: kind (0 all-gather, 1 all-to-all, 2
/// all-reduce) and length (bytes per rank, chunk, or floats).
fn plan(p: usize) -> Vec<(u8, usize)> {
    let mut v = Vec::new();
    for n in [0, 1, 7, 8 * p - 1, 8 * p + 1, 100_003] {
        v.extend([(2, n), (0, n), (1, n)]);
    }
    v
}

/// Inputs of operation `k` on `rank`: send bytes, floats, receive length.
fn input(plan: &[(u8, usize)], k: usize, rank: usize, p: usize) -> (Vec<u8>, Vec<f32>, usize) {
    let (kind, n) = plan[k];
    let seed = 7000 + k as u64;
    match kind {
        0 => (bytes(seed, rank, n), Vec::new(), n * p),
        1 => (bytes(seed, rank, n * p), Vec::new(), n * p),
        _ => (Vec::new(), floats(seed, rank, n), n),
    }
}

/// A result as bytes (floats by their bits, so -0.0 ≠ 0.0).
fn float_bits(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

/// The plan with blocking calls.
fn blocking(comm: &mut dyn Communicator) -> Result<(Vec<Vec<u8>>, CommStats), CommError> {
    let (p, me) = (comm.size(), comm.rank());
    let plan = plan(p);
    let before = comm.stats();
    let mut outs = Vec::new();
    for (k, &(kind, n)) in plan.iter().enumerate() {
        let (send, mut buf, recv_len) = input(&plan, k, me, p);
        let mut recv = vec![0u8; recv_len];
        match kind {
            0 => comm.all_gather(&send, &mut recv)?,
            1 => comm.all_to_all(&send, n, &mut recv)?,
            _ => comm.all_reduce_sum(&mut buf)?,
        }
        outs.push(if kind == 2 { float_bits(&buf) } else { recv });
    }
    Ok((outs, comm.stats().since(&before)))
}

/// The plan with every request started before any wait, waited in an
/// order that depends on the rank (forward, reversed, or interleaved).
fn nonblocking(comm: &mut dyn NonBlocking) -> Result<(Vec<Vec<u8>>, CommStats), CommError> {
    let (p, me) = (comm.size(), comm.rank());
    let plan = plan(p);
    let before = comm.stats();
    let mut reqs = Vec::new();
    for (k, &(kind, n)) in plan.iter().enumerate() {
        let (send, buf, recv_len) = input(&plan, k, me, p);
        let recv = vec![0x5Au8; recv_len];
        reqs.push(Some(match kind {
            0 => comm.start_all_gather(send, recv)?,
            1 => comm.start_all_to_all(send, n, recv)?,
            _ => comm.start_all_reduce_sum(buf)?,
        }));
    }
    let m = plan.len();
    let order: Vec<usize> = match me % 3 {
        0 => (0..m).collect(),
        1 => (0..m).rev().collect(),
        _ => (0..m).map(|i| (i * 5 + me) % m).collect(),
    };
    let mut outs = vec![Vec::new(); m];
    for k in order {
        let req = reqs[k]
            .take()
            .ok_or(CommError::BadArgument("order repeats"))?;
        outs[k] = match comm.wait(req)? {
            Completed::Bytes { recv, .. } => recv,
            Completed::Floats(v) => float_bits(&v),
            _ => return Err(CommError::BadArgument("unknown completion")),
        };
    }
    Ok((outs, comm.stats().since(&before)))
}

/// A size error on the last rank between two good requests: every rank
/// gets an error for it, and the good ones complete.
fn error_parity(comm: &mut dyn NonBlocking) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    let e = |e: CommError| e.to_string();
    let first = comm.start_all_reduce_sum(vec![1.0; 5]).map_err(e)?;
    let recv_len = if me == p - 1 { 3 * p - 1 } else { 3 * p };
    let bad = comm
        .start_all_gather(vec![1, 2, 3], vec![0; recv_len])
        .map_err(e)?;
    let last = comm
        .start_all_gather(vec![me as u8], vec![0; p])
        .map_err(e)?;
    let got_last = comm.wait(last).map_err(e)?.into_recv();
    let want_last: Vec<u8> = (0..p).map(|r| r as u8).collect();
    if got_last != Some(want_last) {
        return Err(format!("request after the bad one: {got_last:?}"));
    }
    match comm.wait(bad) {
        Err(CommError::BadArgument(_)) if me == p - 1 => {}
        Err(CommError::LengthMismatch { .. }) if me != p - 1 => {}
        other => return Err(format!("wrong-size all_gather gave {other:?}")),
    }
    let sum = comm.wait(first).map_err(e)?.into_floats();
    if sum != Some(vec![p as f32; 5]) {
        return Err(format!("request before the bad one: {sum:?}"));
    }
    Ok(())
}

/// Bucket lengths of the compressed all-reduce check.
fn bucket_lengths(p: usize) -> Vec<usize> {
    vec![0, 1, 37, 8 * p, 1000, 50_001]
}

/// Three calls of the bucketed compressed all-reduce; the final buckets
/// and error buffers as bits (`overlapped`: one `overlapped_allreduce`
/// per call; otherwise one `compressed_allreduce` per bucket).
fn buckets_run(comm: &mut dyn NonBlocking, overlapped: bool) -> Result<Vec<Vec<u8>>, String> {
    let (p, me) = (comm.size(), comm.rank());
    let lens = bucket_lengths(p);
    let mut states = vec![AllReduceState::new(); lens.len()];
    let mut bufs: Vec<Vec<f32>> = Vec::new();
    for call in 0..3u64 {
        bufs = lens
            .iter()
            .enumerate()
            .map(|(b, &n)| floats(90_000 + call * 100 + b as u64, me, n))
            .collect();
        if overlapped {
            let mut views: Vec<&mut [f32]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
            overlapped_allreduce(comm, &mut views, &mut states).map_err(|e| e.to_string())?;
        } else {
            for (buf, state) in bufs.iter_mut().zip(&mut states) {
                compressed_allreduce(comm, buf, state).map_err(|e| e.to_string())?;
            }
        }
    }
    let mut out: Vec<Vec<u8>> = bufs.iter().map(|b| float_bits(b)).collect();
    for s in &states {
        out.push(float_bits(&s.worker_error()));
        out.push(float_bits(&s.server_error()));
    }
    Ok(out)
}

/// `overlapped_allreduce` over MPI == `compressed_allreduce` per bucket
/// over MPI (blocking, through the same handle) == the same on `LocalComm`
/// (each rank wrapped in its own `Overlapped`, for the blocking run).
fn buckets(comm: &mut Overlapped) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    let got = buckets_run(comm, true)?;
    let mpi_blocking = buckets_run(comm, false)?;
    if got != mpi_blocking {
        return Err("overlapped_allreduce != compressed_allreduce on MPI".into());
    }
    let local = LocalComm::run(p, |c| {
        let mut c = Overlapped::spawn(move || Ok::<_, ()>(c)).map_err(|e| format!("{e:?}"))?;
        buckets_run(&mut c, false)
    })
    .into_iter()
    .nth(me)
    .ok_or("no such local rank")?
    .map_err(|_| "a local rank panicked".to_string())??;
    if got != local {
        return Err("overlapped_allreduce on MPI != compressed_allreduce on LocalComm".into());
    }
    Ok(())
}

/// Per step: the parameters' bits, the state record, the report (`Debug`).
type AdamTrace = Vec<(Vec<u32>, Vec<u8>, String)>;

/// One run of `OneBitAdam` (the CLI's settings: preconditioned momentum,
/// bias correction, telemetry; per-layer 1-bit groups; freeze after step 3)
/// over 8 steps: the split step (`split`) or the blocking one. Returns per
/// step the parameters' bits, the state record and the report.
fn adam_run(comm: &mut Overlapped, split: bool) -> Result<AdamTrace, String> {
    let config = Config::default()
        .with_lr(1e-2)
        .with_freeze_step(3)
        .with_bias_correction(true)
        .with_variant(Variant::PreconditionedMomentum)
        .with_telemetry(true);
    let groups = [1, 1000, 257, 64].map(GroupSpec::one_bit);
    let mut opt = OneBitAdam::with_groups(&groups, config).map_err(|e| e.to_string())?;
    let me = comm.rank();
    let mut x: Vec<f32> = (0..opt.len()).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut out = Vec::new();
    for t in 1..=8u64 {
        let g: Vec<f32> = floats(t, me, opt.len()).iter().map(|v| v * 1e-2).collect();
        let report = if split {
            let mut s = SplitStep::default();
            for (gi, r) in opt.group_ranges().into_iter().enumerate().rev() {
                opt.begin_group(comm, &mut s, gi, &g[r], 2.0)
                    .map_err(|e| e.to_string())?;
            }
            opt.finish(comm, s, &mut x)
        } else {
            opt.step_with_grad_scaled(comm, &mut x, &g, 2.0)
        }
        .map_err(|e| e.to_string())?;
        out.push((
            x.iter().map(|v| v.to_bits()).collect(),
            opt.export_state(),
            format!("{report:?}"),
        ));
    }
    Ok(out)
}

/// The split step over MPI == the blocking step over MPI == the blocking
/// step on `LocalComm`.
fn split_step(comm: &mut Overlapped) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    let got = adam_run(comm, true)?;
    if got != adam_run(comm, false)? {
        return Err("OneBitAdam split step != blocking step on MPI".into());
    }
    let local = LocalComm::run(p, |c| {
        let mut c = Overlapped::spawn(move || Ok::<_, ()>(c)).map_err(|e| format!("{e:?}"))?;
        adam_run(&mut c, false)
    })
    .into_iter()
    .nth(me)
    .ok_or("no such local rank")?
    .map_err(|_| "a local rank panicked".to_string())??;
    if got != local {
        return Err("OneBitAdam split step on MPI != blocking step on LocalComm".into());
    }
    Ok(())
}

fn run(comm: &mut Overlapped) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    let (got, got_stats) = nonblocking(comm).map_err(|e| e.to_string())?;
    let (mpi_blocking, mpi_stats) = blocking(comm).map_err(|e| e.to_string())?;
    if got != mpi_blocking {
        let k = got.iter().zip(&mpi_blocking).position(|(a, b)| a != b);
        return Err(format!("overlapped != blocking MPI at operation {k:?}"));
    }
    let local = LocalComm::run(p, |mut c| blocking(&mut c))
        .into_iter()
        .nth(me)
        .ok_or("no such local rank")?
        .map_err(|_| "a local rank panicked".to_string())?
        .map_err(|e| e.to_string())?;
    if got != local.0 {
        let k = got.iter().zip(&local.0).position(|(a, b)| a != b);
        return Err(format!("overlapped MPI != LocalComm at operation {k:?}"));
    }
    if got_stats != mpi_stats || got_stats != local.1 {
        return Err(format!(
            "stats: overlapped {got_stats:?}, blocking {mpi_stats:?}, LocalComm {:?}",
            local.1
        ));
    }
    error_parity(comm)?;
    buckets(comm)?;
    split_step(comm)
}

fn main() -> ExitCode {
    // MPI is initialised on the communication thread and used only there.
    let mut comm = match Overlapped::spawn(MpiComm::init) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mpi_overlap: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (p, me) = (comm.size(), comm.rank());
    match run(&mut comm) {
        Ok(()) => {
            println!(
                "mpi_overlap rank {me}/{p}: overlapped == blocking == LocalComm, errors agree, \
                 overlapped_allreduce == compressed_allreduce, split step == blocking step"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("mpi_overlap rank {me}/{p}: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
