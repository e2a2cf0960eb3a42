//! A data-parallel 1-bit Adam run (3 ranks on `LocalComm`) whose every rank
//! dies after step 7 — in the compressed stage, with non-zero worker and
//! server error buffers — resumes from per-rank checkpoint files
//! (`basis_std::checkpoint`) to exactly the bits of an uninterrupted run.
//! Also: what goes wrong without the error buffers (DeepSpeed's behaviour),
//! and with the ranks' files swapped.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failing test, not a user-facing crash"
)]

use std::path::{Path, PathBuf};

use basis::adam::testing::{LogisticProblem, run_steps};
use basis::adam::{Config, OneBitAdam, OneBitError};
use basis::comm::Communicator;
use basis_std::checkpoint::{self, Checkpoint, CheckpointDir};
use basis_std::local::LocalComm;

const P: usize = 3;
const TOTAL: u64 = 12;
const CRASH_AFTER: u64 = 7;
const BATCH: Option<usize> = Some(16);

/// One rank's final parameters and exported optimizer state.
type Outcome = (Vec<f32>, Vec<u8>);

fn problem() -> LogisticProblem {
    LogisticProblem::generate(P, 64, 40, 5, 11)
}

fn config() -> Config {
    Config::default().with_lr(0.05).with_freeze_step(4)
}

/// Parameters and exported state of each rank after `steps` steps from zero.
fn uninterrupted(steps: u64) -> Vec<Outcome> {
    let problem = problem();
    LocalComm::run(P, |mut comm| {
        let mut opt = OneBitAdam::new(problem.params(), config()).unwrap();
        let mut params = vec![0.0f32; problem.params()];
        run_steps(&mut comm, &problem, &mut opt, &mut params, steps, BATCH).unwrap();
        (params, opt.export_state())
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

fn f32s_to_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn rank_dir(root: &Path, rank: usize) -> PathBuf {
    root.join(format!("rank{rank}"))
}

/// Train to `CRASH_AFTER`, checkpoint every rank, then leave a half-done
/// write of a later step behind (the "crash"), and drop the group.
fn train_and_crash(root: &Path) {
    let problem = problem();
    let results = LocalComm::run(P, |mut comm| {
        let rank = comm.rank();
        let mut opt = OneBitAdam::new(problem.params(), config()).unwrap();
        let mut params = vec![0.0f32; problem.params()];
        run_steps(
            &mut comm,
            &problem,
            &mut opt,
            &mut params,
            CRASH_AFTER,
            BATCH,
        )
        .unwrap();
        assert!(
            opt.error_norms().iter().any(|n| n.worker > 0.0),
            "the crash must happen with live error buffers"
        );
        let mut c = Checkpoint::new();
        c.insert("params", f32s_to_bytes(&params)).unwrap();
        c.insert("optimizer", opt.export_state()).unwrap();
        let dir = CheckpointDir::open(rank_dir(root, rank), 2).unwrap();
        dir.save(opt.steps(), &c).unwrap();
        // The next save is cut short by the crash: temp written, no rename.
        let staged = checkpoint::stage(&dir.path_for(opt.steps() + 1), &c.encode()[..100]).unwrap();
        core::mem::forget(staged);
    });
    assert!(results.iter().all(Result::is_ok));
}

/// Restore every rank from `root` (rank `r` reads `files_of(r)`), optionally
/// drop the error buffers, and run to `TOTAL`.
fn resume(
    root: &Path,
    files_of: fn(usize) -> usize,
    drop_errors: bool,
) -> Vec<Result<Outcome, OneBitError>> {
    let problem = problem();
    LocalComm::run(P, |mut comm| {
        let dir = CheckpointDir::open(rank_dir(root, files_of(comm.rank())), 2).unwrap();
        let restored = dir.load_latest().unwrap().unwrap();
        assert_eq!(restored.step, CRASH_AFTER);
        assert!(restored.skipped.is_empty());
        let mut params = bytes_to_f32s(restored.checkpoint.get("params").unwrap());
        let mut opt = OneBitAdam::new(problem.params(), config()).unwrap();
        opt.import_state(restored.checkpoint.get("optimizer").unwrap())
            .unwrap();
        if drop_errors {
            opt.reset_errors();
        }
        let left = TOTAL - opt.steps();
        run_steps(&mut comm, &problem, &mut opt, &mut params, left, BATCH)?;
        Ok((params, opt.export_state()))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("basis-faults-resume-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn every_rank_crashing_mid_run_resumes_to_the_same_bits() {
    let root = scratch("bits");
    train_and_crash(&root);
    let resumed = resume(&root, |r| r, false);
    let reference = uninterrupted(TOTAL);
    for (rank, (got, want)) in resumed.iter().zip(&reference).enumerate() {
        let (params, state) = got.as_ref().unwrap();
        let same_bits = params
            .iter()
            .zip(&want.0)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same_bits, "rank {rank}: parameters differ");
        assert!(*state == want.1, "rank {rank}: optimizer state differs");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn without_the_error_buffers_the_resumed_run_diverges() {
    // Why the buffers are in the checkpoint (DeepSpeed drops them): a run
    // restored without them is a different run.
    let root = scratch("noerr");
    train_and_crash(&root);
    let resumed = resume(&root, |r| r, true);
    let reference = uninterrupted(TOTAL);
    let (params, _) = resumed[0].as_ref().unwrap();
    assert!(
        params.iter().zip(&reference[0].0).any(|(a, b)| a != b),
        "dropping the error buffers should change the result"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn swapped_rank_files_fail_on_every_rank_instead_of_mixing_state() {
    let root = scratch("swap");
    train_and_crash(&root);
    // Rank 0 reads rank 1's files and vice versa.
    let resumed = resume(&root, |r| [1, 0, 2][r], false);
    for (rank, r) in resumed.iter().enumerate() {
        let err = r.as_ref().expect_err("a mixed-up restore must not train");
        assert!(
            matches!(
                err,
                OneBitError::StateShape { .. } | OneBitError::RemoteInput { .. }
            ),
            "rank {rank}: {err:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
