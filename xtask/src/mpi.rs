//! `cargo xtask mpi`: the MPI integration program under `mpirun`, and the
//! MPI benchmark (`--bench`, optionally inside a rate-limited network
//! namespace with `--net 1gbit|10gbit`).
//!
//! - `cargo xtask mpi` builds `comm-mpi`'s `mpi_check` example and runs it
//!   with `mpirun --oversubscribe -np N` for N = 2, 3, 4 (every rank checks
//!   its MPI results against `LocalComm` bit for bit), then runs its
//!   `mismatch` mode and asserts that every rank reported the error and the
//!   job exited non-zero before the timeout; `comm-mpi`'s `mpi_overlap`
//!   on 2, 3, 4 ranks (non-blocking collectives with many requests in
//!   flight == blocking MPI == `LocalComm`, bit for bit, the bucketed
//!   `overlapped_allreduce` == `compressed_allreduce`, and `OneBitAdam`'s
//!   split step (`begin_group`/`finish`) == its blocking step over MPI and
//!   on `LocalComm`, across the freeze); `basis-shard`'s
//!   `custom_loop_mpi` example on 2 and 3 ranks must equal its `LocalComm`
//!   loop bit for bit; then a row-sharded
//!   `basis train` under `mpirun -np N` must equal the `LocalComm` run bit
//!   for bit (`mpi/shard.rs`), `--dense-overlap on` under `mpirun` must
//!   equal `off` over `LocalComm` (sharded and replicated, one tower group
//!   and a group per layer), a killed-and-resumed one must equal an
//!   uninterrupted one, and one whose rank exits mid-step must end the job
//!   non-zero, naming the rank, without a hang (`mpi/faults.rs`).
//! - `cargo xtask mpi --bench [--net RATE] [--iters K]` builds `mpi_bench` in
//!   release mode and runs it on 2 and 4 ranks; with `--net` inside a network
//!   namespace whose loopback is shaped by `tc tbf` to RATE (or not shaped:
//!   `--net unlimited`), MPI forced onto TCP over that loopback. The
//!   namespace is removed even on failure.
//! - `cargo xtask mpi --train-bench [--net RATE] [--np 2,4]`: end-to-end
//!   sharded DeepFM training, f32 Adam vs 1-bit Adam on the tower, in the
//!   same namespace (`mpi/train_bench.rs`).

mod faults;
mod shard;
mod train_bench;

use crate::util::{self, cargo, have, is_root, root};
use core::time::Duration;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// Rank counts of the integration check.
const CHECK_RANKS: [usize; 3] = [2, 3, 4];
/// Rank counts of the benchmark.
const BENCH_RANKS: [usize; 2] = [2, 4];
/// Wall-clock limit of one `mpirun` of the check (a hang fails the check).
const CHECK_TIMEOUT: Duration = Duration::from_secs(120);
/// Wall-clock limit of the mismatch run: it must fail fast, not hang.
const MISMATCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Name of the benchmark's network namespace.
const NETNS: &str = "basis-mpi-bench";

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    if let Some(at) = args.iter().position(|a| a == "--train-bench") {
        let mut rest = args.to_vec();
        rest.remove(at);
        return train_bench::run(&rest);
    }
    let mut bench = false;
    let mut net: Option<String> = None;
    let mut iters: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => bench = true,
            "--net" => {
                let rate = it
                    .next()
                    .ok_or("--net needs a rate (1gbit, 10gbit, unlimited)")?;
                net = Some(rate.clone());
            }
            "--iters" => iters = Some(it.next().ok_or("--iters needs a number")?.clone()),
            other => {
                return Err(format!(
                    "unknown argument `{other}` (usage: mpi [--bench [--net 1gbit|10gbit|unlimited] [--iters K]] | --train-bench [--net RATE] [--np 2,4] [--examples N])"
                ));
            }
        }
    }
    if !bench {
        if net.is_some() || iters.is_some() {
            return Err("--net and --iters go with --bench".into());
        }
        return check();
    }
    run_bench(net.as_deref(), iters.as_deref())
}

/// The part of `cargo xtask ci` that belongs to `mpi`: the integration check.
pub(crate) fn ci() -> Result<(), String> {
    check()
}

/// Build the check program and run it on 2, 3 and 4 ranks, then the mismatch.
fn check() -> Result<(), String> {
    require_mpirun()?;
    // The `test` profile (opt-level 2) shares artifacts with `cargo test`.
    util::run(cargo().args([
        "build",
        "-p",
        "basisopt-comm-mpi",
        "--example",
        "mpi_check",
        "--profile",
        "test",
    ]))?;
    let exe = target_dir().join("debug/examples/mpi_check");
    for np in CHECK_RANKS {
        let t = Instant::now();
        let mut cmd = mpirun(np, Transport::ShmPortable, Some(CHECK_TIMEOUT));
        cmd.arg(&exe).arg("all");
        if !util::run_with_timeout(&mut cmd, outer(CHECK_TIMEOUT))? {
            return Err(format!("mpi_check on {np} ranks failed or timed out"));
        }
        eprintln!(
            "  mpi_check on {np} ranks: ok ({:.1}s)",
            t.elapsed().as_secs_f64()
        );
    }
    mismatch(&exe, 3)?;
    overlap()?;
    shard_crate()?;
    basis_checks()
}

/// The `basis` binary under mpirun: sharded runs equal to `LocalComm`
/// (`mpi/shard.rs`), then the fault runs (`mpi/faults.rs`).
fn basis_checks() -> Result<(), String> {
    let exe = shard::build()?;
    let dir = std::env::temp_dir().join(format!("basis-shard-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = shard::check(&exe, &dir)
        .and_then(|()| shard::check_overlap(&exe, &dir))
        .and_then(|()| faults::check(&exe, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `comm-mpi`'s `mpi_overlap` example on 2, 3 and 4 ranks: non-blocking
/// collectives (`basis-std`'s `Overlapped` over `MpiComm`) with many
/// requests in flight must equal the blocking MPI calls and `LocalComm`
/// bit for bit, with equal byte statistics, and a size error on one rank
/// must be an error on every rank; `onebit-adam`'s `overlapped_allreduce`
/// must equal `compressed_allreduce` per bucket, and `OneBitAdam`'s split
/// step its blocking step (parameters, state record, reports).
fn overlap() -> Result<(), String> {
    util::run(cargo().args([
        "build",
        "-p",
        "basisopt-comm-mpi",
        "--example",
        "mpi_overlap",
        "--profile",
        "test",
    ]))?;
    let exe = target_dir().join("debug/examples/mpi_overlap");
    for np in CHECK_RANKS {
        let t = Instant::now();
        let mut cmd = mpirun(np, Transport::ShmPortable, Some(CHECK_TIMEOUT));
        cmd.arg(&exe);
        if !util::run_with_timeout(&mut cmd, outer(CHECK_TIMEOUT))? {
            return Err(format!("mpi_overlap on {np} ranks failed or timed out"));
        }
        eprintln!(
            "  mpi_overlap on {np} ranks: ok ({:.1}s)",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// `basis-shard`'s `custom_loop_mpi` example on 2 and 3 ranks: every rank's
/// model over MPI must equal the same loop over `LocalComm`, bit for bit.
fn shard_crate() -> Result<(), String> {
    util::run(cargo().args([
        "build",
        "-p",
        "basisopt-shard",
        "--features",
        "mpi",
        "--example",
        "custom_loop_mpi",
        "--profile",
        "test",
    ]))?;
    let exe = target_dir().join("debug/examples/custom_loop_mpi");
    for np in [2, 3] {
        let t = Instant::now();
        let mut cmd = mpirun(np, Transport::ShmPortable, Some(CHECK_TIMEOUT));
        cmd.arg(&exe);
        if !util::run_with_timeout(&mut cmd, outer(CHECK_TIMEOUT))? {
            return Err(format!("custom_loop_mpi on {np} ranks failed or timed out"));
        }
        eprintln!(
            "  basis-shard custom_loop_mpi on {np} ranks: MPI == LocalComm ({:.1}s)",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Run the `mismatch` mode on `np` ranks: the job must exit non-zero before
/// the timeout, and every rank must have printed the disagreement.
fn mismatch(exe: &std::path::Path, np: usize) -> Result<(), String> {
    let log = target_dir().join("mpi_check_mismatch.log");
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = mpirun(np, Transport::ShmPortable, Some(MISMATCH_TIMEOUT));
    cmd.arg(exe).arg("mismatch").stdout(file);
    let t = Instant::now();
    let ok = util::run_with_timeout(&mut cmd, outer(MISMATCH_TIMEOUT))?;
    let took = t.elapsed();
    let out = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    eprint!("{out}");
    if ok {
        return Err("the mismatch job exited with status 0".into());
    }
    if took >= MISMATCH_TIMEOUT {
        return Err(format!(
            "the mismatch job hung (killed after {}s)",
            MISMATCH_TIMEOUT.as_secs()
        ));
    }
    for rank in 0..np {
        for call in ["compressed_allreduce", "all_reduce_sum"] {
            let line = format!("mpi_check rank {rank}/{np}: mismatch detected ({call}):");
            let found = out
                .lines()
                .any(|l| l.starts_with(&line) && l.contains("disagree on a length"));
            if !found {
                return Err(format!(
                    "rank {rank} did not report the length mismatch of {call}"
                ));
            }
        }
    }
    eprintln!(
        "  mismatch on {np} ranks: every rank reported it, exit non-zero after {:.1}s",
        took.as_secs_f64()
    );
    Ok(())
}

/// `cargo xtask mpi --bench [--net RATE]`.
fn run_bench(net: Option<&str>, iters: Option<&str>) -> Result<(), String> {
    require_mpirun()?;
    util::run(cargo().args([
        "build",
        "--release",
        "-p",
        "basisopt-comm-mpi",
        "--example",
        "mpi_bench",
    ]))?;
    let exe = target_dir().join("release/examples/mpi_bench");
    let mut bench_args: Vec<String> = Vec::new();
    if let Some(k) = iters {
        bench_args.extend(["--iters".to_string(), k.to_string()]);
    }
    if let Some(rate) = net {
        bench_args.extend(["--label".to_string(), format!("tcp-{rate}")]);
    }
    let Some(rate) = net else {
        for np in BENCH_RANKS {
            let mut cmd = mpirun(np, Transport::Shm, None);
            cmd.arg(&exe).args(&bench_args);
            util::run(&mut cmd)?;
        }
        return Ok(());
    };
    // `unlimited`: TCP over the namespace's loopback without shaping.
    let rate = if rate == "unlimited" {
        None
    } else {
        Some(parse_rate(rate)?)
    };
    with_netns(rate.as_ref(), |mpirun_in_ns| {
        for np in BENCH_RANKS {
            let mut cmd = mpirun_in_ns(np);
            cmd.arg(&exe).args(&bench_args);
            util::run(&mut cmd)?;
        }
        Ok(())
    })
}

/// Run `body` inside the benchmark's network namespace, its loopback shaped
/// to `rate` (`None`: not shaped); `body` gets a builder of `mpirun -np N`
/// over TCP in that namespace. The namespace is removed even on failure.
fn with_netns(
    rate: Option<&Rate>,
    body: impl FnOnce(&dyn Fn(usize) -> Command) -> Result<(), String>,
) -> Result<(), String> {
    if !is_root() {
        return Err("--net needs root (ip netns, tc)".into());
    }
    for tool in ["ip", "tc"] {
        if !have(tool) {
            return Err(format!("--net needs `{tool}` (apt-get install iproute2)"));
        }
    }
    // A namespace left over from a killed run would make `add` fail.
    let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
    util::run(Command::new("ip").args(["netns", "add", NETNS]))?;
    let result = (|| {
        let in_ns = |args: &[&str]| {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", NETNS]).args(args);
            cmd
        };
        util::run(&mut in_ns(&["ip", "link", "set", "lo", "up"]))?;
        if let Some(rate) = rate {
            let burst = rate.burst();
            util::run(&mut in_ns(&[
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "tbf",
                "rate",
                &rate.tc_rate,
                "burst",
                &burst,
                "latency",
                "100ms",
            ]))?;
        }
        util::run(&mut in_ns(&["tc", "qdisc", "show", "dev", "lo"]))?;
        body(&|np| {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", NETNS, "mpirun"]);
            cmd.args(mpirun_flags(np, Transport::Tcp));
            cmd.envs(mpirun_env());
            cmd
        })
    })();
    let removed = util::run(Command::new("ip").args(["netns", "del", NETNS]));
    result.and(removed)
}

/// A `tc` rate and the bucket size that goes with it.
struct Rate {
    tc_rate: String,
    bits_per_second: u64,
}

impl Rate {
    /// Token-bucket size: 1 ms of traffic, at least 256 KiB (loopback
    /// packets reach 64 KiB; a bucket smaller than a packet drops it).
    fn burst(&self) -> String {
        let bytes = (self.bits_per_second / 8 / 1000).max(256 * 1024);
        format!("{bytes}b")
    }
}

fn parse_rate(s: &str) -> Result<Rate, String> {
    let lower = s.to_ascii_lowercase();
    let (num, mult) = if let Some(n) = lower.strip_suffix("gbit") {
        (n, 1_000_000_000u64)
    } else if let Some(n) = lower.strip_suffix("mbit") {
        (n, 1_000_000u64)
    } else {
        return Err(format!("rate `{s}`: use e.g. 1gbit, 10gbit, 500mbit"));
    };
    let n: u64 = num.parse().map_err(|_| format!("rate `{s}`: bad number"))?;
    if n == 0 {
        return Err("rate must be positive".into());
    }
    Ok(Rate {
        tc_rate: lower.clone(),
        bits_per_second: n * mult,
    })
}

fn require_mpirun() -> Result<(), String> {
    if have("mpirun") {
        Ok(())
    } else {
        Err("mpirun not found: apt-get install openmpi-bin libopenmpi-dev".into())
    }
}

/// `mpirun` with the flags of [`mpirun_flags`] and the environment of
/// [`mpirun_env`], under coreutils' `timeout` when given a limit: `mpirun`
/// then gets SIGTERM and takes its ranks down with it, where the SIGKILL of
/// `util::run_with_timeout` (the outer guard) would orphan them.
fn mpirun(np: usize, transport: Transport, limit: Option<Duration>) -> Command {
    let mut cmd = match limit {
        Some(limit) if have("timeout") => {
            let mut c = Command::new("timeout");
            c.args(["-k", "5", &limit.as_secs().to_string(), "mpirun"]);
            c
        }
        _ => Command::new("mpirun"),
    };
    cmd.args(mpirun_flags(np, transport)).envs(mpirun_env());
    cmd
}

/// The outer limit for a command run under [`mpirun`] with `limit`.
fn outer(limit: Duration) -> Duration {
    limit + Duration::from_secs(10)
}

/// How the ranks of one `mpirun` talk to each other.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// Shared memory (`vader`) without its ptrace-based single-copy path,
    /// which containers often forbid: the robust choice for CI.
    ShmPortable,
    /// Shared memory with Open MPI's defaults (the fastest baseline).
    Shm,
    /// TCP over the loopback only (inside the shaped namespace).
    Tcp,
}

/// Flags that make `mpirun` work on a CI box: any rank count on few cores,
/// as root, no binding, one host without a hostfile, and idle ranks that
/// yield the CPU (`mpi_yield_when_idle`): on a shared, oversubscribed
/// machine a rank spinning in a collective otherwise steals the core its
/// peer needs — measured here, a 16 MiB all-reduce on 2 ranks took 800 ms
/// spinning and 99 ms yielding.
fn mpirun_flags(np: usize, transport: Transport) -> Vec<String> {
    let mut f: Vec<String> = vec!["--oversubscribe".into(), "-np".into(), np.to_string()];
    if is_root() {
        f.push("--allow-run-as-root".into());
    }
    f.extend(["--bind-to".into(), "none".into()]);
    let mut mca: Vec<(&str, &str)> = vec![("mpi_yield_when_idle", "1")];
    match transport {
        Transport::ShmPortable => {
            mca.push(("btl", "self,vader"));
            mca.push(("btl_vader_single_copy_mechanism", "none"));
        }
        Transport::Shm => mca.push(("btl", "self,vader")),
        Transport::Tcp => {
            mca.push(("btl", "tcp,self"));
            mca.push(("btl_tcp_if_include", "lo"));
            mca.push(("oob_tcp_if_include", "lo"));
        }
    }
    for (k, v) in mca {
        f.extend(["--mca".into(), k.into(), v.into()]);
    }
    f
}

/// Environment for `mpirun`: Open MPI's root confirmation (some builds ask
/// for it in addition to the flag) and no attempt to reach other hosts.
fn mpirun_env() -> Vec<(&'static str, &'static str)> {
    let mut env = vec![("OMPI_MCA_plm_rsh_agent", "false")];
    if is_root() {
        env.push(("OMPI_ALLOW_RUN_AS_ROOT", "1"));
        env.push(("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"));
    }
    env
}

/// Where cargo puts build outputs (`$CARGO_TARGET_DIR` or `<root>/target`).
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() { d } else { root().join(d) }
        }
        None => root().join("target"),
    }
}
