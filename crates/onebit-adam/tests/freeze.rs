//! The automatic freeze ([`FreezePolicy::Auto`]): the step it decides
//! against a slow reference computed from the recorded `v`, the same step on
//! every rank with no extra communication, a run that equals the fixed-step
//! run at the decided step, its bounds, the snapshot's memory, and state
//! round trips mid-warm-up (snapshot present), after the freeze and from a
//! version-1 record.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::Communicator;
use onebit_adam::testing::bits;
use onebit_adam::testing::{LogisticProblem, run_steps};
use onebit_adam::{
    AutoFreeze, Config, FreezePolicy, GroupSpec, OneBitAdam, Stage, StateError, StepReport,
};

const RANKS: usize = 4;
const BATCH: Option<usize> = Some(16);

fn problem() -> LogisticProblem {
    LogisticProblem::generate(RANKS, 512, 300, 8, 5)
}

/// Three groups: two 1-bit groups around a full-precision one (whose `v`
/// the rule must ignore).
fn groups(d: usize) -> [GroupSpec; 3] {
    [
        GroupSpec::one_bit(100),
        GroupSpec::full_precision(50),
        GroupSpec::one_bit(d - 150),
    ]
}

fn auto(window: u64, threshold: f64, min_step: u64, max_step: u64) -> FreezePolicy {
    FreezePolicy::Auto(
        AutoFreeze::default()
            .with_window(window)
            .with_threshold(threshold)
            .with_min_step(min_step)
            .with_max_step(max_step),
    )
}

/// Per rank: the reports, `v` after every step, the final params and the
/// optimizer.
type Run = (Vec<StepReport>, Vec<Vec<f32>>, Vec<f32>, OneBitAdam);

fn train(config: Config, steps: u64) -> Vec<Run> {
    let pb = problem();
    let d = pb.params();
    LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups(d), config).unwrap();
        let mut x = vec![0.0f32; d];
        let (mut reports, mut vs) = (Vec::new(), Vec::new());
        for _ in 0..steps {
            reports.extend(run_steps(&mut c, &pb, &mut opt, &mut x, 1, BATCH).unwrap());
            vs.push(opt.variance().to_vec());
        }
        (reports, vs, x, opt)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// The rule restated the slow, obvious way from `v` after each step
/// (`vs[t-1]`): the 1-bit coordinates' `v/(1−β₂ᵗ)` (bias correction on),
/// every `window` steps against `window` steps earlier, summed in f64.
fn reference_freeze(config: &Config, vs: &[Vec<f32>], d: usize) -> u64 {
    let FreezePolicy::Auto(a) = config.freeze else {
        unreachable!("an automatic policy")
    };
    let one_bit: Vec<usize> = (0..100).chain(150..d).collect();
    let vhat = |t: u64| -> Vec<f64> {
        let bc = (1.0 - f64::from(config.beta2).powi(t as i32)) as f32;
        one_bit
            .iter()
            .map(|&i| f64::from(vs[t as usize - 1][i] / bc))
            .collect()
    };
    for t in 1..=vs.len() as u64 {
        if t % a.window == 0 && t > a.window && t >= a.min_step {
            let (now, then) = (vhat(t), vhat(t - a.window));
            let diff: f64 = now.iter().zip(&then).map(|(n, s)| (n - s).abs()).sum();
            let norm: f64 = now.iter().map(|n| n.abs()).sum();
            if diff / norm < a.threshold {
                return t;
            }
        }
        if t >= a.max_step {
            return t;
        }
    }
    panic!("the reference did not freeze within the run");
}

fn config(freeze: FreezePolicy) -> Config {
    Config::default()
        .with_lr(0.01)
        .with_bias_correction(true)
        .with_freeze(freeze)
}

#[test]
fn auto_freeze_decides_the_reference_step_on_every_rank() {
    let d = problem().params();
    // A threshold the measure crosses mid-run, one it never crosses (the
    // freeze comes at `max_step`), and one it crosses at once (the freeze
    // waits for `min_step`).
    for (policy, expect) in [
        (auto(5, 0.08, 10, 200), None),
        (auto(5, 1e-9, 10, 37), Some(37)),
        (auto(4, 0.99, 17, 200), Some(20)),
    ] {
        let cfg = config(policy);
        let runs = train(cfg, 80);
        let (reports, vs, _, opt) = &runs[0];
        let want = reference_freeze(&cfg, vs, d);
        if let Some(e) = expect {
            assert_eq!(want, e, "{policy:?}");
        } else {
            assert!((20..80).contains(&want), "{policy:?}: froze at {want}");
        }
        assert_eq!(opt.frozen_at(), Some(want), "{policy:?}");
        for (t, r) in (1..).zip(reports) {
            let stage = if t <= want {
                Stage::Warmup
            } else {
                Stage::Compressed
            };
            assert_eq!(r.stage, stage, "{policy:?} step {t}");
        }
        // Every rank: the same decision, the same parameters.
        for (reports_r, _, x, opt_r) in &runs[1..] {
            assert_eq!(opt_r.frozen_at(), Some(want));
            assert_eq!(bits(x), bits(&runs[0].2));
            assert_eq!(
                reports_r.iter().map(|r| r.stage).collect::<Vec<_>>(),
                reports.iter().map(|r| r.stage).collect::<Vec<_>>()
            );
        }
        // The extra cost is the snapshot only: no extra collective calls.
        let fixed = train(config(FreezePolicy::Fixed(want)), 80);
        for (a, f) in runs.iter().zip(&fixed) {
            assert_eq!(bits(&a.2), bits(&f.2), "auto == fixed at its step");
            let calls = |r: &[StepReport]| r.iter().map(|r| r.bytes.calls).sum::<u64>();
            assert_eq!(calls(&a.0), calls(&f.0));
        }
    }
}

#[test]
fn the_snapshot_lives_during_the_warmup_only() {
    let pb = problem();
    let d = pb.params();
    let cfg = config(auto(5, 0.08, 10, 200));
    let mut out = LocalComm::run(1, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        let mut x = vec![0.0f32; d];
        let mut seen = Vec::new();
        while opt.frozen_at().is_none() {
            run_steps(&mut c, &pb, &mut opt, &mut x, 1, BATCH).unwrap();
            seen.push((opt.steps(), opt.memory().freeze_snapshot));
        }
        seen
    });
    let seen = out.remove(0).unwrap();
    // Before the first measure (step 5): nothing; then 4 bytes per 1-bit
    // element (the full-precision group is not in it); 0 once frozen.
    for &(t, bytes) in &seen[..seen.len() - 1] {
        let want = if t < 5 { 0 } else { 4 * (d - 50) };
        assert_eq!(bytes, want, "step {t}");
    }
    assert_eq!(seen.last().unwrap().1, 0);
    // A fixed policy never holds one.
    let fixed = OneBitAdam::new(d, config(FreezePolicy::Fixed(3))).unwrap();
    assert_eq!(fixed.memory().freeze_snapshot, 0);
    assert_eq!(fixed.frozen_at(), Some(3));
}

/// Export after `at` steps, import into a fresh optimizer, continue to
/// `total`: the same bits as the straight run, on every rank.
fn round_trip(cfg: Config, at: u64, total: u64) -> Vec<Vec<u8>> {
    let pb = problem();
    let d = pb.params();
    let straight = train(cfg, total);
    let resumed: Vec<(Vec<f32>, Vec<u8>, Vec<u8>)> = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        let mut x = vec![0.0f32; d];
        run_steps(&mut c, &pb, &mut opt, &mut x, at, BATCH).unwrap();
        let saved = opt.export_state();
        let mut fresh = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        fresh.import_state(&saved).unwrap();
        assert_eq!(fresh.export_state(), saved);
        assert_eq!(
            (fresh.frozen_at(), fresh.freeze_change()),
            (opt.frozen_at(), opt.freeze_change())
        );
        run_steps(&mut c, &pb, &mut fresh, &mut x, total - at, BATCH).unwrap();
        (x, fresh.export_state(), saved)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    let mut saved = Vec::new();
    for (r, (x, state, blob)) in resumed.into_iter().enumerate() {
        assert_eq!(bits(&x), bits(&straight[r].2), "rank {r}");
        assert_eq!(state, straight[r].3.export_state());
        saved.push(blob);
    }
    saved
}

#[test]
fn state_round_trips_mid_warmup_and_after_the_freeze() {
    let cfg = config(auto(5, 0.08, 10, 200));
    let frozen_at = train(cfg, 80)[0].3.frozen_at().unwrap();
    assert!(
        frozen_at > 12,
        "the run must freeze after the mid-warm-up export"
    );
    // Step 12: a snapshot (taken at 10) is in the record and decides later.
    let mid = round_trip(cfg, 12, 80);
    let mut opt = OneBitAdam::with_groups(&groups(problem().params()), cfg).unwrap();
    opt.import_state(&mid[0]).unwrap();
    assert_eq!(opt.frozen_at(), None);
    assert!(opt.memory().freeze_snapshot > 0);
    // After the freeze: the decided step travels, the snapshot does not.
    let after = round_trip(cfg, frozen_at + 3, 80);
    opt.import_state(&after[0]).unwrap();
    assert_eq!(opt.frozen_at(), Some(frozen_at));
    assert_eq!(opt.memory().freeze_snapshot, 0);
    // Fixed policies round trip too.
    round_trip(config(FreezePolicy::Fixed(7)), 9, 20);
}

#[test]
fn import_refuses_another_freeze_policy_and_reads_version_1() {
    let pb = problem();
    let d = pb.params();
    let fixed = config(FreezePolicy::Fixed(4));
    let mut runs = LocalComm::run(1, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups(d), fixed).unwrap();
        let mut x = vec![0.0f32; d];
        run_steps(&mut c, &pb, &mut opt, &mut x, 6, BATCH).unwrap();
        let v2 = opt.export_state();
        run_steps(&mut c, &pb, &mut opt, &mut x, 3, BATCH).unwrap();
        (v2, x, opt.export_state())
    });
    let (v2, x_after, state_after) = runs.remove(0).unwrap();
    // Another policy: refused, naming it, the optimizer unchanged. Another
    // fixed step, or the automatic rule with another `max_step` (a run of
    // another length), is a schedule, named with both values.
    let auto = |max: u64| FreezePolicy::Auto(AutoFreeze::default().with_max_step(max));
    let schedule = |field, saved, here| StateError::Schedule { field, saved, here };
    let mut auto_run = OneBitAdam::with_groups(&groups(d), config(auto(200))).unwrap();
    let v_auto = auto_run.export_state();
    for (other, record, want) in [
        (
            FreezePolicy::Fixed(5),
            &v2,
            Some(schedule("freeze_step", 4, 5)),
        ),
        (FreezePolicy::default(), &v2, None),
        (auto(400), &v_auto, Some(schedule("max_step", 200, 400))),
        (
            FreezePolicy::Share(AutoFreeze::share().with_max_step(200)),
            &v_auto,
            None,
        ),
        (
            FreezePolicy::Auto(AutoFreeze::default().with_max_step(200).with_window(5)),
            &v_auto,
            None,
        ),
    ] {
        let mut opt = OneBitAdam::with_groups(&groups(d), config(other)).unwrap();
        let before = opt.export_state();
        let e = opt.import_state(record).unwrap_err();
        match want {
            Some(w) => assert_eq!(e, w),
            None => assert!(
                matches!(e, StateError::Shape(s) if s.starts_with("freeze policy")),
                "{e}"
            ),
        }
        assert_eq!(opt.export_state(), before);
    }
    auto_run.import_state(&v_auto).unwrap();
    // The same record as version 1 wrote it: no freeze block (policy u8,
    // 7 u64, S u64 = 0), version 1, its own CRC.
    let tail = 12 * d + d.div_ceil(8) + 4;
    let block = 1 + 7 * 8 + 8;
    let cut = v2.len() - tail - block;
    assert_eq!(v2[cut], 1, "the fixed policy's kind byte");
    let mut v1 = [&v2[..cut], &v2[cut + block..v2.len() - 4]].concat();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&v1);
    v1.extend_from_slice(&crc.to_le_bytes());
    // Into an automatic policy it cannot be: refused.
    let mut auto_opt = OneBitAdam::with_groups(&groups(d), Config::default()).unwrap();
    assert!(matches!(
        auto_opt.import_state(&v1),
        Err(StateError::Shape(s)) if s.contains("version-1")
    ));
    // Into the fixed policy it continues bit-identically, re-saved as v2.
    let resumed = LocalComm::run(1, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups(d), fixed).unwrap();
        opt.import_state(&v1).unwrap();
        assert_eq!(opt.export_state(), v2);
        let mut x = vec![0.0f32; d];
        // The parameters are the caller's: replay them to step 6.
        let mut replay = OneBitAdam::with_groups(&groups(d), fixed).unwrap();
        run_steps(&mut c, &pb, &mut replay, &mut x, 6, BATCH).unwrap();
        run_steps(&mut c, &pb, &mut opt, &mut x, 3, BATCH).unwrap();
        (x, opt.export_state(), c.size())
    });
    let (x, state, _) = resumed.into_iter().next().unwrap().unwrap();
    assert_eq!(bits(&x), bits(&x_after));
    assert_eq!(state, state_after);
}

#[test]
fn a_snapshot_of_another_length_is_refused() {
    let cfg = config(auto(5, 0.08, 10, 200));
    let d = problem().params();
    // Step 12: the record holds the snapshot taken at step 10.
    let mid = round_trip(cfg, 12, 80).remove(0);
    let mut opt = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
    opt.import_state(&mid).unwrap();
    let s = opt.memory().freeze_snapshot / 4;
    assert!(s > 1);
    // The snapshot (count u64, then its floats) sits right before m, v, the
    // mask, the gradient sum and the CRC.
    let tail = 12 * d + d.div_ceil(8) + 4;
    let at = mid.len() - tail - 4 * s - 8;
    assert_eq!(mid[at..at + 8], (s as u64).to_le_bytes());
    // One float fewer with its count to match and a fresh CRC: a well-formed
    // record whose snapshot does not cover the 1-bit groups.
    let count = ((s - 1) as u64).to_le_bytes();
    let mut short = [
        &mid[..at],
        &count[..],
        &mid[at + 8..at + 8 + 4 * (s - 1)],
        &mid[at + 8 + 4 * s..mid.len() - 4],
    ]
    .concat();
    let crc = crc32fast::hash(&short);
    short.extend_from_slice(&crc.to_le_bytes());
    let mut fresh = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
    let before = fresh.export_state();
    let e = fresh.import_state(&short).unwrap_err();
    assert!(
        matches!(e, StateError::Shape(w) if w.starts_with("freeze state")),
        "{e}"
    );
    assert_eq!(fresh.export_state(), before);
}
