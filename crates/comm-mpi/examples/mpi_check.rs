//! The MPI integration check, run by `cargo xtask mpi` under
//! `mpirun -np N` (N = 2, 3, 4). Every rank runs the same collectives over
//! MPI and, in-process, over `basis-std`'s `LocalComm` (N threads fed the
//! inputs every rank would have), and compares its own results bit for bit.
//!
//! `mpi_check all`      collectives, variable all-to-all (`all_to_all_v`,
//!                      `all_to_all_counts`), error parity, a sub-communicator,
//!                      compressed all-reduce (also against
//!                      `onebit_adam::reference`), 1-bit Adam
//! `mpi_check mismatch` the last rank passes a longer buffer to
//!                      `compressed_allreduce`, then to `all_reduce_sum`:
//!                      every rank must get an error each time; exits with
//!                      status 3 after printing them.

use std::process::ExitCode;

use basis_std::local::LocalComm;
use comm_mpi::MpiComm;
use comm_mpi::comm_traits::{CommError, Communicator};
use comm_mpi::mpi::topology::Color;
use comm_mpi::mpi::traits::Communicator as _;
use onebit_adam::reference::{ReferenceState, simulate_allreduce};
use onebit_adam::testing::{LogisticProblem, run_steps};
use onebit_adam::{AllReduceState, Config, OneBitAdam, compressed_allreduce};

/// SplitMix64: a tiny deterministic generator so every process can rebuild
/// every rank's inputs.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Floats over many magnitudes, with exact zeros of both signs, so the
    /// summation order shows in the bits.
    fn float(&mut self) -> f32 {
        let u = self.next_u64();
        match u % 16 {
            0 => 0.0,
            1 => -0.0,
            _ => {
                let mant = ((u >> 8) % 2_000_000) as f32 / 1_000_000.0 - 1.0;
                let exp = ((u >> 40) % 40) as i32 - 20;
                mant * 2f32.powi(exp)
            }
        }
    }
}

fn floats(seed: u64, rank: usize, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed ^ ((rank as u64 + 1) << 32));
    (0..n).map(|_| rng.float()).collect()
}

fn bytes(seed: u64, rank: usize, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed.rotate_left(17) ^ (rank as u64 + 7));
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// Run `f` on P in-process ranks and return rank `me`'s value.
fn local<T: Send, F: Fn(LocalComm) -> T + Sync>(p: usize, me: usize, f: F) -> Result<T, String> {
    LocalComm::run(p, f)
        .into_iter()
        .nth(me)
        .ok_or("no such local rank")?
        .map_err(|_| "a local rank panicked".to_string())
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

/// Every collective of the trait, on awkward lengths, against `LocalComm`.
fn collectives(comm: &mut MpiComm) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    let lengths = [0, 1, 7, 8 * p - 1, 8 * p + 1, 100_003];
    for (case, &n) in lengths.iter().enumerate() {
        let seed = 1000 + case as u64;
        // all_reduce_sum: rank order, bit for bit.
        let mut got = floats(seed, me, n);
        comm.all_reduce_sum(&mut got).map_err(|e| e.to_string())?;
        let want = local(p, me, |mut c| {
            let mut v = floats(seed, c.rank(), n);
            c.all_reduce_sum(&mut v).map(|()| v)
        })?
        .map_err(|e| e.to_string())?;
        check(same_bits(&got, &want), || {
            format!("all_reduce_sum n={n} differs from LocalComm")
        })?;
        // The native MPI_Allreduce agrees to rounding.
        let mut native = floats(seed, me, n);
        comm.all_reduce_sum_native(&mut native)
            .map_err(|e| e.to_string())?;
        let scale: f32 = (0..p)
            .map(|r| {
                floats(seed, r, n)
                    .iter()
                    .map(|x| x.abs())
                    .fold(0.0, f32::max)
            })
            .sum();
        let worst = native
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        check(worst <= scale * 1e-6, || {
            format!("native all-reduce n={n} off by {worst}")
        })?;
        // all_gather and all_to_all: exact bytes.
        let mut gathered = vec![0u8; p * n];
        comm.all_gather(&bytes(seed, me, n), &mut gathered)
            .map_err(|e| e.to_string())?;
        let want_gather: Vec<u8> = (0..p).flat_map(|r| bytes(seed, r, n)).collect();
        check(gathered == want_gather, || format!("all_gather n={n}"))?;
        let mut swapped = vec![0u8; p * n];
        comm.all_to_all(&bytes(seed + 1, me, p * n), n, &mut swapped)
            .map_err(|e| e.to_string())?;
        let want_swap: Vec<u8> = (0..p)
            .flat_map(|r| bytes(seed + 1, r, p * n)[me * n..(me + 1) * n].to_vec())
            .collect();
        check(swapped == want_swap, || format!("all_to_all chunk={n}"))?;
        comm.barrier().map_err(|e| e.to_string())?;
    }
    // Byte accounting: the same calls on LocalComm give the same stats.
    let want_stats = local(p, me, |mut c| -> Result<_, CommError> {
        for (case, &n) in lengths.iter().enumerate() {
            let seed = 1000 + case as u64;
            let mut v = floats(seed, c.rank(), n);
            c.all_reduce_sum(&mut v)?;
            c.all_reduce_sum(&mut v)?;
            c.all_gather(&bytes(seed, c.rank(), n), &mut vec![0u8; p * n])?;
            c.all_to_all(&bytes(seed + 1, c.rank(), p * n), n, &mut vec![0u8; p * n])?;
            c.barrier()?;
        }
        Ok(c.stats())
    })?
    .map_err(|e| e.to_string())?;
    check(comm.stats() == want_stats, || {
        format!("stats {:?} != LocalComm {:?}", comm.stats(), want_stats)
    })?;
    error_parity(comm)
}

/// One error scenario, run on every rank of a group.
type Scenario<'a> = dyn Fn(&mut dyn Communicator) -> Result<(), CommError> + Sync + 'a;

/// Bad arguments and disagreements: the same error as `LocalComm` on every
/// rank, and the communicator still works afterwards.
fn error_parity(comm: &mut MpiComm) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    let last = p - 1;
    // 1. The last rank passes a receive buffer one byte short.
    let scenario_bad_recv = |c: &mut dyn Communicator| {
        let short = usize::from(c.rank() == last);
        let mut recv = vec![0u8; 4 * p - short];
        c.all_gather(&[1, 2, 3, 4], &mut recv)
    };
    // 2. The last rank all-reduces one more element.
    let scenario_len = |c: &mut dyn Communicator| {
        let mut v = vec![1.0f32; 10 + usize::from(c.rank() == last)];
        c.all_reduce_sum(&mut v)
    };
    // 3. Rank 0 calls a barrier while the others all-gather.
    let scenario_op = |c: &mut dyn Communicator| {
        if c.rank() == 0 {
            c.barrier()
        } else {
            c.all_gather(&[], &mut [])
        }
    };
    let scenarios: [(&str, &Scenario<'_>); 3] = [
        ("short recv", &scenario_bad_recv),
        ("length", &scenario_len),
        ("collective", &scenario_op),
    ];
    for (name, f) in scenarios {
        let got = f(comm);
        let want = local(p, me, |mut c| f(&mut c))?;
        check(got.is_err() && got == want, || {
            format!("{name} scenario: MPI gave {got:?}, LocalComm {want:?}")
        })?;
        // The group is still in step: a good collective succeeds.
        let mut v = vec![me as f32; 3];
        comm.all_reduce_sum(&mut v).map_err(|e| e.to_string())?;
        let total = (0..p).map(|r| r as f32).sum::<f32>();
        check(v == vec![total; 3], || format!("after {name}: {v:?}"))?;
    }
    Ok(())
}

/// The count matrix of case `case` on `p` ranks (`m[i][j]` bytes `i → j`):
/// random with empty chunks, all-to-one skew, all empty, one large chunk.
fn count_matrix(case: usize, p: usize) -> Vec<Vec<usize>> {
    let mut rng = Rng::new(77 + case as u64);
    (0..p)
        .map(|i| {
            (0..p)
                .map(|j| match case {
                    0 => (rng.next_u64() % 3 * (rng.next_u64() % 50)) as usize,
                    1 => usize::from(j == 0) * (100 + i),
                    2 => 0,
                    _ => usize::from(i == p - 1 && j == 0) * 300_001 + (i + j) % 2,
                })
                .collect()
        })
        .collect()
}

/// Rank `me`'s `all_to_all_v` arguments for matrix `m`.
fn v_args(m: &[Vec<usize>], me: usize, case: usize) -> (Vec<u8>, Vec<usize>, Vec<usize>) {
    let p = m.len();
    let send = (0..p)
        .flat_map(|j| bytes(900 + case as u64 * 10 + j as u64, me, m[me][j]))
        .collect();
    (send, m[me].clone(), (0..p).map(|i| m[i][me]).collect())
}

/// `all_to_all_v` and `all_to_all_counts` against the plain reference and
/// `LocalComm` (bytes and stats), then their error scenarios.
fn variable(comm: &mut MpiComm) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    for case in 0..4 {
        let m = count_matrix(case, p);
        let before = comm.stats();
        let (send, sc, rc) = v_args(&m, me, case);
        let mut got = vec![0u8; rc.iter().sum()];
        comm.all_to_all_v(&send, &sc, &mut got, &rc)
            .map_err(|e| e.to_string())?;
        let want: Vec<u8> = (0..p)
            .flat_map(|i| bytes(900 + case as u64 * 10 + me as u64, i, m[i][me]))
            .collect();
        check(got == want, || {
            format!("all_to_all_v case {case} differs from the reference")
        })?;
        let mut counts = vec![0u64; p];
        let mine: Vec<u64> = sc.iter().map(|&c| c as u64).collect();
        comm.all_to_all_counts(&mine, &mut counts)
            .map_err(|e| e.to_string())?;
        check(
            counts == rc.iter().map(|&c| c as u64).collect::<Vec<_>>(),
            || format!("all_to_all_counts case {case}: {counts:?}"),
        )?;
        let spent = comm.stats().since(&before);
        let (lgot, lstats) = local(p, me, |mut c| -> Result<_, CommError> {
            let (send, sc, rc) = v_args(&m, c.rank(), case);
            let mut out = vec![0u8; rc.iter().sum()];
            c.all_to_all_v(&send, &sc, &mut out, &rc)?;
            let mine: Vec<u64> = sc.iter().map(|&c| c as u64).collect();
            c.all_to_all_counts(&mine, &mut vec![0u64; p])?;
            Ok((out, c.stats()))
        })?
        .map_err(|e| e.to_string())?;
        check(lgot == got && lstats == spent, || {
            format!("all_to_all_v case {case}: stats {spent:?} != LocalComm {lstats:?}")
        })?;
    }
    let last = p - 1;
    // 1. The last rank expects one byte more from rank 0 than it sends.
    let scenario_pair = |c: &mut dyn Communicator| {
        let m = vec![vec![2usize; p]; p];
        let (send, sc, mut rc) = v_args(&m, c.rank(), 0);
        if c.rank() == last {
            rc[0] += 1;
        }
        let mut recv = vec![0u8; rc.iter().sum()];
        c.all_to_all_v(&send, &sc, &mut recv, &rc)
    };
    // 2. Rank 0 passes one count too few.
    let scenario_len = |c: &mut dyn Communicator| {
        let m = vec![vec![1usize; p]; p];
        let (send, mut sc, rc) = v_args(&m, c.rank(), 0);
        if c.rank() == 0 {
            sc.pop();
        }
        let mut recv = vec![0u8; rc.iter().sum()];
        c.all_to_all_v(&send, &sc, &mut recv, &rc)
    };
    // 3. The last rank passes a short counts buffer.
    let scenario_counts = |c: &mut dyn Communicator| {
        let short = usize::from(c.rank() == last);
        c.all_to_all_counts(&vec![1; p - short], &mut vec![0; p])
    };
    let scenarios: [(&str, &Scenario<'_>); 3] = [
        ("v pair", &scenario_pair),
        ("v counts length", &scenario_len),
        ("counts length", &scenario_counts),
    ];
    for (name, f) in scenarios {
        let got = f(comm);
        let want = local(p, me, |mut c| f(&mut c))?;
        check(got.is_err() && got == want, || {
            format!("{name} scenario: MPI gave {got:?}, LocalComm {want:?}")
        })?;
        let mut v = vec![me as f32; 3];
        comm.all_reduce_sum(&mut v).map_err(|e| e.to_string())?;
        let total = (0..p).map(|r| r as f32).sum::<f32>();
        check(v == vec![total; 3], || format!("after {name}: {v:?}"))?;
    }
    Ok(())
}

/// Successive calls of `compressed_allreduce` (error feedback carried over)
/// on awkward lengths: MPI, `LocalComm` and the single-threaded reference
/// simulation agree bit for bit after every call, and so do the bytes.
fn compressed(comm: &mut MpiComm) -> Result<(), String> {
    const CALLS: usize = 3;
    let (p, me) = (comm.size(), comm.rank());
    for (case, n) in [1, 7, 8 * p - 1, 8 * p + 1, 100_003]
        .into_iter()
        .enumerate()
    {
        let input = |rank: usize, call: usize| -> Vec<f32> {
            floats(7000 + 10 * case as u64 + call as u64, rank, n)
        };
        // Over MPI.
        let mut state = AllReduceState::new();
        let before = comm.stats();
        let mut got = Vec::with_capacity(CALLS);
        for call in 0..CALLS {
            let mut buf = input(me, call);
            compressed_allreduce(comm, &mut buf, &mut state).map_err(|e| e.to_string())?;
            got.push(buf);
        }
        let bytes = comm.stats().since(&before);
        // Over LocalComm, in this process.
        let (want, want_bytes) = local(p, me, |mut c| {
            let mut state = AllReduceState::new();
            let mut out = Vec::with_capacity(CALLS);
            for call in 0..CALLS {
                let mut buf = input(c.rank(), call);
                compressed_allreduce(&mut c, &mut buf, &mut state)?;
                out.push(buf);
            }
            Ok::<_, onebit_adam::OneBitError>((out, c.stats()))
        })?
        .map_err(|e| e.to_string())?;
        // The plain simulation.
        let mut sim_state = ReferenceState::new(n, p);
        for call in 0..CALLS {
            let mut bufs: Vec<Vec<f32>> = (0..p).map(|r| input(r, call)).collect();
            simulate_allreduce(&mut bufs, &mut sim_state);
            check(same_bits(&got[call], &want[call]), || {
                format!("compressed_allreduce n={n} call {call}: MPI != LocalComm")
            })?;
            check(same_bits(&got[call], &bufs[me]), || {
                format!("compressed_allreduce n={n} call {call}: MPI != reference simulation")
            })?;
        }
        check(bytes == want_bytes, || {
            format!("compressed_allreduce n={n}: bytes {bytes:?} != LocalComm {want_bytes:?}")
        })?;
        check(
            state.worker_error() == sim_state.worker[me]
                && state.server_error() == sim_state.server[me],
            || format!("compressed_allreduce n={n}: error buffers differ from the reference"),
        )?;
    }
    Ok(())
}

/// 1-bit Adam on the shared logistic-regression problem (one shard per
/// rank, mini-batches of 128, freeze after 25 % of the steps): the run over MPI ends in the same
/// parameters, bit for bit, and the same bytes as the run over `LocalComm`.
fn training(comm: &mut MpiComm) -> Result<(), String> {
    const STEPS: u64 = 40;
    let (p, me) = (comm.size(), comm.rank());
    let problem = LogisticProblem::generate(p, 512, 400, 8, 0x5EED);
    let config = Config::default().with_lr(0.02).with_freeze_step(STEPS / 4);
    let train = |c: &mut dyn Communicator| -> Result<(Vec<f32>, u64), onebit_adam::OneBitError> {
        let mut opt = OneBitAdam::new(problem.params(), config)?;
        let mut params = vec![0.0f32; problem.params()];
        let reports = run_steps(c, &problem, &mut opt, &mut params, STEPS, Some(128))?;
        let bytes = reports.iter().map(|r| r.bytes.bytes_sent).sum();
        Ok((params, bytes))
    };
    let start_loss = problem.loss(&vec![0.0; problem.params()]);
    let (got, got_bytes) = train(comm).map_err(|e| e.to_string())?;
    let (want, want_bytes) = local(p, me, |mut c| train(&mut c))?.map_err(|e| e.to_string())?;
    check(same_bits(&got, &want), || {
        "1-bit Adam over MPI ended in other parameters than over LocalComm".to_string()
    })?;
    check(got_bytes == want_bytes, || {
        format!("1-bit Adam bytes: MPI {got_bytes}, LocalComm {want_bytes}")
    })?;
    let end_loss = problem.loss(&got);
    check(end_loss < start_loss, || {
        format!("1-bit Adam did not learn: loss {start_loss} -> {end_loss}")
    })?;
    if me == 0 {
        println!(
            "mpi_check: 1-bit Adam on {p} ranks, {STEPS} steps: loss {start_loss:.5} -> {end_loss:.5}, identical to LocalComm"
        );
    }
    Ok(())
}

/// `MpiComm::new` over a sub-communicator: even and odd world ranks form
/// two groups; each group's all-reduce equals `LocalComm` of its size.
fn sub_communicator(comm: &MpiComm) -> Result<(), String> {
    let (p, me) = (comm.size(), comm.rank());
    let color = me % 2;
    let color_value = i32::try_from(color).map_err(|e| e.to_string())?;
    let sub = comm
        .raw()
        .split_by_color(Color::with_value(color_value))
        .ok_or("split_by_color gave no communicator")?;
    let mut sub = MpiComm::new(sub);
    let members = (p - color).div_ceil(2);
    check(sub.rank() == me / 2 && sub.size() == members, || {
        format!(
            "sub-communicator: rank {}/{}, want {}/{members}",
            sub.rank(),
            sub.size(),
            me / 2
        )
    })?;
    let mut got = floats(77, me, 1001);
    sub.all_reduce_sum(&mut got).map_err(|e| e.to_string())?;
    let want = local(members, me / 2, |mut c| {
        let mut v = floats(77, 2 * c.rank() + color, 1001);
        c.all_reduce_sum(&mut v).map(|()| v)
    })?
    .map_err(|e| e.to_string())?;
    check(same_bits(&got, &want), || {
        "sub-communicator all_reduce_sum differs from LocalComm".to_string()
    })
}

/// The last rank passes a longer buffer, to `compressed_allreduce` and then
/// to `all_reduce_sum`; every rank must see an error both times.
fn mismatch(comm: &mut MpiComm) -> ExitCode {
    let (p, me) = (comm.size(), comm.rank());
    let mut detected = 0;
    let mut v = vec![1.0f32; 1000 + usize::from(me == p - 1)];
    let mut state = AllReduceState::new();
    match compressed_allreduce(comm, &mut v, &mut state) {
        Err(e) => {
            println!("mpi_check rank {me}/{p}: mismatch detected (compressed_allreduce): {e}");
            detected += 1;
        }
        Ok(_) => println!("mpi_check rank {me}/{p}: mismatch NOT detected (compressed_allreduce)"),
    }
    match comm.all_reduce_sum(&mut v) {
        Err(e) => {
            println!("mpi_check rank {me}/{p}: mismatch detected (all_reduce_sum): {e}");
            detected += 1;
        }
        Ok(()) => println!("mpi_check rank {me}/{p}: mismatch NOT detected (all_reduce_sum)"),
    }
    if detected == 2 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let mut comm = match MpiComm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mpi_check: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (p, me) = (comm.size(), comm.rank());
    let result = match mode.as_str() {
        "mismatch" => return mismatch(&mut comm),
        "all" => collectives(&mut comm)
            .and_then(|()| variable(&mut comm))
            .and_then(|()| sub_communicator(&comm))
            .and_then(|()| compressed(&mut comm))
            .and_then(|()| training(&mut comm)),
        other => Err(format!("unknown mode `{other}`")),
    };
    match result {
        Ok(()) => {
            println!("mpi_check rank {me}/{p}: all checks passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("mpi_check rank {me}/{p}: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
