//! `cargo xtask bench --peers [--rounds R]`: same-run, interleaved
//! comparisons of our dense kernels with PyTorch and numpy (opt-in only:
//! it installs torch, ~3 GB, into a venv under `target/peers/venv`; never
//! part of CI).
//!
//! Two resident processes hold their tensors for the whole run: ours
//! (`basis-rayon`'s `peers` example) and the peer (`xtask/peers.py`). Each
//! round asks every kernel of both for one timed call, alternating between
//! the processes and reversing the order every other round, so a burst of
//! load from elsewhere hits both sides alike. The table gives medians over
//! the rounds and the median of the per-round ratios; the load average is
//! printed before and after.
//!
//! `--ab OLD,NEW` (kernel names of `onebit_adam::Kernel`: `scalar`, `sse2`,
//! `avx`, `avx512`) adds our dense Adam calls forced onto each of the two
//! kernels to every round, interleaved like the rest, and prints NEW's
//! speed-up over OLD and each against torch.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::stats::{loadavg, median};
use crate::util::{self, root};

/// One timing server (ours or the peer), one line per request.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    fn spawn(cmd: &mut Command) -> Result<Self, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn {cmd:?}: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    fn time(&mut self, kernel: &str) -> Result<f64, String> {
        writeln!(self.stdin, "{kernel}").map_err(|e| e.to_string())?;
        self.stdin.flush().map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        line.trim()
            .parse()
            .map_err(|_| format!("`{kernel}`: bad answer {line:?} (did the server die?)"))
    }

    fn quit(mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Ours,
    Peer,
}

/// One kernel on one side.
type Call = (Side, &'static str);

/// Each round's calls, in order (reversed on odd rounds).
const CALLS: [Call; 17] = [
    (Side::Ours, "adam1"),
    (Side::Ours, "adam1_ds"),
    (Side::Peer, "adam1"),
    (Side::Peer, "adam1_chk"),
    (Side::Peer, "adam1_amp"),
    (Side::Ours, "onebit_local"),
    (Side::Ours, "adam2"),
    (Side::Peer, "adam2"),
    (Side::Ours, "pack"),
    (Side::Peer, "packbits"),
    (Side::Ours, "sum"),
    (Side::Ours, "sum4"),
    (Side::Ours, "compress"),
    (Side::Ours, "memcpy"),
    (Side::Ours, "onebit_step"),
    (Side::Ours, "onebit_step_nochk"),
    (Side::Ours, "bw7"),
];

/// One kernel on one side, built at run time (`--ab` adds calls).
type OwnedCall = (Side, String);

/// What the table compares: `(label, fast side, baseline side, how to read)`;
/// the ratio is baseline time ÷ our time (> 1: ours is faster).
type Pair = (String, OwnedCall, OwnedCall, &'static str);

/// The fixed comparisons (see [`Pair`]).
const PAIRS: [(&str, Call, Call, &str); 15] = [
    (
        "dense Adam, 1 thread vs torch Adam(fused=True)",
        (Side::Ours, "adam1"),
        (Side::Peer, "adam1"),
        "target >= 1.0x",
    ),
    (
        "dense Adam without bias correction (1-bit Adam's default), 1 thread vs torch",
        (Side::Ours, "adam1_ds"),
        (Side::Peer, "adam1"),
        "info",
    ),
    (
        "dense Adam, 2 threads vs torch fused, 2 threads",
        (Side::Ours, "adam2"),
        (Side::Peer, "adam2"),
        "target >= 1.0x",
    ),
    (
        "OneBitAdam::step_with_grad, warm-up, P = 1 (the user's call) vs torch Adam(fused=True), 1 thread",
        (Side::Ours, "onebit_step"),
        (Side::Peer, "adam1"),
        "target >= 1.0x",
    ),
    (
        "OneBitAdam warm-up step, gradient checked (default) vs torch isfinite(g).all() + Adam(fused=True), 1 thread (both check, then step)",
        (Side::Ours, "onebit_step"),
        (Side::Peer, "adam1_chk"),
        "info",
    ),
    (
        "OneBitAdam warm-up step, gradient checked (default) vs torch GradScaler's fused check (_amp_foreach_non_finite_check_and_unscale_, scale 1) + Adam(fused=True), 1 thread",
        (Side::Ours, "onebit_step"),
        (Side::Peer, "adam1_amp"),
        "target >= 1.0x",
    ),
    (
        "OneBitAdam warm-up step, FiniteCheck::Off vs torch Adam(fused=True), 1 thread (neither checks)",
        (Side::Ours, "onebit_step_nochk"),
        (Side::Peer, "adam1"),
        "target >= 1.0x",
    ),
    (
        "OneBitAdam warm-up step: FiniteCheck::On vs Off (share of the unchecked speed; bound 28/32 = 0.875)",
        (Side::Ours, "onebit_step"),
        (Side::Ours, "onebit_step_nochk"),
        "info",
    ),
    (
        "OneBitAdam warm-up step vs the bare kernel without bias correction (share of its speed)",
        (Side::Ours, "onebit_step"),
        (Side::Ours, "adam1_ds"),
        "info",
    ),
    (
        "OneBitAdam warm-up step vs a 4-read 3-write bandwidth probe (share of its speed)",
        (Side::Ours, "onebit_step"),
        (Side::Ours, "bw7"),
        "info",
    ),
    (
        "1-bit local step (momentum + compression) vs torch fused Adam, 1 thread",
        (Side::Ours, "onebit_local"),
        (Side::Peer, "adam1"),
        "target >= 1.0x",
    ),
    (
        "fused compressor vs memcpy (share of memcpy's speed)",
        (Side::Ours, "compress"),
        (Side::Ours, "memcpy"),
        "target >= 0.60",
    ),
    (
        "pack_signs_into vs numpy.packbits(~(x < 0))",
        (Side::Ours, "pack"),
        (Side::Peer, "packbits"),
        "target >= 1.5x",
    ),
    (
        "pack_signs_into vs read-only sum (share of its speed)",
        (Side::Ours, "pack"),
        (Side::Ours, "sum"),
        "target >= 0.90",
    ),
    (
        "pack_signs_into vs read-only sum over 4 streams (its read pattern)",
        (Side::Ours, "pack"),
        (Side::Ours, "sum4"),
        "info",
    ),
];

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut rounds = 9usize;
    let mut ab: Option<(String, String)> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--peers" => {}
            "--rounds" => {
                rounds = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&r| r >= 1)
                    .ok_or("--rounds needs a positive number")?;
            }
            "--ab" => {
                let (old, new) = it
                    .next()
                    .and_then(|v| v.split_once(','))
                    .ok_or("--ab needs OLD,NEW kernel names (e.g. avx,avx512)")?;
                ab = Some((old.to_owned(), new.to_owned()));
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (bench --peers [--rounds R] [--ab OLD,NEW])"
                ));
            }
        }
    }
    let own = |(side, kernel): Call| (side, kernel.to_owned());
    let mut calls: Vec<OwnedCall> = CALLS.into_iter().map(own).collect();
    let mut pairs: Vec<Pair> = PAIRS
        .into_iter()
        .map(|(label, fast, base, target)| (label.to_owned(), own(fast), own(base), target))
        .collect();
    if let Some((old, new)) = &ab {
        for (kernel, peer) in [
            ("adam1", "adam1"),
            ("adam1_ds", "adam1"),
            ("adam2", "adam2"),
        ] {
            let (o, n) = (
                (Side::Ours, format!("{kernel}:{old}")),
                (Side::Ours, format!("{kernel}:{new}")),
            );
            calls.push(o.clone());
            calls.push(n.clone());
            let torch = (Side::Peer, peer.to_owned());
            pairs.push((
                format!("A/B {kernel}: {new} vs {old}"),
                n.clone(),
                o.clone(),
                "info",
            ));
            pairs.push((
                format!("A/B {kernel} on {old} vs torch {peer}"),
                o,
                torch.clone(),
                "info",
            ));
            pairs.push((
                format!("A/B {kernel} on {new} vs torch {peer}"),
                n,
                torch,
                "info",
            ));
        }
    }
    let root = root();
    let python = ensure_venv(&root.join("target/peers/venv"))?;
    util::run(util::cargo().args([
        "build",
        "--release",
        "-p",
        "basisopt-rayon",
        "--example",
        "peers",
    ]))?;
    println!("load average before: {}", loadavg());
    let mut ours = Server::spawn(&mut Command::new(
        root.join("target/release/examples/peers"),
    ))?;
    // OpenMP threads of torch otherwise spin for a while after each
    // parallel call (libgomp's active wait), taking a core from whichever of
    // our kernels runs next on this 2-core machine; passive waiting costs
    // torch only the wake-up (microseconds against ~100 ms calls).
    let mut peer = Server::spawn(
        Command::new(&python)
            .arg(root.join("xtask/peers.py"))
            .env("OMP_WAIT_POLICY", "PASSIVE"),
    )?;
    // Warm-up round (page faults, first-touch, thread start-up): not kept.
    let mut call = |side: Side, kernel: &str| match side {
        Side::Ours => ours.time(kernel),
        Side::Peer => peer.time(kernel),
    };
    for (side, kernel) in &calls {
        call(*side, kernel.as_str())?;
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); calls.len()];
    for r in 0..rounds {
        let order: Vec<usize> = if r % 2 == 0 {
            (0..calls.len()).collect()
        } else {
            (0..calls.len()).rev().collect()
        };
        for i in order {
            let (side, kernel) = &calls[i];
            times[i].push(call(*side, kernel.as_str())?);
        }
    }
    ours.quit();
    peer.quit();
    let load_after = loadavg();
    let index = |want: &OwnedCall| calls.iter().position(|c| c == want);
    println!("\n{rounds} interleaved rounds; medians in ms");
    for (i, (side, kernel)) in calls.iter().enumerate() {
        let who = if *side == Side::Ours { "ours" } else { "peer" };
        println!(
            "  {who} {kernel:<16} median {:8.2}  min {:8.2}",
            median(&times[i]),
            min(&times[i])
        );
    }
    println!();
    for (label, fast, base, target) in &pairs {
        let (Some(f), Some(b)) = (index(fast), index(base)) else {
            continue;
        };
        let per_round: Vec<f64> = times[b].iter().zip(&times[f]).map(|(b, f)| b / f).collect();
        println!(
            "{label}: {:.2} (median of per-round ratios; range {:.2}-{:.2}); ratio of medians {:.2}  [{target}]",
            median(&per_round),
            min(&per_round),
            per_round.iter().copied().fold(f64::MIN, f64::max),
            median(&times[b]) / median(&times[f]),
        );
    }
    println!("load average after: {load_after}");
    Ok(())
}

/// The venv's python, created and provisioned on first use.
pub(crate) fn ensure_venv(venv: &Path) -> Result<std::path::PathBuf, String> {
    let python = venv.join("bin/python");
    if !python.exists() {
        util::run(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    }
    let ready = Command::new(&python)
        .args(["-c", "import numpy, torch"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        // Plain PyPI: the default torch wheel runs on CPU (~3 GB with its
        // CUDA libraries, which this benchmark never loads).
        util::run(Command::new(venv.join("bin/pip")).args(["install", "numpy", "torch"]))?;
    }
    Ok(python)
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}
