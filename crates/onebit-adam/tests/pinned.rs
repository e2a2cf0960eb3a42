//! Pinned step results: whole runs of `OneBitAdam` (warm-up, automatic or
//! fixed freeze, compressed stage, final stage; one and two ranks; the
//! direct, scaled and accumulated gradient paths; dead coordinates, signed
//! zeros, subnormal gradients, odd group lengths) hashed to one number each:
//! the parameters' bits, the exported state (moments, zero mask, error
//! buffers, freeze snapshot), the freeze step and the last measured change.
//!
//! The hashes were taken before the warm-up step's passes were fused
//! (`docs/ONEBIT_ADAM.md`, "Memory passes per step"); any change of a
//! result bit, anywhere in these runs, fails the test. A deliberate change
//! of the arithmetic must re-pin them and say why in its commit.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::{Communicator, SingleRank};
use onebit_adam::{AutoFreeze, Config, FreezePolicy, GroupSpec, OneBitAdam, Variant};

/// FNV-1a, 64 bits.
fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h = (*h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// Gradient of rank `r` at step `t`: mostly uniform values whose scale
/// drifts over the run (so the automatic freeze sees `v` settle), a dead
/// coordinate every 37 (exactly 0, alternating signs of zero), one that
/// wakes at step 5, signed zeros now and then, and subnormals.
fn grad(r: usize, t: u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            if i % 37 == 11 {
                return if (i + t as usize).is_multiple_of(2) {
                    0.0
                } else {
                    -0.0
                };
            }
            if i % 53 == 7 && t < 5 {
                return 0.0;
            }
            let h = (i as u64 + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add((t + 1).wrapping_mul(0xD1B5_4A32_D192_ED03))
                .wrapping_add((r as u64).wrapping_mul(0x8CB9_2BA7_2F3D_8DD7));
            let u = (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            match h % 97 {
                0 => -0.0,
                1 => f32::from_bits(1 + (h >> 50) as u32),
                _ => u * 1e-2 * (1.0 + 1.0 / (1.0 + t as f32)),
            }
        })
        .collect()
}

/// How a run hands its gradient to the optimizer.
#[derive(Clone, Copy)]
enum Feed {
    /// `step_with_grad`.
    Direct,
    /// `step_with_grad_scaled` with this factor.
    Scaled(f32),
    /// Two `accumulate` calls (the gradient and half of it), then `step`.
    Accumulated,
}

/// Run `steps` steps on `comm` and hash everything observable.
fn run(
    comm: &mut dyn Communicator,
    groups: &[GroupSpec],
    config: Config,
    feed: Feed,
    steps: u64,
) -> u64 {
    let n: usize = groups.iter().map(|g| g.len).sum();
    let mut opt = OneBitAdam::with_groups(groups, config).unwrap();
    let mut x: Vec<f32> = (0..n).map(|i| (i % 19) as f32 * 0.05 - 0.4).collect();
    for t in 0..steps {
        let g = grad(comm.rank(), t, n);
        match feed {
            Feed::Direct => {
                opt.step_with_grad(comm, &mut x, &g).unwrap();
            }
            Feed::Scaled(f) => {
                opt.step_with_grad_scaled(comm, &mut x, &g, f).unwrap();
            }
            Feed::Accumulated => {
                opt.accumulate(&g).unwrap();
                let half: Vec<f32> = g.iter().map(|&g| g * 0.5).collect();
                opt.accumulate(&half).unwrap();
                opt.step(comm, &mut x).unwrap();
            }
        }
    }
    // The runs must reach what they pin: the automatic freeze decided by a
    // measure (or the fixed step), and the dead coordinates still masked.
    assert!(opt.frozen_at().is_some_and(|f| f < steps));
    assert!(opt.zero_coordinates() > 0);
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in &x {
        fnv(&mut h, &v.to_le_bytes());
    }
    fnv(&mut h, &opt.export_state());
    fnv(&mut h, &opt.frozen_at().unwrap_or(0).to_le_bytes());
    fnv(
        &mut h,
        &opt.freeze_change().unwrap_or(-1.0).to_bits().to_le_bytes(),
    );
    h
}

fn auto() -> FreezePolicy {
    FreezePolicy::Auto(
        AutoFreeze::default()
            .with_window(4)
            .with_threshold(0.2)
            .with_min_step(8)
            .with_max_step(30),
    )
}

/// One pinned run: name, ranks, groups, config, feed, hash.
type Case = (&'static str, usize, Vec<GroupSpec>, Config, Feed, u64);

/// The runs and their pinned hashes.
fn cases() -> Vec<Case> {
    let mixed = vec![
        GroupSpec::one_bit(517),
        GroupSpec::full_precision(131).with_weight_decay(Some(0.0)),
        GroupSpec::one_bit(1000),
    ];
    let base = Config::default()
        .with_lr(0.01)
        .with_weight_decay(0.01)
        .with_freeze(auto());
    let bias = base.with_bias_correction(true);
    let pre = bias.with_variant(Variant::PreconditionedMomentum);
    let staged = bias.with_freeze_step(6).with_final_full_after(Some(12));
    vec![
        (
            "p1 auto direct",
            1,
            mixed.clone(),
            base,
            Feed::Direct,
            12_331_803_578_856_424_299,
        ),
        (
            "p1 auto bias scaled",
            1,
            mixed.clone(),
            bias,
            Feed::Scaled(3.0),
            12_264_457_256_565_280_654,
        ),
        (
            "p1 auto accumulated",
            1,
            mixed.clone(),
            bias,
            Feed::Accumulated,
            10_690_145_801_676_732_969,
        ),
        (
            "p1 one group auto",
            1,
            vec![GroupSpec::one_bit(2061)],
            bias,
            Feed::Direct,
            4_363_639_426_310_388_521,
        ),
        (
            "p1 staged",
            1,
            mixed.clone(),
            staged,
            Feed::Scaled(0.5),
            11_942_008_015_675_305_422,
        ),
        (
            "p2 auto direct",
            2,
            mixed.clone(),
            base,
            Feed::Direct,
            16_088_032_833_574_852_745,
        ),
        (
            "p2 auto pre scaled",
            2,
            mixed.clone(),
            pre,
            Feed::Scaled(2.0),
            12_311_878_464_212_507_198,
        ),
        (
            "p2 staged accumulated",
            2,
            mixed,
            staged,
            Feed::Accumulated,
            106_297_185_840_869_003,
        ),
        (
            "p3 all full",
            3,
            vec![GroupSpec::full_precision(777)],
            bias,
            Feed::Direct,
            10_191_988_093_358_957_586,
        ),
    ]
}

#[test]
fn step_results_are_pinned() {
    let mut got = Vec::new();
    for (name, ranks, groups, config, feed, _) in cases() {
        let hashes: Vec<u64> = if ranks == 1 {
            vec![run(&mut SingleRank::default(), &groups, config, feed, 40)]
        } else {
            LocalComm::run(ranks, |mut c| run(&mut c, &groups, config, feed, 40))
                .into_iter()
                .map(|h| h.unwrap())
                .collect()
        };
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for r in &hashes {
            fnv(&mut h, &r.to_le_bytes());
        }
        got.push((name, h));
    }
    let want: Vec<(&str, u64)> = cases().into_iter().map(|c| (c.0, c.5)).collect();
    assert_eq!(got, want);
}

/// The warm-up step skips the zero mask of a group once none of it is set;
/// an imported state brings its own mask, which must be honoured even by an
/// optimizer whose own mask was already clear: coordinates still zero in
/// the record and woken after the import get cleared as in the exporter.
#[test]
fn an_imported_mask_is_honoured_by_an_optimizer_whose_mask_was_clear() {
    let n = 300;
    let config = Config::default().with_freeze_step(20);
    let mut comm = SingleRank::default();
    let (mut a, mut b) = (
        OneBitAdam::new(n, config).unwrap(),
        OneBitAdam::new(n, config).unwrap(),
    );
    let (mut xa, mut xb) = (vec![0.1f32; n], vec![0.1f32; n]);
    // `a`: a dense gradient clears its whole mask at the first step.
    a.step_with_grad(&mut comm, &mut xa, &vec![0.5f32; n])
        .unwrap();
    assert_eq!(a.zero_coordinates(), 0);
    for t in 0..3 {
        b.step_with_grad(&mut comm, &mut xb, &grad(0, t, n))
            .unwrap();
    }
    let masked = b.zero_coordinates();
    a.import_state(&b.export_state()).unwrap();
    assert_eq!(a.zero_coordinates(), masked);
    xa.clone_from(&xb);
    // Steps 5.. wake the coordinates `i % 53 == 7`.
    for t in 3..8 {
        let g = grad(0, t, n);
        a.step_with_grad(&mut comm, &mut xa, &g).unwrap();
        b.step_with_grad(&mut comm, &mut xb, &g).unwrap();
    }
    assert!(b.zero_coordinates() < masked);
    assert_eq!(a.export_state(), b.export_state());
    assert_eq!(xa, xb);
}

/// `step` after `accumulate` on one rank reads the sum in the kernel's own
/// pass: a sum that overflowed is still refused at its index before
/// anything changes, and the accumulated state survives the refusal.
#[test]
fn an_overflowing_accumulated_sum_is_refused_and_kept() {
    let mut opt = OneBitAdam::new(8, Config::default()).unwrap();
    let mut comm = SingleRank::default();
    let mut x = vec![1.0f32; 8];
    let mut g = vec![0.25f32; 8];
    g[5] = f32::MAX;
    opt.accumulate(&g).unwrap();
    opt.accumulate(&g).unwrap();
    let before = opt.export_state();
    let err = opt.step(&mut comm, &mut x);
    assert_eq!(err, Err(onebit_adam::OneBitError::NonFinite { index: 5 }));
    assert_eq!(opt.export_state(), before);
    assert_eq!(x, vec![1.0f32; 8]);
}

/// The zero mask tests the gradient the kernel uses, after its division:
/// a sum of the smallest subnormal over two ranks (or two micro-batches)
/// divided by 2 is exactly 0 (ties to even), so the coordinate stays
/// "zero", while 3 ulps / 2 rounds to 2 ulps and clears it.
#[test]
fn the_zero_mask_sees_the_divided_gradient() {
    let n = 40;
    let tiny = |k: u32| f32::from_bits(k);
    let grad = |rank: usize| -> Vec<f32> {
        (0..n)
            .map(|i| match (i % 4, rank) {
                (0, 0) => tiny(1), // mean 0
                (2, 0) => tiny(3), // mean 2 ulps
                (3, _) => 0.01 * (i as f32 + 1.0),
                _ => 0.0,
            })
            .collect()
    };
    let config = Config::default().with_freeze_step(10);
    let zeros = LocalComm::run(2, |mut c| {
        let mut opt = OneBitAdam::new(n, config).unwrap();
        let mut x = vec![0.5f32; n];
        let g = grad(c.rank());
        for _ in 0..3 {
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
        }
        opt.zero_coordinates()
    });
    for z in zeros {
        assert_eq!(z.unwrap(), 20);
    }
    let mut opt = OneBitAdam::new(n, config).unwrap();
    let mut x = vec![0.5f32; n];
    for _ in 0..3 {
        opt.accumulate(&grad(0)).unwrap();
        opt.accumulate(&grad(1)).unwrap();
        opt.step(&mut SingleRank::default(), &mut x).unwrap();
    }
    assert_eq!(opt.zero_coordinates(), 20);
}

/// `accumulate` notes whether every sum stayed finite, so the step on the
/// sum can skip its check; an imported sum is not trusted by that note
/// (the step checks it), and a record with an overflowed sum is refused
/// at import anyway, changing nothing.
#[test]
fn an_overflowed_sum_is_never_stepped_on() {
    let mut a = OneBitAdam::new(8, Config::default()).unwrap();
    let mut g = vec![0.25f32; 8];
    g[5] = f32::MAX;
    a.accumulate(&g).unwrap();
    a.accumulate(&g).unwrap();
    let record = a.export_state();
    let mut b = OneBitAdam::new(8, Config::default()).unwrap();
    let fresh = b.export_state();
    assert_eq!(
        b.import_state(&record),
        Err(onebit_adam::StateError::NonFinite)
    );
    assert_eq!(b.export_state(), fresh);
    // A finite imported sum: the step on it gives the exporter's bits.
    let mut c = OneBitAdam::new(8, Config::default()).unwrap();
    c.accumulate(&[0.5f32; 8]).unwrap();
    c.accumulate(&[0.25f32; 8]).unwrap();
    b.import_state(&c.export_state()).unwrap();
    let (mut xb, mut xc) = (vec![1.0f32; 8], vec![1.0f32; 8]);
    b.step(&mut SingleRank::default(), &mut xb).unwrap();
    c.step(&mut SingleRank::default(), &mut xc).unwrap();
    assert_eq!(b.export_state(), c.export_state());
    assert_eq!(xb, xc);
}
