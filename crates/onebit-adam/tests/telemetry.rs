//! `StepReport::groups` (per-group telemetry) against direct computations:
//! bytes from the wire formulas, scales and error norms from the slow
//! reference simulations, sign flips counted from the momentum.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::{CommStats, Communicator, SingleRank};
use onebit_adam::reference::{ReferenceState, simulate_allreduce, simulate_graded};
use onebit_adam::testing::{bits, rank_input as input};
use onebit_adam::{
    Config, Grade, GroupSpec, OneBitAdam, Policy, Stage, StepReport, Variant, padded_len,
};

fn groups() -> Vec<GroupSpec> {
    vec![
        GroupSpec::one_bit(40),
        GroupSpec::one_bit(37).with_policy(Policy::Graded(Grade::TwoBit)),
        GroupSpec::one_bit(29).with_policy(Policy::Graded(Grade::Bf16)),
        GroupSpec::full_precision(5),
    ]
}

fn config() -> Config {
    Config::default()
        .with_lr(0.01)
        .with_freeze_step(2)
        .with_variant(Variant::Momentum)
        .with_telemetry(true)
}

fn norm(v: &[f32]) -> f32 {
    let ss: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    ss.sqrt() as f32
}

/// Every group's bytes are its wire formula, and they add up to the
/// step's bytes less the one header.
#[test]
fn group_bytes_are_the_wire_formulas() {
    let p = 2;
    let reports: Vec<Vec<StepReport>> = LocalComm::run(p, |mut c| {
        let n: usize = groups().iter().map(|g| g.len).sum();
        let mut opt = OneBitAdam::with_groups(&groups(), config()).unwrap();
        let mut x = vec![0.5f32; n];
        (0..4)
            .map(|t| {
                let g = input(c.rank(), t, n);
                opt.step_with_grad(&mut c, &mut x, &g).unwrap()
            })
            .collect()
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    for rank in &reports {
        for rep in rank {
            let compressed = rep.stage == Stage::Compressed;
            let mut sum = 0;
            for (spec, gt) in groups().iter().zip(&rep.groups) {
                let m = padded_len(spec.len, p) / p;
                let want = match (compressed, spec.policy) {
                    (true, Policy::OneBit) => (p as u64 - 1) * 2 * (m as u64 / 8 + 4),
                    (true, Policy::Graded(g)) => (p as u64 - 1) * 2 * g.frame_len(m) as u64,
                    _ => CommStats::allreduce_f32_bytes(p, spec.len),
                };
                assert_eq!(
                    gt.bytes.bytes_sent, want,
                    "{:?} step {}",
                    spec.policy, rep.step
                );
                assert_eq!(gt.compressed, compressed && spec.policy.compresses());
                sum += gt.bytes.bytes_sent;
            }
            assert_eq!(sum + (p as u64 - 1) * 40, rep.bytes.bytes_sent);
        }
    }
}

/// One rank, first compressed step (error buffers zero): the scales and
/// error norms are the reference's, and the sign flips are counted from
/// the momentum before and after.
#[test]
fn scales_norms_and_flips_match_direct_computations() {
    for policy in [
        Policy::OneBit,
        Policy::Graded(Grade::TwoBit),
        Policy::Graded(Grade::Bf16),
    ] {
        let n = 21;
        let spec = [GroupSpec::one_bit(n).with_policy(policy)];
        let mut opt = OneBitAdam::with_groups(&spec, config()).unwrap();
        let mut comm = SingleRank::default();
        let mut x = vec![0.25f32; n];
        let mut before = vec![0.0f32; n];
        for t in 0..3 {
            let g = input(0, t, n);
            let rep = opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
            let after = opt.momentum();
            let flips = before
                .iter()
                .zip(after)
                .filter(|(a, b)| (**a < 0.0) != (**b < 0.0))
                .count();
            let gt = rep.groups[0];
            assert_eq!(
                gt.sign_flips,
                Some(flips as f64 / n as f64),
                "{policy:?} step {t}"
            );
            if t == 2 {
                // The compressed step: rebuild what was reduced.
                let buf: Vec<f32> = before
                    .iter()
                    .zip(&g)
                    .map(|(&m, &g)| 0.9 * m + (1.0 - 0.9) * g)
                    .collect();
                let mut st = ReferenceState::new(n, 1);
                let mut bufs = vec![buf.clone()];
                let (alpha, beta) = match policy {
                    Policy::OneBit => {
                        let mut padded = buf.clone();
                        padded.resize(padded_len(n, 1), 0.0);
                        let alpha = onebit_codec::scale::rms(&padded);
                        simulate_allreduce(&mut bufs, &mut st);
                        let mut c = padded.clone();
                        for v in &mut c {
                            *v = if *v < 0.0 { -alpha } else { alpha };
                        }
                        (alpha, onebit_codec::scale::rms(&c))
                    }
                    Policy::Graded(grade) => {
                        simulate_graded(grade, &mut bufs, &mut st);
                        let mut padded = buf.clone();
                        padded.resize(padded_len(n, 1), 0.0);
                        let scale = |v: &[f32]| {
                            let (frame, _) =
                                onebit_codec::reference::graded_encode(grade, v).unwrap();
                            match grade {
                                Grade::TwoBit => {
                                    let at = frame.len() - 4;
                                    f32::from_le_bytes(frame[at..].try_into().unwrap())
                                }
                                _ => 1.0,
                            }
                        };
                        // The server's input on one rank: the decoded worker frame.
                        let (frame, _) =
                            onebit_codec::reference::graded_encode(grade, &padded).unwrap();
                        let mut q = vec![0.0f32; padded.len()];
                        onebit_codec::graded::decode(grade, &frame, &mut q, false).unwrap();
                        let q: Vec<f32> = q.iter().map(|&v| v / 1.0 + 0.0).collect();
                        (scale(&padded), scale(&q))
                    }
                    _ => unreachable!(),
                };
                assert_eq!(gt.worker_scale, alpha, "{policy:?}");
                assert_eq!(gt.server_scale, beta, "{policy:?}");
                let norms = gt.error_norms.unwrap();
                assert_eq!(norms.worker, norm(&st.worker[0]), "{policy:?}");
                assert_eq!(norms.server, norm(&st.server[0]), "{policy:?}");
                assert_eq!(bits(opt.momentum()), bits(&bufs[0]), "{policy:?}");
            } else {
                assert_eq!((gt.worker_scale, gt.server_scale), (0.0, 0.0));
            }
            before = opt.momentum().to_vec();
        }
        // One sign bit per parameter, in bytes.
        assert_eq!(opt.memory().telemetry, n.div_ceil(8));
    }
}

/// Groups of lengths that start and end off byte boundaries and span
/// several of the packing's blocks, over warm-up and compressed steps and
/// an export/import in the middle: every group's flips are the count of
/// coordinates whose `m < 0` changed (the slow reference), including the
/// step right after the import.
#[test]
fn sign_flips_count_every_group_across_blocks_and_an_import() {
    let specs = [
        GroupSpec::one_bit(4099),
        GroupSpec::full_precision(13),
        GroupSpec::one_bit(8195),
        GroupSpec::one_bit(1),
    ];
    let n: usize = specs.iter().map(|g| g.len).sum();
    let mut opt = OneBitAdam::with_groups(&specs, config()).unwrap();
    let mut comm = SingleRank::default();
    let mut x = vec![0.25f32; n];
    let mut before = vec![0.0f32; n];
    for t in 0..6 {
        if t == 3 {
            let state = opt.export_state();
            opt = OneBitAdam::with_groups(&specs, config()).unwrap();
            opt.import_state(&state).unwrap();
        }
        let g = input(0, t, n);
        let rep = opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
        let after = opt.momentum();
        let mut at = 0;
        for (spec, gt) in specs.iter().zip(&rep.groups) {
            let range = at..at + spec.len;
            at += spec.len;
            let flips = range
                .clone()
                .filter(|&i| (before[i] < 0.0) != (after[i] < 0.0))
                .count();
            assert_eq!(
                gt.sign_flips,
                Some(flips as f64 / spec.len as f64),
                "step {t}, group at {}",
                range.start
            );
        }
        before = after.to_vec();
    }
    let bytes: usize = specs.iter().map(|g| g.len.div_ceil(8)).sum();
    assert_eq!(opt.memory().telemetry, bytes);
}

#[test]
fn telemetry_off_leaves_the_optional_fields_empty() {
    let mut opt = OneBitAdam::new(8, Config::default().with_freeze_step(1)).unwrap();
    let mut comm = SingleRank::default();
    let mut x = [1.0f32; 8];
    for _ in 0..2 {
        let rep = opt.step_with_grad(&mut comm, &mut x, &[0.5; 8]).unwrap();
        assert_eq!(rep.groups.len(), 1);
        assert_eq!(rep.groups[0].error_norms, None);
        assert_eq!(rep.groups[0].sign_flips, None);
    }
    assert_eq!(opt.memory().telemetry, 0);
    let _ = comm.size();
}

/// Two ranks, 2-bit, first compressed step: the worker scale is the mean
/// of this rank's two chunk scales and the server scale is that of the
/// mean of both ranks' decoded chunk `rank` (one rank cannot tell them
/// apart: there the server re-quantises its own levels to the same scale).
#[test]
fn two_rank_scales_are_the_worker_and_server_chunks() {
    let (p, n) = (2usize, 45usize);
    let grade = Grade::TwoBit;
    let spec = [GroupSpec::one_bit(n).with_policy(Policy::Graded(grade))];
    let out = LocalComm::run(p, |mut c| {
        let mut opt = OneBitAdam::with_groups(&spec, config()).unwrap();
        let mut x = vec![0.25f32; n];
        for t in 0..2 {
            let g = input(c.rank(), t, n);
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        let m = opt.momentum().to_vec();
        let g = input(c.rank(), 2, n);
        let rep = opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        (m, rep.groups[0])
    });
    let out: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
    let big = padded_len(n, p);
    let m = big / p;
    let encode = |v: &[f32]| {
        let (frame, _) = onebit_codec::reference::graded_encode(grade, v).unwrap();
        let at = frame.len() - 4;
        let s = f32::from_le_bytes(frame[at..].try_into().unwrap());
        let mut q = vec![0.0f32; v.len()];
        onebit_codec::graded::decode(grade, &frame, &mut q, false).unwrap();
        (s, q)
    };
    // Each rank's worker buffer (its error is zero at the first compressed step).
    let worker: Vec<Vec<f32>> = (0..p)
        .map(|r| {
            let mut w: Vec<f32> = out[r]
                .0
                .iter()
                .zip(input(r, 2, n))
                .map(|(&m, g)| 0.9 * m + (1.0 - 0.9) * g)
                .collect();
            w.resize(big, 0.0);
            w
        })
        .collect();
    for r in 0..p {
        let scales: Vec<f32> = (0..p)
            .map(|j| encode(&worker[r][j * m..(j + 1) * m]).0)
            .collect();
        let mean = (scales.iter().map(|&s| f64::from(s)).sum::<f64>() / p as f64) as f32;
        assert_eq!(out[r].1.worker_scale, mean, "rank {r}");
        let mut c = vec![0.0f32; m];
        for w in &worker {
            let (_, q) = encode(&w[r * m..(r + 1) * m]);
            for (c, q) in c.iter_mut().zip(q) {
                *c += q;
            }
        }
        let c: Vec<f32> = c.iter().map(|&v| v / p as f32 + 0.0).collect();
        assert_eq!(out[r].1.server_scale, encode(&c).0, "rank {r}");
    }
    assert_ne!(out[0].1.worker_scale, out[0].1.server_scale);
}
