//! What the automatic freeze's measure reads when the gradient's energy
//! comes in an early burst (the harness's DeepFM job at batch 1024:
//! `docs/ONEBIT_ADAM.md`, "The automatic freeze on the harness job").
//!
//! With β₂ = 0.999 the bias-corrected `v̂` is close to the running mean of
//! `g²` over the whole run so far for the first ~1/(1−β₂) steps, so after
//! a burst it decays like `1/t`, and the relative change over a window `w`
//! is `≈ w/(t−w)` whatever the later gradients do: the rule then cannot
//! settle before `t ≈ w·(1 + 1/threshold)`. A stationary gradient, by
//! contrast, settles at the first measure. Both against the closed form.

#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use basis_std::local::LocalComm;
use onebit_adam::{AutoFreeze, Config, FreezePolicy, OneBitAdam};

const LEN: usize = 8;

fn config(window: u64, threshold: f64, max_step: u64) -> Config {
    Config::default()
        .with_lr(0.01)
        .with_bias_correction(true)
        .with_freeze(FreezePolicy::Auto(
            AutoFreeze::default()
                .with_window(window)
                .with_threshold(threshold)
                .with_min_step(window)
                .with_max_step(max_step),
        ))
}

/// One rank; gradient `grad(t)` at step `t`. Returns the decided step and
/// the measure after every step (`freeze_change()`).
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

/// `‖v̂_t − v̂_{t−w}‖₁ / ‖v̂_t‖₁` for all the energy at step 1:
/// `v̂_t ∝ β₂^{t−1} / (1 − β₂^t)`.
fn burst_change(beta2: f64, t: u64, w: u64) -> f64 {
    let vhat = |t: u64| beta2.powi(t as i32 - 1) / (1.0 - beta2.powi(t as i32));
    (vhat(t - w) - vhat(t)).abs() / vhat(t)
}

#[test]
fn after_a_burst_the_measure_is_the_one_over_t_decay_and_settles_late() {
    let (w, thr) = (25, 0.05);
    let cfg = config(w, thr, 10_000);
    let beta2 = f64::from(cfg.beta2);
    // The slow reference: the first multiple of w (with a snapshot w
    // earlier) whose closed-form change is below the threshold.
    let expected = (2..)
        .map(|k| k * w)
        .find(|&t| burst_change(beta2, t, w) < thr)
        .unwrap();
    // Not a borderline case for f32 rounding.
    assert!((burst_change(beta2, expected, w) - thr).abs() > 1e-4);
    assert!(expected >= 500, "w/(t−w) < 0.05 needs t > 525: {expected}");
    let (frozen, changes) = run(cfg, expected + w, |t| if t == 1 { 1.0 } else { 0.0 });
    assert_eq!(frozen, Some(expected));
    // Every measure on the way equals the closed form (f32 `v`).
    for t in (2 * w..=expected).step_by(w as usize) {
        let got = changes[t as usize - 1].unwrap();
        let want = burst_change(beta2, t, w);
        assert!((got - want).abs() <= 1e-4 * want, "t {t}: {got} vs {want}");
        // ≈ w/(t−w) over a 200-step run (within 12 %, the rest is the
        // β₂ᵗ terms, which grow with t): the 1/t decay, not noise.
        let approx = w as f64 / (t - w) as f64;
        if t <= 200 {
            assert!(
                (want / approx - 1.0).abs() < 0.12,
                "t {t}: {want} vs {approx}"
            );
        }
    }
}

#[test]
fn a_stationary_gradient_settles_at_the_first_measure() {
    let (w, thr) = (25, 0.05);
    let (frozen, changes) = run(config(w, thr, 10_000), 3 * w, |_| 0.5);
    // v̂ = g² exactly (the bias correction undoes the zero start).
    assert_eq!(frozen, Some(2 * w));
    assert!(changes[2 * w as usize - 1].unwrap() < 1e-5);
}
