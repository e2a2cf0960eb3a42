//! A plain, single-threaded simulation of [`crate::ZeroOneAdam`] on `P`
//! ranks: the slow path the tests compare against bit for bit. Every rank's
//! parameters and moments are ordinary `Vec`s; the full-precision all-reduce
//! is a rank-order sum (under [`WarmupReduce::Bf16`] on a variance step,
//! element by element `bf16(Σ_r bf16(g_r) / P)`, the sum in `f32` from
//! `0.0` in rank order), the 1-bit one is
//! [`crate::reference::simulate_allreduce`]; the schedules are not
//! counters but the sets they describe, written out: `T_v` as "the next
//! multiple of the interval, `κ` times per interval", `T_u` in closed form
//! (`j`-th step after the freeze syncs iff `t mod min(H, 2^⌊(j−1)/s⌋) = 0`).

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use num_traits::Float;

use crate::optimizer::GroupSpec;
use crate::policy::{Policy, WarmupReduce};
use crate::reference::{ReferenceState, simulate_allreduce};
use crate::zero_one::{ZeroOneConfig, ZeroOneStage, clamped, preconditioned_caps};

/// `x` rounded to bfloat16 (to nearest, ties to even) and back, for a
/// finite `x` whose rounding stays finite (the simulation's gradients are
/// far from `f32::MAX`).
fn bf16(x: f32) -> f32 {
    let b = x.to_bits();
    f32::from_bits(b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
}

/// The state of all `P` simulated ranks.
#[derive(Debug, Clone)]
pub struct ZeroOneSim {
    config: ZeroOneConfig,
    groups: Vec<(Range<usize>, GroupSpec)>,
    /// Steps taken.
    pub steps: u64,
    /// `params[r]`: rank `r`'s parameters.
    pub params: Vec<Vec<f32>>,
    /// `m[r]`: rank `r`'s first moment.
    pub m: Vec<Vec<f32>>,
    /// `v[r]`: rank `r`'s second moment.
    pub v: Vec<Vec<f32>>,
    /// `anchor[r]`: rank `r`'s parameters at the last synchronisation.
    pub anchor: Vec<Vec<f32>>,
    /// Coordinates whose mean gradient was 0 at every variance step.
    pub mask: Vec<bool>,
    errors: Vec<ReferenceState>,
    lrs: f64,
    /// The variance steps `T_v` up to `var_freeze_step`.
    var_steps: Vec<u64>,
}

impl ZeroOneSim {
    /// `p ≥ 1` ranks starting from `x0`, with `config` (its `lr` unused:
    /// [`Self::step`] takes each step's) and `groups` laid out back to back.
    pub fn new(config: ZeroOneConfig, groups: &[GroupSpec], x0: &[f32], p: usize) -> Self {
        let mut start = 0;
        let mut gs = Vec::new();
        for &g in groups {
            gs.push((start..start + g.len, g));
            start += g.len;
        }
        let p = p.max(1);
        let n = x0.len();
        // T_v: κ steps at each spacing 1, 2, 4, …, each the next multiple
        // of the spacing after the previous variance step.
        let mut var_steps = Vec::new();
        let (mut prev, mut spacing) = (0u64, 1u64);
        'outer: loop {
            for _ in 0..config.var_update_scaler {
                let t = (prev / spacing + 1) * spacing;
                if t > config.var_freeze_step {
                    break 'outer;
                }
                var_steps.push(t);
                prev = t;
            }
            spacing *= 2;
        }
        Self {
            config,
            errors: gs
                .iter()
                .map(|(r, _)| ReferenceState::new(r.len(), p))
                .collect(),
            groups: gs,
            steps: 0,
            params: vec![x0.to_vec(); p],
            m: vec![vec![0.0; n]; p],
            v: vec![vec![0.0; n]; p],
            anchor: vec![vec![0.0; n]; p],
            mask: vec![true; n],
            lrs: 0.0,
            var_steps,
        }
    }

    /// The stage of step `t` (1-based) for the 1-bit groups.
    pub fn stage(&self, t: u64) -> ZeroOneStage {
        let c = &self.config;
        if t <= c.var_freeze_step {
            if self.var_steps.contains(&t) {
                ZeroOneStage::Variance
            } else {
                ZeroOneStage::OneBitGradient
            }
        } else {
            let j = t - c.var_freeze_step;
            let doublings = (j - 1) / c.local_step_scaler;
            let interval = if doublings >= 63 {
                c.local_step_clipper
            } else {
                c.local_step_clipper.min(1u64 << doublings)
            };
            if t.is_multiple_of(interval) {
                ZeroOneStage::Sync
            } else {
                ZeroOneStage::Local
            }
        }
    }

    /// One step of every rank with learning rate `lr`; `grads[r]` is rank
    /// `r`'s gradient.
    ///
    /// # Panics
    /// If `grads` does not hold one full-length gradient per rank (a
    /// test-support function: shapes are the caller's contract).
    #[allow(
        clippy::needless_range_loop,
        reason = "index loops over ranks and coordinates read like the module docs' formulas"
    )]
    pub fn step(&mut self, grads: &[Vec<f32>], lr: f32) {
        let p = self.params.len();
        assert!(grads.len() == p && grads.iter().all(|g| g.len() == self.mask.len()));
        let t = self.steps + 1;
        let stage = self.stage(t);
        let c = self.config;
        let pre = c.preconditioned;
        let (cap_g, cap_m) = preconditioned_caps(&c);
        let pf = p as f32;
        // Every group's reduce on a variance step; one rank reduces nothing.
        let half =
            stage == ZeroOneStage::Variance && c.variance_reduce == WarmupReduce::Bf16 && p > 1;
        for (gi, (range, spec)) in self.groups.clone().into_iter().enumerate() {
            let wd = spec.weight_decay.unwrap_or(c.weight_decay);
            let full = spec.policy == Policy::FullPrecision;
            if full || stage == ZeroOneStage::Variance {
                for i in range {
                    let gm = if half {
                        let mut sum = 0.0f32;
                        for r in 0..p {
                            sum += bf16(grads[r][i]);
                        }
                        bf16(sum / pf)
                    } else {
                        let mut sum = grads[0][i];
                        for r in 1..p {
                            sum += grads[r][i];
                        }
                        sum / pf
                    };
                    if !full {
                        self.mask[i] = self.mask[i] && gm == 0.0;
                    }
                    for r in 0..p {
                        self.v[r][i] = c.beta2 * self.v[r][i] + (1.0 - c.beta2) * gm * gm;
                        self.m[r][i] = c.beta1 * self.m[r][i] + (1.0 - c.beta1) * gm;
                        let d = Float::sqrt(self.v[r][i]) + c.eps;
                        let w = self.m[r][i] / d + wd * self.params[r][i];
                        self.params[r][i] -= lr * w;
                    }
                }
                continue;
            }
            if stage == ZeroOneStage::OneBitGradient {
                // Preconditioned: each rank sends clamp(g/d, ±G).
                let mut bufs: Vec<Vec<f32>> = (0..p)
                    .map(|r| {
                        range
                            .clone()
                            .map(|i| {
                                let d = Float::sqrt(self.v[r][i]) + c.eps;
                                if pre {
                                    (grads[r][i] / d).clamp(-cap_g, cap_g)
                                } else {
                                    grads[r][i]
                                }
                            })
                            .collect()
                    })
                    .collect();
                simulate_allreduce(&mut bufs, &mut self.errors[gi]);
                for r in 0..p {
                    for (k, i) in range.clone().enumerate() {
                        let d = Float::sqrt(self.v[r][i]) + c.eps;
                        let gh = if self.mask[i] {
                            0.0
                        } else if pre {
                            bufs[r][k] * d
                        } else {
                            bufs[r][k]
                        };
                        self.m[r][i] = c.beta1 * self.m[r][i] + (1.0 - c.beta1) * gh;
                        let w = clamped(self.m[r][i] / d, pre, cap_m) + wd * self.params[r][i];
                        self.params[r][i] -= lr * w;
                    }
                }
                continue;
            }
            // Local step (also the first half of a synchronisation).
            for r in 0..p {
                for i in range.clone() {
                    self.m[r][i] = c.beta1 * self.m[r][i] + (1.0 - c.beta1) * grads[r][i];
                    let d = Float::sqrt(self.v[r][i]) + c.eps;
                    let w = clamped(self.m[r][i] / d, pre, cap_m) + wd * self.params[r][i];
                    self.params[r][i] -= lr * w;
                }
            }
            if stage == ZeroOneStage::Sync {
                let lrs = (self.lrs + f64::from(lr)) as f32;
                let mut bufs = Vec::with_capacity(p);
                for r in 0..p {
                    let mut b = Vec::with_capacity(range.len());
                    for i in range.clone() {
                        let u = self.params[r][i] - self.anchor[r][i];
                        let d = Float::sqrt(self.v[r][i]) + c.eps;
                        b.push(if pre { u } else { u * d });
                    }
                    bufs.push(b);
                }
                simulate_allreduce(&mut bufs, &mut self.errors[gi]);
                for r in 0..p {
                    for (k, i) in range.clone().enumerate() {
                        let uh = if self.mask[i] { 0.0 } else { bufs[r][k] };
                        let d = Float::sqrt(self.v[r][i]) + c.eps;
                        if pre {
                            self.m[r][i] = -(uh * d / lrs);
                            self.params[r][i] = self.anchor[r][i] + uh;
                        } else {
                            self.m[r][i] = -(uh / lrs);
                            self.params[r][i] = self.anchor[r][i] + uh / d;
                        }
                        self.anchor[r][i] = self.params[r][i];
                    }
                }
            }
        }
        match stage {
            ZeroOneStage::Local => self.lrs += f64::from(lr),
            ZeroOneStage::Sync => self.lrs = 0.0,
            _ => {}
        }
        if t == c.var_freeze_step {
            self.anchor.clone_from(&self.params);
            for e in &mut self.errors {
                for w in e.worker.iter_mut().chain(e.server.iter_mut()) {
                    w.fill(0.0);
                }
            }
        }
        self.steps = t;
    }
}
