//! The MPI benchmark, run by `cargo xtask mpi --bench [--net RATE]` under
//! `mpirun -np P`: `onebit-adam`'s compressed all-reduce against
//! `MPI_Allreduce` of f32 (and this crate's rank-order all-reduce) for
//! 16 MiB and 64 MiB buffers, then a short data-parallel training run with
//! 1-bit Adam against Adam with a full all-reduce. Rank 0 prints Markdown
//! table rows.
//!
//! Timing: before each call all ranks meet at a barrier; a call's time is
//! the slowest rank's; the figure is the median over `--iters` calls after
//! one warm-up call.
//!
//! `mpi_bench [--iters K] [--label NAME] [--sizes 16,64] [--skip-train] [--lr X]`

use std::time::Instant;

use comm_mpi::AllReduceAlgorithm;
use comm_mpi::MpiComm;
use comm_mpi::comm_traits::{CommError, CommStats, Communicator};
use onebit_adam::testing::LogisticProblem;
use onebit_adam::{AllReduceState, Config, OneBitAdam, Stage, compressed_allreduce};

type BenchResult<T> = Result<T, String>;

struct Args {
    iters: usize,
    label: String,
    sizes_mib: Vec<usize>,
    train: bool,
    lr: f32,
}

fn parse_args() -> BenchResult<Args> {
    let mut a = Args {
        iters: 5,
        label: "shm".into(),
        sizes_mib: vec![16, 64],
        train: true,
        lr: TRAIN_LR,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--iters" => {
                a.iters = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&k| k > 0)
                    .ok_or("--iters needs a positive number")?;
            }
            "--label" => a.label = it.next().ok_or("--label needs a name")?,
            "--sizes" => {
                a.sizes_mib = it
                    .next()
                    .ok_or("--sizes needs a list")?
                    .split(',')
                    .map(|s| s.parse().map_err(|_| format!("bad size `{s}`")))
                    .collect::<BenchResult<_>>()?;
            }
            "--skip-train" => a.train = false,
            "--lr" => {
                a.lr = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--lr needs a number")?;
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(a)
}

/// The slowest rank's time of `f` (seconds), all ranks starting together.
fn timed(
    comm: &mut MpiComm,
    f: &mut dyn FnMut(&mut MpiComm) -> BenchResult<()>,
) -> BenchResult<f64> {
    comm.barrier().map_err(|e| e.to_string())?;
    let t = Instant::now();
    f(comm)?;
    let mut dt = [t.elapsed().as_secs_f64()];
    slowest(comm, &mut dt)?;
    Ok(dt[0])
}

/// Replace each value by its maximum over ranks.
fn slowest(comm: &mut MpiComm, vals: &mut [f64]) -> BenchResult<()> {
    let p = comm.size();
    let mine: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut all = vec![0u8; p * mine.len()];
    comm.all_gather(&mine, &mut all)
        .map_err(|e| e.to_string())?;
    for (k, v) in vals.iter_mut().enumerate() {
        *v = all
            .chunks_exact(mine.len())
            .map(|r| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&r[8 * k..8 * k + 8]);
                f64::from_le_bytes(b)
            })
            .fold(f64::MIN, f64::max);
    }
    Ok(())
}

/// A pass-through communicator that adds up the time spent inside the
/// collectives (moving bytes, and waiting for slower peers); the rest of a
/// call's time is this rank's computation.
struct TimedComm<'a> {
    inner: &'a mut MpiComm,
    in_collectives: f64,
}

impl TimedComm<'_> {
    fn time<T>(&mut self, f: impl FnOnce(&mut MpiComm) -> T) -> T {
        let t = Instant::now();
        let r = f(self.inner);
        self.in_collectives += t.elapsed().as_secs_f64();
        r
    }
}

impl Communicator for TimedComm<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.time(|c| c.all_reduce_sum(buf))
    }
    fn all_to_all(&mut self, send: &[u8], chunk: usize, recv: &mut [u8]) -> Result<(), CommError> {
        self.time(|c| c.all_to_all(send, chunk, recv))
    }
    fn all_gather(&mut self, send: &[u8], recv: &mut [u8]) -> Result<(), CommError> {
        self.time(|c| c.all_gather(send, recv))
    }
    fn all_to_all_counts(&mut self, send: &[u64], recv: &mut [u64]) -> Result<(), CommError> {
        self.time(|c| c.all_to_all_counts(send, recv))
    }
    fn all_to_all_v(
        &mut self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        self.time(|c| c.all_to_all_v(send, send_counts, recv, recv_counts))
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        self.time(|c| c.barrier())
    }
    fn stats(&self) -> CommStats {
        self.inner.stats()
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        0.5 * (xs[m - 1] + xs[m])
    }
}

/// Deterministic gradient-like data: rank- and step-dependent.
fn fill(buf: &mut [f32], rank: usize, step: usize) {
    let mut s = 0x9E37_79B9_u32 ^ ((rank as u32) << 16) ^ step as u32;
    for x in buf.iter_mut() {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        *x = (s as f32 / u32::MAX as f32 - 0.5) * 1e-2;
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Algo {
    Native,
    RankOrder,
    Compressed,
}

impl Algo {
    fn name(self) -> &'static str {
        match self {
            Algo::Native => "MPI_Allreduce f32",
            Algo::RankOrder => "rank-order f32 (MpiComm default)",
            Algo::Compressed => "compressed_allreduce (1-bit)",
        }
    }
}

fn bench_allreduce(comm: &mut MpiComm, args: &Args) -> BenchResult<()> {
    let (p, me) = (comm.size(), comm.rank());
    if me == 0 {
        println!();
        println!(
            "| transport | P | size | algorithm | median ms/call | min ms | compute ms (slowest rank) | bytes sent/rank/call | speed-up vs MPI_Allreduce |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
    }
    for &mib in &args.sizes_mib {
        let n = mib * (1 << 20) / 4;
        let mut buf = vec![0f32; n];
        let mut native_ms = f64::NAN;
        for algo in [Algo::Native, Algo::RankOrder, Algo::Compressed] {
            let mut state = AllReduceState::new();
            let mut times = Vec::with_capacity(args.iters);
            let mut compute = Vec::with_capacity(args.iters);
            let mut sent = 0u64;
            for it in 0..=args.iters {
                fill(&mut buf, me, it);
                let mut own_compute = 0.0;
                let dt = timed(comm, &mut |c| {
                    let before = c.stats();
                    match algo {
                        Algo::Native => c
                            .all_reduce_sum_native(&mut buf)
                            .map_err(|e| e.to_string())?,
                        Algo::RankOrder => c.all_reduce_sum(&mut buf).map_err(|e| e.to_string())?,
                        Algo::Compressed => {
                            let t = Instant::now();
                            let mut timed = TimedComm {
                                inner: c,
                                in_collectives: 0.0,
                            };
                            compressed_allreduce(&mut timed, &mut buf, &mut state)
                                .map_err(|e| e.to_string())?;
                            own_compute = t.elapsed().as_secs_f64() - timed.in_collectives;
                        }
                    }
                    sent = c.stats().since(&before).bytes_sent;
                    Ok(())
                })?;
                let mut slowest_compute = [own_compute];
                slowest(comm, &mut slowest_compute)?;
                if it > 0 {
                    times.push(dt * 1e3);
                    compute.push(slowest_compute[0] * 1e3);
                }
            }
            let min = times.iter().copied().fold(f64::INFINITY, f64::min);
            let med = median(times);
            let compute_ms = median(compute);
            if algo == Algo::Native {
                native_ms = med;
            }
            if me == 0 {
                let compute_col = if algo == Algo::Compressed {
                    format!("{compute_ms:.1}")
                } else {
                    "–".into()
                };
                println!(
                    "| {} | {p} | {mib} MiB | {} | {med:.1} | {min:.1} | {compute_col} | {} | {:.2}× |",
                    args.label,
                    algo.name(),
                    human_bytes(sent),
                    native_ms / med
                );
            }
        }
    }
    Ok(())
}

/// Parameters of the training comparison (`2^19` weights: a 2 MiB
/// gradient, so the all-reduce matters at network speeds).
const TRAIN_FEATURES: usize = (1 << 19) - 1;
const TRAIN_SAMPLES_PER_RANK: usize = 8192;
const TRAIN_ACTIVE: usize = 64;
const TRAIN_STEPS: u64 = 60;
const TRAIN_FREEZE: u64 = 12;
const TRAIN_LR: f32 = 0.001;

/// 1-bit Adam (freeze after 20 % of the steps) against Adam with a full
/// all-reduce of the gradient (the same optimizer never leaving warm-up),
/// both over `MPI_Allreduce` for their full-precision steps.
fn bench_training(comm: &mut MpiComm, args: &Args) -> BenchResult<()> {
    let (p, me) = (comm.size(), comm.rank());
    // One shard more than ranks: shard `p` is never trained on (held out).
    // Shards are drawn after the teacher, in order, so shards `0..p` are
    // the same as in a `p`-shard problem.
    let problem = LogisticProblem::generate(
        p + 1,
        TRAIN_SAMPLES_PER_RANK,
        TRAIN_FEATURES,
        TRAIN_ACTIVE,
        0xBE_4C,
    );
    let n = problem.params();
    comm.set_all_reduce(AllReduceAlgorithm::Native);
    if me == 0 {
        println!();
        println!(
            "training: sparse logistic regression, {n} parameters, {TRAIN_SAMPLES_PER_RANK} samples per rank, {TRAIN_ACTIVE} active features per sample"
        );
        println!();
        println!(
            "| transport | P | optimizer | steps (full-precision) | total s | ms/step full-precision (in collectives) | ms/step 1-bit (in collectives) | bytes sent/rank | coordinates compressed | final train loss | held-out loss |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
    }
    let (mut baseline_s, mut onebit_s) = (f64::NAN, f64::NAN);
    for (name, freeze) in [
        ("Adam, f32 all-reduce", TRAIN_STEPS),
        ("1-bit Adam", TRAIN_FREEZE),
    ] {
        let config = Config::default().with_lr(args.lr).with_freeze_step(freeze);
        let mut opt = OneBitAdam::new(n, config).map_err(|e| e.to_string())?;
        let mut params = vec![0.0f32; n];
        let mut grad = vec![0.0f32; n];
        let mut full = Vec::new();
        let mut onebit = Vec::new();
        let before = comm.stats();
        comm.barrier().map_err(|e| e.to_string())?;
        let start = Instant::now();
        for _ in 0..TRAIN_STEPS {
            let t = Instant::now();
            problem
                .shard_loss_grad(me, &params, &mut grad)
                .ok_or("no shard for this rank")?;
            let mut timed = TimedComm {
                inner: comm,
                in_collectives: 0.0,
            };
            let report = opt
                .step_with_grad(&mut timed, &mut params, &grad)
                .map_err(|e| e.to_string())?;
            let (dt, wire) = (t.elapsed().as_secs_f64(), timed.in_collectives);
            if report.stage == Stage::Compressed {
                onebit.push((dt, wire));
            } else {
                full.push((dt, wire));
            }
        }
        let bytes = comm.stats().since(&before).bytes_sent;
        let mean = |xs: &[(f64, f64)], wire: bool| {
            xs.iter()
                .map(|&(t, w)| if wire { w } else { t })
                .sum::<f64>()
                / xs.len().max(1) as f64
        };
        let mut times = [
            start.elapsed().as_secs_f64(),
            mean(&full, false),
            mean(&onebit, false),
            mean(&full, true),
            mean(&onebit, true),
        ];
        slowest(comm, &mut times)?;
        if freeze == TRAIN_STEPS {
            baseline_s = times[0];
        } else {
            onebit_s = times[0];
        }
        let mut train_loss = 0.0f64;
        for shard in 0..p {
            let l = problem
                .shard_loss_grad(shard, &params, &mut grad)
                .ok_or("no shard")?;
            train_loss += f64::from(l) / p as f64;
        }
        let held_out = problem
            .shard_loss_grad(p, &params, &mut grad)
            .ok_or("no shard")?;
        // The optimizer compresses only coordinates whose gradient was not
        // exactly zero at every warm-up step.
        let live = if onebit.is_empty() {
            "–".to_string()
        } else {
            format!("{} of {n}", n - opt.zero_coordinates())
        };
        if me == 0 {
            let onebit_ms = if onebit.is_empty() {
                "–".to_string()
            } else {
                format!("{:.1} ({:.1})", times[2] * 1e3, times[4] * 1e3)
            };
            println!(
                "| {} | {p} | {name} | {TRAIN_STEPS} ({}) | {:.2} | {:.1} ({:.1}) | {onebit_ms} | {} | {live} | {train_loss:.4} | {held_out:.4} |",
                args.label,
                full.len(),
                times[0],
                times[1] * 1e3,
                times[3] * 1e3,
                human_bytes(bytes),
            );
        }
    }
    if me == 0 {
        println!();
        println!(
            "training on {} ({p} ranks, {n} parameters, {TRAIN_SAMPLES_PER_RANK} samples per rank): end-to-end speed-up of 1-bit Adam over Adam with f32 all-reduce {:.2}×",
            args.label,
            baseline_s / onebit_s
        );
    }
    Ok(())
}

fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{:.2} MiB", b as f64 / f64::from(1u32 << 20))
    } else {
        format!("{:.1} KiB", b as f64 / 1024.0)
    }
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mpi_bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut comm = match MpiComm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mpi_bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut result = bench_allreduce(&mut comm, &args);
    if result.is_ok() && args.train {
        result = bench_training(&mut comm, &args);
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpi_bench rank {}: {e}", comm.rank());
            std::process::ExitCode::FAILURE
        }
    }
}
