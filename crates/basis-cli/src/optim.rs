//! Building `basis-core` optimizers from an [`OptSpec`] and reading their telemetry.

use crate::spec::{Kind, Mode, OptSpec, Storage};
use balanced_hash::{DChoice, LoadStats, OneChoice};
use basis_core::{
    AdagradConfig, Adam8bit, AdamConfig, Basis, BasisConfig, ConfigError, DenseTable, Diagnostics,
    ExactAdam, Ftrl, FtrlConfig, MemoryReport, PartialRowwiseAdam, Profile, RowIndex,
    RowStateError, RowStepAdam, RowwiseAdagrad, ScalarRule, ScalarStorage, Sgd, SparseOptimizer,
    StateError, StepReport,
};
use basis_shard::{OwnerRule, PartitionedBuckets};
use serde::Serialize;

/// A built optimizer (concrete types, so BASIS telemetry stays readable).
#[derive(Debug)]
pub(crate) enum Optimizer {
    /// Exact per-row Adam.
    Adam(ExactAdam),
    /// Row-wise AdaGrad.
    Adagrad(RowwiseAdagrad),
    /// SGD.
    Sgd(Sgd),
    /// FBGEMM's partial row-wise Adam.
    PartialRowwiseAdam(PartialRowwiseAdam),
    /// Adam with per-row bias correction.
    RowStepAdam(RowStepAdam),
    /// FTRL-Proximal.
    Ftrl(Ftrl),
    /// Adam with 8-bit block-wise moments.
    Adam8bit(Box<Adam8bit>),
    /// BASIS with one-choice hashing.
    Basis1(Box<Basis<OneChoice>>),
    /// BASIS on one rank's part of the single process's one-choice buckets
    /// (a row-sharded run under `OwnerRule::buckets`).
    BasisPart(Box<Basis<PartitionedBuckets>>),
    /// BASIS with d-choice hashing (its exported state carries the
    /// bucketer's remembered choices).
    BasisD(Box<Basis<DChoice>>),
}

/// BASIS training telemetry (what the source document says to watch).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Telemetry {
    /// Histogram of row scalars (`RowScaled`: of `log₂ G_i`).
    pub(crate) scalar_histogram: Vec<u64>,
    /// Bin edges of the histogram.
    pub(crate) histogram_edges: Vec<f32>,
    /// Fraction of rows at the lower clip bound.
    pub(crate) fraction_at_min: f64,
    /// Fraction of rows at the upper clip bound.
    pub(crate) fraction_at_max: f64,
    /// Mean row scalar.
    pub(crate) scalar_mean: f64,
    /// Buckets.
    pub(crate) buckets: usize,
    /// Most distinct rows in one bucket.
    pub(crate) bucket_load_max: u64,
    /// Mean distinct rows per bucket.
    pub(crate) bucket_load_mean: f64,
    /// Buckets with no row.
    pub(crate) empty_buckets: u64,
    /// Rows skipped as non-finite.
    pub(crate) nonfinite_rows: u64,
}

impl Telemetry {
    fn from_diagnostics(d: &Diagnostics) -> Self {
        let loads: Vec<u64> = d.bucket_loads.iter().map(|&l| u64::from(l)).collect();
        let stats = LoadStats::from_loads(&loads).ok();
        Self {
            scalar_histogram: d.scalar_histogram.to_vec(),
            histogram_edges: d.histogram_edges.to_vec(),
            fraction_at_min: d.fraction_at_min,
            fraction_at_max: d.fraction_at_max,
            scalar_mean: d.scalar_mean,
            buckets: loads.len(),
            bucket_load_max: stats.as_ref().map_or(0, |s| s.max),
            bucket_load_mean: stats.as_ref().map_or(0.0, |s| s.mean),
            empty_buckets: stats.as_ref().map_or(0, |s| s.empty_buckets),
            nonfinite_rows: d.nonfinite_rows,
        }
    }
}

/// The `RowScaled` profile of `spec` (its keys over the CLI defaults).
fn profile_of(spec: &OptSpec) -> Profile {
    let power = spec.profile.unwrap_or(crate::spec::DEFAULT_PROFILE);
    // A flat profile (power 0) has no groups: the CLI's default lead does
    // not apply (basis-core refuses a lead there).
    let lead = if power == 0.0 {
        0
    } else {
        crate::spec::DEFAULT_LEAD
    };
    Profile::DEFAULT
        .with_power(power)
        .with_lead(spec.lead.unwrap_or(lead))
        .with_eps_inside(spec.eps_inside)
}

/// Build the optimizer of `spec` for a table of `rows` rows of `dim` values.
///
/// Fails with a message when the configuration is rejected by `basis-core`
/// or the bucketer cannot be built.
pub(crate) fn build(
    spec: &OptSpec,
    rows: usize,
    dim: usize,
    seed: u64,
) -> Result<Optimizer, String> {
    build_indexed(spec, rows, RowIndex::Dense { rows: rows as u64 }, dim, seed)
}

/// The message of a rejected configuration; state sized by the table names
/// the option that sized it (`dim` is the row dimension k + 1).
fn config_err(spec: &OptSpec, rows: usize, dim: usize) -> impl Fn(ConfigError) -> String + '_ {
    move |e| match e {
        ConfigError::AllocationFailed { bytes } => format!(
            "--dim {}: optimizer `{}` needs {bytes} bytes of state for {rows} rows, more than can be allocated",
            dim.saturating_sub(1),
            spec.label
        ),
        other => format!("{}: {other}", spec.label),
    }
}

/// Whether `spec` is BASIS over one-choice buckets, whose bucket table a
/// row-sharded run splits over the ranks (`basis_shard::OwnerRule::buckets`).
fn splits_buckets(spec: &OptSpec) -> bool {
    matches!(spec.kind, Kind::Basis | Kind::Countsketch) && spec.choices <= 1
}

/// The one-choice bucketer BASIS `spec` uses for a table of `rows` rows
/// under `seed` (the single process's; a sharded run partitions it).
fn one_choice(spec: &OptSpec, rows: usize, seed: u64) -> Result<OneChoice, String> {
    OneChoice::new(spec.buckets_for(rows), hash_seed(seed))
        .map_err(|e| format!("{}: {e}", spec.label))
}

/// The bucket hash seed of a run seeded `seed`.
fn hash_seed(seed: u64) -> u64 {
    0xB0C4_E75E ^ seed
}

/// The owner rule of a `p`-rank row-sharded run of `spec` on a `rows`-row
/// table: one-choice BASIS partitions the single process's buckets (a row
/// goes to the rank of its bucket); any other optimizer (per-row state, or
/// d-choice buckets that cannot be split) spreads ids by a hash.
pub(crate) fn owner_rule(
    spec: &OptSpec,
    rows: usize,
    p: usize,
    seed: u64,
) -> Result<OwnerRule, String> {
    let rule = if splits_buckets(spec) {
        OwnerRule::buckets(one_choice(spec, rows, seed)?, p)
    } else {
        OwnerRule::hashed(p, seed)
    };
    rule.map_err(|e| e.to_string())
}

/// The sparse optimizer of rank `rank` of a row-sharded run of a `rows`-row
/// table under `owner` (a growing shard store, stepped keyed by global ids).
/// Under a bucket-partitioning rule, BASIS gets this rank's part of the
/// single process's buckets; every other optimizer (and BASIS under any
/// other rule) its own state, BASIS buckets sized for `rows/p` rows.
pub(crate) fn build_shard(
    spec: &OptSpec,
    rows: usize,
    (rank, owner): (usize, &OwnerRule),
    dim: usize,
    seed: u64,
) -> Result<Optimizer, String> {
    let index = RowIndex::Dense { rows: 0 };
    match owner.partition(rank).map_err(|e| e.to_string())? {
        Some(h) if splits_buckets(spec) => {
            let config = basis_config(spec, index, dim, seed);
            Ok(Optimizer::BasisPart(Box::new(
                Basis::new(config, h).map_err(config_err(spec, rows, dim))?,
            )))
        }
        _ => build_indexed(spec, rows.div_ceil(owner.ranks()), index, dim, seed),
    }
}

/// The `basis-core` configuration of BASIS `spec`.
pub(crate) fn basis_config(
    spec: &OptSpec,
    row_index: RowIndex,
    dim: usize,
    seed: u64,
) -> BasisConfig {
    // basis-core's measured defaults of the mode; the spec's keys over them.
    let defaults = spec.core_defaults();
    defaults
        .with_dim(dim)
        .with_lr(spec.lr())
        .with_direction(spec.mode.direction())
        .with_scalar_rule(if spec.hypergradient {
            ScalarRule::Hypergradient
        } else {
            ScalarRule::Normalized
        })
        .with_scalar_lr(spec.scalar_lr.unwrap_or(defaults.scalar_lr))
        .with_scalar_storage(match spec.storage() {
            Storage::F32 => ScalarStorage::F32,
            Storage::Bf16 => ScalarStorage::Bf16,
            Storage::U8 => ScalarStorage::LogU8,
        })
        // Only RowScaled reads these (basis-core refuses them elsewhere).
        .with_row_scale(if spec.mode == Mode::RowScaled {
            defaults
                .row_scale
                .with_accumulate(spec.accumulate_over(defaults.row_scale.accumulate))
                .with_counter(spec.counter_over(defaults.row_scale.counter))
                .with_profile(profile_of(spec))
        } else {
            defaults.row_scale
        })
        .with_row_index(row_index)
        .with_seed(defaults.seed ^ seed)
}

/// [`build`] with an explicit row index (`Dense { rows: 0 }` for a table
/// that grows, such as a shard store; `rows` then only sizes the buckets).
pub(crate) fn build_indexed(
    spec: &OptSpec,
    rows: usize,
    row_index: RowIndex,
    dim: usize,
    seed: u64,
) -> Result<Optimizer, String> {
    let err = |e: &dyn core::fmt::Display| format!("{}: {e}", spec.label);
    let config_err = config_err(spec, rows, dim);
    let lr = spec.lr();
    Ok(match spec.kind {
        Kind::Adam => Optimizer::Adam(
            ExactAdam::new(
                AdamConfig::default()
                    .with_dim(dim)
                    .with_lr(lr)
                    .with_beta1(spec.beta1.unwrap_or(AdamConfig::default().beta1))
                    .with_row_index(row_index),
            )
            .map_err(config_err)?,
        ),
        Kind::RowwiseAdagrad => Optimizer::Adagrad(
            RowwiseAdagrad::new(
                AdagradConfig::default()
                    .with_dim(dim)
                    .with_lr(lr)
                    .with_row_index(row_index),
            )
            .map_err(config_err)?,
        ),
        Kind::Sgd => Optimizer::Sgd(Sgd::new(dim, lr).map_err(config_err)?),
        Kind::PartialRowwiseAdam | Kind::RowStepAdam | Kind::Adam8bit | Kind::Ftrl => {
            baseline(spec, row_index, dim).map_err(config_err)?
        }
        Kind::Basis | Kind::Countsketch => {
            let config = basis_config(spec, row_index, dim, seed);
            if spec.choices <= 1 {
                let h = one_choice(spec, rows, seed)?;
                Optimizer::Basis1(Box::new(Basis::new(config, h).map_err(config_err)?))
            } else {
                // A growable (`Dense { rows: 0 }`, a shard store, stepping
                // keyed by global ids) or sparse index sees ids from the
                // whole id space: remember their choices sparsely.
                let dense_keys = match row_index {
                    RowIndex::Dense { rows: n } if n > 0 => Some(rows as u64),
                    _ => None,
                };
                let (b, hash_seed) = (spec.buckets_for(rows), hash_seed(seed));
                let h = d_choice(dense_keys, b, spec.choices, hash_seed).map_err(|e| err(&e))?;
                Optimizer::BasisD(Box::new(Basis::new(config, h).map_err(config_err)?))
            }
        }
    })
}

/// The baseline optimizer of `spec` (one of the per-row-state kinds): the
/// core defaults with the spec's rate and keys.
fn baseline(spec: &OptSpec, row_index: RowIndex, dim: usize) -> Result<Optimizer, ConfigError> {
    let adam = AdamConfig::default()
        .with_dim(dim)
        .with_lr(spec.lr())
        .with_beta1(spec.beta1.unwrap_or(AdamConfig::default().beta1))
        .with_row_index(row_index);
    Ok(match spec.kind {
        Kind::PartialRowwiseAdam => Optimizer::PartialRowwiseAdam(PartialRowwiseAdam::new(adam)?),
        Kind::RowStepAdam => Optimizer::RowStepAdam(RowStepAdam::new(adam)?),
        Kind::Adam8bit => Optimizer::Adam8bit(Box::new(Adam8bit::new(
            adam,
            spec.block.unwrap_or(basis_core::DEFAULT_BLOCK),
        )?)),
        _ => {
            let d = FtrlConfig::default();
            Optimizer::Ftrl(Ftrl::new(
                d.with_dim(dim)
                    .with_alpha(spec.lr())
                    .with_beta(spec.ftrl_beta.unwrap_or(d.beta))
                    .with_l1(spec.l1.unwrap_or(d.l1))
                    .with_l2(spec.l2.unwrap_or(d.l2))
                    .with_row_index(row_index),
            )?)
        }
    })
}

/// A d-choice bucketer remembering keys `0..rows` densely, or any key
/// sparsely (`None`).
fn d_choice(
    rows: Option<u64>,
    buckets: u32,
    d: u8,
    seed: u64,
) -> Result<DChoice, balanced_hash::HashError> {
    match rows {
        Some(rows) => DChoice::dense(rows, buckets, d, seed),
        None => DChoice::sparse(buckets, d, seed),
    }
}

impl Optimizer {
    fn inner(&mut self) -> &mut dyn SparseOptimizer {
        match self {
            Self::Adam(o) => o,
            Self::Adagrad(o) => o,
            Self::Sgd(o) => o,
            Self::PartialRowwiseAdam(o) => o,
            Self::RowStepAdam(o) => o,
            Self::Ftrl(o) => o,
            Self::Adam8bit(o) => o.as_mut(),
            Self::Basis1(o) => o.as_mut(),
            Self::BasisPart(o) => o.as_mut(),
            Self::BasisD(opt) => opt.as_mut(),
        }
    }

    fn inner_ref(&self) -> &dyn SparseOptimizer {
        match self {
            Self::Adam(o) => o,
            Self::Adagrad(o) => o,
            Self::Sgd(o) => o,
            Self::PartialRowwiseAdam(o) => o,
            Self::RowStepAdam(o) => o,
            Self::Ftrl(o) => o,
            Self::Adam8bit(o) => o.as_ref(),
            Self::Basis1(o) => o.as_ref(),
            Self::BasisPart(o) => o.as_ref(),
            Self::BasisD(opt) => opt.as_ref(),
        }
    }

    /// One step on the dense `table` (`dim` values per row).
    pub(crate) fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut [f32],
        dim: usize,
    ) -> Result<StepReport, String> {
        // BASIS and exact Adam on a pool of several threads (`--threads`):
        // `basis-rayon`'s steps, the same bits as the serial ones (its
        // tests) in less time.
        if rayon::current_num_threads() > 1 {
            let par = match self {
                Self::Adam(a) => Some(basis_rayon::par_exact_adam_step_dense(a, ids, grads, table)),
                Self::Basis1(b) => Some(basis_rayon::par_step_dense(b.as_mut(), ids, grads, table)),
                Self::BasisD(b) => Some(basis_rayon::par_step_dense(b.as_mut(), ids, grads, table)),
                _ => None,
            };
            if let Some(report) = par {
                return report.map_err(|e| e.to_string());
            }
        }
        let mut t = DenseTable::new(table, dim).map_err(|e| e.to_string())?;
        self.inner()
            .step(ids, grads, &mut t)
            .map_err(|e| e.to_string())
    }

    /// Exact bytes of optimizer state.
    pub(crate) fn memory(&self) -> MemoryReport {
        self.inner_ref().memory()
    }

    /// State as bytes (for checkpoints): the core blob, which carries a
    /// d-choice bucketer's remembered choices itself (format v3).
    pub(crate) fn export_state(&self) -> Vec<u8> {
        self.inner_ref().export_state()
    }

    /// Restore exported state (a d-choice bucketer's choices included).
    pub(crate) fn import_state(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.inner()
            .import_state(bytes)
            .map_err(|e: StateError| e.to_string())
    }

    /// BASIS telemetry (`None` for the baselines).
    pub(crate) fn telemetry(&self) -> Option<Telemetry> {
        match self {
            Self::Basis1(b) => Some(Telemetry::from_diagnostics(&b.diagnostics())),
            Self::BasisPart(b) => Some(Telemetry::from_diagnostics(&b.diagnostics())),
            Self::BasisD(opt) => Some(Telemetry::from_diagnostics(&opt.diagnostics())),
            _ => None,
        }
    }
}

/// The table of a row-sharded run (`basis_shard::ShardedTable`) steps any
/// `SparseOptimizer`.
impl SparseOptimizer for Optimizer {
    fn dim(&self) -> usize {
        self.inner_ref().dim()
    }

    fn step(
        &mut self,
        ids: &[u64],
        grads: &[f32],
        table: &mut dyn basis_core::RowAccess,
    ) -> Result<StepReport, basis_core::StepError> {
        self.inner().step(ids, grads, table)
    }

    fn step_keyed(
        &mut self,
        keys: &[u64],
        slots: &[u64],
        grads: &[f32],
        table: &mut dyn basis_core::RowAccess,
    ) -> Result<StepReport, basis_core::StepError> {
        self.inner().step_keyed(keys, slots, grads, table)
    }

    fn grow_rows(&mut self, rows: u64) -> Result<(), basis_core::GrowError> {
        self.inner().grow_rows(rows)
    }

    fn memory(&self) -> MemoryReport {
        self.inner_ref().memory()
    }

    fn export_state(&self) -> Vec<u8> {
        self.inner_ref().export_state()
    }

    fn import_state(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        self.inner().import_state(bytes)
    }

    // The row-state calls: without them eviction and resharding of a
    // sharded table over the CLI's optimizers would fail `Unsupported`.

    fn export_rows(&self, slots: &[u64]) -> Result<Vec<u8>, RowStateError> {
        self.inner_ref().export_rows(slots)
    }

    fn import_rows(&mut self, slots: &[u64], bytes: &[u8]) -> Result<(), RowStateError> {
        self.inner().import_rows(slots, bytes)
    }

    fn swap_remove_row(&mut self, slot: u64) -> Result<Option<u64>, RowStateError> {
        self.inner().swap_remove_row(slot)
    }

    fn bucket_count(&self) -> u32 {
        self.inner_ref().bucket_count()
    }

    fn export_buckets(&self, buckets: &[u32]) -> Result<Vec<u8>, RowStateError> {
        self.inner_ref().export_buckets(buckets)
    }

    fn import_buckets(&mut self, buckets: &[u32], bytes: &[u8]) -> Result<(), RowStateError> {
        self.inner().import_buckets(buckets, bytes)
    }
}

#[cfg(test)]
mod tests {
    /// The CLI's `basis` with no keys is basis-core's default configuration,
    /// with only what the CLI sets itself: the dimension, the FM row's
    /// `lead` 1 (through the documented builder call), the row index and
    /// the run's seed.
    #[test]
    fn plain_basis_spec_is_the_core_default() {
        let spec: OptSpec = "basis".parse().unwrap();
        let (dim, rows, seed) = (17, 5000u64, 3);
        let cli = basis_config(&spec, RowIndex::Dense { rows }, dim, seed);
        let core = BasisConfig::row_scaled(dim)
            .lead(crate::spec::DEFAULT_LEAD)
            .row_index(RowIndex::Dense { rows })
            .seed(BasisConfig::default().seed ^ seed)
            .build()
            .unwrap();
        assert_eq!(cli, core);
        // B is basis-core's automatic choice from the row count, at sizes
        // where ⌈N/1000⌉ differs from ⌊N/1000⌋ and at the 1-bucket floor
        // (MovieLens' 5 756 rows get 6 buckets).
        for n in [0u64, 1, 999, 1000, 1001, 5756, rows, 10_000_000] {
            assert_eq!(
                spec.buckets_for(n as usize),
                core.buckets_for(n),
                "{n} rows"
            );
        }
        assert_eq!(spec.buckets_for(5756), 6);
        // The learned-scalar modes take their mode's core defaults too.
        let own: OptSpec = "basis:mode=own".parse().unwrap();
        let cli = basis_config(&own, RowIndex::Dense { rows }, dim, seed);
        let core = BasisConfig::own_gradient(dim)
            .row_index(RowIndex::Dense { rows })
            .seed(BasisConfig::default().seed ^ seed)
            .build()
            .unwrap();
        assert_eq!(cli, core);
        assert_eq!(own.buckets_for(rows as usize), core.buckets_for(rows));
    }

    /// `profile=0` alone builds (no groups, so the CLI's default lead 1 is
    /// not applied: basis-core refuses a lead without a profile).
    #[test]
    fn flat_profile_spec_builds() {
        let spec: OptSpec = "basis:profile=0".parse().unwrap();
        let c = basis_config(&spec, RowIndex::Dense { rows: 5000 }, 17, 3);
        assert_eq!(
            (c.row_scale.profile.power, c.row_scale.profile.lead),
            (0.0, 0)
        );
        assert_eq!(c.validate(), Ok(()));
    }

    use super::*;

    /// Steps `opt` with a deterministic batch touching a rotating set of rows.
    fn steps(opt: &mut Optimizer, table: &mut [f32], from: u64, n: u64) {
        for s in from..from + n {
            // Distinct ids in a scrambled order, new rows appearing every step.
            let mut ids: Vec<u64> = (0..20).map(|i| (s * 7 + i * 13) % 200).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.reverse();
            ids.rotate_left((s % 5) as usize);
            let grads: Vec<f32> = ids
                .iter()
                .flat_map(|&i| [(i as f32).sin(), 0.5, -0.25])
                .collect();
            opt.step(&ids, &grads, table, 3).unwrap();
        }
    }

    #[test]
    fn export_import_continues_bit_for_bit_for_every_family() {
        for text in [
            "adam",
            "rowwise-adagrad",
            "sgd",
            "basis",
            "basis:mode=shared,choices=2,ratio=10",
            "basis:choices=2,ratio=10",
            "basis:choices=3,storage=bf16,ratio=20",
            "countsketch",
            "pra",
            "rowstep-adam",
            "ftrl:beta=0.5,l1=0.001,l2=0.01",
            "adam8bit:block=2",
        ] {
            let spec: OptSpec = text.parse().unwrap();
            let mut a = build(&spec, 200, 3, 9).unwrap();
            let mut ta = vec![0.1f32; 600];
            steps(&mut a, &mut ta, 0, 5);
            let blob = a.export_state();
            let mut b = build(&spec, 200, 3, 9).unwrap();
            b.import_state(&blob).unwrap();
            let mut tb = ta.clone();
            steps(&mut a, &mut ta, 5, 5);
            steps(&mut b, &mut tb, 5, 5);
            assert_eq!(ta, tb, "{text}");
            let mut cut = blob.clone();
            cut.pop();
            assert!(b.import_state(&cut).is_err() || text == "sgd", "{text}");
        }
    }

    /// `beta1` reaches every Adam-family optimizer: the default equals an
    /// explicit 0.9 bit for bit, and 0 (no momentum) moves the table elsewhere.
    #[test]
    fn beta1_key_sets_the_adam_family_momentum() {
        for name in ["adam", "pra", "rowstep-adam", "adam8bit"] {
            let run = |text: &str| {
                let spec: OptSpec = text.parse().unwrap();
                let mut o = build(&spec, 200, 3, 9).unwrap();
                let mut t = vec![0.1f32; 600];
                // Gradients that change sign between steps: with constant
                // ones a per-row bias correction makes m̂ = g whatever β1.
                for s in 0..6u64 {
                    let ids: Vec<u64> = (0..20).map(|i| (s * 7 + i * 13) % 200).collect();
                    let grads: Vec<f32> = ids
                        .iter()
                        .flat_map(|&i| [((i + s * s) as f32).sin(), 0.5, -0.25])
                        .collect();
                    o.step(&ids, &grads, &mut t, 3).unwrap();
                }
                t
            };
            let plain = run(name);
            assert_eq!(plain, run(&format!("{name}:beta1=0.9")), "{name}");
            assert_ne!(plain, run(&format!("{name}:beta1=0")), "{name}");
        }
    }
}

/// The row-state calls reach the optimizer through the enum (a table that
/// evicts or reshards needs them).
#[cfg(test)]
mod row_state_tests {
    use super::*;

    /// Steps `opt` over a dense table of `rows` slots, keyed by global ids
    /// `slot * 1000 + 3` (as a shard store steps).
    fn keyed_steps(opt: &mut Optimizer, table: &mut [f32], rows: u64, from: u64, n: u64) {
        for s in from..from + n {
            let slots: Vec<u64> = (0..rows).filter(|i| (i + s) % 3 != 0).collect();
            let keys: Vec<u64> = slots.iter().map(|i| i * 1000 + 3).collect();
            let grads: Vec<f32> = slots
                .iter()
                .flat_map(|&i| [(i as f32 + s as f32).sin(), 0.5, -0.25])
                .collect();
            let mut t = DenseTable::new(table, 3).unwrap();
            opt.step_keyed(&keys, &slots, &grads, &mut t).unwrap();
        }
    }

    #[test]
    fn rows_and_buckets_move_through_the_enum_and_continue_bit_for_bit() {
        let rows = 12u64;
        for text in ["adam", "rowwise-adagrad", "basis", "rowstep-adam"] {
            let spec: OptSpec = text.parse().unwrap();
            let owner = owner_rule(&spec, 64, 2, 5).unwrap();
            let build = || {
                let mut o = build_shard(&spec, 64, (1, &owner), 3, 5).unwrap();
                o.grow_rows(rows).unwrap();
                o
            };
            let mut a = build();
            let mut ta = vec![0.1f32; rows as usize * 3];
            keyed_steps(&mut a, &mut ta, rows, 0, 4);
            // Move every row (in reverse slot order) and every bucket into
            // a fresh optimizer.
            let from: Vec<u64> = (0..rows).rev().collect();
            let to: Vec<u64> = (0..rows).collect();
            let blob = a.export_rows(&from).unwrap();
            let mut b = build();
            b.import_rows(&to, &blob).unwrap();
            assert_eq!(a.bucket_count(), b.bucket_count(), "{text}");
            assert_eq!(a.bucket_count() > 0, text == "basis", "{text}");
            if a.bucket_count() > 0 {
                let all: Vec<u32> = (0..a.bucket_count()).collect();
                let buckets = a.export_buckets(&all).unwrap();
                b.import_buckets(&all, &buckets).unwrap();
            }
            let mut tb: Vec<f32> = ta.chunks(3).rev().flatten().copied().collect();
            // `b` holds `a`'s slot `rows-1-i` at slot `i`: step it with
            // the same keys at the mirrored slots.
            for s in 4..7 {
                keyed_steps(&mut a, &mut ta, rows, s, 1);
                let slots: Vec<u64> = (0..rows).filter(|i| (i + s) % 3 != 0).collect();
                let keys: Vec<u64> = slots.iter().map(|i| i * 1000 + 3).collect();
                let mirrored: Vec<u64> = slots.iter().map(|i| rows - 1 - i).collect();
                let grads: Vec<f32> = slots
                    .iter()
                    .flat_map(|&i| [(i as f32 + s as f32).sin(), 0.5, -0.25])
                    .collect();
                let mut t = DenseTable::new(&mut tb, 3).unwrap();
                b.step_keyed(&keys, &mirrored, &grads, &mut t).unwrap();
            }
            let back: Vec<f32> = tb.chunks(3).rev().flatten().copied().collect();
            assert_eq!(ta, back, "{text}");
            // Eviction: the last slot's state moves into the freed slot.
            assert_eq!(b.swap_remove_row(2).unwrap(), Some(rows - 1), "{text}");
            assert_eq!(b.swap_remove_row(rows - 2).unwrap(), None, "{text}");
        }
    }
}
