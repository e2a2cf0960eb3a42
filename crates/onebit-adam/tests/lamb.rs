//! 1-bit LAMB: bit for bit against the slow single-threaded reference on
//! P = 1..4 across warm-up, freeze and compression; the warm-up against an
//! independently written plain LAMB and a hand-computed step; state round
//! trips mid-schedule; refusals; convergence at a large batch against
//! 1-bit Adam.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::{Communicator, SingleRank};
use onebit_adam::reference_lamb::ReferenceLamb;
use onebit_adam::testing::bits;
use onebit_adam::testing::{LogisticProblem, run_steps};
use onebit_adam::{
    AutoFreeze, Config, FreezePolicy, LambConfig, LambGroup, LambStepReport, OneBitAdam,
    OneBitError, OneBitLamb, Stage, StateError,
};

/// Three layers of the logistic problem's `d` parameters; the middle one
/// with weight decay (the decayed path of the trust ratio and the factor).
fn groups(d: usize) -> Vec<LambGroup> {
    let a = d / 3;
    vec![
        LambGroup::new(a),
        LambGroup::new(a).with_weight_decay(Some(0.01)),
        LambGroup::new(d - 2 * a).with_weight_decay(Some(0.0)),
    ]
}

/// Step `opt` once on this rank's mini-batch `t` of `pb`.
fn lamb_step(
    comm: &mut dyn Communicator,
    pb: &LogisticProblem,
    opt: &mut OneBitLamb,
    x: &mut [f32],
    batch: usize,
) -> Result<LambStepReport, OneBitError> {
    let mut g = vec![0.0f32; x.len()];
    let start = (opt.steps() as usize * batch) % 64;
    pb.batch_loss_grad(comm.rank(), start..start + batch, x, &mut g)
        .unwrap();
    opt.step_with_grad(comm, x, &g)
}

/// The reference's step with every rank's gradient at `x`.
fn reference_step(
    pb: &LogisticProblem,
    refl: &mut ReferenceLamb,
    x: &mut [f32],
    step: u64,
    batch: usize,
) -> Vec<f64> {
    let start = (step as usize * batch) % 64;
    let grads: Vec<Vec<f32>> = (0..pb.ranks())
        .map(|r| {
            let mut g = vec![0.0f32; x.len()];
            pb.batch_loss_grad(r, start..start + batch, x, &mut g)
                .unwrap();
            g
        })
        .collect();
    refl.step(x, &grads)
}

fn x0(d: usize) -> Vec<f32> {
    // Non-zero start: the trust ratio has a weight norm from step 1.
    (0..d).map(|i| ((i % 7) as f32 - 3.0) * 0.05).collect()
}

#[test]
fn matches_the_reference_bit_for_bit_on_1_to_4_ranks() {
    const FREEZE: u64 = 6;
    const STEPS: u64 = 24;
    for p in 1..=4 {
        let pb = LogisticProblem::generate(p, 128, 299, 8, 11 + p as u64);
        let d = pb.params();
        let cfg = LambConfig::default()
            .with_lr(0.02)
            .with_freeze_step(FREEZE)
            .with_coeff_beta(0.5);
        let runs = LocalComm::run(p, |mut c| {
            let mut opt = OneBitLamb::new(&groups(d), cfg).unwrap();
            let mut x = x0(d);
            let mut trace = Vec::new();
            for _ in 0..STEPS {
                let rep = lamb_step(&mut c, &pb, &mut opt, &mut x, 32).unwrap();
                trace.push((bits(&x), rep.coefficients, rep.stage));
            }
            (trace, opt)
        });
        let runs: Vec<_> = runs.into_iter().map(|r| r.unwrap()).collect();
        let mut refl = ReferenceLamb::new(&groups(d), cfg, FREEZE, p);
        let mut x = x0(d);
        for t in 0..STEPS {
            let coeffs = reference_step(&pb, &mut refl, &mut x, t, 32);
            for (rank, (trace, _)) in runs.iter().enumerate() {
                let (xb, c, stage) = &trace[t as usize];
                assert_eq!(xb, &bits(&x), "P={p} rank {rank} step {}", t + 1);
                assert_eq!(c, &coeffs, "P={p} rank {rank} step {}", t + 1);
                let want = if t < FREEZE {
                    Stage::Warmup
                } else {
                    Stage::Compressed
                };
                assert_eq!(*stage, want);
            }
        }
        let opt = &runs[0].1;
        assert_eq!(bits(opt.momentum()), bits(&refl.m));
        assert_eq!(bits(opt.fresh_variance()), bits(&refl.v_fresh));
        assert_eq!(opt.frozen_coefficients(), refl.coeff_avg);
        let scaling: Vec<f32> = opt.scaling_coefficients().into_iter().flatten().collect();
        assert_eq!(bits(&scaling), bits(&refl.scaling));
        // The run really adapted: factors moved off 1 and the layers were
        // scaled differently (else the comparison proves little).
        assert!(refl.last_factor.iter().any(|&f| f != 1.0));
        assert!(refl.scaling.iter().any(|&s| s != 1.0));
        // The error buffers too, rank by rank.
        let e = refl.errors.as_ref().unwrap();
        for (rank, (_, o)) in runs.iter().enumerate() {
            let state = o.allreduce_state();
            assert_eq!(bits(&state.worker_error()), bits(&e.worker[rank]));
            assert_eq!(bits(&state.server_error()), bits(&e.server[rank]));
            assert!(o.error_norms().worker > 0.0);
        }
    }
}

/// Plain LAMB as DeepSpeed's warm-up runs it, one tensor per group, written
/// independently of both implementations.
fn plain_lamb(cfg: &LambConfig, lens: &[usize], grads: &[Vec<f32>], x: &mut [f32]) -> Vec<f64> {
    let mut m = vec![0.0f32; x.len()];
    let mut v = vec![0.0f32; x.len()];
    let mut last = Vec::new();
    for g in grads {
        last.clear();
        let mut at = 0;
        for &len in lens {
            let r = at..at + len;
            at += len;
            let mut upd = Vec::new();
            for i in r.clone() {
                m[i] = cfg.beta1 * m[i] + (1.0 - cfg.beta1) * g[i];
                v[i] = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * g[i] * g[i];
                upd.push(m[i] / (v[i].sqrt() + cfg.eps));
            }
            let wn = x[r.clone()]
                .iter()
                .map(|&a| f64::from(a).powi(2))
                .sum::<f64>()
                .sqrt();
            let un = upd
                .iter()
                .map(|&a| f64::from(a).powi(2))
                .sum::<f64>()
                .sqrt();
            let c = if wn > 0.0 && un > 0.0 {
                (wn / un).max(cfg.min_coeff).min(cfg.max_coeff)
            } else {
                1.0
            };
            let s = (f64::from(cfg.lr) * c) as f32;
            for (xi, u) in x[r].iter_mut().zip(&upd) {
                *xi -= s * u;
            }
            last.push(c);
        }
    }
    last
}

#[test]
fn warmup_is_plain_lamb() {
    // Two ranks with the same gradient: the mean is that gradient exactly
    // (g + g = 2g and 2g/2 = g in f32), so the warm-up is plain LAMB.
    let cfg = LambConfig::default().with_lr(0.01).with_freeze_step(1000);
    let lens = [5usize, 11, 3];
    let n: usize = lens.iter().sum();
    let grads: Vec<Vec<f32>> = (0..30u32)
        .map(|t| {
            (0..n)
                .map(|i| (((i as u32 * 37 + t * 11) % 17) as f32 - 8.0) * 0.1)
                .collect()
        })
        .collect();
    let start: Vec<f32> = (0..n).map(|i| (i as f32 - 9.0) * 0.3).collect();
    let mut want = start.clone();
    let want_c = plain_lamb(&cfg, &lens, &grads, &mut want);
    let out = LocalComm::run(2, |mut c| {
        let gs: Vec<_> = lens.iter().map(|&l| LambGroup::new(l)).collect();
        let mut opt = OneBitLamb::new(&gs, cfg).unwrap();
        let mut x = start.clone();
        let mut rep = None;
        for g in &grads {
            rep = Some(opt.step_with_grad(&mut c, &mut x, g).unwrap());
        }
        (x, rep.unwrap())
    });
    for r in out {
        let (x, rep) = r.unwrap();
        assert_eq!(bits(&x), bits(&want));
        assert_eq!(rep.coefficients, want_c);
        assert_eq!(rep.stage, Stage::Warmup);
    }
    // The clip was exercised on both sides somewhere in the run? At least
    // the coefficients differ per group.
    assert!(want_c.windows(2).any(|w| w[0] != w[1]));
}

#[test]
fn one_warmup_step_by_hand() {
    // x = (3, 4): ‖x‖ = 5; g = (1, −1): m = ±0.1, v = 0.001, so
    // u = ±0.1/(√0.001 + 1e-8) ≈ ±√10, ‖u‖ ≈ √20, c = 5/√20 ≈ 1.118034,
    // and lr·c·u = ±0.1·5/√2·(1 − ~3e-7) ≈ ±0.353553.
    let cfg = LambConfig::default().with_lr(0.1).with_freeze_step(10);
    let mut opt = OneBitLamb::new(&[LambGroup::new(2)], cfg).unwrap();
    let mut x = [3.0f32, 4.0];
    let rep = opt
        .step_with_grad(&mut SingleRank::default(), &mut x, &[1.0, -1.0])
        .unwrap();
    assert!((rep.coefficients[0] - 1.118_034).abs() < 1e-5, "{rep:?}");
    assert!(
        (x[0] - 2.646_447).abs() < 1e-5 && (x[1] - 4.353_553).abs() < 1e-5,
        "{x:?}"
    );
    // Scaled up 100×, the ratio 111.8 is clipped to max_coeff = 10:
    // lr·10·√10 = 3.162278.
    let mut opt = OneBitLamb::new(&[LambGroup::new(2)], cfg).unwrap();
    let mut x = [300.0f32, 400.0];
    let rep = opt
        .step_with_grad(&mut SingleRank::default(), &mut x, &[1.0, -1.0])
        .unwrap();
    assert_eq!(rep.coefficients[0], 10.0);
    assert!(
        (x[0] - 296.837_7).abs() < 1e-3 && (x[1] - 403.162_3).abs() < 1e-3,
        "{x:?}"
    );
    // The running average moved by (1 − 0.9) of it.
    assert!((opt.frozen_coefficients()[0] - 1.0).abs() < 1e-12);
}

/// Run `steps` on `p` ranks, exporting after `cut` steps into a fresh
/// optimizer; returns (resumed, straight) per rank: params and state bytes.
fn round_trip(p: usize, cfg: LambConfig, cut: u64, steps: u64) {
    let pb = LogisticProblem::generate(p, 128, 199, 8, 5);
    let d = pb.params();
    let out = LocalComm::run(p, |mut c| {
        let mut straight = OneBitLamb::new(&groups(d), cfg).unwrap();
        let mut xs = x0(d);
        for _ in 0..steps {
            lamb_step(&mut c, &pb, &mut straight, &mut xs, 32).unwrap();
        }
        let mut opt = OneBitLamb::new(&groups(d), cfg).unwrap();
        let mut x = x0(d);
        for _ in 0..cut {
            lamb_step(&mut c, &pb, &mut opt, &mut x, 32).unwrap();
        }
        let saved = opt.export_state();
        drop(opt);
        let mut fresh = OneBitLamb::new(&groups(d), cfg).unwrap();
        fresh.import_state(&saved).unwrap();
        assert_eq!(fresh.export_state(), saved);
        for _ in cut..steps {
            lamb_step(&mut c, &pb, &mut fresh, &mut x, 32).unwrap();
        }
        (
            bits(&x),
            fresh.export_state(),
            bits(&xs),
            straight.export_state(),
        )
    });
    for r in out {
        let (x, s, xs, ss) = r.unwrap();
        assert_eq!(x, xs);
        assert_eq!(s, ss);
    }
}

#[test]
fn state_round_trips_mid_schedule_bit_for_bit() {
    let cfg = LambConfig::default().with_lr(0.02).with_freeze_step(8);
    // In the warm-up (c̄ mid-average), right at the freeze, and in the
    // compression stage (error buffers, v_fresh, factors, scaling).
    for cut in [4, 8, 9, 15] {
        round_trip(3, cfg, cut, 24);
    }
    // The automatic freeze: mid-warm-up with a snapshot, and after it.
    let auto = FreezePolicy::Auto(
        AutoFreeze::default()
            .with_window(3)
            .with_min_step(3)
            .with_max_step(12),
    );
    let cfg = cfg.with_freeze(auto);
    for cut in [4, 20] {
        round_trip(2, cfg, cut, 24);
    }
}

#[test]
fn automatic_freeze_equals_the_fixed_step_it_chose() {
    let pb = LogisticProblem::generate(2, 128, 199, 8, 5);
    let d = pb.params();
    let auto = FreezePolicy::Auto(
        AutoFreeze::default()
            .with_window(3)
            .with_min_step(3)
            .with_max_step(12),
    );
    let run = |cfg: LambConfig| {
        LocalComm::run(2, |mut c| {
            let mut opt = OneBitLamb::new(&groups(d), cfg).unwrap();
            let mut x = x0(d);
            for _ in 0..20 {
                lamb_step(&mut c, &pb, &mut opt, &mut x, 32).unwrap();
            }
            (bits(&x), opt.frozen_at())
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect::<Vec<_>>()
    };
    let cfg = LambConfig::default().with_lr(0.02);
    let a = run(cfg.with_freeze(auto));
    let at = a[0].1.unwrap();
    assert!((3..=12).contains(&at));
    let f = run(cfg.with_freeze_step(at));
    assert_eq!(a[0].0, f[0].0);
    assert_eq!(a[1].0, f[1].0);
}

/// Bitwise CRC-32 (IEEE), the slow obvious way, to forge test records.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// `body` (a record without its CRC) with a valid CRC appended.
fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    let total = (body.len() + 4) as u64;
    body[8..16].copy_from_slice(&total.to_le_bytes());
    let crc = crc32(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

#[test]
fn import_refuses_bad_records_and_changes_nothing() {
    let cfg = LambConfig::default().with_freeze_step(1);
    let gs = [LambGroup::new(6), LambGroup::new(4)];
    let mut opt = OneBitLamb::new(&gs, cfg).unwrap();
    let mut c = SingleRank::default();
    let mut x = vec![0.5f32; 10];
    for _ in 0..3 {
        opt.step_with_grad(&mut c, &mut x, &[0.1; 10]).unwrap();
    }
    let good = opt.export_state();
    let before = good.clone();
    let mut bad = good.clone();
    bad[0] ^= 1;
    assert_eq!(opt.import_state(&bad), Err(StateError::BadMagic));
    // 1-bit Adam's record is not ours.
    let adam = OneBitAdam::new(10, Config::default())
        .unwrap()
        .export_state();
    assert_eq!(opt.import_state(&adam), Err(StateError::BadMagic));
    let mut bad = good.clone();
    bad[4] = 9;
    assert_eq!(
        opt.import_state(&bad),
        Err(StateError::UnsupportedVersion(9))
    );
    let mut bad = good.clone();
    bad[40] ^= 0x10;
    assert!(matches!(
        opt.import_state(&bad),
        Err(StateError::Checksum { .. })
    ));
    let n = good.len() as u64;
    assert_eq!(
        opt.import_state(&good[..good.len() - 1]),
        Err(StateError::Truncated {
            needed: n,
            found: n - 1
        })
    );
    assert_eq!(
        opt.import_state(&good[..10]),
        Err(StateError::Truncated {
            needed: 20,
            found: 10
        })
    );
    let mut long = good.clone();
    long.push(0);
    assert_eq!(opt.import_state(&long), Err(StateError::TrailingBytes));
    // Trailing bytes inside a record whose length field and CRC agree.
    let mut long = good[..good.len() - 4].to_vec();
    long.push(0);
    assert_eq!(
        opt.import_state(&sealed(long)),
        Err(StateError::TrailingBytes)
    );
    // Other shapes and policies.
    let other = |gs: &[LambGroup], cfg| OneBitLamb::new(gs, cfg).unwrap();
    assert_eq!(
        other(&[LambGroup::new(11)], cfg).import_state(&good),
        Err(StateError::Shape("parameter count"))
    );
    assert_eq!(
        other(&[LambGroup::new(10)], cfg).import_state(&good),
        Err(StateError::Shape("group count"))
    );
    assert_eq!(
        other(&[LambGroup::new(5), LambGroup::new(5)], cfg).import_state(&good),
        Err(StateError::Shape("group length"))
    );
    // Another fixed step: a schedule of another length, both values named;
    // another rule: refused as a shape.
    assert_eq!(
        other(&gs, cfg.with_freeze_step(2)).import_state(&good),
        Err(StateError::Schedule {
            field: "freeze_step",
            saved: 1,
            here: 2
        })
    );
    assert!(matches!(
        other(&gs, cfg.with_freeze(onebit_adam::FreezePolicy::default())).import_state(&good),
        Err(StateError::Shape(s)) if s.starts_with("freeze policy")
    ));
    // A NaN momentum (the record's first `m` float), re-sealed.
    let body = &good[..good.len() - 4];
    // ... m (u64 + 10 f32) | v (same) | v_fresh (same) | mask (2 bytes).
    let m_at = body.len() - 2 - 3 * (8 + 10 * 4) + 8;
    let mut nan = body.to_vec();
    nan[m_at..m_at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    assert_eq!(opt.import_state(&sealed(nan)), Err(StateError::NonFinite));
    // A first group's f_prev of 0 (header 16 + rank/size 8 + len 8 +
    // groups 4 + step 8, then len 8 and c̄ 8).
    let mut zero = body.to_vec();
    zero[60..68].copy_from_slice(&0.0f64.to_le_bytes());
    assert_eq!(opt.import_state(&sealed(zero)), Err(StateError::NonFinite));
    // A record that says "compressed" (scaling set) without v_fresh.
    let mut mixed = body.to_vec();
    let mask = mixed[mixed.len() - 2..].to_vec();
    let flen = mixed.len() - 2 - 10 * 4 - 8;
    mixed.truncate(flen);
    mixed.extend_from_slice(&0u64.to_le_bytes());
    mixed.extend_from_slice(&mask);
    assert_eq!(
        opt.import_state(&sealed(mixed)),
        Err(StateError::Shape("stage (scaling and fresh variance)"))
    );
    assert_eq!(opt.export_state(), before);
    opt.import_state(&good).unwrap();
    assert_eq!(opt.export_state(), before);
}

#[test]
fn bad_steps_fail_on_every_rank_and_change_nothing() {
    let cfg = LambConfig::default().with_freeze_step(2);
    let out = LocalComm::run(3, |mut c| {
        let mut opt = OneBitLamb::new(&[LambGroup::new(20)], cfg).unwrap();
        let mut x = vec![0.25f32; 20];
        let g = vec![0.5f32; 20];
        for _ in 0..3 {
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        let (before, xb) = (opt.export_state(), x.clone());
        let mut bad = g.clone();
        if c.rank() == 1 {
            bad[7] = f32::NAN;
        }
        let e1 = opt.step_with_grad(&mut c, &mut x, &bad).unwrap_err();
        let short = if c.rank() == 2 { &g[..19] } else { &g[..] };
        let e2 = opt.step_with_grad(&mut c, &mut x, short).unwrap_err();
        assert_eq!(opt.export_state(), before);
        assert_eq!(x, xb);
        // Still in lockstep afterwards.
        opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        (c.rank(), e1, e2)
    });
    for r in out {
        let (rank, e1, e2) = r.unwrap();
        match rank {
            1 => assert_eq!(e1, OneBitError::NonFinite { index: 7 }),
            _ => assert_eq!(e1, OneBitError::RemoteInput { rank: 1 }),
        }
        match rank {
            2 => assert_eq!(
                e2,
                OneBitError::Length {
                    expected: 20,
                    found: 19
                }
            ),
            _ => assert_eq!(e2, OneBitError::RemoteInput { rank: 2 }),
        }
    }
}

#[test]
fn config_is_validated() {
    let g = [LambGroup::new(4)];
    let d = LambConfig::default();
    let bad = [
        d.with_lr(f32::NAN),
        d.with_beta1(1.0),
        d.with_beta2(-0.1),
        d.with_eps(0.0),
        d.with_weight_decay(-1.0),
        d.with_freeze_step(0),
        d.with_min_coeff(0.0),
        d.with_max_coeff(0.001),
        d.with_coeff_beta(1.0),
        d.with_factor_min(0.0),
        d.with_factor_max(0.1),
        d.with_factor_threshold(1.0),
        d.with_factor_max(f64::INFINITY),
    ];
    for c in bad {
        assert!(
            matches!(OneBitLamb::new(&g, c), Err(OneBitError::Config(_))),
            "{c:?}"
        );
    }
    assert!(matches!(
        OneBitLamb::new(&[LambGroup::new(0)], d),
        Err(OneBitError::Config("group len must be >= 1"))
    ));
    assert!(matches!(
        OneBitLamb::new(&[], d),
        Err(OneBitError::Config(_))
    ));
    assert!(matches!(
        OneBitLamb::new(&[LambGroup::new(2).with_weight_decay(Some(-1.0))], d),
        Err(OneBitError::Config(_))
    ));
    assert!(OneBitLamb::new(&g, d).is_ok());
}

#[test]
fn memory_counts_the_fresh_variance_and_error_buffers() {
    let cfg = LambConfig::default().with_freeze_step(1);
    let out = LocalComm::run(2, |mut c| {
        let mut opt = OneBitLamb::new(&[LambGroup::new(100)], cfg).unwrap();
        let mut x = vec![0.5f32; 100];
        opt.step_with_grad(&mut c, &mut x, &[0.1; 100]).unwrap();
        let warm = opt.memory();
        opt.step_with_grad(&mut c, &mut x, &[0.1; 100]).unwrap();
        (warm, opt.memory())
    });
    for r in out {
        let (warm, comp) = r.unwrap();
        assert_eq!(warm.moments, 800);
        assert_eq!(warm.error_feedback, 0);
        assert_eq!(comp.moments, 1200);
        // N = 112 (100 padded to 16), N/P = 56.
        assert_eq!(comp.error_feedback, 4 * (112 + 56));
    }
}

/// Mean bytes per step of a stage.
fn mean_bytes(reports: &[LambStepReport], stage: Stage) -> f64 {
    let sel: Vec<_> = reports.iter().filter(|r| r.stage == stage).collect();
    sel.iter().map(|r| r.bytes.bytes_sent as f64).sum::<f64>() / sel.len() as f64
}

#[test]
fn converges_at_a_large_batch_like_one_bit_adam() {
    const RANKS: usize = 4;
    const STEPS: u64 = 300;
    const FREEZE: u64 = 60; // 20 % of the run
    const BATCH: usize = 2048; // per rank: a global batch of 8192
    let pb = LogisticProblem::generate(RANKS, 8192, 4095, 32, 7);
    let d = pb.params();
    // A non-zero start: the trust ratio ‖x‖/‖u‖ of x = 0 is the clip.
    let init: Vec<f32> = (0..d)
        .map(|i| ((i * 2_654_435_761 % 1000) as f32 / 1000.0 - 0.5) * 0.2)
        .collect();
    let start = pb.loss(&init);
    let lamb = |freeze: u64| {
        let cfg = LambConfig::default().with_lr(0.05).with_freeze_step(freeze);
        LocalComm::run(RANKS, |mut c| {
            // The weights and the bias as two layers.
            let gs = [LambGroup::new(d - 1), LambGroup::new(1)];
            let mut opt = OneBitLamb::new(&gs, cfg).unwrap();
            let mut x = init.clone();
            let mut g = vec![0.0f32; d];
            let mut reps = Vec::new();
            for t in 0..STEPS as usize {
                let s = (t * BATCH) % (8192 - BATCH + 1);
                pb.batch_loss_grad(c.rank(), s..s + BATCH, &x, &mut g)
                    .unwrap();
                reps.push(opt.step_with_grad(&mut c, &mut x, &g).unwrap());
            }
            (x, reps, opt.zero_coordinates())
        })
        .into_iter()
        .next()
        .unwrap()
        .unwrap()
    };
    let (x1, reps, zeros) = lamb(FREEZE);
    let (xf, _, _) = lamb(STEPS + 1);
    let adam = LocalComm::run(RANKS, |mut c| {
        let cfg = Config::default().with_lr(0.005).with_freeze_step(FREEZE);
        let mut opt = OneBitAdam::new(d, cfg).unwrap();
        let mut x = init.clone();
        run_steps(&mut c, &pb, &mut opt, &mut x, STEPS, Some(BATCH)).unwrap();
        x
    })
    .into_iter()
    .next()
    .unwrap()
    .unwrap();
    let (l1, lf, la) = (pb.loss(&x1), pb.loss(&xf), pb.loss(&adam));
    let (warm, comp) = (
        mean_bytes(&reps, Stage::Warmup),
        mean_bytes(&reps, Stage::Compressed),
    );
    println!(
        "logistic, {RANKS} ranks, {d} params, batch {BATCH}/rank ({} global), {STEPS} steps, \
         freeze {FREEZE}: loss at start {start:.5}; LAMB lr 0.05 (full precision) {lf:.5}; \
         1-bit LAMB lr 0.05 {l1:.5}; 1-bit Adam lr 0.005 {la:.5}",
        BATCH * RANKS
    );
    println!(
        "1-bit LAMB bytes/rank/step: warm-up {warm:.0}, compressed {comp:.0} ({:.1}x fewer); \
         last coefficients {:?}; frozen c̄ at the freeze {:?}; {zeros} exact-zero coordinates",
        warm / comp,
        reps.last().unwrap().coefficients,
        reps[FREEZE as usize - 1].coefficients,
    );
    assert!(
        l1 < 0.8 * start,
        "1-bit LAMB did not learn: {l1} vs {start}"
    );
    assert!(
        (l1 - lf).abs() <= 0.02 * lf,
        "1-bit LAMB {l1} vs full-precision LAMB {lf}"
    );
    assert!(
        (l1 - la).abs() <= 0.02 * la,
        "1-bit LAMB {l1} vs 1-bit Adam {la}"
    );
    assert!(warm / comp >= 25.0);
    assert!(zeros > 0);
}

#[test]
fn adaptation_factor_is_clipped_both_ways() {
    // β₂ = 0.5 so both variances follow the gradient within a few steps.
    // Gradients of size ~1 through the warm-up, 100× smaller for 40 steps
    // (the fresh variance falls: the factor rises), then 100× larger than
    // at first (it falls).
    const FREEZE: u64 = 20;
    let cfg = LambConfig::default()
        .with_lr(0.01)
        .with_beta2(0.5)
        .with_freeze_step(FREEZE);
    let n = 64;
    let grad = |rank: usize, t: u64| -> Vec<f32> {
        let size = match t {
            0..=20 => 1.0,
            21..=60 => 0.01,
            _ => 100.0,
        };
        (0..n)
            .map(|i| {
                let s = ((i * 7 + rank * 3 + t as usize) % 5) as f32 - 1.5;
                size * s
            })
            .collect()
    };
    let out = LocalComm::run(2, |mut c| {
        let mut opt = OneBitLamb::new(&[LambGroup::new(n)], cfg).unwrap();
        let mut x: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.01).collect();
        let mut cs = Vec::new();
        for t in 1..=100 {
            let g = grad(c.rank(), t);
            let rep = opt.step_with_grad(&mut c, &mut x, &g).unwrap();
            cs.push(rep.coefficients[0]);
        }
        (cs, opt.frozen_coefficients()[0], bits(&x))
    });
    let (cs, cbar, xb) = out.into_iter().next().unwrap().unwrap();
    let mut refl = ReferenceLamb::new(&[LambGroup::new(n)], cfg, FREEZE, 2);
    let mut x: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.01).collect();
    for t in 1..=100 {
        let g = vec![grad(0, t), grad(1, t)];
        assert_eq!(refl.step(&mut x, &g)[0], cs[t as usize - 1], "step {t}");
    }
    assert_eq!(bits(&x), xb);
    // The factors f = c/c̄ of the compression stage.
    let f: Vec<f64> = cs[FREEZE as usize..].iter().map(|c| c / cbar).collect();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
    let mut prev = 1.0;
    for (k, &f) in f.iter().enumerate() {
        assert!(
            (0.5 * (1.0 - 1e-9)..=4.0 * (1.0 + 1e-9)).contains(&f),
            "step {k}: {f}"
        );
        assert!(
            f >= prev * 0.9 * (1.0 - 1e-9) && f <= prev * 1.1 * (1.0 + 1e-9),
            "step {k}: {prev} -> {f}"
        );
        prev = f;
    }
    // Each clip was reached: a rise of exactly +10 %, the top 4, a fall of
    // exactly −10 %, the bottom 0.5.
    let pairs: Vec<(f64, f64)> = f.windows(2).map(|w| (w[0], w[1])).collect();
    assert!(pairs.iter().any(|&(a, b)| close(b, a * 1.1)), "{f:?}");
    assert!(f.iter().any(|&x| close(x, 4.0)), "{f:?}");
    assert!(pairs.iter().any(|&(a, b)| close(b, a * 0.9)), "{f:?}");
    assert!(f.iter().any(|&x| close(x, 0.5)), "{f:?}");
}

/// SplitMix64 step, for gradients that differ by rank, step and coordinate.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 16,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Any layout, rank count, freeze step, weight decay and gradient
    /// stream (with some coordinates exactly 0 throughout, and some 0 only
    /// sometimes): the optimizer is the reference, bit for bit, every step.
    #[test]
    fn any_layout_matches_the_reference(
        p in 1usize..=4,
        lens in proptest::collection::vec(1usize..40, 1..4),
        freeze in 1u64..6,
        decay in proptest::bool::ANY,
        seed in proptest::num::u64::ANY,
    ) {
        let gs: Vec<LambGroup> = lens
            .iter()
            .enumerate()
            .map(|(k, &l)| LambGroup::new(l).with_weight_decay(Some(if decay && k % 2 == 0 { 0.02 } else { 0.0 })))
            .collect();
        let n: usize = lens.iter().sum();
        let cfg = LambConfig::default().with_lr(0.03).with_freeze_step(freeze).with_coeff_beta(0.5);
        let grad = |rank: usize, t: u64| -> Vec<f32> {
            (0..n)
                .map(|i| {
                    let h = mix(seed ^ mix(t * 1000 + i as u64) ^ (rank as u64) << 40);
                    // Every 5th coordinate is dead; a quarter of the rest 0 by chance.
                    if i % 5 == 3 || h.is_multiple_of(4) { 0.0 } else { ((h >> 11) % 2001) as f32 / 1000.0 - 1.0 }
                })
                .collect()
        };
        let start: Vec<f32> = (0..n).map(|i| ((i % 9) as f32 - 4.0) * 0.1).collect();
        let runs = LocalComm::run(p, |mut c| {
            let mut opt = OneBitLamb::new(&gs, cfg).unwrap();
            let mut x = start.clone();
            let mut trace = Vec::new();
            for t in 1..=12 {
                let g = grad(c.rank(), t);
                let rep = opt.step_with_grad(&mut c, &mut x, &g).unwrap();
                trace.push((bits(&x), rep.coefficients));
            }
            trace
        });
        let runs: Vec<_> = runs.into_iter().map(|r| r.unwrap()).collect();
        let mut refl = ReferenceLamb::new(&gs, cfg, freeze, p);
        let mut x = start.clone();
        for t in 1..=12u64 {
            let g: Vec<Vec<f32>> = (0..p).map(|r| grad(r, t)).collect();
            let c = refl.step(&mut x, &g);
            for run in &runs {
                proptest::prop_assert_eq!(&run[t as usize - 1].0, &bits(&x), "step {}", t);
                proptest::prop_assert_eq!(&run[t as usize - 1].1, &c, "step {}", t);
            }
        }
    }
}

#[test]
fn a_state_bound_to_another_group_size_is_refused_at_the_step() {
    let cfg = LambConfig::default().with_freeze_step(1);
    let saved = LocalComm::run(2, |mut c| {
        let mut opt = OneBitLamb::new(&[LambGroup::new(12)], cfg).unwrap();
        let mut x = vec![0.5f32; 12];
        for _ in 0..3 {
            opt.step_with_grad(&mut c, &mut x, &[0.1; 12]).unwrap();
        }
        opt.export_state()
    })
    .into_iter()
    .next()
    .unwrap()
    .unwrap();
    let mut opt = OneBitLamb::new(&[LambGroup::new(12)], cfg).unwrap();
    opt.import_state(&saved).unwrap();
    let mut x = vec![0.5f32; 12];
    // Rank 0 of 2, stepped alone: its error buffers belong to a pair.
    assert_eq!(
        opt.step_with_grad(&mut SingleRank::default(), &mut x, &[0.1; 12]),
        Err(OneBitError::StateShape {
            expected: 2,
            found: 1
        })
    );
    assert_eq!(opt.export_state(), saved);
    assert_eq!(x, vec![0.5f32; 12]);
}
