//! The BASIS optimizer: hashed shared state plus a per-row scalar.

use alloc::vec::Vec;
use core::mem::size_of;

use balanced_hash::{Bucketer, SignHash};
use half::bf16;

use crate::batch::{MergeRules, Merged, apply_row, clip_row, merge_with, resize_for_overwrite};
use crate::config::{
    Accumulate, BasisConfig, Direction, ScalarLrSchedule, ScalarStorage, TablePrecision,
};
use crate::counter::Counts;
use crate::error::try_filled;
use crate::error::{
    ConfigError, GrowError, RowStateError, RowStateUnsupported, StateError, StateField, StepError,
};
use crate::exec::{Executor, ROWS_PER_ITEM, Sequential, row_chunks};
use crate::kernel::{
    BucketGroup, BucketJob, KernelParams, ScalarParams, StepPlan, Tables, update_bucket,
};
use crate::optimizer::SparseOptimizer;
use crate::quant::{LogCode, random_bits};
use crate::report::{Diagnostics, HISTOGRAM_BINS, MemoryReport, StepReport};
use crate::row_move;
use crate::state::{Reader, Writer, kind};
use crate::store::{ScalarStore, Slots};
use crate::table::RowAccess;

/// Domain separator of the scalar store's stochastic rounding.
const SCALAR_DOMAIN: u64 = 0x5CA1_A55E_ED00_0002;
/// Domain of a compact row counter's increment bits.
const COUNTER_DOMAIN: u64 = 0x5CA1_A55E_ED00_0003;

/// The count-sketch sign `σ(id) ∈ {−1, +1}` BASIS uses under `seed`
/// ([`balanced_hash::SignHash`], independent of the bucket hash).
pub fn sign_of(seed: u64, id: u64) -> f32 {
    SignHash::new(seed).sign(id)
}

/// A copy of one bucket's state, for inspection and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketView {
    /// First moment (absent in modes without one).
    pub m: Option<Vec<f32>>,
    /// Second moment, or the `RowScaled` profile `C_b`.
    pub v: Vec<f32>,
    /// Step count `t_b`.
    pub steps: u32,
}

/// BASIS optimizer state over any [`Bucketer`].
///
/// Memory: `B·d` (or `2·B·d`) table values, `B` step counts, one scalar per row
/// that has been updated (or per row of a dense range), plus the bucketer's own.
///
/// ```
/// use basis_core::{Basis, BasisConfig, DChoice, DenseTable, RowIndex, SparseOptimizer};
///
/// // A learned-scalar mode over 2-choice balanced buckets.
/// let config = BasisConfig::shared(2).row_index(RowIndex::Dense { rows: 8 }).build()?;
/// let mut opt = Basis::new(config, DChoice::dense(8, 4, 2, 11)?)?;
/// let mut w = vec![1.0f32; 16];
/// let report = opt.step(&[3, 5], &[1.0, 1.0, -1.0, -1.0], &mut DenseTable::new(&mut w, 2)?)?;
/// assert_eq!(report.rows_updated, 2);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Basis<H: Bucketer> {
    config: BasisConfig,
    bucketer: H,
    tables: Tables,
    bucket_steps: Vec<u32>,
    scalars: ScalarStore,
    steps: u64,
    nonfinite: u64,
    scratch: Merged,
    spare: StepPlan,
    /// The dense row range when the scalars are frozen (not stored, so
    /// the scalar store does not track it), for row moves and removal.
    frozen_rows: Option<u64>,
}

fn needs_first_moment(c: &BasisConfig) -> bool {
    match c.direction {
        Direction::Shared | Direction::Signed => true,
        Direction::OwnGradient => c.scalar_learns(),
        Direction::RowScaled => false,
    }
}

impl<H: Bucketer> Basis<H> {
    /// A fresh optimizer: zero tables, every scalar 1 (`G_i = 0` in `RowScaled`).
    ///
    /// # Errors
    /// [`ConfigError`] from [`BasisConfig::validate`],
    /// [`ConfigError::NoBuckets`] when the bucketer has no bucket, or
    /// [`ConfigError::AllocationFailed`] when the bucket tables or the dense
    /// per-row state ([`RowIndex::Dense`](crate::RowIndex::Dense)) do not fit.
    pub fn new(config: BasisConfig, bucketer: H) -> Result<Self, ConfigError> {
        config.validate()?;
        let b = bucketer.buckets() as usize;
        if b == 0 {
            return Err(ConfigError::NoBuckets);
        }
        let with_m = needs_first_moment(&config);
        // Values per bucket in units of `dim` (M and V, or V alone); counted
        // in u64 so an absurd `dim` is an allocation error, not an overflow.
        let units = b as u64 * if with_m { 2 } else { 1 };
        let tables = match config.table_precision {
            TablePrecision::F32 => Tables::F32 {
                data: try_filled(units, config.dim, 0.0)?,
                with_m,
            },
            TablePrecision::Bf16 => Tables::Bf16 {
                data: try_filled(units, config.dim, bf16::from_f32(0.0))?,
                with_m,
            },
        };
        let row_scaled = config.direction == Direction::RowScaled;
        let (initial, code) = if row_scaled {
            let (lo, hi) = config.row_scale.log2_range;
            (0.0, LogCode::new(lo, hi, 0.0))
        } else {
            let (min, max) = config.scalar_clip;
            // The clip bounds themselves are codes, so a clipped scalar is exact.
            (1.0, LogCode::with_bounds(min, max, 1.0))
        };
        // A frequency-aware scalar rate, or a count-annealed `G_i`, needs
        // each row's update count.
        let counter = if row_scaled && config.row_scale.accumulate.counts_rows() {
            Some(config.row_scale.counter)
        } else if config.scalar_learns()
            && matches!(
                config.scalar_lr_schedule,
                ScalarLrSchedule::InverseFrequency { .. }
            )
        {
            Some(crate::counter::RowCounter::Exact)
        } else {
            None
        };
        // Frozen scalars (η_s = 0 outside RowScaled) are all 1: hold none.
        let stored = config.scalar_learns() || row_scaled;
        let index = if stored {
            config.row_index
        } else {
            crate::config::RowIndex::Sparse
        };
        let scalars = ScalarStore::new(index, config.scalar_storage, initial, code, counter)?;
        let frozen_rows = match config.row_index {
            crate::config::RowIndex::Dense { rows } if !stored => Some(rows),
            _ => None,
        };
        Ok(Self {
            frozen_rows,
            config,
            bucketer,
            tables,
            bucket_steps: try_filled(b as u64, 1, 0)?,
            scalars,
            steps: 0,
            nonfinite: 0,
            scratch: Default::default(),
            spare: StepPlan::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BasisConfig {
        &self.config
    }

    /// The bucketer.
    pub fn bucketer(&self) -> &H {
        &self.bucketer
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Row `id`'s scalar: `s_i` (1 when never updated), or `G_i` in `RowScaled`.
    pub fn scalar(&self, id: u64) -> f32 {
        self.scalars.get(id).0
    }

    /// A copy of bucket `b`'s state, or `None` when `b ≥ B`.
    pub fn bucket_view(&self, b: u32) -> Option<BucketView> {
        let d = self.config.dim;
        let steps = *self.bucket_steps.get(b as usize)?;
        let w = self.tables.width(d);
        let start = b as usize * w;
        let (m, v) = (start..start + w - d, start + w - d..start + w);
        Some(match &self.tables {
            Tables::F32 { data, with_m } => BucketView {
                m: with_m.then(|| data[m].to_vec()),
                v: data[v].to_vec(),
                steps,
            },
            Tables::Bf16 { data, with_m } => BucketView {
                m: with_m.then(|| data[m].iter().map(|x| x.to_f32()).collect()),
                v: data[v].iter().map(|x| x.to_f32()).collect(),
                steps,
            },
        })
    }

    /// The parameters phase 3 runs with, for `plan`.
    pub fn kernel_params(&self, plan: &StepPlan) -> KernelParams {
        let c = &self.config;
        KernelParams {
            dim: c.dim,
            direction: c.direction,
            lr: c.lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.effective_eps(),
            bias_correction: c.bias_correction,
            scalar: c.scalar_learns().then_some(ScalarParams {
                lr: c.scalar_lr,
                clip: c.scalar_clip,
                rule: c.scalar_rule,
                schedule: c.scalar_lr_schedule,
            }),
            accumulate: c.row_scale.accumulate,
            profile: c.row_scale.profile,
            seed: c.seed,
            step: plan.step,
        }
    }

    /// Phases 1–2: validate, merge duplicates, assign buckets, group rows and
    /// gather their scalars. Only the bucketer's remembered choices change
    /// (d-choice assigns rows on first sight, in id order).
    ///
    /// # Errors
    /// See [`SparseOptimizer::step`]; on error nothing changed.
    pub fn plan(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepPlan, StepError> {
        self.plan_with(&Sequential, ids, grads, table)
    }

    /// [`plan`](Self::plan) with its sorts and per-row work (summing
    /// duplicates, gathering rows into bucket order) on `exec`. The plan is
    /// bit-identical for every executor; bucket assignment and the table
    /// checks stay on the calling thread.
    ///
    /// # Errors
    /// See [`SparseOptimizer::step`]; on error nothing changed.
    pub fn plan_with<E: Executor>(
        &mut self,
        exec: &E,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepPlan, StepError> {
        self.plan_keyed_with(exec, None, ids, grads, table)
    }

    /// [`plan_with`](Self::plan_with) where `keys` (the `(slot, key)` pairs
    /// of [`crate::keys::slot_keys`]) give each slot the key it is hashed
    /// by; `None` hashes the slots themselves.
    fn plan_keyed_with<E: Executor>(
        &mut self,
        exec: &E,
        keys: Option<&[(u64, u64)]>,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepPlan, StepError> {
        let d = self.config.dim;
        let scalars = &self.scalars;
        let rules = MergeRules {
            dim: d,
            policy: self.config.nonfinite,
            clip: self.config.grad_clip,
            // The gather reads single-occurrence rows from the batch.
            materialize: false,
        };
        let merged = merge_with(exec, &mut self.scratch, ids, grads, rules, table, |id| {
            scalars.index.check(id)
        })?;
        let mut plan = core::mem::take(&mut self.spare);
        plan.keyed.clear();
        let buckets = self.bucket_steps.len();
        for (k, &slot) in merged.ids.iter().enumerate() {
            let key = keys.map_or(slot, |pairs| crate::keys::key_of(pairs, slot));
            plan.keyed.push((0, key, k as u32));
        }
        // A d-choice bucketer places rows on first sight in key order (the
        // merged rows are in slot order: the same order only when unkeyed).
        if keys.is_some() {
            exec.sort_by(&mut plan.keyed, |a, b| a.1.cmp(&b.1));
        }
        for entry in plan.keyed.iter_mut() {
            let bucket = self.bucketer.assign(entry.1);
            if bucket as usize >= buckets {
                let id = entry.1;
                self.scratch = merged;
                self.spare = plan;
                return Err(StepError::BucketOutOfRange { id, bucket });
            }
            entry.0 = bucket;
        }
        // Keys are distinct (slots are, and pair one-to-one with keys); the
        // order within a bucket is by key, so it does not depend on slots.
        exec.sort_by(&mut plan.keyed, |a, b| a.cmp(b));
        plan.dim = d;
        plan.step = self.steps;
        plan.skipped = merged.skipped;
        self.group(&mut plan, &merged.ids);
        self.gather(exec, &mut plan, &merged, grads);
        self.scratch = merged;
        Ok(plan)
    }

    /// Bucket groups, plan-order slots and keys, and the slot-order index
    /// from the sorted `(bucket, key, merged position)` triples; `slots` are
    /// the merged batch's slots.
    fn group(&self, plan: &mut StepPlan, slots: &[u64]) {
        let n = plan.keyed.len();
        plan.ids.clear();
        plan.keys.clear();
        plan.groups.clear();
        plan.by_id.clear();
        plan.by_id.resize(n, 0);
        for (pos, &(bucket, key, k)) in plan.keyed.iter().enumerate() {
            match plan.groups.last_mut() {
                Some(g) if g.bucket == bucket => g.end = pos + 1,
                _ => plan.groups.push(BucketGroup {
                    bucket,
                    start: pos,
                    end: pos + 1,
                }),
            }
            plan.by_id[k as usize] = pos as u32;
            plan.ids.push(slots[k as usize]);
            plan.keys.push(key);
        }
    }

    /// Each plan row's sign, merged gradient, scalar (and count), in plan
    /// order, on `exec`.
    fn gather<E: Executor>(&self, exec: &E, plan: &mut StepPlan, merged: &Merged, input: &[f32]) {
        let d = self.config.dim;
        let clip = self.config.grad_clip;
        let n = plan.keyed.len();
        let with_counts = self.scalars.counts.is_some();
        let sigma = SignHash::new(self.config.seed);
        let scalars = &self.scalars;
        // Every value is written below (`updates` zeroed per item).
        resize_for_overwrite(&mut plan.signs, n, 0.0);
        resize_for_overwrite(&mut plan.grads, n * d, 0.0);
        resize_for_overwrite(&mut plan.scalars, n, 0.0);
        resize_for_overwrite(&mut plan.counts, if with_counts { n } else { 0 }, 0);
        resize_for_overwrite(&mut plan.updates, n * d, 0.0);
        let items: Vec<_> = plan
            .keyed
            .chunks(ROWS_PER_ITEM)
            .zip(row_chunks(&mut plan.signs, n, 1))
            .zip(row_chunks(&mut plan.grads, n, d))
            .zip(row_chunks(&mut plan.scalars, n, 1))
            .zip(row_chunks(&mut plan.counts, n, usize::from(with_counts)))
            .zip(row_chunks(&mut plan.updates, n, d))
            .collect();
        exec.for_each(
            items,
            |(((((keys, signs), grads), ss), counts), updates)| {
                updates.fill(0.0);
                for (j, &(_, key, k)) in keys.iter().enumerate() {
                    let k = k as usize;
                    signs[j] = sigma.sign(key);
                    let (src, unclipped) = merged.row(k, input, d);
                    let dst = &mut grads[j * d..(j + 1) * d];
                    dst.copy_from_slice(src);
                    if unclipped {
                        clip_row(dst, clip);
                    }
                    let (s, c) = scalars.get(merged.ids[k]);
                    ss[j] = s;
                    if let Some(count) = counts.get_mut(j) {
                        *count = c;
                    }
                }
            },
        );
    }

    /// Phase 3: hands the disjoint per-bucket jobs of `plan` to `run`, which
    /// must call [`update_bucket`] on each exactly once (in any order, on any
    /// thread).
    pub fn run_plan<F>(&mut self, plan: &mut StepPlan, run: F)
    where
        F: FnOnce(&KernelParams, Vec<BucketJob<'_>>),
    {
        let params = self.kernel_params(plan);
        let jobs = plan.jobs(&mut self.tables, &mut self.bucket_steps);
        run(&params, jobs);
    }

    /// Phase 4: store the new scalars and apply each row's step to `table`.
    ///
    /// `table` must be the table `plan` was made with (its rows were checked
    /// then); a row that vanished since is skipped.
    pub fn finish(&mut self, plan: StepPlan, table: &mut dyn RowAccess) -> StepReport {
        let d = self.config.dim;
        let store_scalars =
            self.config.scalar_learns() || self.config.direction == Direction::RowScaled;
        let decay = self.config.lr * self.config.weight_decay;
        let rounds = self.scalars.rounds();
        let counter_rounds = self.scalars.counter_rounds();
        // Id order: the caller's table and the row state are walked forward.
        for &pos in &plan.by_id {
            let k = pos as usize;
            let id = plan.ids[k];
            if store_scalars {
                let count = plan.counts.get(k).copied().unwrap_or(0);
                let bits = if rounds {
                    random_bits(self.config.seed ^ SCALAR_DOMAIN, plan.step, plan.keys[k])
                } else {
                    0
                };
                // A compact counter's increments: their own stream, apart
                // from the scalar's rounding bits.
                let count_bits = if counter_rounds {
                    random_bits(self.config.seed ^ COUNTER_DOMAIN, plan.step, plan.keys[k])
                } else {
                    0
                };
                self.scalars
                    .set(id, plan.scalars[k], count, bits, count_bits);
            }
            if let Some(row) = table.row_mut(id) {
                apply_row(row, &plan.updates[k * d..(k + 1) * d], decay);
            }
        }
        self.steps += 1;
        self.nonfinite += plan.skipped as u64;
        let report = StepReport {
            rows_updated: plan.ids.len(),
            rows_skipped_nonfinite: plan.skipped,
            buckets_touched: plan.groups.len(),
        };
        self.spare = plan;
        report
    }

    /// Exact bytes of state held, broken down.
    pub fn memory(&self) -> MemoryReport {
        let shared_tables = match &self.tables {
            Tables::F32 { data, .. } => data.capacity() * size_of::<f32>(),
            Tables::Bf16 { data, .. } => data.capacity() * size_of::<bf16>(),
        };
        MemoryReport {
            total_bytes: 0,
            shared_tables,
            step_counts: self.bucket_steps.capacity() * size_of::<u32>(),
            code_tables: self.scalars.code_bytes(),
            scalars: self.scalars.value_bytes(),
            row_counters: self.scalars.count_bytes(),
            row_index: self.scalars.index.bytes(),
            bucket_map: self.bucketer.memory_bytes(),
            scratch: self.scratch.capacity_bytes() + self.spare.capacity_bytes(),
            rows_with_state: self.scalars.len() as u64,
        }
        .finish()
    }

    /// `memory().total_bytes`.
    pub fn memory_bytes(&self) -> usize {
        self.memory().total_bytes
    }

    /// The numbers to watch (O(rows with state + B)).
    pub fn diagnostics(&self) -> Diagnostics {
        let c = &self.config;
        let (lo, hi) = if c.direction == Direction::RowScaled {
            c.row_scale.log2_range
        } else {
            (
                crate::math::log2(c.scalar_clip.0),
                crate::math::log2(c.scalar_clip.1),
            )
        };
        let mut diag = Diagnostics {
            bucket_loads: alloc::vec![0; self.bucket_steps.len()],
            bucket_updates: self.bucket_steps.clone(),
            nonfinite_rows: self.nonfinite,
            steps: self.steps,
            ..Diagnostics::default()
        };
        for (i, e) in diag.histogram_edges.iter_mut().enumerate() {
            *e = crate::math::exp2(lo + (hi - lo) * i as f32 / HISTOGRAM_BINS as f32);
        }
        // Bounds as stored: a compact format may round a bound by one step.
        let tol = match c.scalar_storage {
            ScalarStorage::F32 => 1e-6,
            ScalarStorage::Bf16 => 1.0 / 128.0,
            ScalarStorage::LogU8 => 1e-5,
        };
        let (mut at_min, mut at_max, mut sum) = (0u64, 0u64, 0.0f64);
        let learned = c.direction != Direction::RowScaled;
        self.scalars.for_each(|id, s| {
            diag.rows += 1;
            sum += f64::from(s);
            if learned {
                at_min += u64::from(s <= c.scalar_clip.0 * (1.0 + tol));
                at_max += u64::from(s >= c.scalar_clip.1 * (1.0 - tol));
            }
            let pos = if s > 0.0 {
                (crate::math::log2(s) - lo) / (hi - lo)
            } else {
                0.0
            };
            let bin =
                ((pos * HISTOGRAM_BINS as f32) as isize).clamp(0, HISTOGRAM_BINS as isize - 1);
            diag.scalar_histogram[bin as usize] += 1;
            let b = self.bucketer.bucket(id) as usize;
            if let Some(load) = diag.bucket_loads.get_mut(b) {
                *load += 1;
            }
        });
        if diag.rows > 0 {
            let n = diag.rows as f64;
            diag.fraction_at_min = at_min as f64 / n;
            diag.fraction_at_max = at_max as f64 / n;
            diag.scalar_mean = sum / n;
        }
        diag
    }

    /// Everything that gives the exported state its meaning, one `u64` per
    /// setting, in export order. An importer whose value differs would read
    /// the state wrongly: the bucket of every row hangs on the bucketer's
    /// kind, choices and seed; signs and rounding on `seed`; the moments on
    /// β1/β2 and the accumulation rule; 1-byte codes on the clip or log₂
    /// range; what the row scalars are on whether they learn. Plain
    /// hyper-parameters (η, η_s, the scalar rule, ε, weight decay, clipping)
    /// are left out on purpose: the state means the same under new ones, and
    /// a learning-rate schedule across a restart must keep working.
    fn fingerprint(&self) -> [(StateField, u64); FINGERPRINT_FIELDS] {
        let c = &self.config;
        let pair = |a: f32, b: f32| (u64::from(a.to_bits()) << 32) | u64::from(b.to_bits());
        let id = self.bucketer.identity();
        let rows = if self.scalars.index.is_dense() {
            self.scalars.index.dense_rows() as u64
        } else {
            u64::MAX
        };
        [
            (StateField::Dim, c.dim as u64),
            (StateField::Buckets, self.bucket_steps.len() as u64),
            (
                StateField::Direction,
                match c.direction {
                    Direction::Shared => 0,
                    Direction::Signed => 1,
                    Direction::OwnGradient => 2,
                    Direction::RowScaled => 3,
                },
            ),
            (StateField::ScalarStorage, c.scalar_storage.bytes() as u64),
            (StateField::TablePrecision, c.table_precision.bytes() as u64),
            (StateField::FirstMoment, u64::from(needs_first_moment(c))),
            (
                StateField::RowCounters,
                self.scalars.counts.as_ref().map_or(0, Counts::fingerprint),
            ),
            (StateField::Rows, rows),
            (StateField::Seed, c.seed),
            (StateField::Betas, pair(c.beta1, c.beta2)),
            (
                StateField::ScalarClip,
                pair(c.scalar_clip.0, c.scalar_clip.1),
            ),
            (StateField::LearnedScalars, u64::from(c.scalar_learns())),
            (
                StateField::Accumulate,
                match c.row_scale.accumulate {
                    Accumulate::Sum => 0,
                    Accumulate::Ema { beta } => (1 << 32) | u64::from(beta.to_bits()),
                    Accumulate::Decayed { beta } => (2 << 32) | u64::from(beta.to_bits()),
                    Accumulate::CountAnnealed { power } => (3 << 32) | u64::from(power.to_bits()),
                    // Both f32s, losslessly: β ∈ [0, 1) and power ≥ 0 have
                    // a clear sign bit, so bit 63 marks this rule apart
                    // from the tags 0–3 above.
                    Accumulate::EmaAnnealed { beta, power } => (1 << 63) | pair(beta, power),
                },
            ),
            (
                StateField::RowScaleRange,
                pair(c.row_scale.log2_range.0, c.row_scale.log2_range.1),
            ),
            (StateField::BucketerKind, u64::from(id.kind)),
            (StateField::BucketerChoices, u64::from(id.choices)),
            (StateField::BucketerSeed, id.seed),
        ]
    }
}

impl<H: Bucketer> Basis<H> {
    /// What a moved row's scalar (and count) mean.
    fn row_fingerprint(&self) -> [(StateField, u64); 8] {
        let all = self.fingerprint();
        let pick = [
            StateField::Dim,
            StateField::Direction,
            StateField::ScalarStorage,
            StateField::RowCounters,
            StateField::Seed,
            StateField::ScalarClip,
            StateField::LearnedScalars,
            StateField::RowScaleRange,
        ];
        pick.map(|f| all.iter().copied().find(|&(g, _)| g == f).unwrap_or((f, 0)))
    }

    /// What a moved bucket's moments mean.
    fn bucket_fingerprint(&self) -> [(StateField, u64); 7] {
        let all = self.fingerprint();
        let pick = [
            StateField::Dim,
            StateField::Direction,
            StateField::TablePrecision,
            StateField::FirstMoment,
            StateField::Seed,
            StateField::Betas,
            StateField::Accumulate,
        ];
        pick.map(|f| all.iter().copied().find(|&(g, _)| g == f).unwrap_or((f, 0)))
    }

    /// The index the rows' slots are checked against: the scalar store's,
    /// or the frozen scalars' dense range.
    fn row_slots(&self) -> Slots {
        match self.frozen_rows {
            Some(rows) => Slots::Dense { rows },
            None => match &self.scalars.index {
                Slots::Dense { rows } => Slots::Dense { rows: *rows },
                // Only the range check reads it: an empty sparse index.
                Slots::Sparse { .. } => Slots::new(crate::config::RowIndex::Sparse),
            },
        }
    }

    /// Rows move without their bucket choice: only a bucketer that holds
    /// no per-key state places them alike on the importer.
    fn check_movable(&self) -> Result<(), RowStateError> {
        if self.bucketer.has_state() {
            return Err(RowStateError::Unsupported(
                RowStateUnsupported::BucketerState,
            ));
        }
        Ok(())
    }

    /// Fails unless the buckets are distinct and in range.
    fn check_buckets(&self, buckets: &[u32]) -> Result<(), RowStateError> {
        let count = self.bucket_steps.len() as u32;
        if let Some(&bucket) = buckets.iter().find(|&&b| b >= count) {
            return Err(RowStateError::BucketOutOfRange {
                bucket,
                buckets: count,
            });
        }
        let wide: Vec<u64> = buckets.iter().map(|&b| u64::from(b)).collect();
        row_move::check_distinct(&wide)
    }
}

/// The first state format version whose BASIS fingerprint covers every
/// setting of [`Basis::fingerprint`].
const BASIS_MIN_VERSION: u16 = 2;

/// The first state format version that carries the bucketer's own state
/// ([`Bucketer::save_state`]) after the row scalars.
const BUCKETER_STATE_VERSION: u16 = 3;

/// Settings in a BASIS state fingerprint.
const FINGERPRINT_FIELDS: usize = 17;

impl<H: Bucketer> SparseOptimizer for Basis<H> {
    fn dim(&self) -> usize {
        self.config.dim
    }

    fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        let mut plan = self.plan(ids, grads, table)?;
        self.run_plan(&mut plan, |p, jobs| {
            jobs.into_iter().for_each(|j| update_bucket(p, j))
        });
        Ok(self.finish(plan, table))
    }

    /// The bucket, the count-sketch sign and the scalar's rounding bits come
    /// from the key; the scalar and the table row are the slot's. Within a
    /// bucket rows are taken in key order, so the step is the one `step`
    /// gives over a key-indexed table, whatever the slot numbering.
    fn step_keyed(
        &mut self,
        keys: &[u64],
        slots: &[u64],
        grads: &[f32],
        table: &mut dyn RowAccess,
    ) -> Result<StepReport, StepError> {
        let pairs = crate::keys::slot_keys(keys, slots)?;
        let mut plan = self.plan_keyed_with(&Sequential, Some(&pairs), slots, grads, table)?;
        self.run_plan(&mut plan, |p, jobs| {
            jobs.into_iter().for_each(|j| update_bucket(p, j))
        });
        Ok(self.finish(plan, table))
    }

    fn grow_rows(&mut self, rows: u64) -> Result<(), GrowError> {
        if self.scalars.index.is_dense() {
            return self.scalars.grow_rows(rows);
        }
        // Frozen scalars are never stored: a dense range grows for free.
        match &mut self.frozen_rows {
            Some(current) if rows < *current => Err(GrowError::Shrink {
                rows,
                current: *current,
            }),
            Some(current) => {
                *current = rows;
                Ok(())
            }
            None => Err(GrowError::NotDense),
        }
    }

    fn memory(&self) -> MemoryReport {
        Basis::memory(self)
    }

    /// Everything, the bucketer's own state included (a d-choice
    /// bucketer's remembered choices and loads, see
    /// [`Bucketer::save_state`]): importing it into an optimizer built alike
    /// continues the run bit for bit.
    fn export_state(&self) -> Vec<u8> {
        let mut w = Writer::default();
        for (_, value) in self.fingerprint() {
            w.u64(value);
        }
        w.u64(self.steps);
        w.u64(self.nonfinite);
        self.bucket_steps.iter().for_each(|&t| w.u32(t));
        match &self.tables {
            Tables::F32 { data, .. } => w.f32s(data),
            Tables::Bf16 { data, .. } => data.iter().for_each(|x| w.u16(x.to_bits())),
        }
        self.scalars.write(&mut w);
        w.section(|out| self.bucketer.save_state(out));
        w.finish(kind::BASIS)
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        let mut r = Reader::open(bytes, kind::BASIS)?;
        // Version 1 recorded too little of the configuration to be read
        // safely (see `fingerprint`).
        if r.version() < BASIS_MIN_VERSION {
            return Err(StateError::UnsupportedVersion { found: r.version() });
        }
        for (field, value) in self.fingerprint() {
            if r.u64()? != value {
                return Err(StateError::ConfigMismatch { field });
            }
        }
        let steps = r.u64()?;
        let nonfinite = r.u64()?;
        let b = self.bucket_steps.len();
        let n = b * self.tables.width(self.config.dim);
        r.ensure(b, 4)?;
        let bucket_steps = (0..b).map(|_| r.u32()).collect::<Result<Vec<u32>, _>>()?;
        let tables = match &self.tables {
            Tables::F32 { with_m, .. } => Tables::F32 {
                data: r.f32s(n)?,
                with_m: *with_m,
            },
            Tables::Bf16 { with_m, .. } => {
                r.ensure(n, 2)?;
                let data = (0..n)
                    .map(|_| {
                        let x = bf16::from_bits(r.u16()?);
                        if x.is_finite() {
                            Ok(x)
                        } else {
                            Err(StateError::Malformed)
                        }
                    })
                    .collect::<Result<Vec<bf16>, StateError>>()?;
                Tables::Bf16 {
                    data,
                    with_m: *with_m,
                }
            }
        };
        let scalars = self.scalars.read(&mut r)?;
        let bucketer_state = if r.version() >= BUCKETER_STATE_VERSION {
            Some(r.section()?)
        } else if self.bucketer.has_state() {
            // Without its remembered choices the bucketer would place rows
            // elsewhere than the exporter's did: refuse, not diverge.
            return Err(StateError::MissingBucketerState);
        } else {
            None
        };
        r.end()?;
        // Last, after every other check: the bucketer changes nothing on error.
        if let Some(bytes) = bucketer_state {
            self.bucketer
                .load_state(bytes)
                .map_err(StateError::Bucketer)?;
        }
        self.steps = steps;
        self.nonfinite = nonfinite;
        self.bucket_steps = bucket_steps;
        self.tables = tables;
        self.scalars = scalars;
        Ok(())
    }

    /// A row's state is its scalar (and update count); its share of the
    /// buckets moves with [`export_buckets`](SparseOptimizer::export_buckets).
    /// Refused for a bucketer with per-key state (d-choice): the row's
    /// remembered bucket would not move with it.
    fn export_rows(&self, slots: &[u64]) -> Result<Vec<u8>, RowStateError> {
        self.check_movable()?;
        self.row_slots().check_slots(slots)?;
        let mut w = Writer::default();
        row_move::write_header(&mut w, &self.row_fingerprint(), self.steps, slots.len());
        slots
            .iter()
            .for_each(|&id| self.scalars.write_row(&mut w, id));
        Ok(w.finish(row_move::rows_tag(kind::BASIS)))
    }

    fn import_rows(&mut self, slots: &[u64], bytes: &[u8]) -> Result<(), RowStateError> {
        self.check_movable()?;
        self.row_slots().check_slots(slots)?;
        let fp = self.row_fingerprint();
        let tag = row_move::rows_tag(kind::BASIS);
        let (r, steps) = row_move::open(bytes, tag, &fp, self.steps, slots.len())?;
        let rows = self.scalars.read_rows(r, slots)?;
        self.scalars.put_rows(rows)?;
        self.steps = steps;
        Ok(())
    }

    /// Frees the row's scalar; the buckets keep what the row contributed
    /// to their moments (they are shared: nothing of them is the row's
    /// alone). A d-choice bucketer also keeps the key's remembered bucket.
    fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        match &mut self.frozen_rows {
            Some(rows) => {
                let last = (Slots::Dense { rows: *rows }).check_remove(slot)?;
                *rows = last;
                Ok(row_move::moved(slot, last))
            }
            None => self.scalars.swap_remove(slot),
        }
    }

    fn bucket_count(&self) -> u32 {
        self.bucket_steps.len() as u32
    }

    fn export_buckets(&self, buckets: &[u32]) -> Result<Vec<u8>, RowStateError> {
        self.check_buckets(buckets)?;
        let w_b = self.tables.width(self.config.dim);
        let mut w = Writer::default();
        row_move::write_header(
            &mut w,
            &self.bucket_fingerprint(),
            self.steps,
            buckets.len(),
        );
        for &b in buckets {
            let b = b as usize;
            w.u32(self.bucket_steps[b]);
            match &self.tables {
                Tables::F32 { data, .. } => w.f32s(&data[b * w_b..(b + 1) * w_b]),
                Tables::Bf16 { data, .. } => data[b * w_b..(b + 1) * w_b]
                    .iter()
                    .for_each(|x| w.u16(x.to_bits())),
            }
        }
        Ok(w.finish(row_move::buckets_tag(kind::BASIS)))
    }

    fn import_buckets(&mut self, buckets: &[u32], bytes: &[u8]) -> Result<(), RowStateError> {
        self.check_buckets(buckets)?;
        let w_b = self.tables.width(self.config.dim);
        let fp = self.bucket_fingerprint();
        let tag = row_move::buckets_tag(kind::BASIS);
        let (mut r, steps) = row_move::open(bytes, tag, &fp, self.steps, buckets.len())?;
        let value = match &self.tables {
            Tables::F32 { .. } => 4,
            Tables::Bf16 { .. } => 2,
        };
        r.ensure(buckets.len(), 4 + w_b * value)?;
        // Read and check every bucket before writing any.
        let mut counts = Vec::with_capacity(buckets.len());
        let mut values: Vec<u32> = Vec::with_capacity(buckets.len() * w_b);
        for _ in buckets {
            counts.push(r.u32()?);
            for _ in 0..w_b {
                values.push(match &self.tables {
                    Tables::F32 { .. } => r.f32()?.to_bits(),
                    Tables::Bf16 { .. } => {
                        let x = bf16::from_bits(r.u16()?);
                        if !x.is_finite() {
                            return Err(StateError::Malformed.into());
                        }
                        u32::from(x.to_bits())
                    }
                });
            }
        }
        r.end()?;
        for (k, &b) in buckets.iter().enumerate() {
            let b = b as usize;
            self.bucket_steps[b] = counts[k];
            let src = &values[k * w_b..(k + 1) * w_b];
            match &mut self.tables {
                Tables::F32 { data, .. } => data[b * w_b..(b + 1) * w_b]
                    .iter_mut()
                    .zip(src)
                    .for_each(|(x, &bits)| *x = f32::from_bits(bits)),
                // Read from 16 bits: the cast is exact.
                Tables::Bf16 { data, .. } => data[b * w_b..(b + 1) * w_b]
                    .iter_mut()
                    .zip(src)
                    .for_each(|(x, &bits)| *x = bf16::from_bits(bits as u16)),
            }
        }
        self.steps = steps;
        Ok(())
    }
}
