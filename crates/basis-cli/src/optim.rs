//! Building `basis-core` optimizers from an [`OptSpec`] and reading their telemetry.

use crate::partition::Partitioned;
use crate::spec::{Kind, Mode, OptSpec, Storage};
use balanced_hash::{Bucketer, DChoice, LoadStats, OneChoice};
use basis_core::{
    Accumulate, AdagradConfig, AdamConfig, Basis, BasisConfig, ConfigError, DenseTable,
    Diagnostics, ExactAdam, MemoryReport, Profile, RowIndex, RowwiseAdagrad, ScalarRule,
    ScalarStorage, Sgd, SparseOptimizer, StateError, StepReport,
};
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
    /// BASIS with one-choice hashing.
    Basis1(Box<Basis<OneChoice>>),
    /// BASIS on one rank's part of the single process's one-choice buckets
    /// (a row-sharded run, `crate::partition`).
    BasisPart(Box<Basis<Partitioned>>),
    /// BASIS with d-choice hashing, and what rebuilding its bucketer needs.
    BasisD {
        /// The optimizer.
        opt: Box<Basis<DChoice>>,
        /// Keys `0..rows` remembered densely, or `None`: sparsely.
        rows: Option<u64>,
        /// Hash choices.
        d: u8,
        /// Hash seed.
        seed: u64,
    },
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
    Profile::DEFAULT
        .with_power(spec.profile.unwrap_or(crate::spec::DEFAULT_PROFILE))
        .with_lead(spec.lead.unwrap_or(crate::spec::DEFAULT_LEAD))
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
/// row-sharded run splits over the ranks (`crate::partition`).
pub(crate) fn splits_buckets(spec: &OptSpec) -> bool {
    matches!(spec.kind, Kind::Basis | Kind::Countsketch) && spec.choices <= 1
}

/// The one-choice bucketer BASIS `spec` uses for a table of `rows` rows
/// under `seed` (the single process's; a sharded run partitions it).
pub(crate) fn one_choice(spec: &OptSpec, rows: usize, seed: u64) -> Result<OneChoice, String> {
    OneChoice::new(spec.buckets_for(rows), hash_seed(seed))
        .map_err(|e| format!("{}: {e}", spec.label))
}

/// The bucket hash seed of a run seeded `seed`.
fn hash_seed(seed: u64) -> u64 {
    0xB0C4_E75E ^ seed
}

/// The sparse optimizer of rank `rank` of a `p`-rank row-sharded run of a
/// `rows`-row table (a growing shard store, stepped keyed by global ids).
/// One-choice BASIS gets its part of the single process's buckets; every
/// other optimizer its own state, BASIS buckets sized for `rows/p` rows.
pub(crate) fn build_shard(
    spec: &OptSpec,
    rows: usize,
    (rank, p): (usize, usize),
    dim: usize,
    seed: u64,
) -> Result<Optimizer, String> {
    let index = RowIndex::Dense { rows: 0 };
    if !splits_buckets(spec) {
        return build_indexed(spec, rows.div_ceil(p), index, dim, seed);
    }
    let h = Partitioned::new(one_choice(spec, rows, seed)?, p, rank)?;
    let config = basis_config(spec, index, dim, seed);
    Ok(Optimizer::BasisPart(Box::new(
        Basis::new(config, h).map_err(config_err(spec, rows, dim))?,
    )))
}

/// The `basis-core` configuration of BASIS `spec`.
fn basis_config(spec: &OptSpec, row_index: RowIndex, dim: usize, seed: u64) -> BasisConfig {
    // basis-core's measured defaults of the mode; the spec's keys over them.
    let defaults = spec.mode.core_defaults();
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
                .with_accumulate(
                    spec.ema
                        .map_or(Accumulate::Sum, |beta| Accumulate::Ema { beta }),
                )
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
                Optimizer::BasisD {
                    opt: Box::new(Basis::new(config, h).map_err(config_err)?),
                    rows: dense_keys,
                    d: spec.choices,
                    seed: hash_seed,
                }
            }
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
            Self::Basis1(o) => o.as_mut(),
            Self::BasisPart(o) => o.as_mut(),
            Self::BasisD { opt, .. } => opt.as_mut(),
        }
    }

    fn inner_ref(&self) -> &dyn SparseOptimizer {
        match self {
            Self::Adam(o) => o,
            Self::Adagrad(o) => o,
            Self::Sgd(o) => o,
            Self::Basis1(o) => o.as_ref(),
            Self::BasisPart(o) => o.as_ref(),
            Self::BasisD { opt, .. } => opt.as_ref(),
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
        let mut t = DenseTable::new(table, dim).map_err(|e| e.to_string())?;
        self.inner()
            .step(ids, grads, &mut t)
            .map_err(|e| e.to_string())
    }

    /// One keyed step on any [`RowAccess`](basis_core::RowAccess) table:
    /// rows hashed by `keys` (global ids), stored at `slots` (see
    /// `SparseOptimizer::step_keyed`).
    pub(crate) fn step_rows_keyed(
        &mut self,
        keys: &[u64],
        slots: &[u64],
        grads: &[f32],
        table: &mut dyn basis_core::RowAccess,
    ) -> Result<StepReport, String> {
        self.inner()
            .step_keyed(keys, slots, grads, table)
            .map_err(|e| e.to_string())
    }

    /// Grow a dense row range to `rows` (see `SparseOptimizer::grow_rows`).
    pub(crate) fn grow_rows(&mut self, rows: u64) -> Result<(), String> {
        self.inner().grow_rows(rows).map_err(|e| e.to_string())
    }

    /// Exact bytes of optimizer state.
    pub(crate) fn memory(&self) -> MemoryReport {
        self.inner_ref().memory()
    }

    /// State as bytes (for checkpoints). `basis-core` leaves a d-choice
    /// bucketer's remembered choices to the caller, so they follow the core
    /// blob: `u64` count, then `(u64 key, u8 choice)` pairs.
    pub(crate) fn export_state(&self) -> Vec<u8> {
        let core = self.inner_ref().export_state();
        let Self::BasisD { opt, .. } = self else {
            return core;
        };
        let mut out = Vec::with_capacity(core.len() + 16);
        out.extend_from_slice(&(core.len() as u64).to_le_bytes());
        out.extend_from_slice(&core);
        let choices: Vec<(u64, u8)> = opt.bucketer().remembered().collect();
        out.extend_from_slice(&(choices.len() as u64).to_le_bytes());
        for (k, c) in choices {
            out.extend_from_slice(&k.to_le_bytes());
            out.push(c);
        }
        out
    }

    /// Restore exported state (a d-choice bucketer is rebuilt from its choices).
    pub(crate) fn import_state(&mut self, bytes: &[u8]) -> Result<(), String> {
        let Self::BasisD { opt, rows, d, seed } = self else {
            return self
                .inner()
                .import_state(bytes)
                .map_err(|e: StateError| e.to_string());
        };
        let bad = || "d-choice bucket map truncated or corrupted".to_string();
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let core_len = u64_at(0)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(bad)?;
        let core = bytes
            .get(8..8usize.checked_add(core_len).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        let mut at = 8 + core_len;
        let n = u64_at(at).ok_or_else(bad)?;
        at += 8;
        let mut h =
            d_choice(*rows, opt.bucketer().buckets(), *d, *seed).map_err(|e| e.to_string())?;
        for _ in 0..n {
            let key = u64_at(at).ok_or_else(bad)?;
            let choice = *bytes.get(at + 8).ok_or_else(bad)?;
            h.restore(key, choice, 1).map_err(|e| e.to_string())?;
            at += 9;
        }
        if at != bytes.len() {
            return Err(bad());
        }
        let mut fresh = Basis::new(*opt.config(), h).map_err(|e| e.to_string())?;
        fresh.import_state(core).map_err(|e| e.to_string())?;
        **opt = fresh;
        Ok(())
    }

    /// BASIS telemetry (`None` for the baselines).
    pub(crate) fn telemetry(&self) -> Option<Telemetry> {
        match self {
            Self::Basis1(b) => Some(Telemetry::from_diagnostics(&b.diagnostics())),
            Self::BasisPart(b) => Some(Telemetry::from_diagnostics(&b.diagnostics())),
            Self::BasisD { opt, .. } => Some(Telemetry::from_diagnostics(&opt.diagnostics())),
            _ => None,
        }
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
        assert_eq!(spec.buckets_for(rows as usize), core.buckets_for(rows));
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
}
