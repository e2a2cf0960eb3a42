//! The phases of one BASIS step, public so that an adapter crate can run the
//! per-bucket phase in parallel and get bit-identical results.
//!
//! A step is:
//! 1. **validate and merge** ([`Basis::plan`](crate::Basis::plan)): check
//!    lengths, rows and ranges; sum duplicate ids in a canonical order (sorted
//!    by id, ties by gradient bits); apply the non-finite policy and the
//!    optional L2 clip;
//! 2. **group** (also in `plan`): map each row to its bucket (in id order, so
//!    d-choice decisions do not depend on the batch order), sort rows by
//!    `(bucket, id)`, gather each row's scalar into the [`StepPlan`];
//! 3. **per-bucket kernel** ([`update_bucket`]): one [`BucketJob`] per touched
//!    bucket owns that bucket's `M`/`V`/`t_b` slices and its rows' slices of the
//!    plan; it updates them and writes each row's step into the plan. Jobs are
//!    disjoint, and within a job every reduction runs in row-id order, so any
//!    schedule (sequential or parallel) gives the same bits;
//! 4. **apply** ([`Basis::finish`](crate::Basis::finish)): store the new
//!    scalars (stochastic rounding draws bits from `(seed, step, id)`), and
//!    apply each row's step to the caller's table.
//!
//! [`Basis::run_plan`](crate::Basis::run_plan) hands phase 3 to a closure:
//! the sequential step passes `|p, jobs| jobs.into_iter().for_each(|j| update_bucket(p, j))`;
//! a parallel crate passes the same with a parallel iterator.

// The kernels walk several parallel slices (grads, moments, updates) by the
// same index; index loops read clearer than nested zips there.
#![allow(clippy::needless_range_loop)]

use alloc::vec::Vec;

use half::bf16;
use num_traits::Float;

pub use crate::batch::apply_row;
use crate::config::{Accumulate, Direction, Profile, ScalarLrSchedule, ScalarRule};
use crate::quant::{bf16_stochastic, random_bits};

/// Everything the per-bucket kernel needs besides the job itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelParams {
    /// Row dimension.
    pub dim: usize,
    /// Direction mode.
    pub direction: Direction,
    /// Learning rate η.
    pub lr: f32,
    /// β1.
    pub beta1: f32,
    /// β2.
    pub beta2: f32,
    /// Effective ε (raised for bf16 tables).
    pub eps: f32,
    /// Adam bias correction on.
    pub bias_correction: bool,
    /// Scalar learning (None: scalars stay as they are).
    pub scalar: Option<ScalarParams>,
    /// `RowScaled` accumulation.
    pub accumulate: Accumulate,
    /// `RowScaled` profile shape.
    pub profile: Profile,
    /// Seed of stochastic rounding.
    pub seed: u64,
    /// Index of this step (0-based), part of every random draw.
    pub step: u64,
}

/// How scalars learn inside the kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalarParams {
    /// η_s.
    pub lr: f32,
    /// `[s_min, s_max]`.
    pub clip: (f32, f32),
    /// Update rule.
    pub rule: ScalarRule,
    /// Frequency-aware η_s.
    pub schedule: ScalarLrSchedule,
}

/// One bucket's shared tables.
#[derive(Debug)]
pub enum BucketTables<'a> {
    /// f32 tables: `m` (absent in modes without a first moment) and `v`
    /// (the profile `C_b` in `RowScaled`), `dim` values each.
    F32 {
        /// First moment.
        m: Option<&'a mut [f32]>,
        /// Second moment or profile.
        v: &'a mut [f32],
    },
    /// bf16 tables, rounded stochastically when written.
    Bf16 {
        /// First moment.
        m: Option<&'a mut [bf16]>,
        /// Second moment or profile.
        v: &'a mut [bf16],
    },
}

/// One touched bucket and its rows: disjoint from every other job.
#[derive(Debug)]
pub struct BucketJob<'a> {
    /// Bucket index.
    pub bucket: u32,
    /// The bucket's tables.
    pub tables: BucketTables<'a>,
    /// The bucket's step count `t_b`.
    pub steps: &'a mut u32,
    /// Row ids, ascending.
    pub ids: &'a [u64],
    /// Sign `σ(i)` per row (±1; `Signed` mode reads them).
    pub signs: &'a [f32],
    /// Merged gradients, `ids.len() * dim`.
    pub grads: &'a [f32],
    /// Row scalars (`s_i`, or `G_i` in `RowScaled`), read and written.
    pub scalars: &'a mut [f32],
    /// Row update counts (empty unless the scalar lr is frequency-aware).
    pub counts: &'a mut [u16],
    /// Output: the amount to subtract from each row (`ids.len() * dim`).
    pub updates: &'a mut [f32],
}

/// A row group: `bucket` holds plan rows `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketGroup {
    /// Bucket index.
    pub bucket: u32,
    /// First plan row.
    pub start: usize,
    /// One past the last plan row.
    pub end: usize,
}

/// The batch after phases 1–2: merged, validated rows sorted by `(bucket, id)`.
#[derive(Debug, Clone, Default)]
pub struct StepPlan {
    pub(crate) dim: usize,
    pub(crate) step: u64,
    /// Slots (where rows are stored), plan order.
    pub(crate) ids: Vec<u64>,
    /// Keys (what rows are hashed by; the slots unless the step is keyed).
    pub(crate) keys: Vec<u64>,
    pub(crate) signs: Vec<f32>,
    pub(crate) grads: Vec<f32>,
    pub(crate) scalars: Vec<f32>,
    pub(crate) counts: Vec<u16>,
    pub(crate) updates: Vec<f32>,
    pub(crate) groups: Vec<BucketGroup>,
    /// Plan positions in id order (phase 4 walks the table in id order).
    pub(crate) by_id: Vec<u32>,
    /// `(bucket, key, merged position)` sort buffer.
    pub(crate) keyed: Vec<(u32, u64, u32)>,
    pub(crate) skipped: usize,
}

impl StepPlan {
    /// Bytes of the plan's buffers (kept between steps for reuse).
    pub(crate) fn capacity_bytes(&self) -> usize {
        use core::mem::size_of;
        (self.ids.capacity() + self.keys.capacity()) * 8
            + (self.signs.capacity()
                + self.grads.capacity()
                + self.scalars.capacity()
                + self.updates.capacity())
                * 4
            + self.counts.capacity() * 2
            + self.groups.capacity() * size_of::<BucketGroup>()
            + self.by_id.capacity() * 4
            + self.keyed.capacity() * size_of::<(u32, u64, u32)>()
    }

    /// Rows to update (distinct, finite).
    pub fn rows(&self) -> usize {
        self.ids.len()
    }

    /// Row ids (the slots rows are stored by) in plan order (by bucket,
    /// then key).
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// The keys rows were hashed by, parallel to [`ids`](Self::ids) (equal
    /// to them unless the step was keyed).
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// The bucket groups, ascending by bucket.
    pub fn groups(&self) -> &[BucketGroup] {
        &self.groups
    }

    /// Plan positions in row-id order: `ids()[id_order()[k]]` ascends with `k`.
    pub fn id_order(&self) -> &[u32] {
        &self.by_id
    }

    /// Rows skipped as non-finite.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// The step each row will take (valid after phase 3), `rows() * dim`.
    pub fn updates(&self) -> &[f32] {
        &self.updates
    }
}

/// Splits `slice` into the `dim`-sized pieces (`dim` = values per bucket)
/// of the (ascending) `buckets`.
fn bucket_pieces<'a, T>(
    mut slice: &'a mut [T],
    dim: usize,
    buckets: &[BucketGroup],
) -> Vec<&'a mut [T]> {
    let mut out = Vec::with_capacity(buckets.len());
    let mut offset = 0usize;
    for g in buckets {
        let start = g.bucket as usize * dim;
        let (_, rest) = core::mem::take(&mut slice).split_at_mut(start - offset);
        let (piece, rest) = rest.split_at_mut(dim);
        out.push(piece);
        slice = rest;
        offset = start + dim;
    }
    out
}

/// Splits `slice` (rows × `width`) into each group's rows.
fn row_pieces<'a, T>(
    mut slice: &'a mut [T],
    width: usize,
    groups: &[BucketGroup],
) -> Vec<&'a mut [T]> {
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let (piece, rest) = core::mem::take(&mut slice).split_at_mut((g.end - g.start) * width);
        out.push(piece);
        slice = rest;
    }
    out
}

/// The shared tables of all buckets: one flat array, bucket `b` at
/// `b·w..(b+1)·w` holding `[M_b | V_b]` (`w = 2d`) or `[V_b]` (`w = d`), so a
/// bucket's state is one contiguous region (one page walk, one prefetch run).
#[derive(Debug, Clone)]
pub(crate) enum Tables {
    F32 { data: Vec<f32>, with_m: bool },
    Bf16 { data: Vec<bf16>, with_m: bool },
}

impl Tables {
    /// Values per bucket.
    pub(crate) fn width(&self, dim: usize) -> usize {
        match self {
            Self::F32 { with_m, .. } | Self::Bf16 { with_m, .. } => {
                if *with_m {
                    2 * dim
                } else {
                    dim
                }
            }
        }
    }
}

/// Each group's bucket region, split into `(M_b, V_b)`.
#[allow(clippy::type_complexity)] // a pair of optional/plain slices, local
fn split_tables<'a, T>(
    data: &'a mut [T],
    dim: usize,
    with_m: bool,
    groups: &[BucketGroup],
) -> Vec<(Option<&'a mut [T]>, &'a mut [T])> {
    let w = if with_m { 2 * dim } else { dim };
    bucket_pieces(data, w, groups)
        .into_iter()
        .map(|piece| {
            if with_m {
                let (m, v) = piece.split_at_mut(dim);
                (Some(m), v)
            } else {
                (None, piece)
            }
        })
        .collect()
}

impl StepPlan {
    /// Phase 3's jobs: disjoint borrows of the touched buckets' state and rows.
    pub(crate) fn jobs<'a>(
        &'a mut self,
        tables: &'a mut Tables,
        steps: &'a mut [u32],
    ) -> Vec<BucketJob<'a>> {
        let dim = self.dim;
        let groups = &self.groups;
        let grads = &self.grads;
        let count_width = usize::from(!self.counts.is_empty());
        let mut scalars = row_pieces(&mut self.scalars, 1, groups).into_iter();
        let mut counts = row_pieces(&mut self.counts, count_width, groups).into_iter();
        let mut updates = row_pieces(&mut self.updates, dim, groups).into_iter();
        let mut step_refs = bucket_pieces(steps, 1, groups).into_iter();
        let mut table_parts: Vec<BucketTables<'a>> = match tables {
            Tables::F32 { data, with_m } => split_tables(data, dim, *with_m, groups)
                .into_iter()
                .map(|(m, v)| BucketTables::F32 { m, v })
                .collect(),
            Tables::Bf16 { data, with_m } => split_tables(data, dim, *with_m, groups)
                .into_iter()
                .map(|(m, v)| BucketTables::Bf16 { m, v })
                .collect(),
        };
        table_parts.reverse();
        let mut jobs = Vec::with_capacity(groups.len());
        for g in groups {
            let (Some(tables), Some(steps), Some(scalars), Some(counts), Some(updates)) = (
                table_parts.pop(),
                step_refs.next(),
                scalars.next(),
                counts.next(),
                updates.next(),
            ) else {
                break;
            };
            jobs.push(BucketJob {
                bucket: g.bucket,
                tables,
                steps: &mut steps[0],
                ids: &self.ids[g.start..g.end],
                signs: &self.signs[g.start..g.end],
                grads: &grads[g.start * dim..g.end * dim],
                scalars,
                counts,
                updates,
            });
        }
        jobs
    }
}

/// Adam's bias corrections `(1 − β1^t, 1 − β2^t)` (or `(1, 1)` when off).
/// ExactAdam uses the same function, so both round identically.
pub(crate) fn bias_corrections(beta1: f32, beta2: f32, t: u32, enabled: bool) -> (f32, f32) {
    if !enabled {
        return (1.0, 1.0);
    }
    let t = i32::try_from(t).unwrap_or(i32::MAX);
    let p1 = crate::math::powi(f64::from(beta1), t);
    let p2 = crate::math::powi(f64::from(beta2), t);
    ((1.0 - p1) as f32, (1.0 - p2) as f32)
}

/// Rows of a job, the mutable f32 view the inner kernels work on.
struct Rows<'r, 'a> {
    ids: &'r [u64],
    signs: &'r [f32],
    grads: &'r [f32],
    scalars: &'r mut [f32],
    counts: &'r mut [u16],
    updates: &'r mut [f32],
    _p: core::marker::PhantomData<&'a ()>,
}

/// Phase 3 for one bucket. Pure function of the job's inputs and `p`.
pub fn update_bucket(p: &KernelParams, job: BucketJob<'_>) {
    let BucketJob {
        bucket,
        tables,
        steps,
        ids,
        signs,
        grads,
        scalars,
        counts,
        updates,
    } = job;
    let mut rows = Rows {
        ids,
        signs,
        grads,
        scalars,
        counts,
        updates,
        _p: core::marker::PhantomData,
    };
    match tables {
        BucketTables::F32 { m, v } => kernel_f32(p, m, v, steps, &mut rows),
        BucketTables::Bf16 { m, v } => {
            let d = p.dim;
            let mut m32: Option<Vec<f32>> =
                m.as_deref().map(|m| m.iter().map(|x| x.to_f32()).collect());
            let mut v32: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
            kernel_f32(p, m32.as_deref_mut(), &mut v32, steps, &mut rows);
            let key = u64::from(bucket) << 20;
            if let (Some(m), Some(m32)) = (m, m32) {
                for (j, (dst, &x)) in m.iter_mut().zip(&m32).enumerate() {
                    *dst = bf16_stochastic(x, random_bits(p.seed ^ 0x4D4D, p.step, key + j as u64));
                }
            }
            for (j, (dst, &x)) in v.iter_mut().zip(&v32).enumerate() {
                *dst = bf16_stochastic(
                    x,
                    random_bits(p.seed ^ 0x5656, p.step, key + (d + j) as u64),
                );
            }
        }
    }
}

fn kernel_f32(
    p: &KernelParams,
    m: Option<&mut [f32]>,
    v: &mut [f32],
    t: &mut u32,
    rows: &mut Rows<'_, '_>,
) {
    match p.direction {
        Direction::RowScaled => row_scaled(p, v, t, rows),
        _ => adam_like(p, m, v, t, rows),
    }
}

/// Values of a row the fused kernels hold on the stack at once (d is split
/// into chunks of this size; d = 64 is one chunk).
const CHUNK: usize = 64;

/// `out_j = (m_j / bc1) / (√(v_j / bc2) + ε)`, the bias-corrected Adam
/// direction. Three passes so the divisions vectorize around the scalar
/// `sqrtss` calls; each element's arithmetic is unchanged (same bits).
fn adam_direction(out: &mut [f32], m: &[f32], v: &[f32], bc1: f32, bc2: f32, eps: f32) {
    for (o, &vj) in out.iter_mut().zip(v) {
        *o = vj / bc2;
    }
    for o in out.iter_mut() {
        *o = Float::sqrt(*o);
    }
    for (o, &mj) in out.iter_mut().zip(m) {
        *o = (mj / bc1) / (*o + eps);
    }
}

/// `out_j = √(v_j / bc2) + ε`, the denominator of `OwnGradient` (same bits
/// as computing it inline).
fn adam_denominator(out: &mut [f32], v: &[f32], bc2: f32, eps: f32) {
    for (o, &vj) in out.iter_mut().zip(v) {
        *o = vj / bc2;
    }
    for o in out.iter_mut() {
        *o = Float::sqrt(*o) + eps;
    }
}

/// Shared, Signed, OwnGradient.
fn adam_like(
    p: &KernelParams,
    mut m: Option<&mut [f32]>,
    v: &mut [f32],
    t: &mut u32,
    rows: &mut Rows<'_, '_>,
) {
    let d = p.dim;
    let n = rows.ids.len();
    if n == 0 {
        return;
    }
    let signed = p.direction == Direction::Signed;
    // Step 3: scalars move along the bucket direction before it moves.
    if let (Some(sp), Some(m)) = (p.scalar, m.as_deref()) {
        if *t > 0 {
            update_scalars(p, &sp, m, v, *t, signed, rows);
        } else {
            for c in rows.counts.iter_mut() {
                *c = c.saturating_add(1);
            }
        }
    }
    // Steps 2, 4 and 5, fused per chunk of dimensions: aggregate in row-id
    // order, move the EMAs, then write each row's step from the new moments.
    *t = t.saturating_add(1);
    let (bc1, bc2) = bias_corrections(p.beta1, p.beta2, *t, p.bias_correction);
    let inv_n = 1.0 / n as f32;
    let own = p.direction == Direction::OwnGradient || m.is_none();
    let mut sum_g = [0.0f32; CHUNK];
    let mut sum_q = [0.0f32; CHUNK];
    let mut dir = [0.0f32; CHUNK];
    let mut c0 = 0;
    while c0 < d {
        let w = CHUNK.min(d - c0);
        let (sum_g, sum_q, dir) = (&mut sum_g[..w], &mut sum_q[..w], &mut dir[..w]);
        for (k, g) in rows.grads.chunks_exact(d).enumerate() {
            let g = &g[c0..c0 + w];
            let sign = rows.signs[k];
            if k == 0 {
                for ((a, q), &x) in sum_g.iter_mut().zip(sum_q.iter_mut()).zip(g) {
                    *a = if signed { sign * x } else { x };
                    *q = x * x;
                }
            } else if signed {
                for ((a, q), &x) in sum_g.iter_mut().zip(sum_q.iter_mut()).zip(g) {
                    *a += sign * x;
                    *q += x * x;
                }
            } else {
                for ((a, q), &x) in sum_g.iter_mut().zip(sum_q.iter_mut()).zip(g) {
                    *a += x;
                    *q += x * x;
                }
            }
        }
        // The count sketch sums (unbiased for each row's own momentum); the
        // other modes average.
        let vc = &mut v[c0..c0 + w];
        for (vj, &q) in vc.iter_mut().zip(sum_q.iter()) {
            *vj = p.beta2 * *vj + (1.0 - p.beta2) * (q * inv_n);
        }
        if let Some(m) = m.as_deref_mut() {
            let mc = &mut m[c0..c0 + w];
            for (mj, &s) in mc.iter_mut().zip(sum_g.iter()) {
                let g_bar = if signed { s } else { s * inv_n };
                *mj = p.beta1 * *mj + (1.0 - p.beta1) * g_bar;
            }
        }
        if own {
            adam_denominator(dir, vc, bc2, p.eps);
        } else if let Some(m) = m.as_deref() {
            adam_direction(dir, &m[c0..c0 + w], vc, bc1, bc2, p.eps);
        }
        for (k, upd) in rows.updates.chunks_exact_mut(d).enumerate() {
            let s = rows.scalars[k];
            let upd = &mut upd[c0..c0 + w];
            if own {
                let g = &rows.grads[k * d + c0..k * d + c0 + w];
                for ((o, &x), &den) in upd.iter_mut().zip(g).zip(dir.iter()) {
                    *o = p.lr * (s * (x / den));
                }
            } else {
                // `s·(σ·u) = (σ·s)·u` exactly: σ = ±1 only flips signs.
                let s = if signed { rows.signs[k] * s } else { s };
                for (o, &u) in upd.iter_mut().zip(dir.iter()) {
                    *o = p.lr * (s * u);
                }
            }
        }
        c0 += w;
    }
}

/// Step 3 for one bucket (`t > 0`): every row's scalar from its gradient and
/// the bucket direction `u` before the moments move.
fn update_scalars(
    p: &KernelParams,
    sp: &ScalarParams,
    m: &[f32],
    v: &[f32],
    t: u32,
    signed: bool,
    rows: &mut Rows<'_, '_>,
) {
    let d = p.dim;
    let (bc1, bc2) = bias_corrections(p.beta1, p.beta2, t, p.bias_correction);
    // u_j = M̂_j / (√V̂_j + ε), scratch in the first row's update slot (every
    // slot is overwritten by the row step afterwards).
    let u = &mut rows.updates[..d];
    adam_direction(u, m, v, bc1, bc2, p.eps);
    let u: &[f32] = u;
    let mut u_norm = 0.0f32;
    for (k, g) in rows.grads.chunks_exact(d).enumerate() {
        // ⟨g,u⟩, ⟨g,g⟩ (and ⟨u,u⟩ with the first row) in one pass: separate
        // accumulators, each summed in index order as a plain dot would.
        let (mut gu, mut gg) = (0.0f32, 0.0f32);
        if k == 0 {
            let mut uu = 0.0f32;
            for (&x, &y) in g.iter().zip(u) {
                uu += y * y;
                gu += x * y;
                gg += x * x;
            }
            u_norm = Float::sqrt(uu);
        } else {
            for (&x, &y) in g.iter().zip(u) {
                gu += x * y;
                gg += x * x;
            }
        }
        let sign = if signed { rows.signs[k] } else { 1.0 };
        let dot_gu = sign * gu;
        let mut lr_s = sp.lr;
        if let Some(c) = rows.counts.get_mut(k) {
            *c = c.saturating_add(1);
            if let ScalarLrSchedule::InverseFrequency { power } = sp.schedule {
                lr_s *= crate::math::powf(f32::from(*c), -power);
            }
        }
        let s = rows.scalars[k];
        let next = match sp.rule {
            ScalarRule::Hypergradient => s + lr_s * p.lr * dot_gu,
            ScalarRule::Normalized => {
                let g_norm = Float::sqrt(gg);
                let cos = if g_norm > 0.0 && u_norm > 0.0 {
                    dot_gu / (g_norm * u_norm)
                } else {
                    0.0
                };
                s * crate::math::exp(lr_s * cos)
            }
        };
        rows.scalars[k] = next.clamp(sp.clip.0, sp.clip.1);
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        s += x * y;
    }
    s
}

/// RowScaled: `G_i` per row, profile `C_b` per bucket.
fn row_scaled(p: &KernelParams, c: &mut [f32], t: &mut u32, rows: &mut Rows<'_, '_>) {
    let d = p.dim;
    let n = rows.ids.len();
    if n == 0 {
        return;
    }
    let inv_d = 1.0 / d as f32;
    for (k, g) in rows.grads.chunks_exact(d).enumerate() {
        let x = dot(g, g) * inv_d;
        let old = rows.scalars[k];
        rows.scalars[k] = match p.accumulate {
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
                // The row's updates including this one (the counter is
                // there with this rule; a job without one counts every
                // update as the row's first).
                let n = rows.counts.get(k).map_or(1, |&c| c.saturating_add(1));
                annealed_beta(u32::from(n), power) * old + x
            }
            Accumulate::EmaAnnealed { beta, power } => {
                if old == 0.0 {
                    x
                } else {
                    let n = rows.counts.get(k).map_or(1, |&c| c.saturating_add(1));
                    annealed_beta(u32::from(n), power).max(beta) * old + (1.0 - beta) * x
                }
            }
        };
        if let Some(cnt) = rows.counts.get_mut(k) {
            *cnt = cnt.saturating_add(1);
        }
    }
    // Σ_k g_kj² in row order, accumulated row by row into the first row's
    // update slot (overwritten by the row step below).
    let add = &mut rows.updates[..d];
    for (k, g) in rows.grads.chunks_exact(d).enumerate() {
        if k == 0 {
            for (a, &x) in add.iter_mut().zip(g) {
                *a = x * x;
            }
        } else {
            for (a, &x) in add.iter_mut().zip(g) {
                *a += x * x;
            }
        }
    }
    // β of a count-annealed profile, once per bucket (not per dimension).
    let bucket_beta = match p.accumulate {
        Accumulate::CountAnnealed { power } => annealed_beta(t.saturating_add(1), power),
        Accumulate::EmaAnnealed { beta, power } => {
            annealed_beta(t.saturating_add(1), power).max(beta)
        }
        _ => 0.0,
    };
    for (cj, &a) in c.iter_mut().zip(add.iter()) {
        *cj = match p.accumulate {
            Accumulate::Sum => *cj + a,
            Accumulate::Ema { beta } => beta * *cj + (1.0 - beta) * a,
            Accumulate::Decayed { beta } => beta * *cj + a,
            Accumulate::CountAnnealed { .. } => bucket_beta * *cj + a,
            Accumulate::EmaAnnealed { beta, .. } => bucket_beta * *cj + (1.0 - beta) * a,
        };
    }
    *t = t.saturating_add(1);
    // The profile factors f_j go into the first row's update slot; rows
    // 1.. read them there, then row 0 overwrites them in place.
    let (first, rest) = rows.updates.split_at_mut(d);
    profile_factors(first, c, &p.profile);
    let f: &[f32] = first;
    for (k, (upd, g)) in rest
        .chunks_exact_mut(d)
        .zip(rows.grads[d..].chunks_exact(d))
        .enumerate()
    {
        let big_g = rows.scalars[k + 1];
        for (o, &fj) in upd.iter_mut().zip(f) {
            *o = big_g * fj;
        }
        row_step(upd, g, p);
    }
    let big_g = rows.scalars[0];
    for o in first.iter_mut() {
        *o *= big_g;
    }
    row_step(first, &rows.grads[..d], p);
}

/// `f_j = (C_j / mean_{grp(j)} C)^power` per profile group (1 where a
/// group's profile is still 0). Power 1 computes `C_j·(1/mean)` exactly as
/// the one-profile kernel always has (same bits).
fn profile_factors(f: &mut [f32], c: &[f32], pr: &Profile) {
    if pr.power == 0.0 {
        f.fill(1.0);
        return;
    }
    let lead = pr.lead.min(c.len());
    let (f_lead, f_rest) = f.split_at_mut(lead);
    let (c_lead, c_rest) = c.split_at(lead);
    for (fg, cg) in [(f_lead, c_lead), (f_rest, c_rest)] {
        if cg.is_empty() {
            continue;
        }
        let mut c_sum = 0.0f32;
        for &x in cg {
            c_sum += x;
        }
        let c_mean = c_sum * (1.0 / cg.len() as f32);
        if c_mean > 0.0 {
            let inv_mean = 1.0 / c_mean;
            for (o, &cj) in fg.iter_mut().zip(cg) {
                *o = cj * inv_mean;
            }
            if pr.power != 1.0 {
                for o in fg.iter_mut() {
                    *o = crate::math::powf(*o, pr.power);
                }
            }
        } else {
            fg.fill(1.0);
        }
    }
}

/// `o_j ← η·g_j/(√o_j + ε)` (or `/√(o_j + ε²)`), `o` holding `V̂_ij`. Two
/// passes so the divisions vectorize around the scalar square roots.
fn row_step(o: &mut [f32], g: &[f32], p: &KernelParams) {
    if p.profile.eps_inside {
        let eps2 = p.eps * p.eps;
        for x in o.iter_mut() {
            *x = Float::sqrt(*x + eps2);
        }
    } else {
        for x in o.iter_mut() {
            *x = Float::sqrt(*x) + p.eps;
        }
    }
    for (x, &gj) in o.iter_mut().zip(g) {
        *x = p.lr * (gj / *x);
    }
}

/// `β_n = 1 − n^(−power)` of [`Accumulate::CountAnnealed`] for the `n`-th
/// update (`n ≥ 1`; 0 at the first, so `G = x` there).
fn annealed_beta(n: u32, power: f32) -> f32 {
    // n ≤ 65 535 for rows; a bucket's t_b beyond 2^24 rounds, harmlessly.
    1.0 - crate::math::powf(n as f32, -power)
}
