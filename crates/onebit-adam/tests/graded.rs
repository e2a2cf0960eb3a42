//! The graded all-reduce (2-bit, bf16) against the single-threaded
//! reference bit for bit, its byte count, and graded groups inside 1-bit
//! Adam: state round trip, policy refusal, exact memory.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::Communicator;
use onebit_adam::reference::{ReferenceState, simulate_graded};
use onebit_adam::testing::{bits, rank_input as input};
use onebit_adam::{
    Config, Grade, GradedState, GroupSpec, OneBitAdam, Policy, StateError, Variant,
    graded_allreduce, graded_allreduce_bytes, padded_len,
};

#[test]
fn graded_allreduce_equals_the_reference_bit_for_bit() {
    for grade in [Grade::TwoBit, Grade::Bf16] {
        for p in 1usize..=4 {
            for n in [1usize, 7, 33, 64, 250] {
                let calls = 4;
                let outs = LocalComm::run(p, |mut c| {
                    let mut st = GradedState::new();
                    let mut outs = Vec::new();
                    for t in 0..calls {
                        let mut buf = input(c.rank(), t, n);
                        let rep = graded_allreduce(&mut c, &mut buf, grade, &mut st).unwrap();
                        assert_eq!(rep.bytes.bytes_sent, graded_allreduce_bytes(grade, n, p));
                        assert_eq!(rep.padded_len, padded_len(n, p));
                        outs.push(buf);
                    }
                    (outs, st.worker_error().to_vec(), st.server_error().to_vec())
                });
                let mut reference = ReferenceState::new(n, p);
                let mut want = Vec::new();
                for t in 0..calls {
                    let mut bufs: Vec<Vec<f32>> = (0..p).map(|r| input(r, t, n)).collect();
                    simulate_graded(grade, &mut bufs, &mut reference);
                    want.push(bufs);
                }
                for (r, out) in outs.into_iter().enumerate() {
                    let (got, we, se) = out.unwrap();
                    for t in 0..calls {
                        assert_eq!(
                            bits(&got[t]),
                            bits(&want[t][r]),
                            "{grade:?} P {p} n {n} call {t}"
                        );
                    }
                    assert_eq!(
                        bits(&we),
                        bits(&reference.worker[r]),
                        "{grade:?} P {p} n {n} e_w"
                    );
                    assert_eq!(
                        bits(&se),
                        bits(&reference.server[r]),
                        "{grade:?} P {p} n {n} e_s"
                    );
                }
            }
        }
    }
}

#[test]
fn graded_allreduce_averages_closely() {
    // Inputs up to 1.5 in magnitude: each rank's chunk is off by at most
    // half a bf16 step of its values (1.5·2⁻⁸), the server by half a step
    // of the mean.
    let n = 100;
    let out = LocalComm::run(3, |mut c| {
        let mut buf = input(c.rank(), 0, n);
        graded_allreduce(&mut c, &mut buf, Grade::Bf16, &mut GradedState::new()).unwrap();
        buf
    });
    let mean: Vec<f32> = (0..n)
        .map(|i| (0..3).map(|r| input(r, 0, n)[i]).sum::<f32>() / 3.0)
        .collect();
    for buf in out {
        let buf = buf.unwrap();
        for (a, b) in buf.iter().zip(&mean) {
            assert!(
                (a - b).abs() <= 1.5 * 2f32.powi(-8) + b.abs() * 2f32.powi(-8),
                "{a} vs {b}"
            );
        }
    }
}

fn groups() -> Vec<GroupSpec> {
    vec![
        GroupSpec::one_bit(40),
        GroupSpec::one_bit(37).with_policy(Policy::Graded(Grade::TwoBit)),
        GroupSpec::one_bit(29).with_policy(Policy::Graded(Grade::Bf16)),
        GroupSpec::full_precision(5),
    ]
}

fn total() -> usize {
    groups().iter().map(|g| g.len).sum()
}

fn config(variant: Variant) -> Config {
    Config::default()
        .with_lr(0.01)
        .with_freeze_step(3)
        .with_variant(variant)
}

/// `steps` steps of a graded-group optimizer on rank `rank` from `opt`.
fn run_steps(
    comm: &mut dyn Communicator,
    opt: &mut OneBitAdam,
    x: &mut [f32],
    from: usize,
    steps: usize,
) {
    let n = x.len();
    for t in from..from + steps {
        let g: Vec<f32> = input(comm.rank(), t, n)
            .iter()
            .zip(x.iter())
            .map(|(g, x)| g + x)
            .collect();
        opt.step_with_grad(comm, x, &g).unwrap();
    }
}

#[test]
fn graded_groups_agree_on_every_rank_and_round_trip_their_state() {
    for variant in [Variant::Momentum, Variant::PreconditionedMomentum] {
        let p = 3;
        let out = LocalComm::run(p, |mut c| {
            let n = total();
            let mut a = OneBitAdam::with_groups(&groups(), config(variant)).unwrap();
            let mut x = vec![0.5f32; n];
            run_steps(&mut c, &mut a, &mut x, 0, 6);
            // Mid-run (in the compressed stage): save, rebuild, restore.
            let saved = a.export_state();
            let mut b = OneBitAdam::with_groups(&groups(), config(variant)).unwrap();
            b.import_state(&saved).unwrap();
            assert_eq!(b.export_state(), saved);
            let mut y = x.clone();
            run_steps(&mut c, &mut a, &mut x, 6, 4);
            run_steps(&mut c, &mut b, &mut y, 6, 4);
            assert_eq!(bits(&x), bits(&y), "restored run diverged");
            // Exact memory: N + N/P error floats per compressing group.
            let want: usize = groups()
                .iter()
                .filter(|g| g.policy.compresses())
                .map(|g| {
                    let big = padded_len(g.len, p);
                    4 * (big + big / p)
                })
                .sum();
            assert_eq!(a.memory().error_feedback, want);
            // A record whose group 1 is 2-bit does not import into 1-bit.
            let mut other = groups();
            other[1].policy = Policy::OneBit;
            let mut c1 = OneBitAdam::with_groups(&other, config(variant)).unwrap();
            assert_eq!(
                c1.import_state(&saved),
                Err(StateError::Policy {
                    group: 1,
                    saved: Policy::Graded(Grade::TwoBit),
                    here: Policy::OneBit
                })
            );
            x
        });
        let xs: Vec<Vec<f32>> = out.into_iter().map(|r| r.unwrap()).collect();
        for x in &xs[1..] {
            assert_eq!(bits(x), bits(&xs[0]));
        }
        assert!(xs[0].iter().all(|v| v.is_finite()));
    }
}

/// One rank: the graded group's momentum after the first compressed step
/// is the quantised `β₁m + (1−β₁)g` (Momentum variant) — the reference's
/// quantiser applied twice (worker, then server on `Q/1 + 0`).
#[test]
fn a_graded_step_on_one_rank_is_the_reference_quantiser() {
    for grade in [Grade::TwoBit, Grade::Bf16] {
        let n = 24;
        let spec = [GroupSpec::one_bit(n).with_policy(Policy::Graded(grade))];
        let mut opt = OneBitAdam::with_groups(&spec, config(Variant::Momentum)).unwrap();
        let mut comm = comm_traits::SingleRank::default();
        let mut x = vec![0.25f32; n];
        for t in 0..3 {
            let g = input(0, t, n);
            opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
        }
        let m0 = opt.momentum().to_vec();
        let g = input(0, 3, n);
        opt.step_with_grad(&mut comm, &mut x, &g).unwrap();
        let buf: Vec<f32> = m0
            .iter()
            .zip(&g)
            .map(|(&m, &g)| 0.9 * m + (1.0 - 0.9) * g)
            .collect();
        let mut bufs = vec![buf];
        let mut st = ReferenceState::new(n, 1);
        simulate_graded(grade, &mut bufs, &mut st);
        assert_eq!(bits(opt.momentum()), bits(&bufs[0]), "{grade:?}");
    }
}

#[test]
fn graded_groups_refuse_the_decayed_gradient_variant() {
    let variant = Variant::DecayedGradient {
        beta: 0.9,
        scale: onebit_adam::ScaleKind::Rms,
    };
    assert!(OneBitAdam::with_groups(&groups(), config(variant)).is_err());
}
