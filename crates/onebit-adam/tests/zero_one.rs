//! 0/1 Adam: bit for bit against the single-threaded simulation on 1–4
//! `LocalComm` ranks over a schedule with variance steps, 1-bit gradient
//! steps, the freeze, local steps and synchronisations (and a learning-rate
//! schedule), with the variance steps reduced in `f32` and in bfloat16;
//! state round trips inside a local-step interval and inside the
//! variance schedule; refused records; bytes per stage (the bfloat16
//! variance reduce's half); input failures.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::{CommStats, Communicator, SingleRank};
use onebit_adam::reference_zero_one::ZeroOneSim;
use onebit_adam::testing::LogisticProblem;
use onebit_adam::testing::{bits, sleeper_run};
use onebit_adam::{
    Config, Grade, GroupSpec, OneBitAdam, OneBitError, Policy, StateError, WarmupReduce,
    ZeroOneAdam, ZeroOneConfig, ZeroOneReport, ZeroOneStage, graded_allreduce_bytes,
};

/// A short schedule that reaches every stage: variance steps at 1..4, then
/// spaced 2, 4, 8 up to the freeze at 30; local intervals 1, 2, 4, capped at 4.
fn schedule() -> ZeroOneConfig {
    ZeroOneConfig::default()
        .with_lr(0.02)
        .with_var_freeze_step(30)
        .with_var_update_scaler(4)
        .with_local_step_scaler(6)
        .with_local_step_clipper(4)
}

/// The learning rate of step `t` (a decay, so `lrs` sums unequal terms).
fn lr_at(t: u64) -> f32 {
    0.02 / (1.0 + 0.01 * t as f32)
}

const SAMPLES: usize = 256;
const BATCH: usize = 32;

/// Rank `rank`'s mini-batch gradient at `params` for step `t`, with −0.0
/// written as +0.0 (what the optimizer's accumulator makes of it).
fn grad(problem: &LogisticProblem, rank: usize, t: u64, params: &[f32]) -> Vec<f32> {
    let mut g = vec![0.0; problem.params()];
    let start = (t as usize * BATCH) % (SAMPLES - BATCH + 1);
    problem
        .batch_loss_grad(rank, start..start + BATCH, params, &mut g)
        .unwrap();
    g.iter().map(|x| x + 0.0).collect()
}

/// Per rank: the params after every step, the reports, the optimizer.
type Run = Vec<(Vec<Vec<f32>>, Vec<ZeroOneReport>, ZeroOneAdam)>;

fn run(problem: &LogisticProblem, groups: &[GroupSpec], config: ZeroOneConfig, steps: u64) -> Run {
    LocalComm::run(problem.ranks(), |mut c| {
        let mut opt = ZeroOneAdam::with_groups(groups, config).unwrap();
        let mut x = vec![0.1f32; problem.params()];
        let (mut xs, mut reports) = (Vec::new(), Vec::new());
        for t in 1..=steps {
            opt.set_lr(lr_at(t)).unwrap();
            let g = grad(problem, c.rank(), t, &x);
            reports.push(opt.step_with_grad(&mut c, &mut x, &g).unwrap());
            xs.push(x.clone());
        }
        (xs, reports, opt)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn matches_the_reference_bit_for_bit_on_1_to_4_ranks() {
    const STEPS: u64 = 70;
    for p in 1..=4 {
        // 127 sparse features (7 never occur: masked) + bias.
        let problem = LogisticProblem::generate(p, SAMPLES, 127, 6, 11 + p as u64);
        let n = problem.params();
        let layouts = [
            vec![GroupSpec::one_bit(n)],
            vec![
                GroupSpec::one_bit(n - 17).with_weight_decay(Some(0.01)),
                GroupSpec::full_precision(17),
            ],
        ];
        // The paper's stages and the preconditioned, clamped variant, each
        // with the variance steps reduced in f32 and in bfloat16.
        let mut variants = Vec::new();
        for pre in [false, true] {
            for reduce in [WarmupReduce::F32, WarmupReduce::Bf16] {
                variants.push((pre, reduce));
            }
        }
        for (groups, (pre, reduce)) in layouts
            .iter()
            .flat_map(|g| variants.iter().map(move |&v| (g, v)))
        {
            let config = schedule()
                .with_preconditioned(pre)
                .with_variance_reduce(reduce);
            let out = run(&problem, groups, config, STEPS);
            let mut sim = ZeroOneSim::new(config, groups, &vec![0.1f32; n], p);
            for t in 1..=STEPS {
                let grads: Vec<Vec<f32>> = (0..p)
                    .map(|r| grad(&problem, r, t, &sim.params[r]))
                    .collect();
                sim.step(&grads, lr_at(t));
                for (r, (xs, reports, _)) in out.iter().enumerate() {
                    assert_eq!(reports[t as usize - 1].stage, sim.stage(t), "p={p} t={t}");
                    assert_eq!(
                        bits(&xs[t as usize - 1]),
                        bits(&sim.params[r]),
                        "p={p} rank {r} step {t} groups {} preconditioned {pre} {reduce:?}",
                        groups.len()
                    );
                }
            }
            for (r, (_, reports, opt)) in out.iter().enumerate() {
                assert_eq!(bits(opt.momentum()), bits(&sim.m[r]));
                assert_eq!(bits(opt.variance()), bits(&sim.v[r]));
                assert_eq!(bits(opt.anchor()), bits(&sim.anchor[r]));
                let stages: Vec<_> = reports.iter().map(|r| r.stage).collect();
                for s in [
                    ZeroOneStage::Variance,
                    ZeroOneStage::OneBitGradient,
                    ZeroOneStage::Local,
                    ZeroOneStage::Sync,
                ] {
                    assert!(stages.contains(&s), "{s:?} never ran");
                }
                // The 7 never-occurring features are masked, and nothing
                // else; with two groups they are in the full-precision one.
                let masked = if groups.len() == 1 { 7 } else { 0 };
                assert_eq!(opt.masked_coordinates(), masked);
                // Ranks differ inside a local interval, agree after a sync.
                if p > 1 && groups.len() == 1 {
                    assert_eq!(reports.last().unwrap().stage, ZeroOneStage::Local);
                    assert_ne!(
                        bits(&out[0].0[STEPS as usize - 1]),
                        bits(&out[p - 1].0[STEPS as usize - 1])
                    );
                }
            }
            let last_sync = out[0]
                .1
                .iter()
                .rposition(|r| r.stage == ZeroOneStage::Sync)
                .unwrap();
            for (xs, _, _) in &out {
                assert_eq!(bits(&xs[last_sync]), bits(&out[0].0[last_sync]));
            }
        }
    }
}

#[test]
fn bytes_per_stage_and_the_schedule() {
    let problem = LogisticProblem::generate(4, SAMPLES, 127, 6, 3);
    let n = problem.params();
    let out = run(&problem, &[GroupSpec::one_bit(n)], schedule(), 70);
    let reports = &out[0].1;
    let header = 3 * 40;
    for r in reports {
        let expected = match r.stage {
            ZeroOneStage::Variance => header + comm_traits::CommStats::allreduce_f32_bytes(4, n),
            ZeroOneStage::OneBitGradient | ZeroOneStage::Sync => {
                // One header, then the 1-bit all-reduce without its own.
                onebit_adam::compressed_allreduce_bytes(n, 4)
            }
            ZeroOneStage::Local => 0,
            other => panic!("unknown stage {other:?}"),
        };
        assert_eq!(
            r.bytes.bytes_sent, expected,
            "step {} {:?}",
            r.step, r.stage
        );
    }
    let var: Vec<u64> = reports
        .iter()
        .filter(|r| r.stage == ZeroOneStage::Variance)
        .map(|r| r.step)
        .collect();
    assert_eq!(var, [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 28]);
    let sync: Vec<u64> = reports
        .iter()
        .filter(|r| r.stage == ZeroOneStage::Sync)
        .map(|r| r.step)
        .collect();
    // 31..36 every step, 37..42 at even steps, then every 4th (the cap).
    assert_eq!(
        sync,
        [
            31, 32, 33, 34, 35, 36, 38, 40, 42, 44, 48, 52, 56, 60, 64, 68
        ]
    );
    assert_eq!(out[0].2.intervals(), (8, 4));
}

/// The bfloat16 variance reduce on 4 ranks, a 1-bit and a full-precision
/// group (lengths multiples of `8P`, so no padding): a variance step sends
/// the step's header plus each group's bfloat16 reduce, exactly half the
/// `f32` reduce's payload; every other step sends what the `f32` run sends.
/// Its buffers are counted until the freeze and freed after it, and its
/// records are the `f32` run's format (the mode is not in them).
#[test]
fn the_bf16_variance_reduce_sends_half_the_bytes() {
    let p = 4;
    let problem = LogisticProblem::generate(p, SAMPLES, 255, 6, 3);
    let groups = [GroupSpec::one_bit(224), GroupSpec::full_precision(32)];
    assert_eq!(problem.params(), 256);
    let bf16 = schedule().with_variance_reduce(WarmupReduce::Bf16);
    let (f32_run, bf16_run) = (
        run(&problem, &groups, schedule(), 40),
        run(&problem, &groups, bf16, 40),
    );
    let header = (p as u64 - 1) * 40;
    // `graded_allreduce_bytes` counts a header of its own: the step has one.
    let half: u64 = groups
        .iter()
        .map(|g| graded_allreduce_bytes(Grade::Bf16, g.len, p) - header)
        .sum();
    let full: u64 = groups
        .iter()
        .map(|g| CommStats::allreduce_f32_bytes(p, g.len))
        .sum();
    assert_eq!(2 * half, full);
    let mut variance_steps = 0;
    for (a, b) in f32_run[0].1.iter().zip(&bf16_run[0].1) {
        assert_eq!(a.stage, b.stage, "step {}", a.step);
        if a.stage == ZeroOneStage::Variance {
            variance_steps += 1;
            assert_eq!(a.bytes.bytes_sent, header + full, "step {}", a.step);
            assert_eq!(b.bytes.bytes_sent, header + half, "step {}", b.step);
        } else {
            assert_eq!(a.bytes, b.bytes, "step {} {:?}", a.step, a.stage);
        }
    }
    assert_eq!(variance_steps, 12);
    // The reduce moved the run: the means were rounded.
    assert_ne!(bits(&f32_run[0].0[0]), bits(&bf16_run[0].0[0]));
    // Memory: the bfloat16 buffers exist before the freeze (step 20), not
    // after it (step 40).
    let scratch = |r: &Run| r[0].2.memory().scratch;
    let early = (
        run(&problem, &groups, schedule(), 20),
        run(&problem, &groups, bf16, 20),
    );
    // Step 20 is a variance step; its last group is the full-precision
    // one: N = 32, N/P = 8.
    assert_eq!(scratch(&early.1) - scratch(&early.0), 14 * 32 + 6 * 8);
    assert_eq!(scratch(&bf16_run), scratch(&f32_run));
    // Either mode imports the other's record and writes it back unchanged.
    for (from, into) in [(&bf16_run, schedule()), (&f32_run, bf16)] {
        let blob = from[1].2.export_state();
        let mut opt = ZeroOneAdam::with_groups(&groups, into).unwrap();
        opt.import_state(&blob).unwrap();
        assert_eq!(opt.export_state(), blob);
    }
}

/// One rank reduces nothing: both variance reduces take the same steps,
/// bit for bit, through every stage, and send and keep the same.
#[test]
fn one_rank_steps_alike_under_either_variance_reduce() {
    let problem = LogisticProblem::generate(1, SAMPLES, 127, 6, 7);
    let n = problem.params();
    let groups = [GroupSpec::one_bit(n - 17), GroupSpec::full_precision(17)];
    let bf16 = schedule().with_variance_reduce(WarmupReduce::Bf16);
    for steps in [10, 50] {
        let (a, b) = (
            run(&problem, &groups, schedule(), steps),
            run(&problem, &groups, bf16, steps),
        );
        let ((xa, ra, oa), (xb, rb, ob)) = (&a[0], &b[0]);
        assert!(xa.iter().zip(xb).all(|(a, b)| bits(a) == bits(b)));
        assert_eq!(ra, rb);
        assert_eq!(oa.export_state(), ob.export_state());
        assert_eq!(oa.memory(), ob.memory());
    }
}

/// Ranks configured with different variance reduces fail together at the
/// first step's header (its layout hashes the mode), nothing changed.
#[test]
fn ranks_that_disagree_on_the_variance_reduce_fail_together_at_the_header() {
    let out = LocalComm::run(2, |mut c| {
        let reduce = if c.rank() == 0 {
            WarmupReduce::Bf16
        } else {
            WarmupReduce::F32
        };
        let mut opt = ZeroOneAdam::new(16, schedule().with_variance_reduce(reduce)).unwrap();
        let mut x = vec![1.0f32; 16];
        let before = opt.export_state();
        let err = opt.step_with_grad(&mut c, &mut x, &[0.25; 16]).unwrap_err();
        assert_eq!(x, vec![1.0f32; 16]);
        assert_eq!(opt.export_state(), before);
        err
    });
    for r in out {
        assert!(matches!(r.unwrap(), OneBitError::Comm(_)));
    }
}

/// Runs `steps` steps, with an extra accumulated micro-batch before step
/// `k + 1`; with `resume_at = Some(k)` every rank exports after `k` steps
/// (and the micro-batch), a fresh optimizer imports, and the run goes on.
fn run_resumed(
    problem: &LogisticProblem,
    steps: u64,
    k: u64,
    resume: bool,
) -> Vec<(Vec<f32>, Vec<u8>)> {
    let groups = [
        GroupSpec::one_bit(problem.params() - 9),
        GroupSpec::full_precision(9),
    ];
    LocalComm::run(problem.ranks(), |mut c| {
        let mut opt = ZeroOneAdam::with_groups(&groups, schedule()).unwrap();
        let mut x = vec![0.1f32; problem.params()];
        for t in 1..=steps {
            if t == k + 1 {
                opt.accumulate(&grad(problem, c.rank(), t + 1000, &x))
                    .unwrap();
                if resume {
                    let blob = opt.export_state();
                    opt = ZeroOneAdam::with_groups(&groups, schedule()).unwrap();
                    opt.import_state(&blob).unwrap();
                    assert_eq!(opt.export_state(), blob);
                }
            }
            opt.set_lr(lr_at(t)).unwrap();
            let g = grad(problem, c.rank(), t, &x);
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        (x, opt.export_state())
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn state_round_trip_mid_schedule_continues_bit_identically() {
    let problem = LogisticProblem::generate(3, SAMPLES, 127, 6, 5);
    // k = 13: inside the variance schedule (spacing 4, counter 1 of 4,
    // step 13 a 1-bit gradient step, error buffers in use). k = 45: inside a
    // local-step interval (step 45 local, ranks apart, `lrs` non-zero).
    let probe = run(
        &problem,
        &[GroupSpec::one_bit(problem.params())],
        schedule(),
        46,
    );
    assert_eq!(probe[0].1[12].stage, ZeroOneStage::OneBitGradient);
    assert_eq!(probe[0].1[44].stage, ZeroOneStage::Local);
    assert_eq!(probe[0].1[45].stage, ZeroOneStage::Local);
    for k in [13, 45] {
        let straight = run_resumed(&problem, 60, k, false);
        let resumed = run_resumed(&problem, 60, k, true);
        for (a, b) in straight.iter().zip(&resumed) {
            assert_eq!(bits(&a.0), bits(&b.0), "resumed at {k}");
            assert_eq!(a.1, b.1, "state after resuming at {k}");
        }
    }
}

/// A record of rank 1 of 2 after `steps` steps (plus its optimizer).
fn record(steps: u64) -> (Vec<u8>, ZeroOneAdam) {
    let problem = LogisticProblem::generate(2, SAMPLES, 127, 6, 9);
    let groups = [
        GroupSpec::one_bit(problem.params() - 9),
        GroupSpec::full_precision(9),
    ];
    let mut out = LocalComm::run(2, |mut c| {
        let mut opt = ZeroOneAdam::with_groups(&groups, schedule()).unwrap();
        let mut x = vec![0.1f32; problem.params()];
        for t in 1..=steps {
            let g = grad(&problem, c.rank(), t, &x);
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        (opt.export_state(), opt)
    });
    out.pop().unwrap().unwrap()
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// `blob` with its checksum recomputed.
fn resealed(mut blob: Vec<u8>) -> Vec<u8> {
    let cut = blob.len() - 4;
    let crc = crc32(&blob[..cut]);
    blob[cut..].copy_from_slice(&crc.to_le_bytes());
    blob
}

#[test]
fn import_refuses_bad_records_and_changes_nothing() {
    let (blob, source) = record(41);
    let groups = [
        GroupSpec::one_bit(source.len() - 9),
        GroupSpec::full_precision(9),
    ];
    let fresh = || ZeroOneAdam::with_groups(&groups, schedule()).unwrap();
    let mut target = fresh();
    let before = target.export_state();
    let refuse = |target: &mut ZeroOneAdam, bytes: &[u8], want: StateError| {
        assert_eq!(target.import_state(bytes), Err(want));
        assert_eq!(target.export_state(), before, "changed by a refused import");
    };

    // Every cut is named as truncated, with what is there.
    for cut in 0..blob.len() {
        match target.import_state(&blob[..cut]) {
            Err(StateError::Truncated { needed, found }) => {
                assert_eq!(found, cut as u64);
                assert!(needed > found && needed <= blob.len() as u64, "cut {cut}");
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    assert_eq!(target.export_state(), before);
    let mut long = blob.clone();
    long.push(0);
    refuse(&mut target, &long, StateError::TrailingBytes);
    // A flipped bit in a float of `m`: the checksum.
    let mut bad = blob.clone();
    // The first float of the anchor (the mask and grad_sum follow it).
    let at = blob.len() - 4 - 4 * source.len() * 2 - source.len().div_ceil(8);
    bad[at] ^= 0x10;
    assert!(matches!(
        target.import_state(&bad),
        Err(StateError::Checksum { .. })
    ));
    // A NaN with a valid checksum.
    let mut nan = blob.clone();
    nan[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    refuse(&mut target, &resealed(nan), StateError::NonFinite);
    // A rank binding no group can have (rank 5 of 5), with a valid checksum.
    let mut rank = blob.clone();
    rank[8..12].copy_from_slice(&5u32.to_le_bytes());
    rank[12..16].copy_from_slice(&5u32.to_le_bytes());
    refuse(&mut target, &resealed(rank), StateError::Shape("rank"));
    let mut version = blob.clone();
    version[4] = 9;
    refuse(&mut target, &version, StateError::UnsupportedVersion(9));
    refuse(&mut target, b"XXXXsomething", StateError::BadMagic);

    // Another optimizer's record, both ways.
    let mut one_bit =
        OneBitAdam::with_groups(&groups, Config::default().with_freeze_step(2)).unwrap();
    let mut x = vec![0.0f32; source.len()];
    one_bit
        .step_with_grad(&mut SingleRank::default(), &mut x, &vec![0.5; source.len()])
        .unwrap();
    refuse(
        &mut target,
        &one_bit.export_state(),
        StateError::OtherOptimizer("1-bit Adam"),
    );
    let one_bit_before = one_bit.export_state();
    assert_eq!(
        one_bit.import_state(&blob),
        Err(StateError::OtherOptimizer("0/1 Adam"))
    );
    assert_eq!(one_bit.export_state(), one_bit_before);

    // Another shape or schedule.
    let mut other_len = ZeroOneAdam::new(source.len(), schedule()).unwrap();
    assert_eq!(
        other_len.import_state(&blob),
        Err(StateError::Shape("group count"))
    );
    let mut shorter = ZeroOneAdam::with_groups(
        &[
            GroupSpec::one_bit(source.len() - 10),
            GroupSpec::full_precision(9),
        ],
        schedule(),
    )
    .unwrap();
    assert_eq!(
        shorter.import_state(&blob),
        Err(StateError::Shape("parameter count"))
    );
    let mut swapped = ZeroOneAdam::with_groups(
        &[
            GroupSpec::one_bit(source.len() - 10),
            GroupSpec::full_precision(10),
        ],
        schedule(),
    )
    .unwrap();
    assert_eq!(
        swapped.import_state(&blob),
        Err(StateError::Shape("group length"))
    );
    let mut other_schedule =
        ZeroOneAdam::with_groups(&groups, schedule().with_var_freeze_step(31)).unwrap();
    assert_eq!(
        other_schedule.import_state(&blob),
        Err(StateError::Schedule {
            field: "var_freeze_step",
            saved: schedule().var_freeze_step,
            here: 31
        })
    );
    let mut other_scaler = ZeroOneAdam::with_groups(
        &groups,
        schedule().with_local_step_scaler(schedule().local_step_scaler + 1),
    )
    .unwrap();
    assert_eq!(
        other_scaler.import_state(&blob),
        Err(StateError::Schedule {
            field: "local_step_scaler",
            saved: schedule().local_step_scaler,
            here: schedule().local_step_scaler + 1
        })
    );
    // The rule's shape is not a schedule length.
    let mut other_clipper = ZeroOneAdam::with_groups(
        &groups,
        schedule().with_local_step_clipper(schedule().local_step_clipper * 2),
    )
    .unwrap();
    assert_eq!(
        other_clipper.import_state(&blob),
        Err(StateError::Shape("local_step_clipper"))
    );
    // Counters no run reaches (a var_interval of 3), resealed.
    let mut counters = blob.clone();
    let var_interval_at = 4 + 4 + 4 + 4 + 8 + 4 + 8 + 4 + 4 * 8;
    counters[var_interval_at..var_interval_at + 8].copy_from_slice(&3u64.to_le_bytes());
    refuse(
        &mut target,
        &resealed(counters),
        StateError::Shape("schedule counters"),
    );

    // The good record goes in, and a bound record refuses another rank.
    target.import_state(&blob).unwrap();
    assert_eq!(target.export_state(), blob);
    let mut x = vec![0.0f32; source.len()];
    let g = vec![0.1f32; source.len()];
    assert_eq!(
        target.step_with_grad(&mut SingleRank::default(), &mut x, &g),
        Err(OneBitError::StateShape {
            expected: 2,
            found: 1
        })
    );
}

#[test]
fn a_bad_gradient_fails_every_rank_on_a_communicating_step_and_one_on_a_local_step() {
    let config = schedule()
        .with_var_freeze_step(2)
        .with_local_step_clipper(4)
        .with_local_step_scaler(1);
    // Steps: 1, 2 variance; 3 sync (interval 2 after it); 4 sync (interval
    // 4 after it), 5 local.
    let out = LocalComm::run(3, |mut c| {
        let mut opt = ZeroOneAdam::new(16, config).unwrap();
        let mut x = vec![1.0f32; 16];
        let g = vec![0.25f32; 16];
        let mut bad = g.clone();
        bad[5] = f32::NAN;
        let mut errs = Vec::new();
        for _ in 0..4 {
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        assert_eq!(opt.next_stage(), ZeroOneStage::Local);
        let saved = (opt.export_state(), x.clone());
        let mine = if c.rank() == 1 { &bad } else { &g };
        errs.push(opt.step_with_grad(&mut c, &mut x, mine).err());
        if c.rank() == 1 {
            assert_eq!((opt.export_state(), x.clone()), saved);
            // Retried with a good gradient: back in step with the others.
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        // Step 8 synchronises: a NaN on rank 2 fails it everywhere.
        while opt.next_stage() != ZeroOneStage::Sync {
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        assert_eq!(opt.steps(), 7);
        let saved = (opt.export_state(), x.clone());
        let mine = if c.rank() == 2 { &bad } else { &g };
        errs.push(opt.step_with_grad(&mut c, &mut x, mine).err());
        assert_eq!((opt.export_state(), x.clone()), saved);
        errs
    });
    let errs: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(errs[0][0], None);
    assert_eq!(errs[1][0], Some(OneBitError::NonFinite { index: 5 }));
    assert_eq!(errs[2][0], None);
    assert_eq!(errs[0][1], Some(OneBitError::RemoteInput { rank: 2 }));
    assert_eq!(errs[1][1], Some(OneBitError::RemoteInput { rank: 2 }));
    assert_eq!(errs[2][1], Some(OneBitError::NonFinite { index: 5 }));
}

#[test]
fn config_is_validated_and_memory_is_counted() {
    let bad = [
        (
            ZeroOneConfig::default().with_lr(0.0),
            "lr must be finite and > 0",
        ),
        (
            ZeroOneConfig::default().with_beta1(1.0),
            "beta1 must be in [0, 1)",
        ),
        (
            ZeroOneConfig::default().with_var_freeze_step(0),
            "var_freeze_step must be >= 1",
        ),
        (
            ZeroOneConfig::default().with_var_update_scaler(0),
            "var_update_scaler must be >= 1",
        ),
        (
            ZeroOneConfig::default().with_local_step_scaler(0),
            "local_step_scaler must be >= 1",
        ),
        (
            ZeroOneConfig::default().with_local_step_clipper(0),
            "local_step_clipper must be >= 1",
        ),
    ];
    for (c, what) in bad {
        assert_eq!(
            ZeroOneAdam::new(4, c).err(),
            Some(OneBitError::Config(what))
        );
    }
    // Graded codecs are 1-bit Adam's; a 0/1 group with one is refused.
    let graded = GroupSpec::one_bit(8).with_policy(Policy::Graded(Grade::TwoBit));
    assert!(matches!(
        ZeroOneAdam::with_groups(&[GroupSpec::one_bit(4), graded], schedule()).err(),
        Some(OneBitError::Config(why)) if why.contains("Policy::Graded")
    ));
    let mut opt = ZeroOneAdam::new(100, schedule()).unwrap();
    assert_eq!(
        opt.set_lr(f32::NAN),
        Err(OneBitError::Config("lr must be finite and > 0"))
    );
    assert_eq!(opt.config().lr, 0.02);
    let m = opt.memory();
    assert_eq!(
        (m.moments, m.anchor, m.mask_and_gradient, m.error_feedback),
        (800, 400, 500, 0)
    );
    let out = LocalComm::run(2, |mut c| {
        let mut opt = ZeroOneAdam::new(100, schedule()).unwrap();
        let mut x = vec![0.0f32; 100];
        for _ in 0..5 {
            opt.step_with_grad(&mut c, &mut x, &[0.5; 100]).unwrap();
        }
        opt.memory()
    });
    let m = out[0].as_ref().unwrap();
    // N = 112 (100 padded to 16), N/P = 56.
    assert_eq!((m.error_feedback, m.scratch), (4 * (112 + 56), 400));
    assert_eq!(m.total(), 800 + 400 + 500 + 4 * 168 + 400);
}

/// The goal on the crate's problem (the figures of
/// `examples/zero_one_bytes.rs`): ≥ 3× fewer bytes than 1-bit Adam with a
/// 20 % warm-up, at a final loss within 1 % of it, with `H = 4`.
#[test]
fn three_times_fewer_bytes_than_one_bit_adam_at_its_loss() {
    const STEPS: u64 = 1000;
    const BATCH: usize = 256;
    let problem = LogisticProblem::generate(4, 8192, 4095, 32, 7);
    let n = problem.params();
    let batch = |t: u64| {
        let start = (t as usize * BATCH) % (8192 - BATCH + 1);
        start..start + BATCH
    };
    let one_bit = LocalComm::run(4, |mut c| {
        let config = Config::default().with_lr(0.005).with_freeze_step(STEPS / 5);
        let mut opt = OneBitAdam::new(n, config).unwrap();
        let (mut x, mut g, mut bytes) = (vec![0.0f32; n], vec![0.0f32; n], 0);
        for t in 0..STEPS {
            problem
                .batch_loss_grad(c.rank(), batch(t), &x, &mut g)
                .unwrap();
            bytes += opt
                .step_with_grad(&mut c, &mut x, &g)
                .unwrap()
                .bytes
                .bytes_sent;
        }
        (bytes, problem.loss(&x))
    });
    let zero_one = LocalComm::run(4, |mut c| {
        let config = ZeroOneConfig::default()
            .with_lr(0.005)
            .with_var_freeze_step(STEPS / 5)
            .with_local_step_scaler(STEPS / 20)
            .with_local_step_clipper(4);
        let mut opt = ZeroOneAdam::new(n, config).unwrap();
        let (mut x, mut g, mut bytes) = (vec![0.0f32; n], vec![0.0f32; n], 0);
        for t in 0..STEPS {
            problem
                .batch_loss_grad(c.rank(), batch(t), &x, &mut g)
                .unwrap();
            bytes += opt
                .step_with_grad(&mut c, &mut x, &g)
                .unwrap()
                .bytes
                .bytes_sent;
        }
        (bytes, problem.loss(&x))
    });
    let (ob_bytes, ob_loss) = *one_bit[0].as_ref().unwrap();
    for rank in &zero_one {
        let (bytes, loss) = *rank.as_ref().unwrap();
        assert!(bytes * 3 <= ob_bytes, "{bytes} vs {ob_bytes}");
        assert!(loss <= 1.01 * ob_loss && loss < 0.5, "{loss} vs {ob_loss}");
    }
}

#[test]
fn scaled_gradient_and_accumulation_match_the_plain_recipe() {
    let config = schedule().with_var_freeze_step(3).with_local_step_scaler(1);
    let out = LocalComm::run(2, |mut c| {
        let mut a = ZeroOneAdam::new(40, config).unwrap();
        let mut b = a.clone();
        let mut d = a.clone();
        let (mut xa, mut xb, mut xd) = (vec![0.5f32; 40], vec![0.5f32; 40], vec![0.5f32; 40]);
        for t in 0..8 {
            let g: Vec<f32> = (0..40)
                .map(|i| ((i * 5 + t * 3 + c.rank()) % 9) as f32 * 0.1 - 0.4)
                .collect();
            let twice: Vec<f32> = g.iter().map(|x| 2.0 * x).collect();
            a.step_with_grad_scaled(&mut c, &mut xa, &g, 2.0).unwrap();
            b.step_with_grad(&mut c, &mut xb, &twice).unwrap();
            // Two micro-batches g and 3g average to 2g.
            d.accumulate(&g).unwrap();
            let thrice: Vec<f32> = g.iter().map(|x| 3.0 * x).collect();
            d.step_with_grad(&mut c, &mut xd, &thrice).unwrap();
        }
        assert_eq!(
            a.step_with_grad_scaled(&mut c, &mut xa, &[0.0; 40], f32::INFINITY),
            Err(OneBitError::Config("gradient factor is not finite"))
        );
        (bits(&xa), bits(&xb), xd)
    });
    for r in out {
        let (a, b, d) = r.unwrap();
        assert_eq!(a, b);
        // (g + 3g)/2 rounds like 2g only approximately: close, not equal bits.
        let b: Vec<f32> = b.iter().map(|&x| f32::from_bits(x)).collect();
        assert!(b.iter().zip(&d).all(|(x, y)| (x - y).abs() < 1e-3));
    }
}

/// Distances to the optimum of `Σ (x_i − 1)²/2` (noisy per rank) after
/// `steps` 0/1 Adam steps on 2 ranks, with one **sleeper** coordinate whose
/// gradient is 10⁻¹² of the others' up to the freeze (a ReLU unit that
/// rarely fires: its `√v` stays near ε) and as large as theirs after it:
/// (mean over the others, largest over the others, the sleeper's), or
/// `None` on an error or a non-finite value.
fn zero_one_with_a_sleeper(preconditioned: bool, steps: u64) -> Option<(f64, f64, f64)> {
    const N: usize = 64;
    const FREEZE: u64 = 60;
    let cfg = ZeroOneConfig::default()
        .with_lr(0.01)
        .with_var_freeze_step(FREEZE)
        .with_var_update_scaler(8)
        .with_local_step_scaler(20)
        .with_local_step_clipper(4)
        .with_preconditioned(preconditioned);
    let out = LocalComm::run(2, |mut c| {
        let mut opt = ZeroOneAdam::new(N + 1, cfg).unwrap();
        sleeper_run(&mut c, N, FREEZE, steps, |c, x, g| {
            opt.step_with_grad(c, x, g).is_ok()
        })
    });
    out.into_iter().next().unwrap().unwrap()
}

/// The paper's stages give the sleeper `±α/ε`-sized steps (one bit cannot
/// say "almost 0", and its `d` is ε), which throws it, and through the
/// buffer's scale every coordinate, far off; the preconditioned, clamped
/// variant keeps every step Adam-sized and all coordinates reach the
/// optimum (the DeepFM tower's divergence under `--dense-opt
/// zero-one-adam`, in miniature).
#[test]
fn the_preconditioned_variant_survives_a_coordinate_waking_late() {
    let (mean, max, sleeper) = zero_one_with_a_sleeper(true, 400).expect("finite");
    assert!(mean < 0.1 && max < 0.25, "others {mean} / {max}");
    assert!(sleeper < 0.5, "sleeper {sleeper}");
    match zero_one_with_a_sleeper(false, 400) {
        None => {}
        Some((m, mx, sl)) => assert!(
            mx > 10.0 * max || sl > 10.0,
            "the paper's stages stayed fine: {m} / {mx} / {sl}"
        ),
    }
}
