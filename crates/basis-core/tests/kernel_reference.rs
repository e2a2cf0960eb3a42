//! The fused per-bucket kernel against the original two-pass kernel (kept
//! here verbatim as the reference): both run through the public phases
//! (`plan`, `run_plan`, `finish`) on the same batches and must agree bit for
//! bit — tables, scalars, exported state — in every f32 mode, with d below
//! and above the kernel's chunk size.

mod common;

use balanced_hash::OneChoice;
use basis_core::kernel::{BucketJob, BucketTables, KernelParams, update_bucket};
use basis_core::{
    Accumulate, Basis, BasisConfig, DenseTable, Direction, RowIndex, RowScaleConfig,
    ScalarLrSchedule, ScalarRule, SparseOptimizer,
};
use common::Rng;
use num_traits::Float;

fn bias_corrections(beta1: f32, beta2: f32, t: u32, enabled: bool) -> (f32, f32) {
    if !enabled {
        return (1.0, 1.0);
    }
    let t = i32::try_from(t).unwrap_or(i32::MAX);
    let p1 = Float::powi(f64::from(beta1), t);
    let p2 = Float::powi(f64::from(beta2), t);
    ((1.0 - p1) as f32, (1.0 - p2) as f32)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        s += x * y;
    }
    s
}

/// The original kernel (f32 tables), element by element.
#[allow(clippy::needless_range_loop)]
fn reference_bucket(p: &KernelParams, job: BucketJob<'_>) {
    let BucketJob {
        tables,
        steps: t,
        signs,
        grads,
        scalars,
        counts,
        updates,
        ..
    } = job;
    let BucketTables::F32 { mut m, v } = tables else {
        panic!("reference covers f32 tables")
    };
    let d = p.dim;
    let n = scalars.len();
    if n == 0 {
        return;
    }
    if p.direction == Direction::RowScaled {
        let inv_d = 1.0 / d as f32;
        for k in 0..n {
            let x = dot(&grads[k * d..(k + 1) * d], &grads[k * d..(k + 1) * d]) * inv_d;
            let old = scalars[k];
            scalars[k] = match p.accumulate {
                Accumulate::Sum => old + x,
                Accumulate::Ema { beta } => {
                    if old == 0.0 {
                        x
                    } else {
                        beta * old + (1.0 - beta) * x
                    }
                }
                Accumulate::Decayed { beta } => beta * old + x,
                Accumulate::CountAnnealed { power } => {
                    let n = counts.get(k).map_or(1, |&c| c.saturating_add(1));
                    (1.0 - libm::powf(f32::from(n), -power)) * old + x
                }
                Accumulate::EmaAnnealed { beta, power } => {
                    if old == 0.0 {
                        x
                    } else {
                        let n = counts.get(k).map_or(1, |&c| c.saturating_add(1));
                        let beta_n = (1.0 - libm::powf(f32::from(n), -power)).max(beta);
                        beta_n * old + (1.0 - beta) * x
                    }
                }
                // The enum is non-exhaustive; a new rule needs a reference here.
                other => unreachable!("no reference for {other:?}"),
            };
            if let Some(cnt) = counts.get_mut(k) {
                *cnt = cnt.saturating_add(1);
            }
        }
        for j in 0..d {
            let mut add = grads[j] * grads[j];
            for k in 1..n {
                let g = grads[k * d + j];
                add += g * g;
            }
            v[j] = match p.accumulate {
                Accumulate::Sum => v[j] + add,
                Accumulate::Ema { beta } => beta * v[j] + (1.0 - beta) * add,
                Accumulate::Decayed { beta } => beta * v[j] + add,
                Accumulate::CountAnnealed { power } => {
                    let t = t.saturating_add(1) as f32;
                    (1.0 - libm::powf(t, -power)) * v[j] + add
                }
                Accumulate::EmaAnnealed { beta, power } => {
                    let t = t.saturating_add(1) as f32;
                    (1.0 - libm::powf(t, -power)).max(beta) * v[j] + (1.0 - beta) * add
                }
                other => unreachable!("no reference for {other:?}"),
            };
        }
        *t = t.saturating_add(1);
        let mut c_sum = 0.0f32;
        for &x in v.iter() {
            c_sum += x;
        }
        let c_mean = c_sum * inv_d;
        for k in 0..n {
            let big_g = scalars[k];
            for j in 0..d {
                let g = grads[k * d + j];
                updates[k * d + j] = if c_mean > 0.0 {
                    let v_hat = big_g * (v[j] * (1.0 / c_mean));
                    p.lr * (g / (Float::sqrt(v_hat) + p.eps))
                } else {
                    p.lr * (g / (Float::sqrt(big_g) + p.eps))
                };
            }
        }
        return;
    }
    let signed = p.direction == Direction::Signed;
    if let (Some(sp), Some(m)) = (p.scalar, m.as_deref()) {
        if *t > 0 {
            let (bc1, bc2) = bias_corrections(p.beta1, p.beta2, *t, p.bias_correction);
            let mut u = vec![0.0f32; d];
            for j in 0..d {
                u[j] = (m[j] / bc1) / (Float::sqrt(v[j] / bc2) + p.eps);
            }
            let u_norm = Float::sqrt(dot(&u, &u));
            for k in 0..n {
                let g = &grads[k * d..(k + 1) * d];
                let sign = if signed { signs[k] } else { 1.0 };
                let dot_gu = sign * dot(g, &u);
                let mut lr_s = sp.lr;
                if let Some(c) = counts.get_mut(k) {
                    *c = c.saturating_add(1);
                    if let ScalarLrSchedule::InverseFrequency { power } = sp.schedule {
                        lr_s *= libm::powf(f32::from(*c), -power);
                    }
                }
                let s = scalars[k];
                let next = match sp.rule {
                    ScalarRule::Hypergradient => s + lr_s * p.lr * dot_gu,
                    ScalarRule::Normalized => {
                        let g_norm = Float::sqrt(dot(g, g));
                        let cos = if g_norm > 0.0 && u_norm > 0.0 {
                            dot_gu / (g_norm * u_norm)
                        } else {
                            0.0
                        };
                        s * libm::expf(lr_s * cos)
                    }
                    other => unreachable!("no reference for {other:?}"),
                };
                scalars[k] = next.clamp(sp.clip.0, sp.clip.1);
            }
        } else {
            for c in counts.iter_mut() {
                *c = c.saturating_add(1);
            }
        }
    }
    let inv_n = 1.0 / n as f32;
    for j in 0..d {
        let g0 = grads[j];
        let mut sum_g = if signed { signs[0] * g0 } else { g0 };
        let mut sum_q = g0 * g0;
        for k in 1..n {
            let g = grads[k * d + j];
            sum_g += if signed { signs[k] * g } else { g };
            sum_q += g * g;
        }
        let g_bar = if signed { sum_g } else { sum_g * inv_n };
        let q_bar = sum_q * inv_n;
        if let Some(m) = m.as_deref_mut() {
            m[j] = p.beta1 * m[j] + (1.0 - p.beta1) * g_bar;
        }
        v[j] = p.beta2 * v[j] + (1.0 - p.beta2) * q_bar;
    }
    *t = t.saturating_add(1);
    let (bc1, bc2) = bias_corrections(p.beta1, p.beta2, *t, p.bias_correction);
    for k in 0..n {
        let s = scalars[k];
        let sign = signs[k];
        for j in 0..d {
            let g = grads[k * d + j];
            updates[k * d + j] = match (p.direction, m.as_deref()) {
                (Direction::OwnGradient, _) | (_, None) => {
                    p.lr * (s * (g / (Float::sqrt(v[j] / bc2) + p.eps)))
                }
                (Direction::Signed, Some(m)) => {
                    let u = (m[j] / bc1) / (Float::sqrt(v[j] / bc2) + p.eps);
                    p.lr * (s * (sign * u))
                }
                (_, Some(m)) => p.lr * (s * ((m[j] / bc1) / (Float::sqrt(v[j] / bc2) + p.eps))),
            };
        }
    }
}

fn configs(dim: usize, rows: u64) -> Vec<BasisConfig> {
    let base = BasisConfig::default()
        .with_dim(dim)
        .with_row_index(RowIndex::Dense { rows })
        .with_scalar_lr(0.3)
        .with_weight_decay(0.01);
    let mut out = Vec::new();
    for direction in [Direction::Shared, Direction::Signed, Direction::OwnGradient] {
        for rule in [ScalarRule::Normalized, ScalarRule::Hypergradient] {
            out.push(
                base.with_direction(direction)
                    .with_scalar_rule(rule)
                    .with_scalar_lr(if rule == ScalarRule::Hypergradient {
                        3e4
                    } else {
                        0.3
                    }),
            );
        }
        out.push(
            base.with_direction(direction)
                .with_scalar_lr_schedule(ScalarLrSchedule::InverseFrequency { power: 0.5 }),
        );
        out.push(base.with_direction(direction).with_scalar_lr(0.0));
    }
    for accumulate in [
        Accumulate::Sum,
        Accumulate::Ema { beta: 0.9 },
        Accumulate::Decayed { beta: 0.9 },
        Accumulate::CountAnnealed { power: 0.5 },
        Accumulate::EmaAnnealed {
            beta: 0.5,
            power: 1.0,
        },
    ] {
        out.push(
            base.with_direction(Direction::RowScaled)
                .with_scalar_lr(0.0)
                .with_row_scale(RowScaleConfig::default().with_accumulate(accumulate)),
        );
    }
    out
}

#[test]
fn fused_kernel_matches_the_original_bit_for_bit() {
    const ROWS: u64 = 40;
    for dim in [5usize, 64, 70] {
        for config in configs(dim, ROWS) {
            let bucketer = OneChoice::new(6, 11).unwrap();
            let mut fast = Basis::new(config, bucketer).unwrap();
            let mut slow = Basis::new(config, bucketer).unwrap();
            let mut rng = Rng(dim as u64 * 1000 + 7);
            let init: Vec<f32> = (0..ROWS as usize * dim)
                .map(|_| rng.normal() as f32)
                .collect();
            let (mut w_fast, mut w_slow) = (init.clone(), init.clone());
            for _ in 0..8 {
                let ids: Vec<u64> = (0..24).map(|_| rng.below(ROWS)).collect();
                let grads: Vec<f32> = (0..ids.len() * dim)
                    .map(|_| (rng.normal() * 0.1) as f32)
                    .collect();
                let mut t = DenseTable::new(&mut w_fast, dim).unwrap();
                let a = fast.step(&ids, &grads, &mut t).unwrap();
                let mut t = DenseTable::new(&mut w_slow, dim).unwrap();
                let mut plan = slow.plan(&ids, &grads, &mut t).unwrap();
                slow.run_plan(&mut plan, |p, jobs| {
                    jobs.into_iter().for_each(|j| reference_bucket(p, j))
                });
                let b = slow.finish(plan, &mut t);
                assert_eq!(a, b);
            }
            let bits = |w: &[f32]| w.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&w_fast), bits(&w_slow), "table, {config:?}");
            assert_eq!(
                fast.export_state(),
                slow.export_state(),
                "state, {config:?}"
            );
            // The rows really moved (the comparison is not vacuous).
            assert!(w_fast.iter().zip(&init).any(|(a, b)| a != b));
        }
    }
    // The public kernel entry point is the fused one.
    let _: fn(&KernelParams, BucketJob<'_>) = update_bucket;
}
