//! Exact restore of the automatic freeze (issue 28): a run killed and
//! resumed anywhere inside its warm-up must freeze at the step the
//! uninterrupted run froze at, with the same parameter bits.
//!
//! For **every** step `k` from 0 to a few steps past the decided freeze,
//! the state exported after `k` steps is imported into a freshly built
//! optimizer on `P = 2` ranks and continued: the freeze step, each step's
//! report (stage, bytes, telemetry), the final parameters and the final
//! state record must equal the straight run's. Covered: 1-bit Adam under
//! [`FreezePolicy::Auto`] and [`FreezePolicy::Share`] with the CLI's
//! configuration (bias correction, preconditioned momentum, telemetry) and
//! a full-precision group the rule must ignore, and 1-bit LAMB (the other
//! optimizer with a freeze tracker; 0/1 Adam's `var_freeze_step` is a
//! config value, round-tripped in `tests/zero_one.rs`).
//!
//! A control shows the check can fail: the same record with its `v̂`
//! snapshot scaled (CRC recomputed) measures another change at the next
//! window, so the snapshot in the record is what decides.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use comm_traits::Communicator;
use onebit_adam::testing::{LogisticProblem, bits, run_steps};
use onebit_adam::{
    AutoFreeze, Config, FreezePolicy, GroupSpec, LambConfig, LambGroup, OneBitAdam, OneBitLamb,
    StateError, StepReport, Variant,
};

const RANKS: usize = 2;
const BATCH: Option<usize> = Some(16);

fn problem() -> LogisticProblem {
    LogisticProblem::generate(RANKS, 256, 300, 8, 5)
}

/// Two 1-bit groups around a full-precision one.
fn groups(d: usize) -> [GroupSpec; 3] {
    [
        GroupSpec::one_bit(100),
        GroupSpec::full_precision(50),
        GroupSpec::one_bit(d - 150),
    ]
}

/// The configuration `basis train --dense-opt onebit-adam` builds, with
/// the library's default freeze.
fn cli_like_default() -> Config {
    Config::default()
        .with_lr(0.01)
        .with_bias_correction(true)
        .with_variant(Variant::PreconditionedMomentum)
        .with_telemetry(true)
}

/// [`cli_like_default`] under `freeze`.
fn cli_like(freeze: FreezePolicy) -> Config {
    cli_like_default().with_freeze(freeze)
}

/// Per rank, after every step `k = 0..=total`: the parameters' bits and the
/// exported state; plus the reports of every step and the freeze step.
struct Straight {
    x: Vec<Vec<Vec<u32>>>,
    state: Vec<Vec<Vec<u8>>>,
    reports: Vec<Vec<StepReport>>,
    frozen_at: Option<u64>,
}

fn straight(cfg: Config, total: u64) -> Straight {
    let pb = problem();
    let d = pb.params();
    let per_rank = LocalComm::run(RANKS, |mut c| {
        let mut opt = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        let mut x = vec![0.0f32; d];
        let (mut xs, mut states) = (vec![bits(&x)], vec![opt.export_state()]);
        let mut reports = Vec::new();
        for _ in 0..total {
            reports.extend(run_steps(&mut c, &pb, &mut opt, &mut x, 1, BATCH).unwrap());
            xs.push(bits(&x));
            states.push(opt.export_state());
        }
        (xs, states, reports, opt.frozen_at())
    });
    let mut out = Straight {
        x: Vec::new(),
        state: Vec::new(),
        reports: Vec::new(),
        frozen_at: None,
    };
    for r in per_rank {
        let (xs, states, reports, f) = r.unwrap();
        out.x.push(xs);
        out.state.push(states);
        out.reports.push(reports);
        out.frozen_at = f;
    }
    out
}

/// One rank's resumed run: the reports of the resumed steps, the final
/// parameters' bits, the final record and the freeze step.
type Resumed = (Vec<StepReport>, Vec<u32>, Vec<u8>, Option<u64>);

/// Resume every rank from `state[r]` (parameters `x[r]`) after `k` steps
/// and run to `total`: per rank, the reports of the resumed steps, the
/// final parameters' bits, the final record and the freeze step.
fn resume(cfg: Config, k: u64, total: u64, state: &[Vec<u8>], x: &[Vec<u32>]) -> Vec<Resumed> {
    let pb = problem();
    let d = pb.params();
    LocalComm::run(RANKS, |mut c| {
        let r = c.rank();
        let mut opt = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        opt.import_state(&state[r]).unwrap();
        assert_eq!(opt.steps(), k);
        let mut p: Vec<f32> = x[r].iter().map(|&b| f32::from_bits(b)).collect();
        let reports = run_steps(&mut c, &pb, &mut opt, &mut p, total - k, BATCH).unwrap();
        (reports, bits(&p), opt.export_state(), opt.frozen_at())
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// The property of the module docs for one configuration whose rule
/// decides within `probe_len` steps (below its `max_step`); returns the
/// freeze step.
fn every_step_resumes_exactly(cfg: Config, window: u64, probe_len: u64) -> u64 {
    let freeze = cfg.freeze;
    // A first look at where this run freezes, then a run a window past it.
    let probe = straight(cfg, probe_len + 1).frozen_at.unwrap();
    // The measure decided, not the bound: the snapshot carried across a
    // resume is what the decision depends on.
    assert!(
        probe < probe_len && probe >= 3 * window,
        "{freeze:?} froze at {probe}: not a measured decision"
    );
    let total = probe + window + 2;
    eprintln!("{freeze:?}: froze at {probe}, resumed from every k in 0..={total}");
    let s = straight(cfg, total);
    assert_eq!(s.frozen_at, Some(probe));
    for k in 0..=total {
        let state: Vec<Vec<u8>> = s.state.iter().map(|r| r[k as usize].clone()).collect();
        let x: Vec<Vec<u32>> = s.x.iter().map(|r| r[k as usize].clone()).collect();
        for (r, (reports, p, end, frozen)) in
            resume(cfg, k, total, &state, &x).into_iter().enumerate()
        {
            assert_eq!(frozen, s.frozen_at, "{freeze:?}: resumed at {k}, rank {r}");
            for (got, want) in reports.iter().zip(&s.reports[r][k as usize..]) {
                assert_eq!(got, want, "{freeze:?}: resumed at {k}, rank {r}");
            }
            assert_eq!(
                p, s.x[r][total as usize],
                "{freeze:?}: resumed at {k}, rank {r}"
            );
            assert_eq!(
                end, s.state[r][total as usize],
                "{freeze:?}: resumed at {k}, rank {r}"
            );
        }
    }
    probe
}

#[test]
fn auto_freeze_resumes_exactly_from_every_warmup_step() {
    let rule = AutoFreeze::default()
        .with_window(5)
        .with_threshold(0.08)
        .with_min_step(10)
        .with_max_step(200);
    every_step_resumes_exactly(cli_like(FreezePolicy::Auto(rule)), 5, 200);
}

#[test]
fn share_freeze_resumes_exactly_from_every_warmup_step() {
    // The library's share rule, capped as the CLI caps it for a 600-step run.
    let rule = AutoFreeze::share().with_max_step(150);
    every_step_resumes_exactly(
        cli_like(FreezePolicy::Share(rule)),
        rule.window,
        rule.max_step,
    );
}

/// The library's default rule as it is (uncapped: `max_step` 10 000), in
/// the CLI's configuration and in `Config::default()` itself (no bias
/// correction, plain momentum, lr 1e-3): exact from every step of the
/// warm-up and a window past the freeze.
#[test]
fn the_default_freeze_resumes_exactly_from_every_warmup_step() {
    let share = AutoFreeze::share();
    for cfg in [cli_like_default(), Config::default()] {
        assert_eq!(cfg.freeze, FreezePolicy::Share(share));
        let at = every_step_resumes_exactly(cfg, share.window, 150);
        assert!(at >= share.min_step, "{at}");
    }
}

/// `needle` occurs exactly once in `hay`.
fn once(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).filter(|w| *w == needle).count() == 1
}

/// A freeze block's policy as the record format writes it (`record.rs`:
/// kind u8, then window, threshold bits, `min_step`, `max_step` as u64).
fn policy_bytes(kind: u8, a: AutoFreeze) -> Vec<u8> {
    let mut b = vec![kind];
    for x in [a.window, a.threshold.to_bits(), a.min_step, a.max_step] {
        b.extend_from_slice(&x.to_le_bytes());
    }
    b
}

/// A record written under the former default (`FreezePolicy::Auto` with
/// `AutoFreeze::default()`, what `Config::default()` was before the share
/// rule) carries its rule in its freeze block, so the format's rule
/// applies: the new default refuses it with a typed error naming that
/// rule, changing nothing, and an optimizer built with the former default
/// stated explicitly imports it and continues bit for bit — mid-warm-up
/// (its snapshot in the record) and past its freeze.
#[test]
fn a_record_of_the_former_default_is_refused_by_the_new_one_and_imports_under_auto() {
    let old = Config::default().with_freeze(FreezePolicy::Auto(AutoFreeze::default()));
    let new = Config::default();
    // Where it freezes (the measure, every 25 steps from `min_step` 50),
    // then a run a few steps past it.
    // (350 on this problem: without bias correction the raw `v` grows like
    // `t` for ~1000 steps, the `v̂` rule's blind spot, `src/freeze.rs`.)
    let frozen = straight(old, 601).frozen_at.unwrap();
    assert!((50..600).contains(&frozen), "{frozen}");
    let (cut_early, total) = (30u64, frozen + 5);
    let s = straight(old, total);
    assert_eq!(s.frozen_at, Some(frozen));
    let new_record = straight(new, 1).state[0][1].clone();
    assert!(once(&new_record, &policy_bytes(3, AutoFreeze::share())));
    let d = problem().params();
    for k in [cut_early, frozen, frozen + 3] {
        for r in 0..RANKS {
            let record = &s.state[r][k as usize];
            assert!(
                once(record, &policy_bytes(2, AutoFreeze::default())),
                "k={k}"
            );
            let mut o = OneBitAdam::with_groups(&groups(d), new).unwrap();
            let before = o.export_state();
            match o.import_state(record) {
                Err(StateError::Shape(m)) => {
                    assert!(m.starts_with("freeze policy"), "{m}");
                    assert!(
                        m.contains("FreezePolicy::Auto(AutoFreeze::default())"),
                        "{m}"
                    );
                }
                other => panic!("k={k}: {other:?}"),
            }
            assert_eq!(
                o.export_state(),
                before,
                "k={k}: changed by a refused import"
            );
        }
        let state: Vec<Vec<u8>> = s.state.iter().map(|r| r[k as usize].clone()).collect();
        let x: Vec<Vec<u32>> = s.x.iter().map(|r| r[k as usize].clone()).collect();
        for (r, (reports, p, end, f)) in resume(old, k, total, &state, &x).into_iter().enumerate() {
            assert_eq!(f, Some(frozen), "k={k}, rank {r}");
            assert_eq!(reports[..], s.reports[r][k as usize..], "k={k}, rank {r}");
            assert_eq!(p, s.x[r][total as usize], "k={k}, rank {r}");
            assert_eq!(end, s.state[r][total as usize], "k={k}, rank {r}");
        }
    }
}

/// The control: the record's `v̂` snapshot scaled by 2 (its CRC redone)
/// still imports, and the next measure reads another change: the snapshot
/// the record carries is what the continued run decides on.
#[test]
fn a_changed_snapshot_changes_the_measure() {
    let rule = AutoFreeze::share().with_max_step(150);
    let cfg = cli_like(FreezePolicy::Share(rule));
    let d = problem().params();
    // Step 12: the snapshot of step 10 is in the record, step 15 measures.
    let s = straight(cfg, 16);
    // Each rank's record with its snapshot scaled by 2 and a fresh CRC.
    let scaled_record = |record: &[u8]| {
        let mut o = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        o.import_state(record).unwrap();
        let n = o.memory().freeze_snapshot / 4;
        assert_eq!(n, d - 50, "the snapshot covers the 1-bit groups");
        // Layout tail: snapshot (f32×n), then m, v (f32×d each), the zero
        // mask, the gradient sum (f32×d) and the CRC.
        let tail = 12 * d + d.div_ceil(8) + 4;
        let at = record.len() - tail - 4 * n;
        let mut bad = record[..record.len() - 4].to_vec();
        for w in bad[at..at + 4 * n].chunks_exact_mut(4) {
            let v = f32::from_le_bytes([w[0], w[1], w[2], w[3]]) * 2.0;
            w.copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32fast::hash(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        bad
    };
    let changes = LocalComm::run(RANKS, |mut c| {
        let pb = problem();
        let r = c.rank();
        let mut p: Vec<f32> = s.x[r][12].iter().map(|&b| f32::from_bits(b)).collect();
        let mut q = p.clone();
        let mut good = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        good.import_state(&s.state[r][12]).unwrap();
        let mut scaled = OneBitAdam::with_groups(&groups(d), cfg).unwrap();
        scaled
            .import_state(&scaled_record(&s.state[r][12]))
            .unwrap();
        run_steps(&mut c, &pb, &mut good, &mut p, 3, BATCH).unwrap();
        run_steps(&mut c, &pb, &mut scaled, &mut q, 3, BATCH).unwrap();
        assert_eq!(good.steps(), 15);
        (good.freeze_change(), scaled.freeze_change())
    });
    for r in changes {
        let (good, scaled) = r.unwrap();
        assert_ne!(good.unwrap().to_bits(), scaled.unwrap().to_bits());
    }
}

fn lamb_groups(d: usize) -> Vec<LambGroup> {
    let a = d / 3;
    vec![
        LambGroup::new(a),
        LambGroup::new(a).with_weight_decay(Some(0.01)),
        LambGroup::new(d - 2 * a),
    ]
}

/// 1-bit LAMB's tracker: the same property.
#[test]
fn lamb_resumes_exactly_from_every_warmup_step() {
    for freeze in [
        FreezePolicy::Share(AutoFreeze::share().with_max_step(120)),
        FreezePolicy::Auto(
            AutoFreeze::default()
                .with_window(4)
                .with_threshold(0.05)
                .with_min_step(8)
                .with_max_step(120),
        ),
    ] {
        let cfg = LambConfig::default().with_lr(1e-2).with_freeze(freeze);
        let pb = problem();
        let d = pb.params();
        let step = |c: &mut dyn Communicator, o: &mut OneBitLamb, x: &mut [f32]| {
            let mut g = vec![0.0f32; d];
            let start = (o.steps() as usize * 16) % 200;
            pb.batch_loss_grad(c.rank(), start..start + 16, x, &mut g)
                .unwrap();
            o.step_with_grad(c, x, &g).unwrap()
        };
        let run = LocalComm::run(RANKS, |mut c| {
            let mut o = OneBitLamb::new(&lamb_groups(d), cfg).unwrap();
            let mut x = vec![0.01f32; d];
            let mut saved = vec![(bits(&x), o.export_state())];
            while o.frozen_at().is_none_or(|f| o.steps() < f + 6) {
                step(&mut c, &mut o, &mut x);
                saved.push((bits(&x), o.export_state()));
            }
            (saved, o.frozen_at().unwrap())
        });
        let run: Vec<_> = run.into_iter().map(|r| r.unwrap()).collect();
        let frozen = run[0].1;
        assert!((12..120).contains(&frozen), "{freeze:?}: froze at {frozen}");
        let total = run[0].0.len() - 1;
        for k in 0..=total {
            let out = LocalComm::run(RANKS, |mut c| {
                let (x0, state) = &run[c.rank()].0[k];
                let mut o = OneBitLamb::new(&lamb_groups(d), cfg).unwrap();
                o.import_state(state).unwrap();
                let mut x: Vec<f32> = x0.iter().map(|&b| f32::from_bits(b)).collect();
                for _ in k..total {
                    step(&mut c, &mut o, &mut x);
                }
                (bits(&x), o.export_state(), o.frozen_at())
            });
            for (r, o) in out.into_iter().enumerate() {
                let (x, state, f) = o.unwrap();
                assert_eq!(f, Some(frozen), "{freeze:?}: resumed at {k}, rank {r}");
                assert_eq!(
                    (&x, &state),
                    (&run[r].0[total].0, &run[r].0[total].1),
                    "{freeze:?}: resumed at {k}, rank {r}"
                );
            }
        }
    }
}
