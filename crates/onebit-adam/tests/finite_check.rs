//! `Config::finite_check`: with `FiniteCheck::On` (the default) a NaN/±∞
//! gradient is refused before anything changes, on every path that reads
//! the caller's gradient (the direct one-rank warm-up step, the copy of
//! P > 1, `accumulate`, the split step); with `FiniteCheck::Off` a finite
//! gradient gives the same bits as with the check, and a bad one poisons
//! exactly its coordinates (`m`, `v`, the parameter), as torch's Adam
//! does — on every rank when P > 1 — while every other coordinate gets the
//! bits of a checked step on the same gradient with the bad value zeroed.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use basis_std::overlap::Overlapped;
use comm_traits::{Communicator, SingleRank};
use onebit_adam::testing::bits;
use onebit_adam::{
    Config, FiniteCheck, Grade, GroupSpec, OneBitAdam, OneBitError, Policy, SplitStep,
};

/// Long enough for the check's multi-stream body (8 × 64 elements) and a tail.
const N: usize = 1200;

fn grad(t: u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u64 + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add((t + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
            ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1e-2
        })
        .collect()
}

fn config(check: FiniteCheck) -> Config {
    // Warm-up for 3 steps, then 1-bit: both stages are exercised.
    Config::default()
        .with_lr(1e-2)
        .with_freeze_step(3)
        .with_finite_check(check)
}

fn params() -> Vec<f32> {
    grad(99, N).iter().map(|g| g * 100.0).collect()
}

/// The state a test compares: parameters, `m`, `v`, steps.
fn snapshot(opt: &OneBitAdam, x: &[f32]) -> (Vec<u32>, Vec<u32>, Vec<u32>, u64) {
    (
        bits(x),
        bits(opt.momentum()),
        bits(opt.variance()),
        opt.steps(),
    )
}

#[test]
fn the_default_is_on() {
    assert_eq!(Config::default().finite_check, FiniteCheck::On);
}

/// Off changes no bit of a clean run: warm-up and compressed steps, the
/// direct step (`step_with_grad`, scaled too) and `accumulate` + `step`.
#[test]
fn off_gives_the_bits_of_on_for_finite_gradients() {
    let run = |check: FiniteCheck| {
        let mut opt = OneBitAdam::new(N, config(check)).unwrap();
        let mut comm = SingleRank::default();
        let mut x = params();
        for t in 0..6 {
            match t % 3 {
                0 => opt.step_with_grad(&mut comm, &mut x, &grad(t, N)).unwrap(),
                1 => opt
                    .step_with_grad_scaled(&mut comm, &mut x, &grad(t, N), 2.0)
                    .unwrap(),
                _ => {
                    opt.accumulate(&grad(t, N)).unwrap();
                    opt.accumulate(&grad(t + 10, N)).unwrap();
                    opt.step(&mut comm, &mut x).unwrap()
                }
            };
        }
        (snapshot(&opt, &x), opt.export_state())
    };
    assert_eq!(run(FiniteCheck::On), run(FiniteCheck::Off));
}

/// On: NaN, ±∞ and an overflowing product are refused at their index by
/// the direct warm-up step, the scaled one and `accumulate`; nothing
/// changes (parameters, moments, steps, exported state).
#[test]
fn on_refuses_a_bad_gradient_and_changes_nothing() {
    let mut opt = OneBitAdam::new(N, config(FiniteCheck::On)).unwrap();
    let mut comm = SingleRank::default();
    let mut x = params();
    opt.step_with_grad(&mut comm, &mut x, &grad(0, N)).unwrap();
    let before = (snapshot(&opt, &x), opt.export_state());
    for at in [0, 517, N - 1] {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut g = grad(1, N);
            g[at] = bad;
            let e = opt.step_with_grad(&mut comm, &mut x, &g).unwrap_err();
            assert_eq!(e, OneBitError::NonFinite { index: at });
            let e = opt.accumulate(&g).unwrap_err();
            assert_eq!(e, OneBitError::NonFinite { index: at });
        }
        let mut g = grad(1, N);
        g[at] = f32::MAX;
        let e = opt
            .step_with_grad_scaled(&mut comm, &mut x, &g, 4.0)
            .unwrap_err();
        assert_eq!(e, OneBitError::NonFinite { index: at });
        assert_eq!((snapshot(&opt, &x), opt.export_state()), before);
    }
}

/// Off, one rank, warm-up: the step returns `Ok`, the bad coordinate's
/// `m`, `v` and parameter are NaN/±∞ (as torch's fused Adam leaves them)
/// and every other coordinate has the bits of a checked step on the
/// gradient with that value zeroed (the step is element-wise).
#[test]
fn off_poisons_exactly_the_bad_coordinates() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for at in [0, 700, N - 1] {
            let mut g = grad(1, N);
            g[at] = bad;
            let mut zeroed = g.clone();
            zeroed[at] = 0.0;
            let mut comm = SingleRank::default();
            let mut poisoned = OneBitAdam::new(N, config(FiniteCheck::Off)).unwrap();
            let mut clean = OneBitAdam::new(N, config(FiniteCheck::On)).unwrap();
            let (mut xp, mut xc) = (params(), params());
            poisoned.step_with_grad(&mut comm, &mut xp, &g).unwrap();
            clean.step_with_grad(&mut comm, &mut xc, &zeroed).unwrap();
            assert!(!xp[at].is_finite(), "{bad} at {at}: x {}", xp[at]);
            assert!(!poisoned.momentum()[at].is_finite());
            assert!(!poisoned.variance()[at].is_finite());
            let others = |v: &[f32]| {
                let mut b = bits(v);
                b.remove(at);
                b
            };
            assert_eq!(others(&xp), others(&xc));
            assert_eq!(others(poisoned.momentum()), others(clean.momentum()));
            assert_eq!(others(poisoned.variance()), others(clean.variance()));
            assert_eq!(poisoned.steps(), 1);
        }
    }
}

/// Off, P = 2, two groups: a NaN in rank 0's gradient reaches both ranks'
/// parameters through the mean all-reduce (the step is `Ok` on both: no
/// rank is left behind), while On fails on both with nothing changed.
#[test]
fn off_spreads_a_bad_value_to_every_rank_and_on_fails_on_every_rank() {
    let groups = [GroupSpec::one_bit(N / 2), GroupSpec::full_precision(N / 2)];
    for check in [FiniteCheck::On, FiniteCheck::Off] {
        let out = LocalComm::run(2, move |mut comm| {
            let mut opt = OneBitAdam::with_groups(&groups, config(check)).unwrap();
            let mut x = params();
            let mut g = grad(comm.rank() as u64, N);
            if comm.rank() == 0 {
                g[N - 3] = f32::NAN;
            }
            let r = opt.step_with_grad(&mut comm, &mut x, &g);
            (r.map(|_| ()), x, opt.steps())
        });
        for (rank, o) in out.into_iter().enumerate() {
            let (r, x, steps) = o.unwrap();
            match check {
                FiniteCheck::On => {
                    let want = if rank == 0 {
                        OneBitError::NonFinite { index: N - 3 }
                    } else {
                        OneBitError::RemoteInput { rank: 0 }
                    };
                    assert_eq!(r, Err(want));
                    assert_eq!((bits(&x), steps), (bits(&params()), 0));
                }
                FiniteCheck::Off => {
                    assert_eq!(r, Ok(()));
                    assert!(x[N - 3].is_nan(), "rank {rank}");
                    assert_eq!(x.iter().filter(|x| x.is_nan()).count(), 1);
                    assert_eq!(steps, 1);
                }
            }
        }
    }
}

/// The split step (`begin_group`/`finish`) follows the switch too: On
/// fails in `finish` with nothing changed, Off poisons the coordinate.
#[test]
fn the_split_step_follows_the_switch() {
    for check in [FiniteCheck::On, FiniteCheck::Off] {
        let comm = LocalComm::group(1).pop().unwrap();
        let mut comm = Overlapped::spawn(move || Ok::<_, ()>(comm)).unwrap();
        let mut opt = OneBitAdam::new(N, config(check)).unwrap();
        let mut x = params();
        let mut g = grad(0, N);
        g[5] = f32::INFINITY;
        let mut split = SplitStep::default();
        opt.begin_group(&mut comm, &mut split, 0, &g, 1.0).unwrap();
        let r = opt.finish(&mut comm, split, &mut x).map(|_| ());
        match check {
            FiniteCheck::On => {
                assert_eq!(r, Err(OneBitError::NonFinite { index: 5 }));
                assert_eq!((bits(&x), opt.steps()), (bits(&params()), 0));
            }
            FiniteCheck::Off => {
                assert_eq!(r, Ok(()));
                assert!(x[5].is_nan() && opt.steps() == 1);
            }
        }
    }
}

/// The split step's copy paths check in the copy's own pass: a graded
/// group in the compressed stage (kept for `finish`) and a full-precision
/// one, after a clean warm-up step — On refuses at the index with nothing
/// changed.
#[test]
fn the_split_steps_copies_refuse_a_bad_gradient() {
    let groups = [
        GroupSpec::one_bit(N / 2).with_policy(Policy::Graded(Grade::Bf16)),
        GroupSpec::full_precision(N / 2),
    ];
    let comm = LocalComm::group(1).pop().unwrap();
    let mut comm = Overlapped::spawn(move || Ok::<_, ()>(comm)).unwrap();
    let config = config(FiniteCheck::On).with_freeze_step(1);
    let mut opt = OneBitAdam::with_groups(&groups, config).unwrap();
    let mut x = params();
    let ranges = opt.group_ranges();
    let mut step = |opt: &mut OneBitAdam, x: &mut [f32], g: &[f32]| {
        let mut split = SplitStep::default();
        for (gi, r) in ranges.iter().enumerate() {
            opt.begin_group(&mut comm, &mut split, gi, &g[r.clone()], 1.0)
                .unwrap();
        }
        opt.finish(&mut comm, split, x).map(|_| ())
    };
    step(&mut opt, &mut x, &grad(0, N)).unwrap();
    let before = (snapshot(&opt, &x), opt.export_state());
    for at in [3, N / 2 + 9] {
        let mut g = grad(1, N);
        g[at] = f32::NAN;
        let r = step(&mut opt, &mut x, &g);
        assert_eq!(r, Err(OneBitError::NonFinite { index: at }));
        assert_eq!((snapshot(&opt, &x), opt.export_state()), before);
    }
    step(&mut opt, &mut x, &grad(1, N)).unwrap();
}
