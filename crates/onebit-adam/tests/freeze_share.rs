//! The share rule ([`FreezePolicy::Share`]) against closed forms: the
//! relative change of the raw `v` over a window, i.e. (for `t ≪ 1/(1−β₂)`)
//! the share of the accumulated `Σg²` from the last `window` steps.
//!
//! With a constant gradient per coordinate in each step, `v_t = β₂ v_{t−1}
//! + (1−β₂) g_t²`, so `(v_t − v_{t−w}) / v_t` is computed here in f64 from
//! the gradient sequence alone (the slow reference), and the decided step is
//! the first multiple of `w` (with a snapshot `w` earlier, not before
//! `min_step`) where its absolute value is below the threshold.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use onebit_adam::{AutoFreeze, Config, FreezePolicy, LambConfig, OneBitAdam};

const LEN: usize = 8;

fn config(rule: AutoFreeze) -> Config {
    Config::default()
        .with_lr(0.01)
        .with_bias_correction(true)
        .with_freeze(FreezePolicy::Share(rule))
}

/// One rank; gradient `grad(t)` at step `t`. The decided step and the
/// measure after every step (`freeze_change()`).
fn run(
    config: Config,
    steps: u64,
    grad: impl Fn(u64) -> f32 + Sync,
) -> (Option<u64>, Vec<Option<f64>>) {
    let out = LocalComm::run(1, |mut c| {
        let mut opt = OneBitAdam::new(LEN, config).unwrap();
        let mut x = vec![0.0f32; LEN];
        let mut changes = Vec::new();
        for t in 1..=steps {
            let g = vec![grad(t); LEN];
            opt.step_with_grad(&mut c, &mut x, &g).unwrap();
            changes.push(opt.freeze_change());
        }
        (opt.frozen_at(), changes)
    });
    out.into_iter().next().unwrap().unwrap()
}

/// Raw `v_t` (f64) for the gradient sequence `grad`.
fn raw_v(beta2: f64, t: u64, grad: &impl Fn(u64) -> f32) -> f64 {
    (1..=t).fold(0.0, |v, s| {
        let g = f64::from(grad(s));
        beta2 * v + (1.0 - beta2) * g * g
    })
}

/// `|v_t − v_{t−w}| / v_t` of the raw `v`.
fn change(beta2: f64, t: u64, w: u64, grad: &impl Fn(u64) -> f32) -> f64 {
    let (now, then) = (raw_v(beta2, t, grad), raw_v(beta2, t - w, grad));
    (now - then).abs() / now
}

/// The slow reference's decision under `rule`.
fn expected(beta2: f64, rule: AutoFreeze, grad: &impl Fn(u64) -> f32) -> u64 {
    (2..)
        .map(|k| k * rule.window)
        .find(|&t| {
            t >= rule.max_step
                || (t >= rule.min_step && change(beta2, t, rule.window, grad) < rule.threshold)
        })
        .unwrap()
}

/// Bursts as on the DeepFM harness trace (energies 0.13, 0.55 at steps
/// 2–3, 0.05–0.1 at 8–9, 0.02 to 13), then steady noise of energy 0.002.
fn bursty(t: u64) -> f32 {
    let e: f32 = match t {
        2 => 0.13,
        3 => 0.55,
        8 => 0.1,
        9 => 0.05,
        10..=13 => 0.02,
        _ => 0.002,
    };
    e.sqrt()
}

#[test]
fn bursts_then_steady_noise_freeze_once_the_burst_is_over() {
    let rule = AutoFreeze::share();
    let cfg = config(rule);
    let beta2 = f64::from(cfg.beta2);
    let want = expected(beta2, rule, &bursty);
    // The burst ends at step 13: the first measure after it that sees only
    // steady noise is step 20 (window 15..20), which reads ≈ 5·0.002/0.9.
    assert_eq!(want, 20);
    // Not a borderline case for f32 rounding.
    assert!((change(beta2, want, rule.window, &bursty) - rule.threshold).abs() > 1e-3);
    let (frozen, changes) = run(cfg, 40, bursty);
    assert_eq!(frozen, Some(want));
    for t in (2 * rule.window..=want).step_by(rule.window as usize) {
        let got = changes[t as usize - 1].unwrap();
        let exp = change(beta2, t, rule.window, &bursty);
        assert!((got - exp).abs() < 1e-5, "t={t}: {got} vs {exp}");
    }
    // The v̂ rule with the same window and threshold is still unsettled
    // there: the burst's 1/t drift.
    let auto = Config::default()
        .with_lr(0.01)
        .with_bias_correction(true)
        .with_freeze(FreezePolicy::Auto(rule));
    let (frozen_auto, _) = run(auto, 40, bursty);
    assert_eq!(frozen_auto, None);
}

#[test]
fn a_pure_burst_freezes_at_min_step_not_at_the_first_settled_measure() {
    // All the energy at step 1, nothing after: `v` only decays, the change
    // is `(1 − β₂^w)/β₂^w ≈ 0.005` from the first measure on (step 10), so
    // only `min_step` (20 by default) holds the warm-up open until step 20.
    let rule = AutoFreeze::share();
    assert_eq!(rule.min_step, 20);
    let grad = |t: u64| if t == 1 { 1.0 } else { 0.0 };
    let cfg = config(rule);
    let beta2 = f64::from(cfg.beta2);
    let want = expected(beta2, rule, &grad);
    assert_eq!(want, rule.min_step);
    let (frozen, changes) = run(cfg, 30, grad);
    assert_eq!(frozen, Some(want));
    // The measures before `min_step` already read settled: without the
    // bound the rule would have frozen at the first one.
    for t in [10, 15] {
        let got = changes[t - 1].unwrap();
        assert!(got < rule.threshold, "t={t}: {got}");
    }
    let early = rule.with_min_step(10);
    assert_eq!(expected(beta2, early, &grad), 10);
    assert_eq!(run(config(early), 30, grad).0, Some(10));
    let got = changes[want as usize - 1].unwrap();
    // `|v_t − v_{t−5}| / v_t = (1 − β₂⁵)/β₂⁵`.
    let closed = (1.0 - beta2.powi(5)) / beta2.powi(5);
    assert!((closed - change(beta2, want, 5, &grad)).abs() < 1e-12);
    assert!((got - closed).abs() < 1e-6, "{got} vs {closed}");
}

#[test]
fn a_stationary_gradient_reads_w_over_t_and_settles_at_w_over_threshold() {
    // The blind spot: constant energy reads ≈ w/t (slightly less: the
    // decay), so the rule settles near t = w/threshold = 100.
    let rule = AutoFreeze::share();
    let grad = |_| 0.5f32;
    let cfg = config(rule);
    let beta2 = f64::from(cfg.beta2);
    let want = expected(beta2, rule, &grad);
    assert!((95..=100).contains(&want), "{want}");
    assert!((change(beta2, want, rule.window, &grad) - rule.threshold).abs() > 1e-4);
    let (frozen, changes) = run(cfg, want + 10, grad);
    assert_eq!(frozen, Some(want));
    let before = changes[want as usize - 1 - rule.window as usize].unwrap();
    assert!(before >= rule.threshold, "{before}");
}

#[test]
fn max_step_still_decides_a_gradient_that_keeps_growing() {
    let rule = AutoFreeze::share().with_max_step(30);
    let grad = |t: u64| (t as f32).powi(2) * 1e-3;
    let (frozen, _) = run(config(rule), 40, grad);
    assert_eq!(frozen, Some(30));
}

#[test]
fn state_round_trips_mid_warmup_and_another_rule_is_refused() {
    let share = config(AutoFreeze::share());
    let auto = config(AutoFreeze::share()).with_freeze(FreezePolicy::Auto(AutoFreeze::share()));
    let out = LocalComm::run(1, |mut c| {
        let grad = |t: u64| vec![bursty(t); LEN];
        let mut straight = OneBitAdam::new(LEN, share).unwrap();
        let mut xs = vec![0.0f32; LEN];
        let mut resumed = OneBitAdam::new(LEN, share).unwrap();
        let mut xr = vec![0.0f32; LEN];
        // Step 7: the snapshot of step 5 is in the record and decides at 10.
        for t in 1..=7 {
            straight.step_with_grad(&mut c, &mut xs, &grad(t)).unwrap();
            resumed.step_with_grad(&mut c, &mut xr, &grad(t)).unwrap();
        }
        let saved = resumed.export_state();
        let mut fresh = OneBitAdam::new(LEN, share).unwrap();
        fresh.import_state(&saved).unwrap();
        assert_eq!(fresh.export_state(), saved);
        // The same numbers under the v̂ rule: refused, the optimizer unchanged.
        let mut other = OneBitAdam::new(LEN, auto).unwrap();
        let before = other.export_state();
        assert!(other.import_state(&saved).is_err());
        assert_eq!(other.export_state(), before);
        for t in 8..=30 {
            straight.step_with_grad(&mut c, &mut xs, &grad(t)).unwrap();
            fresh.step_with_grad(&mut c, &mut xr, &grad(t)).unwrap();
        }
        assert_eq!(fresh.frozen_at(), Some(20));
        assert_eq!(straight.frozen_at(), Some(20));
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&xs), bits(&xr));
        assert_eq!(straight.export_state(), fresh.export_state());
    });
    out.into_iter().next().unwrap().unwrap();
}

/// The share rule is the library's default (1-bit Adam and 1-bit LAMB):
/// `Config::default()` as it is (no bias correction, so `v̂` is the raw `v`
/// under either rule) decides the slow reference's step under
/// [`AutoFreeze::share`] on the burst trace, and the former default
/// (`Auto` with [`AutoFreeze::default`]: window 25, `min_step` 50) decides
/// the reference's step under its own parameters, a later one: a default
/// switched back fails here.
#[test]
fn the_default_policy_is_the_share_rule() {
    let d = Config::default();
    assert_eq!(d.freeze, FreezePolicy::Share(AutoFreeze::share()));
    assert_eq!(FreezePolicy::default(), d.freeze);
    assert_eq!(LambConfig::default().freeze, d.freeze);
    assert!(!d.bias_correction);
    let beta2 = f64::from(d.beta2);
    let want = expected(beta2, AutoFreeze::share(), &bursty);
    assert_eq!(want, 20);
    let (frozen, changes) = run(d, 40, bursty);
    assert_eq!(frozen, Some(want));
    let got = changes[want as usize - 1].unwrap();
    let exp = change(beta2, want, 5, &bursty);
    assert!((got - exp).abs() < 1e-5, "{got} vs {exp}");
    let old = AutoFreeze::default();
    let old_want = expected(beta2, old, &bursty);
    assert_eq!(old_want, 50);
    let (old_frozen, _) = run(d.with_freeze(FreezePolicy::Auto(old)), 60, bursty);
    assert_eq!(old_frozen, Some(old_want));
}
