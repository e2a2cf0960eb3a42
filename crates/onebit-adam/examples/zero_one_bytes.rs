//! Bytes per step and final loss of 0/1 Adam against 1-bit Adam (and f32
//! Adam) on the crate's `testing` problem: sparse logistic regression,
//! 4 `LocalComm` ranks, 4096 parameters, mini-batches of 256 per rank.
//! Byte counts and losses are deterministic (no timing).
//!
//! `cargo run --release -p basisopt-onebit-adam --example zero_one_bytes [steps]`

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "an example: a failed unwrap is a failed run, the table is its output"
)]

use basis_std::local::LocalComm;
use comm_traits::Communicator;
use onebit_adam::testing::{LogisticProblem, run_steps};
use onebit_adam::{Config, OneBitAdam, ZeroOneAdam, ZeroOneConfig};

const RANKS: usize = 4;
const BATCH: usize = 256;
const LR: f32 = 0.005;

/// Mean bytes sent per step per rank, and the loss at rank 0's parameters.
fn one_bit(problem: &LogisticProblem, config: Config, steps: u64) -> (f64, f64) {
    let out = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::new(problem.params(), config).unwrap();
        let mut x = vec![0.0f32; problem.params()];
        let reports = run_steps(&mut c, problem, &mut opt, &mut x, steps, Some(BATCH)).unwrap();
        let bytes: u64 = reports.iter().map(|r| r.bytes.bytes_sent).sum();
        (bytes, x)
    });
    let (bytes, x) = out[0].as_ref().unwrap();
    (*bytes as f64 / steps as f64, problem.loss(x))
}

fn zero_one(problem: &LogisticProblem, config: ZeroOneConfig, steps: u64) -> (f64, f64, f64) {
    let out = LocalComm::run(RANKS, |mut c| {
        let mut opt = ZeroOneAdam::new(problem.params(), config).unwrap();
        let mut x = vec![0.0f32; problem.params()];
        let mut g = vec![0.0f32; problem.params()];
        let shard = 8192;
        let mut bytes = 0;
        for _ in 0..steps {
            // The batches `run_steps` draws for 1-bit Adam.
            let start = (opt.steps() as usize * BATCH) % (shard - BATCH + 1);
            problem
                .batch_loss_grad(c.rank(), start..start + BATCH, &x, &mut g)
                .unwrap();
            bytes += opt
                .step_with_grad(&mut c, &mut x, &g)
                .unwrap()
                .bytes
                .bytes_sent;
        }
        (bytes, x)
    });
    let (bytes, x0) = out[0].as_ref().unwrap();
    let worst = out
        .iter()
        .map(|r| problem.loss(&r.as_ref().unwrap().1))
        .fold(f64::MIN, f64::max);
    (*bytes as f64 / steps as f64, problem.loss(x0), worst)
}

fn main() {
    let steps: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let problem = LogisticProblem::generate(RANKS, 8192, 4095, 32, 7);
    let warm = steps / 5;
    let (adam_b, adam_l) = one_bit(
        &problem,
        Config::default().with_lr(LR).with_freeze_step(steps + 1),
        steps,
    );
    let (ob_b, ob_l) = one_bit(
        &problem,
        Config::default().with_lr(LR).with_freeze_step(warm),
        steps,
    );
    println!("{steps} steps, 4 ranks, 4096 parameters, batch {BATCH}/rank, lr {LR}");
    println!("| optimizer | bytes/step/rank | final loss (rank 0) |");
    println!("|---|---:|---:|");
    println!("| f32 Adam | {adam_b:.0} | {adam_l:.5} |");
    println!("| 1-bit Adam, freeze {warm} | {ob_b:.0} | {ob_l:.5} |");
    for (scaler, clipper) in [
        (steps / 20, 16),
        (steps / 10, 16),
        (steps / 40, 16),
        (steps / 20, 4),
    ] {
        let c = ZeroOneConfig::default()
            .with_lr(LR)
            .with_var_freeze_step(warm)
            .with_local_step_scaler(scaler.max(1))
            .with_local_step_clipper(clipper);
        let (b, l, worst) = zero_one(&problem, c, steps);
        println!(
            "| 0/1 Adam, var_freeze_step {warm}, κ 16, local_step_scaler {}, H {clipper} | {b:.0} ({:.2}× fewer than 1-bit Adam) | {l:.5} (worst rank {worst:.5}) |",
            scaler.max(1),
            ob_b / b
        );
    }
}
