//! The split step (`begin_group` per group, last group first, then
//! `finish`) over `Overlapped` `LocalComm` ranks against the blocking
//! `step_with_grad_scaled` on the whole gradient: parameters, exported
//! state and step reports bit-identical at P = 1..4, over warm-up steps,
//! the freeze (fixed and automatic) and compressed steps (error feedback
//! carried), for the variants and policies the pipeline runs and those
//! `finish` runs blocking; and a bad gradient, a missing group or a wrong
//! parameter length fails on every rank with nothing changed.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use basis_std::overlap::Overlapped;
use comm_traits::Communicator;
use onebit_adam::testing::bits;
use onebit_adam::{
    AutoFreeze, Config, FreezePolicy, Grade, GroupSpec, OneBitAdam, OneBitError, Policy, ScaleKind,
    SplitStep, StepReport, Variant, WarmupReduce,
};

const STEPS: u64 = 9;
const FACTOR: f32 = 1.5;

/// Rank `r`'s gradient at step `t`: uniform values over a few magnitudes,
/// a dead coordinate every 37 from index 96 on (exactly 0: left out of the
/// 1-bit buffer; the first 96 are all live, a multiple of 8·P for P ≤ 4)
/// and signed zeros.
fn grad(r: usize, t: u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            if i >= 96 && i % 37 == 11 {
                return if (i + t as usize).is_multiple_of(2) {
                    0.0
                } else {
                    -0.0
                };
            }
            let h = (i as u64 + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add((t + 1).wrapping_mul(0xD1B5_4A32_D192_ED03))
                .wrapping_add((r as u64 + 1).wrapping_mul(0x8CB9_2BA7_2F3D_8DD7));
            let u = (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            u * 2f32.powi(((h >> 20) % 6) as i32 - 8)
        })
        .collect()
}

/// A setting: config and groups.
struct Case {
    name: &'static str,
    config: Config,
    groups: Vec<GroupSpec>,
}

fn cases() -> Vec<Case> {
    let base = Config::default()
        .with_lr(1e-2)
        .with_freeze_step(3)
        .with_bias_correction(true)
        .with_telemetry(true);
    let pre = base.with_variant(Variant::PreconditionedMomentum);
    vec![
        // The CLI's tower: 1-bit groups only, preconditioned (the direct path).
        Case {
            name: "preconditioned, 1-bit layers",
            config: pre,
            groups: vec![
                GroupSpec::one_bit(1),
                GroupSpec::one_bit(1000),
                GroupSpec::one_bit(257),
                GroupSpec::one_bit(64),
            ],
        },
        // One group (the CLI default layout), automatic freeze.
        Case {
            name: "preconditioned, one group, auto freeze",
            config: pre.with_freeze(FreezePolicy::Auto(
                AutoFreeze::default()
                    .with_window(2)
                    .with_min_step(2)
                    .with_max_step(5),
            )),
            groups: vec![GroupSpec::one_bit(777)],
        },
        // Plain momentum: all-live groups (fused blend when the length is a
        // multiple of 8·P, padded otherwise), a group with dead coordinates
        // (packed), a full-precision group, an empty one.
        Case {
            name: "momentum, mixed policies",
            config: base.with_weight_decay(1e-3),
            groups: vec![
                GroupSpec::one_bit(96),
                GroupSpec::one_bit(11),
                GroupSpec::one_bit(500),
                GroupSpec::full_precision(40),
                GroupSpec::one_bit(0),
                GroupSpec::one_bit(96).with_weight_decay(Some(0.0)),
            ],
        },
        // The bf16 warm-up reduce (`finish` reduces the warm-up groups
        // blocking), then 1-bit groups and a full-precision one in f32.
        Case {
            name: "bf16 warm-up, mixed policies",
            config: pre.with_warmup_reduce(WarmupReduce::Bf16),
            groups: vec![
                GroupSpec::one_bit(300),
                GroupSpec::full_precision(40),
                GroupSpec::one_bit(0),
                GroupSpec::one_bit(97),
            ],
        },
        // Groups `finish` runs blocking: graded, and the decayed gradient.
        Case {
            name: "graded group beside 1-bit",
            config: pre,
            groups: vec![
                GroupSpec::one_bit(300).with_policy(Policy::Graded(Grade::TwoBit)),
                GroupSpec::one_bit(200),
            ],
        },
        Case {
            name: "decayed gradient, staged",
            config: base
                .with_variant(Variant::DecayedGradient {
                    beta: 0.9,
                    scale: ScaleKind::default(),
                })
                .with_final_full_after(Some(7)),
            groups: vec![GroupSpec::one_bit(90), GroupSpec::one_bit(33)],
        },
    ]
}

/// Everything a run leaves: parameters, state record, reports, per step.
type Trace = Vec<(Vec<u32>, Vec<u8>, StepReport)>;

fn start(case: &Case) -> (OneBitAdam, Vec<f32>) {
    let opt = OneBitAdam::with_groups(&case.groups, case.config).unwrap();
    let x = (0..opt.len()).map(|i| (i as f32 * 0.37).sin()).collect();
    (opt, x)
}

fn blocking(case: &Case, mut comm: LocalComm) -> Trace {
    let (mut opt, mut x) = start(case);
    let me = comm.rank();
    (1..=STEPS)
        .map(|t| {
            let g = grad(me, t, opt.len());
            let r = opt
                .step_with_grad_scaled(&mut comm, &mut x, &g, FACTOR)
                .unwrap();
            (bits(&x), opt.export_state(), r)
        })
        .collect()
}

/// One split step: every group begun, last first, then `finish`.
fn split_step(
    opt: &mut OneBitAdam,
    comm: &mut Overlapped,
    x: &mut [f32],
    g: &[f32],
) -> Result<StepReport, OneBitError> {
    let mut split = SplitStep::default();
    for (gi, r) in opt.group_ranges().into_iter().enumerate().rev() {
        opt.begin_group(comm, &mut split, gi, &g[r], FACTOR)?;
    }
    opt.finish(comm, split, x)
}

fn split(case: &Case, comm: LocalComm) -> Trace {
    let mut comm = Overlapped::spawn(move || Ok::<_, ()>(comm)).unwrap();
    let (mut opt, mut x) = start(case);
    let me = comm.rank();
    (1..=STEPS)
        .map(|t| {
            let g = grad(me, t, opt.len());
            let r = split_step(&mut opt, &mut comm, &mut x, &g).unwrap();
            (bits(&x), opt.export_state(), r)
        })
        .collect()
}

#[test]
fn the_split_step_equals_the_blocking_step_bit_for_bit() {
    for case in cases() {
        for p in 1..=4 {
            let want: Vec<Trace> = LocalComm::run(p, |c| blocking(&case, c))
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            let got: Vec<Trace> = LocalComm::run(p, |c| split(&case, c))
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            for (me, (g, w)) in got.iter().zip(&want).enumerate() {
                for (t, (gs, ws)) in g.iter().zip(w).enumerate() {
                    assert_eq!(
                        gs.2,
                        ws.2,
                        "{}: P = {p}, rank {me}, step {}",
                        case.name,
                        t + 1
                    );
                    assert!(
                        gs.0 == ws.0,
                        "{}: P = {p}, rank {me}, step {}: params",
                        case.name,
                        t + 1
                    );
                    assert!(
                        gs.1 == ws.1,
                        "{}: P = {p}, rank {me}, step {}: state",
                        case.name,
                        t + 1
                    );
                }
            }
            // Not trivial: the run reached the compressed stage and moved.
            let last = &want[0].last().unwrap().2;
            assert_ne!(last.stage, onebit_adam::Stage::Warmup, "{}", case.name);
            if p > 1 {
                assert!(last.bytes.bytes_sent > 0, "{}", case.name);
            }
        }
    }
}

/// A failed step (bad gradient at step `bad_at` on rank 1 in group
/// `bad_group`, or a misuse) on every rank; the run continues and ends
/// where a run without the failed step ends.
fn failing_run(case: &Case, comm: LocalComm, bad_at: u64, how: Bad) -> (Trace, Vec<String>) {
    let mut comm = Overlapped::spawn(move || Ok::<_, ()>(comm)).unwrap();
    let (mut opt, mut x) = start(case);
    let me = comm.rank();
    let mut errors = Vec::new();
    let mut trace = Vec::new();
    for t in 1..=STEPS {
        let g = grad(me, t, opt.len());
        if t == bad_at {
            let (x0, s0) = (bits(&x), opt.export_state());
            let mut bad = g.clone();
            let ranges = opt.group_ranges();
            let e = match how {
                Bad::Nan(gi) => {
                    if me == 1 {
                        bad[ranges[gi].start + 2] = f32::NAN;
                    }
                    split_step(&mut opt, &mut comm, &mut x, &bad).unwrap_err()
                }
                Bad::Missing => {
                    let mut split = SplitStep::default();
                    for (gi, r) in ranges.iter().enumerate().skip(1) {
                        opt.begin_group(&mut comm, &mut split, gi, &g[r.clone()], FACTOR)
                            .unwrap();
                    }
                    opt.finish(&mut comm, split, &mut x).unwrap_err()
                }
                Bad::ShortParams => {
                    let mut split = SplitStep::default();
                    for (gi, r) in ranges.iter().enumerate().rev() {
                        opt.begin_group(&mut comm, &mut split, gi, &g[r.clone()], FACTOR)
                            .unwrap();
                    }
                    let n = x.len();
                    let cut = if me == 0 { n - 1 } else { n };
                    opt.finish(&mut comm, split, &mut x[..cut]).unwrap_err()
                }
            };
            errors.push(format!("{e:?}"));
            assert_eq!(bits(&x), x0, "params changed by a failed step");
            assert!(opt.export_state() == s0, "state changed by a failed step");
        }
        let r = split_step(&mut opt, &mut comm, &mut x, &g).unwrap();
        trace.push((bits(&x), opt.export_state(), r));
    }
    (trace, errors)
}

#[derive(Clone, Copy, Debug)]
enum Bad {
    Nan(usize),
    Missing,
    ShortParams,
}

#[test]
fn a_failed_split_step_fails_everywhere_and_changes_nothing() {
    let all = cases();
    for case in [&all[0], &all[2]] {
        let p = 3;
        let want: Vec<Trace> = LocalComm::run(p, |c| blocking(case, c))
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let n = case.groups.len();
        // Warm-up (step 2) and compressed (steps 5, 6: error feedback is
        // live by then), in the first group begun and the last.
        for (bad_at, how) in [
            (2, Bad::Nan(n - 1)),
            (5, Bad::Nan(n - 1)),
            (6, Bad::Nan(1)),
            (5, Bad::Missing),
            (6, Bad::ShortParams),
        ] {
            let outs: Vec<(Trace, Vec<String>)> =
                LocalComm::run(p, |c| failing_run(case, c, bad_at, how))
                    .into_iter()
                    .map(|r| r.unwrap())
                    .collect();
            for (me, (trace, errors)) in outs.iter().enumerate() {
                assert_eq!(errors.len(), 1);
                let e = &errors[0];
                let expect = match (how, me) {
                    (Bad::Nan(_), 1) => "NonFinite",
                    (Bad::Nan(_), _) => "RemoteInput { rank: 1 }",
                    (Bad::Missing, _) => "Config",
                    (Bad::ShortParams, 0) => "Length",
                    (Bad::ShortParams, _) => "RemoteInput { rank: 0 }",
                };
                assert!(e.contains(expect), "{} {how:?} rank {me}: {e}", case.name);
                // The failed step left nothing behind: the rest of the run
                // is the blocking run's.
                let w = &want[me];
                assert_eq!(trace.len(), w.len());
                for (t, (g, w)) in trace.iter().zip(w).enumerate() {
                    assert!(
                        g.0 == w.0 && g.1 == w.1,
                        "{} {how:?} rank {me} step {}",
                        case.name,
                        t + 1
                    );
                }
            }
        }
    }
}
