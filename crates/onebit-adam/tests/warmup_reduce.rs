//! `WarmupReduce::Bf16` against a slow reference: every rank's warm-up
//! step equals a one-rank step on the mean the reference computes element
//! by element (each rank's gradient rounded to bfloat16, summed in rank
//! order from 0, divided by P, rounded again), bit for bit, at P = 2..4;
//! it sends half the bytes of the f32 warm-up (plus the header); steps
//! after the freeze are those of the f32 warm-up's scheme; one rank skips
//! the reduce either way; ranks that disagree on it fail at the header.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::{CommStats, Communicator, SingleRank};
use onebit_adam::testing::{bits, rank_input};
use onebit_adam::{
    Config, Grade, GroupSpec, OneBitAdam, OneBitError, Stage, Variant, WarmupReduce,
    graded_allreduce_bytes,
};

/// `x` rounded to bfloat16 and back (round to nearest even; finite `x`).
fn bf16(x: f32) -> f32 {
    let b = x.to_bits();
    f32::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
}

/// The reference mean of the ranks' gradients under the bf16 reduce.
fn reference_mean(grads: &[Vec<f32>]) -> Vec<f32> {
    let p = grads.len() as f32;
    (0..grads[0].len())
        .map(|i| {
            let mut sum = 0.0f32;
            for g in grads {
                sum += bf16(g[i]);
            }
            bf16(sum / p)
        })
        .collect()
}

fn groups() -> Vec<GroupSpec> {
    vec![
        GroupSpec::one_bit(301),
        GroupSpec::full_precision(40),
        GroupSpec::one_bit(64),
    ]
}

fn config() -> Config {
    Config::default()
        .with_lr(1e-2)
        .with_freeze_step(3)
        .with_bias_correction(true)
        .with_variant(Variant::PreconditionedMomentum)
        .with_warmup_reduce(WarmupReduce::Bf16)
}

fn init(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37).sin()).collect()
}

#[test]
fn bf16_warmup_steps_equal_a_single_rank_step_on_the_reference_mean() {
    for p in 2..=4 {
        let n: usize = groups().iter().map(|g| g.len).sum();
        let got = LocalComm::run(p, |mut comm| {
            let mut opt = OneBitAdam::with_groups(&groups(), config()).unwrap();
            let mut x = init(n);
            let mut trace = Vec::new();
            for t in 0..3 {
                let g = rank_input(comm.rank(), t, n);
                let r = opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
                assert_eq!(r.stage, Stage::Warmup);
                trace.push((bits(&x), r.bytes));
            }
            trace
        });
        // The reference: one rank fed the reference mean at each step.
        let mut opt = OneBitAdam::with_groups(&groups(), config()).unwrap();
        let mut x = init(n);
        for t in 0..3 {
            let grads: Vec<Vec<f32>> = (0..p).map(|r| rank_input(r, t, n)).collect();
            let mean = reference_mean(&grads);
            opt.step_with_grad(&mut SingleRank::default(), &mut x, &mean)
                .unwrap();
            for (rank, trace) in got.iter().enumerate() {
                let trace = trace.as_ref().unwrap();
                assert!(
                    trace[t].0 == bits(&x),
                    "P = {p}, rank {rank}, step {}: params differ from the reference",
                    t + 1
                );
            }
        }
        // Bytes: each group's bf16 all-reduce (its own header not sent:
        // the step has one header) against the f32 ring's.
        let want: u64 = groups()
            .iter()
            .filter(|g| g.len > 0)
            .map(|g| graded_allreduce_bytes(Grade::Bf16, g.len, p) - (p as u64 - 1) * 40)
            .sum::<u64>()
            + (p as u64 - 1) * 40;
        let f32_bytes: u64 = groups()
            .iter()
            .map(|g| CommStats::allreduce_f32_bytes(p, g.len))
            .sum();
        for trace in &got {
            let sent = trace.as_ref().unwrap()[0].1.bytes_sent;
            assert_eq!(sent, want, "P = {p}");
            assert!(sent < f32_bytes * 6 / 10 + (p as u64 - 1) * 40, "P = {p}");
        }
    }
}

/// One rank: every path (the direct step, an accumulated sum, a gradient
/// given after an accumulation: the mean path) steps alike under either
/// reduce.
#[test]
fn one_rank_steps_alike_under_either_reduce() {
    let n: usize = groups().iter().map(|g| g.len).sum();
    let run = |reduce: WarmupReduce| {
        let mut opt =
            OneBitAdam::with_groups(&groups(), config().with_warmup_reduce(reduce)).unwrap();
        let mut x = init(n);
        let mut comm = SingleRank::default();
        for t in 0..6 {
            let g = rank_input(0, t, n);
            match t % 3 {
                0 => {
                    opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
                }
                1 => {
                    opt.accumulate(&g).unwrap();
                    opt.step(&mut comm, &mut x).unwrap();
                }
                _ => {
                    opt.accumulate(&g).unwrap();
                    opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
                }
            }
        }
        (bits(&x), opt.export_state())
    };
    assert!(run(WarmupReduce::Bf16) == run(WarmupReduce::F32));
}

#[test]
fn the_run_goes_on_past_the_freeze_and_ranks_agree() {
    let n: usize = groups().iter().map(|g| g.len).sum();
    let out = LocalComm::run(3, |mut comm| {
        let mut opt = OneBitAdam::with_groups(&groups(), config()).unwrap();
        let mut x = init(n);
        for t in 0..8 {
            let g = rank_input(comm.rank(), t, n);
            let r = opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
            assert_eq!(r.stage == Stage::Compressed, t >= 3, "step {}", t + 1);
        }
        // The warm-up's buffers are freed once compressing.
        assert_eq!(
            opt.memory().scratch,
            OneBitAdam::with_groups(&groups(), config().with_warmup_reduce(WarmupReduce::F32))
                .map(|mut o| {
                    let mut y = init(n);
                    for t in 0..8 {
                        let g = rank_input(comm.rank(), t, n);
                        o.step_with_grad(&mut comm, &mut y, &g).unwrap();
                    }
                    o.memory().scratch
                })
                .unwrap()
        );
        x.iter().all(|v| v.is_finite())
    });
    assert!(out.into_iter().all(|r| r.unwrap()));
}

#[test]
fn ranks_that_disagree_on_the_reduce_fail_together_at_the_header() {
    let n: usize = groups().iter().map(|g| g.len).sum();
    let out = LocalComm::run(2, |mut comm| {
        let reduce = if comm.rank() == 0 {
            WarmupReduce::Bf16
        } else {
            WarmupReduce::F32
        };
        let mut opt =
            OneBitAdam::with_groups(&groups(), config().with_warmup_reduce(reduce)).unwrap();
        let mut x = init(n);
        let before = bits(&x);
        let g = rank_input(comm.rank(), 0, n);
        let err = opt.step_with_grad(&mut comm, &mut x, &g).unwrap_err();
        assert!(bits(&x) == before, "parameters changed");
        assert_eq!(opt.steps(), 0);
        err
    });
    for r in out {
        assert!(matches!(r.unwrap(), OneBitError::Comm(_)));
    }
}
