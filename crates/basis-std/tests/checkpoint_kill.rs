//! A writer process is SIGKILLed at random moments while it saves checkpoints
//! in a loop; after every kill the directory must still hold a valid
//! checkpoint no older than the last one seen, with exactly the contents
//! written for its step.
//!
//! Runs without the libtest harness (`harness = false`) because the test
//! re-executes its own binary as the writer: `checkpoint_kill --writer DIR`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use core::time::Duration;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use basis_std::checkpoint::{Checkpoint, CheckpointDir};

/// Contents written for `step`: big enough (~256 KiB) that a kill often
/// lands inside a write, and different for every step.
fn contents(step: u64) -> Checkpoint {
    let mut state = step.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let data: Vec<u8> = (0..256 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut c = Checkpoint::new();
    c.insert("step", step.to_le_bytes()).unwrap();
    c.insert("data", data).unwrap();
    c
}

/// The writer: resume from the newest checkpoint and save forever.
fn writer(dir: &Path) -> ! {
    let ckpts = CheckpointDir::open(dir, 2).unwrap();
    let mut step = match ckpts.load_latest().unwrap() {
        Some(r) => r.step + 1,
        None => 1,
    };
    loop {
        ckpts.save(step, &contents(step)).unwrap();
        step += 1;
    }
}

fn leftover_temps(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().contains(".tmp-")
        })
        .count()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, dir] = &args[..]
        && flag == "--writer"
    {
        writer(Path::new(dir));
    }
    // libtest-style arguments (filters, --list) are ignored: one test only.
    if args.iter().any(|a| a == "--list") {
        println!("sigkill_during_checkpoint_writes: test");
        return;
    }
    let dir = std::env::temp_dir().join(format!("basis-std-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x2545_f491_4f6c_dd1du64 ^ u64::from(std::process::id());
    let mut last_step = 0;
    let mut interrupted_writes = 0;
    let rounds = 8;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .arg("--writer")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Let the writer get past its first save before the first kill.
        let wait = Duration::from_millis(30 + rng % 120);
        let started = Instant::now();
        while started.elapsed() < wait {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("writer exited on its own: {status}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();

        interrupted_writes += leftover_temps(&dir);
        let ckpts = CheckpointDir::open(&dir, 2).unwrap();
        assert_eq!(leftover_temps(&dir), 0, "open must clean temp files");
        let Some(latest) = ckpts.load_latest().unwrap() else {
            // Killed before its first save finished: nothing to check yet.
            assert_eq!(last_step, 0, "round {round}: checkpoints vanished");
            continue;
        };
        assert!(latest.skipped.is_empty(), "{:?}", latest.skipped);
        assert!(latest.step >= last_step, "round {round}: went back in time");
        assert_eq!(
            latest.checkpoint,
            contents(latest.step),
            "step {}",
            latest.step
        );
        last_step = latest.step;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(last_step > 0, "the writer never completed a checkpoint");
    println!(
        "sigkill_during_checkpoint_writes: {rounds} kills, reached step {last_step}, \
         {interrupted_writes} interrupted writes left temp files ... ok"
    );
}
