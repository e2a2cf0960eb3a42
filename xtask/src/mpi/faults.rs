//! The sharded-training fault checks of `cargo xtask mpi`, under `mpirun`:
//!
//! - **resume**: a row-sharded run killed in its second epoch (every rank
//!   leaves through the CLI's hidden `BASIS_FAULT_EXIT=all:N`, after epoch
//!   1's per-rank checkpoints were written) and resumed with `--resume`
//!   must end with the `model_crc32` of the uninterrupted run;
//! - **killed rank**: one rank leaving mid-training (`BASIS_FAULT_EXIT=1:N`,
//!   `std::process::exit(3)` inside the step) must end the whole job with a
//!   non-zero exit well before the timeout, the output naming the rank that
//!   left and `mpirun` reporting the exit — no hang.

use super::shard::{ARGS, crc};
use super::{Transport, mpirun, outer};
use crate::util;
use core::time::Duration;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// The CLI's hidden fault variable (`crates/basis-cli/src/shard/fault.rs`).
const ENV: &str = "BASIS_FAULT_EXIT";
/// Ranks of both checks.
const NP: usize = 3;
/// Limit of one `mpirun` here (each run takes a few seconds).
const LIMIT: Duration = Duration::from_secs(60);
/// A step in the second epoch: 16 000 training examples in batches of 256
/// make 63 steps an epoch.
const IN_EPOCH_2: u64 = 100;

/// The determinism check's run (`shard::ARGS`) over two epochs on `NP`
/// ranks.
fn args() -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    let mut it = ARGS.iter();
    while let Some(&a) = it.next() {
        if a == "--epochs" {
            it.next();
            continue;
        }
        v.push(a.into());
    }
    let np = NP.to_string();
    v.extend(["--workers", &np, "--epochs", "2"].map(String::from));
    v
}

/// `mpirun -np NP basis ARGS extra` with `fault` in the ranks' environment.
fn job(exe: &Path, extra: &[&str], fault: Option<&str>) -> Command {
    let mut cmd = mpirun(NP, Transport::ShmPortable, Some(LIMIT));
    if let Some(f) = fault {
        cmd.env(ENV, f).args(["-x", ENV]);
    }
    cmd.arg(exe).args(args()).args(extra);
    cmd
}

/// Both checks, with scratch files in `dir`.
pub(super) fn check(exe: &Path, dir: &Path) -> Result<(), String> {
    resume(exe, dir)?;
    killed_rank(exe, dir)?;
    Ok(())
}

fn resume(exe: &Path, dir: &Path) -> Result<(), String> {
    let t = Instant::now();
    let whole = dir.join("whole.json");
    let mut local = Command::new(exe);
    local.args(args()).arg("--json").arg(&whole);
    if !util::run_with_timeout(&mut local, LIMIT)? {
        return Err("uninterrupted LocalComm run failed".into());
    }
    let ckpt = dir.join("ckpt");
    let ckpt = ckpt.to_str().ok_or("temp dir is not UTF-8")?;
    let fault = format!("all:{IN_EPOCH_2}");
    let mut first = job(exe, &["--checkpoint", ckpt], Some(&fault));
    if util::run_with_timeout(&mut first, outer(LIMIT))? {
        return Err(format!("the run with {ENV}={fault} exited 0"));
    }
    let resumed = dir.join("resumed.json");
    let res = resumed.to_str().ok_or("temp dir is not UTF-8")?;
    let mut second = job(
        exe,
        &["--checkpoint", ckpt, "--resume", "--json", res],
        None,
    );
    if !util::run_with_timeout(&mut second, outer(LIMIT))? {
        return Err("the resumed mpirun failed or timed out".into());
    }
    let (a, b) = (crc(&whole)?, crc(&resumed)?);
    if a != b {
        return Err(format!(
            "resumed mpirun model_crc32 {b}, uninterrupted LocalComm run {a}"
        ));
    }
    eprintln!(
        "  sharded resume on {NP} ranks: killed at step {IN_EPOCH_2}, resumed = uninterrupted (model crc32 {a}, {:.1}s)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn killed_rank(exe: &Path, dir: &Path) -> Result<(), String> {
    let log = dir.join("killed.log");
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = job(exe, &[], Some("1:10"));
    cmd.stdout(file).stderr(err);
    let t = Instant::now();
    let ok = util::run_with_timeout(&mut cmd, outer(LIMIT))?;
    let took = t.elapsed();
    let out = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    if ok {
        eprint!("{out}");
        return Err("the job with a rank leaving mid-step exited 0".into());
    }
    if took >= LIMIT {
        eprint!("{out}");
        return Err(format!(
            "the job with a rank leaving mid-step hung ({}s)",
            LIMIT.as_secs()
        ));
    }
    let named = out.contains(&format!("rank 1: {ENV}: leaving at step 10"));
    let reported = out.contains("non-zero status") || out.contains("exited on signal");
    if !named || !reported {
        eprint!("{out}");
        return Err(format!(
            "a rank leaving mid-step: output names the rank: {named}, mpirun reports the exit: {reported}"
        ));
    }
    eprintln!(
        "  sharded run on {NP} ranks, rank 1 exits at step 10: job ended non-zero after {:.1}s, rank named",
        took.as_secs_f64()
    );
    Ok(())
}
