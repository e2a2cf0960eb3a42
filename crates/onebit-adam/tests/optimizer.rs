//! The 1-bit Adam optimizer: training quality against full-precision Adam,
//! bytes per stage, export/import continuation, exact-zero coordinates,
//! groups, staged schedule, seed variant, accumulation, failures.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::{CommStats, Communicator, SingleRank};
use onebit_adam::testing::{LogisticProblem, run_steps};
use onebit_adam::testing::{bits, sleeper_run};
use onebit_adam::{
    AutoFreeze, Config, FreezePolicy, GroupSpec, OneBitAdam, OneBitError, ScaleKind, Stage,
    StateError, StepReport, Variant,
};

const RANKS: usize = 4;
const STEPS: u64 = 300;
const FREEZE: u64 = 60; // 20 % of the run
const BATCH: usize = 256;

fn problem() -> LogisticProblem {
    // 4095 sparse features (255 never occur) + bias = 4096 parameters,
    // 4 × 8192 samples with 32 active features each: not separable, the
    // loss stays well above 0.
    LogisticProblem::generate(RANKS, 8192, 4095, 32, 7)
}

fn config() -> Config {
    Config::default().with_lr(0.005).with_freeze_step(FREEZE)
}

/// Train on `RANKS` LocalComm ranks; per rank: final params, reports, optimizer.
fn train(
    problem: &LogisticProblem,
    groups: &[GroupSpec],
    config: Config,
    steps: u64,
    batch: Option<usize>,
) -> Vec<(Vec<f32>, Vec<StepReport>, OneBitAdam)> {
    LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::with_groups(groups, config).unwrap();
        let mut params = vec![0.0f32; problem.params()];
        let reports = run_steps(&mut c, problem, &mut opt, &mut params, steps, batch).unwrap();
        (params, reports, opt)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

fn mean_bytes(reports: &[StepReport], stage: Stage) -> f64 {
    let sel: Vec<_> = reports.iter().filter(|r| r.stage == stage).collect();
    sel.iter().map(|r| r.bytes.bytes_sent as f64).sum::<f64>() / sel.len() as f64
}

#[test]
fn one_bit_adam_trains_like_adam_with_25x_fewer_bytes() {
    let pb = problem();
    let d = pb.params();
    let onebit = train(&pb, &[GroupSpec::one_bit(d)], config(), STEPS, Some(BATCH));
    let full = train(
        &pb,
        &[GroupSpec::full_precision(d)],
        config(),
        STEPS,
        Some(BATCH),
    );
    // Every rank holds identical parameters.
    for run in [&onebit, &full] {
        for (p, _, _) in run.iter() {
            assert_eq!(bits(p), bits(&run[0].0));
        }
    }
    let start = pb.loss(&vec![0.0; d]);
    let loss_1bit = pb.loss(&onebit[0].0);
    let loss_adam = pb.loss(&full[0].0);
    let rel = (loss_1bit - loss_adam).abs() / loss_adam;
    let warm = mean_bytes(&onebit[0].1, Stage::Warmup);
    let comp = mean_bytes(&onebit[0].1, Stage::Compressed);
    let f32_only = CommStats::allreduce_f32_bytes(RANKS, d) as f64;
    println!(
        "logistic regression, {RANKS} ranks, {d} params, {STEPS} steps of batch {BATCH}/rank, freeze {FREEZE}: \
         loss at start {start:.5}; full-precision Adam {loss_adam:.5}; 1-bit Adam {loss_1bit:.5} \
         (rel. diff {:.3} %)",
        rel * 100.0
    );
    println!(
        "bytes/rank/step: warm-up {warm:.0}, 1-bit stage {comp:.0} ({:.1}x fewer; \
         f32 ring all-reduce alone {f32_only:.0}, {:.1}x)",
        warm / comp,
        f32_only / comp
    );
    assert!(
        loss_adam < 0.8 * start,
        "Adam did not learn: {loss_adam} vs {start}"
    );
    assert!(
        rel <= 0.02,
        "1-bit Adam loss {loss_1bit} vs Adam {loss_adam}"
    );
    assert!(f32_only / comp >= 25.0);
    assert!(warm / comp >= 25.0);
    // The zero detector found the features that never occur.
    assert!(onebit[0].2.zero_coordinates() > 0);
}

#[test]
fn export_import_mid_run_continues_bit_identically() {
    let pb = LogisticProblem::generate(RANKS, 64, 500, 8, 3);
    let d = pb.params();
    let cfg = Config::default().with_lr(0.02).with_freeze_step(10);
    let straight = train(&pb, &[GroupSpec::one_bit(d)], cfg, 40, None);
    let resumed: Vec<(Vec<f32>, Vec<u8>)> = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::new(d, cfg).unwrap();
        let mut params = vec![0.0f32; d];
        run_steps(&mut c, &pb, &mut opt, &mut params, 25, None).unwrap();
        let saved = opt.export_state();
        drop(opt);
        let mut fresh = OneBitAdam::new(d, cfg).unwrap();
        fresh.import_state(&saved).unwrap();
        assert_eq!(fresh.export_state(), saved);
        run_steps(&mut c, &pb, &mut fresh, &mut params, 15, None).unwrap();
        (params, fresh.export_state())
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    for (r, (params, state)) in resumed.iter().enumerate() {
        assert_eq!(bits(params), bits(&straight[r].0));
        assert_eq!(state, &straight[r].2.export_state());
    }
    // Error buffers were really part of it: they are non-zero mid-run.
    assert!(straight[0].2.error_norms()[0].worker > 0.0);
}

#[test]
fn import_rejects_bad_records_and_changes_nothing() {
    let mut opt = OneBitAdam::new(10, Config::default()).unwrap();
    let mut c = SingleRank::default();
    let mut params = vec![0.5f32; 10];
    opt.step_with_grad(&mut c, &mut params, &[0.1; 10]).unwrap();
    let good = opt.export_state();
    let before = opt.export_state();
    let mut bad_magic = good.clone();
    bad_magic[0] ^= 1;
    assert_eq!(opt.import_state(&bad_magic), Err(StateError::BadMagic));
    let mut bad_version = good.clone();
    bad_version[4] = 9;
    assert_eq!(
        opt.import_state(&bad_version),
        Err(StateError::UnsupportedVersion(9))
    );
    let mut flipped = good.clone();
    flipped[40] ^= 0x10;
    assert!(matches!(
        opt.import_state(&flipped),
        Err(StateError::Checksum { .. })
    ));
    assert_eq!(
        opt.import_state(&good[..6]),
        Err(StateError::Truncated {
            needed: 28,
            found: 6
        })
    );
    let mut other = OneBitAdam::new(11, Config::default()).unwrap();
    assert_eq!(
        other.import_state(&good),
        Err(StateError::Shape("parameter count"))
    );
    let mut grouped =
        OneBitAdam::with_groups(&[GroupSpec::full_precision(10)], Config::default()).unwrap();
    assert_eq!(
        grouped.import_state(&good),
        Err(StateError::Policy {
            group: 0,
            saved: onebit_adam::Policy::OneBit,
            here: onebit_adam::Policy::FullPrecision
        })
    );
    // Trailing bytes with a valid checksum over the longer body.
    let mut long = good[..good.len() - 4].to_vec();
    long.push(0);
    let crc = crc32(&long);
    long.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(opt.import_state(&long), Err(StateError::TrailingBytes));
    // A gradient sum (the record's last float) with no gradient counted.
    let mut orphan = good[..good.len() - 4].to_vec();
    let at = orphan.len() - 4;
    orphan[at..].copy_from_slice(&1.0f32.to_le_bytes());
    let crc = crc32(&orphan);
    orphan.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        opt.import_state(&orphan),
        Err(StateError::Shape("gradient sum without a gradient count"))
    );
    assert_eq!(opt.export_state(), before);
    opt.import_state(&good).unwrap();
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

/// Plain Adam (no communication), the obviously-correct slow path.
fn plain_adam(cfg: &Config, grads: &[Vec<f32>], x0: &[f32]) -> Vec<f32> {
    let mut x = x0.to_vec();
    let mut m = vec![0.0f32; x.len()];
    let mut v = vec![0.0f32; x.len()];
    for (t, g) in grads.iter().enumerate() {
        let t = t as i32 + 1;
        for i in 0..x.len() {
            m[i] = cfg.beta1 * m[i] + (1.0 - cfg.beta1) * g[i];
            v[i] = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * g[i] * g[i];
            let (mh, vh) = if cfg.bias_correction {
                (
                    m[i] / (1.0 - f64::from(cfg.beta1).powi(t)) as f32,
                    v[i] / (1.0 - f64::from(cfg.beta2).powi(t)) as f32,
                )
            } else {
                (m[i], v[i])
            };
            let u = mh / (vh.sqrt() + cfg.eps) + cfg.weight_decay * x[i];
            x[i] -= cfg.lr * u;
        }
    }
    x
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, failure_persistence: None, ..Default::default() })]
    #[test]
    fn warmup_reduces_to_plain_adam(
        n in 1usize..40,
        steps in 1usize..12,
        seed in proptest::prelude::any::<u64>(),
        bias_correction in proptest::prelude::any::<bool>(),
        wd in 0.0f32..0.1,
    ) {
        let cfg = Config::default()
.with_lr(0.01)
.with_weight_decay(wd)
.with_bias_correction(bias_correction)
.with_freeze_step(1000);
        let mut s = seed;
        let grads: Vec<Vec<f32>> = (0..steps).map(|_| (0..n).map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        }).collect()).collect();
        let x0 = vec![0.25f32; n];
        let mut x = x0.clone();
        let mut opt = OneBitAdam::new(n, cfg).unwrap();
        let mut c = SingleRank::default();
        for g in &grads {
            opt.step_with_grad(&mut c, &mut x, g).unwrap();
        }
        proptest::prop_assert_eq!(bits(&x), bits(&plain_adam(&cfg, &grads, &x0)));
    }
}

#[test]
fn non_finite_gradient_fails_on_every_rank_before_any_change() {
    let out: Vec<_> = LocalComm::run(3, |mut c| {
        let mut opt = OneBitAdam::new(20, Config::default().with_freeze_step(1)).unwrap();
        let mut x = vec![1.0f32; 20];
        opt.step_with_grad(&mut c, &mut x, &[0.5; 20]).unwrap();
        let (x_before, s_before) = (x.clone(), opt.export_state());
        let mut g = vec![0.25f32; 20];
        if c.rank() == 2 {
            g[3] = f32::INFINITY;
        }
        let err = opt.step_with_grad(&mut c, &mut x, &g);
        assert_eq!(bits(&x), bits(&x_before));
        assert_eq!(opt.export_state(), s_before);
        // Still in lockstep afterwards.
        opt.step_with_grad(&mut c, &mut x, &[0.25; 20]).unwrap();
        err
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    assert_eq!(out[2], Err(OneBitError::NonFinite { index: 3 }));
    assert_eq!(out[0], Err(OneBitError::RemoteInput { rank: 2 }));
    assert_eq!(out[1], Err(OneBitError::RemoteInput { rank: 2 }));
    // Locally: accumulate rejects too.
    let mut opt = OneBitAdam::new(2, Config::default()).unwrap();
    assert_eq!(
        opt.accumulate(&[0.0, f32::NAN]),
        Err(OneBitError::NonFinite { index: 1 })
    );
    assert_eq!(
        opt.step(&mut SingleRank::default(), &mut [0.0, 0.0]),
        Err(OneBitError::NoGradient)
    );
}

#[test]
fn zero_gradient_coordinates_keep_zero_momentum() {
    // Coordinates 0..5 never get a gradient; without detection the compressed
    // momentum there would be ±β and the update m/(√0+ε) enormous.
    let n = 64;
    let grad = |r: usize, t: u64| -> Vec<f32> {
        (0..n)
            .map(|i| {
                if i < 5 {
                    0.0
                } else {
                    ((i * 7 + r * 3 + t as usize) % 11) as f32 * 0.1 - 0.5
                }
            })
            .collect()
    };
    let out: Vec<(Vec<f32>, Vec<f32>, usize)> = LocalComm::run(2, |mut c| {
        let mut opt = OneBitAdam::new(n, Config::default().with_freeze_step(3)).unwrap();
        let mut x = vec![1.0f32; n];
        for t in 0..10 {
            let g = grad(c.rank(), t);
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        (x, opt.momentum().to_vec(), opt.zero_coordinates())
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    for (x, m, zeros) in &out {
        assert_eq!(*zeros, 5);
        assert!(m[..5].iter().all(|&v| v == 0.0));
        assert!(x[..5].iter().all(|&v| v == 1.0));
        assert!(m[5..].iter().any(|&v| v != 0.0));
    }
}

#[test]
fn groups_freeze_only_one_bit_variance_and_staged_schedule_resumes_it() {
    let pb = LogisticProblem::generate(RANKS, 32, 200, 6, 11);
    let d = pb.params();
    let groups = [GroupSpec::one_bit(150), GroupSpec::full_precision(d - 150)];
    let cfg = Config::default().with_lr(0.01).staged(30);
    assert_eq!(
        (cfg.freeze.fixed_step(), cfg.final_full_after),
        (Some(3), Some(27))
    );
    let stages_and_v: Vec<(Vec<Stage>, Vec<Vec<f32>>)> = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups, cfg).unwrap();
        let mut x = vec![0.0f32; d];
        let mut stages = Vec::new();
        let mut vs = Vec::new();
        for _ in 0..30 {
            let r = run_steps(&mut c, &pb, &mut opt, &mut x, 1, None).unwrap();
            stages.push(r[0].stage);
            vs.push(opt.variance().to_vec());
        }
        (stages, vs)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    let (stages, vs) = &stages_and_v[0];
    assert_eq!(stages[2], Stage::Warmup);
    assert_eq!(stages[3], Stage::Compressed);
    assert_eq!(stages[26], Stage::Compressed);
    assert_eq!(stages[27], Stage::FinalFull);
    // 1-bit group: v frozen from step 4 to 27; full group: v keeps moving.
    assert_eq!(bits(&vs[3][..150]), bits(&vs[26][..150]));
    assert_ne!(bits(&vs[26][..150]), bits(&vs[29][..150]));
    assert_ne!(bits(&vs[3][150..]), bits(&vs[26][150..]));
}

#[test]
fn seed_variant_trains_and_error_reset_zeroes_buffers() {
    let pb = LogisticProblem::generate(RANKS, 64, 300, 8, 5);
    let d = pb.params();
    let cfg = Config::default()
        .with_lr(0.02)
        .with_freeze_step(10)
        .with_variant(Variant::DecayedGradient {
            beta: 0.9,
            scale: ScaleKind::Rms,
        })
        .with_error_reset_every(Some(7));
    let run = train(&pb, &[GroupSpec::one_bit(d)], cfg, 38, None); // 28 1-bit steps: reset at 28
    for (p, _, _) in &run {
        assert_eq!(bits(p), bits(&run[0].0));
    }
    let (x, reports, opt) = &run[0];
    assert!(pb.loss(x) < 0.9 * pb.loss(&vec![0.0; d]));
    assert_eq!(opt.error_norms()[0].worker, 0.0);
    // Gathered 1-bit gradients of the live coordinates:
    // (P−1)·(40 header + ⌈live/8⌉ + 4) bytes per step.
    let live = d - opt.zero_coordinates();
    assert!(live < d);
    let last = reports.last().unwrap();
    assert_eq!(last.stage, Stage::Compressed);
    assert_eq!(
        last.bytes.bytes_sent,
        (RANKS as u64 - 1) * (40 + live.div_ceil(8) as u64 + 4)
    );
    let run2 = train(
        &pb,
        &[GroupSpec::one_bit(d)],
        cfg.with_error_reset_every(None),
        38,
        None,
    );
    assert!(run2[0].2.error_norms()[0].worker > 0.0);
}

#[test]
fn accumulation_averages_micro_batches() {
    let cfg = Config::default().with_freeze_step(2);
    let g1: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.7).collect();
    let g2: Vec<f32> = (0..16).map(|i| 0.3 - i as f32 * 0.05).collect();
    let avg: Vec<f32> = g1
        .iter()
        .zip(&g2)
        .map(|(a, b)| (0.0 + a + b) / 2.0)
        .collect();
    let mut c = SingleRank::default();
    let (mut a, mut b) = (
        OneBitAdam::new(16, cfg).unwrap(),
        OneBitAdam::new(16, cfg).unwrap(),
    );
    let (mut xa, mut xb) = (vec![0.1f32; 16], vec![0.1f32; 16]);
    for _ in 0..4 {
        a.accumulate(&g1).unwrap();
        a.accumulate(&g2).unwrap();
        a.step(&mut c, &mut xa).unwrap();
        b.step_with_grad(&mut c, &mut xb, &avg).unwrap();
    }
    assert_eq!(bits(&xa), bits(&xb));
}

#[test]
fn config_is_validated() {
    let bad = |c: Config| OneBitAdam::new(4, c).err();
    let auto = |a: AutoFreeze| Config::default().with_freeze(FreezePolicy::Auto(a));
    // Each error names the constraint the field breaks, not only the field.
    let cases = [
        (
            Config::default().with_freeze_step(0),
            "freeze_step must be >= 1",
        ),
        (Config::default().with_beta1(1.0), "beta1 must be in [0, 1)"),
        (
            Config::default().with_eps(0.0),
            "eps must be finite and > 0",
        ),
        (
            Config::default().with_lr(f32::NAN),
            "lr must be finite and >= 0",
        ),
        (
            auto(AutoFreeze::default().with_window(0)),
            "auto freeze window must be >= 1",
        ),
        (
            auto(AutoFreeze::default().with_threshold(1.0)),
            "auto freeze threshold must be finite and in (0, 1)",
        ),
        (
            auto(AutoFreeze::default().with_threshold(0.0)),
            "auto freeze threshold must be finite and in (0, 1)",
        ),
        (
            auto(AutoFreeze::default().with_threshold(f64::NAN)),
            "auto freeze threshold must be finite and in (0, 1)",
        ),
        (
            auto(AutoFreeze::default().with_min_step(0)),
            "auto freeze min_step must be >= 1",
        ),
        (
            auto(AutoFreeze::default().with_min_step(10).with_max_step(9)),
            "auto freeze max_step must be >= min_step",
        ),
    ];
    for (config, message) in cases {
        let e = bad(config).unwrap();
        assert_eq!(e, OneBitError::Config(message));
        assert_eq!(e.to_string(), format!("invalid configuration: {message}"));
    }
    assert!(bad(Config::default()).is_none());
    assert!(bad(Config::default().with_freeze_step(1)).is_none());
    let _ = Communicator::size(&SingleRank::default());
}

/// With every coordinate live (no exact-zero gradients) the 1-bit stage takes
/// the fused path — the momentum formed inside the worker compressor, the
/// result written straight into `m` — and must give the bits of the plain
/// recipe built from the public pieces: warm-up `AdamW::step_scaled` on the
/// all-reduced gradient, then per 1-bit step `m ← β₁m + (1−β₁)g` formed
/// first, `compressed_allreduce(m)`, `AdamW::update`. Lengths with and
/// without padding (`n % 8P`).
#[test]
fn all_live_fused_path_matches_the_plain_recipe() {
    use onebit_adam::{AdamW, AllReduceState, Kernel, compressed_allreduce};
    let (ranks, steps, freeze) = (2usize, 12u64, 4u64);
    // 40 000: many decode blocks, chunk boundaries inside them.
    for n in [64usize, 1000, 4099, 40_000] {
        let grad = |rank: usize, t: u64| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 31 + rank * 7 + t as usize * 13) % 97) as f32 / 48.0 - 1.0 + 1e-3)
                .collect()
        };
        let cfg = Config::default()
            .with_lr(0.01)
            .with_freeze_step(freeze)
            .with_weight_decay(0.01);
        let out = LocalComm::run(ranks, |mut c| {
            let rank = c.rank();
            let mut opt = OneBitAdam::new(n, cfg).unwrap();
            let mut x = vec![0.5f32; n];
            let (mut xr, mut m, mut v) = (vec![0.5f32; n], vec![0.0f32; n], vec![0.0f32; n]);
            let mut state = AllReduceState::new();
            let h = AdamW::default()
                .with_lr(cfg.lr)
                .with_beta1(cfg.beta1)
                .with_beta2(cfg.beta2)
                .with_eps(cfg.eps)
                .with_weight_decay(cfg.weight_decay)
                .with_bias(None);
            for t in 1..=steps {
                let g = grad(rank, t);
                opt.step_with_grad(&mut c, &mut x, &g).unwrap();
                if t <= freeze {
                    let mut sum = g.clone();
                    c.all_reduce_sum(&mut sum).unwrap();
                    h.step_scaled(
                        Kernel::detect(),
                        &mut xr,
                        &mut m,
                        &mut v,
                        &sum,
                        ranks as f32,
                        None,
                    )
                    .unwrap();
                } else {
                    let mut local: Vec<f32> = m
                        .iter()
                        .zip(&g)
                        .map(|(&m, &g)| cfg.beta1 * m + (1.0 - cfg.beta1) * g)
                        .collect();
                    compressed_allreduce(&mut c, &mut local, &mut state).unwrap();
                    m = local;
                    h.update(Kernel::detect(), &mut xr, &m, &v).unwrap();
                }
            }
            assert_eq!(opt.zero_coordinates(), 0);
            (bits(&x), bits(&xr), bits(opt.momentum()), bits(&m))
        });
        for r in out {
            let (x, xr, m, mr) = r.unwrap();
            assert_eq!(x, xr, "params, n = {n}");
            assert_eq!(m, mr, "momentum, n = {n}");
        }
    }
}

/// Mean distance to the optimum after `steps` steps of `variant` on a
/// quadratic `Σ c_i (x_i − 1)²/2` whose curvatures `c_i` span 10⁻⁶..1, each
/// rank's gradient carrying noise of the same scale `c_i` (so `√v_i ∝ c_i`,
/// as in a tower whose units fire at very different rates); and the largest.
fn badly_scaled(variant: Variant, policy: fn(usize) -> GroupSpec, steps: u64) -> (f64, f64) {
    const N: usize = 64;
    let curv: Vec<f32> = (0..N)
        .map(|i| 10f32.powf(-6.0 * i as f32 / (N - 1) as f32))
        .collect();
    let cfg = Config::default()
        .with_lr(0.01)
        .with_freeze_step(50)
        .with_bias_correction(true)
        .with_variant(variant);
    let out = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::with_groups(&[policy(N)], cfg).unwrap();
        let mut x = vec![0.0f32; N];
        // SplitMix-style noise in [-1, 1), different per rank and step.
        let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ c.rank() as u64;
        let mut noise = || {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let z = (s ^ (s >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        };
        for _ in 0..steps {
            let g: Vec<f32> = (0..N).map(|i| curv[i] * ((x[i] - 1.0) + noise())).collect();
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        x
    });
    let x = out.into_iter().next().unwrap().unwrap();
    let d: Vec<f64> = x.iter().map(|&v| f64::from((v - 1.0).abs())).collect();
    (
        d.iter().sum::<f64>() / N as f64,
        d.iter().copied().fold(0.0, f64::max),
    )
}

#[test]
fn preconditioned_momentum_keeps_badly_scaled_coordinates_at_adam_steps() {
    let steps = 400;
    let (adam_mean, _) = badly_scaled(Variant::Momentum, GroupSpec::full_precision, steps);
    let (pre_mean, pre_max) =
        badly_scaled(Variant::PreconditionedMomentum, GroupSpec::one_bit, steps);
    let (_, plain_max) = badly_scaled(Variant::Momentum, GroupSpec::one_bit, steps);
    // Adam moves every coordinate ≈ lr per step whatever its curvature, and
    // so does the preconditioned 1-bit stage: it ends about as close (x₀ is
    // 1 away from the optimum, 400 steps of lr 0.01 can cover 4).
    assert!(adam_mean < 0.3, "adam {adam_mean}");
    assert!(
        pre_mean < adam_mean + 0.2 && pre_max < 1.5,
        "preconditioned {pre_mean} / {pre_max}"
    );
    // Plain compressed momentum hands the flattest coordinates steps of
    // lr·α/√v ≫ lr: they are thrown far off (the failure this variant fixes).
    assert!(plain_max > 10.0 * pre_max, "plain {plain_max} vs {pre_max}");
}

/// Distances to the optimum after `steps` steps of `PreconditionedMomentum`
/// on `Σ (x_i − 1)²/2` (noisy per rank, as in [`badly_scaled`]) plus one
/// **sleeper** coordinate whose gradient is 10⁻¹² of the others' during
/// the warm-up (a ReLU unit that rarely fires: its frozen `√v̂` is down at
/// ε) and as large as theirs after the freeze: (mean over the others,
/// largest over the others, the sleeper's), or `None` on a non-finite value.
fn with_a_sleeper(steps: u64) -> Option<(f64, f64, f64)> {
    const N: usize = 64;
    const FREEZE: u64 = 50;
    let cfg = Config::default()
        .with_lr(0.01)
        .with_freeze_step(FREEZE)
        .with_bias_correction(true)
        .with_variant(Variant::PreconditionedMomentum);
    let out = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::new(N + 1, cfg).unwrap();
        sleeper_run(&mut c, N, FREEZE, steps, |c, x, g| {
            opt.step_with_grad(c, x, g).is_ok()
        })
    });
    out.into_iter().next().unwrap().unwrap()
}

/// The frozen `v` cannot follow a coordinate that wakes up after the
/// freeze; its preconditioned momentum is clamped to Adam's own bound
/// (`|m/√v| ≤ (1−β₁)/√((1−β₂)(1−β₁²/β₂))`), so it cannot inflate the
/// buffer's scale and throw every other coordinate off. Before the clamp
/// (DLRM's divergence at the CLI defaults) the sleeper's `u = m/ε ≈ 10⁷`
/// made every coordinate step ≈ lr·10⁶: non-finite within a few steps.
#[test]
fn a_coordinate_waking_after_the_freeze_leaves_the_others_at_adam_steps() {
    let (mean, max, sleeper) = with_a_sleeper(300).expect("finite");
    // 300 steps of ≈ lr = 0.01 from 1 away: Adam gets within the noise
    // (measured: mean 0.013, largest 0.025, the sleeper 0.005).
    assert!(mean < 0.1 && max < 0.2, "others {mean} / {max}");
    // The sleeper, at Adam-sized steps, reaches its optimum too.
    assert!(sleeper < 0.5, "sleeper {sleeper}");
}

/// `PreconditionedMomentum` (the DeepFM tower's variant) against its plain
/// recipe, bit for bit: during warm-up the all-reduced gradient and one
/// bias-corrected `AdamW::step_scaled` with the zero mask; then per 1-bit
/// step `u = (β₁m + (1−β₁)g)/(√(v/bc₂)+ε)` over the live coordinates,
/// `compressed_allreduce(u)`, `m = u·(√(v/bc₂)+ε)`, `AdamW::update`. With
/// and without dead coordinates, and with the optimizer replaced by an
/// export/import copy mid-way through the 1-bit stage (the values it keeps
/// from the frozen `v` must be rebuilt, not lost or stale).
#[test]
fn preconditioned_momentum_matches_the_plain_recipe() {
    use onebit_adam::{AdamW, AllReduceState, Kernel, compressed_allreduce};
    let (ranks, steps, freeze, swap_at) = (3usize, 14u64, 5u64, 9u64);
    // (5000, 1500): live runs longer than a decode block, starting at
    // unaligned packed offsets, with chunk boundaries inside them.
    for (n, dead_every) in [
        (1000usize, None),
        (4099, Some(7usize)),
        (64, Some(2)),
        (5000, Some(1500)),
    ] {
        let dead = |i: usize| dead_every.is_some_and(|k| i % k == k / 2);
        let grad = |rank: usize, t: u64| -> Vec<f32> {
            (0..n)
                .map(|i| {
                    if dead(i) && t <= freeze {
                        0.0
                    } else {
                        ((i * 31 + rank * 7 + t as usize * 13) % 97) as f32 / 48.0 - 1.0 + 1e-3
                    }
                })
                .collect()
        };
        let cfg = Config::default()
            .with_lr(0.01)
            .with_freeze_step(freeze)
            .with_weight_decay(0.01)
            .with_bias_correction(true)
            .with_variant(Variant::PreconditionedMomentum);
        let out = LocalComm::run(ranks, |mut c| {
            let rank = c.rank();
            let mut opt = OneBitAdam::new(n, cfg).unwrap();
            let mut x = vec![0.5f32; n];
            let (mut xr, mut m, mut v) = (vec![0.5f32; n], vec![0.0f32; n], vec![0.0f32; n]);
            let mut zero = vec![true; n];
            let mut state = AllReduceState::new();
            let pow = |b: f32, k: u64| (1.0 - f64::from(b).powi(k as i32)) as f32;
            let h = |t: u64| {
                AdamW::default()
                    .with_lr(cfg.lr)
                    .with_beta1(cfg.beta1)
                    .with_beta2(cfg.beta2)
                    .with_eps(cfg.eps)
                    .with_weight_decay(cfg.weight_decay)
                    .with_bias(Some((pow(cfg.beta1, t), pow(cfg.beta2, t.min(freeze)))))
            };
            for t in 1..=steps {
                if t == swap_at {
                    let saved = opt.export_state();
                    opt = OneBitAdam::new(n, cfg).unwrap();
                    opt.import_state(&saved).unwrap();
                }
                let g = grad(rank, t);
                opt.step_with_grad(&mut c, &mut x, &g).unwrap();
                if t <= freeze {
                    let mut sum = g.clone();
                    c.all_reduce_sum(&mut sum).unwrap();
                    h(t).step_scaled(
                        Kernel::Scalar,
                        &mut xr,
                        &mut m,
                        &mut v,
                        &sum,
                        ranks as f32,
                        Some(&mut zero),
                    )
                    .unwrap();
                } else {
                    let bc2 = pow(cfg.beta2, freeze);
                    let live: Vec<usize> = (0..n).filter(|&i| !zero[i]).collect();
                    let denom = |i: usize| (v[i] / bc2).sqrt() + cfg.eps;
                    // Adam's bound on |m/√v|, times √bc₂ (see the optimizer).
                    let (b1, b2) = (f64::from(cfg.beta1), f64::from(cfg.beta2));
                    let cap = ((1.0 - b1) / ((1.0 - b2) * (1.0 - b1 * b1 / b2)).sqrt()
                        * f64::from(bc2).sqrt()) as f32;
                    let mut u: Vec<f32> = live
                        .iter()
                        .map(|&i| {
                            ((cfg.beta1 * m[i] + (1.0 - cfg.beta1) * g[i]) / denom(i))
                                .clamp(-cap, cap)
                        })
                        .collect();
                    compressed_allreduce(&mut c, &mut u, &mut state).unwrap();
                    for (&i, &u) in live.iter().zip(&u) {
                        m[i] = u * denom(i);
                    }
                    h(t).update(Kernel::Scalar, &mut xr, &m, &v).unwrap();
                }
            }
            assert_eq!(opt.zero_coordinates(), (0..n).filter(|&i| dead(i)).count());
            (bits(&x), bits(&xr), bits(opt.momentum()), bits(&m))
        });
        for r in out {
            let (x, xr, m, mr) = r.unwrap();
            assert_eq!(m, mr, "momentum, n = {n}");
            assert_eq!(x, xr, "params, n = {n}");
        }
    }
}

/// `step_with_grad_scaled(g, f)` is `step_with_grad(f·g)` bit for bit, in
/// both stages, with dead coordinates (exact zeros) and after an
/// accumulated micro-batch; at P = 3, so `f` is not a power of two.
#[test]
fn a_scaled_gradient_step_is_the_step_on_the_product() {
    let n = 4096 + 37;
    let grad = |rank: usize, step: u64| -> Vec<f32> {
        (0..n)
            .map(|i| {
                if i % 97 == 5 {
                    return if i % 2 == 0 { 0.0 } else { -0.0 };
                }
                let h = (i as u64 + 1)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(step * 1_000_003 + rank as u64 * 7919);
                ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1e-2
            })
            .collect()
    };
    let run = |scaled: bool| {
        LocalComm::run(3, |mut c| {
            let cfg = Config::default()
                .with_freeze_step(4)
                .with_variant(Variant::PreconditionedMomentum);
            let mut opt = OneBitAdam::new(n, cfg).unwrap();
            let mut x = vec![0.5f32; n];
            for t in 0..10u64 {
                let g = grad(c.rank(), t);
                if t == 6 {
                    opt.accumulate(&grad(c.rank(), 100)).unwrap();
                }
                if scaled {
                    opt.step_with_grad_scaled(&mut c, &mut x, &g, 3.0).unwrap();
                } else {
                    let product: Vec<f32> = g.iter().map(|v| v * 3.0).collect();
                    opt.step_with_grad(&mut c, &mut x, &product).unwrap();
                }
            }
            (bits(&x), opt.export_state())
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect::<Vec<_>>()
    };
    assert_eq!(run(true), run(false));
}

/// A non-finite factor is a configuration error, an overflowing product a
/// non-finite gradient at its index; both fail every rank, nothing changes.
#[test]
fn a_bad_gradient_factor_fails_every_rank() {
    for (factor, big, local) in [
        (
            f32::NAN,
            1.0,
            OneBitError::Config("gradient factor is not finite"),
        ),
        (1e30, 1e10, OneBitError::NonFinite { index: 7 }),
    ] {
        let out: Vec<_> = LocalComm::run(2, |mut c| {
            let mut opt = OneBitAdam::new(16, Config::default()).unwrap();
            let mut x = vec![1.0f32; 16];
            let mut g = vec![0.5f32; 16];
            let f = if c.rank() == 1 {
                g[7] = big;
                factor
            } else {
                1.0
            };
            let err = opt.step_with_grad_scaled(&mut c, &mut x, &g, f);
            assert_eq!(bits(&x), bits(&[1.0; 16]));
            err.map(|_| ())
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
        assert_eq!(out[1], Err(local.clone()));
        assert_eq!(out[0], Err(OneBitError::RemoteInput { rank: 1 }));
    }
}

/// One rank reads the caller's gradient in the kernel's own pass (no
/// mean-gradient copy, no all-reduce): the bits of the copy path
/// (`accumulate` then `step`, which always copies), with signed zeros, a
/// factor, bias correction, weight decay, a full-precision group, across the
/// freeze and the final stage; and a bad product is still refused with its
/// index before anything changes.
#[test]
fn one_rank_direct_step_matches_the_copy_path() {
    let n = 1000 + 13;
    let grad = |step: u64| -> Vec<f32> {
        (0..n)
            .map(|i| {
                if i % 31 == 3 {
                    return if i % 2 == 0 { 0.0 } else { -0.0 };
                }
                let h = (i as u64 + 1)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(step * 1_000_003);
                ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1e-2
            })
            .collect()
    };
    for groups in [
        vec![GroupSpec::one_bit(600), GroupSpec::full_precision(n - 600)],
        vec![GroupSpec::full_precision(n)],
    ] {
        let cfg = Config::default()
            .with_freeze_step(3)
            .with_final_full_after(Some(6))
            .with_bias_correction(true)
            .with_weight_decay(0.01);
        let run = |direct: bool| {
            let mut opt = OneBitAdam::with_groups(&groups, cfg).unwrap();
            let mut comm = SingleRank::default();
            let mut x = vec![0.5f32; n];
            for t in 0..9u64 {
                let g = grad(t);
                if direct {
                    opt.step_with_grad_scaled(&mut comm, &mut x, &g, 3.0)
                        .unwrap();
                } else {
                    let product: Vec<f32> = g.iter().map(|v| v * 3.0).collect();
                    opt.accumulate(&product).unwrap();
                    opt.step(&mut comm, &mut x).unwrap();
                }
            }
            (bits(&x), opt.export_state())
        };
        assert_eq!(run(true), run(false));
    }
    let mut opt = OneBitAdam::new(16, Config::default()).unwrap();
    let mut x = vec![1.0f32; 16];
    let mut g = vec![0.5f32; 16];
    g[9] = 1e10;
    let err = opt.step_with_grad_scaled(&mut SingleRank::default(), &mut x, &g, 1e30);
    assert_eq!(err, Err(OneBitError::NonFinite { index: 9 }));
    g[9] = f32::NAN;
    let err = opt.step_with_grad(&mut SingleRank::default(), &mut x, &g);
    assert_eq!(err, Err(OneBitError::NonFinite { index: 9 }));
    assert_eq!(bits(&x), bits(&[1.0; 16]));
    assert_eq!(opt.steps(), 0);
}

/// `PreconditionedMomentum`'s 1-bit steps read the caller's gradient (no
/// mean-gradient copy) and form the copy's `f·g + 0.0` in their packing
/// pass: the same bits as the copy path (`accumulate` + `step`, which always
/// copies), on 2 ranks, with signed zeros, dead coordinates, a factor, bias
/// correction, and a non-finite product still refused with nothing changed.
#[test]
fn preconditioned_direct_gradient_matches_the_copy_path() {
    let n = 203;
    let cfg = Config::default()
        .with_lr(0.01)
        .with_freeze_step(3)
        .with_bias_correction(true)
        .with_weight_decay(0.01)
        .with_variant(Variant::PreconditionedMomentum);
    let out = LocalComm::run(2, |mut c| {
        let rank = c.rank();
        let grad = |t: usize| -> Vec<f32> {
            (0..n)
                .map(|i| match (i + t + rank) % 11 {
                    _ if i % 17 == 5 => 0.0, // dead: zero at every warm-up step
                    0 => -0.0,
                    k => (k as f32 - 5.0) * 0.013 * if i % 2 == 0 { 1.0 } else { -1.0 },
                })
                .collect()
        };
        let (mut a, mut b) = (
            OneBitAdam::new(n, cfg).unwrap(),
            OneBitAdam::new(n, cfg).unwrap(),
        );
        let (mut xa, mut xb) = (vec![0.25f32; n], vec![0.25f32; n]);
        for t in 0..9 {
            let g = grad(t);
            let f = if t % 2 == 0 { 2.0 } else { 0.5 };
            a.step_with_grad_scaled(&mut c, &mut xa, &g, f).unwrap();
            let product: Vec<f32> = g.iter().map(|&g| g * f).collect();
            b.accumulate(&product).unwrap();
            b.step(&mut c, &mut xb).unwrap();
        }
        assert_eq!(a.steps(), 9);
        assert!(a.zero_coordinates() > 0);
        // An overflowing product in the 1-bit stage: refused, nothing changed.
        let before = a.export_state();
        let mut big = grad(9);
        big[7] = f32::MAX;
        let e = a.step_with_grad_scaled(&mut c, &mut xa, &big, 4.0);
        (
            bits(&xa),
            bits(&xb),
            bits(a.momentum()),
            bits(b.momentum()),
            e,
            before == a.export_state(),
        )
    });
    for (rank, r) in out.into_iter().enumerate() {
        let (xa, xb, ma, mb, e, unchanged) = r.unwrap();
        assert_eq!(xa, xb, "params, rank {rank}");
        assert_eq!(ma, mb, "momentum, rank {rank}");
        assert!(unchanged);
        // Both ranks hold the bad product: each names its own index 7.
        assert_eq!(e, Err(OneBitError::NonFinite { index: 7 }), "rank {rank}");
    }
}
