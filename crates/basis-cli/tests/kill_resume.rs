//! Kill test (Unix): `basis train --checkpoint DIR` is SIGKILLed at random moments
//! several times and resumed with `--resume` until it completes; its final
//! state must equal an uninterrupted run's bit for bit.
//!
//! "Bit for bit" is checked twice: the final checkpoint files — model table,
//! dense parameters and their Adam state, the sparse optimizer's exported
//! state, the data-order RNG state and the metric history, as sections of a
//! `basis_std::checkpoint` file — are byte-identical, and the printed
//! `model crc32` lines match. On a mismatch the test names the sections that
//! differ.

#![cfg(unix)]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use core::time::Duration;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use basis_std::checkpoint::Checkpoint;

/// A small run with many short epochs, so kills land in different epochs,
/// inside batches and during checkpoint writes.
const ARGS: &[&str] = &[
    "train",
    "--quiet",
    "--synthetic-examples",
    "6000",
    "--epochs",
    "20",
    "--batch",
    "64",
    "--dim",
    "8",
    "--opt",
    "basis",
];
const KILLS: usize = 5;
const EPOCHS: u32 = 20;

fn basis(dir: &Path, resume: bool) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basis"));
    cmd.args(ARGS).arg("--checkpoint").arg(dir);
    if resume {
        cmd.arg("--resume");
    }
    cmd
}

/// Run to completion; return stdout.
fn finish(dir: &Path, resume: bool) -> String {
    let out = basis(dir, resume).output().unwrap();
    assert!(
        out.status.success(),
        "basis failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn crc_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.starts_with("model crc32:"))
        .unwrap_or_else(|| panic!("no `model crc32` line in:\n{stdout}"))
}

/// The single checkpoint file the run keeps in `dir`, if it wrote one yet.
fn checkpoint_file(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .collect();
    assert!(files.len() <= 1, "several checkpoints: {files:?}");
    files.pop()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("basis-kill-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Identity of the checkpoint file now: each save renames a fresh file into
/// place, so a new inode means a new epoch was checkpointed.
fn checkpoint_id(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let file = checkpoint_file(dir)?;
    std::fs::metadata(file).ok().map(|m| m.ino())
}

/// Fail with the names of the sections that differ, if the files differ.
fn assert_same_checkpoint(victim: &[u8], clean: &[u8]) {
    if victim == clean {
        return;
    }
    let (a, b) = (
        Checkpoint::decode(victim).unwrap(),
        Checkpoint::decode(clean).unwrap(),
    );
    let differing: Vec<&str> = b.names().filter(|n| a.get(n) != b.get(n)).collect();
    panic!(
        "final checkpoints differ ({} vs {} bytes) in sections {differing:?}",
        victim.len(),
        clean.len()
    );
}

#[test]
fn sigkilled_training_resumes_to_the_same_bits() {
    // The reference: one uninterrupted run; it also measures an epoch
    // (time from the first checkpoint to the end, per remaining epoch).
    let clean = scratch("clean");
    let mut child = basis(&clean, false)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while checkpoint_id(&clean).is_none() && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let first = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let epoch_time = first.elapsed() / (EPOCHS - 1);
    let clean_out = String::from_utf8(out.stdout).unwrap();
    let clean_ckpt = std::fs::read(checkpoint_file(&clean).unwrap()).unwrap();

    // The victim: killed KILLS times, resumed each time. Each attempt waits
    // until it has checkpointed one more epoch (so the run always makes
    // progress), then dies at a random moment within the next epoch:
    // inside a batch, during evaluation or during the next checkpoint write.
    let victim = scratch("victim");
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let (mut interrupted, mut resumed_from_file) = (0, 0);
    for _ in 0..KILLS {
        let before = checkpoint_id(&victim);
        resumed_from_file += usize::from(before.is_some());
        let mut child = basis(&victim, before.is_some())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        while checkpoint_id(&victim) == before && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = epoch_time.mul_f64((rng % 1000) as f64 / 1000.0);
        let deadline = Instant::now() + delay;
        while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = Instant::now();
        match child.try_wait().unwrap() {
            Some(status) => {
                println!("attempt finished by itself after {:?}", t.elapsed());
                assert!(status.success(), "basis exited early: {status}")
            }
            None => {
                println!("attempt killed {delay:?} after a new checkpoint");
                child.kill().unwrap(); // SIGKILL on Unix: no destructor, no flush
                child.wait().unwrap();
                interrupted += 1;
            }
        }
    }
    let resume = checkpoint_file(&victim).is_some();
    resumed_from_file += usize::from(resume);
    let victim_out = finish(&victim, resume);
    let victim_ckpt = std::fs::read(checkpoint_file(&victim).unwrap()).unwrap();

    println!(
        "{interrupted} of {KILLS} kills hit a running process; \
         {resumed_from_file} runs resumed from a checkpoint; epoch {epoch_time:?}"
    );
    assert!(interrupted >= 2, "too few kills landed while training ran");
    assert!(resumed_from_file >= 2, "too few resumes from a checkpoint");
    assert_eq!(crc_line(&victim_out), crc_line(&clean_out));
    assert_same_checkpoint(&victim_ckpt, &clean_ckpt);
    let _ = std::fs::remove_dir_all(&clean);
    let _ = std::fs::remove_dir_all(&victim);
}
