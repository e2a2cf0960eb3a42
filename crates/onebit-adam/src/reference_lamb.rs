//! A plain, single-threaded simulation of [`crate::OneBitLamb`] on `P`
//! ranks: the obviously-correct slow path the tests compare against bit for
//! bit. No communicator, no header, no scratch reuse: the mean gradient is
//! a rank-order sum divided by `P` (what every [`comm_traits::Communicator`]
//! of this workspace computes), the compressed all-reduce is
//! [`crate::reference::simulate_allreduce`], and every formula is an index
//! loop written the way DeepSpeed's `onebit/lamb.py` reads, clipping with
//! `if`s as it does (plus the exact-zero mask of [`crate::OneBitLamb`],
//! as a position table). Only a fixed freeze step (DeepSpeed's `freeze_step`).

use alloc::vec;
use alloc::vec::Vec;

use num_traits::Float;

use crate::lamb::{LambConfig, LambGroup};
use crate::reference::{ReferenceState, simulate_allreduce};

/// The simulated optimizer (every rank's copy is the same, except the
/// error buffers, which `errors` holds per rank).
#[derive(Debug, Clone)]
pub struct ReferenceLamb {
    config: LambConfig,
    freeze_step: u64,
    /// `(start, len, weight decay)` per group.
    groups: Vec<(usize, usize, f32)>,
    ranks: usize,
    /// Completed steps.
    pub step: u64,
    /// First moment.
    pub m: Vec<f32>,
    /// Second moment (frozen after the warm-up).
    pub v: Vec<f32>,
    /// Fresh second moment (copied from `v` at the first compressed step).
    pub v_fresh: Vec<f32>,
    /// Running average of the trust ratio, per group.
    pub coeff_avg: Vec<f64>,
    /// Last adaptation factor, per group.
    pub last_factor: Vec<f64>,
    /// `true` while the mean gradient was exactly 0 at every warm-up step.
    pub zero: Vec<bool>,
    /// Momentum scaling per group (empty before the first compressed step).
    pub scaling: Vec<f32>,
    /// Worker/server errors of all ranks (created at the first compressed step).
    pub errors: Option<ReferenceState>,
}

fn norm(x: &[f32]) -> f64 {
    let mut s = 0.0f64;
    for &v in x {
        s += f64::from(v) * f64::from(v);
    }
    Float::sqrt(s)
}

impl ReferenceLamb {
    /// The simulation of `ranks` ranks; `freeze_step` is the last warm-up
    /// step (the config's own freeze policy is not read).
    pub fn new(groups: &[LambGroup], config: LambConfig, freeze_step: u64, ranks: usize) -> Self {
        let mut start = 0;
        let mut gs = Vec::new();
        for g in groups {
            gs.push((start, g.len, g.weight_decay.unwrap_or(config.weight_decay)));
            start += g.len;
        }
        Self {
            config,
            freeze_step,
            ranks,
            step: 0,
            m: vec![0.0; start],
            v: vec![0.0; start],
            v_fresh: Vec::new(),
            zero: vec![true; start],
            coeff_avg: vec![0.0; gs.len()],
            last_factor: vec![1.0; gs.len()],
            scaling: Vec::new(),
            errors: None,
            groups: gs,
        }
    }

    /// One step: `grads[r]` is rank `r`'s gradient at `x` (the same `x` on
    /// every rank). Returns each group's coefficient.
    ///
    /// # Panics
    /// If `grads.len()` is not the rank count or a length is wrong
    /// (test support: shapes are the caller's contract).
    #[allow(
        clippy::needless_range_loop,
        reason = "index loops read like the paper's formulas; this is the slow reference"
    )]
    pub fn step(&mut self, x: &mut [f32], grads: &[Vec<f32>]) -> Vec<f64> {
        assert_eq!(grads.len(), self.ranks);
        let c = self.config;
        let (b1, b2, eps) = (c.beta1, c.beta2, c.eps);
        let n = x.len();
        self.step += 1;
        let mut coeffs = Vec::new();
        if self.step <= self.freeze_step {
            // Mean gradient: rank-order sum, then ÷P.
            let mut g = vec![0.0f32; n];
            for i in 0..n {
                let mut s = grads[0][i];
                for r in 1..self.ranks {
                    s += grads[r][i];
                }
                g[i] = s / self.ranks as f32;
            }
            for k in 0..self.groups.len() {
                let (start, len, wd) = self.groups[k];
                let mut update = vec![0.0f32; len];
                for j in 0..len {
                    let i = start + j;
                    if g[i] != 0.0 {
                        self.zero[i] = false;
                    }
                    self.m[i] = b1 * self.m[i] + (1.0 - b1) * g[i];
                    self.v[i] = b2 * self.v[i] + (1.0 - b2) * g[i] * g[i];
                    update[j] = self.m[i] / (Float::sqrt(self.v[i]) + eps);
                    if wd > 0.0 {
                        update[j] += wd * x[i];
                    }
                }
                let weight_norm = norm(&x[start..start + len]);
                let update_norm = norm(&update);
                let mut coeff = 1.0f64;
                if weight_norm != 0.0 && update_norm != 0.0 {
                    coeff = weight_norm / update_norm;
                    if coeff > c.max_coeff {
                        coeff = c.max_coeff;
                    }
                    if coeff < c.min_coeff {
                        coeff = c.min_coeff;
                    }
                }
                if coeff != 1.0 {
                    self.coeff_avg[k] =
                        c.coeff_beta * self.coeff_avg[k] + (1.0 - c.coeff_beta) * coeff;
                }
                let step = (f64::from(c.lr) * coeff) as f32;
                for j in 0..len {
                    x[start + j] -= step * update[j];
                }
                coeffs.push(coeff);
            }
            return coeffs;
        }
        if self.scaling.is_empty() {
            // The freeze: scaling coefficients from the momentum's RMS per group.
            let mut scales = Vec::new();
            for &(start, len, _) in &self.groups {
                scales.push(norm(&self.m[start..start + len]) / Float::sqrt(len as f64));
            }
            let mut united = 0.0f64;
            for &s in &scales {
                united += s;
            }
            united /= scales.len() as f64;
            for &s in &scales {
                self.scaling
                    .push(if s == 0.0 { 1.0 } else { (united / s) as f32 });
            }
            self.v_fresh = self.v.clone();
            let live = self.zero.iter().filter(|&&z| !z).count();
            self.errors = Some(ReferenceState::new(live, self.ranks));
        }
        // Where each live coordinate sits in the compressed buffer.
        let mut slot = vec![usize::MAX; n];
        let mut live = 0;
        for i in 0..n {
            if !self.zero[i] {
                slot[i] = live;
                live += 1;
            }
        }
        let m_last = self.m.clone();
        // Every rank's scaled local momentum, then the simulated all-reduce.
        let mut bufs = vec![vec![0.0f32; live]; self.ranks];
        for r in 0..self.ranks {
            for k in 0..self.groups.len() {
                let (start, len, _) = self.groups[k];
                for i in start..start + len {
                    if !self.zero[i] {
                        let local = b1 * self.m[i] + (1.0 - b1) * grads[r][i];
                        bufs[r][slot[i]] = local * self.scaling[k];
                    }
                }
            }
        }
        match self.errors.as_mut() {
            Some(e) => simulate_allreduce(&mut bufs, e),
            None => unreachable!("created above"),
        }
        for k in 0..self.groups.len() {
            let (start, len, wd) = self.groups[k];
            let mut prelim = vec![0.0f32; len];
            let mut update = vec![0.0f32; len];
            let mut factor = 0.0f32;
            let mut any_live = false;
            for j in 0..len {
                let i = start + j;
                if !self.zero[i] {
                    self.m[i] = bufs[0][slot[i]] / self.scaling[k];
                }
                let grad_reconstruct = (self.m[i] - m_last[i] * b1) / (1.0 - b1);
                self.v_fresh[i] =
                    b2 * self.v_fresh[i] + (1.0 - b2) * grad_reconstruct * grad_reconstruct;
                let denom = Float::sqrt(self.v[i]) + eps;
                prelim[j] = self.m[i] / denom;
                update[j] = if wd > 0.0 {
                    prelim[j] + wd * x[i]
                } else {
                    prelim[j]
                };
                let denom_real = Float::sqrt(self.v_fresh[i]) + eps;
                if !self.zero[i] && (!any_live || denom / denom_real > factor) {
                    factor = denom / denom_real;
                    any_live = true;
                }
            }
            let mut factor = if any_live { f64::from(factor) } else { 1.0 };
            if wd > 0.0 {
                let update_norm = norm(&update);
                let mut ratio = 1.0f64;
                if update_norm != 0.0 && norm(&prelim) / update_norm < 1.0 {
                    ratio = norm(&prelim) / update_norm;
                }
                factor = factor * ratio + (1.0 - ratio);
            }
            if factor > c.factor_max {
                factor = c.factor_max;
            }
            if factor < c.factor_min {
                factor = c.factor_min;
            }
            if factor > self.last_factor[k] * (1.0 + c.factor_threshold) {
                factor = self.last_factor[k] * (1.0 + c.factor_threshold);
            }
            if factor < self.last_factor[k] * (1.0 - c.factor_threshold) {
                factor = self.last_factor[k] * (1.0 - c.factor_threshold);
            }
            self.last_factor[k] = factor;
            let coeff = self.coeff_avg[k] * factor;
            let step = (f64::from(c.lr) * coeff) as f32;
            for j in 0..len {
                x[start + j] -= step * update[j];
            }
            coeffs.push(coeff);
        }
        coeffs
    }
}
